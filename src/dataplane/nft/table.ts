// Tables one owner keeps in nftables, given as the script that builds them
// whole (create-then-delete, then the full content: one atomic transaction).
// That script is the desired state: apply() runs it only when it differs from
// the one last applied, and a failed run is not remembered, so the next apply
// tries again.
import { nftRun } from './run.js';

interface OwnedTables {
  /** Runs `script` unless it is the one last applied; true when it ran. Throws what nftables refused. */
  apply(script: string): Promise<boolean>;
}

/** `run` replaces libnftables (tests); the addon loads on the first script that runs. */
export function ownedTables(run?: (script: string) => void): OwnedTables {
  let last: string | undefined;
  return {
    async apply(script) {
      if (script === last) return false;
      (run ?? nftRun)(script);
      last = script;
      return true;
    },
  };
}
