export { createLogger, normalizeLevel, LOG_FORMATS } from './logger.js';
export type { LogFormat } from './logger.js';
export { LogThrottle } from './throttle.js';
