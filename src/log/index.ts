export { createLogger, loggerOptionsFromConf, normalizeLevel, LOG_LEVELS, LOG_FORMATS } from './logger.js';
export type { AppLogger, LogContext, LogFormat, LogLevel, LoggerOptions } from './logger.js';
export { redact, redactString, isSecretKey, REDACTED } from './redact.js';
export { RotatingFile } from './file.js';
export type { Logger } from './types.js';
export { LogThrottle, DEFAULT_THROTTLE_INTERVAL_MS, type LogThrottleOptions } from './throttle.js';
