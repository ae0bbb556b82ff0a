// Output helpers for the demo: step headers, the commands being run, indented
// results. Colour only on a terminal (and never with NO_COLOR), so a log file
// or CI output stays plain text.
const colour = Boolean(process.stdout.isTTY) && !process.env.NO_COLOR;
const wrap = (code) => (s) => (colour ? `\x1b[${code}m${s}\x1b[0m` : String(s));

export const bold = wrap('1');
export const dim = wrap('2');
export const green = wrap('32');
export const red = wrap('31');
export const cyan = wrap('36');
export const yellow = wrap('33');

const started = process.hrtime.bigint();
let silenced = false;

/** After Ctrl-C the steps still in flight must not print over the clean-up messages. */
export function silence() {
  silenced = true;
}

function out(s) {
  if (!silenced) process.stdout.write(s);
}
let stepNo = 0;

export function elapsedS() {
  return Number(process.hrtime.bigint() - started) / 1e9;
}

export function step(title) {
  stepNo += 1;
  out(`\n${bold(cyan(`[${stepNo}] ${title}`))}  ${dim(`(t=${elapsedS().toFixed(1)}s)`)}\n`);
}

/** A command line as the user would type it. */
export function cmd(line) {
  out(`${dim('$')} ${bold(line)}\n`);
}

/** Indented block (command output, JSON, YAML). */
export function block(text, indent = '    ') {
  const t = String(text).replace(/\s+$/, '');
  if (t === '') return;
  out(
    t
      .split('\n')
      .map((l) => (l.trim() ? indent + l : ''))
      .join('\n') + '\n',
  );
}

export function note(text) {
  out(`  ${dim(text)}\n`);
}

export function line(text) {
  out(`  ${text}\n`);
}

export function ok(text) {
  out(`  ${green('ok')}  ${text}\n`);
}

export function fail(text) {
  out(`  ${red('FAIL')}  ${text}\n`);
}
