// The agent CNI server's request handling alone (CniServer.handle, no socket): a request for a
// plugin it does not serve gets a CNI error naming it; the requests of one pod run one at a time in
// arrival order, those of another pod beside them.
import { describe, expect, it } from 'vitest';
import type { CniIO } from '../../src/cni/types.js';
import type { ShimRequest } from '../../src/agent/protocol.js';
import { CniServer } from '../../src/agent/server.js';
import { createLogger } from '../../src/log/logger.js';
import { createPluginRuntime } from '../../src/plugins/main/runtime.js';

const log = createLogger({ stderr: () => undefined });
// Never loaded: dispatch is the test's own.
const plugin = {
  name: 'netplugin',
  load: () => import('../../src/plugins/main/index.js').then((m) => m.handlers),
  runtime: createPluginRuntime(),
};

function request(command: string, pod: string, containerId: string): ShimRequest {
  return {
    plugin: 'netplugin',
    env: {
      CNI_COMMAND: command,
      CNI_CONTAINERID: containerId,
      CNI_ARGS: `K8S_POD_NAMESPACE=default;K8S_POD_NAME=${pod}`,
    },
    stdin: '{}',
  } as ShimRequest;
}

describe('agent CNI server: handle', () => {
  it('answers a plugin it does not serve with CNI code 4 naming the plugin and the ones it serves', async () => {
    const server = new CniServer(
      { socketPath: '/nonexistent/s.sock', plugins: { netplugin: plugin }, log },
      async () => 0,
      null,
    );
    const res = await server.handle({ ...request('ADD', 'p', 'c1'), plugin: 'bridge' });
    expect(res.code).toBe(1);
    const err = JSON.parse(res.stdout);
    expect(err.code).toBe(4);
    expect(err.msg).toContain("no plugin named 'bridge'");
    expect(err.msg).toContain('one of: netplugin');
  });

  it('runs one pod’s requests in order, one at a time, and another pod’s beside them', async () => {
    const events: string[] = [];
    const release = new Map<string, () => void>();
    const dispatch = (io: CniIO) => {
      const id = `${io.env['CNI_COMMAND']} ${io.env['CNI_CONTAINERID']}`;
      events.push(`begin ${id}`);
      return new Promise<number>((r) =>
        release.set(id, () => {
          events.push(`end ${id}`);
          r(0);
        }),
      );
    };
    const server = new CniServer(
      { socketPath: '/nonexistent/s.sock', plugins: { netplugin: plugin }, log },
      dispatch,
      null,
    );
    const oldDel = server.handle(request('DEL', 'web', 'old'));
    const newAdd = server.handle(request('ADD', 'web', 'new'));
    const other = server.handle(request('ADD', 'db', 'x'));
    await new Promise((r) => setImmediate(r));
    // The new sandbox's ADD waits for the old one's DEL (they share the pod's host veth name).
    expect(events).toEqual(['begin DEL old', 'begin ADD x']);
    release.get('DEL old')!();
    await oldDel;
    await new Promise((r) => setImmediate(r));
    expect(events).toEqual(['begin DEL old', 'begin ADD x', 'end DEL old', 'begin ADD new']);
    release.get('ADD new')!();
    release.get('ADD x')!();
    expect((await newAdd).code).toBe(0);
    expect((await other).code).toBe(0);
  });
});
