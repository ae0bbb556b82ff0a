import { defineConfig } from 'vitest/config';

// Tests touch shared kernel state (namespaces, links, nftables) and start real
// etcd servers: files run in separate processes, a few at a time on 2 cores.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    pool: 'forks',
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
    testTimeout: 60_000,
    hookTimeout: 60_000,
    reporters: ['default'],
    globalSetup: ['test/fixtures/global-setup.ts'],
  },
});
