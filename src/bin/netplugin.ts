// The CNI plugin executable (per-exec path; the agent serves the same handlers warm).
// Bundled as CommonJS (dist/netplugin.bundle.cjs, run through the code cache of
// dist/netplugin.cjs), so no top-level await here.
import { runPlugin } from '../cni/exec.js';
import { createPluginRuntime } from '../plugins/main/runtime.js';

// Runtimes run plugins without arguments; --version is for people checking an install.
if (process.argv[2] === '--version') {
  void import('../ctl/version.js').then(({ NETPLUGIN_VERSION }) => {
    process.stdout.write(`netplugin ${NETPLUGIN_VERSION}\n`);
    process.exit(0);
  });
} else {
  // The plain runtime: datastore and dataplane opened on first use, no caches beyond this one request.
  void runPlugin({
    name: 'netplugin',
    load: () => import('../plugins/main/index.js').then((m) => m.handlers),
    runtime: createPluginRuntime(),
  });
}
