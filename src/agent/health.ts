// The node agent's /healthz, /readyz and /metrics (--health-addr). Liveness is
// "the event loop answers" (a wedged agent is restarted by the kubelet or
// systemd); readiness is "a pod ADD sent now would work": the CNI socket is
// ours and served, and with --config the datastore was initialised and answers
// a read now.
import { lstatSync } from 'node:fs';
import type { Datastore } from '../datastore/types.js';
import { startHealthServer, type CheckResult, type HealthServer } from '../observe/health.js';
import type { Registry } from '../observe/metrics.js';
import type { BirdStatus } from './bgp/supervisor.js';

export { DEFAULT_HEALTH_ADDR } from '../observe/health.js';

export interface AgentHealthOptions {
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

export async function startAgentHealth(o: AgentHealthOptions): Promise<HealthServer> {
  const started = Date.now();
  return startHealthServer({
    addr: o.addr,
    registry: o.registry,
    healthz: () => ({ ok: true, detail: { uptimeSeconds: Math.round((Date.now() - started) / 1000) } }),
    readyz: async (): Promise<CheckResult> => {
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
      if (o.bgp) {
        const st = o.bgp();
        if (!st?.running) fail('bird', st?.lastError ? `not running: ${st.lastError}` : 'not running yet');
        else detail['bird'] = `running (pid ${st.pid}), ${st.established}/${st.sessions.length} BGP sessions Established`;
      }
      return { ok, detail };
    },
  });
}
