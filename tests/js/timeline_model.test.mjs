// The timeline's pure model, loaded the way a page loads it: the classic script run as it is, adding
// profuse.timelineModel to the global namespace. Run by `make test` (node --test tests/js/).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import vm from "node:vm";

const file = new URL("../../src/profuse/frontend/static/timeline_model.js", import.meta.url);
vm.runInThisContext(readFileSync(file, "utf8"), { filename: file.pathname });
const M = globalThis.profuse.timelineModel;

const ROW = 14, GAP = 6;
const close = (a, b, eps = 1e-9) => assert.ok(Math.abs(a - b) <= eps * Math.max(1, Math.abs(a), Math.abs(b)),
  `${a} != ${b}`);

/** A timeline payload from rows of [lane, row, ts, dur, name, id, n?, kind?]. */
function timeline(rows) {
  const names = [], kinds = [];
  const intern = (list, s) => (list.includes(s) ? list.indexOf(s) : list.push(s) - 1);
  const d = { names, kinds, lane: [], row: [], ts: [], dur: [], name: [], id: [], n: [], kind: [] };
  for (const [lane, row, ts, dur, name, id, n = 1, kind = "cpu_op"] of rows) {
    d.lane.push(lane); d.row.push(row); d.ts.push(ts); d.dur.push(dur); d.name.push(intern(names, name));
    d.id.push(id); d.n.push(n); d.kind.push(intern(kinds, kind));
  }
  return d;
}

test("x -> t -> x and t -> x -> t round trip, with an offset and odd spans", () => {
  for (const win of [M.makeWindow(0, 1, 220, 980), M.makeWindow(1234.567, 1234.568, 220, 1180),
    M.makeWindow(-50, 3.2e7, 0, 333)]) {
    for (const x of [win.x0, win.x0 + 0.5, win.x0 + win.width / 3, win.x0 + win.width]) close(M.tToX(win, M.xToT(win, x)), x);
    for (const f of [0, 0.25, 0.999, 1]) {
      const t = win.t0 + f * (win.t1 - win.t0);
      close(M.xToT(win, M.tToX(win, t)), t);
    }
    assert.equal(M.tToX(win, win.t0), win.x0);
    close(M.tToX(win, win.t1), win.x0 + win.width);
  }
});

test("zooming in and out keeps the time under the cursor under the cursor", () => {
  const win = M.makeWindow(100, 900, 220, 800);
  for (const x of [220, 300, 619.5, 1020]) {
    const t = M.xToT(win, x);
    for (const factor of [0.8, 1.25, 0.01]) {
      const [a, b] = M.zoomAt(win, x, factor);
      close(M.xToT(M.makeWindow(a, b, 220, 800), x), t);
      close(b - a, (900 - 100) * factor);
    }
  }
});

test("zooming past the smallest window stops there, still about the cursor", () => {
  const win = M.makeWindow(10, 10.02, 0, 1000);
  const x = 250, t = M.xToT(win, x);
  const [a, b] = M.zoomAt(win, x, 0.1);
  close(b - a, M.MIN_SPAN);
  close(M.xToT(M.makeWindow(a, b, 0, 1000), x), t);
});

test("panning moves what was under x by dx pixels", () => {
  const win = M.makeWindow(0, 500, 100, 1000);
  const t = M.xToT(win, 600);
  const [a, b] = M.panBy(win, 40);
  close(M.tToX(M.makeWindow(a, b, 100, 1000), t), 640);
  close(b - a, 500);
});

test("keys zoom and pan the window, 0 shows the span, other keys do nothing", () => {
  assert.deepEqual(M.keyStep([0, 100], "w", [0, 1000]), [20, 80]);
  assert.deepEqual(M.keyStep([0, 100], "S", [0, 1000]), [-25, 125]);
  assert.deepEqual(M.keyStep([0, 100], "ArrowRight", [0, 1000]), [20, 120]);
  assert.deepEqual(M.keyStep([0, 100], "0", [0, 1000]), [0, 1000]);
  assert.equal(M.keyStep([0, 100], "q", [0, 1000]), null);
});

// Two lanes: lane 7 with 2 rows at y 0..28, lane 3 with one row at y 34..48 (a 6 px gap between).
const LANES = M.layoutLanes([{ lane: 7, label: "main · ops", rows: 2 }, { lane: 3, label: "GPU 0 · stream 7", rows: 1 }],
  ROW, GAP);
const BY_ID = new Map(LANES.lanes.map(l => [l.lane, l]));
const WIN = M.makeWindow(0, 100, 0, 1000);  // 10 px per µs

function hitAt(data, x, y) {
  const i = M.hitTest(M.layoutBoxes(data, BY_ID, WIN, ROW), x, y);
  return i === null ? null : data.id[i];
}

test("lanes stack with their gaps; their kinds come from the label when the payload has none", () => {
  assert.deepEqual(LANES.lanes.map(l => [l.y, l.kind, l.place]), [[0, "ops", "main"], [34, "stream", "GPU 0 · stream 7"]]);
  assert.equal(LANES.height, 2 * ROW + GAP + ROW + GAP);
  assert.equal(M.laneAt(LANES.lanes, 27.9, ROW).lane, 7);
  assert.equal(M.laneAt(LANES.lanes, 28, ROW), null, "the gap belongs to no lane");
  assert.equal(M.laneAt(LANES.lanes, 34, ROW).lane, 3);
});

test("a lane's kind: the payload's kind field first, else its label's last part", () => {
  assert.equal(M.laneKind({ kind: "runtime", label: "worker · ops" }), "runtime");
  for (const k of ["scopes", "ops", "runtime"]) assert.equal(M.laneKind({ label: `pt_main_thread · ${k}` }), k);
  assert.equal(M.laneKind({ label: "NPU 1 · stream 12" }), "stream");
  assert.equal(M.laneKind({ label: "something else" }), "lane");
  assert.equal(M.laneKind({ kind: "<b>", label: "x · ops" }), "ops", "an unknown kind is not trusted");
});

test("hit test at row and lane boundaries picks the row below the line, and nothing in the gap", () => {
  const d = timeline([[7, 0, 10, 20, "outer", 1], [7, 1, 10, 5, "inner", 2], [3, 0, 10, 20, "kernel", 3]]);
  assert.equal(hitAt(d, 150, 0), 1);
  assert.equal(hitAt(d, 150, 13.99), 1);
  assert.equal(hitAt(d, 150, 14), 2, "y = 14 is the first pixel of row 1");
  assert.equal(hitAt(d, 150, 27.9), 2);
  assert.equal(hitAt(d, 150, 28), null, "lane gap");
  assert.equal(hitAt(d, 150, 33.9), null, "lane gap");
  assert.equal(hitAt(d, 150, 34), 3);
  assert.equal(hitAt(d, 150, 48), null, "below the last lane");
});

test("hit test between two touching events picks the one the point is in", () => {
  const d = timeline([[7, 0, 10, 10, "a", 1], [7, 0, 20, 10, "b", 2]]);  // a: x 100..200, b: 200..300
  assert.equal(hitAt(d, 199.5, 5), 1, "just inside a's end is a, though b is drawn later");
  assert.equal(hitAt(d, 200, 5), 2);
  assert.equal(hitAt(d, 99, 5), 1, "a pixel before a: the nearest within the slop");
  assert.equal(hitAt(d, 310, 5), null, "far from everything");
});

test("a zero-length event is hit at its time and beside it, even next to or over a longer one", () => {
  const d = timeline([[7, 0, 10, 10, "a", 1], [7, 0, 20, 0, "mark", 2], [7, 0, 30, 10, "c", 3],
    [7, 0, 35, 0, "inside", 4]]);
  assert.equal(hitAt(d, 200, 5), 2, "at its time");
  assert.equal(hitAt(d, 201.5, 5), 2, "a pixel and a half after it, nothing else there");
  assert.equal(hitAt(d, 199.9, 5), 1, "a's last pixel stays a");
  assert.equal(hitAt(d, 350.5, 5), 4, "drawn over c: the narrowest box wins");
  assert.equal(hitAt(d, 340, 5), 3);
  const tie = timeline([[7, 0, 30, 0, "starts with c", 5], [7, 0, 30, 10, "c", 3]]);  // same ts, listed first
  assert.equal(hitAt(tie, 300.5, 5), 5, "whatever the order the boxes come in");
  assert.equal(hitAt(tie, 301, 5), 3);
});

test("boxes are clipped to the window and events outside it get none", () => {
  const d = timeline([[7, 0, -50, 60, "left", 1], [7, 0, 150, 5, "right", 2], [9, 0, 10, 5, "unknown lane", 3]]);
  const boxes = M.layoutBoxes(d, BY_ID, WIN, ROW);
  assert.deepEqual(boxes.map(b => [d.id[b.i], b.x, b.w]), [[1, 0, 100]]);
});

test("level of detail merges sub-pixel events per lane and row without losing the count", () => {
  // 0.05 µs events every 0.05 µs = 2 per pixel; one event already merged by the server (n = 7);
  // a long event in the middle; another row and lane untouched
  const rows = [];
  for (let k = 0; k < 40; k++) rows.push([7, 0, 10 + k * 0.05, 0.05, `tiny${k}`, 100 + k]);
  rows.push([7, 0, 12, 0.04, "server block", -1, 7]);
  rows.push([7, 0, 20, 30, "long", 1]);
  for (let k = 0; k < 10; k++) rows.push([7, 0, 60 + k * 0.02, 0.01, "late", 200 + k]);
  rows.push([7, 1, 10, 0.05, "own row", 300]);
  rows.push([3, 0, 10.1, 0.05, "own lane", 301]);
  rows.push([3, 0, 90, 0.01, "alone", 302]);
  rows.push([3, 0, 500, 0.01, "outside", 303]);
  const d = timeline(rows);
  const out = M.decimate(d, WIN);
  const total = arr => arr.reduce((s, v) => s + v, 0);
  const visible = d.n.filter((_, i) => d.ts[i] <= WIN.t1);
  assert.equal(total(out.n), total(visible), "every event in the window is counted once");
  const named = name => out.id.map((_, i) => i).filter(i => out.names[out.name[i]] === name);
  const tinies = out.id.map((_, i) => i).filter(i => out.lane[i] === 7 && out.row[i] === 0 && out.ts[i] < 20);
  assert.equal(tinies.length, 1, "the tiny events and the server's block merge into one block");
  const [b] = tinies;
  assert.equal(out.n[b], 40 + 7);
  assert.equal(out.id[b], -1);
  close(out.ts[b], 10);
  close(out.ts[b] + out.dur[b], 12.04);
  assert.deepEqual(named("long").map(i => [out.id[i], out.n[i]]), [[1, 1]], "a wide event stays itself");
  assert.deepEqual(named("late").map(i => out.n[i]), [10]);
  assert.deepEqual(named("own row").map(i => out.id[i]), [300], "a lone sub-pixel event keeps its id");
  assert.deepEqual(named("own lane").map(i => out.id[i]), [301]);
  assert.deepEqual(named("alone").map(i => out.id[i]), [302]);
  assert.deepEqual(named("outside"), []);
});

test("level of detail zoomed in: nothing is merged", () => {
  const d = timeline([[7, 0, 10, 0.05, "a", 1], [7, 0, 10.05, 0.05, "b", 2], [7, 0, 10.1, 0.05, "c", 3]]);
  const out = M.decimate(d, M.makeWindow(10, 10.2, 0, 1000));
  assert.deepEqual(out.id, [1, 2, 3]);
  assert.deepEqual(out.n, [1, 1, 1]);
});

test("the loaded data is reused only when it covers the view finely enough", () => {
  const data = { t0: 100, t1: 200, span: [0, 1000], bucket_us: 0.1 };
  assert.equal(M.covers(data, [120, 180], 600), true);
  assert.equal(M.covers(data, [120, 180], 601), false, "blocks coarser than a pixel");
  assert.equal(M.covers(data, [90, 180], 100), false, "starts before the data");
  assert.equal(M.covers({ ...data, t0: 0, t1: 1000, bucket_us: 1 }, [-50, 1100], 1000), true,
    "beyond the trace's span there is nothing to fetch");
  assert.equal(M.covers(null, [0, 1], 10), false);
});

test("a long label is cut in the middle to fit, keeping both ends", () => {
  const measure = s => s.length * 6;
  const label = "pt_autograd_0_with_a_very_long_thread_name (tid 123456)";
  assert.equal(M.middleTruncate("short", 100, measure), "short");
  const cut = M.middleTruncate(label, 120, measure);
  assert.ok(measure(cut) <= 120, cut);
  assert.equal(cut.length, 20);
  assert.ok(cut.includes("…"));
  assert.ok(label.startsWith(cut.split("…")[0]) && label.endsWith(cut.split("…")[1]));
  assert.ok(cut.endsWith("123456)"), "the thread id at the end stays");
});

test("what the data says of an event: name, kind, start and duration", () => {
  const d = timeline([[7, 0, 10, 20, "aten::mm", 5, 1, "cpu_op"], [3, 0, 12, 3, "gemm", 6, 1, "kernel"]]);
  assert.deepEqual(M.eventAt(d, M.indexOfId(d, 6)), { id: 6, name: "gemm", kind: "kernel", ts: 12, dur: 3, n: 1 });
  assert.equal(M.indexOfId(d, 99), null);
  assert.equal(M.indexOfId(d, -1), null, "a merged block is never selected by id");
});

test("memory counter lanes: layout, scale, the peak, the point in force at x", () => {
  // points are [ns since the start, allocated, reserved, memory id]; the peak is memory id 7
  const memory = { lanes: [
    { device: "CUDA 0", peak_id: 7, points: [[0, 100, 400, 1], [1000, 300, 400, 7], [2000, 200, 500, 9]] },
    { device: "CPU", peak_id: 2, points: [] },
  ] };
  const { lanes, height } = M.layoutCounters(memory, 50, 40, GAP);
  assert.equal(lanes.length, 1, "a device with no points gets no lane");
  assert.equal(height, 46);
  const [l] = lanes;
  assert.deepEqual([l.y, l.h, l.max, l.peak], [50, 40, 500, 1]);
  assert.equal(M.counterY(l, 0), 90);
  assert.equal(M.counterY(l, 500), 52);
  const win = M.makeWindow(0, 2, 100, 200);  // 0..2 µs on 200 px from x = 100
  assert.deepEqual(M.counterPath(l, win).map(p => p[0]), [100, 200, 300]);
  assert.equal(M.counterPointAt(l, win, 99), null, "before the first point");
  assert.equal(M.counterPointAt(l, win, 199), 0);
  assert.equal(M.counterPointAt(l, win, 200), 1);
  assert.equal(M.counterPointAt(l, win, 1000), 2);
  assert.equal(M.counterAt(lanes, 60), l);
  assert.equal(M.counterAt(lanes, 95), null);
});

test("the level of detail is the largest power of two of ns not above a pixel, as the server computes it", () => {
  assert.equal(M.bucketNs([0, 1], 1000), 1, "a pixel under 1 ns: 1 ns");
  assert.equal(M.bucketNs([0, 1000], 1000), 512, "1000 ns a pixel: 512");
  assert.equal(M.bucketNs([0, 1.024], 1), 1024, "exactly a power of two stays");
  assert.equal(M.bucketNs([0, 1.023], 1), 512);
  assert.equal(M.bucketNs([5, 4], 100), 1, "an empty or reversed view: the finest");
});

test("loaded data is reused only at the view's own level and inside the range it is complete over", () => {
  const data = { t0: 100, t1: 200, span: [0, 1000], bucket_ns: M.bucketNs([120, 180], 600) };
  assert.equal(M.reusable(data, [120, 180], 600), true);
  assert.equal(M.reusable(data, [100, 200], 600), M.bucketNs([100, 200], 600) === data.bucket_ns);
  assert.equal(M.reusable(data, [120, 180], 300), false, "another width: another level");
  assert.equal(M.reusable(data, [120, 130], 600), false, "zoomed in past the level");
  assert.equal(M.reusable(data, [99, 159], 600), false, "starts before the data");
  assert.equal(M.reusable(data, [141, 201], 600), false, "ends after it");
  assert.equal(M.reusable({ ...data, t0: 0, t1: 1000, bucket_ns: M.bucketNs([-50, 1100], 1000) }, [-50, 1100], 1000),
    true, "beyond the trace's span there is nothing to fetch");
  assert.equal(M.reusable(null, [0, 1], 10), false);
});

test("a pan's fetched side merges with the data in hand: each event and block once, in the server's order", () => {
  const held = { ...timeline([[1, 0, 10, 50, "long", 7], [1, 0, 95, 0.5, "blk", -1, 3], [2, 0, 20, 1, "k", 8, 1, "kernel"]]),
    t0: 0, t1: 100, span: [0, 1000], bucket_ns: 1024 };
  const side = { ...timeline([[1, 0, 95, 0.5, "blk", -1, 3], [2, 0, 150, 2, "k2", 9, 1, "kernel"], [1, 0, 120, 1, "x", 10]]),
    t0: 99.328, t1: 200, span: [0, 1000], bucket_ns: 1024 };
  const m = M.mergeWindows(held, side);
  assert.equal(m.t0, 0);
  assert.equal(m.t1, 200);
  assert.deepEqual(m.id, [7, -1, 10, 8, 9], "the block both hold is kept once; lane, row, start order");
  assert.deepEqual(m.id.map((_, i) => m.names[m.name[i]]), ["long", "blk", "x", "k", "k2"]);
  assert.deepEqual(m.id.map((_, i) => m.kinds[m.kind[i]]), ["cpu_op", "cpu_op", "cpu_op", "kernel", "kernel"]);
  const cut = M.mergeWindows(held, side, 90, 200);
  assert.equal(cut.t0, 90);
  assert.deepEqual(cut.id, [-1, 10, 9], "what ends before the kept range is dropped");
  assert.deepEqual(M.lacking(held, [50, 150], 100), null, "another level: a new window");
  const view = [50, 150], w = 100, at = { ...held, bucket_ns: M.bucketNs(view, w) };
  assert.deepEqual(M.lacking(at, view, w), [100, 150], "past the end only: from its end");
  assert.deepEqual(M.lacking({ ...at, t0: 60 }, view, w), null, "past both ends: a new window");
  assert.deepEqual(M.lacking({ ...at, t0: 60, t1: 1000 }, view, w), [50, 60], "before its start only: up to it");
});
