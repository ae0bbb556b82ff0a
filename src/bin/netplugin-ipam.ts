// The IPAM plugin executable: run by runtimes or other plugins (e.g. bridge) as delegated IPAM.
import { runPlugin } from '../cni/exec.js';
import { createPluginRuntime } from '../plugins/main/runtime.js';

// Runtimes run plugins without arguments; --version is for people checking an install.
if (process.argv[2] === '--version') {
  const { NETPLUGIN_VERSION } = await import('../ctl/version.js');
  process.stdout.write(`netplugin-ipam ${NETPLUGIN_VERSION}\n`);
  process.exit(0);
}
void runPlugin({ name: 'netplugin-ipam', load: () => import('../plugins/ipam/index.js').then((m) => m.handlers), runtime: createPluginRuntime() });
