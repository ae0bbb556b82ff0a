// What the agent does for its node at start when given the CNI config
// (--config /etc/cni/net.d/10-netplugin.conflist): open the datastore the
// plugin will use (the same cached connection its requests reuse, so the
// first pod ADD does not pay for the etcd3 import and the TLS handshake),
// initialise ClusterInformation, and turn on IPv6 forwarding when the node
// serves IPv6 pods.
//
// IPv6 forwarding: the kernel forwards IPv6 only when
// net.ipv6.conf.all.forwarding is 1 (the per-interface IPv6 forwarding knob
// exists but does not enable forwarding on its own, unlike IPv4, where the
// per-interface net.ipv4.conf.<if>.forwarding the dataplane sets suffices).
// Setting it has a side effect on the node: interfaces stop accepting router
// advertisements unless their accept_ra is 2, so a node that gets its own
// IPv6 address by SLAAC would lose it. Hence only when IPv6 is in use: the
// netconf assigns IPv6 (ipam.assign_ipv6 "true"), or an enabled IPv6 IPPool
// exists in the datastore; --ipv6-forwarding=on|off overrides the decision.
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from '../log/types.js';
import { isNetpluginIpam, parseNetconf, type Netconf } from '../config/index.js';
import { applySysctls, nodeSysctls } from '../dataplane/sysctl.js';
import { initDatastore } from '../datastore/init.js';
import type { Datastore } from '../datastore/types.js';
import type { DatastoreSource } from '../datastore/pool.js';
import { netpluginEntry } from '../config/conflist.js';

type Ipv6ForwardingMode = 'auto' | 'on' | 'off';

interface NodeInitOptions {
  configPath: string;
  log: Logger;
  /** The agent's runtime: node init opens the connection requests then reuse. */
  datastores: DatastoreSource;
  ipv6Forwarding?: Ipv6ForwardingMode;
  /** Writes a sysctl in the agent's (the node's) network namespace. Default: the addon. */
  sysctlSet?: (key: string, value: string) => void;
  sysctlGet?: (key: string) => string;
  /** Delay between datastore attempts while it is unreachable (default 5 s). */
  retryMs?: number;
}

export interface NodeInit {
  /** Settles once the datastore step succeeded (or stop() was called). */
  readonly done: Promise<void>;
  stop(): void;
}

/** The netplugin entry of a .conflist (plugins[]) or a single-plugin .conf, with the list's name and cniVersion. */
export function readNetpluginConf(path: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new Error(
      `--config ${path}: cannot read it (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}); pass the CNI ` +
        `config install-cni wrote, e.g. /etc/cni/net.d/10-netplugin.conflist`,
    );
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    throw new Error(`--config ${path}: not JSON (${(e as Error).message})`);
  }
  if (!doc || typeof doc !== 'object' || Array.isArray(doc))
    throw new Error(`--config ${path}: expected a JSON object (a CNI .conflist or .conf)`);
  const d = doc as Record<string, unknown>;
  let entry: Record<string, unknown> | undefined;
  if (Array.isArray(d['plugins'])) {
    entry = netpluginEntry(d['plugins']);
    if (!entry) throw new Error(`--config ${path}: no entry of "plugins" has "type": "netplugin"`);
    entry = { cniVersion: d['cniVersion'], name: d['name'], ...entry };
  } else if (d['type'] === 'netplugin') {
    entry = d;
  } else {
    throw new Error(
      `--config ${path}: neither a .conflist with a netplugin entry nor a .conf with "type": "netplugin"`,
    );
  }
  return entry;
}

export function startNodeInit(opts: NodeInitOptions): NodeInit {
  const { log } = opts;
  const retryMs = opts.retryMs ?? 5000;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let wake: (() => void) | undefined;

  const done = (async () => {
    const raw = readNetpluginConf(opts.configPath);
    let conf: Netconf;
    try {
      conf = parseNetconf(raw, { pluginType: 'netplugin', warn: (m) => log.warn(`--config ${opts.configPath}: ${m}`) });
    } catch (e) {
      throw new Error(`--config ${opts.configPath}: ${(e as Error).message}`);
    }
    const mode = opts.ipv6Forwarding ?? 'auto';
    const confWantsV6 = isNetpluginIpam(conf.ipam) && conf.ipam.assign_ipv6 === 'true';
    let v6Done = false;
    const enableV6 = async (why: string) => {
      if (v6Done) return;
      v6Done = true;
      try {
        // The addon loads on first use: a missing build shows here as a logged error, not a dead agent.
        const io = opts.sysctlSet && opts.sysctlGet ? { get: opts.sysctlGet, set: opts.sysctlSet } : nodeSysctls();
        if (!applySysctls({ 'net.ipv6.conf.all.forwarding': '1' }, io).length) {
          log.info('IPv6 forwarding already on', { why });
          return;
        }
        log.info('IPv6 forwarding turned on (net.ipv6.conf.all.forwarding=1)', { why });
      } catch (e) {
        log.error('cannot turn on IPv6 forwarding; IPv6 pods will not be reachable from other hosts', {
          error: (e as Error).message,
        });
      }
    };
    if (mode === 'on') await enableV6('--ipv6-forwarding=on');
    else if (mode === 'auto' && confWantsV6) await enableV6(`ipam.assign_ipv6 is "true" in ${opts.configPath}`);
    else if (mode === 'off') log.info('IPv6 forwarding left as it is (--ipv6-forwarding=off)');

    for (let attempt = 1; !stopped; attempt++) {
      let ds: Datastore;
      try {
        ds = await opts.datastores.datastore(conf);
        const r = await initDatastore(ds);
        log.info('datastore initialised', {
          action: r.action,
          datastoreReady: r.clusterInformation.spec.datastoreReady,
        });
        if (mode === 'auto' && !v6Done) {
          const v6Pool = (await ds.list('IPPool')).items.find((p) => p.spec.cidr.includes(':') && !p.spec.disabled);
          if (v6Pool) await enableV6(`IPPool ${v6Pool.metadata.name} (${v6Pool.spec.cidr}) is IPv6`);
          else log.info('IPv6 forwarding left as it is: no IPv6 in the config and no enabled IPv6 IPPool');
        }
        log.info('node ready', { config: opts.configPath });
        return;
      } catch (e) {
        log.warn('cannot initialise the datastore yet; retrying (CNI requests are served meanwhile)', {
          attempt,
          error: (e as Error).message,
          retryInMs: retryMs,
        });
      }
      await new Promise<void>((r) => {
        wake = r;
        timer = setTimeout(r, retryMs);
      });
    }
  })();
  return {
    done,
    stop() {
      stopped = true;
      clearTimeout(timer);
      wake?.();
    },
  };
}

/** Where container runtimes read CNI configs unless told otherwise. */
const DEFAULT_CNI_CONF_DIR = '/etc/cni/net.d';

/**
 * The config a runtime would use, if it is netplugin's: the first .conflist/.conf/.json
 * of `dir` in name order (the runtimes' rule) when it has a netplugin entry. undefined otherwise.
 */
export function findNetpluginConf(dir = DEFAULT_CNI_CONF_DIR): string | undefined {
  let names: string[];
  try {
    names = readdirSync(dir)
      .filter((n) => /\.(conflist|conf|json)$/.test(n))
      .sort();
  } catch {
    return undefined;
  }
  if (!names.length) return undefined;
  const path = join(dir, names[0]!);
  try {
    readNetpluginConf(path);
    return path;
  } catch {
    return undefined;
  }
}

/**
 * Without --config: opens the datastore of the node's netplugin config (the
 * same cached connection requests use) and makes one read, so the first ADD
 * does not pay for the client's import and the connection. A failure is only
 * logged: the first request then opens it, as it would anyway.
 */
export async function warmDatastore(configPath: string, datastores: DatastoreSource, log: Logger): Promise<boolean> {
  try {
    const conf = parseNetconf(readNetpluginConf(configPath), { pluginType: 'netplugin', warn: () => undefined });
    const ds = await datastores.datastore(conf);
    await ds.get('ClusterInformation', 'default').catch(() => undefined);
    log.info("datastore connection warmed from the node's CNI config", { config: configPath });
    return true;
  } catch (e) {
    log.warn('cannot warm the datastore connection; the first request opens it', {
      config: configPath,
      error: (e as Error).message,
    });
    return false;
  }
}
