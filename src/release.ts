// netplugin's own release version (inlined by the bundler, so the installed
// executables need no package.json at run time) and how two releases compare,
// as ClusterInformation records them and users write them (`v3.32.1`, `3.32`,
// `3.32.0-rc1`). Below everything: the datastore's init, the CLI and the
// executables' --version all read it.
import pkg from '../package.json' with { type: 'json' };

export const NETPLUGIN_VERSION: string = pkg.version;

/** `v3.32.1`, `3.32.1`, `v3.32` → [3, 32, 1] (no patch: 0; a pre-release suffix is ignored); undefined when none. */
export function parseVersion(v: string): [number, number, number] | undefined {
  const m = /^v?(\d+)\.(\d+)(?:\.(\d+))?(?:[-+].*)?$/.exec(v.trim());
  return m ? [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)] : undefined;
}

/** <0 when a is older than b, 0 when equal, >0 when newer; undefined when either is not a version. */
export function compareVersions(a: string, b: string): number | undefined {
  const x = parseVersion(a);
  const y = parseVersion(b);
  if (!x || !y) return undefined;
  return x[0] - y[0] || x[1] - y[1] || x[2] - y[2];
}
