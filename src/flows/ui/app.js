// The flow UI: plain DOM, no framework, everything served by the aggregator.
// Names and labels come from the cluster's tenants: they only ever go into
// textContent and SVG text nodes, never into markup.

const PAGE_SIZE = 50;
const MAX_LIVE_ROWS = 500;
const state = { page: 0, sortBy: '-startTime', filter: {}, rows: [], total: 0, live: null, view: 'flows' };
const $ = (sel) => document.querySelector(sel);

function token() {
  return sessionStorage.getItem('netplugin-flows-token') || '';
}

function headers() {
  const t = token();
  return t ? { authorization: `Bearer ${t}` } : {};
}

function setStatus(text) {
  $('#status').textContent = text;
}

async function api(path, params) {
  const qs = new URLSearchParams(params).toString();
  const res = await fetch(`${path}${qs ? `?${qs}` : ''}`, { headers: headers() });
  if (res.status === 401) {
    $('#auth').hidden = false;
    throw new Error('the API needs a token');
  }
  const body = await res.json();
  if (!res.ok) throw new Error(body.error || `HTTP ${res.status}`);
  return body;
}

function readFilter() {
  const f = {};
  for (const el of $('#filters').elements) {
    if (el.name && el.value.trim()) f[el.name] = el.value.trim();
  }
  return f;
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function shortTime(iso) {
  const d = new Date(iso);
  return d.toLocaleTimeString([], { hour12: false }) + ` ${d.toLocaleDateString()}`;
}

function endpoint(type, ns, name) {
  return type === 'net' ? `${name} (net)` : `${ns ? `${ns}/` : ''}${name}${type === 'hep' ? ' (host)' : ''}`;
}

function hitText(h) {
  return `${h.kind}${h.tier ? ` ${h.tier}` : ''} ${h.namespace ? `${h.namespace}/` : ''}${h.name}${h.ruleIndex >= 0 ? `[${h.ruleIndex}]` : ''} ${h.action}`;
}

/** The identity of an aggregated flow: its key and its bucket. */
function flowId(f) {
  const bucket = Math.floor(Date.parse(f.startTime) / 15000);
  return JSON.stringify([
    bucket,
    f.reporter,
    f.action,
    f.sourceType,
    f.sourceNamespace,
    f.sourceName,
    f.sourceLabels,
    f.destType,
    f.destNamespace,
    f.destName,
    f.destLabels,
    f.destPort,
    f.protocol,
    f.policies,
  ]);
}

function row(f, fresh) {
  const decisive = f.policies.enforced[f.policies.enforced.length - 1];
  const tr = el(
    'tr',
    { class: fresh ? 'fresh' : '', 'data-action': f.action },
    el('td', {}, shortTime(f.startTime)),
    el('td', {}, shortTime(f.endTime)),
    el('td', { class: `action-${f.action}` }, f.action),
    el('td', {}, endpoint(f.sourceType, f.sourceNamespace, f.sourceName)),
    el('td', {}, endpoint(f.destType, f.destNamespace, f.destName)),
    el('td', {}, f.protocol),
    el('td', {}, f.destPort || ''),
    el('td', {}, f.reporter),
    el(
      'td',
      {},
      decisive ? hitText(decisive) : '',
      f.policies.pending.length ? el('span', { class: 'muted' }, ` +${f.policies.pending.length} pending`) : '',
    ),
  );
  tr.addEventListener('click', () => {
    for (const r of document.querySelectorAll('#flows tbody tr.selected')) r.classList.remove('selected');
    tr.classList.add('selected');
    showDetails(f);
  });
  return tr;
}

function renderRows() {
  const body = $('#flows tbody');
  body.replaceChildren(...state.rows.map((f) => row(f, f.__fresh)));
  for (const f of state.rows) delete f.__fresh;
  const pages = Math.max(1, Math.ceil(state.total / PAGE_SIZE));
  $('#page').textContent = state.live
    ? `live: ${state.rows.length} flows`
    : `page ${state.page + 1} of ${pages} (${state.total} flows)`;
  $('#prev').disabled = !!state.live || state.page === 0;
  $('#next').disabled = !!state.live || state.page + 1 >= pages;
  if (state.view === 'graph') drawGraph();
}

function traceRows(hits) {
  if (!hits.length) return [el('tr', {}, el('td', { colspan: '7', class: 'muted' }, 'none'))];
  return hits.map((h, i) =>
    el(
      'tr',
      {},
      el('td', {}, i + 1),
      el('td', {}, h.kind),
      el('td', {}, h.tier || '—'),
      el('td', {}, h.namespace || '—'),
      el('td', {}, h.name),
      el('td', {}, h.ruleIndex >= 0 ? h.ruleIndex : '—'),
      el('td', { class: `action-${h.action}` }, h.action),
    ),
  );
}

function showDetails(f) {
  const d = $('#details');
  d.hidden = false;
  const fields = [
    ['Action', f.action],
    ['Reporter', f.reporter],
    ['Start', f.startTime],
    ['End', f.endTime],
    ['Source', `${endpoint(f.sourceType, f.sourceNamespace, f.sourceName)} [${f.sourceType}]`],
    [
      'Source labels',
      Object.entries(f.sourceLabels)
        .map(([k, v]) => `${k}=${v}`)
        .join(', ') || '—',
    ],
    ['Destination', `${endpoint(f.destType, f.destNamespace, f.destName)} [${f.destType}]`],
    [
      'Dest labels',
      Object.entries(f.destLabels)
        .map(([k, v]) => `${k}=${v}`)
        .join(', ') || '—',
    ],
    ['Protocol / port', `${f.protocol} ${f.destPort || ''}`],
    ['Packets in / out', `${f.packetsIn} / ${f.packetsOut}`],
    ['Bytes in / out', `${f.bytesIn} / ${f.bytesOut}`],
    ['Connections', `${f.connectionsStarted} started, ${f.connectionsCompleted} completed, ${f.connectionsLive} live`],
  ];
  $('#flow-summary').replaceChildren(...fields.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
  $('#trace-enforced tbody').replaceChildren(...traceRows(f.policies.enforced));
  $('#trace-pending tbody').replaceChildren(...traceRows(f.policies.pending));
}

async function load() {
  try {
    const r = await api('/api/v1/flows', {
      ...state.filter,
      sortBy: state.sortBy,
      pageSize: PAGE_SIZE,
      page: state.page,
    });
    state.rows = r.items;
    state.total = r.total;
    renderRows();
    setStatus(`updated ${new Date().toLocaleTimeString([], { hour12: false })}`);
  } catch (e) {
    setStatus(e.message);
  }
}

async function loadHints() {
  for (const type of ['sourceNamespace', 'sourceName', 'destNamespace', 'destName', 'policy']) {
    try {
      const r = await api('/api/v1/flows/hints', { type });
      $(`#hint-${type}`).replaceChildren(...r.items.map((v) => el('option', { value: v })));
    } catch {
      return;
    }
  }
}

/** Live mode: the watch stream (SSE read through fetch, so the bearer token can go in a header). */
async function startLive() {
  const ctl = new AbortController();
  state.live = ctl;
  await load();
  renderRows();
  setStatus('live');
  try {
    const res = await fetch(`/api/v1/flows?${new URLSearchParams({ ...state.filter, watch: 'true' })}`, {
      headers: headers(),
      signal: ctl.signal,
    });
    if (!res.ok) throw new Error((await res.json()).error || `HTTP ${res.status}`);
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const event = buf.slice(0, i);
        buf = buf.slice(i + 2);
        const data = event
          .split('\n')
          .filter((l) => l.startsWith('data:'))
          .map((l) => l.slice(5))
          .join('\n');
        if (data) onLiveFlow(JSON.parse(data));
      }
    }
    if (state.live === ctl) setStatus('live stream ended');
  } catch (e) {
    if (state.live === ctl) setStatus(`live: ${e.message}`);
  }
}

function onLiveFlow(f) {
  const id = flowId(f);
  const at = state.rows.findIndex((r) => flowId(r) === id);
  if (at >= 0) state.rows.splice(at, 1);
  f.__fresh = true;
  state.rows.unshift(f);
  state.rows.length = Math.min(state.rows.length, MAX_LIVE_ROWS);
  state.total = state.rows.length;
  renderRows();
}

function stopLive() {
  if (state.live) state.live.abort();
  state.live = null;
}

// The graph: namespaces as columns of workloads, an edge per source -> destination
// coloured by the verdicts seen (a pair both allowed and denied gets two edges).
const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

function drawGraph() {
  const g = $('#graph');
  const nodes = new Map();
  const edges = new Map();
  const nodeOf = (type, ns, name) => {
    const group = type === 'net' ? '(networks)' : type === 'hep' ? '(hosts)' : ns;
    const id = `${group}\u0000${name}`;
    if (!nodes.has(id)) nodes.set(id, { id, group, name });
    return id;
  };
  for (const f of state.rows) {
    const s = nodeOf(f.sourceType, f.sourceNamespace, f.sourceName);
    const d = nodeOf(f.destType, f.destNamespace, f.destName);
    const key = `${s}\u0001${d}\u0001${f.action}`;
    const e = edges.get(key) || { s, d, action: f.action, packets: 0, ports: new Set() };
    e.packets += f.packetsIn + f.packetsOut;
    e.ports.add(`${f.protocol}${f.destPort ? `/${f.destPort}` : ''}`);
    edges.set(key, e);
  }
  const groups = [...new Set([...nodes.values()].map((n) => n.group))].sort();
  const colW = 200;
  const rowH = 56;
  const pos = new Map();
  let maxRows = 1;
  groups.forEach((grp, gi) => {
    const members = [...nodes.values()].filter((n) => n.group === grp).sort((a, b) => (a.name < b.name ? -1 : 1));
    maxRows = Math.max(maxRows, members.length);
    members.forEach((n, i) => pos.set(n.id, { x: 40 + gi * colW + colW / 2 - 20, y: 150 + i * rowH }));
  });
  const width = Math.max(600, groups.length * colW + 80);
  const height = Math.max(340, 260 + maxRows * rowH);
  g.setAttribute('viewBox', `0 0 ${width} ${height}`);
  const defs = svg('defs', {});
  for (const a of ['Allow', 'Deny', 'Pass']) {
    const m = svg('marker', {
      id: `arrow-${a}`,
      viewBox: '0 0 10 10',
      refX: 18,
      refY: 5,
      markerWidth: 7,
      markerHeight: 7,
      orient: 'auto-start-reverse',
    });
    m.append(
      svg('path', {
        d: 'M0,0 L10,5 L0,10 z',
        class: `arrow-${a}`,
        fill: a === 'Allow' ? '#1a7f37' : a === 'Deny' ? '#cf222e' : '#8c959f',
      }),
    );
    defs.append(m);
  }
  const parts = [defs];
  groups.forEach((grp, gi) => {
    const x = 40 + gi * colW;
    parts.push(svg('rect', { class: 'ns-box', x: x - 10, y: 20, width: colW - 40, height: height - 40, rx: 8 }));
    parts.push(svg('text', { class: 'ns-label', x, y: 40 }, grp));
  });
  for (const e of edges.values()) {
    const a = pos.get(e.s);
    const b = pos.get(e.d);
    // Allowed edges arc above, denied below, passed a little less: a pair with several verdicts stays readable.
    const bend = e.action === 'Deny' ? 1 : e.action === 'Pass' ? -0.6 : -1;
    const dx = b.x - a.x;
    const lift = a.x === b.x ? 0 : bend * (30 + Math.abs(dx) * 0.18);
    const cx = a.x === b.x ? a.x + 70 * (bend > 0 ? 1 : -1) : (a.x + b.x) / 2;
    const cy = (a.y + b.y) / 2 + lift;
    const path = svg('path', {
      class: `edge ${e.action}`,
      d: `M${a.x},${a.y} Q${cx},${cy} ${b.x},${b.y}`,
      'marker-end': `url(#arrow-${e.action})`,
      'data-action': e.action,
    });
    path.append(svg('title', {}, `${e.action}: ${[...e.ports].join(', ')}, ${e.packets} packets`));
    parts.push(path);
  }
  for (const n of nodes.values()) {
    const p = pos.get(n.id);
    const grp = svg('g', { class: 'node', transform: `translate(${p.x},${p.y})` });
    grp.append(svg('circle', { r: 9 }), svg('text', { x: 14, y: 4 }, n.name));
    parts.push(grp);
  }
  g.replaceChildren(...parts);
}

function showView(view) {
  state.view = view;
  $('#flows-view').hidden = view !== 'flows';
  $('#graph-view').hidden = view !== 'graph';
  $('#tab-flows').classList.toggle('active', view === 'flows');
  $('#tab-graph').classList.toggle('active', view === 'graph');
  if (view === 'graph') drawGraph();
}

function restart() {
  const live = $('#live').checked;
  stopLive();
  state.page = 0;
  state.filter = readFilter();
  if (live) startLive();
  else load();
}

document.addEventListener('DOMContentLoaded', () => {
  $('#filters').addEventListener('submit', (e) => {
    e.preventDefault();
    restart();
  });
  $('#filters').addEventListener('reset', () => setTimeout(restart, 0));
  $('#auth').addEventListener('submit', (e) => {
    e.preventDefault();
    sessionStorage.setItem('netplugin-flows-token', e.target.elements.token.value.trim());
    $('#auth').hidden = true;
    restart();
    loadHints();
  });
  $('#live').addEventListener('change', restart);
  $('#prev').addEventListener('click', () => ((state.page = Math.max(0, state.page - 1)), load()));
  $('#next').addEventListener('click', () => ((state.page += 1), load()));
  $('#close-details').addEventListener('click', () => ($('#details').hidden = true));
  $('#tab-flows').addEventListener('click', () => showView('flows'));
  $('#tab-graph').addEventListener('click', () => showView('graph'));
  for (const th of document.querySelectorAll('th[data-sort]')) {
    th.addEventListener('click', () => {
      const f = th.getAttribute('data-sort');
      state.sortBy = state.sortBy === f ? `-${f}` : f;
      load();
    });
  }
  load();
  loadHints();
  // Hints and (outside live mode) nothing else refresh by themselves: new namespaces appear here.
  setInterval(loadHints, 30000);
});
