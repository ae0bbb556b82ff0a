// createIpam (src/ipam/service.ts): the one way other layers build IPAM, and
// the one rule for the node's lock path (hostLockPath, src/ipam/lock.ts).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { API_VERSION } from '../../src/model/resources.js';
import { DEFAULT_LOCK_PATH, LOCK_ENV, acquireHostLock, createIpam, hostLockPath, type AssignRequest } from '../../src/ipam/index.js';

const dir = mkdtempSync(join(tmpdir(), `ipam-service-${process.pid}-`));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function store(): Promise<MemoryDatastore> {
  const ds = new MemoryDatastore();
  await ds.create({ apiVersion: API_VERSION, kind: 'IPPool', metadata: { name: 'p' }, spec: { cidr: '10.71.0.0/24', blockSize: 26 } });
  return ds;
}
const req = (): AssignRequest => ({ handleID: `net.${Math.random().toString(16).slice(2)}`, node: 'n1', attrs: {}, assignIPv4: true, assignIPv6: false });

describe('hostLockPath', () => {
  it("takes the netconf's ipam_lock_file, else $NETPLUGIN_IPAM_LOCK_FILE, else the default", () => {
    expect(hostLockPath('/run/a.lock', { [LOCK_ENV]: '/run/b.lock' })).toBe('/run/a.lock');
    expect(hostLockPath(undefined, { [LOCK_ENV]: '/run/b.lock' })).toBe('/run/b.lock');
    expect(hostLockPath('', { [LOCK_ENV]: '' })).toBe(DEFAULT_LOCK_PATH);
  });
});

describe('createIpam', () => {
  it("with this node's lock: an assignment waits for the lock the path names (held here, so it times out naming it)", async () => {
    const path = join(dir, 'node.lock');
    const release = await acquireHostLock(path);
    try {
      const ipam = createIpam(await store(), { lock: { env: { [LOCK_ENV]: path } }, lockTimeoutMs: 300 });
      await expect(ipam.assign(req())).rejects.toThrow(`waiting for the IPAM host lock ${path}`);
      // Another path is another lock: not blocked.
      const other = createIpam(await store(), { lock: { file: join(dir, 'other.lock'), env: { [LOCK_ENV]: path } }, lockTimeoutMs: 300 });
      expect(await other.assign(req())).toHaveLength(1);
    } finally {
      await release();
    }
  });
});
