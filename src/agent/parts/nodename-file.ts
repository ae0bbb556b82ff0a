// --nodename: the plugin falls back to the netconf's nodename_file (src/config/nodename.ts) when its
// netconf names no node, so plugin and agent agree on the node's name.
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { writeFileAtomic } from '../../atomic-write.js';
import { DEFAULT_NODENAME_FILE } from '../../config/fields.js';
import { readNetpluginConf } from '../node-init.js';
import type { AgentPart } from '../part.js';

export class NodenameFilePart implements AgentPart {
  readonly name = 'nodename-file';
  /** An unreadable --config or an unwritable file: the agent exits 2, as for a bad flag. */
  readonly exitCode = 2;

  constructor(private readonly o: { nodename: string; configPath: string | undefined }) {}

  async start(): Promise<void> {
    const conf = this.o.configPath ? readNetpluginConf(this.o.configPath) : {};
    const file = typeof conf['nodename_file'] === 'string' ? conf['nodename_file'] : DEFAULT_NODENAME_FILE;
    mkdirSync(dirname(file), { recursive: true });
    writeFileAtomic(file, `${this.o.nodename}\n`, 0o644);
  }

  async stop(): Promise<void> {
    // The file stays: per-exec plugins still read it while no agent runs.
  }
}
