// graph.js (el() is viz.js's): a DAG laid out in rows (sources above their users, the root at the bottom) and drawn on a canvas: wheel zooms, drag pans, a click names a node.
"use strict";

const GRAPH = {H: 42, GAPX: 16, GAPY: 38, CHAR: 6.6, PAD: 10, MAXW: 300};

// Rows by longest path from the root (a source sits just above its lowest user); order in a row by a depth-first walk from
// the root, then barycentre sweeps; x by the mean of each node's neighbours, overlaps pushed apart in order. Every pass is
// linear in the edges (sorting a row aside), so thousands of nodes lay out in milliseconds.
function layoutGraph(ids, srcsOf, widthOf) {
  const n = ids.length, at = new Map(ids.map((id, i) => [id, i]));   // ids ascending: sources before their users
  const srcs = ids.map((id) => [...new Set(srcsOf(id))].map((s) => at.get(s)).filter((s) => s !== undefined));
  const users = Array.from({length: n}, () => []);
  srcs.forEach((ss, i) => { for (const s of ss) users[s].push(i); });
  const depth = new Int32Array(n);
  for (let i = n - 1; i >= 0; i--) for (const s of srcs[i]) depth[s] = Math.max(depth[s], depth[i] + 1);
  let maxDepth = 0;
  for (let i = 0; i < n; i++) maxDepth = Math.max(maxDepth, depth[i]);
  const rows = Array.from({length: maxDepth + 1}, () => []), row = new Int32Array(n);
  // depth-first from the roots (nodes without users), sources left to right: a tree reads in its natural order
  const seen = new Uint8Array(n), order = new Float64Array(n);
  let next = 0;
  for (let r = n - 1; r >= 0; r--) if (!users[r].length && !seen[r]) {
    const stack = [r];
    seen[r] = 1;
    while (stack.length) {
      const i = stack.pop();
      order[i] = next++;
      for (let k = srcs[i].length - 1; k >= 0; k--) if (!seen[srcs[i][k]]) { seen[srcs[i][k]] = 1; stack.push(srcs[i][k]); }
    }
  }
  for (let i = 0; i < n; i++) { row[i] = maxDepth - depth[i]; rows[row[i]].push(i); }
  const w = Float64Array.from(ids, (id) => widthOf(id)), x = new Float64Array(n);   // x: a node's centre
  const pack = (r) => {   // lay row r out in its order, centred on 0
    let total = 0;
    for (const i of rows[r]) total += w[i] + GRAPH.GAPX;
    let left = -total / 2;
    for (const i of rows[r]) { x[i] = left + w[i] / 2; left += w[i] + GRAPH.GAPX; }
  };
  for (const r of rows) r.sort((a, b) => order[a] - order[b]);
  rows.forEach((_, r) => pack(r));
  const mean = (list, fallback) => { if (!list.length) return fallback; let s = 0; for (const j of list) s += x[j]; return s / list.length; };
  const key = new Float64Array(n);
  const sweep = (down) => {
    for (let k = 1; k <= maxDepth; k++) {
      const r = down ? k : maxDepth - k;
      for (const i of rows[r]) key[i] = mean(down ? srcs[i] : users[i], x[i]);
      rows[r].sort((a, b) => key[a] - key[b]);
      pack(r);
    }
  };
  for (let it = 0; it < 2; it++) { sweep(true); sweep(false); }
  // place each row at its nodes' wanted centres in order: the mean of a left-pushed and a right-pushed placement
  // keeps every gap, as both do
  const place = (r, want) => {
    const list = rows[r], m = list.length, lo = new Float64Array(m), hi = new Float64Array(m);
    for (let k = 0; k < m; k++) lo[k] = k ? Math.max(want[k], lo[k - 1] + (w[list[k - 1]] + w[list[k]]) / 2 + GRAPH.GAPX) : want[k];
    for (let k = m - 1; k >= 0; k--) hi[k] = k < m - 1 ? Math.min(want[k], hi[k + 1] - (w[list[k + 1]] + w[list[k]]) / 2 - GRAPH.GAPX) : want[k];
    for (let k = 0; k < m; k++) x[list[k]] = (lo[k] + hi[k]) / 2;
  };
  for (let it = 0; it < 3; it++) {
    for (let r = maxDepth - 1; r >= 0; r--) place(r, rows[r].map((i) => (mean(users[i], x[i]) + x[i]) / 2));
    for (let r = 1; r <= maxDepth; r++) place(r, rows[r].map((i) => (mean(srcs[i], x[i]) + x[i]) / 2));
  }
  let minX = Infinity, maxX = -Infinity;
  for (let i = 0; i < n; i++) { minX = Math.min(minX, x[i] - w[i] / 2); maxX = Math.max(maxX, x[i] + w[i] / 2); }
  for (let i = 0; i < n; i++) x[i] -= minX - GRAPH.PAD;
  const y = Float64Array.from(row, (r) => GRAPH.PAD + r * (GRAPH.H + GRAPH.GAPY));
  return {ids, at, srcs, users, x, y, w, width: maxX - minX + 2 * GRAPH.PAD, height: 2 * GRAPH.PAD + (maxDepth + 1) * (GRAPH.H + GRAPH.GAPY) - GRAPH.GAPY};
}

const hue = (s) => { let h = 0; for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) >>> 0; return h % 360; };
const MARKS = {hl: ["#ffc65c", "#a35a00"], new: ["#b9ecb9", "#2e8b2e"], matched: ["#ffc65c", "#a35a00"]};

// A graph on a canvas. show() takes {ids, root, srcsOf, label: id -> lines, describe: id -> text, marks: Map id -> "hl" |
// "new" | "matched", title}.
class GraphView {
  constructor(parent) {
    this.head = el("div", {class: "title"});
    this.canvas = el("canvas");
    this.info = el("div", {class: "graph-info", text: "wheel: zoom · drag: pan · f: fit · click a node for its fields"});
    this.box = el("div", {class: "graphbox"}, this.head, this.canvas, this.info);
    parent.append(this.box);
    this.scale = 1; this.tx = 0; this.ty = 0; this.lay = null; this.picked = null;
    this.canvas.addEventListener("wheel", (e) => {
      e.preventDefault();
      const r = this.canvas.getBoundingClientRect();
      this.zoomAt(e.clientX - r.left, e.clientY - r.top, Math.exp(-e.deltaY * (e.deltaMode ? 0.05 : 0.002)));
    }, {passive: false});
    let drag = null;
    this.canvas.addEventListener("mousedown", (e) => { drag = {x: e.clientX, y: e.clientY, tx: this.tx, ty: this.ty, moved: false}; });
    window.addEventListener("mousemove", (e) => {
      if (!drag) return;
      if (Math.abs(e.clientX - drag.x) + Math.abs(e.clientY - drag.y) > 3) drag.moved = true;
      this.tx = drag.tx + e.clientX - drag.x; this.ty = drag.ty + e.clientY - drag.y;
      this.draw();
    });
    window.addEventListener("mouseup", (e) => {
      if (drag && !drag.moved && e.target === this.canvas) this.pick(this.nodeAt(e.clientX, e.clientY));
      drag = null;
    });
    new ResizeObserver(() => this.resize()).observe(this.box);
  }
  show(g, keepView = false) {
    const t = performance.now();
    this.g = g;
    this.labels = new Map(g.ids.map((id) => [id, g.label(id)]));
    this.lay = layoutGraph(g.ids, g.srcsOf, (id) => Math.min(GRAPH.MAXW, 12 + GRAPH.CHAR * Math.max(...this.labels.get(id).map((s) => s.length))));
    this.layoutMs = performance.now() - t;
    this.picked = null;
    this.head.textContent = `${g.title} · ${g.ids.length} nodes`;
    this.box.dataset.nodes = g.ids.length;
    this.resize();
    if (keepView) this.draw();
    else this.focus([...g.marks].find(([, m]) => m !== "new")?.[0] ?? g.root);
  }
  focus(id) {   // the whole graph where its labels are legible at that size, else node `id` at a legible size (f fits)
    this.fit();
    if (id === undefined || this.scale * 11 >= 5) return;
    const i = this.lay.at.get(id);
    this.scale = 0.9;
    this.tx = this.canvas.clientWidth / 2 - this.lay.x[i] * this.scale; this.ty = this.canvas.clientHeight / 2 - (this.lay.y[i] + GRAPH.H / 2) * this.scale;
    this.draw();
  }
  resize() {
    const dpr = window.devicePixelRatio || 1, wpx = Math.max(200, this.box.clientWidth - 2), hpx = Math.max(240, Math.round(window.innerHeight * 0.62));
    if (this.canvas.width !== Math.round(wpx * dpr) || this.canvas.height !== Math.round(hpx * dpr)) {
      this.canvas.width = Math.round(wpx * dpr); this.canvas.height = Math.round(hpx * dpr);
      this.canvas.style.width = `${wpx}px`; this.canvas.style.height = `${hpx}px`;
    }
    this.draw();
  }
  fit() {
    if (!this.lay) return;
    const W = this.canvas.clientWidth, H = this.canvas.clientHeight;
    this.scale = Math.min(1.2, W / this.lay.width, H / this.lay.height);
    this.tx = (W - this.lay.width * this.scale) / 2; this.ty = Math.max(0, (H - this.lay.height * this.scale) / 2);
    this.draw();
  }
  zoomAt(px, py, f) {
    const s = Math.min(4, Math.max(0.005, this.scale * f));
    this.tx = px - (px - this.tx) * s / this.scale; this.ty = py - (py - this.ty) * s / this.scale; this.scale = s;
    this.draw();
  }
  nodeAt(clientX, clientY) {
    if (!this.lay) return null;
    const r = this.canvas.getBoundingClientRect(), wx = (clientX - r.left - this.tx) / this.scale, wy = (clientY - r.top - this.ty) / this.scale;
    const {x, y, w, ids} = this.lay;
    for (let i = 0; i < ids.length; i++) if (Math.abs(wx - x[i]) <= w[i] / 2 && wy >= y[i] && wy <= y[i] + GRAPH.H) return ids[i];
    return null;
  }
  clientCenter(id) {   // where node `id` is on the screen (the tests click there)
    const i = this.lay.at.get(id), r = this.canvas.getBoundingClientRect();
    return [r.left + this.tx + this.lay.x[i] * this.scale, r.top + this.ty + (this.lay.y[i] + GRAPH.H / 2) * this.scale];
  }
  pick(id) {
    this.picked = id;
    if (id !== null) {
      const i = this.lay.at.get(id), name = (j) => `%${this.lay.ids[j]}`;
      this.info.textContent = `%${id} ${this.g.describe(id)} · sources: ${this.lay.srcs[i].map(name).join(" ") || "none"} · users: ${this.lay.users[i].map(name).join(" ") || "none"}`;
    }
    this.draw();
  }
  draw() {
    if (!this.lay || !this.canvas.width) return;
    const ctx = this.canvas.getContext("2d"), dpr = window.devicePixelRatio || 1, {ids, x, y, w, srcs} = this.lay, H = GRAPH.H;
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, this.canvas.width, this.canvas.height);
    ctx.setTransform(dpr * this.scale, 0, 0, dpr * this.scale, dpr * this.tx, dpr * this.ty);
    const x0 = -this.tx / this.scale, y0 = -this.ty / this.scale, x1 = x0 + this.canvas.clientWidth / this.scale, y1 = y0 + this.canvas.clientHeight / this.scale;
    const seen = (i) => x[i] + w[i] / 2 >= x0 && x[i] - w[i] / 2 <= x1 && y[i] + H >= y0 && y[i] <= y1;
    const pi = this.picked === null ? -1 : this.lay.at.get(this.picked);
    // edges: one path, from a source's bottom to its user's top; those of the picked node again, on top
    const edges = (only) => {
      ctx.beginPath();
      for (let i = 0; i < ids.length; i++) for (const s of srcs[i]) {
        if (only >= 0 && i !== only && s !== only) continue;
        if ((y[s] + H < y0 && y[i] < y0) || (y[s] > y1 && y[i] > y1) || (x[s] < x0 && x[i] < x0) || (x[s] > x1 && x[i] > x1)) continue;
        const mid = (y[s] + H + y[i]) / 2;
        ctx.moveTo(x[s], y[s] + H); ctx.bezierCurveTo(x[s], mid, x[i], mid, x[i], y[i]);
      }
      ctx.stroke();
    };
    ctx.lineWidth = 1 / Math.max(this.scale, 0.25); ctx.strokeStyle = "#9aa";
    edges(-1);
    if (pi >= 0) { ctx.lineWidth = 2.5 / Math.max(this.scale, 0.25); ctx.strokeStyle = "#1565c0"; edges(pi); }
    const text = this.scale * 11 >= 5;   // 5 px letters: the smallest worth drawing
    ctx.font = "11px monospace"; ctx.textBaseline = "top";
    for (let i = 0; i < ids.length; i++) {
      if (!seen(i)) continue;
      const id = ids[i], mark = this.g.marks.get(id), lines = this.labels.get(id);
      const [fill, stroke] = mark ? MARKS[mark] : [`hsl(${hue(lines[0])},45%,90%)`, `hsl(${hue(lines[0])},30%,45%)`];
      ctx.fillStyle = fill; ctx.strokeStyle = i === pi ? "#1565c0" : stroke;
      ctx.lineWidth = (mark === "hl" || mark === "matched" || i === pi ? 3 : 1) / Math.max(this.scale, 0.3);
      ctx.beginPath(); ctx.rect(x[i] - w[i] / 2, y[i], w[i], H); ctx.fill(); ctx.stroke();
      if (text) {
        ctx.fillStyle = "#222";
        const room = Math.floor((w[i] - 10) / GRAPH.CHAR);
        lines.forEach((s, k) => ctx.fillText(s.length > room ? s.slice(0, room - 1) + "…" : s, x[i] - w[i] / 2 + 5, y[i] + 3 + 12.5 * k));
      }
    }
  }
}
