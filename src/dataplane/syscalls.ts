// The addon's calls that are no networking but still the kernel's: the peer
// credentials of a unix socket (the agent's CNI server) and flock(2) (the
// plugins' host locks, hostlock/). Everything above dataplane/ reaches the
// addon through dataplane/; the addon itself loads on the first call.
import { addonInstance, peerCred as addonPeerCred, type PeerCred } from '../native/index.js';

export type { PeerCred };

/** The credentials of the process at the other end of a connected unix socket fd (SO_PEERCRED). */
export function peerCred(fd: number): PeerCred {
  return addonPeerCred(fd);
}

/** flock(fd, LOCK_EX | LOCK_NB): true when taken, false when another open file holds it. */
export function flockTry(fd: number): boolean {
  return addonInstance().flockTry(fd);
}

/**
 * flock(fd, LOCK_EX) on a thread of its own, bounded: true when taken, false
 * when `timeoutMs` passed first; `subject` names the file in errors.
 */
export function flockWait(fd: number, timeoutMs: number, subject: string): Promise<boolean> {
  return addonInstance().flockWait(fd, timeoutMs, subject);
}
