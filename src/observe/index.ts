export { Registry } from './metrics.js';
export { startHealthServer, parseListenAddr, type HealthServer } from './health.js';
