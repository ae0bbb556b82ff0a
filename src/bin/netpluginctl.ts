// netpluginctl entry: wires runCtl to the process. stdin is read only by
// commands that take `-f -`, so an interactive shell never blocks.
import { runCtl } from '../ctl/index.js';

async function readAll(): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

const code = await runCtl(process.argv.slice(2), {
  env: process.env,
  stdin: readAll,
  stdout: (s) => void process.stdout.write(s),
  stderr: (s) => void process.stderr.write(s),
  stderrIsTTY: process.stderr.isTTY === true,
});
// Let buffered pipes drain, then exit even if a client library left a handle open.
process.exitCode = code;
await new Promise<void>((r) => process.stdout.write('', () => r()));
process.exit(code);
