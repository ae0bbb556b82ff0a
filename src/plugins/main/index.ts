// The `netplugin` CNI plugin's handlers. Heavy modules (datastore clients,
// IPAM, the addon) load inside the handlers, only for the commands that need them.
import { parseNetconf, type Netconf } from '../../config/netconf.js';
import type { CniHandlers } from '../../cni/types.js';
import { add } from './add.js';
import { del } from './del.js';
import { check } from './check.js';
import { status } from './status.js';
import { gc } from './gc.js';

export const handlers: CniHandlers<Netconf> = {
  parse: (raw) => parseNetconf(raw, { pluginType: 'netplugin' }),
  add,
  del,
  check,
  status,
  gc,
};
