// Host endpoints on the Kubernetes datastore (the fake API server serving the
// repository's CRDs, HostEndpoint and AgentConfiguration among them): the
// agent of the policy harness enforces a named-interface host endpoint on a
// veth of this test's namespace, and failsafe ports changed through an
// AgentConfiguration custom resource take effect live. The full set of cases
// runs on etcd and three nodes (host-endpoints.test.ts).
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_VERSION, type Resource } from '../../src/model/resources.js';
import { assertThrowawayHostNetns } from '../support/cni.js';
import { createNetns, deleteHostLink, deleteNetns } from '../support/netns.js';
import { putObject, startPolicyEnv, type PolicyEnv } from '../support/policy-harness.js';
import { NODE } from '../support/plugin-harness.js';

const POOL = { name: 'hep-kdd', cidr: '10.171.64.0/26', blockSize: 26 };
const HOST_IF = 'hepk0';
const HOST_IP = '10.171.250.1';
const PORT = 18080;
let env: PolicyEnv;
let client: string;
let server: ChildProcess;

function tcp(): boolean {
  const r = spawnSync(
    'ip',
    ['netns', 'exec', client, 'timeout', '1.5', 'bash', '-c', `exec 3<>/dev/tcp/${HOST_IP}/${PORT}`],
    { stdio: 'ignore' },
  );
  return r.status === 0;
}

async function becomes(what: string, want: boolean, ms = 30_000): Promise<void> {
  const end = Date.now() + ms;
  while (tcp() !== want) {
    if (Date.now() > end)
      throw new Error(
        `${what}: not within ${ms} ms\n${execFileSync('nft', ['list', 'table', 'inet', env.table], { encoding: 'utf8' })}`,
      );
    await new Promise((r) => setTimeout(r, 300));
  }
}

beforeAll(async () => {
  assertThrowawayHostNetns();
  env = await startPolicyEnv(POOL, 'npl', { mode: 'kubernetes' });
  client = createNetns('hepk').name;
  execFileSync('ip', ['link', 'add', HOST_IF, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', client]);
  execFileSync('ip', ['addr', 'add', `${HOST_IP}/30`, 'dev', HOST_IF]);
  execFileSync('ip', ['link', 'set', HOST_IF, 'up']);
  execFileSync('ip', ['-n', client, 'addr', 'add', '10.171.250.2/30', 'dev', 'eth0']);
  execFileSync('ip', ['-n', client, 'link', 'set', 'eth0', 'up']);
  server = spawn(
    process.execPath,
    ['-e', `require('net').createServer((s) => s.end()).listen(${PORT}, '${HOST_IP}', () => console.log('up'))`],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  await new Promise<void>((r) => server.stdout!.once('data', () => r()));
}, 120_000);

afterAll(async () => {
  server?.kill('SIGKILL');
  if (client) deleteNetns(client);
  deleteHostLink(HOST_IF);
  await env?.close();
}, 60_000);

describe('host endpoints on the Kubernetes datastore', { timeout: 120_000 }, () => {
  it('a host endpoint closes its interface; AgentConfiguration failsafe ports open it live', async () => {
    await becomes('open without a host endpoint', true);
    const hep: Resource<'HostEndpoint'> = {
      apiVersion: API_VERSION,
      kind: 'HostEndpoint',
      metadata: { name: 'node1-hepk0' },
      spec: { node: NODE, interfaceName: HOST_IF, expectedIPs: [HOST_IP] },
    };
    await putObject(env, hep);
    await becomes('closed by the host endpoint', false);
    const conf: Resource<'AgentConfiguration'> = {
      apiVersion: API_VERSION,
      kind: 'AgentConfiguration',
      metadata: { name: 'default' },
      spec: { failsafeInboundHostPorts: [{ protocol: 'TCP', port: PORT }] },
    };
    await putObject(env, conf);
    await becomes('open by the failsafe port', true);
    // A node's own configuration wins over default: an empty list turns failsafe off on this node.
    await putObject(env, { ...conf, metadata: { name: `node.${NODE}` }, spec: { failsafeInboundHostPorts: [] } });
    await becomes('closed again', false);
    await env.ds.delete('HostEndpoint', hep.metadata.name);
    await becomes('open without the host endpoint', true);
    expect(tcp()).toBe(true);
  });
});
