// BGPPeer spec.password.secretKeyRef on the Kubernetes datastore: the agent's
// BGP controller reads the Secret through the API (the fake API server, which
// stores a Secret as the real one does: stringData merged into base64 data)
// and writes the password to the root-only file BIRD includes, as it does for
// password.file; a missing key is a warning naming the Secret and the key, and
// only that peer is left out.
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeApiServer, writeKubeconfig, type FakeApiServer } from '../support/fake-apiserver.js';
import { createNetns, deleteNetns } from '../support/netns.js';
import { openDatastore } from '../../src/datastore/index.js';
import type { Datastore } from '../../src/datastore/types.js';
import { createKubeClient, type KubeClient } from '../../src/k8s/client.js';
import { readSecretKey, startBgpController, type BgpController } from '../../src/agent/bgp/index.js';
import { parseCidr } from '../../src/net/cidr.js';
import { API_VERSION, type Resource } from '../../src/model/resources.js';
import type { Logger } from '../../src/log/types.js';

const logs: string[] = [];
const line = (l: string) => (m: string) => logs.push(`${l} ${m}`);
const log: Logger = { error: line('E'), warn: line('W'), info: () => undefined, debug: () => undefined };
const tmp = mkdtempSync(join(tmpdir(), 'bgp-secret-'));
const runDir = join(tmp, 'run');
let server: FakeApiServer;
let ds: Datastore;
let client: KubeClient;
let ns = '';
let ctl: BgpController | undefined;

const res = <K extends 'Node' | 'IPPool' | 'BGPPeer'>(kind: K, name: string, spec: Resource<K>['spec']): Resource<K> =>
  ({ apiVersion: API_VERSION, kind, metadata: { name }, spec }) as Resource<K>;

async function until(what: string, fn: () => boolean, ms = 30_000): Promise<void> {
  const end = Date.now() + ms;
  while (!fn()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}; log:\n${logs.slice(-10).join('\n')}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

beforeAll(async () => {
  server = await startFakeApiServer({});
  const kubeconfig = writeKubeconfig(server.dir, server, {});
  ds = await openDatastore({ datastore_type: 'kubernetes', kubernetes: { kubeconfig }, timeoutMs: 10_000 });
  client = await createKubeClient({ kubeconfig });
  ns = createNetns('bgpsec').name;
  execFileSync('ip', ['-n', ns, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth1']);
  execFileSync('ip', ['-n', ns, 'addr', 'add', '10.203.0.1/24', 'dev', 'eth0']);
  execFileSync('ip', ['-n', ns, 'link', 'set', 'eth0', 'up']);
  const bin = join(tmp, 'bin');
  mkdirSync(bin);
  writeFileSync(join(bin, 'bird'), `#!/bin/sh\nexec ip netns exec ${ns} /usr/sbin/bird "$@"\n`);
  writeFileSync(join(bin, 'birdc'), '#!/bin/sh\nexec /usr/sbin/birdc "$@"\n');
  for (const f of ['bird', 'birdc']) chmodSync(join(bin, f), 0o755);
  await client.request('POST', '/api/v1/namespaces/kube-system/secrets', {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: 'bgp-passwords', namespace: 'kube-system' },
    stringData: { tor: 'from-the-Secret.1' },
  });
  await ds.create(res('Node', 'a', { ipv4Address: '10.203.0.1/24' }));
  await ds.create(
    res('IPPool', 'bgp', { cidr: '10.175.0.0/16', blockSize: 26, vxlanMode: 'Never', ipipMode: 'Never' }),
  );
  await ds.create(
    res('BGPPeer', 'tor', {
      peerIP: '10.203.0.254',
      asNumber: 65000,
      password: { secretKeyRef: { name: 'bgp-passwords', key: 'tor' } },
    }),
  );
  await ds.create(
    res('BGPPeer', 'no-key', {
      peerIP: '10.203.0.253',
      asNumber: 65000,
      password: { secretKeyRef: { name: 'bgp-passwords', key: 'nope' } },
    }),
  );
  ctl = startBgpController({
    ds,
    node: 'a',
    subnets: () => [parseCidr('10.203.0.0/24')],
    log,
    birdPath: join(bin, 'bird'),
    runDir,
    readSecret: (name, key) => readSecretKey(client, 'kube-system', name, key),
  });
});

afterAll(async () => {
  await ctl?.stop();
  await ds?.close();
  client?.close();
  await server?.stop();
  if (ns) deleteNetns(ns);
  rmSync(tmp, { recursive: true, force: true });
});

describe('BGPPeer password.secretKeyRef', () => {
  it('is read from the Secret through the API into the root-only file BIRD includes', async () => {
    const file = join(runDir, 'Global_10_203_0_254.password.conf');
    await until('the password file and BIRD running', () => existsSync(file) && ctl!.status().running);
    expect(readFileSync(file, 'utf8')).toBe('password "from-the-Secret.1";\n');
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(readFileSync(join(runDir, 'bird.conf'), 'utf8')).toContain(`include "${file}";`);
  });

  it('a missing key names the Secret and the key, and leaves only that peer out', async () => {
    await until('the warning', () =>
      logs.some((l) => l.includes('Secret kube-system/bgp-passwords has no key "nope"')),
    );
    expect(logs.join('\n')).toMatch(/BGPPeer no-key: .*its password could not be read/);
    const conf = readFileSync(join(runDir, 'bird.conf'), 'utf8');
    expect(conf).toContain('protocol bgp Global_10_203_0_254');
    expect(conf).not.toContain('10.203.0.253');
  });
});
