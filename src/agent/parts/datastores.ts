// The agent's warm datastore connections, one per distinct settings: its CNI requests and its
// controllers (node init, routes, policy, /readyz) share them. Every store reads through a
// watch-fed cache (datastore/cached.ts) and is timed by the metrics outside it.
import { cachedDatastore } from '../../datastore/cached.js';
import type { DatastoreConfig } from '../../datastore/index.js';
import { createDatastorePool, type DatastorePool } from '../../datastore/pool.js';
import type { Datastore } from '../../datastore/types.js';
import type { Logger } from '../../log/types.js';
import type { createAgentMetrics } from '../metrics.js';
import type { AgentPart } from '../part.js';

interface DatastoresInputs {
  log: Logger;
  metrics: Pick<ReturnType<typeof createAgentMetrics>, 'wrapDatastore'>;
}

export class DatastoresPart implements AgentPart, DatastorePool {
  readonly name = 'datastores';
  /** The read caches of the open datastores (weakly: the pool closes and drops an idle one). */
  private readonly readCaches = new Set<WeakRef<{ suspend?: (ms: number) => void }>>();
  private readonly pool: DatastorePool;

  constructor(o: DatastoresInputs) {
    this.pool = createDatastorePool({
      wrap: (ds) => {
        const cached = cachedDatastore(ds, { log: o.log });
        if (cached.suspend) this.readCaches.add(new WeakRef(cached));
        return o.metrics.wrapDatastore(cached);
      },
    });
  }

  datastore(s: DatastoreConfig): Promise<Datastore> {
    return this.pool.datastore(s);
  }

  /**
   * A per-exec plugin held the node's IPAM lock since the agent did: it may have written what the
   * caches have not seen yet, so they read through for a second.
   */
  suspendReadCaches(): void {
    for (const r of this.readCaches) {
      const c = r.deref();
      if (c) c.suspend?.(1_000);
      else this.readCaches.delete(r);
    }
  }

  async start(): Promise<void> {
    // Connections open on first use (node init opens the node's at once).
  }

  close(): Promise<void> {
    return this.pool.close();
  }

  stop(): Promise<void> {
    return this.close();
  }
}
