// Flow records for the aggregator's tests, and a throwaway PKI for its collector.
import type { FlowRecord, PolicyHit } from '../../src/flows/record.js';
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { certDir, makeCA, makeCert, type CA, type CertPair } from './certs.js';
import { freePort } from './etcd.js';
import { FlowClient, type FlowClientOptions } from '../../src/flows/client.js';

export function hit(name: string, o: Partial<PolicyHit> = {}): PolicyHit {
  return { kind: 'NetworkPolicy', namespace: 'ns-b', name, tier: 'default', action: 'Allow', ruleIndex: 0, ...o };
}

/** A record a→b (ns-a/pod-a → ns-b/pod-b:80/TCP, allowed by ns-b/allow-a rule 0) at `t` unix seconds. */
export function record(t: number, o: Partial<FlowRecord> = {}): FlowRecord {
  return {
    reporter: 'Dst',
    action: 'Allow',
    source: { type: 'wep', namespace: 'ns-a', name: 'pod-a', labels: { app: 'a' } },
    dest: { type: 'wep', namespace: 'ns-b', name: 'pod-b', labels: { app: 'b' } },
    destPort: 80,
    protocol: 'TCP',
    policies: { enforced: [hit('allow-a')], pending: [] },
    startTime: t,
    endTime: t + 10,
    packetsIn: 10,
    packetsOut: 8,
    bytesIn: 1000,
    bytesOut: 800,
    connectionsStarted: 2,
    connectionsCompleted: 1,
    connectionsLive: 1,
    ...o,
  };
}

/** A denied record c→b (ns-c/pod-c → ns-b/pod-b:80), the end of tier's deny, with a staged policy pending. */
export function deniedRecord(t: number, o: Partial<FlowRecord> = {}): FlowRecord {
  return record(t, {
    action: 'Deny',
    source: { type: 'wep', namespace: 'ns-c', name: 'pod-c', labels: { app: 'c' } },
    policies: {
      enforced: [{ kind: 'EndOfTier', namespace: '', name: 'default', tier: 'default', action: 'Deny', ruleIndex: -1 }],
      pending: [hit('staged-allow-c', { kind: 'StagedNetworkPolicy', ruleIndex: 1 })],
    },
    packetsOut: 0,
    bytesOut: 0,
    connectionsStarted: 0,
    connectionsCompleted: 0,
    connectionsLive: 0,
    ...o,
  });
}

export const FLOWS_BIN = join(resolve(import.meta.dirname, '../..'), 'dist/netplugin-flows.mjs');

/** A PKI for the collector: the aggregator's server certificate, an agent's client certificate, a stranger's. */
export interface FlowsPki {
  dir: string;
  ca: CA;
  server: CertPair;
  agent: CertPair;
  /** Signed by another CA: the collector must refuse it. */
  stranger: CertPair;
  remove(): void;
}

export function flowsPki(): FlowsPki {
  const d = certDir();
  const ca = makeCA(d.dir, 'flows-ca');
  const other = makeCA(d.dir, 'other-ca');
  return {
    dir: d.dir,
    ca,
    server: makeCert(d.dir, ca, 'aggregator', 'server'),
    agent: makeCert(d.dir, ca, 'node-1', 'client'),
    stranger: makeCert(d.dir, other, 'stranger', 'client'),
    remove: d.remove,
  };
}

/** The built netplugin-flows, run as a Deployment runs it, on loopback ports. */
export interface FlowsProcess {
  proc: ChildProcess;
  collectorPort: number;
  apiUrl: string;
  healthUrl: string;
  stderr(): string;
  stop(): Promise<void>;
}

export async function startFlows(
  pki: FlowsPki,
  o: { collectorPort?: number; apiPort?: number; args?: string[] } = {},
): Promise<FlowsProcess> {
  if (!existsSync(FLOWS_BIN)) throw new Error(`${FLOWS_BIN} is missing: run npm run build:ts`);
  const collectorPort = o.collectorPort ?? (await freePort());
  const apiPort = o.apiPort ?? (await freePort());
  const healthPort = await freePort();
  const proc = spawn(
    process.execPath,
    [
      FLOWS_BIN,
      `--collector-addr=127.0.0.1:${collectorPort}`,
      `--tls-cert=${pki.server.cert}`,
      `--tls-key=${pki.server.key}`,
      `--client-ca=${pki.ca.cert}`,
      `--api-addr=127.0.0.1:${apiPort}`,
      `--health-addr=127.0.0.1:${healthPort}`,
      ...(o.args ?? []),
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let err = '';
  proc.stderr!.on('data', (c: Buffer) => (err += c.toString()));
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  const healthUrl = `http://127.0.0.1:${healthPort}`;
  for (let i = 0; ; i++) {
    if (proc.exitCode !== null) throw new Error(`netplugin-flows exited ${proc.exitCode}: ${err}`);
    const ok = await fetch(`${healthUrl}/readyz`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) break;
    if (i > 100) throw new Error(`netplugin-flows did not become ready: ${err}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    proc,
    collectorPort,
    apiUrl: `http://127.0.0.1:${apiPort}`,
    healthUrl,
    stderr: () => err,
    stop: async () => {
      if (proc.exitCode === null) proc.kill('SIGTERM');
      await exited;
    },
  };
}

/** Client certificates per node name, made on first use (the collector takes a node's batches with its own only). */
const nodeCerts = new WeakMap<FlowsPki, Map<string, CertPair>>();

/** A client certificate of `pki`'s CA naming `node` (its CN). */
export function nodeCert(pki: FlowsPki, node: string): CertPair {
  let m = nodeCerts.get(pki);
  if (!m) nodeCerts.set(pki, (m = new Map([['node-1', pki.agent]])));
  let c = m.get(node);
  if (!c) m.set(node, (c = makeCert(pki.dir, pki.ca, node, 'client')));
  return c;
}

/** A FlowClient with a certificate naming its node (or `as`), to the collector on `port`. */
export function agentClient(
  pki: FlowsPki,
  port: number,
  o: Partial<FlowClientOptions> & { as?: CertPair } = {},
): FlowClient {
  const who = o.as ?? nodeCert(pki, o.node ?? 'node-1');
  return new FlowClient({
    url: `https://127.0.0.1:${port}`,
    node: 'node-1',
    cert: readFileSync(who.cert),
    key: readFileSync(who.key),
    ca: readFileSync(pki.ca.cert),
    reconnectMinMs: 100,
    reconnectMaxMs: 500,
    ...o,
  });
}
