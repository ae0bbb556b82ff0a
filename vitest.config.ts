import { defineConfig } from 'vitest/config';
import LongestFirstSequencer from './test/support/sequencer.js';

// Tests touch shared kernel state (namespaces, links, nftables) and start real
// etcd servers: files run in separate processes, a few at a time on 2 cores.
//
// Two projects: "default" runs every test file as is (the plugin suites exec
// the per-exec bundle dist/netplugin.mjs); "agent" runs the black-box plugin
// suites again through the installed native shim and a resident agent
// (test/support/agent-setup.ts), so both paths pass the same suite.
// The agent project runs after the default one (groupOrder): a plugin-* file
// owns fixed pool CIDRs and a host veth prefix in the shared throwaway host
// namespace, so the same file must never run in both projects at once.
// One of them alone: npx vitest run --project agent test/integration/plugin-basic.test.ts
export default defineConfig({
  test: {
    pool: 'forks',
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // progress-reporter: a line per finished file with its time, and a heartbeat naming the files
    // still running, so a long run is never silent (test/support/README.md).
    reporters: [
      'default',
      './test/support/progress-reporter.ts',
      './test/support/summary-reporter.ts',
      './test/support/timeline-reporter.ts',
    ],
    // Longest files first (test/support/sequencer.ts), within each project's group.
    sequence: { sequencer: LongestFirstSequencer },
    globalSetup: ['test/support/global-setup.ts'],
    projects: [
      {
        extends: true,
        test: { name: 'default', include: ['test/**/*.test.ts'], sequence: { groupOrder: 0 } },
      },
      {
        extends: true,
        test: {
          name: 'agent',
          include: ['test/integration/plugin-*.test.ts'],
          env: { NETPLUGIN_TEST_PATH: 'agent' },
          setupFiles: ['test/support/agent-setup.ts'],
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
