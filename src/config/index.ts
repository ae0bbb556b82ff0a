export { parseNetconf, isNetpluginIpam } from './netconf.js';
export type { Netconf } from './netconf.js';
