// `netpluginctl edit KIND NAME`: kubectl's edit loop. The resource goes to a
// temp file, $KUBE_EDITOR / $EDITOR (else vi) opens it; an unchanged or
// emptied file cancels; a file that does not parse or validate is reopened
// with the errors as comments at its top (an unchanged invalid file cancels,
// keeping a copy); the write is guarded by the resourceVersion read, so a
// change made meanwhile by someone else is an error (with a copy of the
// edits kept), never a silent overwrite.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatastoreError } from '../errors.js';
import type { Datastore } from '../datastore/types.js';
import type { Resource } from '../model/resources.js';
import { CtlError, type CtlIO } from './io.js';
import { target } from './target.js';
import { writeResource, errText } from './resources.js';
import { describeRef, parseManifest } from './validate.js';

const HEADER = `# Please edit the object below. Lines beginning with a '#' will be ignored,
# and an empty file will abort the edit. If an error occurs while saving this file will be
# reopened with the relevant failures.
#
`;

function editorCommand(env: CtlIO['env']): string {
  return env.KUBE_EDITOR || env.NETPLUGIN_EDITOR || env.EDITOR || 'vi';
}

/** Runs the editor on `file` as a shell command line (EDITOR may carry arguments: "code --wait"). */
function runEditor(editor: string, file: string, env: CtlIO['env']): Promise<void> {
  return new Promise((resolve, reject) => {
    const p = spawn('/bin/sh', ['-c', `${editor} "$1"`, 'sh', file], {
      stdio: 'inherit',
      env: env as NodeJS.ProcessEnv,
    });
    p.on('error', (e) => reject(new CtlError(`cannot run the editor ${JSON.stringify(editor)}: ${e.message}`)));
    p.on('close', (code) =>
      code === 0
        ? resolve()
        : reject(
            new CtlError(
              `the editor ${JSON.stringify(editor)} exited with status ${code ?? 'unknown'}; nothing was changed ` +
                `(set KUBE_EDITOR or EDITOR)`,
            ),
          ),
    );
  });
}

function stripComments(text: string): string {
  return text
    .split('\n')
    .filter((l) => !l.trimStart().startsWith('#'))
    .join('\n')
    .trim();
}

export async function cmdEdit(
  ds: Datastore,
  io: CtlIO,
  args: { positional: string[]; namespace?: string | undefined; output?: string | undefined },
): Promise<number> {
  const { t, rest } = target(args.positional, args.namespace, 'edit');
  if (rest.length) throw new CtlError(`edit takes one resource: KIND NAME or KIND/NAME; unexpected ${rest.join(' ')}`);
  const fmt = args.output ?? 'yaml';
  if (fmt !== 'yaml' && fmt !== 'json') throw new CtlError(`edit -o ${JSON.stringify(fmt)}: use yaml or json`);
  let cur: Resource;
  try {
    cur = await ds.get(t.kind as Resource['kind'], t.name, t.namespace);
  } catch (e) {
    if (DatastoreError.is(e, 'NotFound'))
      throw new CtlError(`${describeRef(t.kind as Resource['kind'], t.name, t.namespace)} not found`);
    throw e;
  }
  // yaml takes tens of ms to load: a static import would be hoisted into every netpluginctl start.
  const YAML = await import('yaml');
  const render = (r: Resource) => (fmt === 'json' ? JSON.stringify(r, null, 2) + '\n' : YAML.stringify(r));
  const original = render(cur);
  const dir = mkdtempSync(join(tmpdir(), 'netpluginctl-edit-'));
  const file = join(dir, `${t.kind.toLowerCase()}-${t.name}.${fmt}`);
  const ref = `${t.kind.toLowerCase()}/${t.name}`;
  const keep = (content: string) => {
    const copy = join(tmpdir(), `netpluginctl-edit-${process.pid}-${Date.now()}.${fmt}`);
    writeFileSync(copy, content, { mode: 0o600 });
    return copy;
  };
  try {
    let content = HEADER + original;
    let lastInvalid: string | undefined;
    for (;;) {
      writeFileSync(file, content, { mode: 0o600 });
      await runEditor(editorCommand(io.env), file, io.env);
      const edited = readFileSync(file, 'utf8');
      const body = stripComments(edited);
      if (!body || body === stripComments(original)) {
        io.stdout(
          lastInvalid === undefined
            ? 'Edit cancelled, no changes made.\n'
            : 'Edit cancelled, no valid changes were saved.\n',
        );
        return lastInvalid === undefined ? 0 : 1;
      }
      if (lastInvalid !== undefined && body === lastInvalid) {
        const copy = keep(edited);
        throw new CtlError(`Edit cancelled, no valid changes were saved; a copy of your changes is in ${copy}`);
      }
      let res: Resource;
      try {
        let doc: unknown;
        try {
          doc = YAML.parse(body);
        } catch (e) {
          throw new CtlError(
            `the file is not valid ${fmt === 'json' ? 'JSON' : 'YAML'}: ${(e as Error).message.split('\n')[0]}`,
          );
        }
        res = parseManifest(doc, ref, { stored: true });
        if (
          res.kind !== cur.kind ||
          res.metadata.name !== cur.metadata.name ||
          (res.metadata.namespace ?? undefined) !== (cur.metadata.namespace ?? undefined)
        ) {
          throw new CtlError(
            `apiVersion, kind, name and namespace cannot be changed by edit (create a new resource instead)`,
          );
        }
      } catch (e) {
        // kubectl's loop: reopen with the errors on top, the edits kept below.
        lastInvalid = body;
        const errs = errText(e)
          .split(/\n/)
          .map((l) => `# ${l}`)
          .join('\n');
        content = `${HEADER}# ${ref} was not valid:\n${errs}\n#\n${body}\n`;
        continue;
      }
      try {
        const r = await writeResource(
          ds,
          { ...res, metadata: { ...res.metadata, resourceVersion: cur.metadata.resourceVersion } },
          'replace',
        );
        io.stdout(`${ref} ${r === 'unchanged' ? 'skipped (no change)' : 'edited'}\n`);
        return 0;
      } catch (e) {
        if (e instanceof CtlError && /was modified since resourceVersion/.test(e.message)) {
          const copy = keep(body + '\n');
          throw new CtlError(
            `${ref} was changed by someone else while you edited it (resourceVersion ` +
              `${cur.metadata.resourceVersion ?? '?'} is no longer current); your edits are saved in ${copy}: run ` +
              `'netpluginctl edit ${ref}' again, or 'netpluginctl replace -f ${copy}' after merging`,
          );
        }
        if (e instanceof CtlError) {
          lastInvalid = body;
          content = `${HEADER}# ${ref} was not valid:\n${e.message
            .split('\n')
            .map((l) => `# ${l}`)
            .join('\n')}\n#\n${body}\n`;
          continue;
        }
        throw e;
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
