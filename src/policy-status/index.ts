// The policy-setup wait (docs/addresses-and-annotations.md, Installation
// linuxPolicySetupTimeoutSeconds -> netconf policy_setup_timeout_seconds):
// after the endpoint is written, the ADD holds the pod's containers back until
// the node agent reports the endpoint's policy programmed, or the timeout
// elapses, whichever comes first. A timeout is not an error: the ADD continues.
//
// Contract with the node agent (also in docs/addresses-and-annotations.md):
//   - directory: /var/run/netplugin/endpoint-status/ (netconf endpoint_status_dir)
//   - one file per endpoint, named statusFileName(endpointStatusKey(<namespace>,
//     <workload endpoint name>)): "<namespace>/<endpoint name>" percent-encoded
//     to a safe file name, plus ".json". The namespace is part of the key: an
//     endpoint name (<node>-k8s-<pod>-<ifname>) repeats across namespaces.
//   - content: JSON {"programmed": true, "at": "<RFC 3339 time>",
//     "endpoint": "<namespace>/<endpoint name>", "containerID": "<id>"}
//   - written atomically: a temp file whose name starts with "." in the same
//     directory, then rename(2) onto the final name (writePolicyStatus does this)
//   - removed by the agent when the endpoint goes away, and by the plugin
//     (clearPolicyStatus) before it writes a new endpoint, so a file left by an
//     earlier pod of the same name cannot release the new one early; a
//     containerID that differs from the one waited for is ignored for the same reason.
// In the agent path the agent passes an in-process ProgrammedSignal instead of
// (in addition to) the file.
import { mkdir, readFile, rename, unlink, writeFile } from 'node:fs/promises';
import { watch, type FSWatcher } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from '../log/types.js';

export const DEFAULT_STATUS_DIR = '/var/run/netplugin/endpoint-status';

export interface PolicyStatus {
  programmed: boolean;
  /** RFC 3339 time the agent finished programming. */
  at: string;
  endpoint?: string;
  containerID?: string;
}

/** In-process notification from the node agent (with the container ID programmed); returns an unsubscribe function. */
export interface ProgrammedSignal {
  onProgrammed(endpointKey: string, cb: (containerID: string) => void): () => void;
  /** False only when the agent's policy table surely has no entry for this pod interface name. */
  mayBeKnown?(hostIfname: string): boolean;
}

/**
 * An endpoint's identity for the status file and the signal: its namespace and
 * its name (which holds node, pod or container, and interface), as `<namespace>/<name>`.
 */
export function endpointStatusKey(namespace: string, endpointName: string): string {
  return `${namespace}/${endpointName}`;
}

/** Whether a status file name is one of this format (statusFileName of an endpointStatusKey). */
export function isStatusFileName(file: string): boolean {
  return file.endsWith('.json') && !file.startsWith('.') && file.includes('%2F');
}

export interface PolicyWaitOptions {
  /** endpointStatusKey() of the endpoint. */
  endpointKey: string;
  statusDir?: string;
  /** 0 or absent: no wait. */
  timeoutMs?: number;
  /** When set, a status file naming another container ID is ignored as stale. */
  containerId?: string;
  signal?: ProgrammedSignal;
  /** Fallback poll period; fs.watch can miss events (overlay/NFS, dir re-created). Default 100 ms. */
  pollIntervalMs?: number;
  log?: Logger;
}

export interface PolicyWaitResult {
  programmed: boolean;
  via?: 'file' | 'signal';
  /** Why programmed is false. */
  reason?: 'timeout' | 'disabled';
  waitedMs: number;
}

/** `<percent-encoded endpoint name>.json`; never contains '/', never starts with '.'. */
export function statusFileName(endpointKey: string): string {
  return encodeURIComponent(endpointKey).replace(/^\./, '%2E') + '.json';
}

export function statusFilePath(endpointKey: string, statusDir: string = DEFAULT_STATUS_DIR): string {
  return join(statusDir, statusFileName(endpointKey));
}

/** For the node agent (and tests standing in for it): atomic write of the status file. */
export async function writePolicyStatus(
  endpointKey: string,
  opts: { statusDir?: string; containerID?: string; programmed?: boolean } = {},
): Promise<string> {
  const dir = opts.statusDir ?? DEFAULT_STATUS_DIR;
  const status: PolicyStatus = {
    programmed: opts.programmed ?? true,
    at: new Date().toISOString(),
    endpoint: endpointKey,
  };
  if (opts.containerID) status.containerID = opts.containerID;
  const final = statusFilePath(endpointKey, dir);
  const tmp = join(dir, `.${statusFileName(endpointKey)}.${process.pid}.${Math.random().toString(36).slice(2)}`);
  const body = JSON.stringify(status) + '\n';
  // The directory is made when missing only (not a mkdir per pod).
  await writeFile(tmp, body, { mode: 0o644 }).catch(async (e: NodeJS.ErrnoException) => {
    if (e.code !== 'ENOENT') throw e;
    await mkdir(dir, { recursive: true, mode: 0o755 });
    await writeFile(tmp, body, { mode: 0o644 });
  });
  await rename(tmp, final);
  return final;
}

/** Remove an endpoint's status file (before writing a new endpoint; on DEL). Absent is fine. */
export async function clearPolicyStatus(endpointKey: string, statusDir: string = DEFAULT_STATUS_DIR): Promise<void> {
  // unlink, not rm({force}): one syscall on the per-pod path (rm stats first).
  await unlink(statusFilePath(endpointKey, statusDir)).catch((e: NodeJS.ErrnoException) => {
    if (e.code !== 'ENOENT') throw e;
  });
}

/**
 * Wait until the endpoint's policy is reported programmed (status file or
 * in-process signal) or `timeoutMs` elapses. Never throws for a timeout.
 */
export async function waitForPolicyProgrammed(opts: PolicyWaitOptions): Promise<PolicyWaitResult> {
  const start = Date.now();
  const { endpointKey, log } = opts;
  if (!opts.timeoutMs || opts.timeoutMs <= 0) return { programmed: false, reason: 'disabled', waitedMs: 0 };
  const dir = opts.statusDir ?? DEFAULT_STATUS_DIR;
  const name = statusFileName(endpointKey);
  const file = join(dir, name);
  if (!opts.signal) await mkdir(dir, { recursive: true, mode: 0o755 }); // for the watcher

  return new Promise<PolicyWaitResult>((resolve) => {
    let settled = false;
    let watcher: FSWatcher | undefined;
    let unsubscribe: (() => void) | undefined;
    let checking = false;
    let again = false;

    const finish = (r: Omit<PolicyWaitResult, 'waitedMs'>): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      clearInterval(poll);
      watcher?.close();
      unsubscribe?.();
      const res = { ...r, waitedMs: Date.now() - start };
      if (res.programmed)
        log?.debug('endpoint policy programmed', { endpoint: endpointKey, via: res.via, waitedMs: res.waitedMs });
      else {
        log?.info(
          `policy for endpoint ${endpointKey} was not reported programmed within ${opts.timeoutMs} ms ` +
            `(policy_setup_timeout_seconds); continuing`,
          { statusFile: file },
        );
      }
      resolve(res);
    };

    const check = async (): Promise<void> => {
      if (settled) return;
      if (checking) {
        again = true;
        return;
      }
      checking = true;
      try {
        do {
          again = false;
          let status: Partial<PolicyStatus> | undefined;
          try {
            status = JSON.parse(await readFile(file, 'utf8')) as Partial<PolicyStatus>;
          } catch {
            // Absent, or a non-atomic writer is mid-write: look again on the next event or poll.
            status = undefined;
          }
          if (status?.programmed === true) {
            if (opts.containerId && status.containerID && status.containerID !== opts.containerId) {
              log?.debug('ignoring a stale endpoint status file', { file, containerID: status.containerID });
            } else {
              finish({ programmed: true, via: 'file' });
            }
          }
        } while (again && !settled);
      } finally {
        checking = false;
      }
    };

    const timer = setTimeout(() => finish({ programmed: false, reason: 'timeout' }), opts.timeoutMs);
    // With the agent's in-process signal the file is a fallback only: its controller writes the
    // file before it signals, so the check after subscribing below finds what was programmed
    // before; a slow poll covers a controller replaced while this waits. No watcher then: in a
    // burst each of ~100 waiting ADDs would be woken by every other pod's status file.
    const poll = setInterval(() => void check(), opts.pollIntervalMs ?? (opts.signal ? 1000 : 100));
    try {
      // Watch before the first check so a file written in between is not missed.
      if (!opts.signal)
        watcher = watch(dir, { persistent: false }, (_ev, filename) => {
          if (!filename || filename.toString() === name) void check();
        });
      watcher?.on('error', () => watcher?.close());
    } catch (e) {
      log?.debug('fs.watch unavailable on the endpoint status directory; polling only', {
        dir,
        error: (e as Error).message,
      });
    }
    if (opts.signal) {
      unsubscribe = opts.signal.onProgrammed(endpointKey, (cid) => {
        if (!opts.containerId || !cid || cid === opts.containerId) finish({ programmed: true, via: 'signal' });
      });
    }
    void check();
  });
}
