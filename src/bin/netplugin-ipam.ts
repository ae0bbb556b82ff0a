// The IPAM plugin executable: run by runtimes or other plugins (e.g. bridge) as delegated IPAM.
import { pluginMain } from './common/plugin.js';

pluginMain('netplugin-ipam', () => import('../plugins/ipam/index.js').then((m) => m.handlers));
