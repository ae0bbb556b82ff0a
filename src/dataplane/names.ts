// Interface naming and the host veth's IPv6 link-local address.
import { createHash } from 'node:crypto';

/** Linux IFNAMSIZ - 1. */
const MAX_IFNAME = 15;
const HASH_CHARS = 11;

/**
 * The host-side veth name: `prefix` + the first 11 hex chars of sha1(key), where key is
 * `<namespace>.<pod>` for Kubernetes pods and the container ID otherwise. Stable across
 * restarts of the same pod, so a re-ADD finds (and replaces) a stale veth.
 */
export function hostVethName(prefix: string, key: string): string {
  if (typeof prefix !== 'string' || !/^[A-Za-z0-9_-]{1,4}$/.test(prefix)) {
    throw new TypeError(
      `hostVethName: prefix must be 1-${MAX_IFNAME - HASH_CHARS} characters of [A-Za-z0-9_-] (so the name fits in ` +
        `${MAX_IFNAME} bytes), got ${JSON.stringify(prefix)}; use the default 'npi'`,
    );
  }
  if (typeof key !== 'string' || key === '') {
    throw new TypeError(
      `hostVethName: key must be a non-empty string ('<namespace>.<pod>' or the container ID), got ` +
        `${JSON.stringify(key)}`,
    );
  }
  return prefix + createHash('sha1').update(key).digest('hex').slice(0, HASH_CHARS);
}

/**
 * The key of a workload's host veth name (hostVethName): `<namespace>.<pod>` for a Kubernetes
 * pod, the container ID otherwise. Whoever needs a workload's host veth (ADD, GC, the policy
 * agent) derives it from the workload's identity with this, never from a recorded name.
 */
export function hostVethKey(w: {
  orchestrator: string;
  namespace?: string | undefined;
  pod?: string | undefined;
  containerID: string;
}): string {
  return w.orchestrator === 'k8s' && w.pod && w.namespace ? `${w.namespace}.${w.pod}` : w.containerID;
}

/**
 * The EUI-64 link-local address the kernel derives from a MAC (RFC 4291 appendix A):
 * ee:ee:ee:ee:ee:ee -> fe80::ecee:eeff:feee:eeee.
 */
export function linkLocalFromMac(mac: string): string {
  const b = mac.split(':').map((x) => parseInt(x, 16));
  if (b.length !== 6 || b.some((x) => !(x >= 0 && x <= 255)))
    throw new TypeError(`linkLocalFromMac: not a MAC address: ${JSON.stringify(mac)}`);
  const e = [b[0]! ^ 0x02, b[1]!, b[2]!, 0xff, 0xfe, b[3]!, b[4]!, b[5]!];
  const groups: string[] = [];
  for (let i = 0; i < 8; i += 2) groups.push(((e[i]! << 8) | e[i + 1]!).toString(16));
  return `fe80::${groups.join(':')}`;
}
