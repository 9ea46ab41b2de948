// tinycore VIZ: draws data.json (the compiler's recorded groups and rewrite steps, and the profiler's timeline); no network but its own server.
"use strict";
const SVGNS = "http://www.w3.org/2000/svg";
const GRAPH_MAX = 300;   // nodes drawn per graph: the ones nearest the root
let data = null;

const el = (tag, attrs = {}, ...kids) => {
  const e = tag.startsWith("svg:") ? document.createElementNS(SVGNS, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) (k === "text") ? (e.textContent = v) : e.setAttribute(k, v);
  for (const k of kids) e.append(k);
  return e;
};
const main = () => document.getElementById("main");
const select = (item) => { for (const x of document.querySelectorAll(".item.sel")) x.classList.remove("sel"); item.classList.add("sel"); };

// ***** graphs: sources on top, the root at the bottom, one row per longest path from a leaf *****

function subgraph(root) {
  const seen = new Set([root]), queue = [root];
  for (let i = 0; i < queue.length && seen.size < GRAPH_MAX; i++)
    for (const s of data.nodes[queue[i]][3]) if (!seen.has(s) && seen.size < GRAPH_MAX) { seen.add(s); queue.push(s); }
  return [...seen].sort((a, b) => a - b);   // numbers are given sources first
}

function drawGraph(title, root, opts = {}) {
  const ids = subgraph(root), inGraph = new Set(ids), row = new Map(), rows = [];
  for (const id of ids) {
    const srcs = data.nodes[id][3].filter((s) => inGraph.has(s));
    const r = srcs.length ? 1 + Math.max(...srcs.map((s) => row.get(s))) : 0;
    row.set(id, r);
    (rows[r] = rows[r] || []).push(id);
  }
  const label = (id) => { const [op, dt, arg] = data.nodes[id]; return [op, dt, arg === "None" ? "" : arg.slice(0, 28)]; };
  const W = (id) => 14 + 7 * Math.max(...label(id).map((s) => s.length)), H = 44, GAPX = 14, GAPY = 34;
  const pos = new Map();
  let width = 0;
  rows.forEach((ids, r) => {
    let x = 10;
    for (const id of ids) { pos.set(id, {x, y: 10 + r * (H + GAPY), w: W(id)}); x += W(id) + GAPX; }
    width = Math.max(width, x);
  });
  const svg = el("svg:svg", {width, height: 20 + rows.length * (H + GAPY), "data-nodes": ids.length});
  for (const id of ids) for (const s of data.nodes[id][3]) if (inGraph.has(s)) {
    const a = pos.get(s), b = pos.get(id);
    svg.append(el("svg:path", {class: "edge", d: `M${a.x + a.w / 2},${a.y + H} C${a.x + a.w / 2},${a.y + H + GAPY / 2} ${b.x + b.w / 2},${b.y - GAPY / 2} ${b.x + b.w / 2},${b.y}`}));
  }
  for (const id of ids) {
    const p = pos.get(id), cls = opts.highlight === id ? "node hl" : (opts.isNew && opts.isNew(id) ? "node new" : "node");
    const g = el("svg:g", {class: cls, "data-id": id, "data-op": data.nodes[id][0]}, el("svg:title", {text: `%${id} ${data.nodes[id].slice(0, 3).join(" ")}`}),
                 el("svg:rect", {x: p.x, y: p.y, width: p.w, height: H, rx: 4}));
    label(id).forEach((s, i) => g.append(el("svg:text", {x: p.x + 6, y: p.y + 13 + 13 * i, text: s})));
    svg.append(g);
  }
  const box = el("div", {class: "graphbox"}, el("div", {class: "title", text: title + (ids.length >= GRAPH_MAX ? ` (the ${GRAPH_MAX} nodes nearest the root)` : "")}), svg);
  return box;
}

function reachable(root) {
  const seen = new Set([root]), stack = [root];
  while (stack.length) for (const s of data.nodes[stack.pop()][3]) if (!seen.has(s)) { seen.add(s); stack.push(s); }
  return seen;
}

// ***** a group: a schedule or a kernel's codegen *****

function showStep(view, call, k) {
  const st = call.steps[k], before = reachable(st.before);
  view.replaceChildren(
    el("h3", {text: `step ${k + 1} of ${call.steps.length}: ${st.rule}`}),
    el("pre", {class: "pattern", text: st.pattern}),
    el("div", {class: "graphs"}, drawGraph("before", st.before, {highlight: st.before}),
       drawGraph("after", st.after, {highlight: st.after, isNew: (id) => !before.has(id)})));
}

function rewritesSection(g) {
  const calls = el("div", {class: "calls"});
  const sec = el("div", {id: "rewrites"}, el("h3", {text: `graph rewrites (${g.rewrites.length})`}), calls);
  const view = el("div", {id: "step-view"});
  g.rewrites.forEach((call, c) => {
    const det = el("details", {class: "call", "data-call": c}, el("summary", {text: `${call.where}: ${call.steps.length} step${call.steps.length === 1 ? "" : "s"}`}));
    const io = el("div", {class: "step", "data-io": "1", text: "input and output graphs"});
    io.onclick = () => view.replaceChildren(el("div", {class: "graphs"}, drawGraph("input", call.input), drawGraph("output", call.output)));
    det.append(io);
    call.steps.forEach((st, k) => {
      const row = el("div", {class: "step", "data-step": k, text: `${k + 1}. ${data.nodes[st.before][0]} -> ${data.nodes[st.after][0]}   ${st.rule}`});
      row.onclick = () => { for (const x of sec.querySelectorAll(".step.sel")) x.classList.remove("sel"); row.classList.add("sel"); showStep(view, call, k); };
      det.append(row);
    });
    calls.append(det);
  });
  if (!g.rewrites.length) calls.append(el("div", {class: "note", text: "no graph_rewrite ran"}));
  sec.append(view);
  return sec;
}

function showGroup(g) {
  const m = main();
  m.replaceChildren(el("h2", {id: "title", text: `${g.kind} ${g.name} on ${g.device}`}));
  if (g.ast) m.append(el("h3", {text: "scheduled kernel graph"}), drawGraph("kernel AST", g.ast[0]));
  if (g.items) {
    const items = el("div", {class: "graphs"});
    m.append(el("h3", {text: `scheduled kernels (${g.items.length})`}), items);
    g.items.slice(0, 8).forEach((id, i) => items.append(drawGraph(`item ${i}: ${data.nodes[id][0]}`, id)));
    if (g.items.length > 8) m.append(el("div", {class: "note", text: `... and ${g.items.length - 8} more`}));
  }
  m.append(rewritesSection(g));
  if (g.uops) m.append(el("h3", {text: "linear UOps"}), el("pre", {id: "uops", text: g.uops}));
  if (g.src) m.append(el("h3", {text: "rendered source"}), el("pre", {id: "src", text: g.src}));
  if (g.binary) m.append(el("h3", {text: "assembler output"}), el("pre", {id: "binary", text: g.binary}));
}

// ***** the profiler's timeline: one row per device queue, nested spans stacked, flow arrows between launches *****

function showTimeline(trace) {
  const names = {}, threads = {}, rows = new Map(), counters = new Map(), flows = {};
  for (const e of trace.traceEvents) {
    if (e.ph === "M" && e.name === "process_name") names[e.pid] = e.args.name;
    if (e.ph === "M" && e.name === "thread_name") threads[`${e.pid}/${e.tid}`] = e.args.name;
  }
  const spans = trace.traceEvents.filter((e) => e.ph === "X");
  const t0 = Math.min(...trace.traceEvents.filter((e) => e.ts !== undefined).map((e) => e.ts));
  const t1 = Math.max(...spans.map((e) => e.ts + e.dur), t0 + 1);
  for (const e of spans) { const k = `${e.pid}/${e.tid}`; if (!rows.has(k)) rows.set(k, []); rows.get(k).push(e); }
  for (const e of trace.traceEvents.filter((e) => e.ph === "C")) { if (!counters.has(e.pid)) counters.set(e.pid, []); counters.get(e.pid).push(e); }
  const m = main();
  const WIDTH = Math.max(900, m.clientWidth - 200), LABEL = 170, LANE = 18;
  const x = (ts) => LABEL + (ts - t0) / (t1 - t0) * WIDTH;
  const svg = el("svg:svg", {id: "timeline", width: LABEL + WIDTH + 10});
  const detail = el("div", {id: "tl-detail", text: "click a span for its details"});
  let y = 10;
  const at = new Map();   // span -> its rectangle's centre line, for the arrows
  const keys = [...rows.keys()].sort((a, b) => { const [p, t] = a.split("/").map(Number), [q, u] = b.split("/").map(Number); return p - q || t - u; });
  for (const k of keys) {
    const evs = rows.get(k).sort((a, b) => a.ts - b.ts || b.dur - a.dur), open = [];
    let depth = 0;
    for (const e of evs) {   // a span's lane is how many spans around it are still open
      while (open.length && open[open.length - 1] <= e.ts) open.pop();
      e._lane = open.length; depth = Math.max(depth, open.length + 1); open.push(e.ts + e.dur);
    }
    const pid = k.split("/")[0];
    svg.append(el("svg:text", {x: 4, y: y + 13, class: "row-label", text: `${names[pid]} ${threads[k]}`}));
    for (const e of evs) {
      const ry = y + e._lane * LANE, w = Math.max(1, x(e.ts + e.dur) - x(e.ts));
      const hue = threads[k] === "kernels" ? 210 : threads[k] === "copies" ? 30 : threads[k] === "compile" ? 280 : 120;
      const r = el("svg:rect", {class: "ev", x: x(e.ts), y: ry, width: w, height: LANE - 3, fill: `hsl(${hue},55%,${62 - 8 * e._lane}%)`, "data-name": e.name},
                   el("svg:title", {text: `${e.name} ${e.dur.toFixed(1)} us`}));
      r.onclick = () => { detail.textContent = `${names[pid]} ${threads[k]}: ${e.name}\nstart ${(e.ts - t0).toFixed(1)} us, ${e.dur.toFixed(1)} us\n${JSON.stringify(e.args)}`; };
      svg.append(r);
      at.set(e, [x(e.ts), ry + (LANE - 3) / 2]);
    }
    y += depth * LANE + 8;
  }
  for (const [pid, evs] of counters) {   // the memory graph of each device
    const H = 40, top = Math.max(...evs.map((e) => e.args.bytes), 1);
    svg.append(el("svg:text", {x: 4, y: y + 13, text: `${names[pid]} memory (max ${top} bytes)`}));
    let d = `M${x(t0)},${y + H}`;
    for (const e of evs.sort((a, b) => a.ts - b.ts)) d += ` H${x(e.ts)} V${y + H - e.args.bytes / top * H}`;
    svg.append(el("svg:path", {d: d + ` H${x(t1)}`, class: "memory", stroke: "#a33", fill: "none"}));
    y += H + 10;
  }
  const find = (e) => (rows.get(`${e.pid}/${e.tid}`) || []).find((s) => s.ts <= e.ts && e.ts <= s.ts + s.dur);
  for (const e of trace.traceEvents) if (e.ph === "s" || e.ph === "f") (flows[e.id] = flows[e.id] || {})[e.ph] = e;
  for (const f of Object.values(flows)) {
    const a = f.s && at.get(find(f.s)), b = f.f && at.get(find(f.f));
    if (a && b) svg.append(el("svg:path", {class: "flow", d: `M${a[0]},${a[1]} L${b[0]},${b[1]}`, stroke: "#333", "stroke-dasharray": "3,2", fill: "none"}));
  }
  svg.setAttribute("height", y + 10);
  m.replaceChildren(el("h2", {id: "title", text: `timeline: ${(t1 - t0).toFixed(0)} us, ${spans.length} spans`}), svg, detail);
}

// ***** the sidebar *****

async function start() {
  data = await (await fetch("data.json")).json();
  const list = document.getElementById("list");
  list.replaceChildren();
  const add = (kind, text, show) => {
    const item = el("div", {class: "item", title: text}, el("span", {class: "kind", text: kind}), text);
    item.onclick = () => { select(item); show(); };
    list.append(item);
    return item;
  };
  if (data.trace) add("profile", "timeline", () => showTimeline(data.trace));
  data.groups.forEach((g) => add(g.kind, `${g.name} ${g.device}${g.rewrites.length ? "" : " (no rewrites)"}`, () => showGroup(g)));
  if (!data.groups.length && !data.trace) list.textContent = "nothing was recorded";
  const first = list.querySelector(".item");
  if (first) first.click();
  document.body.dataset.ready = "1";
}
start().catch((e) => { document.getElementById("list").textContent = `failed: ${e}`; document.body.dataset.ready = "error"; });
