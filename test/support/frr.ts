// FRR's bgpd (with zebra, which installs what bgpd learns into the kernel) as a
// "top-of-rack" router inside a namespace: an independent BGP implementation
// for the BIRD the agent runs to peer with. Its config, sockets and pid files
// live in a directory of the test's; FRR drops to its own user, so that
// directory (and the path to it) must be reachable by user frr.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { inNetns } from './netns.js';

export interface FrrNeighbor {
  ip: string;
  asNumber: number;
  /** The neighbor is not on a directly connected subnet. */
  multihop?: boolean;
  password?: string;
}

export interface Frr {
  dir: string;
  vtysh(cmd: string): string;
  /** The kernel routes bgpd learned (zebra installed them as proto bgp). */
  routes(): string;
  stop(): Promise<void>;
}

export async function startFrr(o: {
  ns: string;
  dir: string;
  routerId: string;
  asNumber: number;
  neighbors: FrrNeighbor[];
}): Promise<Frr> {
  const dir = o.dir;
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'zebra.conf'), '');
  writeFileSync(
    join(dir, 'bgpd.conf'),
    [
      'frr defaults traditional',
      'hostname tor',
      `router bgp ${o.asNumber}`,
      ` bgp router-id ${o.routerId}`,
      ' no bgp ebgp-requires-policy',
      ' bgp graceful-restart',
      ' bgp graceful-restart restart-time 60',
      ...o.neighbors.flatMap((n) => [
        ` neighbor ${n.ip} remote-as ${n.asNumber}`,
        ` neighbor ${n.ip} timers connect 1`,
        ...(n.multihop ? [` neighbor ${n.ip} ebgp-multihop 4`] : []),
        ...(n.password ? [` neighbor ${n.ip} password ${n.password}`] : []),
      ]),
      ' address-family ipv4 unicast',
      '  redistribute connected',
      ' exit-address-family',
      '',
    ].join('\n'),
  );
  // FRR drops to its own user; its files must be its own.
  execFileSync('chown', ['-R', 'frr:frr', dir]);
  chmodSync(dir, 0o755);
  const daemons: ChildProcess[] = [];
  const common = ['--vty_socket', dir, '-z', join(dir, 'zserv.api'), '-u', 'frr', '-g', 'frr', '-P', '0'];
  daemons.push(
    spawn(
      'ip',
      [
        'netns',
        'exec',
        o.ns,
        '/usr/lib/frr/zebra',
        '-f',
        join(dir, 'zebra.conf'),
        '-i',
        join(dir, 'zebra.pid'),
        ...common,
      ],
      { stdio: 'ignore' },
    ),
  );
  await new Promise((r) => setTimeout(r, 500));
  daemons.push(
    spawn(
      'ip',
      [
        'netns',
        'exec',
        o.ns,
        '/usr/lib/frr/bgpd',
        '-f',
        join(dir, 'bgpd.conf'),
        '-i',
        join(dir, 'bgpd.pid'),
        ...common,
      ],
      { stdio: 'ignore' },
    ),
  );
  const frr: Frr = {
    dir,
    vtysh: (cmd) => execFileSync('vtysh', ['--vty_socket', dir, '-d', 'bgpd', '-c', cmd], { encoding: 'utf8' }),
    routes: () => inNetns(o.ns, 'ip', ['-4', 'route', 'show', 'proto', 'bgp']),
    async stop() {
      for (const d of daemons) d.kill('SIGTERM');
      await Promise.all(
        daemons.map((d) => (d.exitCode !== null || d.signalCode ? undefined : new Promise((r) => d.once('exit', r)))),
      );
    },
  };
  const end = Date.now() + 30_000;
  while (!/:179\b/.test(inNetns(o.ns, 'ss', ['-ltn']))) {
    if (Date.now() > end) {
      await frr.stop();
      throw new Error('bgpd did not listen on port 179 within 30 s');
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return frr;
}
