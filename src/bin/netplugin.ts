// The CNI plugin executable (per-exec path; the agent serves the same handlers warm).
import { runPlugin } from '../cni/exec.js';

// Runtimes run plugins without arguments; --version is for people checking an install.
if (process.argv[2] === '--version') {
  const { NETPLUGIN_VERSION } = await import('../ctl/version.js');
  process.stdout.write(`netplugin ${NETPLUGIN_VERSION}\n`);
  process.exit(0);
}
void runPlugin({ name: 'netplugin', load: () => import('../plugins/main/index.js').then((m) => m.handlers) });
