// timeline.js (after graph.js; el() is viz.js's): the profiler's timeline on a canvas: a track per device queue, spans drawn by level of detail, flow arrows, memory graphs; wheel, drag and keys zoom and pan.
"use strict";

const TL = {LABEL: 190, LANE: 18, AXIS: 26, DEVICE: 20, COUNTER: 38, GAP: 6, ARROWS: 600};

const fmtTime = (us) => {
  const a = Math.abs(us);
  return a >= 1e6 ? `${(us / 1e6).toPrecision(4)} s` : a >= 1e3 ? `${(us / 1e3).toPrecision(4)} ms` : a >= 1 ? `${us.toPrecision(4)} us` : `${(us * 1e3).toPrecision(3)} ns`;
};
// a time to the precision `step` needs, in the unit of step: 6,112,050 us where ticks are 50 us apart
const fmtAt = (us, step) => {
  const [unit, name] = step >= 1e5 ? [1e6, "s"] : step >= 100 ? [1e3, "ms"] : step >= 0.1 ? [1, "us"] : [1e-3, "ns"];
  const digits = Math.max(0, Math.min(6, Math.ceil(-Math.log10(step / unit) - 1e-9)));
  return `${(us / unit + 0).toLocaleString("en-US", {minimumFractionDigits: digits, maximumFractionDigits: digits})} ${name}`;
};
const fmtBytes = (b) => b >= 2 ** 30 ? `${(b / 2 ** 30).toFixed(2)} GiB` : b >= 2 ** 20 ? `${(b / 2 ** 20).toFixed(2)} MiB` : b >= 1024 ? `${(b / 1024).toFixed(1)} KiB` : `${b} B`;
// the first k in [lo, hi) with key(k) >= t (keys ascending)
const lowerBound = (lo, hi, key, t) => { while (lo < hi) { const m = (lo + hi) >> 1; if (key(m) < t) lo = m + 1; else hi = m; } return lo; };

// meta and buf as the server's timeline() makes them; opts.onSpan(i) is called for a click on span i
class Timeline {
  constructor(meta, buf, opts) {
    this.meta = meta; this.opts = opts;
    const S = meta.spans, F = meta.flows, C = meta.counter_points;
    let off = 0;
    const take = (Type, n) => { const a = new Type(buf, off, n); off += a.byteLength; return a; };
    this.ts = take(Float64Array, S); this.dur = take(Float64Array, S); this.cts = take(Float64Array, C); this.cval = take(Float64Array, C);
    this.name = take(Uint32Array, S); this.fsrc = take(Uint32Array, F); this.fdst = take(Uint32Array, F);
    this.end = Math.max(meta.end, 1e-3);
    // lanes: a span goes to the first lane of its track free at its start, so a span nested in another sits below it
    this.lane = new Uint16Array(S);
    this.lanes = meta.tracks.map((tr) => {
      const free = [], count = [];
      for (let i = tr.start; i < tr.end; i++) {
        let l = 0;
        while (l < free.length && free[l] > this.ts[i]) l++;
        free[l] = this.ts[i] + this.dur[i]; count[l] = (count[l] || 0) + 1; this.lane[i] = l;
      }
      const idx = count.map((c) => new Uint32Array(c)), fill = count.map(() => 0);
      for (let i = tr.start; i < tr.end; i++) idx[this.lane[i]][fill[this.lane[i]]++] = i;
      return idx;
    });
    // arrows also by their last span's start, to find those ending in view
    this.fbyDst = Uint32Array.from({length: F}, (_, k) => k).sort((a, b) => this.ts[this.fdst[a]] - this.ts[this.fdst[b]]);
    this.trackOf = new Uint32Array(S);
    meta.tracks.forEach((tr, k) => this.trackOf.fill(k, tr.start, tr.end));
    // rows: a device's header, its queues, then its counters
    this.rows = [];
    let y = 0, device = null;
    const counters = (dev) => meta.counters.forEach((c, k) => { if (c.device === dev) { this.rows.push({kind: "counter", k, y, h: TL.COUNTER}); y += TL.COUNTER + TL.GAP; } });
    meta.tracks.forEach((tr, k) => {
      if (tr.device !== device) {
        if (device !== null) counters(device);
        device = tr.device; this.rows.push({kind: "device", label: device, y, h: TL.DEVICE}); y += TL.DEVICE;
      }
      const h = Math.max(1, this.lanes[k].length) * TL.LANE;
      this.rows.push({kind: "track", k, y, h, label: tr.queue}); y += h + TL.GAP;
    });
    if (device !== null) counters(device);
    for (const dev of new Set(meta.counters.map((c) => c.device))) if (!meta.tracks.some((t) => t.device === dev)) {
      this.rows.push({kind: "device", label: dev, y, h: TL.DEVICE}); y += TL.DEVICE; counters(dev);
    }
    this.height = y + 8;
    this.trackY = new Float64Array(meta.tracks.length);
    for (const r of this.rows) if (r.kind === "track") this.trackY[r.k] = r.y;
    this.color = meta.tracks.map((tr) => ({kernels: null, copies: 30, compile: 275, realize: 130})[tr.queue] ?? 200);
    this.nameHue = meta.names.map((s) => 180 + hue(s) % 120);
    this.build();
    this.view = this.clamp(-0.01 * this.end, 1.01 * this.end);
    this.W = 1000;
    this.selected = -1;
  }
  build() {
    this.status = el("div", {id: "tl-status"});
    this.axis = el("canvas", {id: "tl-axis"});
    this.canvas = el("canvas", {id: "tl-canvas"});
    this.tip = el("div", {id: "tl-tip"});
    this.detail = el("div", {id: "tl-detail", text: "click a kernel's span to open it; click any other span for its details, a dense stretch to zoom into it"});
    this.el = el("div", {id: "timeline"});
    this.el.append(this.status, el("div", {class: "note", text: "wheel or W/S: zoom · drag, shift+wheel or A/D: pan · 0: the whole run"}), this.axis, this.canvas, this.tip, this.detail);
    this.canvas.addEventListener("wheel", (e) => {
      e.preventDefault();
      const px = e.clientX - this.canvas.getBoundingClientRect().left, d = e.deltaMode ? 40 : 1;
      if (e.shiftKey || Math.abs(e.deltaX) > Math.abs(e.deltaY)) this.pan((e.shiftKey ? e.deltaY : e.deltaX) * d / this.width());
      else this.zoom(Math.exp(e.deltaY * d * 0.002), px);
    }, {passive: false});
    let drag = null;
    this.canvas.addEventListener("mousedown", (e) => { drag = {x: e.clientX, view: [...this.view], moved: false}; this.tip.style.display = "none"; });
    window.addEventListener("mousemove", (e) => {
      if (drag) {
        if (Math.abs(e.clientX - drag.x) > 3) drag.moved = true;
        const dt = (e.clientX - drag.x) / this.width() * (drag.view[1] - drag.view[0]);
        this.setView(drag.view[0] - dt, drag.view[1] - dt);
      } else if (e.target === this.canvas) this.hover(e);
      else this.tip.style.display = "none";
    });
    window.addEventListener("mouseup", (e) => {
      if (drag && !drag.moved && e.target === this.canvas) this.click(e);
      drag = null;
    });
    new ResizeObserver(() => this.resize()).observe(this.el);
  }
  width() { return this.W; }   // of the time area, in CSS pixels: read once per resize (reading the layout is slow)
  x(t) { return TL.LABEL + (t - this.view[0]) / (this.view[1] - this.view[0]) * this.width(); }
  t(px) { return this.view[0] + (px - TL.LABEL) / this.width() * (this.view[1] - this.view[0]); }
  clamp(a, b) {   // at least a nanosecond wide, at most a little more than the run, its middle within the run
    const span = Math.min(Math.max(b - a, 1e-3), 1.2 * this.end + 1), mid = Math.min(Math.max((a + b) / 2, -0.1 * this.end), 1.1 * this.end);
    return [mid - span / 2, mid + span / 2];
  }
  setView(a, b) {
    this.view = this.clamp(a, b);
    this.request();
    if (this.opts.onView) this.opts.onView(this.view);
  }
  zoom(f, px) {   // f < 1 zooms in, around the pixel px (default: the middle)
    const at = this.t(px ?? TL.LABEL + this.width() / 2);
    this.setView(at - (at - this.view[0]) * f, at + (this.view[1] - at) * f);
  }
  pan(frac) { const d = frac * (this.view[1] - this.view[0]); this.setView(this.view[0] + d, this.view[1] + d); }
  fit() { this.setView(-0.01 * this.end, 1.01 * this.end); }
  show(i) {   // zoom to span i, a few times its length around it, and select it
    const d = Math.max(this.dur[i], 1e-3) * 20;
    this.selected = i;
    this.setView(this.ts[i] - d, this.ts[i] + this.dur[i] + d);
  }
  key(e) {
    const k = e.key.toLowerCase();
    if (k === "w" || k === "+" || k === "=") this.zoom(0.7);
    else if (k === "s" || k === "-") this.zoom(1 / 0.7);
    else if (k === "a" || k === "arrowleft") this.pan(-0.15);
    else if (k === "d" || k === "arrowright") this.pan(0.15);
    else if (k === "0" || k === "home") this.fit();
    else return false;
    return true;
  }
  attach(parent) { parent.append(this.el); this.resize(); }
  resize() {
    const dpr = window.devicePixelRatio || 1, w = Math.max(300, this.el.clientWidth);
    this.W = Math.max(50, w - TL.LABEL - 10);
    for (const [c, h] of [[this.axis, TL.AXIS], [this.canvas, this.height]]) {
      c.width = Math.round(w * dpr); c.height = Math.round(h * dpr); c.style.width = `${w}px`; c.style.height = `${h}px`;
    }
    this.draw();
  }
  request() { if (!this.pending) { this.pending = true; requestAnimationFrame(() => { this.pending = false; this.draw(); }); } }
  // the row and lane at a point of the canvas; null off every track
  rowAt(y) { return this.rows.find((r) => r.kind === "track" && y >= r.y && y < r.y + r.h) ?? null; }
  // span under the point (px, y), or {block: [t0, t1]} where thin spans were merged into a block
  spanAt(px, y) {
    const r = this.rowAt(y);
    if (!r) return null;
    const idx = this.lanes[r.k][Math.floor((y - r.y) / TL.LANE)];
    if (!idx) return null;
    const t = this.t(px), slack = 2 / this.width() * (this.view[1] - this.view[0]);
    const j = lowerBound(0, idx.length, (m) => this.ts[idx[m]] + this.dur[idx[m]], t - slack);
    if (j >= idx.length || this.ts[idx[j]] > t + slack) return null;
    const i = idx[j];
    return this.x(this.ts[i] + this.dur[i]) - this.x(this.ts[i]) >= 2 ? {span: i} : {block: [t - slack * 3, t + slack * 3]};
  }
  spanClientBox(i) {   // where span i is drawn on the screen, when it is drawn on its own (the tests click there)
    const x0 = Math.max(this.x(this.ts[i]), TL.LABEL), x1 = Math.min(this.x(this.ts[i] + this.dur[i]), TL.LABEL + this.width());
    if (x1 - x0 < 2) return null;
    const r = this.canvas.getBoundingClientRect(), y = this.trackY[this.trackOf[i]] + this.lane[i] * TL.LANE;
    return {x: r.left + x0, y: r.top + y, w: x1 - x0, h: TL.LANE - 3};
  }
  spanText(i) {
    const tr = this.meta.tracks[this.trackOf[i]];
    return `${this.meta.names[this.name[i]]}\n${tr.device} ${tr.queue}: ${fmtTime(this.dur[i])}, from ${fmtAt(this.ts[i], Math.max(this.dur[i] / 10, 1e-3))}`;
  }
  hover(e) {
    const r = this.canvas.getBoundingClientRect(), hit = this.spanAt(e.clientX - r.left, e.clientY - r.top);
    if (!hit) { this.tip.style.display = "none"; return; }
    this.tip.textContent = hit.block ? "many short spans: click to zoom in" : this.spanText(hit.span) + (this.opts.linked(hit.span) ? "\nclick: open this kernel" : "");
    Object.assign(this.tip.style, {display: "block", left: `${e.clientX + 14}px`, top: `${e.clientY + 12}px`});
  }
  click(e) {
    const r = this.canvas.getBoundingClientRect(), hit = this.spanAt(e.clientX - r.left, e.clientY - r.top);
    if (!hit) return;
    if (hit.block) { const m = (hit.block[0] + hit.block[1]) / 2, d = (this.view[1] - this.view[0]) / 40; this.setView(m - d, m + d); return; }
    this.selected = hit.span;
    this.request();
    this.opts.onSpan(hit.span);
  }
  draw() {
    if (!this.canvas.width) return;
    const t0 = performance.now(), dpr = window.devicePixelRatio || 1, W = this.width(), [v0, v1] = this.view;
    const ctx = this.canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, this.canvas.clientWidth, this.height);
    ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "middle";
    ctx.save(); ctx.beginPath(); ctx.rect(TL.LABEL, 0, W + 10, this.height); ctx.clip();
    let drawn = 0;
    const cover = new Uint8Array(Math.ceil(W) + 2);
    for (const row of this.rows) {
      if (row.kind === "device") { ctx.fillStyle = "#e4e6ee"; ctx.fillRect(TL.LABEL, row.y, W + 10, row.h); continue; }
      if (row.kind === "counter") { this.drawCounter(ctx, row); continue; }
      const k = row.k;
      this.lanes[k].forEach((idx, l) => {
        const y = row.y + l * TL.LANE, h = TL.LANE - 3;
        cover.fill(0);
        // spans wider than 2 px are drawn one by one; thinner ones mark the pixel columns they fall in, and every span starting
        // in a marked column but the last is skipped with a binary search: a frame costs O(pixels log n), not O(spans)
        let j = lowerBound(0, idx.length, (m) => this.ts[idx[m]] + this.dur[idx[m]], v0);
        while (j < idx.length) {
          const i = idx[j], s = this.ts[i];
          if (s > v1) break;
          const x0 = this.x(s), x1 = this.x(s + this.dur[i]);
          if (x1 - x0 >= 2) {
            const hueOf = this.color[k] ?? this.nameHue[this.name[i]];
            ctx.fillStyle = `hsl(${hueOf},55%,${68 - 6 * Math.min(l, 4)}%)`;
            ctx.fillRect(x0, y, x1 - x0, h);
            if (i === this.selected) { ctx.strokeStyle = "#000"; ctx.lineWidth = 2; ctx.strokeRect(x0, y, x1 - x0, h); }
            if (x1 - x0 > 30) {
              const name = this.meta.names[this.name[i]], room = Math.floor((Math.min(x1, TL.LABEL + W) - Math.max(x0, TL.LABEL) - 6) / 6);
              ctx.fillStyle = "#111";
              if (room > 2) ctx.fillText(name.length > room ? name.slice(0, room - 1) + "…" : name, Math.max(x0, TL.LABEL) + 3, y + h / 2);
            }
            drawn++; j++;
            continue;
          }
          const c = Math.max(0, Math.floor(x0 - TL.LABEL));
          for (let p = c; p <= Math.min(cover.length - 1, Math.floor(x1 - TL.LABEL)); p++) cover[p] = 1;
          const last = lowerBound(j + 1, idx.length, (m) => this.ts[idx[m]], this.t(TL.LABEL + c + 1)) - 1;
          j = last > j ? last : j + 1;
        }
        ctx.fillStyle = `hsl(${this.color[k] ?? 215},35%,45%)`;
        for (let p = 0; p < cover.length; p++) if (cover[p]) {
          let q = p;
          while (q + 1 < cover.length && cover[q + 1]) q++;
          ctx.fillRect(TL.LABEL + p, y, q - p + 1, h);
          drawn++; p = q;
        }
      });
    }
    const arrows = this.drawFlows(ctx);
    ctx.restore();
    // labels over everything left of the time area
    ctx.fillStyle = "#f4f4f7"; ctx.fillRect(0, 0, TL.LABEL - 4, this.height);
    ctx.fillStyle = "#222";
    for (const row of this.rows) {
      ctx.font = row.kind === "device" ? "bold 12px system-ui, sans-serif" : "12px system-ui, sans-serif";
      const c = row.kind === "counter" ? this.meta.counters[row.k] : null;
      const label = row.kind === "counter" ? `${c.name} (max ${c.bytes ? fmtBytes(c.max) : c.max.toPrecision(4)})` : row.label;
      ctx.fillText(label, row.kind === "device" ? 6 : 16, row.y + Math.min(row.h, TL.LANE) / 2);
    }
    this.drawAxis();
    this.drawMs = performance.now() - t0;
    const m = this.meta;
    this.status.textContent = `timeline: ${fmtTime(this.end)}, ${m.spans} spans, ${m.flows} arrows · showing ${fmtAt(v0, (v1 - v0) / 100)} to ${fmtAt(v1, (v1 - v0) / 100)} ` +
      `(${fmtTime(v1 - v0)} wide)${arrows < 0 ? ` · zoom in for arrows (${-arrows} ends in view)` : ""}`;
    this.canvas.dataset.drawn = drawn;
  }
  drawCounter(ctx, row) {   // a step line; the points falling in one pixel column make one vertical stroke from lowest to highest
    const c = this.meta.counters[row.k], [v0, v1] = this.view, H = row.h - 6, base = row.y + row.h - 3;
    const yOf = (v) => base - (c.max > 0 ? v / c.max : 0) * H;
    let j = lowerBound(c.start, c.end, (m) => this.cts[m], v0), y = j > c.start ? yOf(this.cval[j - 1]) : base;
    ctx.beginPath(); ctx.moveTo(TL.LABEL, y);
    while (j < c.end && this.cts[j] <= v1) {
      const px = Math.floor(this.x(this.cts[j]));
      ctx.lineTo(px, y);
      let lo = y, hi = y;
      for (; j < c.end && this.cts[j] <= v1 && Math.floor(this.x(this.cts[j])) === px; j++) { y = yOf(this.cval[j]); lo = Math.min(lo, y); hi = Math.max(hi, y); }
      ctx.lineTo(px, lo); ctx.lineTo(px, hi); ctx.lineTo(px, y);
    }
    ctx.lineTo(TL.LABEL + this.width() + 10, y);
    ctx.strokeStyle = "#b03030"; ctx.lineWidth = 1.2; ctx.stroke();
  }
  // arrows starting or ending in view, when there are at most TL.ARROWS of them (else minus their count is returned), and
  // always the selected span's, drawn last and dark
  drawFlows(ctx) {
    const [v0, v1] = this.view, F = this.meta.flows, ts = this.ts, sel = this.selected, list = [];
    const srcAt = (m) => ts[this.fsrc[m]], dstAt = (m) => ts[this.fdst[this.fbyDst[m]]];
    const a0 = lowerBound(0, F, srcAt, v0), a1 = lowerBound(0, F, srcAt, v1), b0 = lowerBound(0, F, dstAt, v0), b1 = lowerBound(0, F, dstAt, v1);
    const count = (a1 - a0) + (b1 - b0);
    if (count <= TL.ARROWS) {
      for (let m = a0; m < a1; m++) list.push(m);
      for (let m = b0; m < b1; m++) if (ts[this.fsrc[this.fbyDst[m]]] < v0) list.push(this.fbyDst[m]);
    }
    if (sel >= 0) {
      for (let m = lowerBound(0, F, srcAt, ts[sel]); m < F && srcAt(m) === ts[sel]; m++) if (this.fsrc[m] === sel) list.push(m);
      for (let m = lowerBound(0, F, dstAt, ts[sel]); m < F && dstAt(m) === ts[sel]; m++) if (this.fdst[this.fbyDst[m]] === sel) list.push(this.fbyDst[m]);
    }
    for (const f of list) {
      const a = this.fsrc[f], b = this.fdst[f], mine = a === this.selected || b === this.selected;
      ctx.strokeStyle = mine ? "#111" : "rgba(60,60,60,0.45)"; ctx.fillStyle = mine ? "#111" : "rgba(60,60,60,0.6)"; ctx.lineWidth = mine ? 1.8 : 1;
      const xa = this.x(ts[a] + this.dur[a]), xb = this.x(ts[b]);
      const ya = this.trackY[this.trackOf[a]] + this.lane[a] * TL.LANE + (TL.LANE - 3) / 2, yb = this.trackY[this.trackOf[b]] + this.lane[b] * TL.LANE + (TL.LANE - 3) / 2;
      // a long arrow is drawn flat and bends near its ends, so that its head is seen bending in even when its start is
      // far off screen: on one lane it rises over the spans between, to another lane it bends near the head
      const d = Math.min(Math.max(Math.abs(xb - xa) / 2, 8), 40);
      let cx, cy;
      ctx.beginPath(); ctx.moveTo(xa, ya);
      if (Math.abs(ya - yb) < 1) {
        const lift = Math.min(TL.LANE * 1.2, 5 + Math.abs(xb - xa) / 3);
        ctx.quadraticCurveTo(xa, ya - lift, xa + d, ya - lift); ctx.lineTo(xb - d, yb - lift);
        cx = xb; cy = yb - lift;
        ctx.quadraticCurveTo(cx, cy, xb, yb);
      } else {
        ctx.lineTo(xb - 2 * d, ya);
        cx = xb - d; cy = yb;
        ctx.bezierCurveTo(xb - d, ya, cx, cy, xb, yb);
      }
      ctx.stroke();
      const ang = Math.atan2(yb - cy, xb - cx);   // the head along the curve's last tangent
      ctx.beginPath(); ctx.moveTo(xb, yb);
      ctx.lineTo(xb - 7 * Math.cos(ang - 0.4), yb - 7 * Math.sin(ang - 0.4)); ctx.lineTo(xb - 7 * Math.cos(ang + 0.4), yb - 7 * Math.sin(ang + 0.4));
      ctx.closePath(); ctx.fill();
    }
    return count <= TL.ARROWS ? count : -count;
  }
  drawAxis() {
    const dpr = window.devicePixelRatio || 1, ctx = this.axis.getContext("2d"), W = this.width(), [v0, v1] = this.view;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, this.axis.clientWidth, TL.AXIS);
    ctx.fillStyle = "#f4f4f7"; ctx.fillRect(0, 0, this.axis.clientWidth, TL.AXIS);
    const raw = (v1 - v0) * 90 / W, p = 10 ** Math.floor(Math.log10(raw)), step = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw);
    ctx.strokeStyle = "#888"; ctx.fillStyle = "#333"; ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "top";
    ctx.beginPath();
    for (let t = Math.ceil(v0 / step) * step; t <= v1; t += step) {
      const px = this.x(t);
      ctx.moveTo(px, TL.AXIS - 8); ctx.lineTo(px, TL.AXIS);
      ctx.fillText(fmtAt(t, step), px + 2, 3);
    }
    ctx.stroke();
    ctx.clearRect(0, 0, TL.LABEL - 4, TL.AXIS);
    ctx.fillText("time from the first event", 6, 3);
  }
}
