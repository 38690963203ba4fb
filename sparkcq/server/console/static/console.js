// sparkcq console: the running system at a glance (docs/console.md).
// One server-sent event stream (/console/events) brings a snapshot after each cycle; a
// query's results stream from /queries/{name}/stream. Everything user-given is escaped.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const MAX_ELEMENTS = 3000;   // result elements kept for the timeline and table
const MAX_SAMPLES = 600;     // health samples kept (the server sends the newest 60)
const LANES = 24;            // timeline lanes (distinct result values) drawn

const state = {
  snap: null, view: "queries", health: new Map(), selectedNode: null, confirmDrop: null,
  results: { name: null, source: null, elements: [], open: new Map(), columns: [] },
};
// what a test or a measurement reads: when each snapshot arrived and was drawn
window.sparkcqConsole = { updates: [], version: 0, results: 0 };

const $ = (id) => document.getElementById(id);
function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ({
    "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
function num(n, digits = 0) {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  return Number(n).toLocaleString("en-US", { maximumFractionDigits: digits,
                                            minimumFractionDigits: digits });
}
function seconds(s) {
  if (s === null || s === undefined) return "–";
  return s < 1 ? `${num(s * 1000, 0)} ms` : `${num(s, 2)} s`;
}
// an event time on the engine's axis: microseconds for TIMESTAMP streams, else a number
function instant(at, kind) {
  if (at === null || at === undefined) return "–";
  if (typeof at === "string") return at.replace("T", " ");  // a result's own timestamp
  if (kind !== "timestamp") return String(at);
  return new Date(at / 1000).toISOString().replace("T", " ").replace(".000Z", "Z");
}
// a stream's watermark as a user reads it: none before its first event, +inf once ended
function watermark(s) {
  if (s.ended) return "+∞ (ended)";
  return s.watermark === null || s.watermark === undefined ? "none yet" : instant(s.watermark, s.time_kind);
}
function duration(d, kind) {
  if (d === null || d === undefined) return "–";
  return kind === "timestamp" ? seconds(d / 1e6) : num(d);
}
function el(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}
function cut(text, n) { return text.length > n ? `${text.slice(0, n - 1)}…` : text; }
function table(headers, rows, empty) {
  if (!rows.length) return `<div class="empty">${esc(empty)}</div>`;
  const head = headers.map((h) => `<th class="${h.num ? "num" : ""}">${esc(h.label)}</th>`);
  return `<table><thead><tr>${head.join("")}</tr></thead><tbody>${rows.join("")}</tbody></table>`;
}
async function api(method, path, body) {
  const response = await fetch(path, {
    method, headers: body ? { "Content-Type": "application/json" } : {},
    body: body ? JSON.stringify(body) : undefined, credentials: "same-origin" });
  const text = await response.text();
  let data;
  try { data = JSON.parse(text); } catch { data = text; }
  if (!response.ok) throw Object.assign(new Error(data.error || text), { data });
  return data;
}

// -- the snapshot stream ------------------------------------------------------------------
function connect() {
  const source = new EventSource("/console/events");
  source.addEventListener("open", () => setConnection("live", "live"));
  source.addEventListener("error", () => setConnection("lost", "reconnecting…"));
  source.addEventListener("snapshot", (event) => {
    const received = Date.now() / 1000;
    const snap = JSON.parse(event.data);
    state.snap = snap;
    for (const sample of snap.health || []) state.health.set(sample.cycle, sample);
    while (state.health.size > MAX_SAMPLES) state.health.delete(state.health.keys().next().value);
    render();
    const log = window.sparkcqConsole;
    log.version = snap.version;
    log.updates.push({ version: snap.version, cycle: snap.cycle, taken_at: snap.taken_at,
                       received_at: received, drawn_at: Date.now() / 1000 });
    if (log.updates.length > 2000) log.updates.shift();
  });
}
function setConnection(kind, text) {
  const node = $("connection");
  node.dataset.state = kind;
  node.textContent = text;
}

function render() {
  if (!state.snap || document.hidden) return;  // a background tab draws when shown again
  renderSummary();
  const views = { queries: renderQueries, plan: renderPlan, results: renderResultsPicker,
                  health: renderHealth, catalog: renderCatalog };
  views[state.view]();
}

function renderSummary() {
  const { snap } = state;
  const st = snap.status || {};
  const sm = snap.summary || {};
  const failed = (st.queries_failed || 0) + (st.queries_engine_failed || 0);
  $("summary").innerHTML = [
    `cycle <b>${num(snap.cycle)}</b>`,
    `Spark <b>${esc(st.spark)}</b>`,
    `queries <b>${num(st.queries_running)}</b> running` + (failed ? `, <b>${num(failed)}</b> failed` : ""),
    `cycle p50 <b>${seconds(sm.latency_p50)}</b> p99 <b>${seconds(sm.latency_p99)}</b>`,
    `<b>${num(sm.cycles_per_second, 2)}</b> cycles/s`,
    `<b>${num(sm.rows_in_per_second)}</b> rows/s in`,
  ].join(" · ");
}

// -- queries ------------------------------------------------------------------------------
function renderQueries() {
  const rows = state.snap.queries.map((q) => {
    const status = esc(q.status).replace(/ /g, "-");
    const reason = q.reason ? `<div class="reason">${esc(q.reason)}</div>` : "";
    const dropping = state.confirmDrop === q.name;
    return `<tr data-query="${esc(q.name)}">
      <td><b>${esc(q.name)}</b></td><td>${esc(q.language)}</td>
      <td><span class="badge ${status}">${esc(q.status)}</span>${reason}</td>
      <td>${esc(q.sink)}</td><td>${esc(q.form)}</td>
      <td class="num">${num(q.rows_last_cycle)}</td>
      <td>${esc(instant(q.frontier, q.time_kind))}</td>
      <td class="num">${esc(duration(q.lag, q.time_kind))}</td>
      <td class="num">${seconds(q.age_seconds)}</td>
      <td><button class="small" data-action="results">results</button><button class="small"
        data-action="log">log</button><button class="small danger ${dropping ? "confirm" : ""}"
        data-action="drop">${dropping ? "confirm drop" : "drop"}</button></td></tr>`;
  });
  $("queries").innerHTML = table([
    { label: "query" }, { label: "language" }, { label: "status" }, { label: "sink" },
    { label: "output" }, { label: "rows last cycle", num: true },
    { label: "output final through" }, { label: "lag", num: true },
    { label: "since last cycle", num: true }, { label: "" }],
  rows, "No queries yet: write one below.");
}

async function onQueryAction(event) {
  const button = event.target.closest("button[data-action]");
  if (!button) return;
  const name = button.closest("tr").dataset.query;
  const action = button.dataset.action;
  if (action === "results") {
    openResults(name);
  } else if (action === "log") {
    showLog(name);
  } else if (action === "drop") {
    if (state.confirmDrop !== name) {
      state.confirmDrop = name;
      renderQueries();
      return;
    }
    state.confirmDrop = null;
    try {
      await api("DELETE", `/queries/${encodeURIComponent(name)}`);
      showResult({ ok: `dropped ${name}` });
    } catch (e) {
      showResult({ error: e });
    }
  }
}

async function showLog(name) {
  $("log-box").hidden = false;
  $("log-title").textContent = `Log of ${name}`;
  try {
    const data = await api("GET", `/queries/${encodeURIComponent(name)}/log`);
    $("log").textContent = data.log.join("\n") || "(empty)";
  } catch (e) {
    $("log").textContent = e.message;
  }
}

async function runStatement() {
  const text = $("editor").value;
  if (!text.trim()) return;
  $("run").disabled = true;
  try {
    const data = await api("POST", "/statements", { sql: text });
    showResult({ ok: typeof data.result === "string" ? data.result : JSON.stringify(data.result, null, 1) });
  } catch (e) {
    showResult({ error: e, text });
  } finally {
    $("run").disabled = false;
  }
}

// the answer to a statement; an error in query text shows the text with its place underlined
function showResult({ ok, error, text }) {
  const box = $("editor-result");
  if (ok !== undefined) {
    box.innerHTML = `<div class="ok">${esc(ok)}</div>`;
    return;
  }
  const data = error.data || {};
  const loc = data.location;
  let where = "";
  if (loc && text !== undefined) {
    const end = Math.max(loc.end, Math.min(loc.start + 1, text.length));
    const fragment = text.slice(loc.start, end) || " ";
    where = `<pre class="where">${esc(text.slice(0, loc.start))}<span class="err-fragment">${esc(fragment)}</span>${esc(text.slice(end))}</pre>
      <div class="hint">line ${loc.line}, column ${loc.col}</div>`;
    const editor = $("editor");
    editor.focus();
    editor.setSelectionRange(loc.start, end);
  }
  const message = data.message || error.message;
  box.innerHTML = `<div class="error"><div class="message">${esc(message)}</div>${where}</div>`;
}

// -- the global plan ----------------------------------------------------------------------
const NODE_W = 250, NODE_H = 66, GAP_X = 70, GAP_Y = 16, PAD = 20;

function shareColour(share) {
  const s = Math.max(0, Math.min(1, share * 2));  // red from half the cycle on
  return `hsl(${Math.round(120 * (1 - s))}, ${60 + 20 * s}%, ${86 - 6 * s}%)`;
}

function layout(nodes) {
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const depth = new Map();
  const depthOf = (n) => {
    if (!depth.has(n.id)) {
      depth.set(n.id, 0);
      depth.set(n.id, n.inputs.length ? 1 + Math.max(...n.inputs.map((i) => depthOf(byId.get(i)))) : 0);
    }
    return depth.get(n.id);
  };
  const columns = [];
  for (const n of nodes) (columns[depthOf(n)] ||= []).push(n);
  const row = new Map();
  columns.forEach((column, d) => {
    if (d > 0) {  // each node near its inputs: fewer crossing edges
      const centre = (n) => n.inputs.reduce((s, i) => s + row.get(i), 0) / n.inputs.length;
      column.sort((a, b) => centre(a) - centre(b) || a.id - b.id);
    }
    column.forEach((n, i) => row.set(n.id, i));
  });
  const pos = new Map();
  columns.forEach((column, d) => column.forEach((n, i) => pos.set(n.id, {
    x: PAD + d * (NODE_W + GAP_X), y: PAD + i * (NODE_H + GAP_Y) })));
  return { pos, columns: columns.length, rows: Math.max(0, ...columns.map((c) => c.length)) };
}

function queryRoots(nodes) {
  const roots = new Map();
  for (const n of nodes) {
    for (const q of n.queries) {
      const above = nodes.some((p) => p.inputs.includes(n.id) && p.queries.includes(q));
      if (!above) roots.set(q, n.id);
    }
  }
  return roots;
}

function renderPlan() {
  const plan = state.snap.plan;
  $("plan-legend").innerHTML = `<span><span class="swatch s0"></span>little of the cycle</span>
    <span><span class="swatch s1"></span>a quarter</span><span><span class="swatch s2"></span>half or more</span>
    <span>blue border: shared by several queries</span>
    <span>${plan.nodes.length} operators · last cycle ${seconds(plan.cycle_ms / 1000)}, driver ${seconds(plan.driver_ms / 1000)}</span>
    <span title="Spark runs a cycle as one job; its time is divided among operators by the rows each handled">time = driver time + Spark time estimated by rows</span>`;
  const svg = $("plan");
  svg.replaceChildren();
  if (!plan.nodes.length) {
    svg.setAttribute("width", 400); svg.setAttribute("height", 60);
    svg.append(el("text", { x: 20, y: 35 }, "No operators: no query runs."));
    $("node-detail").innerHTML = "";
    return;
  }
  const { pos, columns, rows } = layout(plan.nodes);
  const roots = queryRoots(plan.nodes);
  const pillX = PAD + columns * (NODE_W + GAP_X);
  const height = Math.max(PAD * 2 + rows * (NODE_H + GAP_Y), PAD * 2 + roots.size * 28);
  svg.setAttribute("width", pillX + 200);
  svg.setAttribute("height", height);
  const edges = el("g");
  svg.append(edges);
  const link = (x1, y1, x2, y2) => edges.append(el("path", {
    class: "edge", d: `M${x1},${y1} C${x1 + GAP_X / 2},${y1} ${x2 - GAP_X / 2},${y2} ${x2},${y2}` }));
  for (const n of plan.nodes) {
    const p = pos.get(n.id);
    n.inputs.forEach((i, k) => {
      const q = pos.get(i);
      link(q.x + NODE_W, q.y + NODE_H / 2, p.x, p.y + 12 + k * 10);
    });
    const g = el("g", { class: `node${n.queries.length > 1 ? " shared" : ""}${state.selectedNode === n.id ? " selected" : ""}`,
                        "data-node": n.id, transform: `translate(${p.x},${p.y})` });
    g.append(el("rect", { width: NODE_W, height: NODE_H, rx: 6, fill: shareColour(n.share) }));
    g.append(el("text", { x: 8, y: 16, class: "title" }, cut(`#${n.id} ${n.label}`, 40)));
    const users = n.queries.length > 1 ? `${n.queries.length} queries share it` : (n.queries[0] || "");
    g.append(el("text", { x: 8, y: 32, class: "muted" }, cut(`${n.kind} · refs ${n.refs} · ${users}`, 44)));
    const rowsText = n.fused ? "fused" : n.rows_last_cycle === null ? "inline" : `${num(n.rows_last_cycle)} rows`;
    g.append(el("text", { x: 8, y: 48 }, cut(`state ${num(n.state_rows)} · ${rowsText} · ${seconds(n.estimated_ms / 1000)} (${num(n.share * 100)}%)`, 44)));
    if (n.instances !== null) g.append(el("text", { x: 8, y: 61, class: "muted" }, `${num(n.instances)} aggregate instances`));
    else if (n.shedding) g.append(el("text", { x: 8, y: 61, class: "muted" }, `shedding z=${num(n.shedding.z, 2)}`));
    g.append(el("title", {}, `#${n.id} ${n.label}\nqueries: ${n.queries.join(", ")}`));
    svg.append(g);
  }
  [...roots.entries()].sort().forEach(([query, id], i) => {
    const p = pos.get(id);
    const y = PAD + i * 28;
    link(p.x + NODE_W, p.y + NODE_H / 2, pillX, y + 11);
    const g = el("g", { class: "query-pill", transform: `translate(${pillX},${y})` });
    g.append(el("rect", { width: 180, height: 22, rx: 11 }));
    g.append(el("text", { x: 10, y: 15 }, cut(query, 26)));
    svg.append(g);
  });
  renderNodeDetail();
}

function renderNodeDetail() {
  const n = state.snap.plan.nodes.find((x) => x.id === state.selectedNode);
  if (!n) { $("node-detail").innerHTML = `<div class="hint">Click an operator for its details.</div>`; return; }
  const item = (k, v) => `<dt>${esc(k)}</dt><dd>${v}</dd>`;
  let shedding = "";
  if (n.shedding) {
    shedding = item("shedding", `${esc(n.shedding.mode)}, z=${num(n.shedding.z, 3)}, budget ${num(n.shedding.budget_seconds, 2)} s; ` +
      n.shedding.inputs.map((s, i) => `${i ? "right" : "left"} processed ${num(s.processed)}, shed ${num(s.shed)}`).join("; "));
  }
  $("node-detail").innerHTML = `<h2>#${n.id} ${esc(n.label)}</h2><dl>
    ${item("operator", esc(n.op))}${item("output", esc(n.kind))}
    ${item("inputs", n.inputs.map((i) => `#${i}`).join(", ") || "none")}
    ${item("queries", esc(n.queries.join(", ")))}${item("references", num(n.refs))}
    ${item("state rows", num(n.state_rows))}
    ${item("rows last cycle", n.fused ? "fused (its family computed it)" : n.rows_last_cycle === null ? "inline (not counted)" : num(n.rows_last_cycle))}
    ${item("rows per cycle (average)", num(n.rows_per_cycle, 1))}
    ${item("driver time", seconds(n.driver_ms / 1000))}
    ${item("time with its Spark share (estimate)", `${seconds(n.estimated_ms / 1000)}, ${num(n.share * 100, 1)}% of the cycle`)}
    ${n.instances !== null ? item("user aggregate instances", num(n.instances)) : ""}${shedding}</dl>`;
}

// -- live results -------------------------------------------------------------------------
function renderResultsPicker() {
  const select = $("result-query");
  const names = state.snap.queries.map((q) => q.name);
  const have = [...select.options].map((o) => o.value);
  if (names.join("\n") !== have.join("\n")) {
    select.innerHTML = names.map((n) => `<option value="${esc(n)}">${esc(n)}</option>`).join("");
    if (state.results.name && names.includes(state.results.name)) select.value = state.results.name;
  }
  if (!state.results.name && names.length) openResults(names[0], false);
  drawResults();
}

function openResults(name, show = true) {
  const r = state.results;
  if (r.source) r.source.close();
  Object.assign(r, { name, elements: [], open: new Map(), columns: [] });
  $("result-query").value = name;
  $("results-state").textContent = "connecting…";
  r.source = new EventSource(`/queries/${encodeURIComponent(name)}/stream?from=0`);
  r.source.addEventListener("message", (event) => {
    takeRecords(JSON.parse(event.data));
    $("results-state").textContent = `${num(r.elements.length)} elements`;
    if (state.view === "results") drawResults();
  });
  r.source.addEventListener("error", (event) => {
    if (event.data) {
      $("results-state").textContent = JSON.parse(event.data);
      r.source.close();
    }
  });
  if (show) showView("results");
}

// records to elements: an open element (no _te) is closed by a later "C" record
function takeRecords(records) {
  const r = state.results;
  for (const rec of records) {
    const values = Object.keys(rec).filter((k) => !k.startsWith("_"));
    if (!r.columns.length) r.columns = values;
    const key = JSON.stringify(values.map((k) => rec[k]));
    const id = `${key}@${rec._ts}`;
    if (rec._op === "C") {
      const waiting = r.open.get(id);
      if (waiting && waiting.length) waiting.shift().te = rec._te;
      continue;
    }
    // a changelog record (+row @ts, -row @te) has no _te: drawn as an instant
    const te = rec._te === undefined ? rec._ts : rec._te;
    const element = { key, values: values.map((k) => rec[k]), ts: rec._ts, te, op: rec._op };
    if (te === null) {
      if (!r.open.has(id)) r.open.set(id, []);
      r.open.get(id).push(element);
    }
    r.elements.push(element);
  }
  if (r.elements.length > MAX_ELEMENTS) r.elements.splice(0, r.elements.length - MAX_ELEMENTS);
  window.sparkcqConsole.results = r.elements.length;
}

// a result's timestamp (ISO text, UTC) on the engine's axis (microseconds)
function toAxis(at) {
  if (typeof at !== "string") return at;
  return Date.parse(/Z|[+-]\d\d:?\d\d$/.test(at) ? at : `${at}Z`) * 1000;
}

function drawResults() {
  const r = state.results;
  const q = state.snap.queries.find((x) => x.name === r.name);
  const svg = $("timeline");
  svg.replaceChildren();
  if (!q || !r.elements.length) {
    svg.setAttribute("width", 500); svg.setAttribute("height", 50);
    svg.append(el("text", { x: 16, y: 30 }, q ? "No results yet." : "Choose a query."));
    $("results-table").innerHTML = "";
    return;
  }
  const kind = q.time_kind;
  const shown = r.elements.slice(-400);
  const lanes = [];
  for (const e of shown.slice().reverse()) {
    if (!lanes.includes(e.key) && lanes.length < LANES) lanes.push(e.key);
  }
  lanes.reverse();
  const frontier = q.frontier !== null ? q.frontier : null;
  const starts = shown.map((e) => toAxis(e.ts));
  const ends = shown.map((e) => e.te === null ? (frontier ?? toAxis(e.ts)) : toAxis(e.te));
  let lo = Math.min(...starts), hi = Math.max(...ends, frontier ?? -Infinity);
  if (hi <= lo) hi = lo + 1;
  const LABEL = 220, W = 900, LANE = 22, TOP = 26;
  const x = (t) => LABEL + (Math.min(Math.max(t, lo), hi) - lo) / (hi - lo) * W;
  svg.setAttribute("width", LABEL + W + 30);
  svg.setAttribute("height", TOP + lanes.length * LANE + 24);
  for (let i = 0; i <= 4; i++) {
    const t = lo + (hi - lo) * i / 4;
    svg.append(el("line", { class: "grid", x1: x(t), x2: x(t), y1: TOP - 6, y2: TOP + lanes.length * LANE }));
    svg.append(el("text", { x: x(t), y: 14, class: "muted", "text-anchor": "middle" }, instant(Math.round(t), kind).slice(-14)));
  }
  lanes.forEach((key, i) => {
    const values = JSON.parse(key);
    svg.append(el("text", { x: 6, y: TOP + i * LANE + 15 }, cut(r.columns.map((c, k) => `${c}=${values[k]}`).join(" "), 34)));
  });
  shown.forEach((e, j) => {
    const lane = lanes.indexOf(e.key);
    if (lane < 0) return;
    const y = TOP + lane * LANE + 4;
    const a = x(starts[j]), b = x(ends[j]);
    if (e.te !== null && toAxis(e.te) === toAxis(e.ts)) {
      svg.append(el("circle", { class: "instant", cx: a, cy: y + 7, r: 4 }));
    } else {
      const bar = el("rect", { class: `bar${e.te === null ? " open" : ""}`, x: a, y, width: Math.max(2, b - a), height: 14, rx: 2 });
      bar.append(el("title", {}, `${e.values.join(", ")}  [${instant(e.ts, kind)}, ${e.te === null ? "open" : instant(e.te, kind)})`));
      svg.append(bar);
    }
  });
  if (frontier !== null) {
    svg.append(el("line", { class: "frontier", x1: x(frontier), x2: x(frontier), y1: TOP - 6, y2: TOP + lanes.length * LANE }));
    svg.append(el("text", { x: x(frontier) + 3, y: TOP + lanes.length * LANE + 16, class: "muted" }, "final through here"));
  }
  const rows = r.elements.slice(-100).reverse().map((e) => `<tr>${e.values.map((v) => `<td>${esc(v)}</td>`).join("")}
    <td>${esc(instant(e.ts, kind))}</td><td>${e.te === null ? "open" : esc(instant(e.te, kind))}</td></tr>`);
  $("results-table").innerHTML = table([...r.columns.map((c) => ({ label: c })), { label: "_ts" }, { label: "_te" }],
    rows, "No results yet.");
}

// -- health -------------------------------------------------------------------------------
function chart(title, figure, series, fmt = (v) => num(v, 2)) {
  const W = 400, H = 110, L = 46;
  const points = series.flatMap((s) => s.points);
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("width", W + L); svg.setAttribute("height", H + 18);
  if (points.length) {
    const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
    const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1);
    const y0 = Math.min(0, ...ys), y1 = Math.max(...ys, y0 + 1e-9);
    const px = (v) => L + (v - x0) / (x1 - x0) * W, py = (v) => 4 + (1 - (v - y0) / (y1 - y0)) * (H - 8);
    svg.append(el("line", { class: "axis", x1: L, x2: L + W, y1: H - 4, y2: H - 4 }));
    svg.append(el("text", { x: 0, y: 12, class: "muted" }, fmt(y1)));
    svg.append(el("text", { x: 0, y: H - 4, class: "muted" }, fmt(y0)));
    svg.append(el("text", { x: L, y: H + 14, class: "muted" }, `cycle ${num(x0)}`));
    svg.append(el("text", { x: L + W - 70, y: H + 14, class: "muted" }, `cycle ${num(x1)}`));
    series.forEach((s, i) => {
      if (!s.points.length) return;
      svg.append(el("path", { class: `series c${i % 6}`, d: s.points.map((p, k) => `${k ? "L" : "M"}${px(p[0]).toFixed(1)},${py(p[1]).toFixed(1)}`).join("") }));
    });
  }
  const legend = series.length > 1 ? series.map((s, i) => `<span class="legend-item c${i % 6}">${esc(s.name)}</span>`).join("") : "";
  const box = document.createElement("div");
  box.className = "chart";
  box.innerHTML = `<h3>${esc(title)}</h3><div class="figure">${figure}</div><div>${legend}</div>`;
  box.append(svg);
  return box;
}

// What each cycle cost: the driver's phases as the cycle timed them, and the Spark work its
// jobs ran (read a cycle later from Spark's status store, so the newest cycle has none yet).
// The text is the last cycle that ran Spark work (an idle cycle runs none).
function costChart(samples) {
  const timed = samples.filter((s) => s.phases);
  const last = timed.filter((s) => s.spark && s.spark.jobs > 0).pop();
  let text = "<small>no cycle with Spark work recorded yet</small>";
  if (last) {
    const p = last.phases, w = last.spark;
    const many = (n, word) => `${num(n)} ${word}${n === 1 ? "" : "s"}`;
    text = `cycle ${num(last.cycle)}: ${seconds(last.seconds)} <small>in ${many(last.partitions, "partition")}; ` +
      `operators ${seconds(p.operators || 0)} · commit ${seconds(p.commit || 0)} (planning ${seconds(p["commit planning"] || 0)}) · ` +
      `deliver ${seconds(p.deliver || 0)} · no job running ${seconds(Math.max(0, last.seconds - w.running_seconds))}<br>` +
      `Spark: ${many(w.jobs, "job")}, ${many(w.stages, "stage")}, ${many(w.tasks, "task")}, ` +
      `${seconds(w.task_seconds)} of tasks, ${seconds(w.running_seconds)} running, ${many(w.shuffled, "record")} shuffled</small>`;
  }
  const series = ["operators", "commit", "deliver"].map((phase) => ({
    name: phase, points: timed.map((s) => [s.cycle, s.phases[phase] || 0]) }));
  series.push({ name: "Spark jobs running", points: timed.filter((s) => s.spark).map((s) => [s.cycle, s.spark.running_seconds]) });
  const box = chart("Cycle cost", text, series, (v) => seconds(v));
  box.classList.add("cost");
  return box;
}

function renderHealth() {
  const { snap } = state;
  const samples = [...state.health.values()].sort((a, b) => a.cycle - b.cycle);
  const sm = snap.summary || {};
  const gaps = samples.slice(1).map((s, i) => [s.cycle, s.at - samples[i].at]);
  const streams = snap.streams.filter((s) => s.source !== "derived");
  const box = $("health");
  box.replaceChildren();
  const grid = document.createElement("div");
  grid.className = "charts";
  grid.append(chart("Cycle latency", `p50 ${seconds(sm.latency_p50)} · p99 ${seconds(sm.latency_p99)} <small>last ${num(sm.cycles)} cycles</small>`,
    [{ name: "seconds", points: samples.map((s) => [s.cycle, s.seconds]) }], (v) => seconds(v)));
  grid.append(costChart(samples));
  grid.append(chart("Cycles per second", `${num(sm.cycles_per_second, 2)}`,
    [{ name: "cycles/s", points: gaps.filter((g) => g[1] > 0).map((g) => [g[0], 1 / g[1]]) }]));
  grid.append(chart("Input rate", `${num(sm.rows_in_per_second)} <small>rows/s</small>`,
    [{ name: "rows/s", points: samples.slice(1).map((s, i) => [s.cycle, s.rows_in / Math.max(1e-3, s.at - samples[i].at)]) }], (v) => num(v)));
  grid.append(chart("Watermark per stream (event time advanced since the first sample)", streams.map((s) =>
    `<small>${esc(s.name)}: ${esc(watermark(s))}</small>`).join("<br>"),
    streams.map((s) => {
      const pts = samples.filter((x) => x.watermarks[s.name.toLowerCase()] !== null && x.watermarks[s.name.toLowerCase()] !== undefined)
        .map((x) => [x.cycle, x.watermarks[s.name.toLowerCase()]]);
      const base = pts.length ? pts[0][1] : 0;
      return { name: s.name, points: pts.map((p) => [p[0], s.time_kind === "timestamp" ? (p[1] - base) / 1e6 : p[1] - base]) };
    })));
  grid.append(chart("Dead letters per stream", streams.map((s) => `<small>${esc(s.name)}: ${num(s.dead_letters)}</small>`).join(" · "),
    streams.map((s) => ({ name: s.name, points: samples.map((x) => [x.cycle, x.dead_letters[s.name.toLowerCase()] || 0]) })), (v) => num(v)));
  const instances = samples.length ? samples[samples.length - 1].instances : 0;
  grid.append(chart("Live user-aggregate instances", num(instances),
    [{ name: "instances", points: samples.map((s) => [s.cycle, s.instances]) }], (v) => num(v)));
  const cp = snap.last_checkpoint;
  grid.append(chart("Checkpoints", cp ? `${seconds(cp.seconds)} <small>written ${seconds(snap.taken_at - cp.at)} ago</small>` : "<small>none written (no --checkpoint, or no input yet)</small>",
    [{ name: "seconds", points: samples.filter((s) => s.checkpoint_seconds).map((s) => [s.cycle, s.checkpoint_seconds]) }], (v) => seconds(v)));
  const joins = new Set(samples.flatMap((s) => Object.keys(s.shedding || {})));
  for (const join of joins) {
    const last = samples.filter((s) => s.shedding[join]).pop().shedding[join];
    grid.append(chart(`Shedding: ${join}`, `z ${num(last.z, 3)} <small>${last.inputs.map((x, i) => `${i ? "right" : "left"} processed ${num(x.processed)} shed ${num(x.shed)}`).join("; ")}</small>`,
      [{ name: "z", points: samples.filter((s) => s.shedding[join]).map((s) => [s.cycle, s.shedding[join].z]) }], (v) => num(v, 2)));
  }
  box.append(grid);
  const rows = streams.map((s) => {
    const behind = s.accepted_watermark !== null && s.watermark !== null ? s.accepted_watermark - s.watermark : null;
    const wall = s.time_kind === "timestamp" && s.watermark !== null ? snap.taken_at * 1e6 - s.watermark : null;
    return `<tr data-stream="${esc(s.name)}"><td>${esc(s.name)}</td><td>${esc(watermark(s))}</td>
      <td class="num">${esc(duration(behind, s.time_kind))}</td><td class="num">${esc(duration(wall, "timestamp"))}</td>
      <td class="num">${num(s.rows_in)}</td><td class="num">${num(s.queued_rows)}</td><td class="num">${num(s.dead_letters)}</td>
      <td>${s.dead_letters ? `<button class="small" data-action="dead-letters">latest dead letters</button>` : ""}</td></tr>`;
  });
  const list = document.createElement("div");
  list.innerHTML = `<h2>Streams</h2>${table([{ label: "stream" }, { label: "watermark" },
    { label: "lag behind accepted input", num: true }, { label: "lag behind the wall clock", num: true },
    { label: "rows in", num: true }, { label: "queued rows", num: true }, { label: "dead letters", num: true }, { label: "" }],
  rows, "No streams.")}<div id="dead-letters"></div>`;
  box.append(list);
  if (state.deadLetters) $("dead-letters").innerHTML = state.deadLetters;
}

async function showDeadLetters(stream) {
  const s = state.snap.streams.find((x) => x.name === stream);
  const offset = Math.max(0, (s ? s.dead_letters : 0) - 20);
  try {
    const data = await api("GET", `/streams/${encodeURIComponent(stream)}/dead-letters?offset=${offset}`);
    const cols = data.rows.length ? Object.keys(data.rows[0]) : [];
    state.deadLetters = `<h2>Latest dead letters of ${esc(stream)} (${num(data.total)} in all)</h2>` +
      table(cols.map((c) => ({ label: c })), data.rows.slice().reverse().map((row) =>
        `<tr>${cols.map((c) => `<td>${esc(row[c])}</td>`).join("")}</tr>`), "None.");
  } catch (e) {
    state.deadLetters = `<div class="error"><div class="message">${esc(e.message)}</div></div>`;
  }
  $("dead-letters").innerHTML = state.deadLetters;
}

// -- streams and tables -------------------------------------------------------------------
function tree(fields, root = true) {
  if (!fields.length) return root ? `<span class="hint">no schema yet</span>` : "";
  return `<ul class="tree${root ? " root" : ""}">${fields.map((f) =>
    `<li>${esc(f.name)} <span class="type">${esc(f.type)}</span>${tree(f.children, false)}</li>`).join("")}</ul>`;
}

function renderCatalog() {
  const { snap } = state;
  const streams = snap.streams.map((s) => `<tr><td><b>${esc(s.name)}</b></td><td>${tree(s.schema)}</td>
    <td>${esc(s.source)}</td><td><span class="badge ${esc(s.state).replace(/ /g, "-")}">${esc(s.state)}</span>
    ${s.connections !== null ? `<div class="hint">${num(s.connections)} connections</div>` : ""}</td>
    <td>${esc(s.event_time)}${s.end_time ? ` to ${esc(s.end_time)}` : ""}${s.key.length ? `<div class="hint">key ${esc(s.key.join(", "))}</div>` : ""}</td>
    <td>${esc(s.lateness ?? "0")}</td><td>${esc(watermark(s))}</td>
    <td class="num">${num(s.rows_in)}</td><td class="num">${num(s.dead_letters)}</td></tr>`);
  const tables = snap.tables.map((t) => `<tr><td><b>${esc(t.name)}</b></td><td>${tree(t.schema)}</td>
    <td>${esc(t.source)}</td><td class="num">${num(t.version)}</td><td>${esc(t.read_at ?? "–")}</td>
    <td>${esc(t.refresh ?? "–")}</td><td>${esc(t.note ?? "")}</td></tr>`);
  const aggregates = snap.aggregates.map((a) => `<tr><td><b>${esc(a.name)}</b></td><td>${esc(a.signature)}</td><td>${esc(a.code)}</td></tr>`);
  $("catalog").innerHTML = `<h2>Streams</h2>${table([{ label: "stream" }, { label: "schema" }, { label: "source" },
    { label: "state" }, { label: "event time" }, { label: "lateness" }, { label: "watermark" },
    { label: "rows in", num: true }, { label: "dead letters", num: true }], streams, "No streams.")}
    <h2>Tables</h2>${table([{ label: "table" }, { label: "schema" }, { label: "source" }, { label: "version", num: true },
    { label: "read at" }, { label: "refresh" }, { label: "note" }], tables, "No tables.")}
    <h2>User aggregates</h2>${table([{ label: "aggregate" }, { label: "signature" }, { label: "code" }], aggregates, "None.")}`;
}

// -- wiring -------------------------------------------------------------------------------
function showView(view) {
  state.view = view;
  for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("active", b.dataset.view === view);
  for (const s of document.querySelectorAll(".view")) s.hidden = s.id !== `view-${view}`;
  render();
}

document.addEventListener("DOMContentLoaded", () => {
  $("tabs").addEventListener("click", (e) => { if (e.target.dataset.view) showView(e.target.dataset.view); });
  $("queries").addEventListener("click", onQueryAction);
  $("run").addEventListener("click", runStatement);
  $("editor").addEventListener("keydown", (e) => { if (e.key === "Enter" && e.ctrlKey) runStatement(); });
  $("plan").addEventListener("click", (e) => {
    const g = e.target.closest("[data-node]");
    if (g) { state.selectedNode = Number(g.dataset.node); renderPlan(); }
  });
  $("result-query").addEventListener("change", (e) => openResults(e.target.value, false));
  $("health").addEventListener("click", (e) => {
    const button = e.target.closest("button[data-action='dead-letters']");
    if (button) showDeadLetters(button.closest("tr").dataset.stream);
  });
  document.addEventListener("visibilitychange", render);
  connect();
});
