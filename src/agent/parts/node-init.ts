// Node preparation (agent/node-init.ts) as a part. With --config it runs beside the CNI server: a
// datastore that is down at boot must not keep pods on this node from being served (they get code
// 11 and are retried), so it retries in the background, and /readyz says whether it is done.
// Without --config it warms the datastore connection of the node's netplugin config, if any.
import { parseNetconf } from '../../config/index.js';
import type { Logger } from '../../log/types.js';
import { datastoreHealth } from '../health.js';
import { findNetpluginConf, readNetpluginConf, startNodeInit, warmDatastore, type NodeInit } from '../node-init.js';
import type { Ipv6ForwardingMode } from '../options.js';
import type { AgentPart, PartHealth } from '../part.js';
import type { DatastoresPart } from './datastores.js';

interface NodeInitInputs {
  log: Logger;
  datastores: DatastoresPart;
  /** --config; without it the first netplugin config of cniConfDir is only warmed. */
  configPath?: string | undefined;
  cniConfDir?: string | undefined;
  ipv6Forwarding: Ipv6ForwardingMode;
  /** An unusable --config (the datastore step retries; this does not): the agent exits. */
  onUnusableConfig: (e: Error) => void;
}

export class NodeInitPart implements AgentPart {
  readonly name = 'node-init';
  readonly check: string | undefined;
  private init: NodeInit | undefined;
  private initialised = false;

  constructor(private readonly o: NodeInitInputs) {
    this.check = o.configPath ? 'datastore' : undefined;
  }

  /** Settles once the datastore step succeeded (never, without --config or while it fails). */
  get done(): Promise<void> {
    return this.init?.done ?? new Promise<void>(() => undefined);
  }

  async start(): Promise<void> {
    const { o } = this;
    if (!o.configPath) {
      if (o.ipv6Forwarding === 'on') await enableIpv6Forwarding(o.log);
      const found = findNetpluginConf(o.cniConfDir);
      if (found) void warmDatastore(found, o.datastores, o.log);
      return;
    }
    this.init = startNodeInit({
      configPath: o.configPath,
      log: o.log,
      datastores: o.datastores,
      ipv6Forwarding: o.ipv6Forwarding,
    });
    this.init.done.then(
      () => (this.initialised = true),
      (e: Error) => o.onUnusableConfig(e),
    );
  }

  async stop(): Promise<void> {
    this.init?.stop();
  }

  health(): Promise<PartHealth> {
    // The connection node init opened and requests reuse (same settings, same cache key).
    return datastoreHealth(this.initialised, () =>
      this.o.datastores.datastore(
        parseNetconf(readNetpluginConf(this.o.configPath!), { pluginType: 'netplugin', warn: () => undefined }),
      ),
    );
  }
}

async function enableIpv6Forwarding(log: Logger): Promise<void> {
  try {
    // The addon loads lazily: a missing build is a logged error here, not a dead agent.
    const { applySysctls } = await import('../../dataplane/sysctl.js');
    applySysctls({ 'net.ipv6.conf.all.forwarding': '1' });
    log.info('IPv6 forwarding turned on (net.ipv6.conf.all.forwarding=1)', { why: '--ipv6-forwarding=on' });
  } catch (e) {
    log.error('cannot turn on IPv6 forwarding', { error: (e as Error).message });
  }
}
