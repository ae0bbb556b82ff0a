// The CNI plugin executable (per-exec path; the agent serves the same handlers warm).
import { pluginMain } from './common/plugin.js';

pluginMain('netplugin', () => import('../plugins/main/index.js').then((m) => m.handlers));
