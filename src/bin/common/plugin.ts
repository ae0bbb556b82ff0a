// The per-exec plugin executables (netplugin, netplugin-ipam): runtimes run them without
// arguments; --version is for people checking an install. Bundled as CommonJS
// (dist/<name>.bundle.cjs, run through the code cache), so no top-level await here.
import { runPlugin } from '../../cni/exec.js';
import type { CniHandlers } from '../../cni/types.js';
import { createPluginRuntime, type PluginRuntime } from '../../plugins/main/runtime.js';

// biome-ignore lint/suspicious/noExplicitAny: each plugin's handlers have their own netconf type
export function pluginMain(name: string, load: () => Promise<CniHandlers<any, PluginRuntime>>): void {
  if (process.argv[2] === '--version') {
    // Lazy: a runtime's exec never loads the version module.
    void import('../../ctl/version.js').then(({ NETPLUGIN_VERSION }) => {
      process.stdout.write(`${name} ${NETPLUGIN_VERSION}\n`);
      process.exit(0);
    });
    return;
  }
  // The plain runtime: datastore and dataplane opened on first use, no caches beyond this one request.
  void runPlugin({ name, load, runtime: createPluginRuntime() });
}
