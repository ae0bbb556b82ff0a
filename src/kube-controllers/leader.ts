// Leader election on a coordination.k8s.io/v1 Lease, the protocol Kubernetes
// controllers use: the holder renews spec.renewTime every retry period; a
// candidate takes the lease over (compare-and-swap on resourceVersion) once it
// has seen the record unchanged for a whole lease duration. Expiry is judged
// by our own clock from when we last saw the record change, never by the
// holder's timestamps, so clock skew between nodes cannot cause two leaders.
// A leader that cannot renew within the renew deadline gives up (onLost) and
// must stop writing at once.
import { DatastoreError } from '../errors.js';
import type { KubeClient, KubeObject } from '../k8s/client.js';
import type { Logger } from '../log/types.js';

interface LeaderElectionOptions {
  client: KubeClient;
  namespace: string;
  name: string;
  identity: string;
  /** How long a lease is valid without renewal (default 15 s). */
  leaseDurationMs?: number;
  /** A leader that could not renew for this long steps down (default 10 s, < leaseDuration). */
  renewDeadlineMs?: number;
  /** How often to try to acquire or renew (default 2 s). */
  retryPeriodMs?: number;
  log: Logger;
  onStartedLeading: () => void;
  onStoppedLeading: () => void;
}

interface LeaseSpec {
  holderIdentity?: string;
  leaseDurationSeconds?: number;
  acquireTime?: string;
  renewTime?: string;
  leaseTransitions?: number;
}
type Lease = KubeObject & { spec?: LeaseSpec };

/** RFC 3339 with microseconds, the MicroTime format of Lease timestamps. */
function microTime(d = new Date()): string {
  return d.toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}

export class LeaderElector {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private leading = false;
  private lastRenew = 0;
  /** Fires when a leader has not renewed within the renew deadline, whatever its requests are doing. */
  private deadlineTimer: NodeJS.Timeout | undefined;
  private observed: { rv?: string | undefined; holder?: string; at: number } | undefined;
  /** The lease duration the holder wrote into the lease last seen. */
  private observedDurationMs = 0;
  private readonly leaseMs: number;
  private readonly renewDeadlineMs: number;
  private readonly retryMs: number;
  private readonly path: string;

  constructor(private readonly o: LeaderElectionOptions) {
    this.leaseMs = o.leaseDurationMs ?? 15_000;
    this.renewDeadlineMs = o.renewDeadlineMs ?? Math.min(10_000, Math.floor((this.leaseMs * 2) / 3));
    this.retryMs = o.retryPeriodMs ?? Math.min(2_000, Math.max(100, Math.floor(this.leaseMs / 5)));
    this.path = `/apis/coordination.k8s.io/v1/namespaces/${encodeURIComponent(o.namespace)}/leases`;
  }

  get isLeader(): boolean {
    return this.leading;
  }

  /** Who holds the lease as last seen (for /readyz and logs). */
  get holder(): string | undefined {
    return this.observed?.holder;
  }

  start(): void {
    void this.tick();
  }

  /**
   * A leader renews every retry period. A standby looks twice as often (the
   * sooner it sees the last renewal, the sooner it may take over) and also
   * exactly when the lease it watches runs out.
   */
  private schedule(): void {
    if (this.stopped) return;
    let delay = this.leading ? this.retryMs : Math.max(100, Math.floor(this.retryMs / 2));
    if (!this.leading && this.observed?.holder && this.observed.holder !== this.o.identity) {
      const expiresIn = this.observed.at + this.observedDurationMs - Date.now();
      if (expiresIn > 0) delay = Math.min(delay, expiresIn + 10);
    }
    this.timer = setTimeout(() => void this.tick(), delay);
  }

  private async tick(): Promise<void> {
    if (this.stopped) return;
    try {
      await this.tryAcquireOrRenew();
    } catch (e) {
      this.o.log.warn('leader election: lease request failed', {
        lease: `${this.o.namespace}/${this.o.name}`,
        error: (e as Error).message,
      });
    }
    if (this.leading && Date.now() - this.lastRenew > this.renewDeadlineMs)
      this.lose('could not renew the lease within the renew deadline');
    this.schedule();
  }

  private lose(why: string): void {
    clearTimeout(this.deadlineTimer);
    if (!this.leading) return;
    this.leading = false;
    this.o.log.error('leader election: lost the lease; stopping all writes', { identity: this.o.identity, why });
    this.o.onStoppedLeading();
  }

  private spec(prev: LeaseSpec | undefined, now: Date): LeaseSpec {
    const taking = prev?.holderIdentity !== this.o.identity;
    return {
      holderIdentity: this.o.identity,
      leaseDurationSeconds: Math.max(1, Math.ceil(this.leaseMs / 1000)),
      acquireTime: taking || !prev?.acquireTime ? microTime(now) : prev.acquireTime,
      renewTime: microTime(now),
      leaseTransitions: (prev?.leaseTransitions ?? 0) + (taking && prev?.holderIdentity ? 1 : 0),
    };
  }

  private async tryAcquireOrRenew(): Promise<void> {
    const now = new Date();
    let lease: Lease | undefined;
    try {
      lease = await this.o.client.request<Lease>(
        'GET',
        `${this.path}/${encodeURIComponent(this.o.name)}`,
        undefined,
        this.callOpts(),
      );
    } catch (e) {
      if (!DatastoreError.is(e, 'NotFound')) throw e;
    }
    if (!lease) {
      try {
        await this.o.client.request(
          'POST',
          this.path,
          {
            apiVersion: 'coordination.k8s.io/v1',
            kind: 'Lease',
            metadata: { name: this.o.name, namespace: this.o.namespace },
            spec: this.spec(undefined, now),
          },
          this.callOpts(),
        );
      } catch (e) {
        // Another replica was first.
        if (DatastoreError.is(e, 'AlreadyExists') || DatastoreError.is(e, 'Conflict')) return;
        throw e;
      }
      return this.acquired();
    }
    const holder = lease.spec?.holderIdentity || undefined;
    if (!this.observed || this.observed.rv !== lease.metadata.resourceVersion) {
      this.observed = { rv: lease.metadata.resourceVersion, ...(holder ? { holder } : {}), at: Date.now() };
    }
    const mine = holder === this.o.identity;
    const duration = (lease.spec?.leaseDurationSeconds ?? Math.ceil(this.leaseMs / 1000)) * 1000;
    this.observedDurationMs = duration;
    if (!mine && holder && Date.now() - this.observed.at < duration) {
      if (this.leading) this.lose(`the lease is held by ${holder}`);
      return;
    }
    try {
      const next = await this.o.client.request<Lease>(
        'PUT',
        `${this.path}/${encodeURIComponent(this.o.name)}`,
        { ...lease, spec: this.spec(lease.spec, now) },
        this.callOpts(),
      );
      this.observed = { rv: next.metadata.resourceVersion, holder: this.o.identity, at: Date.now() };
    } catch (e) {
      if (DatastoreError.is(e, 'Conflict')) return; // someone else renewed or took it: re-read next tick
      throw e;
    }
    if (mine) this.renewed();
    else this.acquired(holder);
  }

  /** A hung API server must not keep a leader's request waiting past its renew deadline. */
  private callOpts(): { timeoutMs: number } {
    return { timeoutMs: Math.max(500, Math.floor(this.renewDeadlineMs / 2)) };
  }

  private renewed(): void {
    this.lastRenew = Date.now();
    clearTimeout(this.deadlineTimer);
    this.deadlineTimer = setTimeout(
      () => this.lose('could not renew the lease within the renew deadline'),
      this.renewDeadlineMs,
    );
  }

  private acquired(from?: string): void {
    this.renewed();
    this.observed = { ...this.observed, holder: this.o.identity, at: Date.now() };
    if (this.leading) return;
    this.leading = true;
    this.o.log.info('leader election: became the leader', {
      identity: this.o.identity,
      lease: `${this.o.namespace}/${this.o.name}`,
      ...(from ? { previousHolder: from } : {}),
    });
    this.o.onStartedLeading();
  }

  /**
   * Stops campaigning. A leader hands the lease back (empty holder), so a
   * standby takes over at its next retry instead of after a lease duration.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    clearTimeout(this.deadlineTimer);
    if (!this.leading) return;
    this.leading = false;
    try {
      const lease = await this.o.client.request<Lease>(
        'GET',
        `${this.path}/${encodeURIComponent(this.o.name)}`,
        undefined,
        { timeoutMs: 2000 },
      );
      if (lease.spec?.holderIdentity === this.o.identity) {
        await this.o.client.request(
          'PUT',
          `${this.path}/${encodeURIComponent(this.o.name)}`,
          { ...lease, spec: { ...lease.spec, holderIdentity: '', leaseDurationSeconds: 1 } },
          { timeoutMs: 2000 },
        );
      }
    } catch (e) {
      this.o.log.warn('leader election: could not release the lease; a standby takes over when it expires', {
        error: (e as Error).message,
      });
    }
  }
}
