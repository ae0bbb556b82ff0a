// The benchmark's outputs: a Markdown table and a hand-written SVG chart
// (ADD p50 latency and ADD throughput by concurrency, per path).

export const PATHS = [
  { key: 'ptp', label: 'ptp + host-local', color: '#7f7f7f' },
  { key: 'agent', label: 'netplugin (shim + agent)', color: '#1f77b4' },
  { key: 'perexec', label: 'netplugin per-exec fallback', color: '#ff7f0e' },
];

const f1 = (x) =>
  x === undefined || Number.isNaN(x) ? '–' : x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2);

export function markdown(r) {
  const L = [];
  L.push(`# netplugin benchmark (${r.quick ? 'quick' : 'full'} run)`);
  L.push('');
  L.push(
    `${r.date} · ${r.machine.cpus} × ${r.machine.cpuModel} · Linux ${r.machine.kernel} · Node ${r.machine.node} · ` +
      `${r.pods} pods per cell · command: \`${r.command}\``,
  );
  L.push('');
  L.push(
    'Latency is per plugin exec (spawn to exit) in ms; pods/s is pods over the wall time of the whole phase; CPU is ' +
      "node-side CPU per pod in ms (the exec'd plugin processes and their children, plus the agent with its worker " +
      'threads); etcd CPU is listed apart.',
  );
  L.push('');
  L.push(
    '| path | c | ADD p50 | ADD p90 | ADD p99 | ADD pods/s | DEL p50 | DEL p90 | DEL p99 | DEL pods/s | CPU/pod ' +
      'ADD+DEL | etcd CPU/pod |',
  );
  L.push('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const c of r.concurrency) {
    for (const p of PATHS) {
      const a = r.cells.find((x) => x.path === p.key && x.c === c && x.phase === 'ADD');
      const d = r.cells.find((x) => x.path === p.key && x.c === c && x.phase === 'DEL');
      if (!a || !d) continue;
      L.push(
        `| ${p.label} | ${c} | ${f1(a.p50)} | ${f1(a.p90)} | ${f1(a.p99)} | ${f1(a.podsPerSec)} | ${f1(d.p50)} | ` +
          `${f1(d.p90)} | ${f1(d.p99)} | ${f1(d.podsPerSec)} | ${f1(a.cpuMsPerPod + d.cpuMsPerPod)} | ` +
          `${p.key === 'ptp' ? '–' : f1(a.etcdCpuMsPerPod + d.etcdCpuMsPerPod)} |`,
      );
    }
  }
  L.push('');
  L.push(
    `Exec floor of the harness (\`/bin/true\`, same spawn path): p50 ${f1(r.floor.c1.p50)} ms at c=1, ` +
      `${f1(r.floor.cMax.podsPerSec)} execs/s at c=${r.floor.cMax.c}.`,
  );
  L.push(
    `Pure dataplane (in-process setupWorkload / teardownWorkload, one IPv4 address): setup p50 ` +
      `${f1(r.dataplane.setup.p50)} ms (p90 ${f1(r.dataplane.setup.p90)}), teardown p50 ` +
      `${f1(r.dataplane.teardown.p50)} ms (p90 ${f1(r.dataplane.teardown.p90)}).`,
  );
  L.push(
    `Agent memory: peak RSS (VmHWM) ${f1(r.agent.hwmMiB)} MiB after all cells; RSS at the end ${f1(r.agent.rssMiB)} ` +
      `MiB.`,
  );
  L.push('');
  L.push(
    "etcd writes per pod (agent path), from etcd's /metrics before and after each phase: raft proposals committed " +
      '(one per write request) and WAL fsyncs (concurrent writes share one); and the round trips the node side made ' +
      '(Range and Txn requests, gRPC or through the JSON gateway).',
  );
  L.push('');
  // Results written before the round-trip counters existed have none: a dash.
  const calls = (x) => (x.rangeCalls === undefined ? '–' : `${f1(x.rangeCalls)} + ${f1(x.txnCalls)}`);
  L.push(
    '| c | ADD writes/pod | ADD fsyncs/pod | DEL writes/pod | DEL fsyncs/pod | ADD range + txn calls/pod | DEL range ' +
      '+ txn calls/pod |',
  );
  L.push('|---:|---:|---:|---:|---:|---:|---:|');
  for (const c of r.concurrency) {
    const a = r.cells.find((x) => x.path === 'agent' && x.c === c && x.phase === 'ADD')?.etcdWritesPerPod;
    const d = r.cells.find((x) => x.path === 'agent' && x.c === c && x.phase === 'DEL')?.etcdWritesPerPod;
    if (a && d)
      L.push(
        `| ${c} | ${f1(a.proposals)} | ${f1(a.fsyncs)} | ${f1(d.proposals)} | ${f1(d.fsyncs)} | ${calls(a)} | ` +
          `${calls(d)} |`,
      );
  }
  if (r.scale) {
    L.push('');
    L.push(
      `Scale cell (agent): ADD p50 of one pod on an empty node ${f1(r.scale.first.p50)} ms, with ${r.scale.pods} ` +
        `pods on the node ${f1(r.scale.full.p50)} ms (${r.scale.samples} samples each; ratio ` +
        `${r.scale.ratio.toFixed(2)}); agent RSS with ${r.scale.pods} pods ${f1(r.scale.rssMiB)} MiB.`,
    );
  }
  L.push('');
  L.push('## Targets');
  L.push('');
  L.push('| target | wanted | measured | |');
  L.push('|---|---:|---:|---|');
  for (const t of r.targets)
    L.push(
      `| ${t.name} | ${t.op} ${t.want} | ${t.value === undefined ? '–' : t.value.toFixed(2)} | ` +
        `${t.value === undefined ? 'not measured' : t.pass ? 'met' : '**missed**'} |`,
    );
  L.push('');
  return L.join('\n');
}

const esc = (s) => String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;');

/** Grouped bars: one group per concurrency, one bar per path. */
function panel({ x0, y0, w, h, title, unit, conc, value, log }) {
  const vals = [];
  for (const c of conc) for (const p of PATHS) vals.push(value(p.key, c));
  const finite = vals.filter((v) => v !== undefined && v > 0);
  const max = Math.max(...finite);
  const min = Math.min(...finite);
  const lo = log ? 10 ** Math.floor(Math.log10(min)) : 0;
  const hi = log ? 10 ** Math.ceil(Math.log10(max)) : niceCeil(max);
  const y = (v) =>
    log ? y0 + h - ((Math.log10(v) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo))) * h : y0 + h - (v / hi) * h;
  const out = [];
  out.push(
    `<text x="${x0 + w / 2}" y="${y0 - 14}" text-anchor="middle" font-size="14" font-weight="bold">${esc(title)}` +
      `</text>`,
  );
  const ticks = log ? decades(lo, hi) : [0, hi / 4, hi / 2, (3 * hi) / 4, hi];
  for (const t of ticks) {
    out.push(
      `<line x1="${x0}" x2="${x0 + w}" y1="${y(t || lo).toFixed(1)}" y2="${y(t || lo).toFixed(1)}" stroke="#ddd"/>`,
    );
    out.push(
      `<text x="${x0 - 6}" y="${(y(t || lo) + 4).toFixed(1)}" text-anchor="end" font-size="11">` +
        `${t >= 1 ? t.toFixed(0) : t}</text>`,
    );
  }
  out.push(
    `<text x="${x0 - 40}" y="${y0 + h / 2}" font-size="11" transform="rotate(-90 ${x0 - 40} ${y0 + h / 2})" ` +
      `text-anchor="middle">${esc(unit)}${log ? ' (log scale)' : ''}</text>`,
  );
  const gw = w / conc.length;
  const bw = Math.min(36, (gw * 0.8) / PATHS.length);
  conc.forEach((c, gi) => {
    const gx = x0 + gi * gw + (gw - bw * PATHS.length) / 2;
    PATHS.forEach((p, pi) => {
      const v = value(p.key, c);
      if (v === undefined || !(v > 0)) return;
      const top = y(v);
      out.push(
        `<rect x="${(gx + pi * bw).toFixed(1)}" y="${top.toFixed(1)}" width="${(bw - 2).toFixed(1)}" height="` +
          `${(y0 + h - top).toFixed(1)}" fill="${p.color}"><title>${esc(p.label)}, c=${c}: ${f1(v)} ${esc(unit)}` +
          `</title></rect>`,
      );
      out.push(
        `<text x="${(gx + pi * bw + bw / 2 - 1).toFixed(1)}" y="${(top - 3).toFixed(1)}" text-anchor="middle" ` +
          `font-size="10">${f1(v)}</text>`,
      );
    });
    out.push(
      `<text x="${(x0 + gi * gw + gw / 2).toFixed(1)}" y="${y0 + h + 16}" text-anchor="middle" font-size="12">c=${c}` +
        `</text>`,
    );
  });
  out.push(`<line x1="${x0}" x2="${x0 + w}" y1="${y0 + h}" y2="${y0 + h}" stroke="#333"/>`);
  out.push(`<line x1="${x0}" x2="${x0}" y1="${y0}" y2="${y0 + h}" stroke="#333"/>`);
  return out.join('\n');
}

function niceCeil(v) {
  const e = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * e >= v) return m * e;
  return 10 * e;
}

function decades(lo, hi) {
  const out = [];
  for (let v = lo; v <= hi * 1.0001; v *= 10) out.push(v);
  return out;
}

export function svg(r) {
  const W = 900;
  const H = 420;
  const cell = (path, c, phase) => r.cells.find((x) => x.path === path && x.c === c && x.phase === phase);
  const parts = [];
  parts.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" ` +
      `font-family="sans-serif">`,
  );
  parts.push(`<rect width="${W}" height="${H}" fill="white"/>`);
  parts.push(
    `<text x="${W / 2}" y="22" text-anchor="middle" font-size="15">CNI ADD, ${r.pods} pods per cell, ` +
      `${esc(r.date.slice(0, 10))} (${r.machine.cpus} CPUs, shared machine)</text>`,
  );
  parts.push(
    panel({
      x0: 80,
      y0: 70,
      w: 330,
      h: 260,
      title: 'ADD latency p50 (lower is better)',
      unit: 'ms',
      conc: r.concurrency,
      value: (p, c) => cell(p, c, 'ADD')?.p50,
      log: true,
    }),
  );
  parts.push(
    panel({
      x0: 530,
      y0: 70,
      w: 330,
      h: 260,
      title: 'ADD throughput (higher is better)',
      unit: 'pods/s',
      conc: r.concurrency,
      value: (p, c) => cell(p, c, 'ADD')?.podsPerSec,
      log: false,
    }),
  );
  PATHS.forEach((p, i) => {
    const x = 120 + i * 250;
    parts.push(
      `<rect x="${x}" y="${H - 40}" width="14" height="14" fill="${p.color}"/><text x="${x + 20}" y="${H - 28}" ` +
        `font-size="12">${esc(p.label)}</text>`,
    );
  });
  parts.push('</svg>');
  return parts.join('\n') + '\n';
}
