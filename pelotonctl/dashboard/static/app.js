// The Peloton dashboard: polls api/state every 2 s and draws it. Plain JS, no build, no network
// beyond this server. Every element is made with createElement and text nodes, never innerHTML:
// job names, labels and reasons are user input.
"use strict";

const POLL_MS = 2000;
const SVG_NS = "http://www.w3.org/2000/svg";

const ROLES = { admit: "job manager", entitle: "resource manager", place: "placement engine", launch: "host manager" };
const KINDS = [["cpu", "cpu"], ["memory", "memory"], ["gpu", "gpu"], ["disk", "disk"]];
const MEASURES = ["entitlement", "allocation", "demand"];
// Task states in the order of a run's life, for the counts of a job.
const TASK_STATES = ["INITIALIZED", "PENDING", "READY", "PLACING", "PLACED", "LAUNCHING", "LAUNCHED", "STARTING",
  "RUNNING", "PREEMPTING", "KILLING", "SUCCEEDED", "FAILED", "KILLED", "LOST", "DELETED"];

let last = null;        // the last state received
let lastOk = 0;         // when (Date.now()) the server last answered

// -- building elements ------------------------------------------------------------------------
function build(node, attrs, children) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.setAttribute("class", value);
    // Through CSSOM, not the style attribute, which the page's CSP (no inline styles) refuses.
    else if (key === "style") Object.assign(node.style, value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}
const el = (tag, attrs, ...children) => build(document.createElement(tag), attrs, children);
const svg = (tag, attrs, ...children) => build(document.createElementNS(SVG_NS, tag), attrs, children);

// -- formatting -------------------------------------------------------------------------------
const numberFormat = new Intl.NumberFormat("en-US", { maximumFractionDigits: 1 });
function num(n) { return n === null || n === undefined ? "–" : numberFormat.format(n); }
const compactFormat = new Intl.NumberFormat("en-US", { notation: "compact", maximumFractionDigits: 1 });
function rate(n) {
  if (n === null || n === undefined) return "–";
  return `${(n >= 1000 ? compactFormat : numberFormat).format(n)}/s`;
}
function mem(mb) {
  if (mb === null || mb === undefined) return "–";
  return mb >= 1024 ? `${numberFormat.format(mb / 1024)} GiB` : `${numberFormat.format(mb)} MiB`;
}
function disk(mb) { return mem(mb); }
function amount(kind, value) { return kind === "memory" ? mem(value) : kind === "disk" ? disk(value) : num(value); }
function duration(ms) {
  if (ms === null || ms === undefined || ms < 0) return "–";
  const s = ms / 1000;
  if (s < 60) return `${s < 10 ? s.toFixed(1) : Math.round(s)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.round((s % 86400) / 3600)} h`;
}
// Many gangs of a job usually wait for the same reason: shown once, with how many.
function sameReason(reason) { return (reason || "").replace(/ for \d+(\.\d+)?s\b/, ""); }
function grouped(items, keyOf) {
  const groups = new Map();
  for (const item of items) {
    const key = keyOf(item);
    const group = groups.get(key);
    if (group) group.items.push(item); else groups.set(key, { first: item, items: [item] });
  }
  return [...groups.values()];
}

function shortId(id) { return id.length > 13 ? id.slice(0, 8) : id; }

// -- charts -----------------------------------------------------------------------------------
// A line chart of one series over time: the last `points` of a stage's history. Drawn in a
// fixed viewBox stretched to the card's width; strokes keep their width (non-scaling-stroke).
function lineChart(stage, key, label, format, points) {
  const W = 300, H = 60, PAD = 3;
  const values = points.map((p) => p[key]).filter((v) => v !== null && v !== undefined);
  const top = niceCeiling(Math.max(1, ...values));
  const now = values.length ? values[values.length - 1] : null;
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", class: "line-chart",
    role: "img", "aria-label": `${stage} ${label} over time` });
  chart.append(svg("line", { x1: 0, x2: W, y1: PAD, y2: PAD, class: "grid" }));
  chart.append(svg("line", { x1: 0, x2: W, y1: H - 0.5, y2: H - 0.5, class: "axis" }));
  if (points.length >= 2) {
    const t0 = points[0].t, t1 = points[points.length - 1].t;
    const x = (t) => ((t - t0) / Math.max(1, t1 - t0)) * W;
    const y = (v) => H - (v / top) * (H - PAD);
    // A gap (null: no rate yet) breaks the line rather than drawing it at zero.
    let line = "", area = "", run = [];
    const flush = () => {
      if (run.length === 1) run.unshift([run[0][0] - 3, run[0][1]]);  // one value alone: a short stroke
      if (run.length) {
        line += run.map(([px, py], i) => `${i ? "L" : "M"}${px.toFixed(1)},${py.toFixed(1)}`).join("");
        area += `M${run[0][0].toFixed(1)},${H}` + run.map(([px, py]) => `L${px.toFixed(1)},${py.toFixed(1)}`).join("") +
          `L${run[run.length - 1][0].toFixed(1)},${H}Z`;
      }
      run = [];
    };
    for (const p of points) {
      if (p[key] === null || p[key] === undefined) flush();
      else run.push([x(p.t), y(p[key])]);
    }
    flush();
    chart.append(svg("path", { d: area, class: `area ${key}` }));
    chart.append(svg("path", { d: line, class: `line ${key}` }));
  }
  const span = points.length >= 2 ? duration(points[points.length - 1].t - points[0].t) : "";
  return el("figure", { class: "chart", "data-chart": key },
    el("figcaption", {},
      el("span", { class: "chart-label" }, label),
      el("span", { class: "chart-now" }, now === null ? "–" : format(now)),
      el("span", { class: "chart-max" }, `max ${format(top)}${span ? ` · last ${span}` : ""}`)),
    chart);
}

function niceCeiling(v) {
  const magnitude = Math.pow(10, Math.floor(Math.log10(v)));
  for (const step of [1, 2, 2.5, 5, 10]) if (v <= step * magnitude) return step * magnitude;
  return 10 * magnitude;
}

// Three bars of one resource kind of a pool: entitlement, allocation, demand, on one scale, with
// the reservation as a tick.
function poolBars(pool, kind, scale) {
  const W = 100, BAR = 8, GAP = 3, H = MEASURES.length * (BAR + GAP) - GAP;
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", class: "bar-chart",
    "data-kind": kind, role: "img", "aria-label": `${pool.path} ${kind}` });
  MEASURES.forEach((measure, i) => {
    const value = (pool[measure] || {})[kind] || 0;
    const y = i * (BAR + GAP);
    chart.append(svg("rect", { x: 0, y, width: W, height: BAR, class: "track" }));
    chart.append(svg("rect", { x: 0, y, width: scale ? Math.min(W, (value / scale) * W) : 0, height: BAR,
      class: `bar ${measure}`, "data-measure": measure, "data-value": value },
      svg("title", {}, `${measure}: ${amount(kind, value)}`)));
  });
  const reservation = (pool.reservation || {})[kind] || 0;
  if (scale && reservation > 0) {
    const rx = Math.min(W, (reservation / scale) * W);
    chart.append(svg("line", { x1: rx, x2: rx, y1: 0, y2: H, class: "reservation" },
      svg("title", {}, `reservation: ${amount(kind, reservation)}`)));
  }
  return chart;
}

// -- sections ---------------------------------------------------------------------------------
function renderStages(state) {
  const groups = Object.fromEntries(((state.lag || {}).groups || []).map((g) => [g.stage, g]));
  const queued = (state.lag || {}).queued || [];
  const cards = state.stages.map((stage) => {
    const g = groups[stage];
    const history = (state.history || {})[stage] || [];
    const current = history.length ? history[history.length - 1].rate : null;
    const status = g ? g.status : "UNKNOWN";
    const card = el("article", { class: `stage status-${status}`, "data-stage": stage, "data-status": status },
      el("header", {},
        el("div", {}, el("h3", {}, stage), el("span", { class: "role" }, ROLES[stage] || "")),
        el("span", { class: `status-word status-${status}`, "data-field": "status",
          title: g ? g.detail || (g.members ? "" : "the group has no member") : "" }, g ? status : "no data")),
      el("dl", { class: "figures" },
        figure("lag", g ? num(g.total_lag) : "–", "lag", "messages not yet committed"),
        figure("held", g ? num(g.held) : "–", "held", "read, waiting for room or a host"),
        figure("rate", rate(current), "rate", "records committed per second"),
        figure("oldest", g ? duration((g.max_lag_seconds || 0) * 1000) : "–", "lag-seconds",
          "how long the oldest unread message has waited")),
      lineChart(stage, "lag", "lag", num, history),
      lineChart(stage, "rate", "throughput", rate, history));
    if (g && g.status !== "OK" && g.detail) {
      // Why, and for how long: a dead stage's group says STALL or STOP here, not a gap.
      const since = g.status_since_ms ? ` for ${duration(state.lag.sampled_ms - g.status_since_ms)}` : "";
      card.querySelector("header").after(el("p", { class: "status-detail", "data-field": "status-detail" },
        `${status}${since}: ${g.detail}`));
    }
    if (stage === "entitle" && queued.length) {
      const gangs = queued.reduce((n, q) => n + (q.queued_gangs || 0), 0);
      const pools = queued.filter((q) => q.queued_gangs).length;
      card.append(el("p", { class: "queued", "data-field": "queued" },
        gangs ? `${num(gangs)} gang${gangs === 1 ? "" : "s"} queued in ${pools} pool${pools === 1 ? "" : "s"}`
          : "no gang queued"));
    }
    return card;
  });
  document.getElementById("stage-list").replaceChildren(...cards);
}

function figure(label, value, field, title) {
  return el("div", { title }, el("dt", {}, label), el("dd", { "data-field": field }, value));
}

function renderPools(state) {
  const pools = state.pools || [];
  if (!pools.length) {
    document.getElementById("pool-list").replaceChildren(el("p", { class: "empty" }, state.pools ? "No pool." : "Waiting for the first sample…"));
    return;
  }
  const cards = pools.map((pool) => {
    const kinds = KINDS.filter(([kind]) => kind === "cpu" || kind === "memory" ||
      ["entitlement", "allocation", "demand", "reservation"].some((m) => ((pool[m] || {})[kind] || 0) > 0));
    const rows = kinds.map(([kind, label]) => {
      // One scale for the three bars: the largest of them and the reservation; the limit is
      // often far above (the room a pool may borrow) and is told in figures.
      const scale = Math.max(...["entitlement", "allocation", "demand", "reservation"].map((m) => (pool[m] || {})[kind] || 0));
      return el("div", { class: "pool-kind", "data-kind": kind },
        el("span", { class: "kind-name" }, label),
        poolBars(pool, kind, scale),
        el("span", { class: "kind-values" },
          MEASURES.map((m) => el("span", { class: `value ${m}`, "data-measure": m }, amount(kind, (pool[m] || {})[kind] || 0)))),
        el("span", { class: "kind-limit" }, `res ${amount(kind, (pool.reservation || {})[kind] || 0)}`,
          el("br"), `limit ${amount(kind, (pool.limit || {})[kind] || 0)}`));
    });
    const waiting = grouped(pool.waiting || [], (w) => `${w.job_id} ${sameReason(w.reason)}`).map(({ first: w, items }) => {
      const tasks = items.reduce((n, g) => n + g.tasks, 0);
      const gangs = items.length > 1 ? `${items.length} gangs, ` : "";
      return el("li", { "data-gang-id": w.gang_id },
        el("span", { class: "gang" }, `job ${shortId(w.job_id)} · ${gangs}${tasks} task${tasks === 1 ? "" : "s"}`),
        " ", el("span", { class: "reason" }, sameReason(w.reason)));
    });
    return el("article", { class: `pool${pool.path === "/" ? " root" : ""}`, "data-pool": pool.path },
      el("header", {},
        el("h3", {}, pool.path, pool.path === "/" ? el("span", { class: "role" }, " the cluster") : null),
        el("span", { class: `badge${pool.queued_gangs ? " warn" : ""}`, "data-field": "queued-gangs" },
          `${num(pool.queued_gangs || 0)} gang${pool.queued_gangs === 1 ? "" : "s"} queued`),
        pool.preempting ? el("span", { class: "badge bad", "data-field": "preempting" }, `preempting ${pool.preempting}`) : null),
      el("div", { class: "pool-kinds" }, rows),
      waiting.length ? el("ul", { class: "waiting" }, waiting) : null);
  });
  document.getElementById("pool-list").replaceChildren(...cards);
}

function renderPending(state) {
  const list = state.pending || [];
  const now = state.sampled_ms || Date.now();
  if (!list.length) {
    document.getElementById("pending-list").replaceChildren(
      el("p", { class: "empty" }, state.pending ? "No task is waiting." : "Waiting for the first sample…"));
    return;
  }
  const items = list.map((job) => el("li", { "data-pending-job": job.job_id },
    el("div", { class: "pending-head" },
      el("strong", {}, job.name), " ", el("code", { title: job.job_id }, shortId(job.job_id)),
      el("span", { class: "muted" }, ` in ${job.pool}`), " ",
      job.pending ? el("span", { class: "badge warn" }, `${num(job.pending)} pending`) : null,
      (job.not_started || []).length ? el("span", { class: "badge warn" }, `${num(job.not_started.length)} not started`)
        : null),
    el("ul", { class: "reasons" },
      grouped(job.waiting, (w) => sameReason(w.reason)).map(({ first: w, items }) => {
        const longest = Math.max(...items.map((g) => now - g.since_ms));
        const what = items.length > 1 ? `${items.length} gangs` : `gang of ${w.tasks}`;
        return el("li", { class: "reason", "data-gang-id": w.gang_id },
          el("span", { class: "muted" }, `${what} · waiting ${items.length > 1 ? "up to " : ""}${duration(longest)}: `),
          sameReason(w.reason));
      }),
      grouped(job.unplaced, (t) => t.message || t.reason).map(({ first: t, items }) => {
        const which = items.length > 1 ? `instances ${items.map((u) => u.instance).join(", ")}`
          : `instance ${t.instance} (run ${t.run_id})`;
        return el("li", { class: "reason unplaced" },
          el("span", { class: "muted" }, `${which}, no host: `), t.message || t.reason);
      }),
      // Launched, and its agent has not started them: behind on its commands, or cut off (the
      // host manager waits for it rather than run them twice).
      grouped(job.not_started || [], (t) => t.host_id).map(({ first: t, items }) => {
        const which = items.length > 1 ? `instances ${items.map((u) => u.instance).join(", ")}`
          : `instance ${t.instance} (run ${t.run_id})`;
        return el("li", { class: "reason not-started", "data-host-id": t.host_id },
          el("span", { class: "muted" }, `${which} · launched on ${t.host_id} ${duration(t.seconds * 1000)} ago, `
            + "not started: "), "its agent is behind on its commands or cannot reach the broker");
      }),
      job.pending && !job.waiting.length && !job.unplaced.length
        ? el("li", { class: "reason muted" }, "in its pool's queue, behind the gangs shown first") : null)));
  document.getElementById("pending-list").replaceChildren(el("ul", { class: "pending-list" }, items));
}

// A task state's colour group (prefixed: "waiting" alone is the pools' list).
function taskStateClass(s) {
  if (s === "SUCCEEDED") return "ts-done";
  if (s === "FAILED" || s === "LOST") return "ts-bad";
  if (s === "KILLED" || s === "DELETED") return "ts-killed";
  if (s === "RUNNING" || s === "PREEMPTING" || s === "KILLING") return "ts-running";
  if (s === "LAUNCHING" || s === "LAUNCHED" || s === "STARTING") return "ts-starting";
  return "ts-waiting";
}

// A job's latest update or restart, under its state: where it is, and why (paused, waiting for
// the disruption budget, failed, rolled back).
function updateLine(update) {
  if (!update) return null;
  const words = `${update.kind.toLowerCase()} ${update.state} ${update.done}/${update.total}`;
  return el("div", { class: "update muted", "data-field": "update", title: update.update_id },
    update.message ? `${words}: ${update.message}` : words);
}

function renderJobs(state) {
  const jobs = state.jobs || [];
  const now = state.sampled_ms || Date.now();
  const body = document.getElementById("job-rows");
  if (!jobs.length) {
    body.replaceChildren(el("tr", {}, el("td", { colspan: 6, class: "empty" }, state.jobs ? "No job yet." : "Waiting for the first sample…")));
    return;
  }
  body.replaceChildren(...jobs.map((job) => {
    const counts = job.tasks || {};
    const total = Object.values(counts).reduce((a, b) => a + b, 0) || 1;
    const states = TASK_STATES.filter((s) => counts[s]).concat(Object.keys(counts).filter((s) => !TASK_STATES.includes(s) && counts[s]));
    const bar = el("div", { class: "stack", role: "img", "aria-label": states.map((s) => `${s} ${counts[s]}`).join(", ") },
      states.map((s) => el("span", { class: `seg ${taskStateClass(s)}`, style: { width: `${(100 * counts[s]) / total}%` }, title: `${s} ${counts[s]}` })));
    const chips = states.map((s) => el("span", { class: `chip ${taskStateClass(s)}` },
      el("span", { class: "dot" }), el("span", { class: "chip-label" }, s), el("span", { class: "chip-count", "data-state-count": s }, counts[s])));
    const age = job.completed_ms ? `took ${duration(job.completed_ms - job.created_ms)}` : duration(now - job.created_ms);
    return el("tr", { "data-job-id": job.job_id, "data-job-state": job.state },
      el("td", {}, el("div", { class: "job-name" }, job.name), el("code", { class: "job-id", title: job.job_id }, job.job_id)),
      el("td", {}, job.pool),
      el("td", {}, el("span", { class: `state state-${job.state}`, "data-field": "state" }, job.state), updateLine(job.update)),
      el("td", { class: "num" }, num(job.instances)),
      el("td", { class: "tasks" }, bar, el("div", { class: "chips" }, chips)),
      el("td", { class: "num muted" }, age));
  }));
}

function usageCell(free, total, format) {
  if (free === null || free === undefined) {  // a silent agent: what runs there is unknown
    return el("td", { class: "usage muted", title: "its agent is silent: runs unknown" }, `? / ${format(total)}`);
  }
  const used = total ? Math.max(0, Math.min(1, (total - free) / total)) : 0;
  return el("td", { class: "usage" },
    el("span", { class: "usage-text" }, `${format(free)} / ${format(total)}`),
    el("span", { class: `meter${used > 0.9 ? " full" : ""}`, title: `${Math.round(used * 100)}% allocated` },
      el("span", { class: "meter-fill", style: { width: `${used * 100}%` } })));
}

function renderHosts(state) {
  const hosts = state.hosts || [];
  const body = document.getElementById("host-rows");
  if (!hosts.length) {
    body.replaceChildren(el("tr", {}, el("td", { colspan: 7, class: "empty" }, state.hosts ? "No host has reported." : "Waiting for the first sample…")));
    return;
  }
  body.replaceChildren(...hosts.map((h) => {
    const labels = Object.entries(h.labels || {}).filter(([k]) => k !== "hostname").sort();
    return el("tr", { "data-host-id": h.host_id, "data-host-state": h.state },
      el("td", {}, el("code", {}, h.host_id)),
      el("td", {}, el("span", { class: `state host-${h.state}`, "data-field": "state" }, h.state)),
      el("td", { class: "muted" }, h.driver),
      el("td", { class: "num", "data-field": "tasks" }, h.tasks === null ? "?" : num(h.tasks)),
      usageCell(h.free ? h.free.cpu : null, h.total.cpu, num),
      usageCell(h.free ? h.free.mem_mb : null, h.total.mem_mb, mem),
      el("td", {}, el("div", { class: "labels" }, labels.map(([k, v]) => el("span", { class: "label" }, `${k}=${v}`)))));
  }));
}

function renderErrors(state) {
  const errors = state.errors || {};
  for (const box of document.querySelectorAll("[data-error-for]")) {
    const message = errors[box.dataset.errorFor];
    box.replaceChildren(...(message ? [el("span", {}, `${message} (showing the last data read)`)] : []));
    box.closest("section").classList.toggle("stale", Boolean(message));
  }
}

function renderHeader(state) {
  const c = state.cluster || {};
  document.getElementById("cluster").replaceChildren(
    c.bootstrap ? el("span", {}, "broker ", el("code", {}, c.bootstrap)) : "",
    c.topic_prefix ? el("span", {}, " · prefix ", el("code", {}, c.topic_prefix)) : "");
  renderFreshness();
}

// "updated 2 s ago", refreshed every second; says so when the server stops answering.
function renderFreshness() {
  const node = document.getElementById("updated");
  if (!last) return;
  const serverSilent = Date.now() - lastOk > 3 * POLL_MS;
  if (serverSilent) {
    node.dataset.connection = "lost";
    node.textContent = `dashboard server not answering since ${duration(Date.now() - lastOk)}`;
  } else if (!last.sampled_ms) {
    node.dataset.connection = "connecting";
    node.textContent = "sampling…";
  } else {
    node.dataset.connection = "ok";
    const took = last.sample_seconds !== null ? ` · sample took ${duration(last.sample_seconds * 1000)}` : "";
    node.textContent = `updated ${duration(Math.max(0, Date.now() - last.sampled_ms))} ago${took}`;
  }
}

function render(state) {
  renderHeader(state);
  renderErrors(state);
  renderStages(state);
  renderPools(state);
  renderPending(state);
  renderJobs(state);
  renderHosts(state);
  document.body.dataset.sampledMs = state.sampled_ms || "";
}

async function poll() {
  try {
    const response = await fetch("api/state", { cache: "no-store" });
    if (response.status === 401) { window.location.assign("login"); return; }  // signed out, or revoked
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    last = await response.json();
    lastOk = Date.now();
    render(last);
  } catch (err) {
    renderFreshness();
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

lastOk = Date.now();
setInterval(renderFreshness, 1000);
poll();
