// poolrun's dashboard (docs/dashboard.md): one ES module and no library, served by poold from its
// own binary. It reads poold's API with the token the user signs in with (kept in this tab's
// session storage): GET /v1/dashboard (every GPU in columns, and the leases) and /v1/queue every
// second, /v1/history every 10 s; administrators' actions go through the API's own routes, and
// poold alone decides who may do what. The cluster is drawn on one canvas per leaf switch: a DOM
// element per GPU would not paint 100,000 GPUs in 2 s. A switch's canvas is redrawn only when what
// it shows changed, and only while it is on the screen (or near it): the others when scrolled to.

import { leaderGone, otherReplicas, strandedMessage } from '/ui/replicas.js';

const POLL_MS = 1000;
const HISTORY_MS = 10000;
const REPLICAS_MS = 60000;
const USAGE_MS = 5000;   // the usage ledger's report: its running leases count up to the heartbeat  // a replica's list changes at a failover, and the leader asks etcd for it
const TOKEN_KEY = 'poolrun.token';

const $ = (id) => document.getElementById(id);

// GPU states by their code in /v1/dashboard. Each has a fill and a mark drawn over it, so that a
// state is never told by colour alone.
const STATES = {
  f: { name: 'free', fill: '#cfe8d0', mark: null },
  l: { name: 'leased', fill: '#3f73d9', mark: 'bar' },
  x: { name: 'failed', fill: '#d93025', mark: 'cross' },
  o: { name: 'foreign', fill: '#f29900', mark: 'stripe' },
  m: { name: 'mig', fill: '#a78bd6', mark: 'dot' },
};
const NODE_STATES = {
  up: { frame: '#e9edf1', edge: null },
  draining: { frame: '#fdf0cf', edge: '#9a6700' },
  down: { frame: '#fbe0de', edge: '#b3261e' },
  unreachable: { frame: '#c4c8cd', edge: '#5d6773' },
};
// Utilisation, in five steps from idle to busy (no reading: grey).
const UTIL_STEPS = [
  [5, '#e6ecf5'], [25, '#b5cbee'], [50, '#7ea4e3'], [75, '#4a7bd6'], [101, '#1f4fb0'],
];
const NO_READING = '#dfe2e6';

const view = {
  token: sessionStorage.getItem(TOKEN_KEY),
  snap: null, prev: null, queue: [], history: null,
  nodeOfGpu: null, nodeIndex: new Map(), groups: [], groupKey: '',
  selected: -1, pinned: false, colour: 'state', running: false, lastGood: 0,
  replicas: [],  // the pool's other replicas, as the leader last listed them (replicas.js)
};
window.poolrunPerf = { firstRenderMs: null, updates: [] };

// ---- poold's API ----

class ApiError extends Error {
  constructor(status, message, reason) {
    super(message);
    this.status = status;
    this.reason = reason || '';
  }
}

async function request(method, path) {
  let r;
  try {
    r = await fetch(path, { method, headers: { Authorization: 'Bearer ' + view.token }, cache: 'no-store' });
  } catch (e) {
    throw new ApiError(0, `cannot reach poold (${e.message})`);
  }
  const text = await r.text();
  if (!r.ok) {
    let message = `${r.status} ${r.statusText}`, reason = '';
    try {
      const body = JSON.parse(text);
      if (body.error) message = body.error;
      if (typeof body.reason === 'string') reason = body.reason;
    } catch (e) { /* not JSON: the status line says it */ }
    throw new ApiError(r.status, message, reason);
  }
  return text;
}

// ---- formatting ----

function duration(ms) {
  if (ms == null || !isFinite(ms)) return '-';
  let s = Math.max(0, Math.round(ms / 1000));
  const d = Math.floor(s / 86400);
  s -= d * 86400;
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  const two = (n) => String(n).padStart(2, '0');
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}:${two(m)}:${two(sec)}`;
  return `${m}:${two(sec)}`;
}

function gib(mib) {
  return mib == null ? '-' : (mib / 1024).toFixed(1);
}

// "n01:0-3,6 n02:0-7" from [{node, index}].
function nodeList(gpus) {
  const by = new Map();
  for (const g of gpus) {
    if (!by.has(g.node)) by.set(g.node, []);
    by.get(g.node).push(g.index);
  }
  const parts = [];
  for (const [node, idx] of by) {
    idx.sort((a, b) => a - b);
    const runs = [];
    for (let i = 0; i < idx.length; i++) {
      let j = i;
      while (j + 1 < idx.length && idx[j + 1] === idx[j] + 1) j++;
      runs.push(i === j ? `${idx[i]}` : `${idx[i]}-${idx[j]}`);
      i = j;
    }
    parts.push(`${node}:${runs.join(',')}`);
  }
  return parts.join(' ');
}

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('data-') || k.startsWith('aria-') || k === 'role') e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) if (c != null) e.append(c);
  return e;
}

// ---- the snapshot's shape ----

function nodeState(i) {
  const n = view.snap.nodes;
  return n.unreachable[i] ? 'unreachable' : n.state[i];
}

function gpuCount(i) {
  const first = view.snap.nodes.first_gpu;
  return (i + 1 < first.length ? first[i + 1] : view.snap.gpus.state.length) - first[i];
}

// Indexes that depend only on the list of nodes: rebuilt when it changes.
function index() {
  const n = view.snap.nodes;
  const key = n.name.length + ':' + n.name.join(',') + '|' + n.switch.join(',') + '|' + view.snap.gpus.state.length;
  const geometry = pickGeometry(view.snap.gpus.state.length);
  const width = Math.max(320, $('grid').clientWidth || 800);
  if (key === view.groupKey && width === view.gridWidth) return false;
  view.groupKey = key;
  view.gridWidth = width;
  view.nodeIndex = new Map(n.name.map((name, i) => [name, i]));
  view.nodeOfGpu = new Int32Array(view.snap.gpus.state.length);
  for (let i = 0; i < n.name.length; i++) view.nodeOfGpu.fill(i, n.first_gpu[i], n.first_gpu[i] + gpuCount(i));
  const bySwitch = new Map();
  for (let i = 0; i < n.name.length; i++) {
    const s = n.switch[i] || '(no switch)';
    if (!bySwitch.has(s)) bySwitch.set(s, []);
    bySwitch.get(s).push(i);
  }
  const collator = new Intl.Collator(undefined, { numeric: true });
  const names = [...bySwitch.keys()].sort(collator.compare);
  for (const nodes of bySwitch.values()) nodes.sort((a, b) => collator.compare(n.name[a], n.name[b]));
  const grid = $('grid');
  grid.replaceChildren();
  grid.classList.toggle('tiles', !!geometry.tiles);
  if (view.observer) view.observer.disconnect();
  view.observer = new IntersectionObserver((entries) => {
    for (const e of entries) {
      const g = e.target.group;
      g.visible = e.isIntersecting;
      if (g.visible && g.dirty) drawGroup(g);
    }
  }, { rootMargin: '300px' });
  view.groups = names.map((name) => {
    const nodes = bySwitch.get(name);
    const g = layoutGroup(name, nodes, geometry, width);
    g.title = el('h3', { 'data-switch': name });
    g.canvas = el('canvas', { tabIndex: 0, 'data-switch': name });
    g.canvas.setAttribute('role', 'img');
    g.canvas.group = g;
    g.dirty = true;
    wireCanvas(g);
    const box = el('div', { class: 'group' }, g.title, g.canvas);
    if (geometry.tiles) box.style.width = g.width + 'px';
    grid.append(box);
    sizeCanvas(g);
    view.observer.observe(g.canvas);
    return g;
  });
  return true;
}

// Small pools get large GPUs with node names; above 8,192 GPUs a node is a tile of 4 by 2 GPUs of
// 4 px and switches sit side by side (8 nodes a row each), so that 100,000 GPUs take a few screens.
function pickGeometry(gpus) {
  if (gpus <= 1024) return { cell: 22, gap: 3, pad: 5, label: 16, spacing: 10, names: true };
  if (gpus <= 8192) return { cell: 12, gap: 2, pad: 3, label: 0, spacing: 5, names: false };
  return { cell: 4, gap: 1, pad: 1, label: 0, spacing: 2, names: false, cols: 4, nodesPerRow: 8, tiles: true };
}

function layoutGroup(name, nodes, geo, width) {
  let most = 1;
  for (const i of nodes) most = Math.max(most, gpuCount(i));
  const cols = Math.min(geo.cols || 8, most);
  const rows = Math.ceil(most / cols);
  const blockW = geo.pad * 2 + cols * geo.cell + (cols - 1) * geo.gap;
  const blockH = geo.label + geo.pad * 2 + rows * geo.cell + (rows - 1) * geo.gap;
  const fit = Math.max(1, Math.floor((width + geo.spacing) / (blockW + geo.spacing)));
  const perRow = geo.nodesPerRow ? Math.min(fit, geo.nodesPerRow, nodes.length) : fit;
  if (geo.tiles) width = perRow * (blockW + geo.spacing) - geo.spacing;
  const height = Math.ceil(nodes.length / perRow) * (blockH + geo.spacing);
  return { name, nodes, geo, cols, blockW, blockH, perRow, width, height };
}

function sizeCanvas(g) {
  const dpr = window.devicePixelRatio || 1;
  g.canvas.width = Math.round(g.width * dpr);
  g.canvas.height = Math.round(g.height * dpr);
  g.canvas.style.width = g.width + 'px';
  g.canvas.style.height = g.height + 'px';
  g.dpr = dpr;
}

function nodeOrigin(g, k) {
  return [(k % g.perRow) * (g.blockW + g.geo.spacing), Math.floor(k / g.perRow) * (g.blockH + g.geo.spacing)];
}

function gpuOrigin(g, k, j) {
  const [x, y] = nodeOrigin(g, k);
  const geo = g.geo;
  return [x + geo.pad + (j % g.cols) * (geo.cell + geo.gap), y + geo.label + geo.pad + Math.floor(j / g.cols) * (geo.cell + geo.gap)];
}

function gpuFill(i, code) {
  if (view.colour === 'util' && code !== 'x') {
    const u = view.snap.gpus.util_pct[i];
    if (u == null) return NO_READING;
    for (const [limit, colour] of UTIL_STEPS) if (u < limit) return colour;
  }
  return (STATES[code] || STATES.f).fill;
}

// Whether what group g shows differs between two snapshots of the same nodes.
function changed(g, a, b) {
  if (!a || !b) return true;
  const an = a.nodes, bn = b.nodes, ag = a.gpus, bg = b.gpus;
  for (const n of g.nodes) {
    if (an.state[n] !== bn.state[n] || an.unreachable[n] !== bn.unreachable[n]) return true;
    const end = an.first_gpu[n] + gpuCount(n);
    for (let i = an.first_gpu[n]; i < end; i++)
      if (ag.state[i] !== bg.state[i] || ag.util_pct[i] !== bg.util_pct[i] || ag.mem_used_mib[i] !== bg.mem_used_mib[i] ||
          ag.mem_total_mib[i] !== bg.mem_total_mib[i]) return true;
  }
  return false;
}

function nearScreen(canvas) {
  const r = canvas.getBoundingClientRect();
  return r.bottom > -300 && r.top < window.innerHeight + 300;
}

// One group's canvas: fills batched by colour (a path per colour), then the marks.
function drawGroup(g) {
  g.dirty = false;
  const ctx = g.canvas.getContext('2d');
  const s = view.snap, geo = g.geo, cell = geo.cell;
  ctx.setTransform(g.dpr, 0, 0, g.dpr, 0, 0);
  ctx.clearRect(0, 0, g.width, g.height);
  const frames = new Map(), fills = new Map();  // nodes' frames are drawn first, their GPUs over them
  const add = (map, style, x, y, w, h) => {
    let p = map.get(style);
    if (!p) map.set(style, (p = new Path2D()));
    p.rect(x, y, w, h);
  };
  const cross = new Path2D(), stripe = new Path2D(), dots = new Path2D(), memUsed = new Path2D(), memFree = new Path2D();
  const hatch = new Path2D();
  const edges = [];
  const counts = {};
  const states = s.gpus.state, used = s.gpus.mem_used_mib, total = s.gpus.mem_total_mib;
  const barH = Math.max(1, Math.round(cell / 6));
  for (let k = 0; k < g.nodes.length; k++) {
    const n = g.nodes[k];
    const [x, y] = nodeOrigin(g, k);
    const ns = nodeState(n);
    const look = NODE_STATES[ns] || NODE_STATES.up;
    add(frames, look.frame, x, y, g.blockW, g.blockH);
    if (look.edge) edges.push([look.edge, x, y, ns]);
    counts[ns] = (counts[ns] || 0) + 1;
    const first = s.nodes.first_gpu[n], count = gpuCount(n);
    for (let j = 0; j < count; j++) {
      const i = first + j;
      const code = states[i];
      counts[code] = (counts[code] || 0) + 1;
      const [cx, cy] = gpuOrigin(g, k, j);
      add(fills, gpuFill(i, code), cx, cy, cell, cell);
      const mark = (STATES[code] || STATES.f).mark;
      if (mark === 'cross') {
        cross.moveTo(cx + 1, cy + 1); cross.lineTo(cx + cell - 1, cy + cell - 1);
        cross.moveTo(cx + cell - 1, cy + 1); cross.lineTo(cx + 1, cy + cell - 1);
      } else if (mark === 'stripe') {
        stripe.moveTo(cx, cy + cell); stripe.lineTo(cx + cell, cy);
        if (cell >= 12) { stripe.moveTo(cx, cy + cell / 2); stripe.lineTo(cx + cell / 2, cy); stripe.moveTo(cx + cell / 2, cy + cell); stripe.lineTo(cx + cell, cy + cell / 2); }
      } else if (mark === 'dot') {
        dots.rect(cx + cell / 2 - 1, cy + cell / 2 - 1, 2, 2);
      } else if (mark === 'bar' && view.colour === 'util') {
        dots.rect(cx, cy, cell, 1);  // leased, coloured by utilisation: a line on top tells it
      }
      if (total[i] && used[i] != null && cell >= 6) {
        const w = Math.max(0, Math.min(1, used[i] / total[i])) * cell;
        memFree.rect(cx, cy + cell - barH, cell, barH);
        memUsed.rect(cx, cy + cell - barH, w, barH);
      }
    }
    if (ns === 'unreachable' || ns === 'down') {
      for (let d = 0; d < g.blockW + g.blockH; d += cell >= 12 ? 8 : 5) {
        hatch.moveTo(x + Math.max(0, d - g.blockH), y + Math.min(g.blockH, d));
        hatch.lineTo(x + Math.min(g.blockW, d), y + Math.max(0, d - g.blockW));
      }
    }
  }
  for (const map of [frames, fills])
    for (const [style, p] of map) {
      ctx.fillStyle = style;
      ctx.fill(p);
    }
  ctx.fillStyle = '#ffffff88';
  ctx.fill(memFree);
  ctx.fillStyle = '#1d232bcc';
  ctx.fill(memUsed);
  ctx.lineWidth = cell >= 12 ? 2 : 1;
  ctx.strokeStyle = '#ffffff';
  ctx.stroke(cross);
  ctx.strokeStyle = '#1d232b99';
  ctx.lineWidth = 1;
  ctx.stroke(stripe);
  ctx.fillStyle = '#1d232b';
  ctx.fill(dots);
  ctx.strokeStyle = '#1d232b55';
  ctx.stroke(hatch);
  ctx.lineWidth = cell >= 12 ? 2 : 1;
  for (const [edge, x, y, ns] of edges) {
    ctx.strokeStyle = edge;
    ctx.setLineDash(ns === 'draining' ? [4, 2] : ns === 'unreachable' ? [1, 2] : []);
    ctx.strokeRect(x + 0.5, y + 0.5, g.blockW - 1, g.blockH - 1);
  }
  ctx.setLineDash([]);
  if (geo.names) {
    ctx.font = '11px system-ui, sans-serif';
    ctx.textBaseline = 'top';
    for (let k = 0; k < g.nodes.length; k++) {
      const n = g.nodes[k];
      const [x, y] = nodeOrigin(g, k);
      const ns = nodeState(n);
      ctx.fillStyle = '#1d232b';
      ctx.fillText(ns === 'up' ? s.nodes.name[n] : `${s.nodes.name[n]} ${ns}`, x + geo.pad, y + 3, g.blockW - geo.pad * 2);
    }
  }
  const sel = view.selected;
  if (sel >= 0 && sel < states.length) {
    const k = g.nodes.indexOf(view.nodeOfGpu[sel]);
    if (k >= 0) {
      const [cx, cy] = gpuOrigin(g, k, sel - s.nodes.first_gpu[g.nodes[k]]);
      ctx.strokeStyle = '#000';
      ctx.lineWidth = 2;
      ctx.strokeRect(cx - 2, cy - 2, cell + 4, cell + 4);
    }
  }
  const gpus = ['f', 'l', 'x', 'o', 'm'].filter((c) => counts[c]).map((c) => `${counts[c]} ${STATES[c].name}`).join(', ');
  const nodes = Object.keys(NODE_STATES).filter((c) => counts[c]).map((c) => `${counts[c]} ${c}`).join(', ');
  const text = `${g.name}: ${g.nodes.length} nodes (${nodes}); GPUs ${gpus}`;
  g.title.textContent = text;
  g.canvas.setAttribute('aria-label', `${text}. Arrow keys move between GPUs, Enter pins one.`);
}

// ---- selection: mouse and keyboard ----

function gpuAt(g, x, y) {
  const col = Math.floor(x / (g.blockW + g.geo.spacing));
  const row = Math.floor(y / (g.blockH + g.geo.spacing));
  if (col >= g.perRow) return -1;
  const k = row * g.perRow + col;
  if (k < 0 || k >= g.nodes.length) return -1;
  const [nx, ny] = nodeOrigin(g, k);
  const geo = g.geo;
  const gx = x - nx - geo.pad, gy = y - ny - geo.label - geo.pad;
  if (gx < 0 || gy < 0) return -1;
  const c = Math.floor(gx / (geo.cell + geo.gap)), r = Math.floor(gy / (geo.cell + geo.gap));
  if (c >= g.cols) return -1;
  const j = r * g.cols + c;
  const n = g.nodes[k];
  return j < gpuCount(n) ? view.snap.nodes.first_gpu[n] + j : -1;
}

function select(i, pin) {
  if (pin !== undefined) view.pinned = pin;
  const before = view.selected;
  view.selected = i;
  for (const g of view.groups)
    if (g.nodes.includes(view.nodeOfGpu[i]) || (before >= 0 && g.nodes.includes(view.nodeOfGpu[before]))) drawGroup(g);
  showDetails();
}

function wireCanvas(g) {
  const c = g.canvas;
  c.addEventListener('mousemove', (e) => {
    if (view.pinned) return;
    const i = gpuAt(g, e.offsetX, e.offsetY);
    if (i >= 0 && i !== view.selected) select(i);
  });
  c.addEventListener('click', (e) => {
    const i = gpuAt(g, e.offsetX, e.offsetY);
    if (i >= 0) select(i, !(view.pinned && view.selected === i));
  });
  c.addEventListener('focus', () => {
    if (view.selected < 0 || !g.nodes.includes(view.nodeOfGpu[view.selected])) select(view.snap.nodes.first_gpu[g.nodes[0]]);
  });
  c.addEventListener('keydown', (e) => {
    const i = view.selected;
    const k = g.nodes.indexOf(view.nodeOfGpu[i]);
    if (k < 0) return;
    const n = g.nodes[k], j = i - view.snap.nodes.first_gpu[n];
    let next = -1;
    const at = (kk, jj) => (kk >= 0 && kk < g.nodes.length ? view.snap.nodes.first_gpu[g.nodes[kk]] + Math.min(jj, gpuCount(g.nodes[kk]) - 1) : -1);
    if (e.key === 'ArrowRight') next = j + 1 < gpuCount(n) ? i + 1 : at(k + 1, 0);
    else if (e.key === 'ArrowLeft') next = j > 0 ? i - 1 : at(k - 1, 99);
    else if (e.key === 'ArrowDown') next = at(k + g.perRow, j);
    else if (e.key === 'ArrowUp') next = at(k - g.perRow, j);
    else if (e.key === 'Home') next = at(0, 0);
    else if (e.key === 'End') next = at(g.nodes.length - 1, 99);
    else if (e.key === 'Enter' || e.key === ' ') {
      select(i, !view.pinned);
      e.preventDefault();
      return;
    } else if (e.key === 'Escape') {
      select(i, false);
      return;
    } else return;
    e.preventDefault();
    if (next >= 0) select(next);
  });
}

function findNode(text) {
  const m = /^\s*([^:\s]+)(?::(\d+))?\s*$/.exec(text);
  const n = m ? view.nodeIndex.get(m[1]) : undefined;
  if (n === undefined) {
    say(`no node '${text}' in the pool: type a node's name, or NODE:GPU (n01:3)`, true);
    return;
  }
  const j = m[2] === undefined ? 0 : Number(m[2]);
  if (j >= gpuCount(n)) {
    say(`node ${m[1]} has ${gpuCount(n)} GPUs (0-${gpuCount(n) - 1}); there is no GPU ${j}`, true);
    return;
  }
  select(view.snap.nodes.first_gpu[n] + j, true);
  const g = view.groups.find((gg) => gg.nodes.includes(n));
  if (g) g.canvas.scrollIntoView({ block: 'nearest' });
}

// ---- details and actions ----

function showDetails() {
  const box = $('details');
  const i = view.selected, s = view.snap;
  if (i < 0 || !s || i >= s.gpus.state.length) {
    box.replaceChildren(el('p', { class: 'hint' }, 'No GPU selected.'));
    return;
  }
  const n = view.nodeOfGpu[i], j = i - s.nodes.first_gpu[n];
  const name = s.nodes.name[n], ns = nodeState(n);
  const code = s.gpus.state[i], state = (STATES[code] || { name: code }).name;
  const li = s.gpus.lease[i], lease = li >= 0 ? s.leases[li] : null;
  const age = s.nodes.heartbeat_age_s[n];
  const rows = [
    ['GPU', `${name}:${j}`],
    ['State', el('span', { class: `state ${state}`, 'data-field': 'state' }, state)],
    ['Node', el('span', { class: `state ${ns}` }, ns)],
    ['Switch', s.nodes.switch[n] || '-'],
    ['Agent', s.nodes.agent[n] ? `${s.nodes.agent[n]}, heard ${duration(age * 1000)} ago` : 'none (registered by an administrator)'],
    ['Lease', lease ? lease.id : '-'],
    ['Owner', lease ? lease.owner : '-'],
    ['Job', lease ? lease.job || '-' : '-'],
    ['Utilisation', s.gpus.util_pct[i] == null ? 'no reading' : `${s.gpus.util_pct[i]}%`],
    ['Memory', `${gib(s.gpus.mem_used_mib[i])} / ${gib(s.gpus.mem_total_mib[i])} GiB`],
    ['Temperature', s.gpus.temp_c[i] == null ? '-' : `${s.gpus.temp_c[i]} °C`],
    ['Power', s.gpus.power_w[i] == null ? '-' : `${s.gpus.power_w[i]} W`],
  ];
  const note = s.notes[String(i)];
  if (note) rows.push([code === 'x' ? 'Why failed' : 'Note', note]);
  const dl = el('dl');
  for (const [k, v] of rows) {
    const key = k.toLowerCase().replace(/\s+/g, '-');
    dl.append(el('dt', {}, k), el('dd', { 'data-field': key }, v));
  }
  const actions = el('div', { class: 'actions' });
  const admin = s.you.role === 'admin';
  const tag = admin ? '' : ' (admin)';
  if (lease && (admin || lease.owner === s.you.owner))
    actions.append(button('Release lease', () => release(lease.id, lease.owner)));
  actions.append(
    button(`Drain ${name}${tag}`, () => act('POST', `/v1/nodes/${encodeURIComponent(name)}/drain`,
      `Drain node ${name}? poold places no new lease there; the leases on it run on.`, `drained ${name}`)),
    button(`Resume ${name}${tag}`, () => act('POST', `/v1/nodes/${encodeURIComponent(name)}/resume`,
      `Resume node ${name}? It takes new leases again, and its failed GPUs are cleared (an administrator has looked at them).`, `resumed ${name}`)),
    button(`Fail GPU ${j}${tag}`, () => act('POST', `/v1/nodes/${encodeURIComponent(name)}/gpus/${j}/fail`,
      `Mark GPU ${name}:${j} failed? It takes no new lease until ${name} is resumed.`, `marked ${name}:${j} failed`)),
    button(`Fail node ${name}${tag}`, () => act('POST', `/v1/nodes/${encodeURIComponent(name)}/fail`,
      `Mark every GPU of ${name} failed? The node takes no new lease until it is resumed; the leases on it run on.`,
      `marked every GPU of ${name} failed`)));
  box.replaceChildren(el('h3', {}, view.pinned ? `${name}:${j} (pinned; Escape or click to unpin)` : `${name}:${j}`), dl, actions);
  if (!admin) box.append(el('p', { class: 'hint' }, 'Drain, resume and fail are for administrators: poold refuses them to a user\'s token.'));
}

function button(label, onClick) {
  const b = el('button', { type: 'button' }, label);
  b.addEventListener('click', onClick);
  return b;
}

function confirmDialog(text) {
  const d = $('confirm');
  $('confirm-text').textContent = text;
  return new Promise((resolve) => {
    const done = (ok) => {
      $('confirm-ok').onclick = $('confirm-cancel').onclick = d.oncancel = null;
      d.close();
      resolve(ok);
    };
    $('confirm-ok').onclick = () => done(true);
    $('confirm-cancel').onclick = () => done(false);
    d.oncancel = (e) => { e.preventDefault(); done(false); };
    d.showModal();
    $('confirm-cancel').focus();
  });
}

function say(text, refused) {
  const s = $('action-status');
  s.textContent = text;
  s.classList.toggle('refused', !!refused);
  clearTimeout(say.timer);
  say.timer = setTimeout(() => { s.textContent = ''; }, refused ? 15000 : 6000);
}

async function act(method, path, question, done) {
  if (!(await confirmDialog(question))) return;
  try {
    await request(method, path);
    say(done);
  } catch (e) {
    const what = e.status === 403 ? 'refused (403)' : e.status ? `failed (${e.status})` : 'failed';
    say(`poold ${what}: ${e.message}`, true);
  }
  refreshSoon();
}

function release(id, owner) {
  const whose = owner === view.snap.you.owner ? 'your' : `${owner}'s`;
  return act('DELETE', `/v1/leases/${encodeURIComponent(id)}`,
    `Release ${whose} lease ${id}? Its GPUs go back to the pool and its job loses them.`, `released ${id}`);
}

// ---- summary, tables, charts ----

function renderSummary() {
  const s = view.snap;
  const counts = {};
  const states = s.gpus.state;
  for (let i = 0; i < states.length; i++) counts[states[i]] = (counts[states[i]] || 0) + 1;
  let unreachableGpus = 0;
  const nodeCounts = { up: 0, draining: 0, down: 0, unreachable: 0 };
  for (let n = 0; n < s.nodes.name.length; n++) {
    nodeCounts[s.nodes.state[n]] = (nodeCounts[s.nodes.state[n]] || 0) + 1;
    if (s.nodes.unreachable[n]) {
      nodeCounts.unreachable++;
      unreachableGpus += gpuCount(n);
    }
  }
  let sum = 0, readings = 0;
  for (const u of s.gpus.util_pct) if (u != null) { sum += u; readings++; }
  const box = $('summary');
  const parts = [el('span', { class: 'count', 'data-count': 'gpus' }, 'GPUs ', el('b', {}, String(states.length)))];
  for (const c of ['f', 'l', 'x', 'o', 'm'])
    if (counts[c] || c === 'f' || c === 'l')
      parts.push(el('span', { class: 'count', 'data-count': STATES[c].name }, swatch(c), STATES[c].name, el('b', {}, String(counts[c] || 0))));
  parts.push(el('span', { class: 'count', 'data-count': 'unreachable-gpus' }, 'on unreachable nodes', el('b', {}, String(unreachableGpus))));
  const nodeParts = Object.entries(nodeCounts).filter(([k, v]) => v || k === 'up');
  parts.push(el('span', { class: 'count' }, `nodes ${s.nodes.name.length}:`,
    ...nodeParts.map(([k, v], n) => el('span', { 'data-count': `nodes-${k}` }, `${v} ${k}${n + 1 < nodeParts.length ? ',' : ''}`))));
  parts.push(el('span', { class: 'count', 'data-count': 'leases' }, 'leases', el('b', {}, String(s.leases.length))));
  parts.push(el('span', { class: 'count', 'data-count': 'queued' }, 'queued', el('b', {}, String(view.queue.length))));
  parts.push(el('span', { class: 'count', 'data-count': 'utilization' }, 'mean utilisation', el('b', {}, readings ? `${Math.round(sum / readings)}%` : '-')));
  box.replaceChildren(...parts);
}

const swatches = {};
function swatch(code, node) {
  const key = code + (node || '');
  if (!swatches[key]) {
    const c = document.createElement('canvas');
    c.width = c.height = 14;
    const ctx = c.getContext('2d');
    const look = NODE_STATES[node || 'up'];
    ctx.fillStyle = look.frame;
    ctx.fillRect(0, 0, 14, 14);
    ctx.fillStyle = code === 'util' ? UTIL_STEPS[3][1] : STATES[code].fill;
    ctx.fillRect(1, 1, 12, 12);
    const mark = code === 'util' ? null : STATES[code].mark;
    ctx.lineWidth = 2;
    if (mark === 'cross') { ctx.strokeStyle = '#fff'; ctx.beginPath(); ctx.moveTo(2, 2); ctx.lineTo(12, 12); ctx.moveTo(12, 2); ctx.lineTo(2, 12); ctx.stroke(); }
    if (mark === 'stripe') { ctx.strokeStyle = '#1d232b99'; ctx.lineWidth = 1; ctx.beginPath(); ctx.moveTo(1, 13); ctx.lineTo(13, 1); ctx.moveTo(1, 7); ctx.lineTo(7, 1); ctx.moveTo(7, 13); ctx.lineTo(13, 7); ctx.stroke(); }
    if (mark === 'dot') { ctx.fillStyle = '#1d232b'; ctx.fillRect(6, 6, 2, 2); }
    if (look.edge) { ctx.strokeStyle = look.edge; ctx.lineWidth = 2; ctx.setLineDash(node === 'draining' ? [4, 2] : [1, 2]); ctx.strokeRect(1, 1, 12, 12); }
    swatches[key] = c.toDataURL();
  }
  return el('img', { src: swatches[key], alt: '', width: 14, height: 14 });
}

function renderLegend() {
  const box = $('legend');
  const items = [];
  for (const c of ['f', 'l', 'x', 'o', 'm']) {
    const mark = { cross: ' (cross)', stripe: ' (stripes)', dot: ' (dot)' }[STATES[c].mark] || '';
    items.push(el('span', {}, swatch(c), `${STATES[c].name}${mark}`));
  }
  items.push(el('span', {}, swatch('f', 'draining'), 'node draining (dashed amber frame)'));
  items.push(el('span', {}, swatch('f', 'unreachable'), 'node unreachable (dotted frame, hatched)'));
  items.push(el('span', {}, 'dark bar at a GPU\'s foot: memory used'));
  if (view.colour === 'util')
    items.push(el('span', {}, 'utilisation: ', ...UTIL_STEPS.map(([limit, colour], k) => {
      const lo = k ? UTIL_STEPS[k - 1][0] : 0;
      const i = el('i', { class: 'step' }, ` ${lo}-${Math.min(limit, 100)}% `);
      i.style.background = colour;
      i.style.color = k >= 3 ? '#fff' : '#1d232b';
      return i;
    }), ' grey: no reading'));
  box.replaceChildren(...items);
}

function renderLeases() {
  const s = view.snap, now = s.time_ms;
  const filter = $('lease-filter').value.trim().toLowerCase();
  const shown = [];
  let matching = 0;
  const admin = s.you.role === 'admin';
  s.leases.forEach((l, k) => {
    if (filter && !`${l.id} ${l.owner} ${l.job}`.toLowerCase().includes(filter)) return;
    matching++;
    if (shown.length < 200) shown.push(k);
  });
  // The shown leases' GPUs, from the GPU columns (one pass).
  const gpusOf = new Map(shown.map((k) => [k, []]));
  const leaseCol = s.gpus.lease, first = s.nodes.first_gpu;
  for (let i = 0; i < leaseCol.length; i++) {
    const list = leaseCol[i] >= 0 && gpusOf.get(leaseCol[i]);
    if (list) {
      const n = view.nodeOfGpu[i];
      list.push({ node: s.nodes.name[n], index: i - first[n] });
    }
  }
  const rows = shown.map((k) => {
    const l = s.leases[k];
    const kind = [];
    if (l.preemptible) kind.push('preemptible');
    if (l.elastic) kind.push(`elastic ${l.elastic[0]}:${l.elastic[1]}`);
    if (l.no_reclaim) kind.push('never reclaimed');
    if (l.preempt_at_ms) kind.push(`preempted in ${duration(l.preempt_at_ms - now)}`);
    if (l.reclaim_at_ms) kind.push(`idle: reclaimed in ${duration(l.reclaim_at_ms - now)}`);
    if (l.at_risk_nodes) kind.push(`at risk: ${l.at_risk_nodes.join(' ')} unreachable`);
    const mine = l.owner === s.you.owner;
    return el('tr', { class: mine ? 'mine' : '', 'data-lease': l.id },
      el('td', {}, l.id), el('td', { 'data-field': 'owner' }, l.owner), el('td', {}, l.job || '-'),
      el('td', { 'data-field': 'gpus' }, String(l.gpus)), el('td', { class: 'wrap', 'data-field': 'nodes' }, nodeList(gpusOf.get(k))),
      el('td', {}, duration(now - l.created_ms)), el('td', {}, duration(l.expires_ms - now)),
      el('td', {}, l.idle_since_ms ? duration(now - l.idle_since_ms) : '-'), el('td', {}, String(l.priority)),
      el('td', { class: 'wrap' }, kind.join(', ') || '-'),
      el('td', {}, mine || admin ? button('Release', () => release(l.id, l.owner)) : ''));
  });
  $('leases').tBodies[0].replaceChildren(...rows);
  $('leases-count').textContent = matching > shown.length ? `${matching} (the first ${shown.length} shown: filter to see others)` : `${matching}`;
}

function renderQueue() {
  const now = view.snap.time_ms;
  const rows = view.queue.slice(0, 200).map((q) => el('tr', { 'data-ticket': String(q.ticket) },
    el('td', { 'data-field': 'position' }, String(q.position)), el('td', {}, String(q.ticket)),
    el('td', { 'data-field': 'owner' }, q.owner), el('td', {}, q.job_name || '-'), el('td', { 'data-field': 'gpus' }, String(q.gpus)),
    el('td', {}, String(q.priority)), el('td', {}, duration(now - q.enqueued_ms)),
    el('td', {}, q.planned_start_ms == null ? '-' : q.planned_start_ms <= now ? 'now' : `in ${duration(q.planned_start_ms - now)}`),
    el('td', { class: 'wrap' }, q.reason || '-')));
  $('queue').tBodies[0].replaceChildren(...rows);
  $('queue-count').textContent = view.queue.length > 200 ? `${view.queue.length} (the first 200 shown)` : `${view.queue.length}`;
}

// A line chart of series [[t, v]...] on its canvas; the second series dashed (not told by colour).
function chart(canvas, series, unit, caption) {
  const ctx = canvas.getContext('2d');
  const W = canvas.width, H = canvas.height, L = 44, B = 18, T = 8, R = 8;
  ctx.clearRect(0, 0, W, H);
  const points = series.flatMap((s) => s.points.filter((p) => p[1] != null));
  ctx.font = '11px system-ui, sans-serif';
  ctx.fillStyle = '#5d6773';
  if (!points.length) {
    ctx.fillText('no samples yet', L, H / 2);
    return;
  }
  const t0 = Math.min(...points.map((p) => p[0])), t1 = Math.max(...points.map((p) => p[0]), t0 + 1);
  const vmax = Math.max(1, ...points.map((p) => p[1])) * 1.1;
  const X = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - R), Y = (v) => H - B - (v / vmax) * (H - B - T);
  ctx.strokeStyle = '#d5dae0';
  ctx.lineWidth = 1;
  ctx.beginPath();
  ctx.moveTo(L, T); ctx.lineTo(L, H - B); ctx.lineTo(W - R, H - B);
  ctx.stroke();
  ctx.textBaseline = 'middle';
  ctx.fillText(`${Math.round(vmax)}${unit}`, 2, T + 4);
  ctx.fillText(`0${unit}`, 2, H - B);
  ctx.textBaseline = 'alphabetic';
  ctx.fillText(`last ${duration(t1 - t0)}`, L, H - 4);
  series.forEach((s, k) => {
    ctx.strokeStyle = s.colour;
    ctx.lineWidth = 2;
    ctx.setLineDash(k ? [5, 3] : []);
    ctx.beginPath();
    let on = false;
    for (const [t, v] of s.points) {
      if (v == null) { on = false; continue; }
      if (on) ctx.lineTo(X(t), Y(v)); else ctx.moveTo(X(t), Y(v));
      on = true;
    }
    ctx.stroke();
  });
  ctx.setLineDash([]);
  canvas.setAttribute('aria-label', caption);
}

function renderHistory() {
  const h = view.history;
  if (!h) return;
  const rows = h.samples;
  const at = (k, f) => rows.map((r) => [r[0], f(r[k], r)]);
  const last = rows[rows.length - 1];
  const kept = h.interval_s * h.capacity;
  const span = kept >= 3600 ? `${+(kept / 3600).toFixed(1)} h` : `${Math.round(kept / 60)} min`;
  $('history-note').textContent = `one sample every ${h.interval_s} s, the last ${span} kept in poold's memory; ${rows.length} samples`;
  const util = last ? `mean SM utilisation ${last[5] == null ? '-' : Math.round(last[5] * 100) + '%'} (solid), GPUs leased ${last[1] ? Math.round((last[2] / last[1]) * 100) : 0}% (dashed)` : '';
  chart($('chart-util'), [
    { colour: '#1f4fb0', points: at(5, (v) => (v == null ? null : v * 100)) },
    { colour: '#5d6773', points: at(2, (v, r) => (r[1] ? (v / r[1]) * 100 : 0)) },
  ], '%', `Utilisation: ${util}`);
  $('cap-util').textContent = `Utilisation: ${util}`;
  const queued = last ? `${last[6]} requests waiting now` : '';
  chart($('chart-queue'), [{ colour: '#1f4fb0', points: at(6, (v) => v) }], '', `Queue length: ${queued}`);
  $('cap-queue').textContent = `Queue length: ${queued}`;
  const wait = last ? `mean ${duration(last[7] * 1000)} (solid), longest ${duration(last[8] * 1000)} (dashed)` : '';
  chart($('chart-wait'), [
    { colour: '#1f4fb0', points: at(7, (v) => v) },
    { colour: '#9a6700', points: at(8, (v) => v) },
  ], 's', `Waiting time of queued requests: ${wait}`);
  $('cap-wait').textContent = `Waiting time of queued requests: ${wait}`;
}

function render() {
  const rebuilt = index();
  for (const g of view.groups) {
    if (rebuilt || changed(g, view.prev, view.snap)) g.dirty = true;
    if (g.dirty && nearScreen(g.canvas)) drawGroup(g);
  }
  renderSummary();
  renderLeases();
  renderQueue();
  showDetails();
  if (view.historyPending) {
    view.historyPending = false;
    renderHistory();
  }
  const s = view.snap;
  $('who').textContent = `${s.you.owner} (${s.you.role})`;
  $('updated').textContent = `updated ${new Date(s.time_ms).toLocaleTimeString()}`;
}

// ---- the loop ----

let timer = null;
function refreshSoon() {
  clearTimeout(timer);
  timer = setTimeout(refresh, 50);
}

async function refresh() {
  clearTimeout(timer);
  if (!view.token) return;
  const t0 = performance.now();
  try {
    const [d, q] = await Promise.all([request('GET', '/v1/dashboard'), request('GET', '/v1/queue')]);
    const t1 = performance.now();
    view.prev = view.snap;
    view.snap = JSON.parse(d);
    view.queue = JSON.parse(q);
    render();
    const t2 = performance.now();
    const perf = window.poolrunPerf;
    perf.updates.push({ fetchMs: t1 - t0, scriptMs: t2 - t1, bytes: d.length + q.length });
    if (perf.updates.length > 100) perf.updates.shift();
    if (perf.firstRenderMs == null) requestAnimationFrame(() => { perf.firstRenderMs = performance.now(); });
    view.lastGood = Date.now();
    showError(null);
  } catch (e) {
    if (e.status === 401) {
      signOut(`poold refused the token: ${e.message}. Sign in with your token: the first word of your line in poold's token file.`);
      return;
    }
    const since = view.lastGood ? `; what is shown is from ${new Date(view.lastGood).toLocaleTimeString()}` : '';
    const stranded = leaderGone(e.status, e.reason) && strandedMessage(location.origin, e.message, view.replicas);
    if (stranded) showError(stranded.text, stranded.links);
    else showError(`${e.status ? `poold answered ${e.status}: ` : ''}${e.message}. Trying again every ${POLL_MS / 1000} s${since}.`);
  }
  timer = setTimeout(refresh, POLL_MS);
}

async function refreshHistory() {
  if (!view.token) return;
  try {
    view.history = JSON.parse(await request('GET', '/v1/history'));
    if (view.snap) renderHistory();
    else view.historyPending = true;  // drawn with the first snapshot
  } catch (e) { /* the main loop reports poold's errors */ }
  const every = view.history ? Math.min(HISTORY_MS, Math.max(POLL_MS, view.history.interval_s * 1000)) : HISTORY_MS;
  setTimeout(refreshHistory, every);
}

// The usage ledger's report over the chosen range: a row per owner, account, node or GPU model, a
// bar of the GPU-hours held with those computed inside it (the 50 that held most).
function renderUsage(rows) {
  const top = rows.slice(0, 50);
  const most = Math.max(1e-9, ...top.map((r) => r.allocated_s));
  const hours = (s) => (s / 3600).toFixed(2);
  $('usage').tBodies[0].replaceChildren(...top.map((r) => {
    // Widths through the CSSOM: the page's Content-Security-Policy takes no style attribute.
    const used = el('div', { class: 'used' }), held = el('div', { class: 'held' }, used);
    held.style.width = `${(100 * r.allocated_s / most).toFixed(1)}%`;
    used.style.width = `${r.allocated_s > 0 ? (100 * r.used_s / r.allocated_s).toFixed(1) : 0}%`;
    return el('tr', { 'data-name': r.name },
      el('td', { 'data-field': 'name' }, r.name || '(none)'),
      el('td', {}, el('div', { class: 'usage-bar', role: 'img',
        'aria-label': `${hours(r.allocated_s)} GPU-hours held, ${hours(r.used_s)} computed` }, held)),
      el('td', { 'data-field': 'held' }, hours(r.allocated_s)), el('td', {}, hours(r.used_s)),
      el('td', {}, r.allocated_s > 0 ? `${(100 * r.used_s / r.allocated_s).toFixed(1)}%` : '-'),
      el('td', {}, `${(r.energy_j / 3.6e6).toFixed(3)} kWh`), el('td', {}, String(r.leases)));
  }));
}

// One chain of requests: a change of the choices starts a new one, and an answer to an older
// request (or chain) is dropped.
let usageTimer = null, usageAsked = 0;
async function refreshUsage() {
  clearTimeout(usageTimer);
  if (!view.token) return;
  const asked = ++usageAsked;
  const by = $('usage-by').value, since = Date.now() - Number($('usage-range').value);
  try {
    const report = JSON.parse(await request('GET', `/v1/usage?by=${encodeURIComponent(by)}&since_ms=${since}`));
    if (asked === usageAsked) renderUsage(report.rows);
  } catch (e) { /* the main loop reports poold's errors */ }
  if (asked === usageAsked) usageTimer = setTimeout(refreshUsage, USAGE_MS);
}

// `links`: URLs (replicas.js checked them: http or https) shown after the text, one link each.
function showError(text, links = []) {
  const box = $('error');
  box.hidden = !text;
  box.textContent = text || '';
  if (text && links.length) {
    box.append(' ');
    links.forEach((url, i) => box.append(i ? ', ' : '', el('a', { href: url + '/', rel: 'noreferrer' }, url)));
  }
}

// The pool's other replicas, while this poold leads (404: one poold, no replicas). Kept as they
// were when it stops answering: then they are what the page can name.
async function refreshReplicas() {
  if (!view.token) return;
  try {
    view.replicas = otherReplicas(JSON.parse(await request('GET', '/v1/replicas')), location.origin);
  } catch (e) {
    if (e.status === 404) view.replicas = [];
  }
  setTimeout(refreshReplicas, REPLICAS_MS);
}

function signOut(message) {
  view.token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  clearTimeout(timer);
  $('app').hidden = true;
  $('signout').hidden = true;
  $('signin').hidden = false;
  $('who').textContent = '';
  showError(message || null);
  $('token').focus();
}

function start() {
  $('signin').hidden = true;
  $('app').hidden = false;
  $('signout').hidden = false;
  renderLegend();
  refresh();
  refreshHistory();
  refreshReplicas();
  refreshUsage();
}

$('signin-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const t = $('token').value.trim();
  if (!t) return;
  view.token = t;
  sessionStorage.setItem(TOKEN_KEY, t);
  $('token').value = '';
  showError(null);
  start();
});
$('signout').addEventListener('click', () => signOut(null));
$('colour').addEventListener('change', (e) => {
  view.colour = e.target.value;
  renderLegend();
  if (view.snap) for (const g of view.groups) {
    g.dirty = true;
    if (nearScreen(g.canvas)) drawGroup(g);
  }
});
$('find').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && view.snap) findNode(e.target.value);
});
$('lease-filter').addEventListener('input', () => view.snap && renderLeases());
$('usage-by').addEventListener('change', refreshUsage);
$('usage-range').addEventListener('change', refreshUsage);
window.addEventListener('resize', () => {
  clearTimeout(window.resizeTimer);
  window.resizeTimer = setTimeout(() => view.snap && render(), 200);  // a new width lays the groups out again
});
window.addEventListener('keydown', (e) => {
  if (e.key === 'Escape' && view.pinned && !$('confirm').open) select(view.selected, false);
});

// Tests and the benchmark find a GPU's place on the page here: {x, y} in client coordinates.
window.poolrunGpuPoint = (node, gpu) => {
  const n = view.nodeIndex.get(node);
  const g = view.groups.find((gg) => gg.nodes.includes(n));
  if (!g) return null;
  const [x, y] = gpuOrigin(g, g.nodes.indexOf(n), gpu);
  const r = g.canvas.getBoundingClientRect();
  return { x: r.left + x + g.geo.cell / 2, y: r.top + y + g.geo.cell / 2 };
};

// The benchmark's worst cases: every GPU's reading changed, on the screen or in the whole pool (ms).
window.poolrunPerf.redraw = (all) => {
  const t = performance.now();
  for (const g of view.groups) if (all || nearScreen(g.canvas)) drawGroup(g);
  return performance.now() - t;
};

if (view.token) start();
else $('token').focus();
