// @ts-check
// The timeline's pure model: the time window and its x <-> t mapping, zoom and pan, lane layout and
// labels, hit testing and level of detail. No DOM and no canvas, so node's test runner loads this
// file as it is (tests/js/) and the canvas view (timeline_view.js) only draws what it computes.
// Times are µs from the trace start; x and y are CSS pixels.
/**
 * The visible window: times t0..t1 drawn on pixels x0..x0+width.
 * @typedef {{t0: number, t1: number, x0: number, width: number}} TimeWindow
 */

/**
 * One drawn box: data index i at x..x+w, y..y+h (w is at least one pixel).
 * @typedef {{x: number, y: number, w: number, h: number, i: number}} Box
 */

/**
 * What the model reads of the timeline payload: one entry per event or merged block (id -1 for
 * a block of several, n its count), names and kinds interned; t0..t1 the window it was cut for,
 * span the trace's, bucket_us its level of detail (events shorter than that were merged) and
 * bucket_ns the same in ns, a power of two: blocks are whole buckets fixed in time (see bucketNs).
 * @typedef {{lane: number[], row: number[], ts: number[], dur: number[], name: number[],
 *   kind: number[], id: number[], n: number[], names: string[], kinds: string[],
 *   t0?: number, t1?: number, span?: [number, number], bucket_us?: number, bucket_ns?: number}} TimelineColumns
 */

/**
 * A lane as the front end draws it: the payload's lane with its top y, its kind and the place it
 * belongs to (the thread or device stream), apart.
 * @typedef {{lane: number, label: string, rows: number, y: number, kind: string, place: string}} LaidLane
 */

(function (/** @type {any} the profuse namespace */ profuse) {
  "use strict";

  /** The smallest window, µs: zooming stops there. */
  const MIN_SPAN = 0.01;
  const LANE_KINDS = ["scopes", "ops", "runtime", "stream"];

  /** @returns {TimeWindow} */
  function makeWindow(t0, t1, x0, width) {
    return { t0, t1, x0, width };
  }

  /** The x of time t. */
  function tToX(win, t) {
    return win.x0 + (t - win.t0) / (win.t1 - win.t0) * win.width;
  }

  /** The time at x. */
  function xToT(win, x) {
    return win.t0 + (x - win.x0) / win.width * (win.t1 - win.t0);
  }

  /**
   * The window [a, b] made at least `min` wide, growing around the point at fraction `at` of it, so
   * a point the user holds still stays still.
   * @returns {[number, number]}
   */
  function clampSpan(a, b, min = MIN_SPAN, at = 0.5) {
    if (b - a >= min) return [a, b];
    const p = a + (b - a) * at;
    return [p - min * at, p - min * at + min];
  }

  /**
   * Zoom by `factor` (< 1 in, > 1 out) about pixel x: the time under x stays under x.
   * @returns {[number, number]}
   */
  function zoomAt(win, x, factor, min = MIN_SPAN) {
    const t = xToT(win, x);
    const at = (x - win.x0) / win.width;
    return clampSpan(t - (t - win.t0) * factor, t + (win.t1 - t) * factor, min, at);
  }

  /**
   * The window moved so that what was at pixel x is now at x + dx.
   * @returns {[number, number]}
   */
  function panBy(win, dx) {
    const dt = dx / win.width * (win.t1 - win.t0);
    return [win.t0 - dt, win.t1 - dt];
  }

  /**
   * The window after a key (W/S or +/- zoom, A/D or arrows pan, 0 shows the whole span), or null
   * when the key means nothing here.
   * @param {[number, number]} view
   * @param {[number, number]} span
   * @returns {[number, number] | null}
   */
  function keyStep(view, key, span) {
    const [a, b] = view, w = b - a;
    const k = key.toLowerCase();
    if (k === "w" || k === "+" || k === "=") return clampSpan(a + w * 0.2, b - w * 0.2);
    if (k === "s" || k === "-") return [a - w * 0.25, b + w * 0.25];
    if (k === "a" || k === "arrowleft") return [a - w * 0.2, b - w * 0.2];
    if (k === "d" || k === "arrowright") return [a + w * 0.2, b + w * 0.2];
    if (k === "0") return [span[0], span[1]];
    return null;
  }

  /**
   * The lane's kind: the payload's `kind` when it names one, else read from its label, whose last
   * part names it ("main · ops", "GPU 0 · stream 7").
   * @param {Lane} lane
   * @returns {string}
   */
  function laneKind(lane) {
    if (LANE_KINDS.includes(lane.kind)) return lane.kind;
    const label = String(lane.label || "");
    for (const k of LANE_KINDS) if (label.endsWith(` · ${k}`)) return k;
    if (/ · stream \S+$/.test(label)) return "stream";
    return "lane";
  }

  /** The label without its kind: the thread, or the device and stream. */
  function lanePlace(lane, kind) {
    const label = String(lane.label || "");
    const suffix = ` · ${kind}`;
    return label.endsWith(suffix) ? label.slice(0, -suffix.length) : label;
  }

  /**
   * Lanes stacked top to bottom, `rowHeight` per row and `gap` between lanes.
   * @param {Lane[]} lanes
   * @returns {{lanes: LaidLane[], height: number}}
   */
  function layoutLanes(lanes, rowHeight, gap) {
    let y = 0;
    const out = [];
    for (const l of lanes) {
      const kind = laneKind(l);
      out.push({ ...l, y, kind, place: lanePlace(l, kind) });
      y += l.rows * rowHeight + gap;
    }
    return { lanes: out, height: y };
  }

  /** The lane whose rows cover y (the gaps between lanes belong to none), or null. */
  function laneAt(lanes, y, rowHeight) {
    for (const l of lanes) if (y >= l.y && y < l.y + l.rows * rowHeight) return l;
    return null;
  }

  /**
   * `text` cut in the middle with "…" until `measure(text)` fits `maxWidth`: the start of a thread
   * name and its end (often the thread id) both stay visible.
   * @param {(s: string) => number} measure
   */
  function middleTruncate(text, maxWidth, measure) {
    if (measure(text) <= maxWidth) return text;
    let lo = 0, hi = text.length;  // the number of characters kept, binary searched
    const cut = n => text.slice(0, Math.ceil(n / 2)) + "…" + text.slice(text.length - Math.floor(n / 2));
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      if (measure(cut(mid)) <= maxWidth) lo = mid; else hi = mid - 1;
    }
    return cut(lo);
  }

  /**
   * A box per event in the window, clipped to it: events outside the window or in no known lane
   * get none.
   * @param {TimelineColumns} data
   * @param {Map<number, LaidLane>} lanesById
   * @param {TimeWindow} win
   * @returns {Box[]}
   */
  function layoutBoxes(data, lanesById, win, rowHeight) {
    const boxes = [];
    const left = win.x0, right = win.x0 + win.width;
    for (let i = 0; i < data.id.length; i++) {
      const lane = lanesById.get(data.lane[i]);
      if (!lane) continue;
      const a = tToX(win, data.ts[i]), b = tToX(win, data.ts[i] + data.dur[i]);
      if (b < left || a > right) continue;
      const x = Math.max(a, left), w = Math.max(Math.min(b, right) - x, 1);
      boxes.push({ x, y: lane.y + data.row[i] * rowHeight, w, h: rowHeight, i });
    }
    return boxes;
  }

  /**
   * The data index of the event at (x, y), or null. Boxes are half-open, [x, x + w) by [y, y + h),
   * so a point on the border of two boxes picks one; where boxes overlap the narrowest wins (a short
   * or zero-length event drawn over a longer one stays clickable). A point just beside a thin box
   * (within `slop` pixels) picks the nearest such box.
   * @param {Box[]} boxes
   * @returns {number | null}
   */
  function hitTest(boxes, x, y, slop = 2) {
    let best = null, near = null, nearDist = Infinity;
    for (const b of boxes) {
      if (y < b.y || y >= b.y + b.h) continue;
      if (x >= b.x && x < b.x + b.w) {
        if (best === null || b.w < best.w) best = b;
        continue;
      }
      const d = x < b.x ? b.x - x : x - (b.x + b.w);
      if (d <= slop && d < nearDist) { near = b; nearDist = d; }
    }
    if (best) return best.i;
    return near ? near.i : null;
  }

  /**
   * Whether the loaded data can draw the view at this width: it covers the view (within the trace's
   * span) and its blocks are no coarser than a pixel.
   * @param {TimelineColumns | null} data
   * @param {[number, number]} view
   * @returns {boolean}
   */
  function covers(data, view, width) {
    if (!data) return false;
    const a = Math.max(view[0], data.span[0]), b = Math.min(view[1], data.span[1]);
    const inside = a >= data.t0 && b <= data.t1;
    return inside && data.bucket_us <= (view[1] - view[0]) / width;
  }

  /**
   * The server's level of detail for a view drawn `width` pixels wide: the largest power of two of ns
   * not above one pixel, at least 1 (analysis/timeline.py `bucket_ns_for`, the same steps in the same
   * floating point, so both sides agree on it exactly).
   * @param {[number, number]} view
   */
  function bucketNs(view, width) {
    const px = (view[1] - view[0]) * 1e3 / Math.max(width, 1);
    let b = 1;
    while (b * 2 <= px) b *= 2;
    return b;
  }

  /**
   * Whether the loaded data draws the view exactly as a fetch of the view itself would: it is at the
   * view's level of detail (its blocks are the same whole buckets) and complete over the view (within
   * the trace's span). Then zoom and pan need no request.
   * @param {TimelineColumns | null} data
   * @param {[number, number]} view
   * @returns {boolean}
   */
  function reusable(data, view, width) {
    if (!data || data.bucket_ns !== bucketNs(view, width)) return false;
    const a = Math.max(view[0], data.span[0]), b = Math.min(view[1], data.span[1]);
    return a >= data.t0 && b <= data.t1;
  }

  /**
   * The part of the view the loaded data lacks, when the data is at the view's level and the view runs
   * past it on one side only: [a, b] to fetch (the server's window from a is complete from a's bucket,
   * so it meets the data), else null (nothing lacks, or a whole new window is simpler).
   * @param {TimelineColumns | null} data
   * @param {[number, number]} view
   * @returns {[number, number] | null}
   */
  function lacking(data, view, width) {
    if (!data || data.bucket_ns !== bucketNs(view, width)) return null;
    const a = Math.max(view[0], data.span[0]), b = Math.min(view[1], data.span[1]);
    const before = a < data.t0, after = b > data.t1;
    if (before === after || b < data.t0 || a > data.t1) return null;
    return before ? [a, data.t0] : [data.t1, b];
  }

  /**
   * Two windows at one level whose ranges meet, as one: complete over both ranges, each event and
   * whole block once, in the server's order (lane, row, start, length, id), names and kinds interned
   * anew; then cut to [keep0, keep1] (what overlaps it stays, so it stays complete there).
   * @param {TimelineColumns} x
   * @param {TimelineColumns} y
   * @returns {TimelineColumns}
   */
  function mergeWindows(x, y, keep0 = -Infinity, keep1 = Infinity) {
    const t0 = Math.max(Math.min(x.t0, y.t0), keep0), t1 = Math.min(Math.max(x.t1, y.t1), keep1);
    /** @type {Array<{d: TimelineColumns, i: number}>} */
    const rows = [];
    const seen = new Set();
    for (const d of [x, y]) {
      for (let i = 0; i < d.id.length; i++) {
        if (d.ts[i] + d.dur[i] < t0 || d.ts[i] > t1) continue;
        const key = d.id[i] >= 0 ? `e${d.id[i]}` : `b${d.lane[i]},${d.row[i]},${d.ts[i]},${d.dur[i]},${d.n[i]}`;
        if (seen.has(key)) continue;
        seen.add(key);
        rows.push({ d, i });
      }
    }
    const col = (/** @type {string} */ c) => (/** @type {{d: any, i: number}} */ r) => r.d[c][r.i];
    const [lane, row, ts, dur, id] = ["lane", "row", "ts", "dur", "id"].map(col);
    rows.sort((p, q) => lane(p) - lane(q) || row(p) - row(q) || ts(p) - ts(q) || dur(p) - dur(q) || id(p) - id(q));
    /** @type {string[]} */
    const names = [], kinds = [];
    const nameAt = new Map(), kindAt = new Map();
    const intern = (list, at, s) => { let i = at.get(s); if (i === undefined) { i = list.push(s) - 1; at.set(s, i); } return i; };
    return { ...x, t0, t1, names, kinds, lane: rows.map(lane), row: rows.map(row), ts: rows.map(ts), dur: rows.map(dur),
      id: rows.map(id), n: rows.map(col("n")),
      name: rows.map(r => intern(names, nameAt, r.d.names[r.d.name[r.i]])),
      kind: rows.map(r => intern(kinds, kindAt, r.d.kinds[r.d.kind[r.i]])) };
  }

  /**
   * Level of detail for drawing: per lane and row, events narrower than `minPx` that touch (within
   * a pixel) merge into one block. A block keeps the count of what it holds (n adds up), its extent,
   * and the name and kind of its longest member; its id is -1 unless it holds one event. Events out
   * of the window are left out. The result has the columns of the payload's timeline.
   * @param {TimelineColumns} data
   * @param {TimeWindow} win
   * @returns {TimelineColumns}
   */
  function decimate(data, win, minPx = 1) {
    const cols = { lane: [], row: [], ts: [], dur: [], name: [], kind: [], id: [], n: [] };
    const order = [];
    for (let i = 0; i < data.id.length; i++) {
      if (data.ts[i] + data.dur[i] >= win.t0 && data.ts[i] <= win.t1) order.push(i);
    }
    order.sort((p, q) => data.lane[p] - data.lane[q] || data.row[p] - data.row[q] || data.ts[p] - data.ts[q]);
    let open = null;  // the block being grown: {lane, row, ts, end, endX, n, longest, only}
    const flush = () => {
      if (!open) return;
      const j = open.longest;
      cols.lane.push(open.lane); cols.row.push(open.row); cols.ts.push(open.ts); cols.dur.push(open.end - open.ts);
      cols.name.push(data.name[j]); cols.kind.push(data.kind[j]);
      cols.id.push(open.only ? data.id[j] : -1); cols.n.push(open.n);
      open = null;
    };
    for (const i of order) {
      const end = data.ts[i] + data.dur[i];
      const x0 = tToX(win, data.ts[i]), x1 = tToX(win, end);
      const small = x1 - x0 < minPx;
      const joins = small && open && open.lane === data.lane[i] && open.row === data.row[i] && x0 <= open.endX + 1;
      if (joins) {
        open.n += data.n[i]; open.only = false;
        if (data.dur[i] > data.dur[open.longest]) open.longest = i;
        if (end > open.end) { open.end = end; open.endX = x1; }
        continue;
      }
      flush();
      open = { lane: data.lane[i], row: data.row[i], ts: data.ts[i], end, endX: x1, n: data.n[i], longest: i,
        only: data.n[i] === 1 };
      if (!small) flush();
    }
    flush();
    return { ...data, ...cols };
  }

  /**
   * The data index of the event with this id, or null.
   * @param {TimelineColumns | null} data
   * @returns {number | null}
   */
  function indexOfId(data, id) {
    if (!data || id === null || id === undefined || id < 0) return null;
    const i = data.id.indexOf(id);
    return i < 0 ? null : i;
  }

  /**
   * What the data itself says of row i: all an HTML report (no server) can show of a selection.
   * @param {TimelineColumns} data
   * @returns {{id: number, name: string, kind: string, ts: number, dur: number, n: number}}
   */
  function eventAt(data, i) {
    return { id: data.id[i], name: data.names[data.name[i]], kind: data.kinds[data.kind[i]], ts: data.ts[i],
      dur: data.dur[i], n: data.n[i] };
  }

  /**
   * The events of `data` whose name holds `query` (ignoring case), in time order, at most `limit`: what
   * the search box finds in a report, which holds one window and no server. Merged blocks (id -1) are
   * never a match: they are no one event. The same shape as the explorer's /search answer.
   * @param {TimelineColumns | null} data
   * @returns {{query: string, total: number, matches: Array<{id: number, name: string, kind: string, ts: number, dur: number, lane: number}>}}
   */
  function searchWindow(data, query, limit = 500) {
    const needle = String(query).toLowerCase();
    const out = { query: String(query), total: 0, matches: [] };
    if (!data || !needle) return out;
    const hit = data.names.map(n => String(n).toLowerCase().includes(needle));
    const found = [];
    for (let i = 0; i < data.id.length; i++) if (data.id[i] >= 0 && hit[data.name[i]]) found.push(i);
    found.sort((a, b) => data.ts[a] - data.ts[b] || data.id[a] - data.id[b]);
    out.total = found.length;
    out.matches = found.slice(0, limit).map(i => ({ ...eventAt(data, i), lane: data.lane[i] }));
    return out;
  }

  /**
   * The view that shows an event of [ts, ts + dur] µs: the event in its middle third, at least MIN_SPAN wide.
   * @returns {[number, number]}
   */
  function viewAround(ts, dur) {
    const w = Math.max(dur * 3, MIN_SPAN * 3, 1);
    return clampSpan(ts + dur / 2 - w / 2, ts + dur / 2 + w / 2);
  }

  /**
   * A memory counter lane as laid out: the payload's device and points ([ns, allocated, reserved, id]),
   * its top y and height, the scale top (the largest reserved or allocated value) and its peak's index.
   * @typedef {{device: string, points: number[][], peak_id: number, y: number, h: number, max: number,
   *   peak: number}} CounterLane
   */

  /**
   * Counter lanes (one per device of the memory payload) stacked from y0, each `h` high.
   * @returns {{lanes: CounterLane[], height: number}}
   */
  function layoutCounters(memory, y0, h, gap) {
    const lanes = [];
    let y = y0;
    for (const l of (memory && memory.lanes) || []) {
      if (!l.points.length) continue;
      let max = 1, peak = 0;
      l.points.forEach((p, i) => {
        max = Math.max(max, p[1], p[2]);
        if (p[3] === l.peak_id || (l.points[peak][3] !== l.peak_id && p[1] > l.points[peak][1])) peak = i;
      });
      lanes.push({ device: l.device, points: l.points, peak_id: l.peak_id, y, h, max, peak });
      y += h + gap;
    }
    return { lanes, height: y - y0 };
  }

  /** The y of `bytes` in a counter lane (0 at its bottom, its max at its top). */
  function counterY(lane, bytes) {
    return lane.y + lane.h - (bytes / lane.max) * (lane.h - 2);
  }

  /**
   * The step-line vertices of a counter lane in the window: [x, y of allocated, y of reserved] per
   * point, from the last point before the window to the first after it.
   * @returns {number[][]}
   */
  function counterPath(lane, win) {
    const pts = lane.points, out = [];
    for (let i = 0; i < pts.length; i++) {
      const t = pts[i][0] / 1e3, next = i + 1 < pts.length ? pts[i + 1][0] / 1e3 : Infinity;
      if (next < win.t0) continue;
      out.push([tToX(win, t), counterY(lane, pts[i][1]), counterY(lane, pts[i][2])]);
      if (t > win.t1) break;
    }
    return out;
  }

  /** The counter lane at y, or null. */
  function counterAt(lanes, y) {
    return lanes.find(l => y >= l.y && y < l.y + l.h) || null;
  }

  /** The index of the lane's point in force at pixel x (the last at or before it), or null before the first. */
  function counterPointAt(lane, win, x) {
    const t = xToT(win, x) * 1e3;
    let lo = 0, hi = lane.points.length - 1, found = null;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (lane.points[mid][0] <= t) { found = mid; lo = mid + 1; } else hi = mid - 1;
    }
    return found;
  }

  profuse.timelineModel = {
    MIN_SPAN, LANE_KINDS, makeWindow, tToX, xToT, clampSpan, zoomAt, panBy, keyStep, laneKind, layoutLanes,
    laneAt, middleTruncate, layoutBoxes, hitTest, covers, bucketNs, reusable, lacking, mergeWindows, decimate, indexOfId, eventAt,
    searchWindow, viewAround, layoutCounters, counterY, counterPath, counterAt, counterPointAt,
  };
})(globalThis.profuse = globalThis.profuse || {});
