// Vitest setup file of the "agent" project (vitest.config.ts): runs the
// black-box plugin suites (plugin-*.test.ts) through the installed native shim
// and a resident agent instead of the per-exec bundle. Per test file: the shim
// is copied to <tmp>/bin/netplugin (no fallback file, so a request the agent
// does not take fails loudly instead of quietly running per-exec), the agent
// (dist/netplugin-node.mjs) listens on <tmp>/cni.sock in the same throwaway
// host namespace, and the harness passes NETPLUGIN_AGENT_SOCKET to every call.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';

if (process.env.NETPLUGIN_TEST_PATH === 'agent') {
  const tmp = mkdtempSync(join(tmpdir(), `agent-suite-${process.pid}-`));
  // Before the harness is imported: it reads both at load.
  process.env.NETPLUGIN_TEST_BIN = join(tmp, 'bin', 'netplugin');
  process.env.NETPLUGIN_AGENT_SOCKET = join(tmp, 'run', 'cni.sock');
  const h = await import('./plugin-harness.js');
  let agent: Awaited<ReturnType<typeof h.startAgent>> | undefined;
  try {
    h.ensureBuilt();
    h.installShim(join(tmp, 'bin'));
    agent = await h.startAgent(process.env.NETPLUGIN_AGENT_SOCKET);
  } catch (e) {
    rmSync(tmp, { recursive: true, force: true });
    throw e;
  }
  const running = agent;
  afterAll(async () => {
    const died = running.proc.exitCode !== null || running.proc.signalCode !== null;
    await running.stop();
    rmSync(tmp, { recursive: true, force: true });
    // An agent that crashed mid-file would show as odd failures; say so plainly.
    if (died)
      throw new Error(
        `the agent died during the file (exit ${running.proc.exitCode ?? running.proc.signalCode}):\n` +
          `${running.log().slice(-4000)}`,
      );
    if (process.env.AGENT_SUITE_SHOW_LOG) process.stderr.write(running.log());
  });
}
