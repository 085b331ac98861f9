// The two Chart.js charts of an elastic job's detail: its world size (with the faults and scale
// changes marked on it) and its steps per second, over seconds since the first history sample.
'use strict';

// Job events drawn on the world-size chart beside the recoveries' faults.
const MARKED_EVENT_KINDS = new Set(['rank_died', 'hang', 'straggler', 'scale']);
const COLORS = {world: '#0969da', steps: '#1a7f37', fault: '#cf222e', event: '#bf8700'};

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
