// `netplugin-node --nodename` writes the node name plugins fall back to when
// their netconf has none (nodename, then nodename_file, then the hostname).
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DIST } from '../support/cni.js';
import { resolveNodename } from '../../src/config/nodename.js';

const AGENT = join(DIST, 'netplugin-node.mjs');
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'np-nodename-'));
  dirs.push(d);
  return d;
}

describe('netplugin-node --nodename', () => {
  it('writes the conf nodename_file atomically and the plugin resolves the same name from it', async () => {
    const d = tempDir();
    const file = join(d, 'lib', 'nodename');
    const conflist = join(d, '10-netplugin.conflist');
    writeFileSync(
      conflist,
      JSON.stringify({
        cniVersion: '1.0.0',
        name: 'k',
        plugins: [{ type: 'netplugin', nodename_file: file, ipam: { type: 'netplugin-ipam' } }],
      }),
    );
    const agent = spawn(
      process.execPath,
      [
        AGENT,
        '--socket',
        join(d, 'cni.sock'),
        '--nodename',
        'worker-7.example',
        '--config',
        conflist,
        '--health-addr',
        '127.0.0.1:0',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    try {
      const deadline = Date.now() + 20_000;
      while (!existsSync(file) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      expect(readFileSync(file, 'utf8')).toBe('worker-7.example\n');
      // A netconf without nodename, pointing at the same file, resolves to the agent's name.
      expect(resolveNodename({ nodename_file: file }, { hostname: () => 'some-other-host' })).toBe('worker-7.example');
    } finally {
      agent.kill('SIGKILL');
    }
  });

  it('refuses an invalid node name with a message naming the flag and writes nothing', () => {
    const d = tempDir();
    const r = spawnSync(process.execPath, [AGENT, '--socket', join(d, 'cni.sock'), '--nodename', 'Bad_Name'], {
      encoding: 'utf8',
      timeout: 20_000,
    });
    expect(r.status).toBe(2);
    expect(r.stderr).toContain("--nodename 'Bad_Name' is not a valid node name");
    expect(existsSync(join(d, 'cni.sock'))).toBe(false);
  });
});
