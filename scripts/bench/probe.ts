// Traffic probes for the burst and scale benches: one long-lived Node process
// per prober pod (inside its network namespace) opens TCP connections on
// request. A probe of a port nothing listens on is answered by the target's
// kernel with a RST ("refused": the path and the target's ingress policy let
// the SYN through) or by nothing (a drop: "timeout"). So no server runs in the
// probed pods, and one probe costs one SYN, not a process.
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';

export type ProbeResult = 'open' | 'refused' | 'timeout' | 'error';

const PROBER = `
const net = require('node:net');
require('node:readline').createInterface({ input: process.stdin }).on('line', (l) => {
  const [id, host, port, ms] = l.split(' ');
  let done = false;
  const s = net.connect({ host, port: Number(port) });
  const end = (r) => { if (done) return; done = true; clearTimeout(t); s.destroy(); process.stdout.write(id + ' ' + r + '\\n'); };
  const t = setTimeout(() => end('timeout'), Number(ms));
  s.on('connect', () => end('open'));
  s.on('error', (e) => end(e.code === 'ECONNREFUSED' ? 'refused' : 'error'));
});
console.log('ready');
`;

export interface Prober {
  /** One TCP connection attempt from the prober's namespace. */
  probe(host: string, port: number, timeoutMs: number): Promise<ProbeResult>;
  stop(): void;
}

/** Starts a prober inside network namespace `netns` (its name under /var/run/netns). */
export async function startProber(netns: string): Promise<Prober> {
  const proc: ChildProcess = spawn('ip', ['netns', 'exec', netns, process.execPath, '-e', PROBER], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const waiting = new Map<string, (r: ProbeResult) => void>();
  let seq = 0;
  let ready!: () => void;
  const up = new Promise<void>((r) => (ready = r));
  createInterface({ input: proc.stdout! }).on('line', (l) => {
    if (l === 'ready') return ready();
    const [id, r] = l.split(' ');
    const w = waiting.get(id!);
    waiting.delete(id!);
    w?.(r as ProbeResult);
  });
  const exited = new Promise<never>((_, rej) =>
    proc.once('exit', (c) => rej(new Error(`prober in ${netns} exited (${c})`))),
  );
  exited.catch(() => undefined);
  await Promise.race([up, exited]);
  return {
    probe(host, port, timeoutMs) {
      const id = String(++seq);
      return new Promise((resolve) => {
        waiting.set(id, resolve);
        proc.stdin!.write(`${id} ${host} ${port} ${timeoutMs}\n`);
      });
    },
    stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    },
  };
}

/** A reachable target: its kernel answered the SYN (RST or accept). */
export const reached = (r: ProbeResult): boolean => r === 'open' || r === 'refused';
