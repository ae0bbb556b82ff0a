// The netplugin entry of a CNI configuration list: the one place that knows
// how netplugin recognises itself in a conflist (`"type": "netplugin"`).
// Used by netpluginctl (--config, install-cni, uninstall-cni) and the node
// agent's --config.

type Entry = Record<string, unknown>;

/** Every entry of a conflist's `plugins` whose type is netplugin ([] when `plugins` is not a list). */
export function netpluginEntries(plugins: unknown): Entry[] {
  if (!Array.isArray(plugins)) return [];
  return plugins.filter((p): p is Entry => !!p && typeof p === 'object' && (p as Entry)['type'] === 'netplugin');
}

/** The (first) netplugin entry of a conflist's `plugins`, or undefined. */
export function netpluginEntry(plugins: unknown): Entry | undefined {
  return netpluginEntries(plugins)[0];
}

/**
 * Whether a parsed .conf or .conflist is netplugin's: a netconf of type netplugin, or a conflist with a netplugin
 * entry.
 */
export function isNetpluginConfig(doc: unknown): boolean {
  if (!doc || typeof doc !== 'object') return false;
  const d = doc as Entry;
  return d['type'] === 'netplugin' || netpluginEntry(d['plugins']) !== undefined;
}
