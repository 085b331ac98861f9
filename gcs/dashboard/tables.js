// Rendering of the API's answers into index.html: the cluster header, the nodes, actors and jobs
// tables, and the open job's detail (facts, conditions, recoveries, step times, events, log).
'use strict';

const MAX_EVENTS = 50;
const ACTOR_STATES = ['PENDING', 'CREATING', 'ALIVE', 'RESTARTING', 'DEAD'];
const JOB_STATES = ['PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'STOPPED'];

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
        setText(what, r.restored_from ? `${r.message}; restored ${r.restored_from}` : r.message);
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
