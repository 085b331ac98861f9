// The dashboard's state, its polling of the head's JSON API, and the page's wiring. Loaded last,
// after format.js, charts.js and tables.js (index.html), it starts the page.
//
// The Phalanx dashboard polls the head's JSON API once a second and keeps index.html in step
// with it. Plain ES2020 in classic scripts that share one global scope (so no top-level name may
// be declared twice across them), no framework, no build step; Chart.js 3.9 (the global `Chart`,
// served at /static/chart.min.js) draws the two charts of an elastic job.
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

// What the last successful answers said, and what the reader has open.
const data = {actors: [], actorsTotal: 0};
const view = {jobId: null, logStick: true, lastOk: 0, error: ''};

// ------------------------------------------------------------------------------ the open job

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

// ------------------------------------------------------------------------------ polling

function actorsUrl() {
  const state = $('actor-state').value;
  return `/api/actors?limit=${ACTOR_LIMIT}` + (state ? `&state=${encodeURIComponent(state)}` : '');
}

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
