// The agent's composition (src/agent/part.ts): parts start in the order the root lists them, stop
// newest first (also when a later part fails to start), and /readyz is the aggregate of their health.
import { describe, expect, it } from 'vitest';
import { AgentParts, PartStartError, type AgentPart, type PartHealth } from '../../src/agent/part.js';
import { createLogger } from '../../src/log/logger.js';

function setup() {
  const events: string[] = [];
  const lines: string[] = [];
  const log = createLogger({ stderr: (s) => lines.push(s) });
  const part = (
    name: string,
    o: { failStart?: string; failStop?: string; check?: string; health?: () => PartHealth; exitCode?: number } = {},
  ): AgentPart => ({
    name,
    ...(o.check ? { check: o.check } : {}),
    ...(o.health ? { health: o.health } : {}),
    ...(o.exitCode ? { exitCode: o.exitCode } : {}),
    async start() {
      events.push(`start ${name}`);
      if (o.failStart) throw new Error(o.failStart);
    },
    async stop() {
      events.push(`stop ${name}`);
      if (o.failStop) throw new Error(o.failStop);
    },
  });
  return { events, lines, log, part };
}

describe('agent parts', () => {
  it('start in the listed order and stop in the reverse one, once', async () => {
    const t = setup();
    const parts = new AgentParts([t.part('dataplane'), t.part('cni-server'), t.part('policy')], t.log);
    await parts.start();
    expect(parts.stopped).toBe(false);
    await Promise.all([parts.stop(), parts.stop()]);
    expect(parts.stopped).toBe(true);
    expect(t.events).toEqual([
      'start dataplane',
      'start cni-server',
      'start policy',
      'stop policy',
      'stop cni-server',
      'stop dataplane',
    ]);
  });

  it('a failed start stops the parts started before it, newest first, and names the part and its exit status', async () => {
    const t = setup();
    const parts = new AgentParts(
      [
        t.part('dataplane'),
        t.part('cni-server'),
        t.part('policy', { failStart: 'policy.type is "k8s" but libnftables is missing', exitCode: 2 }),
        t.part('health-listener'),
      ],
      t.log,
    );
    const err = await parts.start().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(PartStartError);
    expect((err as PartStartError).part).toBe('policy');
    expect((err as PartStartError).exitCode).toBe(2);
    expect((err as Error).message).toBe('policy: policy.type is "k8s" but libnftables is missing');
    // The failed part's own stop is not called (it did not start); the next one never starts.
    expect(t.events.filter((e) => e.startsWith('stop'))).toEqual(['stop cni-server', 'stop dataplane']);
    expect(t.events.at(-3)).toBe('start policy');
    expect(t.events).not.toContain('start health-listener');
  });

  it('a part that fails to stop is logged and the older ones still stop', async () => {
    const t = setup();
    const parts = new AgentParts([t.part('dataplane'), t.part('node-network', { failStop: 'BIRD hung' })], t.log);
    await parts.start();
    await parts.stop();
    expect(t.events.slice(2)).toEqual(['stop node-network', 'stop dataplane']);
    expect(t.lines.join('')).toContain('node-network: stop failed');
    expect(t.lines.join('')).toContain('BIRD hung');
  });

  it('health: one line per part with a check, ok only when every line is; a throwing check fails its line', async () => {
    const t = setup();
    let socketOk = true;
    const parts = new AgentParts(
      [
        t.part('dataplane'),
        t.part('cni-server', {
          check: 'socket',
          health: () => ({ ok: socketOk, detail: socketOk ? 'serving /run/s.sock' : 'shutting down' }),
        }),
        t.part('node-init', {
          check: 'datastore',
          health: () => {
            throw new Error('connection refused');
          },
        }),
        t.part('node-network', { check: 'bird', health: () => ({ ok: true, detail: 'DEGRADED, not running' }) }),
      ],
      t.log,
    );
    expect(await parts.health()).toEqual({
      ok: false,
      detail: { socket: 'serving /run/s.sock', datastore: 'connection refused', bird: 'DEGRADED, not running' },
    });
    const healthy = new AgentParts(
      [t.part('cni-server', { check: 'socket', health: () => ({ ok: socketOk, detail: 'serving' }) })],
      t.log,
    );
    expect((await healthy.health()).ok).toBe(true);
    socketOk = false;
    expect((await healthy.health()).ok).toBe(false);
  });
});
