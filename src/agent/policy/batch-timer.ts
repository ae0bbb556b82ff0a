// When the policy controller compiles and applies what changed: a few ms after
// a change (one batch per burst), or later when every change pending is one
// nobody waits for. An endpoint removed is such a change: its interface is
// gone, so no packet of it meets the rules; what it leaves in other pods' rules
// (its address in their peers' sets) goes with the next batch, which any
// endpoint added or changed (a pod reusing the address) brings forward. In a
// burst of DELs each removal used to cost a batch of its own: a compile and an
// nft transaction each, most of the agent's CPU per DEL after the kernel's.

/** How long an endpoint's removal may wait for other changes. */
export const REMOVAL_DELAY_MS = 100;

interface BatchTimer {
  /** A change arrived; `lazy`: nothing waits for it. */
  schedule(lazy: boolean): void;
  clear(): void;
}

export function createBatchTimer(fire: () => void, o: { delayMs: number; lazyDelayMs: number }): BatchTimer {
  let timer: NodeJS.Timeout | undefined;
  let due = 0;
  return {
    schedule(lazy) {
      const d = lazy ? Math.max(o.delayMs, o.lazyDelayMs) : o.delayMs;
      const at = Date.now() + d;
      if (timer) {
        if (at >= due) return;
        clearTimeout(timer);
      }
      due = at;
      timer = setTimeout(() => {
        timer = undefined;
        fire();
      }, d);
    },
    clear() {
      clearTimeout(timer);
      timer = undefined;
    },
  };
}
