// The CNI plugin executable (per-exec path; the agent serves the same handlers warm).
import { runPlugin } from '../cni/exec.js';

void runPlugin({ name: 'netplugin', load: () => import('../plugins/main/index.js').then((m) => m.handlers) });
