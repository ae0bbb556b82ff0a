export { Registry, Counter, Gauge, Histogram, LATENCY_BUCKETS, PROMETHEUS_CONTENT_TYPE } from './metrics.js';
export {
  startHealthServer,
  parseListenAddr,
  type HealthServer,
  type HealthServerOptions,
  type Check,
  type CheckResult,
} from './health.js';
