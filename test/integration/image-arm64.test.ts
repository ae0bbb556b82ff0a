// The arm64 netplugin/node image, assembled as `scripts/build-image --arch arm64` does on this
// amd64 machine (Debian's arm64 packages, Node for linux-arm64, the package's arm64 prebuilds,
// `podman import --arch arm64`). Nothing of it can run here: it is checked as an image (architecture,
// entry point, labels) and as ELF (every binary AArch64, its interpreter and every library it
// needs present in the image, no x86-64 file left).
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { assertThrowawayHostNetns } from '../support/cni.js';
import { podmanSession, writeContainersConf } from '../support/podman.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const { version } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
let tmp: string;

beforeAll(() => {
  assertThrowawayHostNetns();
  tmp = mkdtempSync(join(tmpdir(), `image-arm64-${process.pid}-`));
  writeContainersConf(tmp, { binDir: join(tmp, 'bin'), confDir: join(tmp, 'net.d') });
});
afterAll(() => {
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

const BINARIES = [
  'usr/bin/node',
  'usr/bin/busybox',
  'usr/sbin/nft',
  'usr/lib/aarch64-linux-gnu/libnftables.so.1',
  'usr/lib/cni/portmap',
  'usr/lib/cni/host-local',
  'usr/sbin/bird',
  'usr/sbin/birdc',
  'opt/netplugin/prebuilds/linux-arm64/netplugin.node',
  'opt/netplugin/prebuilds/linux-arm64/netplugin-shim',
];

const SCRIPT = `
cd "$ROOT"
PODMAN_FLAGS="$PODMAN_FLAGS" bash scripts/build-image --arch arm64 >/dev/null 2>"$T/build.log" || { echo "BUILD failed"; tail -20 "$T/build.log"; exit 0; }
echo "BUILD ok"
IMG=localhost/netplugin/node:$VERSION-arm64
echo "IMAGE $($P image inspect --format '{{json .Architecture}} {{json .Os}} {{json .Config.Entrypoint}}' $IMG)"
echo "LABELS $($P image inspect --format '{{json .Labels}}' $IMG)"
m=$($P image mount $IMG)
for f in $BINARIES; do
  echo "ELF $f $(readelf -h "$m/$f" | sed -n 's/^ *Machine: *//p')"
  for l in $(readelf -d "$m/$f" | sed -n 's/.*Shared library: \\[\\(.*\\)\\]/\\1/p'); do
    [ -e "$m/usr/lib/aarch64-linux-gnu/$l" ] || [ -e "$m/usr/lib/$l" ] || echo "MISSING $f needs $l"
  done
  i=$(readelf -l "$m/$f" | sed -n 's/.*program interpreter: \\(.*\\)\\]/\\1/p')
  [ -z "$i" ] || [ -e "$m$i" ] || echo "MISSING $f interpreter $i"
done
echo "XEIGHTYSIX $(find "$m/usr/bin" "$m/usr/sbin" "$m/usr/lib" "$m/opt/netplugin" -type f \\( -perm -u+x -o -name '*.so*' -o -name '*.node' \\) -exec file {} + | grep -c 'x86-64' || true)"
echo "NODEJS $(sed -n 's/.*"engines".*//p' "$m/opt/netplugin/package.json" | head -1)$(test -x "$m/usr/bin/node" && echo node-present)"
$P image unmount $IMG >/dev/null
`;

it('assembles an arm64 image whose binaries are all AArch64 ELF with their libraries present', {
  timeout: 300_000,
}, async () => {
  // The commit the build sees (read before it: a commit meanwhile would change HEAD).
  const head = execFileSync('git', ['-C', ROOT, 'rev-parse', 'HEAD'], { encoding: 'utf8' }).trim();
  const { stdout, keys } = await podmanSession(tmp, SCRIPT, { ROOT, VERSION: version, BINARIES: BINARIES.join(' ') });
  expect(keys.BUILD, stdout).toBe('ok');
  expect(keys.IMAGE).toBe('"arm64" "linux" ["node","/opt/netplugin/dist/netplugin-node.cjs"]');
  const labels = JSON.parse(keys.LABELS!) as Record<string, string>;
  expect(labels['org.opencontainers.image.version']).toBe(version);
  expect(labels['org.opencontainers.image.revision']).toMatch(new RegExp(`^${head}(-dirty)?$`));
  const lines = stdout.split('\n');
  for (const f of BINARIES) expect(lines, stdout).toContain(`ELF ${f} AArch64`);
  expect(
    lines.filter((l) => l.startsWith('MISSING')),
    stdout,
  ).toEqual([]);
  expect(keys.XEIGHTYSIX, stdout).toBe('0');
  expect(keys.NODEJS).toContain('node-present');
});
