// The Phalanx dashboard: polls the head's JSON API once a second and keeps index.html in step
// with it. Plain ES2020, no framework, no build step; Chart.js 3.9 (the global `Chart`, served
// at /static/chart.min.js) draws the two charts of an elastic job.
//
// The API speaks protobuf JSON: snake_case names, int64 fields as strings ("1732345678123"),
// enums by name ("ACTOR_ALIVE"), and a message field left out when unset. So every number goes
// through num() and every nested message through `?.`.
//
// Rows are updated in place, keyed by id, rather than rebuilt: a poll keeps the reader's text
// selection, hover, filter text and scroll position. Text from the server only ever reaches
// the page as textContent or an attribute value, never as HTML.
'use strict';

const POLL_MS = 1000;
const HIDDEN_POLL_MS = 5000;  // a background tab polls gently
const ACTOR_LIMIT = 500;
const LOG_TAIL_BYTES = 16 * 1024;
const MAX_EVENTS = 50;
// Job events drawn on the world-size chart beside the recoveries' faults.
const MARKED_EVENT_KINDS = new Set(['rank_died', 'hang', 'straggler', 'scale']);
const ACTOR_STATES = ['PENDING', 'CREATING', 'ALIVE', 'RESTARTING', 'DEAD'];
const JOB_STATES = ['PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'STOPPED'];
const SIGNAL_NAMES = {1: 'SIGHUP', 2: 'SIGINT', 4: 'SIGILL', 6: 'SIGABRT', 7: 'SIGBUS',
  8: 'SIGFPE', 9: 'SIGKILL', 11: 'SIGSEGV', 13: 'SIGPIPE', 15: 'SIGTERM'};
const COLORS = {world: '#0969da', steps: '#1a7f37', fault: '#cf222e', event: '#bf8700'};

const $ = (id) => document.getElementById(id);

// What the last successful answers said, and what the reader has open.
const data = {actors: [], actorsTotal: 0};
const view = {jobId: null, logStick: true, lastOk: 0, error: ''};

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

// ------------------------------------------------------------------------------ cluster

function renderCluster(c) {
  setText($('cluster-id'), c.cluster_id, 'cluster id');
  setText($('cluster-version'), c.version ? `version ${c.version}` : '');
  const tls = $('cluster-tls');
  setText(tls, c.tls ? 'TLS on' : 'TLS off',
      c.tls ? `CA fingerprint ${c.ca_fingerprint}` : 'Traffic is not encrypted');
  setClass(tls, c.tls ? 'chip ok' : 'chip warn');
  document.title = c.cluster_id ? `Phalanx — ${c.cluster_id}` : 'Phalanx';

  const total = c.resources_total ?? {};
  const used = c.resources_used ?? {};
  const chip = (label, text, cls = '') =>
      h('span', {class: `chip ${cls}`}, h('b', {text: label}), ` ${text}`);
  const chips = [
    chip('nodes', `${num(c.nodes_alive)} alive` +
        (num(c.nodes_dead) ? ` · ${num(c.nodes_dead)} dead` : '')),
    chip('actors', countsText(c.actors_by_state, 'ACTOR_', ACTOR_STATES)),
    chip('jobs', countsText(c.jobs_by_state, 'JOB_', JOB_STATES)),
    chip('CPU', `${fmtNum(num(used.CPU))} / ${fmtNum(num(total.CPU))}`),
  ];
  if (num(total.GPU) > 0) {
    chips.push(chip('GPU', `${fmtNum(num(used.GPU))} / ${fmtNum(num(total.GPU))}`));
  }
  if (num(total.memory) > 0) {
    chips.push(chip('memory', `${fmtBytes(used.memory)} / ${fmtBytes(total.memory)}`));
  }
  if (num(c.start_time_ms) > 0) {
    chips.push(chip('up', fmtDuration(Date.now() - num(c.start_time_ms))));
  }
  $('cluster-counts').replaceChildren(...chips);
}

// ------------------------------------------------------------------------------ nodes

function renderNodes(nodes) {
  const dead = (n) => n.state === 'NODE_DEAD';
  nodes = [...nodes].sort((a, b) => (b.is_head - a.is_head) || (dead(a) - dead(b)) ||
      (a.hostname || '').localeCompare(b.hostname || '') || a.node_id.localeCompare(b.node_id));
  const alive = nodes.filter((n) => !dead(n)).length;
  const deadCount = nodes.length - alive;
  setText($('nodes-count'), `${alive} alive` + (deadCount ? `, ${deadCount} dead` : ''));
  $('nodes-empty').hidden = nodes.length > 0;

  syncRows($('nodes-table').tBodies[0], nodes, (n) => n.node_id, 'node-row',
      ['', 'mono', '', '', 'num', 'num', 'num', 'mono', 'num'], (tr, n) => {
        const [host, id, state, role, cpu, mem, gpu, metrics, age] = tr.cells;
        const total = n.total?.amounts ?? {};
        const avail = n.available?.amounts ?? {};
        const used = (k) => (dead(n) ? '–' : fmtNum(num(total[k]) - num(avail[k])));
        tr.dataset.nodeId = n.node_id;
        tr.classList.toggle('dead', dead(n));
        const labels = Object.entries(n.labels ?? {}).map(([k, v]) => `${k}=${v}`).join(', ');
        setText(host, n.hostname || n.address, [n.address, labels].filter(Boolean).join('\n'));
        setText(id, shortId(n.node_id), n.node_id);
        setBadge(state, n.state, 'NODE_', n.death_reason || n.state);
        setText(role, n.is_head ? 'head' : '');
        setText(cpu, `${used('CPU')} / ${fmtNum(num(total.CPU))}`);
        const memUsed = dead(n) ? '–' : fmtBytes(num(total.memory) - num(avail.memory));
        setText(mem, num(total.memory) > 0 ? `${memUsed} / ${fmtBytes(total.memory)}` : '—');
        setText(gpu, num(total.GPU) > 0 ? `${used('GPU')} / ${fmtNum(num(total.GPU))}` : '—');
        setText(metrics, n.metrics_address || '—');
        if (dead(n)) {
          setText(age, `dead ${fmtAgo(n.end_time_ms)}`, n.death_reason || '');
        } else {
          const start = num(n.start_time_ms);
          setText(age, start > 0 ? fmtDuration(Date.now() - start) : '—',
              `started ${fmtWhen(n.start_time_ms)}, pid ${num(n.pid)}`);
        }
      });
}

// ------------------------------------------------------------------------------ actors

function actorsUrl() {
  const state = $('actor-state').value;
  return `/api/actors?limit=${ACTOR_LIMIT}` + (state ? `&state=${encodeURIComponent(state)}` : '');
}

function actorMatches(a, terms) {
  const hay = [a.actor_id, a.class_name, a.name, a.namespace, a.state, a.node_id, a.job_id,
    String(num(a.pid))].join(' ').toLowerCase();
  return terms.every((t) => hay.includes(t));
}

// Filters client-side too, so the table follows the filter and the state select at once.
function renderActors() {
  const terms = $('actor-filter').value.toLowerCase().split(/\s+/).filter(Boolean);
  const state = $('actor-state').value;
  const live = (a) => a.state !== 'ACTOR_DEAD';
  const shown = data.actors
      .filter((a) => (!state || a.state === `ACTOR_${state}`) && actorMatches(a, terms))
      .sort((a, b) => (live(b) - live(a)) || (num(b.create_time_ms) - num(a.create_time_ms)) ||
          a.actor_id.localeCompare(b.actor_id));
  setText($('actors-count'), `${shown.length} shown of ${data.actorsTotal}`,
      `the page fetches at most ${ACTOR_LIMIT} actors`);
  $('actors-empty').hidden = shown.length > 0;

  syncRows($('actors-table').tBodies[0], shown, (a) => a.actor_id, 'actor-row',
      ['mono', '', '', '', 'mono', 'num', 'num', 'wrap'], (tr, a) => {
        const [id, cls, name, state, node, pid, restarts, cause] = tr.cells;
        tr.dataset.actorId = a.actor_id;
        tr.classList.toggle('dead', a.state === 'ACTOR_DEAD');
        setText(id, shortId(a.actor_id), `${a.actor_id}\njob ${a.job_id || '—'}`);
        setText(cls, a.class_name, a.language);
        setText(name, a.name, a.namespace ? `namespace ${a.namespace}` : '');
        setBadge(state, a.state, 'ACTOR_');
        setText(node, shortId(a.node_id), a.node_id);
        setText(pid, num(a.pid) > 0 ? num(a.pid) : '');
        setText(restarts, num(a.num_restarts),
            (a.history ?? []).map((d) => deathText(d)).filter(Boolean).join('\n'));
        const pending = ['ACTOR_PENDING', 'ACTOR_CREATING'].includes(a.state) && a.pending_reason;
        if (pending) {
          setText(cause, `waiting: ${a.pending_reason}`, '');
          setClass(cause, 'wrap pending-reason');
        } else {
          // A live actor's cause is that of its last restart: shown, but greyed.
          const current = ['ACTOR_DEAD', 'ACTOR_RESTARTING'].includes(a.state);
          setText(cause, deathText(a.death_cause), deathTitle(a.death_cause));
          setClass(cause, current ? 'wrap cause' : 'wrap cause past');
        }
      });
}

// ------------------------------------------------------------------------------ jobs

function renderJobs(jobs) {
  jobs = [...jobs].sort((a, b) => (num(b.submit_time_ms) - num(a.submit_time_ms)) ||
      a.job_id.localeCompare(b.job_id));
  const running = jobs.filter((j) => j.state === 'JOB_RUNNING').length;
  setText($('jobs-count'), `${running} running, ${jobs.length} in all`);
  $('jobs-empty').hidden = jobs.length > 0;

  syncRows($('jobs-table').tBodies[0], jobs, (j) => j.job_id, 'job-row',
      ['', '', '', '', 'num', 'num', 'wrap', 'num'], (tr, j) => {
        const [name, kind, state, world, step, sps, cond, submitted] = tr.cells;
        tr.dataset.jobId = j.job_id;
        tr.classList.toggle('open', j.job_id === view.jobId);
        let link = name.firstElementChild;
        if (!link) name.append(link = h('a', {class: 'job-link'}));
        const href = `#job/${encodeURIComponent(j.job_id)}`;
        if (link.getAttribute('href') !== href) link.setAttribute('href', href);
        link.dataset.jobId = j.job_id;
        setText(link, j.name || j.job_id, j.job_id);
        setText(kind, j.kind);
        setBadge(state, j.state, 'JOB_', j.message || j.state);
        setText(world, worldText(j));
        setText(step, j.kind === 'elastic' ? stepText(j.elastic) : '—');
        setText(sps, j.kind === 'elastic' ? num(j.elastic?.steps_per_second).toFixed(2) : '—');
        const c = latestCondition(j);
        setText(cond, c ? (c.reason ? `${c.type}: ${c.reason}` : c.type) : '—', c?.message ?? '');
        setText(submitted, fmtAgo(j.submit_time_ms),
            num(j.submit_time_ms) > 0 ? fmtClock(j.submit_time_ms) : '');
      });
}

// ------------------------------------------------------------------------------ job detail

function openJobFromHash() {
  const m = /^#job\/(.+)$/.exec(location.hash);
  let id = null;
  try {
    id = m ? decodeURIComponent(m[1]) : null;
  } catch {
    id = null;  // a mangled hash opens nothing
  }
  if (id === view.jobId) return;
  view.jobId = id;
  view.logStick = true;
  clearJobDetail();
  for (const tr of $('jobs-table').tBodies[0].rows) {
    tr.classList.toggle('open', tr.dataset.jobId === id);
  }
  $('job-detail').hidden = !id;
  if (!id) return;
  setText($('job-title'), id);
  $('job-detail').scrollIntoView({block: 'start', behavior: 'smooth'});
  pollSoon();
}

// Nothing of the previous job may linger while the next one loads.
function clearJobDetail() {
  for (const id of ['job-title', 'job-state', 'job-facts', 'job-conditions', 'elastic-facts',
    'job-log', 'job-log-size', 'job-events']) {
    $(id).replaceChildren();
    delete $(id).dataset.sig;
  }
  for (const id of ['recoveries-table', 'step-times-table']) $(id).tBodies[0].replaceChildren();
  $('job-notice').hidden = true;
  $('job-elastic').hidden = true;
  updateCharts(null, []);
}

function renderJob(job, history, log) {
  $('job-notice').hidden = !!job;
  if (!job) {
    setText($('job-notice'), `There is no job ${view.jobId} (or no longer).`);
    return;
  }
  setText($('job-title'), job.name || job.job_id, job.job_id);
  setBadge($('job-state'), job.state, 'JOB_');
  const facts = [
    ['job id', job.job_id],
    ['kind', job.kind || '—'],
    ['entrypoint', (job.entrypoint ?? []).join(' ') || '—'],
    ['submitted', fmtWhen(job.submit_time_ms)],
    ['started', fmtWhen(job.start_time_ms)],
  ];
  if (isFinished(job)) {
    facts.push(['ended', fmtWhen(job.end_time_ms)]);
    if (job.kind !== 'elastic' || num(job.exit_code) !== 0) {
      facts.push(['exit code', num(job.exit_code)]);
    }
  } else if (num(job.start_time_ms) > 0) {
    facts.push(['running for', fmtDuration(Date.now() - num(job.start_time_ms))]);
  }
  if (job.message) facts.push(['message', job.message]);
  setFacts($('job-facts'), facts);

  const conditions = [...(job.conditions ?? [])].sort((a, b) => num(a.time_ms) - num(b.time_ms));
  setList($('job-conditions'), conditions, (c) => h('li', {},
      h('span', {class: 'when', text: fmtClock(c.time_ms)}),
      h('span', {class: 'type', text: c.type}),
      h('span', {class: 'reason', text: c.reason || ''}),
      h('span', {class: 'muted', text: c.message || ''})));

  const elastic = job.kind === 'elastic';
  $('job-elastic').hidden = !elastic;
  if (elastic) renderElastic(job, history);
  renderEvents(job.events ?? []);
  renderLog(log);
}

function renderElastic(job, history) {
  const e = job.elastic ?? {};
  const causes = Object.entries(e.restarts_by_cause ?? {}).sort((a, b) => num(b[1]) - num(a[1]))
      .map(([cause, n]) => `${cause} ${num(n)}`).join(' · ');
  const total = num(e.total_steps);
  const skew = num(e.step_skew);
  const checkpoint = num(e.last_checkpoint_step);
  setFacts($('elastic-facts'), [
    ['world size', worldText(job)],
    ['epoch', num(e.epoch)],
    ['step', stepText(e) + (total > 0 ? ` (${Math.floor((100 * num(e.step)) / total)}%)` : '')],
    ['loss', num(e.step) > 0 ? num(e.loss).toPrecision(4) : '—'],
    ['steps/s', num(e.steps_per_second).toFixed(2)],
    ['last checkpoint', checkpoint > 0 ? `step ${checkpoint}` : 'none yet'],
    ['restarts', num(e.restarts) + (causes ? ` (${causes})` : '')],
    ['time lost to faults', `${num(e.fault_seconds).toFixed(1)} s`],
    ['step skew', skew > 0 ? `${skew.toFixed(2)}×` : '—', skew >= 1.5 ? 'warn' : ''],
  ]);
  updateCharts(job, history);
  renderRecoveries(e.recoveries ?? [], !isFinished(job));
  renderStepTimes(e.step_times ?? [], e.members ?? [], skew);
}

// A recovery's three phases as ms (null: not reached): fault → detected, detected → the
// survivors' next step, and that step → the first step back at full strength.
function recoveryPhases(r) {
  const f = num(r.fault_ms);
  const d = num(r.detected_ms);
  const s = num(r.resumed_ms);
  const full = num(r.full_strength_ms);
  const span = (a, b) => (a > 0 && b > 0 ? Math.max(0, b - a) : null);
  return {detect: span(f, d), resume: span(d, s), heal: span(s, full), total: span(f, full),
    reached: span(f, full || s || d)};
}

function renderRecoveries(recoveries, running) {
  const rows = [...recoveries].sort((a, b) => num(b.id) - num(a.id));  // newest first
  $('recoveries-empty').hidden = rows.length > 0;
  const longest = Math.max(1, ...rows.map((r) => recoveryPhases(r).reached ?? 0));
  const pending = running ? 'not yet' : '—';
  const ms = (x) => (x === null ? pending : fmtMs(x));
  syncRows($('recoveries-table').tBodies[0], rows, (r) => r.id, 'recovery-row',
      ['num', 'mono', '', 'wrap', 'num', 'num', 'num', '', ''], (tr, r) => {
        const [id, when, kind, what, detect, resume, full, world, phases] = tr.cells;
        const p = recoveryPhases(r);
        setText(id, num(r.id));
        setText(when, num(r.fault_ms) > 0 ? fmtClock(r.fault_ms) : '—');
        setText(kind, r.kind);
        setText(what, r.message);
        setText(detect, ms(p.detect));
        setText(resume, ms(p.resume));
        setText(full, ms(p.total));
        setText(world, `${num(r.world_before)} → ${num(r.world_during)}`);
        const pct = (x) => (100 * (x ?? 0)) / longest;
        setBar(phases, [
          ['ph-detect', pct(p.detect), `fault → detected: ${ms(p.detect)}`],
          ['ph-resume', pct(p.resume), `detected → survivors' next step: ${ms(p.resume)}`],
          ['ph-heal', pct(p.heal), `next step → full strength: ${ms(p.heal)}`],
        ]);
      });
}

// Each rank's last step, joined with its member record; the slowest rank is marked when the
// skew is worth a look.
function renderStepTimes(stepTimes, members, skew) {
  const byRank = new Map(members.map((m) => [num(m.rank), m]));
  const rows = stepTimes.map((s) => ({...s, member: byRank.get(num(s.rank))}));
  for (const m of members) {
    if (!stepTimes.some((s) => num(s.rank) === num(m.rank))) {
      rows.push({rank: m.rank, node_id: m.node_id, member: m});  // no step yet
    }
  }
  rows.sort((a, b) => num(a.rank) - num(b.rank));
  $('step-times-empty').hidden = rows.length > 0;
  const slowest = Math.max(1e-9, ...rows.map((r) => num(r.step_ms)));
  const maxCompute = Math.max(0, ...rows.map((r) => num(r.compute_ms)));
  syncRows($('step-times-table').tBodies[0], rows, (r) => num(r.rank), 'step-time-row',
      ['num', 'mono', 'mono', 'num', 'num', 'num', 'num', ''], (tr, r) => {
        const [rank, node, actor, mem, step, compute, wait, bar] = tr.cells;
        const has = r.step_ms !== undefined;
        const stepMs = num(r.step_ms);
        const computeMs = num(r.compute_ms);
        tr.classList.toggle('slowest', skew >= 1.2 && maxCompute > 0 && computeMs === maxCompute);
        setText(rank, num(r.rank));
        const nodeId = r.node_id || r.member?.node_id || '';
        setText(node, shortId(nodeId), nodeId);
        setText(actor, shortId(r.member?.actor_id), r.member?.actor_id ?? '');
        setText(mem, num(r.member?.memory_bytes) > 0 ? fmtBytes(r.member.memory_bytes) : '—');
        setText(step, has ? fmtMs(stepMs) : '—');
        setText(compute, has ? fmtMs(computeMs) : '—');
        setText(wait, has ? fmtMs(Math.max(0, stepMs - computeMs)) : '—');
        setBar(bar, [
          ['st-compute', (100 * computeMs) / slowest, `compute ${fmtMs(computeMs)}`],
          ['st-wait', (100 * Math.max(0, stepMs - computeMs)) / slowest,
            `in collectives ${fmtMs(Math.max(0, stepMs - computeMs))}`],
        ]);
      });
}

function renderEvents(events) {
  const newest = [...events].sort((a, b) => num(b.time_ms) - num(a.time_ms)).slice(0, MAX_EVENTS);
  $('job-events-empty').hidden = newest.length > 0;
  setList($('job-events'), newest, (ev) => {
    const extra = [];
    if (num(ev.world_size) > 0) extra.push(`world ${num(ev.world_size)}`);
    if (num(ev.epoch) > 0) extra.push(`epoch ${num(ev.epoch)}`);
    return h('li', {},
        h('span', {class: 'when', text: fmtClock(ev.time_ms)}),
        h('span', {class: `kind k-${ev.kind}`, text: ev.kind}),
        h('span', {text: ev.message || ''}),
        h('span', {class: 'extra', text: extra.join(', ')}));
  });
}

// Keeps the log scrolled to its end unless the reader scrolled up to read something.
function renderLog(log) {
  const pre = $('job-log');
  const text = log?.log ?? '';
  const size = num(log?.size);
  let note = log?.note ? `(${log.note})` : '(empty)';
  if (size > text.length) note = `(last ${fmtBytes(text.length)} of ${fmtBytes(size)})`;
  else if (size > 0) note = `(${fmtBytes(size)})`;
  setText($('job-log-size'), note);
  if (pre.textContent !== text) pre.textContent = text;
  if (view.logStick) pre.scrollTop = pre.scrollHeight;
}

// ------------------------------------------------------------------------------ charts

const charts = {world: null, steps: null, t0: 0, sig: ''};

// Seconds between x ticks: a round number that gives about eight ticks over `span` seconds.
function niceStep(span) {
  const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 43200,
    86400];
  return steps.find((s) => span / s <= 8) ?? 86400 * Math.ceil(span / 86400 / 8);
}

function chartOptions(yTitle) {
  return {
    animation: false,
    responsive: true,
    maintainAspectRatio: false,
    interaction: {mode: 'nearest', axis: 'x', intersect: false},
    scales: {
      // No date adapter ships with Chart.js 3, so time is seconds since the first sample.
      x: {type: 'linear', min: 0,
        title: {display: true, text: 'time since the first sample (m:ss)'},
        ticks: {callback: (v) => fmtRel(v)}},
      y: {beginAtZero: true, title: {display: true, text: yTitle}},
    },
    plugins: {
      legend: {display: false},
      tooltip: {callbacks: {
        title: (items) => {
          if (!items.length) return '';
          const x = items[0].parsed.x;
          return `+${fmtRel(x)} (${fmtClock(charts.t0 + x * 1000)})`;
        },
      }},
    },
  };
}

function createCharts() {
  const world = chartOptions('ranks');
  world.scales.y.ticks = {precision: 0};
  world.plugins.legend = {display: true, position: 'top', align: 'end',
    labels: {usePointStyle: true, boxWidth: 8, boxHeight: 8}};
  world.plugins.tooltip.callbacks.label = (ctx) =>
      (ctx.datasetIndex === 0 ? `world size ${ctx.parsed.y}` : ctx.raw.label);
  charts.world = new Chart(document.getElementById('world-chart'), {
    type: 'line',
    data: {datasets: [
      {label: 'world size', data: [], stepped: true, borderColor: COLORS.world,
        backgroundColor: 'rgba(9, 105, 218, 0.08)', fill: true, borderWidth: 2, pointRadius: 0,
        pointHoverRadius: 3},
      {label: 'faults and scale changes', data: [], showLine: false, pointRadius: 6,
        pointHoverRadius: 8, pointStyle: (ctx) => ctx.raw?.style ?? 'triangle',
        pointBackgroundColor: (ctx) => ctx.raw?.color ?? COLORS.fault,
        pointBorderColor: '#fff', backgroundColor: COLORS.fault, borderColor: COLORS.fault},
    ]},
    options: world,
  });

  const steps = chartOptions('steps/s');
  steps.plugins.tooltip.callbacks.label = (ctx) => `${ctx.parsed.y.toFixed(2)} steps/s`;
  charts.steps = new Chart(document.getElementById('steps-chart'), {
    type: 'line',
    data: {datasets: [{label: 'steps/s', data: [], borderColor: COLORS.steps,
      backgroundColor: 'rgba(26, 127, 55, 0.08)', fill: true, borderWidth: 1.5, pointRadius: 0,
      pointHoverRadius: 3, tension: 0}]},
    options: steps,
  });
}

// The world size at unix ms t, holding each sample until the next (as the stepped line draws).
function worldAt(points, t) {
  let lo = 0;
  let hi = points.length - 1;
  if (hi < 0 || num(points[0].time_ms) > t) return null;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (num(points[mid].time_ms) <= t) lo = mid;
    else hi = mid - 1;
  }
  return num(points[lo].world_size);
}

// The faults of the recoveries and the fault-like events, as points on the world-size line.
function faultMarkers(job, history, t0) {
  const recoveries = job.elastic?.recoveries ?? [];
  const seen = new Set(recoveries.map((r) => r.message).filter(Boolean));
  const markers = [];
  const add = (t, y, label, style, color) => {
    if (t < t0) return;  // before the samples kept
    markers.push({x: (t - t0) / 1000, y: worldAt(history, t) ?? y, label, style, color});
  };
  for (const r of recoveries) {
    if (num(r.fault_ms) > 0) {
      const label = `${r.kind}: ${r.message}`;
      add(num(r.fault_ms), num(r.world_before), label, 'triangle', COLORS.fault);
    }
  }
  for (const ev of job.events ?? []) {
    if (MARKED_EVENT_KINDS.has(ev.kind) && !seen.has(ev.message)) {
      const label = `${ev.kind}: ${ev.message}`;
      add(num(ev.time_ms), num(ev.world_size), label, 'rectRot', COLORS.event);
    }
  }
  return markers.sort((a, b) => a.x - b.x);
}

function updateCharts(job, history) {
  if (typeof Chart === 'undefined') {
    for (const id of ['world-chart', 'steps-chart']) {
      const box = $(id).parentElement;
      if (!box.querySelector('.chart-missing')) {
        box.append(h('p', {class: 'chart-missing', text: 'Charts need /static/chart.min.js.'}));
      }
    }
    return;
  }
  if (!job) {
    if (!charts.world) return;
    charts.sig = '';
    for (const c of [charts.world, charts.steps]) {
      for (const d of c.data.datasets) d.data = [];
      c.update('none');
    }
    return;
  }
  if (!charts.world) createCharts();  // made once the section is visible, so sized right

  const t0 = num(history[0]?.time_ms);
  const x = (p) => (num(p.time_ms) - t0) / 1000;
  const markers = faultMarkers(job, history, t0);
  const last = history[history.length - 1];
  const sig = JSON.stringify([t0, history.length, last, markers, job.elastic?.max_replicas]);
  if (sig === charts.sig) return;  // nothing new: skip the redraw
  charts.sig = sig;
  charts.t0 = t0;

  const span = last ? x(last) : 0;
  const stepSize = niceStep(Math.max(span, 1));
  const world = charts.world;
  world.data.datasets[0].data = history.map((p) => ({x: x(p), y: num(p.world_size)}));
  world.data.datasets[1].data = markers;
  const yMax = Math.max(num(job.elastic?.max_replicas), ...history.map((p) => num(p.world_size)));
  world.options.scales.y.suggestedMax = yMax + 1;
  world.options.scales.x.ticks.stepSize = stepSize;
  world.update('none');

  const steps = charts.steps;
  steps.data.datasets[0].data = history.map((p) => ({x: x(p), y: num(p.steps_per_second)}));
  steps.options.scales.x.ticks.stepSize = stepSize;
  steps.update('none');
}

// ------------------------------------------------------------------------------ polling

class SessionEnded extends Error {}

class HttpError extends Error {
  constructor(url, status, said) {
    super(`HTTP ${status} from ${url}`);
    this.status = status;
    this.said = said;  // the server's {"error": ...}, when it gave one
  }
}

async function getJson(url) {
  let r;
  try {
    r = await fetch(url, {credentials: 'same-origin', cache: 'no-store',
      headers: {Accept: 'application/json'}});
  } catch (e) {
    throw new Error(`the head did not answer ${url}`);
  }
  if (r.status === 401) throw new SessionEnded();
  if (!r.ok) {
    let said = '';
    try {
      said = (await r.json()).error ?? '';
    } catch (e) {
      // not JSON: the status says enough
    }
    throw new HttpError(url, r.status, said);
  }
  return r.json();
}

// A 404 is an answer ("no such job", "no log yet"), not a failure to poll.
const orNullOn404 = (e) => {
  if (e instanceof HttpError && e.status === 404) return null;
  throw e;
};

async function pollJob(jobId) {
  const base = `/api/jobs/${encodeURIComponent(jobId)}`;
  const [detail, log] = await Promise.all([
    getJson(base).catch(orNullOn404),
    // No log to show (an elastic job has no driver): the server says why, and the page too.
    getJson(`${base}/logs?tail=${LOG_TAIL_BYTES}`).catch((e) => {
      if (e instanceof HttpError && e.status === 404) return {log: '', size: 0, note: e.said};
      throw e;
    }),
  ]);
  const job = detail?.job ?? null;
  let history = [];
  if (job?.kind === 'elastic') {
    const answer = await getJson(`${base}/history`).catch(orNullOn404);
    history = answer?.points ?? [];
  }
  if (jobId !== view.jobId) return;  // the reader opened another job meanwhile
  renderJob(job, history, log);
}

const poller = {timer: 0, running: false, again: false, stopped: false};

async function poll() {
  if (poller.running) {
    poller.again = true;
    return;
  }
  poller.running = true;
  clearTimeout(poller.timer);
  const results = await Promise.allSettled([
    getJson('/api/cluster').then(renderCluster),
    getJson('/api/nodes').then((d) => renderNodes(d.nodes ?? [])),
    getJson(actorsUrl()).then((d) => {
      data.actors = d.actors ?? [];
      data.actorsTotal = num(d.total ?? data.actors.length);
      renderActors();
    }),
    getJson('/api/jobs').then((d) => renderJobs(d.jobs ?? [])),
    view.jobId ? pollJob(view.jobId) : null,
  ]);
  poller.running = false;
  const errors = results.filter((r) => r.status === 'rejected').map((r) => r.reason);
  if (errors.some((e) => e instanceof SessionEnded)) {
    poller.stopped = true;
    location.assign('/login');  // the session ended: sign in again
    return;
  }
  for (const e of errors) if (!(e instanceof HttpError)) console.error(e);
  view.error = errors.map((e) => e.message).join('; ');
  if (!errors.length) view.lastOk = Date.now();
  showFreshness();
  if (poller.again) {
    poller.again = false;
    poll();
  } else {
    poller.timer = setTimeout(poll, document.hidden ? HIDDEN_POLL_MS : POLL_MS);
  }
}

function pollSoon() {
  if (!poller.stopped) poll();
}

// "updated 3s ago"; and while polls fail, a red banner that says the data is that old.
function showFreshness() {
  const age = view.lastOk ? fmtDuration(Date.now() - view.lastOk) : '';
  setText($('updated'), view.lastOk ? `updated ${age} ago` : 'never updated');
  $('updated').classList.toggle('stale', !!view.error);
  const banner = $('error-banner');
  banner.hidden = !view.error;
  if (view.error) {
    setText(banner, `Polling the head failed (${view.error}). ` +
        (view.lastOk ? `Showing data from ${age} ago.` : 'No data yet.'));
  }
}

// ------------------------------------------------------------------------------ wiring

function start() {
  // Signed in: login.html's "a token was just sent" note is spent (see login.html).
  try {
    sessionStorage.removeItem('phalanx.login-sent-ms');
  } catch {
    // Storage blocked: login.html then has no note to read either.
  }
  $('actor-filter').addEventListener('input', renderActors);
  $('actor-state').addEventListener('change', () => {
    renderActors();
    pollSoon();
  });
  $('job-log').addEventListener('scroll', () => {
    const pre = $('job-log');
    view.logStick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;
  });
  // The link of the job already open changes no hash; bring its section back into view.
  $('jobs-table').addEventListener('click', (ev) => {
    const link = ev.target.closest('a.job-link');
    if (link && link.dataset.jobId === view.jobId) $('job-detail').scrollIntoView({block: 'start'});
  });
  $('job-close').addEventListener('click', (ev) => {
    ev.preventDefault();
    history.pushState(null, '', location.pathname + location.search);
    openJobFromHash();
  });
  window.addEventListener('hashchange', openJobFromHash);
  window.addEventListener('popstate', openJobFromHash);
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden) pollSoon();
  });
  setInterval(showFreshness, 1000);
  openJobFromHash();  // polls at once when the address names a job
  if (!view.jobId) pollSoon();
}

start();
