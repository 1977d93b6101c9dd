// @ts-check
// The timeline's canvas: draws what timeline_model.js lays out and turns wheel, drag, keys and clicks
// into model calls. Every listener it adds goes through one AbortController, so destroy() removes
// them all (the window's included) along with the canvas.
(function (/** @type {any} the profuse namespace */ profuse) {
  "use strict";

  const M = profuse.timelineModel;

  /** Bytes in binary units, as the console writes them. */
  function fmtBytes(n) {
    const sign = n < 0 ? "-" : "";
    let v = Math.abs(n);
    for (const u of ["B", "KiB", "MiB", "GiB"]) {
      if (v < 1024 || u === "GiB") return u === "B" ? `${sign}${v.toFixed(0)} B` : `${sign}${v.toFixed(2)} ${u}`;
      v /= 1024;
    }
    return `${sign}${v.toFixed(2)} TiB`;
  }
  const ROW = 14, LANE_GAP = 6, LABEL_W = 220, BADGE_W = 52, COUNTER_H = 48;
  const MARGIN = 0.5;  // what a fetch adds each side of the view, in views: pans and zooms there need none
  const KEEP = 2;  // what a pan keeps each side of the view of the data it held, in views
  const COLORS = { cpu_op: "#5b8def", annotation: "#9aa5b1", python: "#c9b6e4", runtime: "#f2b05e", sync: "#e07a7a",
    kernel: "#3fb27f", memcpy: "#e3c14f", memset: "#d9a441", gpu_annotation: "#b0c4b1", device_other: "#9ccbb5",
    other: "#bbbbbb" };
  const LANE_COLORS = { scopes: "#8e7cc3", ops: "#5b8def", runtime: "#d98c2b", stream: "#2f9e6b", lane: "#888888" };

  /**
   * Lanes of rows on a canvas, zoomed and panned in place; a click selects an event.
   * onSelect(ev, id) gets the server's details of the event (explorer) or what the embedded data
   * says of it (report); onView(view) gets the window after each zoom or pan.
   */
  class Timeline {
    /**
     * @param {HTMLElement} container
     * @param {Source} source
     * @param {number} run
     * @param {{onSelect?: (event: any, id: number | null) => void, onView?: (view: number[]) => void,
     *   onMemory?: (pick: any) => void}} [callbacks]
     */
    constructor(container, source, run, { onSelect, onView, onMemory } = {}) {
      this.source = source; this.run = run; this.onSelect = onSelect; this.onView = onView;
      this.onMemory = onMemory;
      /** @type {any[]} memory lanes (timeline_model.js CounterLane) (allocated, reserved) under the event lanes */
      this.counters = []; this.memory = null; this.memoryPick = null;
      this.canvas = document.createElement("canvas");
      this.canvas.tabIndex = 0;
      this.canvas.setAttribute("aria-label", "timeline");
      container.appendChild(this.canvas);
      /** @type {LaidLane[]} */
      this.lanes = [];
      /** @type {TimelineColumns | null} what the source sent for the view */
      this.data = null;
      /** @type {TimelineColumns | null} what is drawn: `data` at this width's level of detail */
      this.drawn = null;
      /** @type {[number, number] | null} */
      this.view = null;
      /** @type {Box[]} */
      this.boxes = [];
      this.highlight = new Set(); this.arrows = []; this.positions = new Map();
      this.selected = null; this.pending = 0; this.destroyed = false;
      /** whether `data` is the server's coarse first view (drawn until the model's own comes) */
      this.coarse = false;
      this.listeners = new AbortController();
      this._bind();
    }

    /**
     * Loads the lanes and the whole span, then shows `view` (or everything). From the explorer, the first
     * view comes first (analysis/timeline.py FirstView): where it is coarse (the server's lane model is
     * still being built) it is drawn at once, one row per lane, then the model's lanes and window replace
     * it. canvas[data-first] says what the first draw with events drew ("coarse" or "exact", mark
     * profuse:timeline-first), canvas[data-painted] that the exact view is drawn (mark
     * profuse:timeline-painted).
     */
    async init(view) {
      const get = url => this.source.get(url), r = this.run, w = this.width();
      let lanes, full;
      if (this.source.live) {
        // the memory lanes are asked for with it: the server answers both without the timeline model
        const [first, memory] = await Promise.all([get(`/api/${r}/first_view?width=${w}`), get(`/api/${r}/memory`)]);
        if (this.destroyed) return;
        this.memory = memory;
        if (first && first.exact) [lanes, full] = [first.lanes, first.window];
        else {
          this.coarse = true;
          this._place(first ? first.lanes : [], first ? first.window : null, view);
          this.draw();
          [lanes, full] = await Promise.all([get(`/api/${r}/lanes`), get(`/api/${r}/timeline?width=${w}`)]);
          if (this.destroyed) return;
          this.coarse = false;
          view = this.view;  // where a zoom or pan went meanwhile
        }
      } else {
        [lanes, this.memory, full] = await Promise.all([`/api/${r}/lanes`, `/api/${r}/memory`,
          `/api/${r}/timeline?width=${w}`].map(get));
        if (this.destroyed) return;
      }
      this._place(lanes, full, view);
      await this.fetch();
      this.draw();
    }

    /**
     * Lays out `lanes` and the memory lanes, holds `full` (the whole span) and sets the view to `view`
     * (or everything).
     * @param {Lane[] | null} lanes
     * @param {TimelineColumns | null} full
     * @param {[number, number] | null} view
     */
    _place(lanes, full, view) {
      const laid = M.layoutLanes(lanes || [], ROW, LANE_GAP);
      this.lanes = laid.lanes;
      const counters = M.layoutCounters(this.memory, laid.height + LANE_GAP, COUNTER_H, LANE_GAP);
      this.counters = counters.lanes;
      this.height = Math.max(laid.height + (this.counters.length ? LANE_GAP + counters.height : 0), 40);
      this.span = full ? full.span : [0, 1];
      this.view = view && view[1] > view[0] ? view : [this.span[0], this.span[1]];
      this.data = full;
      this.resize();
      this.showDeviceLanes();
    }

    /** Scrolls the box holding the canvas (when it scrolls) so the drawn event `id` is in view. */
    reveal(id) {
      const box = this.canvas.parentElement, at = this.positions.get(id);
      if (!box || !at) return;
      const y = at[1];
      if (y < box.scrollTop || y + ROW > box.scrollTop + box.clientHeight) box.scrollTop = Math.max(0, y - box.clientHeight / 2);
    }

    /**
     * Scrolls the box holding the canvas (when it scrolls) so the device lanes are in view: the CPU
     * lanes above them can be taller than the window. As much of what is above them as fits stays.
     */
    showDeviceLanes() {
      const box = this.canvas.parentElement;
      const dev = this.lanes.filter(l => l.kind === "stream");
      if (!box || !dev.length) return;
      const top = Math.min(...dev.map(l => l.y)), bottom = Math.max(...dev.map(l => l.y + l.rows * ROW));
      box.scrollTop = Math.max(0, Math.min(top, bottom - box.clientHeight + LANE_GAP));
    }

    /** Removes the canvas and every listener this timeline added; later replies are dropped. */
    destroy() {
      this.destroyed = true;
      this.listeners.abort();
      clearTimeout(this._timer);
      this.canvas.remove();
    }

    width() { return Math.max((this.canvas.parentElement?.clientWidth || 1200) - LABEL_W, 200); }

    /** @returns {TimeWindow} */
    window() { return M.makeWindow(this.view[0], this.view[1], LABEL_W, this.width()); }

    resize() {
      const dpr = window.devicePixelRatio || 1;
      const w = this.width() + LABEL_W;
      this.canvas.width = w * dpr; this.canvas.height = this.height * dpr;
      this.canvas.style.width = w + "px"; this.canvas.style.height = this.height + "px";
      this.ctx = this.canvas.getContext("2d"); this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    }

    setView(a, b, { silent = false } = {}) {
      if (this.destroyed || !this.view) return;
      this.view = M.clampSpan(a, b);
      this.draw();
      if (!silent && this.onView) this.onView(this.view);
      clearTimeout(this._timer);
      this._timer = setTimeout(() => this.fetch(), 25);
    }

    /**
     * Shows `view` (null: the whole span) at once, without the wheel's debounce; resolves once it is
     * drawn from data at its level of detail (the router's in-place update of a changed URL).
     * @param {[number, number] | null} view
     */
    async show(view) {
      if (this.destroyed || !this.view) return;
      const v = view && view[1] > view[0] ? view : [this.span[0], this.span[1]];
      this.view = M.clampSpan(v[0], v[1]);
      clearTimeout(this._timer);
      this.draw();
      await this.fetch();
    }

    /**
     * Draws the view from the data in hand where that draws it as a fetch of the view would (the same
     * level of detail, complete over the view: timeline_model.js `reusable`); else asks the server for
     * the view at its level of detail with half a view's margin each side, so the next pans and zooms
     * at that level are drawn without a request. A reply overtaken by a later request is dropped.
     */
    async fetch() {
      // a coarse first view is drawn as it is: init fetches the view once the model's lanes are in
      if (this.coarse || !this.source.live || M.reusable(this.data, this.view, this.width())) return this.draw();
      const ticket = ++this.pending;
      const [a, b] = this.view, w = this.width(), m = (b - a) * MARGIN, bucket = M.bucketNs(this.view, w);
      const part = M.lacking(this.data, this.view, w);  // a pan past one side: only that side is fetched
      const [f0, f1] = part ? [part[0] === a ? a - m : part[0], part[1] === b ? b + m : part[1]] : [a - m, b + m];
      const d = await this.source.get(`/api/${this.run}/timeline?t0=${f0}&t1=${f1}&width=${w}&bucket_ns=${bucket}`);
      if (this.destroyed || ticket !== this.pending || !d) return;
      const held = this.data;
      this.data = part && held && held.bucket_ns === d.bucket_ns
        ? M.mergeWindows(held, d, a - KEEP * (b - a), b + KEEP * (b - a)) : d;
      this.draw();
    }

    draw() {
      const ctx = this.ctx;
      if (!ctx || this.destroyed) return;
      ctx.clearRect(0, 0, this.canvas.width, this.canvas.height);
      ctx.font = "11px system-ui, sans-serif";
      for (const l of this.lanes) this._drawLabel(l);
      if (!this.data) return;
      const win = this.window();
      const d = this.drawn = M.decimate(this.data, win);
      this.boxes = M.layoutBoxes(d, new Map(this.lanes.map(l => [l.lane, l])), win, ROW);
      this.positions = new Map();
      for (const b of this.boxes) {
        this._drawBox(d, b);
        if (d.id[b.i] >= 0) this.positions.set(d.id[b.i], [b.x, b.y, b.w]);
      }
      this._drawArrows();
      for (const l of this.counters) this._drawCounter(l, win);
      if (this.boxes.length && !this.canvas.dataset.first) {  // the first paint with events: what benchmarks wait on
        this.canvas.dataset.first = this.coarse ? "coarse" : "exact";
        performance.mark("profuse:timeline-first");
      }
      if (this.boxes.length && !this.coarse && !this.canvas.dataset.painted) {  // the exact view's
        this.canvas.dataset.painted = "1";
        performance.mark("profuse:timeline-painted");
      }
    }

    /** A memory lane: reserved as a line, allocated filled under it, the peak marked, a picked point ruled. */
    _drawCounter(l, win) {
      const ctx = this.ctx;
      ctx.fillStyle = "#f4f4f6"; ctx.fillRect(0, l.y, LABEL_W - 4, l.h);
      ctx.fillStyle = "#c2255c"; ctx.fillRect(2, l.y + 1, BADGE_W - 4, ROW - 2);
      ctx.fillStyle = "#fff"; ctx.fillText("memory", 5, l.y + 11, BADGE_W - 8);
      ctx.fillStyle = "#333"; ctx.fillText(l.device, BADGE_W + 2, l.y + 11);
      ctx.fillStyle = "#666"; ctx.fillText(`max ${fmtBytes(l.max)}`, BADGE_W + 2, l.y + 25);
      ctx.save(); ctx.beginPath(); ctx.rect(LABEL_W, l.y, this.width(), l.h); ctx.clip();
      ctx.fillStyle = "#fbfbfd"; ctx.fillRect(LABEL_W, l.y, this.width(), l.h);
      const path = M.counterPath(l, win), bottom = l.y + l.h, right = LABEL_W + this.width();
      if (path.length) {
        ctx.beginPath(); ctx.moveTo(Math.max(path[0][0], LABEL_W), bottom);
        path.forEach((p, i) => {
          const x = Math.max(p[0], LABEL_W), nx = i + 1 < path.length ? path[i + 1][0] : right;
          ctx.lineTo(x, p[1]); ctx.lineTo(Math.min(nx, right), p[1]);
        });
        ctx.lineTo(right, bottom); ctx.closePath();
        ctx.fillStyle = "rgba(194, 37, 92, 0.35)"; ctx.fill();
        ctx.beginPath();
        path.forEach((p, i) => {
          const x = Math.max(p[0], LABEL_W), nx = i + 1 < path.length ? path[i + 1][0] : right;
          if (i === 0) ctx.moveTo(x, p[2]); else ctx.lineTo(x, p[2]);
          ctx.lineTo(Math.min(nx, right), p[2]);
        });
        ctx.strokeStyle = "#495057"; ctx.lineWidth = 1; ctx.stroke();
      }
      const pk = l.points[l.peak], px = M.tToX(win, pk[0] / 1e3), py = M.counterY(l, pk[1]);
      l.peakXY = [px, py];
      ctx.fillStyle = "#c2255c";
      ctx.beginPath(); ctx.moveTo(px, py); ctx.lineTo(px - 5, py - 7); ctx.lineTo(px + 5, py - 7); ctx.fill();
      ctx.fillText(`peak ${fmtBytes(pk[1])}`, Math.min(px + 7, right - 90), Math.max(py, l.y + 10));
      if (this.memoryPick && this.memoryPick.lane === l) {
        const x = M.tToX(win, l.points[this.memoryPick.i][0] / 1e3);
        ctx.strokeStyle = "#1c7ed6"; ctx.beginPath(); ctx.moveTo(x, l.y); ctx.lineTo(x, bottom); ctx.stroke();
      }
      ctx.restore();
    }

    /**
     * A click on a memory lane at x: the point in force there, and what is live just after it (the
     * server's answer; a report knows it only at the peak).
     */
    async pickMemory(l, x) {
      const i = M.counterPointAt(l, this.window(), x);
      if (i === null) return null;
      this.memoryPick = { lane: l, i };
      this.draw();
      const p = l.points[i];
      let live = null;
      if (this.source.live) {
        live = await this.source.get(`/api/${this.run}/memory_live?device=${encodeURIComponent(l.device)}&id=${p[3]}`);
      } else if (p[3] === l.peak_id) {
        const d = ((this.memory && this.memory.devices) || []).find(v => v.device === l.device);
        if (d) live = { device: d.device, id: p[3], ts_ns: p[0], allocated_bytes: d.peak_allocated_bytes,
          reserved_bytes: d.reserved_at_peak_bytes, live: d.live_at_peak };
      }
      const picked = { device: l.device, ts_ns: p[0], allocated_bytes: p[1], reserved_bytes: p[2], id: p[3],
        peak: p[3] === l.peak_id, live: live ? live.live : null };
      if (this.onMemory) this.onMemory(picked);
      return picked;
    }

    /** A lane's kind as a coloured badge, then its place cut in the middle to fit (all of it on hover). */
    _drawLabel(l) {
      const ctx = this.ctx;
      ctx.fillStyle = "#f4f4f6"; ctx.fillRect(0, l.y, LABEL_W - 4, l.rows * ROW);
      ctx.fillStyle = LANE_COLORS[l.kind] || LANE_COLORS.lane; ctx.fillRect(2, l.y + 1, BADGE_W - 4, ROW - 2);
      ctx.fillStyle = "#fff"; ctx.fillText(l.kind, 5, l.y + 11, BADGE_W - 8);
      ctx.fillStyle = "#333";
      const room = LABEL_W - BADGE_W - 8;
      ctx.fillText(M.middleTruncate(l.place, room, s => ctx.measureText(s).width), BADGE_W + 2, l.y + 11);
    }

    _drawBox(d, b) {
      const ctx = this.ctx, i = b.i, id = d.id[i];
      const hot = id >= 0 && (this.highlight.has(id) || id === this.selected);
      ctx.fillStyle = hot ? "#d6336c" : (COLORS[d.kinds[d.kind[i]]] || "#999");
      ctx.globalAlpha = d.n[i] > 1 ? 0.55 : 1;
      ctx.fillRect(b.x, b.y + 1, b.w, ROW - 2);
      ctx.globalAlpha = 1;
      if (b.w > 30) {
        ctx.save(); ctx.beginPath(); ctx.rect(b.x, b.y, b.w, ROW); ctx.clip();
        ctx.fillStyle = "#fff"; ctx.fillText((d.n[i] > 1 ? `${d.n[i]}× ` : "") + d.names[d.name[i]], b.x + 2, b.y + 11);
        ctx.restore();
      }
    }

    _drawArrows() {
      const ctx = this.ctx;
      ctx.strokeStyle = "#d6336c"; ctx.fillStyle = "#d6336c"; ctx.lineWidth = 1.5;
      for (const [from, to] of this.arrows) {
        const a = this.positions.get(from), b = this.positions.get(to);
        if (!a || !b) continue;
        const ax = a[0] + Math.min(a[2], 4), ay = a[1] + ROW - 2, bx = b[0] + 1, by = b[1] + 2;
        ctx.beginPath(); ctx.moveTo(ax, ay); ctx.lineTo(bx, by); ctx.stroke();
        ctx.beginPath(); ctx.moveTo(bx, by); ctx.lineTo(bx - 4, by - 6); ctx.lineTo(bx + 3, by - 6); ctx.fill();
      }
    }

    /** The drawn data's index at canvas (x, y), or null. */
    hit(x, y) { return M.hitTest(this.boxes, x, y); }

    /**
     * Selects the event with this id (null: none). A live source gives its links (launches, kernels,
     * op and module chains), highlighted and drawn as arrows; an embedded one what its data holds.
     */
    async select(id) {
      this.selected = id; this.highlight = new Set(); this.arrows = [];
      if (id === null) { this.draw(); if (this.onSelect) this.onSelect(null, null); return null; }
      let ev = null;
      if (this.source.live) {
        ev = await this.source.get(`/api/${this.run}/event/${id}`);
        if (this.destroyed) return null;
        if (ev) this._link(id, ev);
      } else {
        const d = M.indexOfId(this.drawn, id) !== null ? this.drawn : this.data;
        const i = M.indexOfId(d, id);
        if (i !== null) ev = M.eventAt(d, i);
      }
      this.draw();
      if (this.onSelect) this.onSelect(ev, id);
      return ev;
    }

    /**
     * The events whose name holds `query`, in time order: the server's search of every drawn event
     * (explorer), or of the window a report embeds.
     * @returns {Promise<{query: string, total: number, matches: any[]}>}
     */
    async find(query) {
      if (!this.source.live) return M.searchWindow(this.data, query);
      const found = await this.source.get(`/api/${this.run}/search?q=${encodeURIComponent(query)}`);
      return found || { query, total: 0, matches: [] };
    }

    /**
     * Shows a match (an event of `find`): zooms to it, selects it and scrolls its lane into view.
     * A report keeps its one window: the event is selected where it is drawn.
     */
    async jump(match) {
      if (this.source.live) {
        await this.show(M.viewAround(match.ts, match.dur));
        if (this.onView) this.onView(this.view);
      }
      const ev = await this.select(match.id);
      this.reveal(match.id);
      return ev;
    }

    /** Highlights and arrows for the server's details of event `id`. */
    _link(id, ev) {
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

    /**
     * A click at drawn index i: an event selects it; a merged block zooms into it where a server can
     * send its members, else (a report) is selected as a block.
     */
    _click(i) {
      if (i === null) return this.select(null);
      const d = this.drawn;
      if (d.id[i] >= 0) return this.select(d.id[i]);
      if (this.source.live) return this.setView(d.ts[i], d.ts[i] + Math.max(d.dur[i], M.MIN_SPAN));
      this.selected = null; this.highlight = new Set(); this.arrows = [];
      this.draw();
      if (this.onSelect) this.onSelect(M.eventAt(d, i), null);
      return null;
    }

    _bind() {
      const c = this.canvas, opts = { signal: this.listeners.signal };
      c.addEventListener("wheel", e => {
        e.preventDefault();
        const v = M.zoomAt(this.window(), e.offsetX, e.deltaY > 0 ? 1.25 : 0.8);
        this.setView(v[0], v[1]);
      }, { ...opts, passive: false });
      let drag = null;
      c.addEventListener("mousedown", e => { drag = { x: e.clientX, win: this.window(), moved: false }; }, opts);
      c.addEventListener("mousemove", e => {  // the full label of the lane under the pointer
        const lane = e.offsetX < LABEL_W ? M.laneAt(this.lanes, e.offsetY, ROW) : null;
        const title = lane ? `${lane.kind}: ${lane.label}` : "";
        if (c.title !== title) c.title = title;
      }, opts);
      window.addEventListener("mousemove", e => {
        if (!drag) return;
        const dx = e.clientX - drag.x;
        if (Math.abs(dx) > 3) drag.moved = true;
        if (drag.moved) { const v = M.panBy(drag.win, dx); this.setView(v[0], v[1]); }
      }, opts);
      window.addEventListener("mouseup", e => {
        if (drag && !drag.moved && e.target === c) {
          const lane = e.offsetX >= LABEL_W ? M.counterAt(this.counters, e.offsetY) : null;
          if (lane) this.pickMemory(lane, e.offsetX); else this._click(this.hit(e.offsetX, e.offsetY));
        }
        drag = null;
      }, opts);
      c.addEventListener("keydown", e => {
        const v = this.view && M.keyStep(this.view, e.key, this.span);
        if (!v) return;
        this.setView(v[0], v[1]);
        e.preventDefault();
      }, opts);
      window.addEventListener("resize", () => { if (this.view) { this.resize(); this.fetch(); } }, opts);
    }
  }

  profuse.timelineView = { Timeline, ROW, LABEL_W, COUNTER_H, fmtBytes };
})(globalThis.profuse = globalThis.profuse || {});
