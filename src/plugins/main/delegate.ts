// Runs another CNI plugin (delegated IPAM such as host-local) exactly as a
// runtime would: found in CNI_PATH, CNI_* environment, the netconf on stdin.
import { spawn } from 'node:child_process';
import { access, constants } from 'node:fs/promises';
import { join } from 'node:path';
import { CniError, ErrorCodes } from '../../errors.js';
import type { CniResult } from '../../cni/types.js';

export interface DelegateInvocation {
  type: string;
  command: 'ADD' | 'DEL' | 'CHECK' | 'GC' | 'STATUS';
  containerId: string;
  netns: string;
  ifname: string;
  /** CNI_ARGS passed through unchanged (so IP= reaches host-local). */
  cniArgs?: string;
  path: string[];
  conf: Record<string, unknown>;
  env: Record<string, string | undefined>;
  timeoutMs?: number;
}

async function findPlugin(type: string, path: string[]): Promise<string> {
  if (!/^[A-Za-z0-9_.-]+$/.test(type))
    throw new CniError(ErrorCodes.InvalidNetworkConfig, `ipam.type: '${type}' is not a valid plugin name`);
  for (const dir of path) {
    const p = join(dir, type);
    try {
      await access(p, constants.X_OK);
      return p;
    } catch {
      /* next */
    }
  }
  throw new CniError(
    ErrorCodes.InvalidNetworkConfig,
    `ipam.type: plugin '${type}' was not found in CNI_PATH (${path.join(':') || 'empty'}); install it there or fix ` +
      `ipam.type`,
  );
}

export async function execDelegate(inv: DelegateInvocation): Promise<CniResult | undefined> {
  const bin = await findPlugin(inv.type, inv.path);
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(inv.env))
    if (v !== undefined && !k.startsWith('CNI_') && k !== 'NODE_EXTRA_CA_CERTS') env[k] = v;
  Object.assign(env, {
    CNI_COMMAND: inv.command,
    CNI_CONTAINERID: inv.containerId,
    CNI_NETNS: inv.netns,
    CNI_IFNAME: inv.ifname,
    CNI_ARGS: inv.cniArgs ?? '',
    CNI_PATH: inv.path.join(':'),
  });
  const { code, stdout, stderr } = await new Promise<{ code: number; stdout: string; stderr: string }>(
    (resolve, reject) => {
      const child = spawn(bin, [], { env, stdio: ['pipe', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      const timer = setTimeout(() => child.kill('SIGKILL'), inv.timeoutMs ?? 60_000);
      child.stdout.on('data', (d) => (out += d));
      child.stderr.on('data', (d) => (err += d));
      child.on('error', (e) => {
        clearTimeout(timer);
        reject(new CniError(ErrorCodes.DelegateFailure, `running ${bin} failed: ${e.message}`));
      });
      child.on('close', (c, sig) => {
        clearTimeout(timer);
        resolve({ code: c ?? (sig ? 128 : 1), stdout: out, stderr: err });
      });
      child.stdin.end(JSON.stringify(inv.conf));
    },
  );
  if (code !== 0) {
    let msg = stderr.trim() || `exit code ${code}`;
    let cniCode: number = ErrorCodes.DelegateFailure;
    try {
      const e = JSON.parse(stdout) as { code?: number; msg?: string; details?: string };
      if (e.msg) msg = e.msg + (e.details ? ` (${e.details})` : '');
      if (typeof e.code === 'number' && e.code === 11) cniCode = 11;
    } catch {
      /* not JSON */
    }
    throw new CniError(cniCode, `delegated plugin ${inv.type} ${inv.command} failed: ${msg}`);
  }
  if (inv.command !== 'ADD') return undefined;
  try {
    return JSON.parse(stdout) as CniResult;
  } catch {
    throw new CniError(
      ErrorCodes.DelegateFailure,
      `delegated plugin ${inv.type} printed a result that is not JSON: ${stdout.slice(0, 200)}`,
    );
  }
}
