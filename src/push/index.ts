/** Pushing to a continuous profiler (Grafana Pyroscope's /ingest). Re-exports only. */
export { pushTo, seriesName, SAMPLE_TYPE_CONFIG, type PushOptions, type Pusher, type PushStats, type PushResult, type SettleOptions } from './pyroscope.js';
