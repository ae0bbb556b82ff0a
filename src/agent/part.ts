// The agent is built from named parts (the CNI server, node init, the pod-network controllers, policy,
// the health listener ...), each with its own inputs, a start, a stop and, where it has one, a line of
// readiness. The composition root (bin/netplugin-node.ts) lists them in dependency order; AgentParts
// starts them in that order, stops them in the reverse one, and aggregates their health.
import type { Logger } from '../log/types.js';

export interface PartHealth {
  /** False: a pod ADD sent now would not work, so /readyz fails. */
  ok: boolean;
  /** One line for a person reading the probe. */
  detail: string;
}

export interface AgentPart {
  /** Names the part in the log and in errors (e.g. 'cni-server'). */
  readonly name: string;
  /**
   * Settles once the part runs (or has started working in the background). A rejection stops the
   * agent's start: the parts started before are stopped again, newest first.
   */
  start(): Promise<void>;
  /** Releases what start() took; called once, also after a failed start of a later part. */
  stop(): Promise<void>;
  /** The key of the part's line on /readyz (e.g. 'socket'); absent: the part reports no health. */
  readonly check?: string | undefined;
  health?(): PartHealth | Promise<PartHealth>;
  /** The agent's exit status when start() fails (default 1; 2: a config the agent cannot run with). */
  readonly exitCode?: number;
}

/** A part whose start failed: the message names it. */
export class PartStartError extends Error {
  constructor(
    readonly part: string,
    cause: Error,
    /** The agent's exit status (the part's exitCode, else 1). */
    readonly exitCode: number,
  ) {
    super(`${part}: ${cause.message}`, { cause });
  }
}

interface AggregateHealth {
  ok: boolean;
  detail: Record<string, string>;
}

export class AgentParts {
  private readonly started: AgentPart[] = [];
  private stopping: Promise<void> | undefined;

  constructor(
    private readonly parts: readonly AgentPart[],
    private readonly log: Logger,
  ) {}

  /** True once stop() was called: the agent is shutting down. */
  get stopped(): boolean {
    return this.stopping !== undefined;
  }

  /** Starts every part in order; on a failure stops those started (newest first) and throws PartStartError. */
  async start(): Promise<void> {
    for (const part of this.parts) {
      if (this.stopping) return;
      try {
        await part.start();
      } catch (e) {
        const err = e instanceof Error ? e : new Error(String(e));
        await this.stop();
        throw new PartStartError(part.name, err, part.exitCode ?? 1);
      }
      this.started.push(part);
    }
  }

  /** Stops the started parts newest first; each failure is logged and the others still stop. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      for (const part of this.started.splice(0).reverse()) {
        try {
          await part.stop();
        } catch (e) {
          this.log.error(`${part.name}: stop failed`, { error: (e as Error).message });
        }
      }
    })();
    return this.stopping;
  }

  /** Every started part's health line, keyed by its check; ok only when each is. */
  async health(): Promise<AggregateHealth> {
    const detail: Record<string, string> = {};
    let ok = true;
    for (const part of this.parts) {
      if (!part.health || !part.check) continue;
      let h: PartHealth;
      try {
        h = await part.health();
      } catch (e) {
        h = { ok: false, detail: (e as Error).message };
      }
      detail[part.check] = h.detail;
      ok &&= h.ok;
    }
    return { ok, detail };
  }
}
