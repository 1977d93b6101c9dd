// @ts-check
// The diagnosis on the overview: a stacked bar per kind of step (and per step), and the levers as
// cards linking to the op-table rows they are about. Renders the DiagnosisPayload as sent; every
// number shown is one of its fields. A classic script that adds `profuse.diagnosis`.
(function (/** @type {any} the profuse namespace */ profuse) {
"use strict";

const { el, fmtUs, fmtCount } = profuse.dom;

// one colour per leaf; busy leaves are greens and blues, idle leaves reds and greys
const COLOURS = {
  "busy/gemm": "#1b7f3b", "busy/attention": "#2e9e5b", "busy/conv": "#4fb36f", "busy/norm": "#7cc68f",
  "busy/elementwise": "#a5d8a9", "busy/reduction": "#5f9ea0", "busy/other": "#8fb8c9",
  "busy/communication": "#3a6fb0", "busy/memcpy_h2d": "#c9a227", "busy/memcpy_d2h": "#d9b54a",
  "busy/memcpy_d2d": "#e6cb7a", "busy/memcpy_unknown": "#eed591", "busy/memset": "#efdca6", "idle/queued": "#7a1f5c", "idle/host_sync": "#b00020",
  "idle/launch_overhead": "#e0583b", "idle/input": "#d4a017", "idle/cpu_other": "#f08c6c", "idle/no_work": "#bdbdbd",
  "idle/not_recorded": "#8d8d8d", idle: "#bdbdbd", "unrecorded/wait": "#c8b6d8",
  // a CPU-only trace's leaves: the CPU's classes, each its own colour, Python apart
  "cpu/gemm": "#1b7f3b", "cpu/attention": "#2e9e5b", "cpu/conv": "#4fb36f", "cpu/norm": "#7cc68f",
  "cpu/elementwise": "#a5d8a9", "cpu/reduction": "#5f9ea0", "cpu/communication": "#3a6fb0",
  "cpu/other": "#8fb8c9", "cpu/python": "#9c6ade", "idle/wait": "#d8d8d8",
};

function colour(key) {
  return COLOURS[key] || (key.startsWith("cpu/") ? "#2e9e5b" : "#999");
}

/** One stacked bar: a segment per leaf, its width its share of the span. */
function stack(budget, label) {
  return el("div", { class: "stack-row" },
    el("span", { class: "stack-label" }, label),
    el("div", { class: "stack", role: "img", "aria-label": label },
      budget.filter(l => l.pct > 0).map(l => el("span", {
        class: "seg", title: `${l.key}: ${fmtUs(l.us)} (${l.pct}%)`, dataset: { key: l.key, us: String(l.us) },
        style: `width:${l.pct}%;background:${colour(l.key)}`,
      }))));
}

/**
 * Every leaf with time (by its µs: a leaf's pct is rounded to 0.01%, so a 2 ms leaf of a 43 s window reads 0%),
 * each with its µs and share; a leaf too small for either to show reads in ns and "<0.01%".
 */
function legend(budget) {
  const time = us => (us < 0.05 ? `${Math.round(us * 1e3)} ns` : fmtUs(us));
  return el("div", { class: "legend muted" }, budget.filter(l => l.us > 0).map(l => el("span", { class: "leg", dataset: { key: l.key, us: String(l.us) } },
    el("span", { class: "swatch", style: `background:${colour(l.key)}` }), `${l.key} ${time(l.us)} (${l.pct > 0 ? l.pct : "<0.01"}%)`)));
}

/** A lever's card: gain, how, evidence, and links to the rows it is about. */
function card(lv, st, go) {
  const links = lv.ops.map(op => el("a", {
    href: "#", class: "lever-op", dataset: { op },
    on: { click: e => { e.preventDefault(); go({ view: "ops", run: st.run, op }); } },
  }, op));
  const kernels = lv.kernels.map(k => el("a", {
    href: "#", class: "lever-kernel", title: k,
    on: { click: e => { e.preventDefault(); go({ view: "timeline", run: st.run }); } },
  }, k.length > 60 ? k.slice(0, 59) + "…" : k));
  return el("div", { class: "card lever", dataset: { kind: lv.kind, gain: String(lv.gain_us) } },
    el("div", {}, el("b", {}, lv.kind), " ", lv.target),
    el("div", { class: "big" }, `save up to ${fmtUs(lv.gain_us)} (${lv.share_pct.toFixed(0)}%${lv.share_of ? " of " + lv.share_of : ""})`),
    el("div", { class: "muted" }, `confidence: ${lv.confidence} · evidence: ${lv.grade} · ${lv.evidence}`),
    el("div", { class: "rec" }, lv.how),
    links.length ? el("div", {}, "ops: ", links) : null,
    kernels.length ? el("div", { class: "muted" }, "kernels (timeline): ", kernels) : null);
}

/** The diagnosis section (returned, for the caller to place): bars, warm-up, notes, lever cards,
 * small items, combined gain. */
function render(d, st, go) {
  const box = el("section", { id: "diagnosis" });
  box.append(el("h2", {}, `Where the time went (${d.scope === "steps" ? "steady steps" : "active window"}, ${fmtUs(d.span_us)})`));
  const serving = g => [["batch", g.batch], ["tokens", g.tokens], ["KV tokens", g.kv_tokens]]
    .filter(([, v]) => v !== null && v !== undefined).map(([w, v]) => `${w} ${fmtCount(v)}`).join(", ");
  const rows = d.groups.length ? d.groups.map(g => stack(g.budget, `${g.kind} ×${g.count} (${fmtUs(g.span_us)}${serving(g) ? ", " + serving(g) + " per step" : ""})`))
    : [stack(d.budget, "active window")];
  box.append(...rows, legend(d.budget));
  if (d.steps.length > 1) {
    box.append(el("details", {}, el("summary", {}, `each step (${d.steps.length})`),
      d.steps.map(s => stack(s.budget, `${s.warmup ? "warm-up " : ""}${s.name} (${fmtUs(s.span_us)})`))));
  }
  for (const n of d.notes) box.append(el("p", { class: "warn" }, n));
  // the part of it that levers graded outside the trace take, said apart (as the console says it)
  const outside = d.combined_outside_us > 0 ? `; ${fmtUs(d.combined_outside_us)} of it outside the trace` : "";
  box.append(el("h2", {}, `Levers (pulling all: ${fmtUs(d.combined_gain_us)} of ${fmtUs(d.span_us)}, no time counted twice${outside})`));
  // the 1% fold is of the device window, the span less its unrecorded wait (as the console says it)
  const base = d.window_us < d.span_us ? `the device window (${fmtUs(d.window_us)})` : "the span";
  box.append(d.levers.length ? el("div", { class: "cards", id: "levers" }, d.levers.map(lv => card(lv, st, go)))
    : el("p", { class: "muted" }, `no lever above 1% of ${base}`));
  if (d.small_items.count) {
    box.append(el("p", { class: "muted", id: "small-items" },
      `small items: ${d.small_items.count} lever(s) under 1% of ${base}, ${fmtUs(d.small_items.gain_us)} together (${d.small_items.kinds.join(", ")})`));
  }
  return box;
}

profuse.diagnosis = { render };
})(globalThis.profuse = globalThis.profuse || {});
