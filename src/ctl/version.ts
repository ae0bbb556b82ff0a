// The package version, inlined by the bundler so the installed CLI needs no
// package.json at run time.
import pkg from '../../package.json' with { type: 'json' };

export const NETPLUGIN_VERSION: string = pkg.version;
