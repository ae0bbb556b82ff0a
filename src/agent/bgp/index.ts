// The agent's BGP controller (--bgp on): watches the resources the BIRD
// configuration depends on, renders it (render.ts) and hands it to the
// supervisor (supervisor.ts), which checks it and has BIRD apply it.
import { readFileSync } from 'node:fs';
import type { Datastore } from '../../datastore/types.js';
import type { KubeClient } from '../../k8s/client.js';
import type { Logger } from '../../log/types.js';
import type { Kind, Resource } from '../../model/resources.js';
import { addressOf, containsIP, tryParseCidr, tryParseIP, type Cidr } from '../../net/cidr.js';
import { Informer } from '../../watch/informer.js';
import { datastoreSource } from '../../datastore/list-watch.js';
import { renderBirdConfig } from './render.js';
import { heldBy, resolveFloatingIPs } from '../nat/floating.js';
import { poolViews } from '../routes/desired.js';
import { BirdSupervisor, type BirdStatus } from './supervisor.js';

interface BgpOptions {
  ds: Datastore;
  node: string;
  /** This node's directly connected subnets, read at each render (direct vs multihop peers). */
  subnets: () => Cidr[];
  log: Logger;
  birdPath: string;
  runDir: string;
  /**
   * Reads key `key` of Secret `name` (BGPPeer spec.password.secretKeyRef) with the agent's own API
   * access; absent when the agent has none.
   */
  readSecret?: (name: string, key: string) => Promise<string>;
  /** Called after each configuration BIRD accepted, with its render time (metrics, tests). */
  onApplied?: (s: { seconds: number; ok: boolean; advertised: number }) => void;
}

export interface BgpController {
  status(): BirdStatus;
  /** graceful: the agent stops to be restarted (see BirdSupervisor.stop). */
  stop(o?: { graceful?: boolean }): Promise<void>;
}

const SECRET_TTL_MS = 20_000;

function secretCache(read: BgpOptions['readSecret']): { get(name: string, key: string): Promise<string> } {
  const cache = new Map<string, { at: number; value: Promise<string> }>();
  return {
    get(name, key) {
      const k = `${name}/${key}`;
      const hit = cache.get(k);
      if (hit && Date.now() - hit.at < SECRET_TTL_MS) return hit.value;
      const value = read!(name, key);
      cache.set(k, { at: Date.now(), value });
      // A failed read is retried at the next render.
      value.catch(() => cache.delete(k));
      return value;
    },
  };
}

/** Key `key` of Secret `name` in `namespace`, decoded (Secret data is base64 in the API). */
export async function readSecretKey(client: KubeClient, namespace: string, name: string, key: string): Promise<string> {
  const s = await client.request<{ data?: Record<string, string> }>(
    'GET',
    `/api/v1/namespaces/${encodeURIComponent(namespace)}/secrets/${encodeURIComponent(name)}`,
  );
  const v = s.data?.[key];
  if (v === undefined) throw new Error(`Secret ${namespace}/${name} has no key ${JSON.stringify(key)}`);
  return Buffer.from(v, 'base64').toString('utf8');
}

export function startBgpController(o: BgpOptions): BgpController {
  const { ds, node, log } = o;
  const bird = new BirdSupervisor({ birdPath: o.birdPath, runDir: o.runDir, log });
  let stopped = false;
  let debounce: NodeJS.Timeout | undefined;
  let running: Promise<void> = Promise.resolve();
  let warned = new Set<string>();
  const schedule = () => {
    if (stopped) return;
    clearTimeout(debounce);
    debounce = setTimeout(() => {
      running = running
        .then(once)
        .catch((e: Error) => log.warn('bgp: render failed; retrying on the next change', { error: e.message }));
    }, 20);
  };
  const informer = <K extends Kind>(kind: K) =>
    new Informer<Resource<K>>(
      datastoreSource(ds, kind),
      { onChange: schedule },
      { onError: (e, src) => log.warn('bgp: watch failed; re-listing', { source: src, error: e.message }) },
    );
  const nodes = informer('Node');
  const configs = informer('BGPConfiguration');
  const peers = informer('BGPPeer');
  const pools = informer('IPPool');
  const blocks = informer('IPAMBlock');
  const weps = informer('WorkloadEndpoint');
  const all = [nodes, configs, peers, pools, blocks, weps];
  // Secrets are read at render, at most every SECRET_TTL_MS each: renders follow every pod change.
  const secrets = secretCache(o.readSecret);
  for (const i of all) i.start();
  // Connected subnets decide direct vs multihop; they change without a datastore event.
  const resync = setInterval(schedule, 30_000);
  resync.unref();

  async function once(): Promise<void> {
    await Promise.all(all.map((i) => i.whenSynced()));
    if (stopped) return;
    const t0 = process.hrtime.bigint();
    const mine = blocks.list().filter((b) => b.spec.affinity === `host:${node}`);
    const myBlocks = mine.map((b) => tryParseCidr(b.spec.cidr)).filter((c) => c !== undefined);
    const borrowedOrExtra: string[] = [];
    const floating: string[] = [];
    for (const w of weps.list()) {
      if (w.spec.node !== node) continue;
      for (const n of w.spec.ipNetworks ?? []) {
        const ip = tryParseIP(addressOf(n));
        if (ip && !myBlocks.some((c) => containsIP(c, ip))) borrowedOrExtra.push(n);
      }
    }
    // Only the floating IPs this node holds (nat/floating.ts: validated, one holder each).
    const poolList = poolViews(pools.list());
    for (const c of heldBy(resolveFloatingIPs(weps.list(), poolList), node)) floating.push(c.external);
    const passwords = new Map<string, string>();
    for (const p of peers.list()) {
      const pw = p.spec.password;
      if (!pw) continue;
      if (pw.file) {
        try {
          passwords.set(p.metadata.name, readFileSync(pw.file, 'utf8').replace(/\r?\n$/, ''));
        } catch (e) {
          log.warn(
            `bgp: BGPPeer ${p.metadata.name}: cannot read spec.password.file ${pw.file}: ${(e as Error).message}`,
          );
        }
      } else if (pw.secretKeyRef) {
        const ref = pw.secretKeyRef;
        if (!o.readSecret) {
          log.warn(
            `bgp: BGPPeer ${p.metadata.name}: spec.password.secretKeyRef needs the agent's Kubernetes API access ` +
              `(its service account, or --kubeconfig); use spec.password.file otherwise`,
          );
          continue;
        }
        try {
          passwords.set(p.metadata.name, await secrets.get(ref.name, ref.key));
        } catch (e) {
          log.warn(
            `bgp: BGPPeer ${p.metadata.name}: cannot read spec.password.secretKeyRef ${ref.name}/${ref.key}: ` +
              `${(e as Error).message}`,
          );
        }
      }
    }
    const r = renderBirdConfig({
      me: node,
      nodes: nodes.list(),
      configs: configs.list(),
      peers: peers.list(),
      pools: pools.list().map((p) => ({ name: p.metadata.name, spec: p.spec })),
      blocks: mine.map((b) => b.spec.cidr),
      borrowed: borrowedOrExtra,
      extraAddresses: floating,
      subnets: o.subnets(),
      passwords,
      runDir: o.runDir,
    });
    const fresh = new Set(r.warnings);
    for (const w of fresh) if (!warned.has(w)) log.warn(`bgp: ${w}`);
    warned = fresh;
    const res = await bird.apply(r);
    o.onApplied?.({
      seconds: Number(process.hrtime.bigint() - t0) / 1e9,
      ok: res.ok,
      advertised: r.advertised[4].length + r.advertised[6].length,
    });
  }

  return {
    status: () => bird.status(),
    async stop(so = {}) {
      stopped = true;
      clearTimeout(debounce);
      clearInterval(resync);
      for (const i of all) i.stop();
      await running.catch(() => undefined);
      await bird.stop(so);
    },
  };
}
