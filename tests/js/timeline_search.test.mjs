// The timeline search of a report's embedded window (timeline_model.js searchWindow) and the view a
// match is shown in (viewAround): pure functions, run by `make test` (node --test tests/js/).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import vm from "node:vm";

const file = new URL("../../src/profuse/frontend/static/timeline_model.js", import.meta.url);
vm.runInThisContext(readFileSync(file, "utf8"), { filename: file.pathname });
const M = globalThis.profuse.timelineModel;

/** A window of columns from rows of [lane, ts, dur, name, id, kind]. */
function window_(rows) {
  const names = [], kinds = [];
  const intern = (list, s) => (list.includes(s) ? list.indexOf(s) : list.push(s) - 1);
  const d = { names, kinds, lane: [], row: [], ts: [], dur: [], name: [], id: [], n: [], kind: [] };
  for (const [lane, ts, dur, name, id, kind = "cpu_op"] of rows) {
    d.lane.push(lane); d.row.push(0); d.ts.push(ts); d.dur.push(dur); d.name.push(intern(names, name));
    d.id.push(id); d.n.push(id < 0 ? 3 : 1); d.kind.push(intern(kinds, kind));
  }
  return d;
}

test("finds names holding the text whatever its case, in time order, never a merged block", () => {
  const d = window_([[2, 50, 5, "aten::linear", 7], [0, 10, 5, "ATEN::Linear_backward", 3],
    [1, 10, 5, "aten::linear", 2], [0, 20, 1, "aten::linear", -1], [0, 30, 5, "aten::mm", 9]]);
  const found = M.searchWindow(d, "aTen::LINEAR");
  assert.equal(found.total, 3);
  assert.deepEqual(found.matches.map(m => m.id), [2, 3, 7]);  // ts 10 (ids 2 < 3), then 50
  assert.deepEqual(found.matches[2], { id: 7, name: "aten::linear", kind: "cpu_op", ts: 50, dur: 5, n: 1, lane: 2 });
});

test("limits the list, counts them all; nothing for an empty text or no data", () => {
  const d = window_(Array.from({ length: 10 }, (_, i) => [0, i, 1, `op${i}`, i]));
  const found = M.searchWindow(d, "op", 4);
  assert.equal(found.total, 10);
  assert.deepEqual(found.matches.map(m => m.id), [0, 1, 2, 3]);
  assert.deepEqual(M.searchWindow(d, "").matches, []);
  assert.equal(M.searchWindow(null, "op").total, 0);
  assert.equal(M.searchWindow(d, "<img src=x>").total, 0);
});

test("the view around a match holds it in its middle third", () => {
  const [a, b] = M.viewAround(100, 30);
  assert.ok(a <= 100 && 130 <= b);
  assert.ok(Math.abs((a + b) / 2 - 115) < 1e-9);
  assert.ok(b - a >= 90);
  const [c, e] = M.viewAround(5, 0);  // a zero-length event still gets a view of its own
  assert.ok(c < 5 && 5 < e);
});
