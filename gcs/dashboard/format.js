// Formatting of the API's values for the page (numbers, bytes, durations, clock times, death
// causes, a job's world and step) and the small DOM helpers every table and list is written with.
'use strict';

const SIGNAL_NAMES = {1: 'SIGHUP', 2: 'SIGINT', 4: 'SIGILL', 6: 'SIGABRT', 7: 'SIGBUS',
  8: 'SIGFPE', 9: 'SIGKILL', 11: 'SIGSEGV', 13: 'SIGPIPE', 15: 'SIGTERM'};

const $ = (id) => document.getElementById(id);

// ------------------------------------------------------------------------------ formatting

function num(v) {
  const n = typeof v === 'number' ? v : Number(v ?? 0);
  return Number.isFinite(n) ? n : 0;
}

function stripEnum(name, prefix) {
  name = name || '';
  return name.startsWith(prefix) ? name.slice(prefix.length) : name;
}

const shortId = (id) => (id || '').slice(0, 8);

function fmtNum(x) {
  if (Number.isInteger(x)) return String(x);
  return x.toFixed(Math.abs(x) < 10 ? 2 : 1).replace(/\.?0+$/, '');
}

function fmtBytes(n) {
  n = num(n);
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i === 0 || Math.abs(n) >= 10 ? Math.round(n) : n.toFixed(1)} ${units[i]}`;
}

function fmtDuration(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${s % 60}s`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h}h ${m % 60}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

const fmtAgo = (ms) => (num(ms) > 0 ? `${fmtDuration(Date.now() - num(ms))} ago` : '—');
const fmtMs = (ms) => `${Math.round(ms).toLocaleString('en-US')} ms`;

// "14:03:22" today, "2024-11-23 14:03:22" another day.
function fmtClock(ms) {
  const d = new Date(num(ms));
  const pad = (x) => String(x).padStart(2, '0');
  const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  if (d.toDateString() === new Date().toDateString()) return time;
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${time}`;
}

const fmtWhen = (ms) => (num(ms) > 0 ? `${fmtClock(ms)} (${fmtAgo(ms)})` : '—');

// Seconds on a chart's x axis as m:ss (h:mm:ss past an hour).
function fmtRel(seconds) {
  const s = Math.round(seconds);
  const sign = s < 0 ? '-' : '';
  const a = Math.abs(s);
  const pad = (x) => String(x).padStart(2, '0');
  const h = Math.floor(a / 3600);
  const m = Math.floor(a / 60) % 60;
  return h ? `${sign}${h}:${pad(m)}:${pad(a % 60)}` : `${sign}${m}:${pad(a % 60)}`;
}

// "12 alive · 5 dead" from {"ACTOR_ALIVE": 12, "ACTOR_DEAD": 5}.
function countsText(byState, prefix, order) {
  const parts = order.filter((s) => num(byState?.[prefix + s]) > 0)
      .map((s) => `${num(byState[prefix + s])} ${s.toLowerCase()}`);
  return parts.join(' · ') || 'none';
}

// An actor's death as one short line: "SIGNALED 9", "OOM_KILLED limit 512 MiB peak 530 MiB".
function deathText(dc) {
  const kind = dc?.kind || 'NONE';
  switch (kind) {
    case 'NONE': return '';
    case 'EXITED': return `EXITED ${num(dc.exit_code)}`;
    case 'SIGNALED': return `SIGNALED ${num(dc.signal)}`;
    case 'OOM_KILLED': {
      const limit = num(dc.limit_bytes) > 0 ? ` limit ${fmtBytes(dc.limit_bytes)}` : '';
      const peak = num(dc.peak_bytes) > 0 ? ` peak ${fmtBytes(dc.peak_bytes)}` : '';
      return `OOM_KILLED${limit}${peak}`;
    }
    case 'NODE_DIED': case 'KILLED_BY_USER': case 'SCALED_IN': return kind;
    default: return dc.message ? `${kind}: ${dc.message}` : kind;  // the message is the why
  }
}

function deathTitle(dc) {
  if (!dc || !dc.kind || dc.kind === 'NONE') return '';
  const parts = [];
  const signal = SIGNAL_NAMES[num(dc.signal)];
  if (dc.kind === 'SIGNALED' && signal) parts.push(signal);
  if (dc.message) parts.push(dc.message);
  if (dc.node_id) parts.push(`on node ${shortId(dc.node_id)}`);
  if (num(dc.time_ms) > 0) parts.push(`at ${fmtClock(dc.time_ms)}`);
  return parts.join('; ');
}

// "3/4 (min 1, max 4)": the world now, over the replicas the controller works toward.
function worldText(job) {
  const e = job.elastic;
  if (job.kind !== 'elastic') return '—';
  if (!e) return String(num(job.world_size));
  return `${num(e.world_size)}/${num(e.target_replicas)} ` +
      `(min ${num(e.min_replicas)}, max ${num(e.max_replicas)})`;
}

function stepText(e) {
  if (!e) return '—';
  const total = num(e.total_steps);
  return total > 0 ? `${num(e.step)} / ${total}` : String(num(e.step));
}

function latestCondition(job) {
  let latest = null;
  for (const c of job.conditions ?? []) {
    if (!latest || num(c.time_ms) >= num(latest.time_ms)) latest = c;
  }
  return latest;
}

const isFinished = (job) => ['JOB_SUCCEEDED', 'JOB_FAILED', 'JOB_STOPPED'].includes(job.state);

// ------------------------------------------------------------------------------ DOM helpers

function h(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v);
  }
  e.append(...children);
  return e;
}

// Writes only what changed, so an unchanged cell keeps its selection.
function setText(e, text, title) {
  text = String(text ?? '');
  if (e.textContent !== text) e.textContent = text;
  if (title !== undefined && e.title !== title) e.title = title;
}

function setClass(e, cls) {
  if (e.className !== cls) e.className = cls;
}

// A state cell: one badge whose text is the enum without its prefix ("ALIVE").
function setBadge(td, full, prefix, title = full) {
  let b = td.firstElementChild;
  if (!b) td.replaceChildren(b = h('span'));
  const short = stripEnum(full, prefix) || '?';
  setText(b, short, title);
  setClass(b, `badge s-${short.toLowerCase()}`);
}

// Makes tbody hold one row per item, in order, reusing the row of the same key. colClasses
// gives each new row's cells their classes; fill(tr, item) writes the cells.
function syncRows(tbody, items, keyOf, rowClass, colClasses, fill) {
  const old = new Map();
  for (const tr of tbody.rows) old.set(tr.dataset.key, tr);
  let next = tbody.firstElementChild;
  for (const item of items) {
    const key = String(keyOf(item));
    let tr = old.get(key);
    if (tr) {
      old.delete(key);
    } else {
      tr = h('tr', {class: rowClass});
      tr.dataset.key = key;
      for (const cls of colClasses) tr.append(h('td', {class: cls}));
    }
    fill(tr, item);
    if (tr === next) next = next.nextElementSibling;
    else tbody.insertBefore(tr, next);
  }
  for (const tr of old.values()) tr.remove();
}

// A <dl> of label/value pairs; each pair is [label, value, className?].
function setFacts(dl, pairs) {
  if (dl.children.length !== pairs.length) {
    dl.replaceChildren(...pairs.map(() => h('div', {}, h('dt'), h('dd'))));
  }
  pairs.forEach(([label, value, cls = ''], i) => {
    const [dt, dd] = dl.children[i].children;
    setText(dt, label);
    setText(dd, value);
    setClass(dd, cls);
  });
}

// Rebuilds a small list only when its content changed.
function setList(list, items, build) {
  const sig = JSON.stringify(items);
  if (list.dataset.sig === sig) return;
  list.dataset.sig = sig;
  list.replaceChildren(...items.map(build));
}

// A bar of coloured segments; segments are [className, percent, title].
function setBar(td, segments) {
  let bar = td.querySelector('.bar');
  if (!bar) td.append(bar = h('div', {class: 'bar'}));
  while (bar.children.length < segments.length) bar.append(h('i'));
  segments.forEach(([cls, pct, title], i) => {
    const seg = bar.children[i];
    setClass(seg, cls);
    seg.style.width = `${Math.max(0, Math.min(100, pct)).toFixed(2)}%`;
    if (seg.title !== title) seg.title = title;
  });
}
