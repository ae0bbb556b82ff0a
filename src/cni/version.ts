// CNI spec version handling: which version a netconf asks for, and which
// commands exist in which version.
import { CniError, ErrorCodes } from '../errors.js';
import { SUPPORTED_VERSIONS, type CniCommand, type CniVersion } from './types.js';

export const HIGHEST_VERSION: CniVersion = SUPPORTED_VERSIONS[SUPPORTED_VERSIONS.length - 1]!;

/** Numeric triple of a semver-ish "x.y.z"; undefined when it is not one. */
export function parseSemver(v: string): [number, number, number] | undefined {
  const m = /^(\d+)\.(\d+)\.(\d+)$/.exec(v);
  return m ? [Number(m[1]), Number(m[2]), Number(m[3])] : undefined;
}

/** <0, 0, >0 like a comparator; unparsable versions sort lowest. */
export function compareVersions(a: string, b: string): number {
  const x = parseSemver(a) ?? [-1, -1, -1];
  const y = parseSemver(b) ?? [-1, -1, -1];
  for (let i = 0; i < 3; i++) if (x[i] !== y[i]) return x[i]! - y[i]!;
  return 0;
}

export function isSupportedVersion(v: unknown): v is CniVersion {
  return typeof v === 'string' && (SUPPORTED_VERSIONS as readonly string[]).includes(v);
}

function unsupported(what: string): CniError {
  return new CniError(
    ErrorCodes.IncompatibleVersion,
    `incompatible CNI versions: the netconf asks for ${what}; netplugin supports ${SUPPORTED_VERSIONS.join(', ')}`,
    `set "cniVersion" in the network configuration to one of ${SUPPORTED_VERSIONS.join(', ')} (e.g. ` +
      `"${HIGHEST_VERSION}")`,
  );
}

/**
 * The version a netconf is answered in. CNI 1.1 lets a configuration list
 * carry `cniVersions`; the highest one we support wins. Runtimes that predate
 * 1.1 only read `cniVersion`, so that is the fallback. A missing cniVersion
 * means 0.1.0/0.2.0 to libcni (its result decoder maps "" to the 0.2.0 types),
 * which we do not speak, so it is an error rather than a silent guess.
 */
export function negotiateVersion(raw: Record<string, unknown>): CniVersion {
  const list = raw['cniVersions'];
  if (list !== undefined) {
    if (!Array.isArray(list) || list.some((v) => typeof v !== 'string')) {
      throw new CniError(
        ErrorCodes.InvalidNetworkConfig,
        `cniVersions: got ${JSON.stringify(list)}; expected an array of version strings such as ["1.0.0", "1.1.0"]`,
      );
    }
    const ours = (list as string[]).filter(isSupportedVersion).sort(compareVersions);
    if (ours.length > 0) return ours[ours.length - 1]!;
    if (raw['cniVersion'] === undefined) throw unsupported(`cniVersions ${JSON.stringify(list)}`);
  }
  const v = raw['cniVersion'];
  if (v === undefined || v === '') throw unsupported('no cniVersion (read by runtimes as 0.1.0)');
  if (typeof v !== 'string') {
    throw new CniError(
      ErrorCodes.InvalidNetworkConfig,
      `cniVersion: got ${typeof v} ${JSON.stringify(v)}; expected a version string such as "${HIGHEST_VERSION}" ` +
        `(quoted)`,
    );
  }
  if (!isSupportedVersion(v)) throw unsupported(`cniVersion "${v}"`);
  return v;
}

/** Lowest spec version that defines each command (VERSION is in all of them). */
const COMMAND_SINCE: Record<CniCommand, CniVersion | undefined> = {
  ADD: undefined,
  DEL: undefined,
  VERSION: undefined,
  CHECK: '0.4.0',
  STATUS: '1.1.0',
  GC: '1.1.0',
};

/** Throws code 1 when the negotiated version predates the command (as libcni's skel does). */
export function assertCommandAllowed(command: CniCommand, version: CniVersion): void {
  const since = COMMAND_SINCE[command];
  if (since && compareVersions(version, since) < 0) {
    throw new CniError(
      ErrorCodes.IncompatibleVersion,
      `config version does not allow ${command}: ${command} needs cniVersion ${since} or later, the netconf says ` +
        `${version}`,
      `set "cniVersion" to ${SUPPORTED_VERSIONS.filter((s) => compareVersions(s, since) >= 0).join(' or ')} to use ` +
        `${command}`,
    );
  }
}
