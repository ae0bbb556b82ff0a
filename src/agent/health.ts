// The node agent's /healthz, /readyz and /metrics (--health-addr). Liveness is
// "the event loop answers" (a wedged agent is restarted by the kubelet or
// systemd); readiness is "a pod ADD sent now would work": the CNI socket is
// ours and served, and with --config the datastore was initialised and answers
// a read now. With --bgp on BIRD's state is a line of its own that never
// fails readiness (see the comment at the check).
import { lstatSync } from 'node:fs';
import type { Datastore } from '../datastore/types.js';
import { startHealthServer, type CheckResult, type HealthServer } from '../observe/health.js';
import type { Registry } from '../observe/metrics.js';
import type { BirdStatus } from './bgp/supervisor.js';
import type { PartHealth } from './part.js';

export { DEFAULT_HEALTH_ADDR } from '../observe/health.js';

interface AgentHealthOptions {
  addr: string;
  registry: Registry;
  /** /readyz: the agent's parts' health lines (AgentParts.health). */
  ready: () => Promise<CheckResult>;
}

/** How often readiness is evaluated for the netplugin_agent_ready gauge when no probe asked meanwhile. */
const READY_GAUGE_PERIOD_MS = 10_000;

export async function startAgentHealth(o: AgentHealthOptions): Promise<HealthServer> {
  const started = Date.now();
  // /readyz's answer as a gauge, for Prometheus on --metrics-addr (where no probe path is served): the
  // probes' evaluations set it; without probes (systemd) it is evaluated every period on its own.
  const ready = o.registry.gauge(
    'netplugin_agent_ready',
    "1 while the agent's /readyz passes (socket served, datastore reachable), else 0.",
  );
  let lastEvaluated = 0;
  let lastOk = false;
  const readyz = async (): Promise<CheckResult> => {
    lastEvaluated = Date.now();
    const r = await o.ready();
    lastOk = r.ok;
    ready.set(undefined, r.ok ? 1 : 0);
    return r;
  };
  // Its own evaluations give up as a probe does (a hung datastore read is not ready).
  let checking = false;
  const selfCheck = () => {
    if (checking) return;
    checking = true;
    let t: NodeJS.Timeout | undefined;
    const limit = new Promise<never>((_, rej) => (t = setTimeout(() => rej(new Error('timed out')), 5_000)));
    void Promise.race([readyz(), limit])
      .catch(() => ready.set(undefined, 0))
      .finally(() => {
        clearTimeout(t);
        checking = false;
      });
  };
  // While not ready, every second: the gauge turns 1 as soon as the agent is (as a probe would see).
  const timer = setInterval(() => {
    if (Date.now() - lastEvaluated >= (lastOk ? READY_GAUGE_PERIOD_MS : 1_000)) selfCheck();
  }, 1_000);
  timer.unref();
  selfCheck();
  const server = await startHealthServer({
    addr: o.addr,
    registry: o.registry,
    healthz: () => ({ ok: true, detail: { uptimeSeconds: Math.round((Date.now() - started) / 1000) } }),
    readyz,
  }).catch((e: unknown) => {
    clearInterval(timer);
    throw e;
  });
  return {
    host: server.host,
    port: server.port,
    close: () => {
      clearInterval(timer);
      return server.close();
    },
  };
}

/** The CNI server's line: the socket is ours and served. */
export function socketHealth(socketPath: string, serving: boolean): PartHealth {
  if (!serving) return { ok: false, detail: 'shutting down' };
  try {
    if (!lstatSync(socketPath).isSocket()) return { ok: false, detail: `${socketPath} is not a socket` };
    return { ok: true, detail: `serving ${socketPath}` };
  } catch {
    return { ok: false, detail: `${socketPath} is gone` };
  }
}

/** Node init's line (with --config): the datastore was initialised and answers a read now. */
export async function datastoreHealth(initialised: boolean, datastore: () => Promise<Datastore>): Promise<PartHealth> {
  if (!initialised) return { ok: false, detail: 'not initialised yet (the agent retries; see its log)' };
  try {
    await (await datastore()).get('ClusterInformation', 'default', undefined, { fresh: true });
    return { ok: true, detail: 'reachable' };
  } catch (e) {
    return { ok: false, detail: (e as Error).message };
  }
}

/**
 * BIRD's line (--bgp on). It is reported, never counted against readiness: a pod ADD on this node works
 * without it (routes to other nodes are BGP's business, and graceful restart keeps them at the peers while
 * the agent restarts BIRD); failing /readyz would only take the agent out of its rollout.
 */
export function birdHealth(st: BirdStatus | undefined): PartHealth {
  if (!st?.running) {
    const why = st?.lastError ?? 'not started yet';
    return { ok: true, detail: `DEGRADED, not running: ${why} (CNI unaffected; the agent restarts it)` };
  }
  return {
    ok: true,
    detail: `running (pid ${st.pid}), ${st.established}/${st.sessions.length} BGP sessions Established`,
  };
}
