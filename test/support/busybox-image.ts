// The container image the runtime tests run, built here without a registry:
// a rootfs of busybox-static (Debian's /bin/busybox) with a page for httpd, as
// a plain tar (podman imports that) or an OCI image layout archive (containerd
// imports that with `ctr images import`).
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export const PAGE = 'served by netplugin pod\n';
const APPLETS = ['sh', 'ping', 'sleep', 'httpd', 'nc', 'printf', 'tail', 'cat', 'ip'];

/** Builds `<dir>/rootfs` and its tar `<dir>/busybox.tar`; returns the tar's path. */
export function busyboxRootfsTar(dir: string): string {
  const rootfs = join(dir, 'rootfs');
  mkdirSync(join(rootfs, 'bin'), { recursive: true });
  mkdirSync(join(rootfs, 'www'));
  cpSync('/bin/busybox', join(rootfs, 'bin/busybox'));
  for (const a of APPLETS) symlinkSync('busybox', join(rootfs, 'bin', a));
  writeFileSync(join(rootfs, 'www/index.html'), PAGE);
  const tar = join(dir, 'busybox.tar');
  // Fixed owner and time: the layer's digest is the same on every build.
  execFileSync('tar', ['-C', rootfs, '--owner=0', '--group=0', '--mtime=@0', '--sort=name', '-cf', tar, '.']);
  return tar;
}

const OCI_ARCH: Partial<Record<string, string>> = { x64: 'amd64', arm64: 'arm64' };

/**
 * An OCI image layout archive of one uncompressed layer (`layerTar`) named
 * `name` (the `io.containerd.image.name` annotation ctr import reads), whose
 * default command is `cmd`. Returns the archive's path (`<dir>/oci-image.tar`).
 */
export function ociArchive(dir: string, layerTar: string, name: string, cmd: string[]): string {
  const layout = join(dir, 'oci');
  const blobs = join(layout, 'blobs/sha256');
  mkdirSync(blobs, { recursive: true });
  const blob = (data: Buffer, mediaType: string) => {
    const hex = createHash('sha256').update(data).digest('hex');
    writeFileSync(join(blobs, hex), data);
    return { mediaType, digest: `sha256:${hex}`, size: data.length };
  };
  const layerData = readFileSync(layerTar);
  const layer = blob(layerData, 'application/vnd.oci.image.layer.v1.tar');
  const architecture = OCI_ARCH[process.arch] ?? process.arch;
  const imageConfig = {
    architecture,
    os: 'linux',
    config: { Env: ['PATH=/bin'], Cmd: cmd },
    rootfs: { type: 'layers', diff_ids: [layer.digest] },
  };
  const config = blob(Buffer.from(JSON.stringify(imageConfig)), 'application/vnd.oci.image.config.v1+json');
  const MANIFEST = 'application/vnd.oci.image.manifest.v1+json';
  const manifestData = { schemaVersion: 2, mediaType: MANIFEST, config, layers: [layer] };
  const manifest = blob(Buffer.from(JSON.stringify(manifestData)), MANIFEST);
  const annotations = { 'io.containerd.image.name': name };
  const platform = { architecture, os: 'linux' };
  const index = { schemaVersion: 2, manifests: [{ ...manifest, platform, annotations }] };
  writeFileSync(join(layout, 'index.json'), JSON.stringify(index));
  writeFileSync(join(layout, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
  const out = join(dir, 'oci-image.tar');
  execFileSync('tar', ['-C', layout, '-cf', out, 'oci-layout', 'index.json', 'blobs']);
  return out;
}
