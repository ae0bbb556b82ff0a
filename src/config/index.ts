export { parseNetconf, isNetpluginIpam, schemaKeys } from './netconf.js';
export type { Netconf, NetpluginIpam, DelegatedIpam, ParseOptions, PluginType } from './netconf.js';
export { resolveNodename } from './nodename.js';
export type { NodenameDeps } from './nodename.js';
export { NETCONF_FIELDS, DEFAULT_NODENAME_FILE, NUM_QUEUES_MAX, fieldDoc } from './fields.js';
export type { FieldDoc } from './fields.js';
export { ConfigError } from './errors.js';
export type { ConfigErrorKind } from './errors.js';
