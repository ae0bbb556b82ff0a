// What can be wrong with the network configuration, as kinds of this layer;
// the CNI edge (toCniError in src/cni/errors.ts) maps each kind to its CNI code once.
import { KindError } from '../errors.js';

export type ConfigErrorKind =
  /** The netconf is not valid: every problem is named in the message. */
  | 'invalid'
  /** A file the netconf names (nodename_file) cannot be read. */
  | 'unreadable';

export class ConfigError extends KindError<ConfigErrorKind> {
  override name = 'ConfigError';
}
