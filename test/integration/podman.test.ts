// podman 4 (Debian's, CNI backend) running containers on a netplugin network,
// inside the throwaway host namespace of scripts/in-netns: an image imported
// from a busybox-static rootfs tar (no registry), two containers that reach
// each other, a published port, and a teardown that leaves no address, veth
// or endpoint behind. podman's configuration, storage and network config dir
// are temporary (test/support/podman.ts).
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCtl } from '../../src/ctl/index.js';
import { assertThrowawayHostNetns } from '../support/cni.js';
import { busyboxRootfsTar, PAGE } from '../support/busybox-image.js';
import { podmanSession, writeContainersConf } from '../support/podman.js';
import { ensureBuilt, hostLinksWithPrefix, startCluster, type Cluster } from '../support/plugin-harness.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const NET = 'np-podman';
const PREFIX = 'npq';
const HOST_ADDR = '10.255.77.1';
let c: Cluster;
let tmp: string;

beforeAll(async () => {
  assertThrowawayHostNetns();
  ensureBuilt();
  tmp = mkdtempSync(join(tmpdir(), `podman-${process.pid}-`));
  // The image: busybox-static and a page for httpd, as a rootfs tar.
  busyboxRootfsTar(tmp);

  c = await startCluster([{ name: 'podman-v4', cidr: '10.77.90.0/24', blockSize: 28 }]);
  // install-cni as docs/runtimes.md says, into podman's temporary directories.
  let err = '';
  const code = await runCtl(
    [
      'install-cni',
      '--bin-dir',
      join(tmp, 'bin'),
      '--conf-dir',
      join(tmp, 'net.d'),
      '--network-name',
      NET,
      '--etcd-endpoints',
      c.etcd.endpoint,
      '--nodename',
      'node1',
      '--log-file-path',
      '',
    ],
    {
      env: {},
      stdout: () => {},
      stderr: (s) => (err += s),
      packageDir: ROOT,
      nodePath: process.execPath,
      inPod: false,
    },
  );
  expect(err).toBe('');
  expect(code).toBe(0);
  // Per-test settings: a veth prefix of our own and the cluster's lock file.
  const file = join(tmp, 'net.d/10-netplugin.conflist');
  const conf = JSON.parse(readFileSync(file, 'utf8'));
  Object.assign(conf.plugins[0], { host_veth_prefix: PREFIX, ipam_lock_file: c.lockFile });
  writeFileSync(file, JSON.stringify(conf, null, 2));
  writeContainersConf(tmp, { binDir: join(tmp, 'bin'), confDir: join(tmp, 'net.d') });
}, 120_000);

afterAll(async () => {
  await c?.close();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/** The whole podman session (after PODMAN_PREAMBLE); KEY value lines on stdout. */
const SCRIPT = `
$P import $T/busybox.tar localhost/np-busybox:test >/dev/null
echo "BACKEND $($P info --format '{{.Host.NetworkBackend}}')"
echo "NETWORKS $($P network ls --format '{{.Name}}' | tr '\\n' ' ')"
$P run -d $R --name web --network $NET -p 8080:80 localhost/np-busybox:test httpd -f -p 80 -h /www >/dev/null
IP=$($P inspect web --format '{{(index .NetworkSettings.Networks "'$NET'").IPAddress}}')
echo "WEBIP $IP"
echo "HOSTVETHS $(ip -o link show | grep -c "$PREFIX" || true)"
# Up to three echo requests within 10 s: the first can go out before the new pod's path is up.
# Unnamed: podman passes its generated container name (adjective_name, with an
# underscore) as K8S_POD_NAME and K8S_POD_NAMESPACE; the plugin accepts it.
if $P run --rm $R --network $NET localhost/np-busybox:test ping -c1 -W5 "$IP" >/dev/null; then echo "PING ok"; else echo "PING failed"; fi
# busybox's wget crashes on this machine; nc speaks HTTP/1.0 well enough.
echo "FROMPOD $($P run --rm $R --name fetcher --network $NET localhost/np-busybox:test sh -c "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 $IP 80" | tail -1 || echo failed)"
ip addr add $HOST_ADDR/32 dev lo
echo "PUBLISHED $(curl -s --max-time 5 http://$HOST_ADDR:8080/ || echo failed)"
ip addr del $HOST_ADDR/32 dev lo
$P rm -f web >/dev/null
echo "AFTERVETHS $(ip -o link show | grep -c "$PREFIX" || true)"
echo "CONTAINERS $($P ps -a --format '{{.Names}}' | wc -l)"
`;

describe('podman 4 with the CNI backend on a netplugin network', () => {
  it('two containers reach each other, a published port answers, and teardown leaves nothing', async () => {
    const { keys: out } = await podmanSession(tmp, SCRIPT, { NET, PREFIX, HOST_ADDR });
    expect(out.BACKEND).toBe('cni');
    expect(out.NETWORKS!.split(' ')).toContain(NET);
    expect(out.WEBIP).toMatch(/^10\.77\.90\.\d+$/);
    expect(Number(out.HOSTVETHS)).toBe(1);
    expect(out.PING).toBe('ok');
    expect(out.FROMPOD).toBe(PAGE.trim());
    expect(out.PUBLISHED).toBe(PAGE.trim());
    expect(out.AFTERVETHS).toBe('0');
    expect(out.CONTAINERS).toBe('0');
    // The datastore agrees: no endpoint, no address held.
    expect((await c.ds.list('WorkloadEndpoint')).items).toEqual([]);
    const blocks = (await c.ds.list('IPAMBlock')).items;
    expect(blocks.flatMap((b) => b.spec.allocations.filter((a) => a !== null))).toEqual([]);
    expect(hostLinksWithPrefix(PREFIX)).toEqual([]);
  });
});
