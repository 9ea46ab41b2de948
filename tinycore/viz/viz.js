// viz.js: the page: the sidebar (search, schedules with all their kernels), the views (timeline, schedule, kernel with every
// rewrite step on its whole graph), the URL (#timeline, #g=GROUP&c=CALL&s=STEP) and the keys; nothing but its own server.
"use strict";
const viz = {};   // the page's state, which the tests read too
const $ = (id) => document.getElementById(id);
const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) if (k === "text") e.textContent = v; else if (k.startsWith("on")) e[k] = v; else e.setAttribute(k, v);
  e.append(...kids);
  return e;
};
const plural = (n, what) => `${n} ${what}${n === 1 ? "" : "s"}`;

// ***** nodes: the capture's numbered nodes, made canonical (equal fields and sources: one number), so that a rewrite
// replayed here meets the very numbers the capture gave the nodes the rules fired on *****

class Nodes {
  constructor(raw) {
    this.raw = raw; this.op = []; this.dtype = []; this.arg = []; this.src = []; this.key = new Map();
    this.canon = new Int32Array(raw.length);
    raw.forEach(([op, dtype, arg, src], i) => { this.canon[i] = this.make(op, dtype, arg, src.map((s) => this.canon[s]), i); });
  }
  make(op, dtype, arg, src, want = this.op.length) {   // the number of a node with these fields, a new one if there is none
    const k = `${op}\u0000${dtype}\u0000${arg}\u0000${src.join(",")}`, got = this.key.get(k);
    if (got !== undefined) return got;
    const i = Math.max(want, this.op.length);
    this.op[i] = op; this.dtype[i] = dtype; this.arg[i] = arg; this.src[i] = src;
    this.key.set(k, i);
    return i;
  }
  label(i) {
    const arg = this.arg[i] === "None" ? "" : this.arg[i];
    return [this.op[i], this.dtype[i].replace(/^dtypes\./, ""), arg.length > 42 ? arg.slice(0, 41) + "…" : arg];
  }
  describe(i) { return `${this.op[i]} ${this.dtype[i]} ${this.arg[i]}`; }
  reach(root) {
    const seen = new Set([root]), stack = [root];
    while (stack.length) for (const s of this.src[stack.pop()]) if (!seen.has(s)) { seen.add(s); stack.push(s); }
    return seen;
  }
}

// The sink after each step of a graph_rewrite: every replacement so far applied to the graph, and again to what a
// replacement built, as the rewriter's memo of old node -> new node does (a node rebuilt equal to one already rewritten
// gets that rewrite without a rule firing again).
function substitute(N, root, R) {
  const memo = new Map(), rebuilt = new Map(), active = new Set(), stack = [root];
  while (stack.length) {
    const n = stack[stack.length - 1];
    if (memo.has(n)) { stack.pop(); active.delete(n); continue; }
    active.add(n);
    let m = R.has(n) ? R.get(n) : rebuilt.get(n);
    if (m === undefined) {
      const pending = N.src[n].filter((s) => !memo.has(s));
      if (pending.length) { for (const s of pending) if (!active.has(s)) stack.push(s); continue; }
      const ns = N.src[n].map((s) => memo.get(s));
      m = ns.every((s, k) => s === N.src[n][k]) ? n : N.make(N.op[n], N.dtype[n], N.arg[n], ns);
      if (m === n || !R.has(m)) { memo.set(n, m); memo.set(m, m); continue; }
      rebuilt.set(n, m);
    }
    if (memo.has(m)) memo.set(n, memo.get(m));
    else if (active.has(m)) memo.set(n, m);   // a cycle of replacements: stop at it
    else stack.push(m);
  }
  return memo;
}

function callSinks(call) {   // call._sinks[k]: the sink after k steps, each made when first asked for
  const N = viz.nodes;
  if (!call._sinks) { call._sinks = [N.canon[call.input]]; call._R = new Map(); call._found = [true]; call._result = [null]; }
  return (k) => {
    while (call._sinks.length <= k) {   // _found: the rule's node was in the graph; _result: what it became there
      const st = call.steps[call._sinks.length - 1], before = N.canon[st.before];
      call._R.set(before, N.canon[st.after]);
      const memo = substitute(N, call._sinks[call._sinks.length - 1], call._R);
      call._found.push(memo.has(before));
      call._result.push(memo.get(before) ?? null);
      call._sinks.push(memo.get(call._sinks[call._sinks.length - 1]));
    }
    return call._sinks[k];
  };
}

// what step s of call c shows: the whole graph after it, with the nodes new in it marked and the rule's result
// outlined; `before`: the whole graph before it, with the node the rule matched outlined
function stepGraph(g, c, s, before = false) {
  const N = viz.nodes, call = g.rewrites[c], sink = callSinks(call);
  if (s === 0 || before) {
    const k = s === 0 ? 0 : s - 1, root = sink(k), ids = [...N.reach(root)].sort((a, b) => a - b), marks = new Map();
    if (s > 0) marks.set(N.canon[call.steps[s - 1].before], "matched");
    return {root, ids, marks, title: s === 0 ? "the graph this rewrite starts from" : `before step ${s}`};
  }
  const root = sink(s), now = N.reach(root), was = N.reach(sink(s - 1)), marks = new Map();
  for (const id of now) if (!was.has(id)) marks.set(id, "new");
  if (now.has(call._result[s])) marks.set(call._result[s], "hl");
  return {root, ids: [...now].sort((a, b) => a - b), marks, found: call._found[s], title: `after step ${s}`};
}

// ***** the data: groups, the schedules' kernels, the timeline's links to kernels *****

function index() {
  viz.kernelByAst = new Map(); viz.kernelByName = new Map(); viz.links = [];
  data.groups.forEach((g, i) => {
    if (g.kind !== "kernel") return;
    if (g.ast) viz.kernelByAst.set(viz.nodes.canon[g.ast[0]], i);
    viz.kernelByName.set(`${g.backend}\u0000${g.name}`, i);
  });
  viz.schedules = [];
  const listed = new Set();
  data.groups.forEach((g, i) => {
    if (g.kind !== "schedule") return;
    const items = (g.items || []).map((ast) => viz.kernelByAst.get(viz.nodes.canon[ast]) ?? null);
    items.forEach((k) => listed.add(k));
    viz.schedules.push({g: i, items});
  });
  viz.orphans = data.groups.map((g, i) => i).filter((i) => data.groups[i].kind === "kernel" && !listed.has(i));
  viz.scheduleOf = new Map();
  for (const s of viz.schedules) for (const k of s.items) if (k !== null && !viz.scheduleOf.has(k)) viz.scheduleOf.set(k, s.g);
  // launches per kernel name on each device's kernels queue
  const tl = data.timeline;
  viz.launches = new Map();
  if (viz.timeline) tl.tracks.forEach((tr) => {
    if (tr.queue !== "kernels") return;
    for (let i = tr.start; i < tr.end; i++) {
      const k = viz.kernelOfSpan(i);
      if (k === null) continue;
      const got = viz.launches.get(k) || {n: 0, us: 0, first: i};
      got.n++; got.us += viz.timeline.dur[i];
      viz.launches.set(k, got);
    }
  });
}

// the kernel a span belongs to: a launch named after it, or its codegen, assemble and load on the compile queue (looked
// up once per track and name: a million spans have few names)
viz.kernelOfSpan = (i) => {
  const t = viz.timeline, k = t.trackOf[i], n = t.name[i], memo = viz.links[k] ??= new Int32Array(data.timeline.names.length).fill(-2);
  if (memo[n] === -2) {
    const name = data.timeline.names[n].replace(/^(codegen|assemble|load) /, "");
    memo[n] = viz.kernelByName.get(`${data.timeline.tracks[k].device.split(":")[0]}\u0000${name}`) ?? -1;
  }
  return memo[n] < 0 ? null : memo[n];
};

// ***** the sidebar *****

function sidebar() {
  const list = $("list");
  list.replaceChildren();
  const item = (cls, text, hash, kind) => {
    const e = el("div", {class: `item ${cls}`, title: text, "data-hash": hash}, el("span", {class: "kind", text: kind}), text);
    e.onclick = () => go(hash);
    return e;
  };
  if (data.timeline.spans || data.timeline.counter_points) list.append(item("timeline", "timeline", "timeline", "profile"));
  viz.schedules.forEach((s, n) => {
    const g = data.groups[s.g], kids = el("div", {class: "children"});
    s.items.forEach((k, i) => kids.append(k === null ? el("div", {class: "item none", text: `${i}: ${viz.nodes.op[viz.nodes.canon[g.items[i]]] ?? "?"} (no codegen recorded)`})
                                                    : item("kernel", data.groups[k].name, `g=${k}`, `${i}`)));
    const head = item("schedule", `schedule ${n + 1}: ${plural(s.items.length, "kernel")}`, `g=${s.g}`, "▾");
    head.querySelector(".kind").onclick = (e) => { e.stopPropagation(); toggle(head, kids); };
    list.append(head, kids);
    if (viz.schedules.length > 40) toggle(head, kids);
  });
  if (viz.orphans.length) {
    list.append(el("div", {class: "group-label", text: "kernels outside any schedule"}));
    for (const k of viz.orphans) list.append(item("kernel", data.groups[k].name, `g=${k}`, "kernel"));
  }
  if (!list.children.length) list.append(el("div", {class: "note", text: "nothing was recorded"}));
}
function toggle(head, kids) {
  kids.classList.toggle("closed");
  head.querySelector(".kind").textContent = kids.classList.contains("closed") ? "▸" : "▾";
}
function search(q) {
  q = q.trim().toLowerCase();
  let shown = 0;
  for (const e of $("list").querySelectorAll(".item.kernel, .item.none")) {
    const hit = !q || e.textContent.toLowerCase().includes(q);
    e.classList.toggle("hidden", !hit);
    shown += hit;
  }
  for (const kids of $("list").querySelectorAll(".children")) {
    const head = kids.previousElementSibling, any = kids.querySelector(".item:not(.hidden)") !== null;
    head.classList.toggle("hidden", !!q && !any);
    if (q && any) kids.classList.remove("closed");
  }
  $("found").textContent = q ? `${plural(shown, "kernel")} match` : "";
}

// ***** routing: the hash names the view, so a reload or a link comes back to it *****

const parseHash = (hash = location.hash) => Object.fromEntries(hash.slice(1).split("&").filter(Boolean).map((kv) => { const [k, v] = kv.split("="); return [k, v === undefined ? true : decodeURIComponent(v)]; }));
function go(hash) { if (location.hash.slice(1) === hash) route(); else location.hash = hash; }
// the URL follows the view at most every 200 ms: a held key steps ~30 times a second, and Chromium stops a page that
// changes its URL 200 times in 10 s from changing it at all for a while
let hashTimer = null, hashWanted = null;
function setHash(hash) {
  hashWanted = hash;
  hashTimer ??= setTimeout(() => { hashTimer = null; history.replaceState(null, "", `#${hashWanted}`); }, 200);
}
function route(e) {   // e: the hashchange that brought the page here, whose URL a view's pending update may have replaced
  clearTimeout(hashTimer); hashTimer = null;
  const hash = e ? new URL(e.newURL).hash : location.hash;
  if (hash !== location.hash) history.replaceState(null, "", hash || "#");
  const h = parseHash(hash), main = $("main");
  viz.keys = null;
  if (h.timeline && viz.timeline) showTimeline(h);
  else if (h.g !== undefined && data.groups[+h.g]) (data.groups[+h.g].kind === "schedule" ? showSchedule : showKernel)(+h.g, h);
  else if (viz.timeline) showTimeline({});
  else if (data.groups.length) showKernel(data.groups.findIndex((g) => g.kind === "kernel"), {});
  else main.replaceChildren(el("h2", {id: "title", text: "nothing was recorded"}), el("p", {class: "note", text: "run with VIZ=1 or PROFILE=1"}));
  const sel = [...document.querySelectorAll("#list .item")].filter((e) => e.classList.toggle("sel", e.dataset.hash === (h.timeline ? "timeline" : `g=${h.g}`)));
  if (sel.length && !sel.some((e) => e.offsetParent)) {   // in folded schedules only: unfold the first, so that it shows
    const kids = sel[0].parentElement;
    if (kids.classList.contains("closed")) toggle(kids.previousElementSibling, kids);
  }
  if (sel.length) sel.find((e) => e.offsetParent)?.scrollIntoView({block: "nearest"});
}
function fresh(...kids) { const main = $("main"); main.replaceChildren(...kids); main.scrollTop = 0; }

// ***** the timeline *****

function showTimeline(h) {
  const t = viz.timeline;
  fresh();
  if (!data.timeline.spans && !data.timeline.counter_points) { $("main").append(el("h2", {id: "title", text: "timeline: nothing was recorded"})); return; }
  t.attach($("main"));
  if (h.span !== undefined) t.show(+h.span);
  else if (h.from !== undefined) t.setView(+h.from, +h.to);
  viz.keys = (e) => t.key(e);
}
function timelineOpts() {
  return {
    linked: (i) => viz.kernelOfSpan(i) !== null,
    onSpan: async (i) => {
      const k = viz.kernelOfSpan(i);
      if (k !== null) { go(`g=${k}`); return; }
      const t = viz.timeline;
      t.detail.textContent = t.spanText(i);
      const ev = await (await fetch(`event/${i}`)).json();
      t.detail.textContent = `${t.spanText(i)}\n${JSON.stringify(ev.args || {})}`;
    },
    onView: ([a, b]) => setHash(`timeline&from=${a.toFixed(3)}&to=${b.toFixed(3)}`),
  };
}

// ***** a schedule: every kernel it made, and the graph of the one picked *****

function showSchedule(gi, h) {
  const g = data.groups[gi], s = viz.schedules.find((x) => x.g === gi), n = viz.schedules.indexOf(s) + 1;
  const rows = el("div", {class: "calls", id: "items"}), view = el("div", {id: "step-view"});
  fresh(el("h2", {id: "title", text: `schedule ${n}: ${plural(s.items.length, "kernel")}`}),
        el("div", {class: "meta", text: "↑/↓ or j/k: the kernel before/after · click a name to open its rewrites"}),
        el("div", {class: "kview"}, rows, view));
  const graph = new GraphView(view);
  viz.shown = {g: gi, item: 0};
  const pick = (i) => {
    for (const r of rows.children) r.classList.toggle("sel", +r.dataset.item === i);
    const N = viz.nodes, root = N.canon[g.items[i]];
    graph.show({ids: [...N.reach(root)].sort((a, b) => a - b), root, srcsOf: (id) => N.src[id], label: (id) => N.label(id), describe: (id) => N.describe(id),
                marks: new Map([[root, "hl"]]), title: `item ${i}: the kernel's AST`});
    setHash(`g=${gi}&i=${i}`);
    viz.shown = {g: gi, item: i};
  };
  s.items.forEach((k, i) => {
    const r = el("div", {class: "step", "data-item": i, text: `${i}: `});
    if (k === null) r.append(`${viz.nodes.op[viz.nodes.canon[g.items[i]]]} (no codegen recorded)`);
    else r.append(el("a", {href: `#g=${k}`, text: data.groups[k].name}));
    r.onclick = (e) => { if (e.target.tagName !== "A") pick(i); };
    rows.append(r);
  });
  if (s.items.length) pick(Math.min(+(h.i ?? 0), s.items.length - 1));
  viz.keys = (e) => {
    const i = viz.shown.item + ({arrowdown: 1, j: 1, arrowup: -1, k: -1}[e.key.toLowerCase()] ?? 0);
    if (i === viz.shown.item) return e.key === "f" ? (graph.fit(), true) : false;
    if (i >= 0 && i < s.items.length) { pick(i); rows.children[i].scrollIntoView({block: "nearest"}); }
    return true;
  };
}

// ***** a kernel: its rewrites (the codegen passes, the rewrites inside each), every step on the whole graph; its code *****

function showKernel(gi, h) {
  const g = data.groups[gi], calls = g.rewrites, list = el("div", {class: "calls", id: "rewrites"}), view = el("div", {id: "step-view"});
  const launched = viz.launches.get(gi), sched = viz.scheduleOf.get(gi);
  viz.shown = {g: gi};
  const meta = el("div", {class: "meta"}, `${g.backend === g.device ? "" : `backend ${g.backend} · `}${plural(calls.length, "graph rewrite")}, ${plural(calls.reduce((n, c) => n + c.steps.length, 0), "step")}`);
  if (launched) meta.append(" · ", el("a", {href: `#timeline&span=${launched.first}`, text: `launched ${plural(launched.n, "time")}, ${fmtTime(launched.us)} in all`}));
  if (sched !== undefined) meta.append(" · ", el("a", {href: `#g=${sched}`, text: "its schedule"}));
  meta.append(el("div", {class: "note", text: "↓/↑ or j/k: next/previous step · →/← or n/p: next/previous rewrite · b: the graph before this step · f: fit"}));
  fresh(el("h2", {id: "title", text: `kernel ${g.name} on ${g.device}`}), meta, el("div", {class: "kview"}, list, view));
  // the order keys step through: every step of each rewrite that changed the graph, and each pass
  const order = [];
  calls.forEach((c, ci) => { if (c.steps.length || c.where.startsWith("pass ")) for (let s = 0; s <= c.steps.length; s++) order.push([ci, s]); });
  const rows = new Map();   // "c/s" -> its row, once its rewrite was opened
  const open = (ci, det) => {
    if (det.dataset.filled) return;
    det.dataset.filled = "1";
    const call = calls[ci], add = (s, text) => {
      const r = el("div", {class: "step", "data-call": ci, "data-step": s, text});
      r.onclick = () => pick(ci, s);
      rows.set(`${ci}/${s}`, r);
      det.append(r);
    };
    add(0, call.steps.length ? "0. the graph it starts from" : "0. the graph (this pass changed nothing)");
    call.steps.forEach((st, k) => add(k + 1, `${k + 1}. ${viz.nodes.op[viz.nodes.canon[st.before]]} → ${viz.nodes.op[viz.nodes.canon[st.after]]}  ${st.rule}`));
  };
  // the list: each pass heads the rewrites run inside it; a run of rewrites called from one place (simplify, once per
  // node) folds into one entry, whose rewrites are listed when it is opened
  const details = new Map(), foldOf = new Map(), isPass = (c) => c.where.startsWith("pass ");
  const callEntry = (ci) => {
    const call = calls[ci], det = el("details", {class: "call", "data-call": ci}, el("summary", {text: `${call.where}: ${plural(call.steps.length, "step")}`}));
    det.addEventListener("toggle", () => { if (det.open) open(ci, det); });
    details.set(ci, det);
    return det;
  };
  const fold = (parent, run) => {
    if (run.length < 3) { for (const ci of run) parent.append(callEntry(ci)); return; }
    const steps = run.reduce((n, ci) => n + calls[ci].steps.length, 0);
    const det = el("details", {class: "fold"}, el("summary", {text: `${calls[run[0]].where}: ${plural(run.length, "rewrite")}, ${plural(steps, "step")}`}));
    const fill = () => { if (!det.dataset.filled) { det.dataset.filled = "1"; for (const ci of run) det.append(callEntry(ci)); } };
    det.addEventListener("toggle", () => { if (det.open) fill(); });
    for (const ci of run) foldOf.set(ci, {det, fill});
    parent.append(det);
  };
  const place = (parent, cis) => {   // cis: the changing rewrites listed in parent, in order
    for (let k = 0; k < cis.length;) {
      let e = k + 1;
      while (e < cis.length && calls[cis[e]].where === calls[cis[k]].where) e++;
      fold(parent, cis.slice(k, e));
      k = e;
    }
  };
  let unchanged = 0, top = [];
  for (let ci = 0; ci < calls.length; ci++) {
    if (!isPass(calls[ci])) { if (calls[ci].steps.length) top.push(ci); else unchanged++; continue; }
    place(list, top); top = [];
    const inner = el("div", {class: "inner"}), end = Math.min(calls.length - 1, ci + (calls[ci].inner || 0)), mine = [];
    list.append(callEntry(ci), inner);
    details.get(ci).classList.add("pass");
    for (let k = ci + 1; k <= end; k++) if (calls[k].steps.length) mine.push(k); else unchanged++;
    place(inner, mine);
    ci = end;
  }
  place(list, top);
  if (unchanged) list.append(el("div", {class: "note", text: `and ${plural(unchanged, "graph rewrite")} that changed nothing`}));
  const graph = new GraphView(view), head = el("h3"), rule = el("pre", {class: "pattern"});
  view.prepend(head, rule);
  let before = false;
  const pick = (ci, s, keepView = false) => {
    if (foldOf.has(ci)) { foldOf.get(ci).fill(); foldOf.get(ci).det.open = true; }
    const det = details.get(ci);
    if (!det) return;
    if (!det.open) det.open = true;
    open(ci, det);
    for (const x of list.querySelectorAll(".step.sel")) x.classList.remove("sel");
    const row = rows.get(`${ci}/${s}`);
    row.classList.add("sel");
    const box = list.getBoundingClientRect(), rb = row.getBoundingClientRect();
    if (rb.top < box.top || rb.bottom > box.bottom) list.scrollTop += rb.top - box.top - box.height / 3;
    const call = calls[ci], st = call.steps[s - 1], shown = stepGraph(g, ci, s, before && s > 0), N = viz.nodes;
    head.textContent = s === 0 ? `${call.where}: the graph it starts from` : `${call.where}, step ${s} of ${call.steps.length}: ${st.rule}`;
    rule.textContent = s === 0 ? "" : st.pattern || `${N.op[N.canon[st.before]]} → ${N.op[N.canon[st.after]]}`;
    rule.hidden = !rule.textContent;
    graph.show({...shown, srcsOf: (id) => N.src[id], label: (id) => N.label(id), describe: (id) => N.describe(id),
                title: `${shown.title}${shown.found === false ? " (its node is not in the replayed graph)" : ""}`}, keepView);
    viz.shown = {g: gi, c: ci, s, before, root: shown.root, ids: shown.ids, marks: Object.fromEntries(shown.marks), layoutMs: graph.layoutMs};
    setHash(`g=${gi}&c=${ci}&s=${s}`);
  };
  viz.graph = graph;
  const at = () => order.findIndex(([c, s]) => c === viz.shown.c && s === viz.shown.s);
  viz.keys = (e) => {
    const k = e.key.toLowerCase(), i = at();
    let to = null;
    if (k === "arrowdown" || k === "j") to = order[Math.min(order.length - 1, i + 1)];
    else if (k === "arrowup" || k === "k") to = order[Math.max(0, i - 1)];
    else if (k === "arrowright" || k === "n") to = order.find(([c]) => c > viz.shown.c);
    else if (k === "arrowleft" || k === "p") { const prev = order.filter(([c]) => c < viz.shown.c); to = prev.length ? prev.find(([c]) => c === prev[prev.length - 1][0]) : null; }
    else if (k === "b") { before = !before; pick(viz.shown.c, viz.shown.s, true); return true; }
    else if (k === "f") { graph.fit(); return true; }
    else return false;
    if (to) pick(to[0], to[1]);
    return true;
  };
  const listed = (c) => c >= 0 && c < calls.length && (calls[c].steps.length > 0 || isPass(calls[c]));
  const want = h.c !== undefined && listed(+h.c) ? [+h.c, Math.min(+(h.s ?? 0), calls[+h.c].steps.length)] : order[0];
  if (want) pick(want[0], want[1]);
  else view.replaceChildren(el("div", {class: "note", text: "no graph_rewrite changed this kernel's graph"}));
  // its code; the machine code is disassembled by the server when first asked for
  const code = (title, id, text) => $("main").append(el("h3", {text: title}), el("pre", {id, text}));
  if (g.uops) code("linear UOps", "uops", g.uops);
  if (g.src) code("rendered source", "src", g.src);
  code("machine code", "binary", "disassembling ...");
  fetch(`binary/${gi}`).then((r) => r.text()).then((t) => { if ($("binary") && viz.shown.g === gi) { $("binary").textContent = t; $("binary").dataset.ready = "1"; } });
}

// ***** start *****

let data = null;
async function start() {
  const [d, buf] = await Promise.all([fetch("data.json").then((r) => r.json()), fetch("timeline.bin").then((r) => r.arrayBuffer())]);
  data = d;
  viz.data = data;
  viz.nodes = new Nodes(data.nodes);
  const tl = data.timeline;
  viz.timeline = tl.spans || tl.counter_points ? new Timeline(tl, buf, timelineOpts()) : null;
  index();
  sidebar();
  $("search").oninput = (e) => search(e.target.value);
  $("search").onkeydown = (e) => {
    if (e.key === "Enter") { const hit = $("list").querySelector(".item.kernel:not(.hidden)"); if (hit) hit.click(); }
    if (e.key === "Escape") { e.target.value = ""; search(""); e.target.blur(); }
  };
  window.addEventListener("hashchange", route);
  document.addEventListener("keydown", (e) => {
    if (e.target.tagName === "INPUT" || e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.key === "/") { e.preventDefault(); $("search").focus(); return; }
    if (viz.keys && viz.keys(e)) e.preventDefault();
  });
  route();
  document.body.dataset.ready = "1";
}
start().catch((e) => { $("list").textContent = `failed: ${e}`; document.body.dataset.ready = "error"; throw e; });
