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

export const DEFAULT_HEALTH_ADDR = '127.0.0.1:9099';

interface AgentHealthOptions {
  addr: string;
  registry: Registry;
  socketPath: string;
  /** False once shutdown started: the agent no longer accepts requests. */
  serving: () => boolean;
  /** With --config: whether node preparation (datastore init) finished, and the datastore it uses. */
  node?: { initialised: () => boolean; datastore: () => Promise<Datastore> };
  /** With --bgp on: the supervised BIRD's state (undefined until the BGP controller started). */
  bgp?: () => BirdStatus | undefined;
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
    const r = await evaluateReady(o);
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

async function evaluateReady(o: AgentHealthOptions): Promise<CheckResult> {
  const detail: Record<string, string> = {};
  let ok = true;
  const fail = (k: string, why: string) => {
    ok = false;
    detail[k] = why;
  };
  if (!o.serving()) fail('socket', 'shutting down');
  else {
    try {
      if (!lstatSync(o.socketPath).isSocket()) fail('socket', `${o.socketPath} is not a socket`);
      else detail['socket'] = `serving ${o.socketPath}`;
    } catch {
      fail('socket', `${o.socketPath} is gone`);
    }
  }
  if (o.node) {
    if (!o.node.initialised()) fail('datastore', 'not initialised yet (the agent retries; see its log)');
    else {
      try {
        await (await o.node.datastore()).get('ClusterInformation', 'default', undefined, { fresh: true });
        detail['datastore'] = 'reachable';
      } catch (e) {
        fail('datastore', (e as Error).message);
      }
    }
  }
  // BIRD is reported, never counted against readiness: a pod ADD on this node works without it
  // (routes to other nodes are BGP's business, and graceful restart keeps them at the peers while the
  // agent restarts BIRD); failing /readyz would only take the agent out of its rollout.
  if (o.bgp) {
    const st = o.bgp();
    if (!st?.running) {
      detail['bird'] =
        `DEGRADED, not running: ${st?.lastError ?? 'not started yet'} (CNI unaffected; the agent restarts it)`;
    } else detail['bird'] = `running (pid ${st.pid}), ${st.established}/${st.sessions.length} BGP sessions Established`;
  }
  return { ok, detail };
}
