// The IPAM plugin executable: run by runtimes or other plugins (e.g. bridge) as delegated IPAM.
import { runPlugin } from '../cni/exec.js';

void runPlugin({ name: 'netplugin-ipam', load: () => import('../plugins/ipam/index.js').then((m) => m.handlers) });
