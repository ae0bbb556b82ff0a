export { createLogger, loggerOptionsFromConf, normalizeLevel, LOG_LEVELS } from './logger.js';
export type { AppLogger, LogContext, LogLevel, LoggerOptions } from './logger.js';
export { redact, redactString, isSecretKey, REDACTED } from './redact.js';
export { RotatingFile } from './file.js';
