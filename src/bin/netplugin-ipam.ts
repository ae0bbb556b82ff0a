// The IPAM plugin executable: run by runtimes or other plugins (e.g. bridge) as delegated IPAM.
// Bundled as CommonJS like dist/netplugin.bundle.cjs, so no top-level await here.
import { runPlugin } from '../cni/exec.js';
import { createPluginRuntime } from '../plugins/main/runtime.js';

// Runtimes run plugins without arguments; --version is for people checking an install.
if (process.argv[2] === '--version') {
  void import('../ctl/version.js').then(({ NETPLUGIN_VERSION }) => {
    process.stdout.write(`netplugin-ipam ${NETPLUGIN_VERSION}\n`);
    process.exit(0);
  });
} else {
  void runPlugin({
    name: 'netplugin-ipam',
    load: () => import('../plugins/ipam/index.js').then((m) => m.handlers),
    runtime: createPluginRuntime(),
  });
}
