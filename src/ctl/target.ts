// The resource a command that changes one object names: `KIND NAME` or `KIND/NAME` (label, patch,
// edit). Its own module so the one-shot commands (edit.ts) and the editor loop (edit-loop.ts) share
// it without importing each other.
import { NAMESPACED_KINDS } from '../model/resources.js';
import { CtlError } from './io.js';
import { resolveKind } from './kinds.js';

export interface Target {
  kind: string;
  name: string;
  namespace?: string | undefined;
}

/** `KIND NAME` or `KIND/NAME`. */
export function target(
  positional: string[],
  namespace: string | undefined,
  cmd: string,
): { t: Target; rest: string[] } {
  const [first, ...more] = positional;
  if (!first) throw new CtlError(`${cmd} needs a resource: KIND NAME or KIND/NAME`);
  let kind = first;
  let name: string | undefined;
  let rest = more;
  if (first.includes('/')) [kind, name] = first.split('/', 2) as [string, string];
  else [name, ...rest] = more;
  if (!name) throw new CtlError(`${cmd} needs a resource name: ${cmd} ${first} NAME`);
  const info = resolveKind(kind);
  if (info.readOnly)
    throw new CtlError(`${info.kind} resources are written by the plugin only; ${cmd} cannot change them`);
  return {
    t: { kind: info.kind, name, namespace: NAMESPACED_KINDS.has(info.kind) ? (namespace ?? 'default') : undefined },
    rest,
  };
}
