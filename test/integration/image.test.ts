// The netplugin/node image, built the way scripts/build-image builds it (base
// assembled from this machine's Debian packages, `npm pack`, podman build of
// deploy/Containerfile), and its two entry points run as the DaemonSet runs
// them: install-cni with the host's directories bound under /host, and the
// agent serving the CNI socket (bound to a temp dir) that the installed shim
// on the "host" then reaches; /healthz answers on the host network.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertThrowawayHostNetns } from '../support/cni.js';
import { podmanSession, writeContainersConf } from '../support/podman.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const { version } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
let tmp: string;

beforeAll(() => {
  assertThrowawayHostNetns();
  tmp = mkdtempSync(join(tmpdir(), `image-${process.pid}-`));
  for (const d of ['host', 'run']) mkdirSync(join(tmp, d));
  writeContainersConf(tmp, { binDir: join(tmp, 'bin'), confDir: join(tmp, 'net.d') });
});
afterAll(() => {
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

const SCRIPT = `
cd "$ROOT"
PODMAN_FLAGS="$PODMAN_FLAGS" BUILD_FLAGS="--ulimit nofile=1024:1024 --ulimit nproc=1024:1024" bash scripts/build-image >/dev/null 2>"$T/build.log" || { echo "BUILD failed"; tail -20 "$T/build.log"; exit 0; }
echo "BUILD ok"
IMG=localhost/netplugin/node:$VERSION
echo "LABELS $($P image inspect --format '{{json .Labels}}' $IMG)"
# One container for both (each run costs seconds): the agent's version, and BIRD where the agent's
# --bird-path default looks, with its libraries: it starts and birdc reaches it.
$P run --rm $R --network none --entrypoint sh $IMG -c 'echo "AGENTVERSION $(node /opt/netplugin/dist/netplugin-node.cjs --version)"
printf "router id 10.0.0.1;\\nprotocol device {}\\n" >/tmp/b.conf && /usr/sbin/bird -c /tmp/b.conf -s /tmp/b.ctl -P /tmp/b.pid && sleep 0.3
echo "BIRD $(/usr/sbin/birdc -s /tmp/b.ctl show status 2>&1 | tr "\\n" " ")"'
$P run --rm $R --network none -v $T/host:/host --entrypoint node $IMG /opt/netplugin/dist/netpluginctl.mjs install-cni --host-root=/host --etcd-endpoints http://127.0.0.1:2379 --nodename node-a >/dev/null
echo "INSTALLED $(ls $T/host/opt/cni/bin | tr '\\n' ' ')"
$P run -d $R --name agent --network host -v $T/run:/var/run/netplugin $IMG --socket=/var/run/netplugin/cni.sock --health-addr=127.0.0.1:19099 >/dev/null
for i in $(seq 1 100); do curl -sf http://127.0.0.1:19099/healthz >/dev/null && break; sleep 0.2; done
echo "HEALTHZ $(curl -s http://127.0.0.1:19099/healthz)"
echo "VIASHIM $(echo '{"cniVersion":"1.0.0"}' | CNI_COMMAND=VERSION NETPLUGIN_AGENT_SOCKET=$T/run/cni.sock $T/host/opt/cni/bin/netplugin)"
echo "AGENTLOG $($P logs agent 2>&1 | grep -c 'CNI request served' || true)"
$P rm -f agent >/dev/null
echo "CONTAINERS $($P ps -a --format '{{.Names}}' | wc -l)"
`;

describe('the netplugin/node image', () => {
  // One test builds an image with podman (a rootfs of Debian's packages, the bundles, the addon)
  // and runs two containers from it: mostly disk and tar work, 45-55 s on an idle 2-core machine and
  // over a minute with the CPUs busy, as the arm64 image test next to it; the bound is that test's.
  it('builds from a local base, and its install-cni and agent entry points work with host paths bound', {
    timeout: 360_000,
  }, async () => {
    // The commit the build sees (read before it: a commit meanwhile would change HEAD).
    const head = execFileSync('git', ['-C', ROOT, 'rev-parse', 'HEAD'], { encoding: 'utf8' }).trim();
    const { stdout, keys } = await podmanSession(tmp, SCRIPT, { ROOT, VERSION: version });
    expect(keys.BUILD, stdout).toBe('ok');
    expect(keys.AGENTVERSION).toBe(`netplugin-node ${version}`);
    expect(keys.BIRD).toMatch(/BIRD 2\.\d+\.\d+ .*Daemon is up and running/);
    // OCI labels: the version, the checkout's commit, where the source is.
    const labels = JSON.parse(keys.LABELS!) as Record<string, string>;
    expect(labels['org.opencontainers.image.version']).toBe(version);
    expect(labels['org.opencontainers.image.revision']).toMatch(new RegExp(`^${head}(-dirty)?$`));
    expect(labels['org.opencontainers.image.source']).toMatch(/^(file:\/\/\/|https?:\/\/|git@|ssh:\/\/)/);
    expect(keys.INSTALLED!.split(' ').sort()).toEqual(['netplugin', 'netplugin-ipam', 'netplugin.fallback']);
    // Host paths, never the image's; the host root has no node.
    expect(readFileSync(join(tmp, 'host/opt/cni/bin/netplugin.fallback'), 'utf8')).toBe('\n/opt/netplugin\n');
    expect(readFileSync(join(tmp, 'host/opt/netplugin/package.json'), 'utf8')).toContain(`"version": "${version}"`);
    const conf = JSON.parse(readFileSync(join(tmp, 'host/etc/cni/net.d/10-netplugin.conflist'), 'utf8'));
    expect(conf.plugins[0]).toMatchObject({
      type: 'netplugin',
      nodename: 'node-a',
      etcd_endpoints: 'http://127.0.0.1:2379',
    });
    expect(JSON.parse(keys.HEALTHZ!)).toMatchObject({ status: 'ok' });
    // The shim installed on the host reached the agent in the container.
    expect(JSON.parse(keys.VIASHIM!)).toMatchObject({
      cniVersion: '1.0.0',
      supportedVersions: expect.arrayContaining(['1.0.0']),
    });
    expect(Number(keys.AGENTLOG)).toBeGreaterThanOrEqual(1);
    expect(keys.CONTAINERS).toBe('0');
  });
});
