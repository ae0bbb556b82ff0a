// The agent's BGP controller (--bgp on): watches the resources the BIRD
// configuration depends on, renders it (render.ts) and hands it to the
// supervisor (supervisor.ts), which checks it and has BIRD apply it.
import { readFileSync } from 'node:fs';
import type { Datastore } from '../../datastore/types.js';
import type { Logger } from '../../log/types.js';
import type { Kind, Resource } from '../../model/resources.js';
import { addressOf, containsIP, tryParseCidr, tryParseIP, type Cidr } from '../../net/cidr.js';
import { datastoreSource, Informer } from '../../watch/informer.js';
import { renderBirdConfig } from './render.js';
import { BirdSupervisor, type BirdStatus } from './supervisor.js';

interface BgpOptions {
  ds: Datastore;
  node: string;
  /** This node's directly connected subnets, read at each render (direct vs multihop peers). */
  subnets: () => Cidr[];
  log: Logger;
  birdPath: string;
  runDir: string;
  /** Called after each configuration BIRD accepted, with its render time (metrics, tests). */
  onApplied?: (s: { seconds: number; ok: boolean; advertised: number }) => void;
}

export interface BgpController {
  status(): BirdStatus;
  stop(): Promise<void>;
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
      for (const nat of w.spec.ipNATs ?? []) floating.push(nat.externalIP);
    }
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
        log.warn(
          `bgp: BGPPeer ${p.metadata.name}: spec.password.secretKeyRef is not read by this agent; use ` +
            `spec.password.file`,
        );
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
    async stop() {
      stopped = true;
      clearTimeout(debounce);
      clearInterval(resync);
      for (const i of all) i.stop();
      await running.catch(() => undefined);
      await bird.stop();
    },
  };
}
