// A canvas timeline: lanes of rows, zoom and pan with wheel, drag and keys, level of detail from
// the server, click to select, flow arrows op -> launch -> kernel.
import { get, isReport } from "./api.js";

const ROW = 14, LANE_GAP = 6, LABEL_W = 220;
const COLORS = { cpu_op: "#5b8def", annotation: "#9aa5b1", python: "#c9b6e4", runtime: "#f2b05e", sync: "#e07a7a",
  kernel: "#3fb27f", memcpy: "#e3c14f", memset: "#d9a441", gpu_annotation: "#b0c4b1", device_other: "#9ccbb5",
  other: "#bbbbbb" };

export class Timeline {
  constructor(container, run, { onSelect, onView, scaleFrom } = {}) {
    this.run = run; this.onSelect = onSelect; this.onView = onView; this.scaleFrom = scaleFrom;
    this.canvas = document.createElement("canvas");
    this.canvas.tabIndex = 0;
    this.canvas.setAttribute("aria-label", "timeline");
    container.appendChild(this.canvas);
    this.lanes = []; this.data = null; this.view = null; this.highlight = new Set(); this.arrows = [];
    this.selected = null; this.pending = 0;
    this._bind();
  }

  async init(view) {
    this.lanes = (await get(`/api/${this.run}/lanes`)) || [];
    let y = 0;
    for (const l of this.lanes) { l.y = y; y += l.rows * ROW + LANE_GAP; }
    this.height = Math.max(y, 40);
    const full = await get(`/api/${this.run}/timeline?width=${this.width()}`);
    this.span = full ? full.span : [0, 1];
    this.view = view && view[1] > view[0] ? view : [this.span[0], this.span[1]];
    this.data = full;
    this.resize();
    if (view) await this.fetch();
    this.draw();
  }

  width() { return Math.max((this.canvas.parentElement?.clientWidth || 1200) - LABEL_W, 200); }

  resize() {
    const dpr = window.devicePixelRatio || 1;
    const w = this.width() + LABEL_W;
    this.canvas.width = w * dpr; this.canvas.height = this.height * dpr;
    this.canvas.style.width = w + "px"; this.canvas.style.height = this.height + "px";
    this.ctx = this.canvas.getContext("2d"); this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  }

  x(t) { return LABEL_W + (t - this.view[0]) / (this.view[1] - this.view[0]) * this.width(); }
  t(x) { return this.view[0] + (x - LABEL_W) / this.width() * (this.view[1] - this.view[0]); }

  async setView(a, b, { silent = false } = {}) {
    const min = 0.01;
    if (b - a < min) { const m = (a + b) / 2; a = m - min / 2; b = m + min / 2; }
    this.view = [a, b];
    this.draw();
    if (!silent && this.onView) this.onView(this.view);
    clearTimeout(this._timer);
    this._timer = setTimeout(() => this.fetch(), 25);
  }

  async fetch() {
    if (isReport) return this.draw();
    const ticket = ++this.pending;
    const [a, b] = this.view;
    const d = await get(`/api/${this.run}/timeline?t0=${a}&t1=${b}&width=${this.width()}`);
    if (ticket !== this.pending || !d) return;
    this.data = d; this.draw();
  }

  draw() {
    const ctx = this.ctx, d = this.data;
    if (!ctx) return;
    ctx.clearRect(0, 0, this.canvas.width, this.canvas.height);
    ctx.font = "11px system-ui, sans-serif";
    for (const l of this.lanes) {
      ctx.fillStyle = "#f4f4f6"; ctx.fillRect(0, l.y, LABEL_W - 4, l.rows * ROW);
      ctx.fillStyle = "#333"; ctx.fillText(l.label.slice(0, 34), 4, l.y + 11);
    }
    if (!d) return;
    this.boxes = [];
    const byLane = new Map(this.lanes.map(l => [l.lane, l]));
    for (let i = 0; i < d.id.length; i++) {
      const lane = byLane.get(d.lane[i]); if (!lane) continue;
      const x0 = Math.max(this.x(d.ts[i]), LABEL_W), x1 = Math.min(this.x(d.ts[i] + d.dur[i]), LABEL_W + this.width());
      if (x1 < LABEL_W || x0 > LABEL_W + this.width()) continue;
      const y = lane.y + d.row[i] * ROW, w = Math.max(x1 - x0, 1);
      const kind = d.kinds[d.kind[i]], id = d.id[i];
      const hot = id >= 0 && (this.highlight.has(id) || id === this.selected);
      ctx.fillStyle = hot ? "#d6336c" : (COLORS[kind] || "#999");
      ctx.globalAlpha = d.n[i] > 1 ? 0.55 : 1;
      ctx.fillRect(x0, y + 1, w, ROW - 2);
      ctx.globalAlpha = 1;
      if (w > 30) {
        ctx.save(); ctx.beginPath(); ctx.rect(x0, y, w, ROW); ctx.clip();
        ctx.fillStyle = "#fff"; ctx.fillText((d.n[i] > 1 ? `${d.n[i]}× ` : "") + d.names[d.name[i]], x0 + 2, y + 11);
        ctx.restore();
      }
      this.boxes.push([x0, y, w, i]);
    }
    this.positions = new Map();
    for (const [x0, y, w, i] of this.boxes) if (d.id[i] >= 0) this.positions.set(d.id[i], [x0, y, w]);
    ctx.strokeStyle = "#d6336c"; ctx.lineWidth = 1.5;
    for (const [from, to] of this.arrows) {
      const a = this.positions.get(from), b = this.positions.get(to);
      if (!a || !b) continue;
      const ax = a[0] + Math.min(a[2], 4), ay = a[1] + ROW - 2, bx = b[0] + 1, by = b[1] + 2;
      ctx.beginPath(); ctx.moveTo(ax, ay); ctx.lineTo(bx, by); ctx.stroke();
      ctx.beginPath(); ctx.moveTo(bx, by); ctx.lineTo(bx - 4, by - 6); ctx.lineTo(bx + 3, by - 6); ctx.fill();
    }
  }

  hit(x, y) {
    for (let k = (this.boxes || []).length - 1; k >= 0; k--) {
      const [x0, y0, w, i] = this.boxes[k];
      if (x >= x0 - 1 && x <= x0 + w + 1 && y >= y0 && y <= y0 + ROW) return i;
    }
    return null;
  }

  async select(id) {
    this.selected = id; this.highlight = new Set(); this.arrows = [];
    if (id === null) { this.draw(); return null; }
    const ev = await get(`/api/${this.run}/event/${id}`);
    if (ev) {
      for (const l of ev.launches || []) { this.highlight.add(l.id); this.arrows.push([id, l.id]); }
      // a graph replay is one flow, launch -> its first kernel; every kernel of it is highlighted
      const replayed = new Set((ev.replays || []).map(r => r.launch));
      for (const k of ev.kernels || []) {
        this.highlight.add(k.id);
        if (!replayed.has(k.launch)) this.arrows.push([k.launch, k.id]);
      }
      for (const r of ev.replays || []) this.arrows.push([r.launch, r.first]);
      if (ev.launch) { this.highlight.add(ev.launch.id); this.arrows.push([ev.launch.id, id]); }
      for (const o of ev.ops || []) this.highlight.add(o.id);
      if (ev.ops && ev.ops[0] && ev.launch) this.arrows.push([ev.ops[0].id, ev.launch.id]);
    }
    this.draw();
    if (this.onSelect) this.onSelect(ev, id);
    return ev;
  }

  _bind() {
    const c = this.canvas;
    c.addEventListener("wheel", e => {
      e.preventDefault();
      const t = this.t(e.offsetX), f = e.deltaY > 0 ? 1.25 : 0.8;
      this.setView(t - (t - this.view[0]) * f, t + (this.view[1] - t) * f);
    }, { passive: false });
    let drag = null;
    c.addEventListener("mousedown", e => { drag = { x: e.offsetX, v: [...this.view], moved: false }; });
    window.addEventListener("mousemove", e => {
      if (!drag) return;
      const dx = e.offsetX - drag.x;
      if (Math.abs(dx) > 3) drag.moved = true;
      if (drag.moved) {
        const dt = dx / this.width() * (drag.v[1] - drag.v[0]);
        this.setView(drag.v[0] - dt, drag.v[1] - dt);
      }
    });
    window.addEventListener("mouseup", e => {
      if (drag && !drag.moved && e.target === c) {
        const i = this.hit(e.offsetX, e.offsetY);
        const id = i === null ? null : this.data.id[i];
        if (i !== null && id < 0) {  // an aggregate block: zoom into it
          this.setView(this.data.ts[i], this.data.ts[i] + Math.max(this.data.dur[i], 0.01));
        } else this.select(id);
      }
      drag = null;
    });
    c.addEventListener("keydown", e => {
      const [a, b] = this.view, w = b - a;
      const k = e.key.toLowerCase();
      if (k === "w" || k === "+" || k === "=") this.setView(a + w * 0.2, b - w * 0.2);
      else if (k === "s" || k === "-") this.setView(a - w * 0.25, b + w * 0.25);
      else if (k === "a" || k === "arrowleft") this.setView(a - w * 0.2, b - w * 0.2);
      else if (k === "d" || k === "arrowright") this.setView(a + w * 0.2, b + w * 0.2);
      else if (k === "0") this.setView(this.span[0], this.span[1]);
      else return;
      e.preventDefault();
    });
    window.addEventListener("resize", () => { this.resize(); this.fetch(); });
  }
}
