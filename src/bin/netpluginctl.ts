// netpluginctl entry: wires runCtl to the process. stdin is read only by
// commands that take `-f -`, so an interactive shell never blocks.
import { runCtl } from '../ctl/index.js';

async function readAll(): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

// SIGINT ends a command that runs until interrupted (get -w) cleanly; other commands exit on it as usual.
const interrupt = new AbortController();
process.on('SIGINT', () => {
  if (interrupt.signal.aborted) process.exit(130);
  interrupt.abort();
});

const code = await runCtl(process.argv.slice(2), {
  env: process.env,
  stdin: readAll,
  stdout: (s) => void process.stdout.write(s),
  stderr: (s) => void process.stderr.write(s),
  stderrIsTTY: process.stderr.isTTY === true,
  signal: interrupt.signal,
});
// Let buffered pipes drain, then exit even if a client library left a handle open.
process.exitCode = code;
await new Promise<void>((r) => process.stdout.write('', () => r()));
process.exit(code);
