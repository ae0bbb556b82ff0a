// The package version, inlined by the bundler so the installed CLI needs no
// package.json at run time, and the rule that a client older than the cluster
// must not write (docs/upgrade.md: old clients are not used after an upgrade).
import pkg from '../../package.json' with { type: 'json' };
import { compareVersions as compareSemver, parseSemver } from '../cni/version.js';
import type { Datastore } from '../datastore/types.js';
import { CtlError } from './io.js';
import { getIfExists } from '../datastore/cas.js';

export const NETPLUGIN_VERSION: string = pkg.version;

/** The repository of the one image every manifest runs; scripts/build-image tags `<registry>/` + this. */
export const NODE_IMAGE_REPOSITORY = 'netplugin/node';

/**
 * The node image of this release, as the manifests in deploy/ name it: `netplugin/node:<version>`, or
 * `<registry>/netplugin/node:<version>` (registry: a host[:port] with an optional path, e.g.
 * `registry.example.com:5000/infra`).
 */
export function nodeImage(registry?: string): string {
  if (registry === undefined) return `${NODE_IMAGE_REPOSITORY}:${NETPLUGIN_VERSION}`;
  const r = registry.replace(/\/+$/, '');
  if (!/^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:\d{1,5})?(\/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*$/.test(r)) {
    throw new CtlError(
      `--registry: ${JSON.stringify(registry)} is not a registry; expected a host with an optional port and path, ` +
        `such as registry.example.com:5000/infra`,
    );
  }
  return `${r}/${NODE_IMAGE_REPOSITORY}:${NETPLUGIN_VERSION}`;
}

/**
 * A release as written in ClusterInformation or by users (`v3.32.1`, `3.32`, `3.32.0-rc1`) in plain `x.y.z`; undefined
 * when not one.
 */
function normalize(v: string): string | undefined {
  const m = /^v?(\d+\.\d+)(\.\d+)?(?:[-+].*)?$/.exec(v.trim());
  return m ? `${m[1]}${m[2] ?? '.0'}` : undefined;
}

/** `v3.32.1`, `3.32.1`, `v3.32` → [3, 32, 1]; undefined when not a version. */
export function parseVersion(v: string): [number, number, number] | undefined {
  const n = normalize(v);
  return n ? parseSemver(n) : undefined;
}

/** <0 when a is older than b, 0 when equal, >0 when newer; undefined when either is not a version. */
export function compareVersions(a: string, b: string): number | undefined {
  const x = normalize(a);
  const y = normalize(b);
  return x && y ? compareSemver(x, y) : undefined;
}

/** The cluster version (ClusterInformation netpluginVersion), or undefined when the datastore has none. */
export async function clusterVersion(ds: Datastore): Promise<string | undefined> {
  return (await getIfExists(ds, 'ClusterInformation', 'default'))?.spec.netpluginVersion;
}

/** Throws when this client is older than the cluster: it would write data in an older release's shape. */
export async function refuseOlderClient(ds: Datastore, client = NETPLUGIN_VERSION): Promise<void> {
  const cluster = await clusterVersion(ds);
  if (cluster === undefined) return;
  const c = compareVersions(client, cluster);
  if (c !== undefined && c < 0) {
    throw new CtlError(
      `this netpluginctl is ${client} but the cluster runs ${cluster}: an older client must not write to an upgraded ` +
        `cluster; install netpluginctl ${cluster} (reads such as get and version still work)`,
    );
  }
}
