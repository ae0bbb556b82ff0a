// netplugin-flows: the flow-log aggregator. Agents stream flow records to the
// collector (HTTP/2 + mTLS, src/flows/protocol.ts); the records are aggregated
// in memory in 15 s buckets (src/flows/store.ts) and served by the HTTP API and
// the web UI (src/flows/api.ts); each closed bucket can go to a JSON-lines file.
import { readFileSync, createWriteStream, type WriteStream } from 'node:fs';
import { entryLogger, fatalExit, parseEntryFlags, stringFlags, usageError as cliUsageError } from './common/cli.js';
import { Registry } from '../observe/metrics.js';
import { startHealthServer } from '../observe/health.js';
import { registerProcessMetrics } from '../observe/process-metrics.js';
import { parseDuration } from '../model/kube-controllers-config.js';
import { FlowStore, BUCKET_SECONDS } from '../flows/store.js';
import { startCollector } from '../flows/collector.js';
import { startApi } from '../flows/api.js';

const USAGE = `usage: netplugin-flows --collector-addr HOST:PORT --tls-cert FILE --tls-key FILE --client-ca FILE
                      [--api-addr HOST:PORT] [--api-token-file FILE] [--ui=false] [--retention D]
                      [--export-file FILE] [--health-addr HOST:PORT] [--log-level L] [--version]

  --collector-addr A    where agents stream flow records (HTTP/2 over TLS), e.g. :7443
  --tls-cert FILE       the collector's certificate (PEM)
  --tls-key FILE        its key (PEM)
  --client-ca FILE      CA bundle (PEM): an agent must present a certificate signed by it
  --api-addr A          HTTP API and web UI (default 127.0.0.1:8081; reach it with kubectl port-forward)
  --api-token-file FILE when set, API requests need "Authorization: Bearer <the file's content>"
  --ui BOOL             serve the web UI at / of the API address (default true)
  --retention D         how long flows are kept in memory, in ${BUCKET_SECONDS}s buckets (default 1h)
  --export-file FILE    append every flow of each closed bucket to FILE as JSON lines
  --health-addr A       /healthz, /readyz and /metrics (default 127.0.0.1:9095)
  --log-level L         ERROR, WARNING, INFO (default) or DEBUG
`;

const CLI = { program: 'netplugin-flows', usage: USAGE };
const usageError = (msg: string): never => cliUsageError(CLI, msg);

function readPem(flag: string, file: string | undefined): Buffer {
  if (!file) usageError(`${flag} FILE is required (the collector accepts agents over mTLS only)`);
  try {
    return readFileSync(file!);
  } catch (e) {
    return usageError(`${flag} ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
}

async function main(): Promise<void> {
  const values = await parseEntryFlags(CLI, async () => (await import('../ctl/version.js')).NETPLUGIN_VERSION, {
    ...stringFlags('collector-addr', 'tls-cert', 'tls-key', 'client-ca', 'api-addr', 'api-token-file', 'ui'),
    ...stringFlags('retention', 'export-file', 'health-addr', 'log-level'),
  });
  if (!values) return;
  const log = entryLogger(CLI, values);
  const collectorAddr = values['collector-addr'];
  if (!collectorAddr) usageError('--collector-addr HOST:PORT is required (where agents stream flow records)');
  const retentionMs = parseDuration(values.retention ?? '1h');
  if (retentionMs === undefined || retentionMs < BUCKET_SECONDS * 1000 || retentionMs > 7 * 24 * 3_600_000) {
    usageError(
      `--retention '${values.retention}' is not a duration between ${BUCKET_SECONDS}s and 168h (e.g. 1h, 30m)`,
    );
  }
  if (values.ui !== undefined && values.ui !== 'true' && values.ui !== 'false')
    usageError(`--ui '${values.ui}': expected true or false`);
  const cert = readPem('--tls-cert', values['tls-cert']);
  const key = readPem('--tls-key', values['tls-key']);
  const clientCa = readPem('--client-ca', values['client-ca']);
  let token: string | undefined;
  if (values['api-token-file']) {
    try {
      token = readFileSync(values['api-token-file'], 'utf8').trim();
    } catch (e) {
      usageError(
        `--api-token-file ${values['api-token-file']}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`,
      );
    }
    if (!token) usageError(`--api-token-file ${values['api-token-file']} is empty`);
  }
  const fatal = fatalExit(CLI, log);

  const store = new FlowStore({ retentionMs: retentionMs! });
  const registry = new Registry();
  const { NETPLUGIN_VERSION } = await import('../ctl/version.js');
  registerProcessMetrics(registry, { component: 'netplugin-flows', version: NETPLUGIN_VERSION });
  const byResult = (name: string, help: string) => registry.counter(name, help, ['result']);
  const batches = byResult(
    'netplugin_flows_batches_total',
    'Batches received from agents, by result (taken, duplicate)',
  );
  const records = byResult(
    'netplugin_flows_records_total',
    'Flow records received from agents, by result (accepted, rejected)',
  );
  const exported = registry.counter('netplugin_flows_exported_total', 'Aggregated flows written to --export-file');
  const held = registry.gauge('netplugin_flows_aggregated', 'Aggregated flows held in memory');
  const tooOld = registry.gauge(
    'netplugin_flows_records_too_old',
    'Records dropped because they started before the retention',
  );
  const agents = registry.gauge('netplugin_flows_agent_streams', 'Agent requests open on the collector');

  let exportFile: WriteStream | undefined;
  if (values['export-file']) {
    exportFile = createWriteStream(values['export-file'], { flags: 'a', mode: 0o640 });
    exportFile.on('error', (e) => fatal(`--export-file ${values['export-file']}`, e));
    store.onBucketClosed((flows) => {
      if (!flows.length) return;
      exportFile!.write(flows.map((f) => JSON.stringify(f)).join('\n') + '\n');
      exported.inc(undefined, flows.length);
    });
  }

  const collector = await startCollector({
    addr: collectorAddr!,
    cert,
    key,
    clientCa,
    store,
    log: (lv, msg, fields) => (lv === 'warn' ? log.warn(msg, fields) : log.info(msg, fields)),
    onBatch: (b) => {
      batches.inc({ result: b.duplicate ? 'duplicate' : 'taken' });
      if (b.accepted) records.inc({ result: 'accepted' }, b.accepted);
      if (b.rejected) records.inc({ result: 'rejected' }, b.rejected);
    },
  }).catch((e) => fatal('collector', e));
  const api = await startApi({
    addr: values['api-addr'] ?? '127.0.0.1:8081',
    store,
    ...(token ? { token } : {}),
    ui: values.ui !== 'false',
  }).catch((e) => fatal('API', e));
  registry.onCollect(() => {
    const s = store.stats();
    held.set(undefined, s.flows);
    tooOld.set(undefined, s.tooOld);
    agents.set(undefined, collector.connections());
  });
  const health = await startHealthServer({
    addr: values['health-addr'] ?? '127.0.0.1:9095',
    registry,
    healthz: () => true,
    readyz: () => true,
  }).catch((e) => fatal('health listener', e));
  const ticker = setInterval(() => store.tick(), 1000);
  log.info('netplugin-flows: serving', {
    collector: `${collector.host}:${collector.port}`,
    api: `${api.host}:${api.port}`,
    health: `${health.host}:${health.port}`,
    retention: values.retention ?? '1h',
    ui: values.ui !== 'false',
  });

  let exiting = false;
  const stop = async (sig: string) => {
    if (exiting) return;
    exiting = true;
    log.info(`netplugin-flows: ${sig}: stopping (flows in memory are dropped; agents re-send what they still buffer)`);
    clearInterval(ticker);
    await Promise.all([collector.close(), api.close(), health.close()]).catch(() => undefined);
    if (exportFile) await new Promise<void>((r) => exportFile!.end(() => r()));
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
}

await main();
