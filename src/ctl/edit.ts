// validate, label and patch: the kubectl habits operators bring.
import { DatastoreError } from '../errors.js';
import type { Resource } from '../model/resources.js';
import { labelKeyProblem, labelValueProblem } from '../model/names.js';
import type { Datastore } from '../datastore/types.js';
import {
  bool,
  CtlError,
  DRY_RUN,
  dryRun,
  noPositional,
  parseCommand,
  printHelp,
  str,
  type CtlCommand,
  type CtlGroup,
  type CtlIO,
} from './io.js';
import { resolveKind } from './kinds.js';
import { target, type Target } from './target.js';
import { readManifests, writeResource, errText } from './resources.js';
import { describeRef, parseManifest, poolDefaults, validatePool } from './validate.js';
import { applyJsonPatch, mergePatch, parseJsonPatch } from './json-patch.js';

/**
 * validate -f: every document parses as a known kind, and IPPools pass the
 * same checks apply makes (masked CIDR, block size, selector), also against
 * each other within the files. Nothing is read from or written to a datastore.
 */
async function cmdValidate(io: CtlIO, file: string): Promise<number> {
  let docs: Awaited<ReturnType<typeof readManifests>>;
  try {
    docs = await readManifests(file, io);
  } catch (e) {
    io.stderr(`error: ${errText(e)}\n`);
    return 1;
  }
  const pools: Array<Resource<'IPPool'>> = [];
  let failed = 0;
  for (const d of docs) {
    try {
      if (d.res.kind === 'IPPool') {
        const pool = { ...d.res, spec: poolDefaults((d.res as Resource<'IPPool'>).spec) } as Resource<'IPPool'>;
        validatePool(pool, pools);
        pools.push(pool);
      }
      io.stdout(`${d.where}: ${d.res.kind.toLowerCase()}/${d.res.metadata.name} valid\n`);
    } catch (e) {
      failed++;
      io.stderr(`error: ${d.where}: ${errText(e)}\n`);
    }
  }
  return failed ? 1 : 0;
}

/** `key=value` sets, `key-` removes (kubectl's syntax). */
function parseLabelArgs(args: string[]): { set: Record<string, string>; remove: string[] } {
  const set: Record<string, string> = {};
  const remove: string[] = [];
  if (!args.length) throw new CtlError(`label needs at least one key=value (or key- to remove one)`);
  for (const a of args) {
    if (a.endsWith('-') && !a.includes('=')) {
      const k = a.slice(0, -1);
      if (labelKeyProblem(k))
        throw new CtlError(`label ${JSON.stringify(a)}: ${JSON.stringify(k)} is not a valid label key`);
      remove.push(k);
      continue;
    }
    const eq = a.indexOf('=');
    if (eq < 0) throw new CtlError(`label ${JSON.stringify(a)}: expected key=value or key-`);
    const [k, v] = [a.slice(0, eq), a.slice(eq + 1)];
    if (labelKeyProblem(k))
      throw new CtlError(
        `label ${JSON.stringify(a)}: ${JSON.stringify(k)} is not a valid label key (e.g. zone or example.com/zone)`,
      );
    if (labelValueProblem(v))
      throw new CtlError(
        `label ${JSON.stringify(a)}: ${JSON.stringify(v)} is not a valid label value (up to 63 letters, digits, '-', ` +
          `'_', '.')`,
      );
    set[k] = v;
  }
  return { set, remove };
}

async function update(ds: Datastore, t: Target, change: (r: Resource) => Resource, dryRun: boolean): Promise<string> {
  for (let attempt = 0; ; attempt++) {
    let cur: Resource;
    try {
      cur = await ds.get(resolveKind(t.kind).kind, t.name, t.namespace);
    } catch (e) {
      if (DatastoreError.is(e, 'NotFound'))
        throw new CtlError(`${describeRef(resolveKind(t.kind).kind, t.name, t.namespace)} not found`);
      throw e;
    }
    const next = change(structuredClone(cur));
    // The result is checked as apply checks a manifest: a wrong type or an unknown field names its path.
    parseManifest(next, `${t.kind.toLowerCase()}/${t.name}`, { stored: true });
    // replace with the read resourceVersion: a concurrent writer makes us read again.
    try {
      return await writeResource(
        ds,
        { ...next, metadata: { ...next.metadata, resourceVersion: cur.metadata.resourceVersion } },
        'replace',
        dryRun,
      );
    } catch (e) {
      if (e instanceof CtlError && /was modified since resourceVersion/.test(e.message) && attempt < 4) continue;
      throw e;
    }
  }
}

async function cmdLabel(
  ds: Datastore,
  io: CtlIO,
  args: {
    positional: string[];
    namespace?: string | undefined;
    overwrite?: boolean | undefined;
    dryRun?: boolean | undefined;
  },
): Promise<number> {
  const { t, rest } = target(args.positional, args.namespace, 'label');
  const { set, remove } = parseLabelArgs(rest);
  const r = await update(
    ds,
    t,
    (res) => {
      const labels = { ...(res.metadata.labels ?? {}) };
      for (const [k, v] of Object.entries(set)) {
        if (k in labels && labels[k] !== v && !args.overwrite)
          throw new CtlError(
            `${t.kind.toLowerCase()}/${t.name} already has label ${k}=${labels[k]}; pass --overwrite to change it`,
          );
        labels[k] = v;
      }
      for (const k of remove) delete labels[k];
      return { ...res, metadata: { ...res.metadata, labels } };
    },
    Boolean(args.dryRun),
  );
  io.stdout(
    `${t.kind.toLowerCase()}/${t.name} ` +
      `${r === 'unchanged' ? 'not labeled (unchanged)' : 'labeled'}${args.dryRun ? ' (dry run)' : ''}\n`,
  );
  return 0;
}

async function cmdPatch(
  ds: Datastore,
  io: CtlIO,
  args: {
    positional: string[];
    namespace?: string | undefined;
    type?: string | undefined;
    patch?: string | undefined;
    dryRun?: boolean | undefined;
  },
): Promise<number> {
  const type = args.type ?? 'merge';
  if (type !== 'merge' && type !== 'json') {
    throw new CtlError(
      `patch --type ${JSON.stringify(type)} is not supported; use --type merge (a JSON merge patch, RFC 7386) or ` +
        `--type json (RFC 6902 operations)`,
    );
  }
  const { t, rest } = target(args.positional, args.namespace, 'patch');
  if (rest.length) throw new CtlError(`patch takes KIND NAME and -p PATCH; unexpected ${rest.join(' ')}`);
  if (!args.patch)
    throw new CtlError(
      type === 'json'
        ? `patch --type json needs -p '[{"op":"replace","path":"/spec/disabled","value":true}]'`
        : `patch needs -p '{"spec":{...}}'`,
    );
  let patch: unknown;
  try {
    patch = JSON.parse(args.patch);
  } catch (e) {
    throw new CtlError(`patch -p is not JSON: ${(e as Error).message}`);
  }
  let change: (r: Resource) => Resource;
  if (type === 'json') {
    const ops = parseJsonPatch(patch);
    change = (res) => {
      const next = applyJsonPatch(res, ops) as Resource;
      onlySpecAndLabels(res, next);
      return next;
    };
  } else {
    if (!patch || typeof patch !== 'object' || Array.isArray(patch))
      throw new CtlError(
        'patch -p must be a JSON object, e.g. {"spec":{"disabled":true}} (a list of operations needs --type json)',
      );
    const p = patch as Record<string, unknown>;
    for (const k of Object.keys(p)) {
      if (k !== 'spec' && k !== 'metadata')
        throw new CtlError(`patch: only spec and metadata (labels, annotations) can be patched, not ${k}`);
    }
    const meta = (p.metadata ?? {}) as Record<string, unknown>;
    for (const k of Object.keys(meta)) {
      if (k !== 'labels' && k !== 'annotations')
        throw new CtlError(`patch: metadata.${k} cannot be patched; only metadata.labels and metadata.annotations`);
    }
    change = (res) => mergePatch(res, patch) as Resource;
  }
  const r = await update(ds, t, change, Boolean(args.dryRun));
  io.stdout(
    `${t.kind.toLowerCase()}/${t.name} ` +
      `${r === 'unchanged' ? 'patched (no change)' : 'patched'}${args.dryRun ? ' (dry run)' : ''}\n`,
  );
  return 0;
}

/** A JSON patch may touch spec, metadata.labels and metadata.annotations only, as a merge patch may. */
function onlySpecAndLabels(before: Resource, after: Resource): void {
  const strip = (r: Resource) => {
    const o = { ...(r as unknown as Record<string, unknown>) };
    delete o.spec;
    const m = { ...((o.metadata ?? {}) as Record<string, unknown>) };
    delete m.labels;
    delete m.annotations;
    o.metadata = m;
    return o;
  };
  const a = strip(before);
  const b = strip(after);
  for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) {
    if (k === 'metadata') continue;
    if (JSON.stringify(a[k]) !== JSON.stringify(b[k]))
      throw new CtlError(`patch: only spec and metadata (labels, annotations) can be patched, not ${k}`);
  }
  const ma = a.metadata as Record<string, unknown>;
  const mb = b.metadata as Record<string, unknown>;
  for (const k of new Set([...Object.keys(ma), ...Object.keys(mb)])) {
    if (JSON.stringify(ma[k]) !== JSON.stringify(mb[k]))
      throw new CtlError(`patch: metadata.${k} cannot be patched; only metadata.labels and metadata.annotations`);
  }
}

// ---------------------------------------------------------------- commands

const EDIT_HELP: Record<string, string> = {
  edit: `Usage: netpluginctl edit <kind> <name> [-n NS] [-o yaml|json]
       netpluginctl edit <kind>/<name>

Opens the resource in $KUBE_EDITOR, else $EDITOR, else vi, as kubectl edit does. Saving writes
it back; an unchanged or emptied file cancels. A file that does not parse or validate is
reopened with the errors as comments at its top (saving it unchanged cancels). When someone
else changed the resource while you edited, nothing is written: the error names a file holding
your edits.

Example:
  KUBE_EDITOR=nano netpluginctl edit ippool default-ipv4-ippool
`,
  validate: `Usage: netpluginctl validate -f FILE|DIR|-

Parses every document and checks it as apply would (kinds, names, IPPool CIDR, block size,
selector, overlaps between the pools given), without a datastore. Exit status 1 when any
document is invalid.
`,
  label: `Usage: netpluginctl label <kind> <name> key=value... [key-...] [--overwrite] [-n NS] [--dry-run]
       netpluginctl label <kind>/<name> ...

Sets labels (key=value) or removes them (key-). Changing an existing label's value needs
--overwrite, as with kubectl.
`,
  patch: `Usage: netpluginctl patch <kind> <name> [--type merge] -p '{"spec":{"disabled":true}}' [-n NS] [--dry-run]
       netpluginctl patch <kind> <name> --type json -p '[{"op":"replace","path":"/spec/disabled","value":true}]'

--type merge (the default) applies a JSON merge patch (RFC 7386: objects merge, null removes a
field); --type json applies JSON patch operations (RFC 6902: add, remove, replace, move, copy,
test; paths are JSON pointers such as /spec/nodeSelector or /metadata/labels/zone; a failed
test changes nothing). Only spec, metadata.labels and metadata.annotations can change. The
result is validated and written as apply does (retrying when someone else changed the resource
meanwhile; a json patch is re-applied to the fresh object).
`,
};

const runValidate: CtlCommand = async (rest, io) => {
  // validate reads no datastore: --config among its flags is accepted and unused.
  const p = parseCommand(rest, [{ name: 'filename', short: 'f', type: 'string' }], 'validate');
  if (bool(p, 'help')) return printHelp(io, EDIT_HELP.validate!);
  const file = str(p, 'filename');
  if (!file) throw new CtlError('validate needs -f FILE|DIR|-');
  noPositional(p, 'validate');
  return cmdValidate(io, file);
};

const runEdit =
  (cmd: 'label' | 'patch'): CtlCommand =>
  async (rest, io, s) => {
    const p = parseCommand(
      rest,
      [
        { name: 'namespace', short: 'n', type: 'string' },
        { name: 'overwrite', type: 'bool' },
        { name: 'type', type: 'string' },
        { name: 'patch', short: 'p', type: 'string' },
        DRY_RUN,
      ],
      cmd,
      s,
    );
    if (bool(p, 'help')) return printHelp(io, EDIT_HELP[cmd]!);
    // Check the arguments before connecting.
    const t = target(p.positional, str(p, 'namespace'), cmd);
    if (cmd === 'label') parseLabelArgs(t.rest);
    const common = { positional: p.positional, namespace: str(p, 'namespace'), dryRun: dryRun(p) };
    return cmd === 'label'
      ? cmdLabel(await s.writable(), io, { ...common, overwrite: bool(p, 'overwrite') })
      : cmdPatch(await s.writable(), io, { ...common, type: str(p, 'type'), patch: str(p, 'patch') });
  };

const runEditor: CtlCommand = async (rest, io, s) => {
  const p = parseCommand(
    rest,
    [
      { name: 'namespace', short: 'n', type: 'string' },
      { name: 'output', short: 'o', type: 'string' },
    ],
    'edit',
    s,
  );
  if (bool(p, 'help')) return printHelp(io, EDIT_HELP.edit!);
  target(p.positional, str(p, 'namespace'), 'edit');
  // A lazily loaded command: the editor loop and yaml load only when edit runs.
  const { cmdEdit } = await import('./edit-loop.js');
  return cmdEdit(await s.writable(), io, {
    positional: p.positional,
    namespace: str(p, 'namespace'),
    output: str(p, 'output'),
  });
};

/** validate, label, patch, edit. */
export const editGroup: CtlGroup = {
  commands: { validate: runValidate, label: runEdit('label'), patch: runEdit('patch'), edit: runEditor },
  help: EDIT_HELP,
};
