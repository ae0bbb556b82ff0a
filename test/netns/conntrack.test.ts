// conntrackFlush over ctnetlink with real traffic: a client namespace talks to
// a server namespace that tracks connections (an nft `ct state` rule turns
// conntrack on there); an established TCP connection and a UDP flow of one
// client address are deleted, IPv4 and IPv6, while another client's entries
// stay; bad input is a TypeError naming the field. conntrackList gives the same
// entries with their tuples, and conntrackDelete deletes only the ones chosen.
import { spawn, type ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { netlink, openNetns, type Netlink, type NetNS } from '../../src/native/index.js';
import { createNetns, deleteNetns, inNetns } from '../support/netns.js';

let client: { name: string; path: string };
let server: { name: string; path: string };
let ns: NetNS;
let nl: Netlink;
const procs: ChildProcess[] = [];

const SERVER = `
import socket, threading
def sock(fam, kind, addr, port):
    s = socket.socket(fam, kind); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if fam == socket.AF_INET6: s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind((addr, port)); return s
def tcp(s):
    s.listen(16); conns = []
    while True:
        c, _ = s.accept(); conns.append(c); c.send(b'hi')
def udp(s):
    while True:
        d, a = s.recvfrom(100); s.sendto(d, a)
for f, a in ((socket.AF_INET, '0.0.0.0'), (socket.AF_INET6, '::')):
    threading.Thread(target=tcp, args=(sock(f, socket.SOCK_STREAM, a, 8080),), daemon=True).start()
    threading.Thread(target=udp, args=(sock(f, socket.SOCK_DGRAM, a, 8081),), daemon=True).start()
print('ready', flush=True)
threading.Event().wait()
`;
// Holds a TCP connection open and sends one UDP datagram, from a given source address.
const CLIENT = `
import socket, sys, time
src, dst, fam = sys.argv[1], sys.argv[2], socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET
t = socket.socket(fam, socket.SOCK_STREAM); t.bind((src, 0)); t.connect((dst, 8080)); assert t.recv(2) == b'hi'
u = socket.socket(fam, socket.SOCK_DGRAM); u.bind((src, 0)); u.settimeout(10); u.sendto(b'x', (dst, 8081)); u.recvfrom(10)
print('connected', flush=True)
time.sleep(600)
`;

function run(nsName: string, code: string, args: string[], ready: string): Promise<ChildProcess> {
  const p = spawn('ip', ['netns', 'exec', nsName, 'python3', '-c', code, ...args], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  procs.push(p);
  return new Promise((resolve, reject) => {
    let out = '';
    p.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes(ready)) resolve(p);
    });
    p.on('exit', (c) => reject(new Error(`${code.slice(0, 40)}... exited with ${c} before '${ready}'`)));
  });
}

/** The server namespace's conntrack table (/proc/net/nf_conntrack is per namespace). */
function table(): string {
  return inNetns(server.name, 'cat', ['/proc/net/nf_conntrack']);
}
const lines = (addr: string): string[] =>
  table()
    .split('\n')
    .filter((l) => new RegExp(`(src|dst)=${addr.replace(/\./g, '\\.')} `).test(l));

beforeAll(async () => {
  client = createNetns('ctc');
  server = createNetns('cts');
  const v = `ct${process.pid % 100000}`;
  inNetns(client.name, 'ip', ['link', 'add', v, 'type', 'veth', 'peer', 'name', 'srv', 'netns', server.name]);
  for (const [n, dev, addrs] of [
    [client.name, v, ['10.77.0.1/24', '10.77.0.3/24', 'fd77::1/64', 'fd77::3/64']],
    [server.name, 'srv', ['10.77.0.2/24', 'fd77::2/64']],
  ] as const) {
    for (const a of addrs) inNetns(n, 'ip', ['addr', 'add', a, 'dev', dev, ...(a.includes(':') ? ['nodad'] : [])]);
    inNetns(n, 'ip', ['link', 'set', dev, 'up']);
  }
  // Conntrack runs in a namespace only once something there needs it.
  inNetns(server.name, 'nft', [
    'add table inet ct-test; add chain inet ct-test in { type filter hook input priority 0; ct state established ' +
      'counter accept; }',
  ]);
  await run(server.name, SERVER, [], 'ready');
  for (const [src, dst] of [
    ['10.77.0.1', '10.77.0.2'],
    ['10.77.0.3', '10.77.0.2'],
    ['fd77::1', 'fd77::2'],
    ['fd77::3', 'fd77::2'],
  ]) {
    await run(client.name, CLIENT, [src!, dst!], 'connected');
  }
  ns = openNetns(server.path);
  nl = netlink(ns);
}, 60_000);

afterAll(() => {
  for (const p of procs) p.kill('SIGKILL');
  nl?.close();
  ns?.close();
  if (client) deleteNetns(client.name);
  if (server) deleteNetns(server.name);
});

describe('conntrackFlush', () => {
  it('deletes the TCP and UDP entries of an address, both families, and only those', () => {
    for (const a of [
      '10.77.0.1',
      '10.77.0.3',
      'fd77:0000:0000:0000:0000:0000:0000:0001',
      'fd77:0000:0000:0000:0000:0000:0000:0003',
    ]) {
      const l = lines(a);
      expect(
        l.some((x) => x.includes(' tcp ') && x.includes('ESTABLISHED')),
        `${a} tcp in\n${table()}`,
      ).toBe(true);
      expect(
        l.some((x) => x.includes(' udp ')),
        `${a} udp in\n${table()}`,
      ).toBe(true);
    }
    expect(nl.conntrackFlush(['10.77.0.1', 'fd77::1'])).toBeGreaterThanOrEqual(4);
    expect(lines('10.77.0.1')).toEqual([]);
    expect(lines('fd77:0000:0000:0000:0000:0000:0000:0001')).toEqual([]);
    expect(lines('10.77.0.3').length).toBeGreaterThanOrEqual(2);
    expect(lines('fd77:0000:0000:0000:0000:0000:0000:0003').length).toBeGreaterThanOrEqual(2);
    // Nothing left to delete: idempotent.
    expect(nl.conntrackFlush('10.77.0.1')).toBe(0);
    // The server's own address is in every entry's reply tuple: all of them go.
    expect(nl.conntrackFlush('10.77.0.2')).toBeGreaterThanOrEqual(2);
    expect(lines('10.77.0.3')).toEqual([]);
  });

  it('refuses a bad address naming the field', () => {
    expect(() => nl.conntrackFlush(['10.77.0.1', 'nope'])).toThrow(/conntrackFlush.*addrs\.1/);
    expect(() => nl.conntrackFlush(42 as never)).toThrow(/conntrackFlush.*addrs/);
    expect(nl.conntrackFlush([])).toBe(0);
  });
});

// After the flushes above, only fd77::3's entries are left (its TCP connection and UDP flow).
describe('conntrackList and conntrackDelete', () => {
  const V6 = 'fd77:0000:0000:0000:0000:0000:0000:0003';
  it('lists the entries of an address with their tuples and deletes only the ones chosen', () => {
    const all = nl.conntrackList(['fd77::3']);
    const tcp = all.filter((e) => e.protocol === 6);
    const udp = all.filter((e) => e.protocol === 17);
    expect(tcp.map((e) => [e.family, e.src, e.dst, e.dport, e.replySrc, e.replyDport])).toEqual([
      [6, 'fd77::3', 'fd77::2', 8080, 'fd77::2', tcp[0]?.sport],
    ]);
    expect(udp.map((e) => [e.src, e.dst, e.dport])).toEqual([['fd77::3', 'fd77::2', 8081]]);
    // Listing deletes nothing.
    expect(lines(V6).length).toBe(2);
    expect(nl.conntrackDelete(tcp.map((e) => e.key))).toBe(1);
    expect(lines(V6).filter((l) => l.includes(' tcp '))).toEqual([]);
    expect(lines(V6).filter((l) => l.includes(' udp ')).length).toBe(1);
    // Gone already: not deleted again, not counted.
    expect(nl.conntrackDelete(tcp.map((e) => e.key))).toBe(0);
    expect(nl.conntrackList('10.77.0.1')).toEqual([]);
  });

  it('refuses what is not a key it gave, naming the field', () => {
    const [u] = nl.conntrackList(['fd77::3']);
    expect(() => nl.conntrackDelete([u!.key, Buffer.alloc(20)])).toThrow(/conntrackDelete.*keys\.1/);
    expect(() => nl.conntrackDelete([u!.key.subarray(0, u!.key.length - 4)])).toThrow(/conntrackDelete.*keys\.0/);
    expect(() => nl.conntrackDelete('x' as never)).toThrow(/conntrackDelete.*keys/);
    expect(() => nl.conntrackList(['nope'])).toThrow(/conntrackList.*addrs\.0/);
    // Nothing was deleted by the refused calls.
    expect(lines(V6).length).toBe(1);
    expect(nl.conntrackDelete([])).toBe(0);
  });
});
