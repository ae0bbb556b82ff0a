// The in-memory store must behave like the real ones (IPAM unit tests rely on it).
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { datastoreConformance } from './datastore-conformance.js';

datastoreConformance(
  'memory',
  async () => {
    const ds = new MemoryDatastore();
    return { ds, cleanup: () => ds.close() };
  },
  { deadlines: false, malformed: false },
);
