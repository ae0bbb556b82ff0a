// The pod network (agent/node-network.ts) as a part: node registration, routes and tunnels, NAT and
// floating IPs, and BIRD with --bgp on, started once node init reached the datastore.
import { ownNamespace } from '../../k8s/client.js';
import type { Logger } from '../../log/types.js';
import { readSecretKey, type BgpController } from '../bgp/index.js';
import { birdHealth } from '../health.js';
import type { createAgentMetrics } from '../metrics.js';
import { NodeNetwork, type NodeNetworkOptions } from '../node-network.js';
import type { AgentOptions } from '../options.js';
import type { AgentPart, PartHealth } from '../part.js';
import type { DatastoresPart } from './datastores.js';
import type { KubeAccessPart } from './kube-access.js';
import type { NodeInitPart } from './node-init.js';

interface NodeNetworkInputs {
  log: Logger;
  configPath: string;
  nodename?: string | undefined;
  network: NonNullable<AgentOptions['network']>;
  bgp?: AgentOptions['bgp'];
  datastores: DatastoresPart;
  nodeInit: NodeInitPart;
  api: KubeAccessPart;
  metrics: ReturnType<typeof createAgentMetrics>;
}

export class NodeNetworkPart implements AgentPart {
  readonly name = 'node-network';
  readonly check: string | undefined;
  private network: NodeNetwork | undefined;
  private bgp: BgpController | undefined;

  constructor(private readonly o: NodeNetworkInputs) {
    this.check = o.bgp ? 'bird' : undefined;
  }

  async start(): Promise<void> {
    const { o } = this;
    const bgp = o.bgp ? this.bgpOptions(o.bgp) : undefined;
    this.network = new NodeNetwork({
      configPath: o.configPath,
      nodeInit: o.nodeInit.done,
      log: o.log,
      datastores: o.datastores,
      nodename: o.nodename,
      nodeIP: o.network.nodeIP,
      nodeIPv6: o.network.nodeIPv6,
      autodetect: o.network.autodetect,
      mtuFile: o.network.mtuFile,
      onRoutesApplied: (s) => o.metrics.routesApplied(s),
      onFloatingRefused: (r) => {
        o.metrics.floatingRefused(r.kind);
        if (r.namespace && r.pod) o.api.podEvents?.warn(r.namespace, r.pod, 'NetpluginFloatingIPRefused', r.message);
      },
      ...(bgp ? { bgp } : {}),
    });
    this.network.start();
  }

  /** Settles once BIRD (with --bgp on) shut down for a graceful restart. */
  async stop(): Promise<void> {
    await this.network?.stop();
  }

  health(): PartHealth {
    return birdHealth(this.bgp?.status());
  }

  private bgpOptions(b: NonNullable<AgentOptions['bgp']>): NonNullable<NodeNetworkOptions['bgp']> {
    const opts: NonNullable<NodeNetworkOptions['bgp']> = { ...b, onStarted: (c) => (this.bgp = c) };
    // BGPPeer password.secretKeyRef: the Secret in the agent's own namespace, read with its own identity.
    const api = this.o.api.client;
    if (api) {
      const namespace = ownNamespace();
      opts.readSecret = (name, key) => readSecretKey(api, namespace, name, key);
    }
    const reg = this.o.metrics.registry;
    const running = reg.gauge(
      'netplugin_bgp_bird_running',
      'Whether the BIRD daemon the agent supervises runs (1) or not (0).',
    );
    const established = reg.gauge(
      'netplugin_bgp_sessions_established',
      'BGP sessions of this node in state Established.',
    );
    const sessions = reg.gauge('netplugin_bgp_sessions', 'BGP sessions BIRD has configured for this node.');
    const restarts = reg.gauge('netplugin_bgp_bird_restarts', 'Times the agent restarted BIRD after it exited.');
    reg.onCollect(() => {
      const st = this.bgp?.status();
      running.set(undefined, st?.running ? 1 : 0);
      established.set(undefined, st?.established ?? 0);
      sessions.set(undefined, st?.sessions.length ?? 0);
      restarts.set(undefined, st?.restarts ?? 0);
    });
    return opts;
  }
}
