export { dispatch, validAttachments } from './dispatch.js';
export { toCniError, errorResult } from './errors.js';
export { formatResult, parseResult, isCidr } from './result.js';
export {
  negotiateVersion,
  assertCommandAllowed,
  compareVersions,
  isSupportedVersion,
  versionHasCommand,
  HIGHEST_VERSION,
} from './version.js';
export { parseEnv, parseCniArgs, parseCommand, checkIfname, checkContainerId } from './env.js';
export * from './types.js';
