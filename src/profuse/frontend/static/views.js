// @ts-check
// The explorer's views. Each renders into `main` from JSON; strings go in as text only.
// A classic script (body not indented) that adds `profuse.views`: view(main, st, go, life), where
// life.onLeave(fn) runs fn when the route changes (a timeline's destroy).
(function (/** @type {any} the profuse namespace */ profuse) {
"use strict";

const { el, fmtBytes, fmtUs, fmtUsOrDash, table } = profuse.dom;
const { Timeline } = profuse.timelineView;
const memBytes = profuse.timelineView.fmtBytes;  // binary units, signed: an op's self memory may be a net free

/** @type {Source | null} */
let source = null;

/** Every view reads from this source from now on (app.start calls it once). */
function bind(src) {
  source = src;
}

/** Whether the data is embedded in an HTML report (no server to ask). */
function isReport() {
  return !source.live;
}

/** The JSON at an API path ("/api/0/overview"), or null where the source has none. */
function get(path) {
  return source.get(path);
}

/** Trace health: one line of counts, then each finding with what it changes and a better capture. */
function health(h) {
  if (!h) return el("span", {});
  const linked = h.linked === h.device_activities ? "all" : String(h.linked);
  return el("section", { id: "health" },
    el("h2", {}, "Trace health"),
    el("p", { class: "muted" }, `${h.device_activities} device activities (${linked} with their launch call) · ${h.launch_calls} launch calls · steps: ${h.steps} (${h.steps_from})`),
    h.findings.length ? el("ul", { class: "findings" }, h.findings.map(f => el("li", { dataset: { key: f.key } },
      el("b", {}, f.text), ": ", f.effect, el("div", { class: "muted" }, "next capture: " + f.fix)))) : el("span", {}));
}

/**
 * The Overview. Live, its head (the summary, device time by category, trace health) is drawn first, while
 * the diagnosis is computed (#advice-state pending), then the whole (#advice-state done); a report draws
 * the whole at once.
 */
async function overview(main, st, go, life) {
  if (source.live) {
    const head = await get(`/api/${st.run}/overview?advice=later`);
    if (life && life.left) return;
    if (head && !head.advice) {
      drawOverview(main, head, st, go, true);
      main.append(el("p", { class: "muted", id: "advice-state", dataset: { state: "pending" } },
        "diagnosing the trace: the time budget, the levers and the advice follow…"));
      performance.mark("profuse:overview-first");
    }
  }
  const o = await get(`/api/${st.run}/overview`);
  if (life && life.left) return;
  main.replaceChildren();
  drawOverview(main, o, st, go);
  if (!performance.getEntriesByName("profuse:overview-first").length) performance.mark("profuse:overview-first");
  performance.mark("profuse:overview-advice");
  if (source.live) main.append(el("span", { id: "advice-state", dataset: { state: "done" } }));
}

/** One Overview answer drawn into main (see overview); ``pending``: its advice is still being computed. */
function drawOverview(main, o, st, go, pending = false) {
  if (!o) return main.append(el("p", {}, "no data"));
  const t = o.trace, n = o.totals, dev = o.device_label, advice = o.advice;
  const total = Object.values(o.categories).reduce((a, b) => a + b, 0) || 1;
  main.append(
    el("h2", {}, t.path),
    el("p", { class: "muted" }, `${t.device_kind}${t.device_name ? " (" + t.device_name + ")" : ""} · ${t.events.toLocaleString("en-US")} events · span ${fmtUs(t.span_us)} · ${dev} time ${fmtUs(n.device_us)}${n.overlap_us ? ` (${fmtUs(n.overlap_us)} of it counted more than once where activities overlap: busy ${fmtUs(n.device_us - n.overlap_us)})` : ""} · ${n.kernels_linked.toLocaleString("en-US")} of ${n.kernels.toLocaleString("en-US")} device events linked to the op that launched them`),
    el("h2", {}, o.categories_of === "budget" ? "Where the time went, by category (the budget above)" : `${dev} time by category`),
    el("div", { class: "cards" }, Object.entries(o.categories).map(([k, v]) =>
      el("div", { class: "card", dataset: { category: k } }, el("div", { class: "muted" }, k), el("div", { class: "big" }, fmtUs(v)),
        el("span", { class: "bar", style: `width:${Math.round(180 * v / total)}px` })))),
    health(o.health),
    el("h2", {}, "Advice"));
  // the diagnosis opens the overview, under the trace's name
  if (advice && advice.diagnosis) main.children[1].after(profuse.diagnosis.render(advice.diagnosis, st, go));
  if (!advice && pending) return;
  if (!advice) return main.append(el("p", { class: "muted", id: "no-advice" }, "advice not computed (--no-advice)"));
  const cands = advice.fusion_candidates;
  main.append(
    cands.length ? el("div", { class: "cards", id: "advice" }, cands.map(c => el("div", { class: "card advice" },
      el("div", {}, el("b", {}, c.pattern), " in ", c.scope),
      el("div", { class: "muted" }, `${c.instances} calls · ${c.kernels_per_instance} kernels per call · ${fmtUs(c.device_us)} · ${c.bytes_now ? `${fmtBytes(c.bytes_now)} → ${fmtBytes(c.bytes_fused)}` : "bytes not recorded"}`),
      el("div", { class: "big" }, "save ~" + fmtUs(c.predicted_saving_us)),
      el("div", { class: "muted" }, `confidence: ${c.confidence} · model: ${c.saving_model}`),
      el("div", { class: "rec" }, c.recommendation)))) : el("p", { class: "muted" }, "no fusion candidates"),
    el("h2", {}, "Hotspots"),
    table([{ key: "kind", label: "Kind" }, { key: "name", label: "Name", name: true },
      { key: "calls", label: "Calls" }, { key: "device_us", label: dev, fmt: fmtUs },
      { key: "share_pct", label: "Share", fmt: v => v.toFixed(1) + "%" }], advice.hotspots),
  );
  if (advice.interruptions.length) {
    main.append(el("h2", {}, "Interruptions"), table([
      { key: "scope", label: "Scope", name: true }, { key: "instances", label: "Calls" },
      { key: "kernels_per_instance", label: "Kernels/call" }, { key: "busy_us", label: "Busy", fmt: fmtUs },
      { key: "idle_us", label: "Idle", fmt: fmtUs },
      // the time budget's unrecorded waits, where a scope's window holds any: never called idle
      ...(advice.interruptions.some(i => i.unrecorded_us) ? [{ key: "unrecorded_us", label: "Unrecorded", fmt: fmtUs }] : []),
      { key: "busy_pct", label: "Busy %", fmt: v => v + "%" },
      { key: "launch_bound", label: "", fmt: v => v ? "launch-bound" : "" }], advice.interruptions));
  }
}

/** A grid or block as recorded ("[564, 1, 1]") written 564×1×1; the text itself where it is not a list. */
function fmtDim(v) {
  if (v === null || v === undefined) return "";
  try {
    const a = JSON.parse(v);
    return Array.isArray(a) ? a.join("×") : String(v);
  } catch (e) {
    return String(v);
  }
}

/**
 * A kernel's launch configuration as a cell: the most used one's grid or block (`which`), and how many
 * other configurations it was launched with.
 */
function launchCell(launches, name, which) {
  const found = launches && launches.kernels[name];
  if (!found || !found.length) return "";
  const others = found.length - 1 + ((launches.more || {})[name] || 0);
  return fmtDim(found[0][which]) + (others ? ` (+${others} other)` : "");
}

/**
 * An ops row's kernels: what they sum to (the row's device total, as its cell shows it) and the list, each kernel
 * with the part the row launched itself (its self device time) unless the row is a kernel.
 * @param {OpKernels} k @param {OpsRow} r @param {Ops} d @param {((x: any) => any)|null} withLaunch
 */
function kernelList(k, r, d, withLaunch) {
  const dev = d.device_label, group = d.group_by;
  if (d.cpu_only) return el("p", { class: "muted" }, "a CPU-only trace has no kernels");
  if (!k.kernels.length) return el("p", { class: "muted" }, `no device work under it (${dev} total ${fmtUs(r.device_total_us)})`);
  const what = group === "module" ? `run inside ${r.name}` : `launched by ${r.name} or the ops under it`;
  const self = group === "module" ? `with ${r.name} as their innermost nn.Module` : "its own calls launched";
  const sum = el("p", { class: "muted", id: "kernels-sum" }, group === "kernel" ? `${dev} total ${fmtUs(r.device_total_us)}`
    : `${dev} total ${fmtUs(r.device_total_us)}: the ${k.kernels.length} kernel name(s) below, ${what}. ` +
      `Self: the part ${self} (self ${dev} ${fmtUs(r.self_device_us)}).`);
  /** @type {Column[]} */
  const kcols = [{ key: "name", label: "Kernel", name: true }, { key: "calls", label: "Calls" },
    { key: "device_us", label: `${dev} time`, fmt: fmtUs }];
  if (group !== "kernel") kcols.push({ key: "self_calls", label: "Self calls" }, { key: "self_device_us", label: `Self ${dev}`, fmt: fmtUs });
  if (withLaunch) kcols.push({ key: "grid", label: "Grid" }, { key: "block", label: "Block" });
  return el("div", {}, sum, table(kcols, withLaunch ? k.kernels.map(withLaunch) : k.kernels));
}

async function ops(main, st, go) {
  const d = await get(`/api/${st.run}/ops?group_by=${st.group || "op"}`);
  if (!d) return main.append(el("p", {}, "no data"));
  const group = d.group_by;  // the report embeds one grouping: the one it was made with
  // kernels' grid and block where the trace records them (TensorBoard's kernel view)
  const launches = d.cpu_only ? null : await get(`/api/${st.run}/kernel_launches`);
  const hasLaunches = !!(launches && Object.keys(launches.kernels).length);
  const withLaunch = r => ({ ...r, grid: launchCell(launches, r.name, "grid"), block: launchCell(launches, r.name, "block") });
  const rows = d.rows.map(r => ({ ...r, pct: d.device_us ? 100 * r.self_device_us / d.device_us : 0 }))
    .map(r => (group === "kernel" && hasLaunches ? withLaunch(r) : r));
  const dev = d.device_label;
  const filter = el("input", { placeholder: "filter by name", id: "ops-filter", value: st.q || "" });
  const select = el("select", { id: "group-by" }, (isReport() ? [group] : ["op", "shape", "module", "kernel"]).map(g =>
    el("option", g === group ? { value: g, selected: "" } : { value: g }, g)));
  select.addEventListener("change", () => go({ ...st, group: select.value, op: "" }));
  const holder = el("div");
  const kernelsBox = el("div", { id: "op-kernels" });
  /** @type {Column[]} */
  const cols = [{ key: "name", label: "Name", name: true }];
  if (group === "shape") cols.push({ key: "shape", label: "Input shapes", name: true });
  // null: the column does not apply to the grouping (a module class's self CPU, a kernel's CPU time)
  cols.push({ key: "calls", label: "Calls" }, { key: "self_cpu_us", label: "Self CPU", fmt: fmtUsOrDash },
    { key: "cpu_total_us", label: "CPU total", fmt: fmtUsOrDash });
  // a CPU-only trace's device is the CPU: its columns once, and no kernels
  if (!d.cpu_only) cols.push({ key: "self_device_us", label: `Self ${dev}`, fmt: fmtUs },
    { key: "device_total_us", label: `${dev} total`, fmt: fmtUs });
  cols.push({ key: "pct", label: `${dev} %`, fmt: v => v.toFixed(1) + "%" });
  if (!d.cpu_only) cols.push({ key: "kernels", label: "Kernels" });
  if (group === "kernel" && hasLaunches) cols.push({ key: "grid", label: "Grid" }, { key: "block", label: "Block" });
  if (rows.length && rows[0].cpu_mem_bytes !== undefined) {  // the trace has memory events
    cols.push({ key: "cpu_mem_bytes", label: "CPU Mem", fmt: memBytes }, { key: "self_cpu_mem_bytes", label: "Self CPU Mem", fmt: memBytes });
    if (!d.cpu_only) cols.push({ key: "device_mem_bytes", label: `${dev} Mem`, fmt: memBytes },
      { key: "self_device_mem_bytes", label: `Self ${dev} Mem`, fmt: memBytes });
  }
  let openKey = st.op || null, opening = 0;
  // an opened row lists the kernels under it (explorer: asked for; report: embedded per shown row)
  const openRow = async r => {
    openKey = r.key;
    const mine = ++opening;
    go({ ...st, group, op: r.key }, { replace: true, rerender: false });
    kernelsBox.replaceChildren(el("p", { class: "muted" }, "loading kernels…"));
    render();  // the box now sits in a row right under the clicked one
    const found = await get(`/api/${st.run}/op_kernels?group_by=${group}&key=${encodeURIComponent(r.key)}`);
    if (mine !== opening) return;  // another row was opened meanwhile
    const k = isReport() ? found && found[r.key] : found;
    kernelsBox.replaceChildren(el("h2", {}, `Kernels under ${r.name}${r.shape ? " " + r.shape : ""}`));
    if (!k) return kernelsBox.append(el("p", { class: "muted" }, "no kernel list for this row"));
    kernelsBox.append(kernelList(k, r, d, hasLaunches ? withLaunch : null));
    // the device events no row holds, per reason, in the console's words
    if (k.unlinked.length) {
      const n = k.unlinked.reduce((a, u) => a + u.events, 0);
      kernelsBox.append(el("div", { class: "muted", id: "under-no-row" },
        el("p", {}, `${n.toLocaleString("en-US")} device event(s) of this trace are under no row, so no list shows them:`),
        el("ul", {}, k.unlinked.map(u => el("li", { dataset: { reason: u.reason } }, `${u.events.toLocaleString("en-US")} ${u.text}`)))));
    }
    kernelsBox.scrollIntoView({ block: "nearest" });
  };
  const render = () => {
    const q = filter.value.toLowerCase();
    holder.replaceChildren(table(cols, rows.filter(r => r.name.toLowerCase().includes(q)),
      { onRow: openRow, selected: r => r.key === openKey, detail: r => r.key === openKey ? kernelsBox : null }));
  };
  filter.addEventListener("input", render);
  const shown = d.total_rows > rows.length ? `${rows.length} of ${d.total_rows} rows` : `${rows.length} rows`;
  main.append(el("div", { class: "toolbar" }, "Group by ", select, filter, el("span", { class: "muted" }, shown),
    el("span", { class: "muted" }, " · click a row (or Enter) to list its kernels")), holder);
  render();
  if (!d.rows.length && group === "module") {
    main.append(el("p", { class: "muted", id: "no-modules" }, "No nn.Module scopes in this trace, so there is nothing to group by module: " +
      "record with python stacks (torch.profiler with_stack=True, or profuse's default streams)."));
  }
  const initial = openKey && rows.find(r => r.key === openKey);
  if (initial) await openRow(initial);
}

/** The explorer's shapes, launch configuration and Python stack of the selected event, once fetched. */
let more = { id: null, run: null, node: null, ticket: 0 };

/** A JSON text as recorded, parsed (null where it is absent or not JSON). */
function parsed(text) {
  if (text === null || text === undefined) return null;
  try { return JSON.parse(text); } catch (e) { return null; }
}

/** The event's input shapes with their types, its scalar arguments, grid and block, and Python stack. */
function moreNode(d, pick) {
  const node = el("div", { id: "event-more" });
  const dims = parsed(d.input_dims), types = parsed(d.input_types) || [], scalars = parsed(d.concrete_inputs) || [];
  if (Array.isArray(dims) && dims.length) {
    const shape = dim => (Array.isArray(dim) && dim.length ? JSON.stringify(dim).split(",").join(", ") : "");
    const parts = dims.map((dim, i) => `${types[i] || ""}${shape(dim)}`.trim() || "·");
    node.append(el("div", { id: "event-shapes" }, "inputs: ", el("code", {}, parts.join(", "))));
  }
  const given = Array.isArray(scalars) ? scalars.filter(v => v !== "" && v !== null) : [];
  if (given.length) node.append(el("div", { id: "event-scalars" }, "scalar arguments: ", el("code", {}, given.join(", "))));
  if (d.grid || d.block) {
    node.append(el("div", { id: "event-launch" }, `grid ${fmtDim(d.grid) || "?"} · block ${fmtDim(d.block) || "?"}`));
  }
  if (d.stack.length) {
    // innermost first; a click selects the frame on the timeline
    node.append(el("div", {}, "Python stack (innermost first):"), el("ol", { id: "event-stack" }, d.stack.map(f => {
      const li = el("li", { dataset: { id: f.id } }, f.name);
      if (pick) { li.style.cursor = "pointer"; li.addEventListener("click", () => pick(f.id)); }
      return li;
    })));
    if (d.stack_more) node.append(el("div", { class: "muted" }, `${d.stack_more} outer frame(s) not listed`));
  }
  return node;
}

/** Fetches (explorer only) what the details pane adds for event `id`, and shows it under the event when it comes. */
async function eventMore(box, id, run, pick) {
  const mine = ++more.ticket;
  if (!source.live || id === null || id === undefined || id < 0) return;
  if (more.node && more.id === id && more.run === run) {  // selected again: the node already fetched, once
    if (box.dataset.id === String(id) && !box.contains(more.node)) box.append(more.node);
    return;
  }
  const d = await get(`/api/${run}/event_detail/${id}`);
  if (mine !== more.ticket || !d) return;
  more = { id, run, node: moreNode(d, pick), ticket: mine };
  if (box.dataset.id === String(id)) box.append(more.node);
}

function details(box, ev, st, pick) {
  box.replaceChildren();
  box.dataset.id = ev && !(ev.n > 1) ? String(ev.id) : "";  // a merged block is no one event
  if (!ev) return box.append(el("span", { class: "muted" }, "click an event to select it"));
  if (ev.n > 1) {
    // a merged block: its extent is not any one event's duration, so only the extent is given
    box.append(el("div", {}, `${ev.n} events merged, the longest `, el("b", {}, ev.name),
      el("span", { class: "muted" }, ` (${ev.kind}) · together they span ${fmtUs(ev.dur)} from ${fmtUs(ev.ts)}`)));
  } else {
    box.append(el("div", {}, el("b", {}, ev.name), el("span", { class: "muted" }, ` · ${ev.kind} · starts ${fmtUs(ev.ts)} · lasts ${fmtUs(ev.dur)}`)));
  }
  for (const r of ev.replays || []) {
    box.append(el("div", { class: "replay" }, `graph replay: ${r.kernels} kernel(s) from ${fmtUs(r.ts)} to ${fmtUs(r.end)}`));
  }
  if (ev.kernels && ev.kernels.length) {
    // each kernel is selectable: a click selects it on the timeline
    box.append(el("div", {}, `${ev.kernels.length} kernel(s) launched:`), el("ul", { id: "kernel-list" },
      ev.kernels.map(k => {
        // a long name is cut at its end to the box's width, all of it on hover; the times always show
        const li = el("li", { dataset: { id: k.id } }, el("span", { class: "kname", title: k.name }, k.name),
          el("span", { class: "when" }, ` — at ${fmtUs(k.ts)}, ${fmtUs(k.dur)}${k.graph ? " (graph)" : ""}`));
        if (pick) { li.style.cursor = "pointer"; li.addEventListener("click", () => pick(k.id)); }
        return li;
      })));
  }
  if (ev.launches && ev.launches.length) box.append(el("div", { class: "muted" }, `${ev.launches.length} launch call(s)`));
  if (ev.launch) box.append(el("div", {}, "launched by ", el("b", {}, ev.launch.name), ` at ${fmtUs(ev.launch.ts)}`));
  if (ev.ops && ev.ops.length) box.append(el("div", { id: "op-chain" }, "op: ", ev.ops.map(o => o.name).join("  ←  ")));
  if (ev.modules && ev.modules.length) box.append(el("div", { id: "module-chain" }, "module: ", ev.modules.map(m => m.name).join("  ←  ")));
  if (ev.unlinked) box.append(el("div", { class: "warn" }, `not linked: ${ev.unlinked}`));
  // what the explorer fetched for this event of this run already (eventMore appends it once it comes)
  if (more.node && more.id === ev.id && more.run === st.run && !box.contains(more.node)) box.append(more.node);
}

/** What a click on a memory lane found: the totals there and what is live, by the op and module that allocated it. */
function memoryDetails(box, m) {
  box.replaceChildren(el("div", { id: "memory-point" }, el("b", {}, m.device), ` at ${fmtUs(m.ts_ns / 1e3)}: allocated `,
    el("b", {}, memBytes(m.allocated_bytes)), `, reserved ${memBytes(m.reserved_bytes)}`, m.peak ? " (the peak)" : ""));
  if (!m.live) {
    box.append(el("div", { class: "muted" }, "what is live here: open the trace in the explorer (a report knows it at the peak)"));
    return;
  }
  const rows = m.live.map(g => el("tr", {}, el("td", {}, g.op), el("td", {}, g.module || ""),
    el("td", { class: "num" }, memBytes(g.bytes)), el("td", { class: "num" }, g.allocations ? String(g.allocations) : "")));
  box.append(el("table", { id: "memory-live" }, el("thead", {}, el("tr", {}, el("th", {}, "live: allocated by"),
    el("th", {}, "module"), el("th", {}, "bytes"), el("th", {}, "allocations"))), el("tbody", {}, ...rows)));
}

async function timeline(main, st, go, life) {
  const wrap = el("div", { id: "tl-wrap" });
  const box = el("div", { id: "details" });
  const hint = isReport() ? "click an event for its name, kind, start and duration"
    : "click an op or a kernel for its launches, kernels and chains";
  const search = el("input", { id: "tl-search", type: "search", placeholder: "find by name  ( / )",
    "aria-label": "find events by name", autocomplete: "off" });
  const found = el("span", { class: "muted", id: "tl-found", role: "status" });
  main.append(el("div", { class: "toolbar muted" }, `wheel or W/S to zoom · drag or A/D to pan · 0 to reset · ${hint}`),
    el("div", { class: "toolbar" }, search, found, el("span", { class: "muted" }, "Enter: next · Shift+Enter: previous · Esc: clear")),
    wrap, box);
  let cur = st;  // the state as the URL now holds it: zooms and selections replace it in place
  const tl = new Timeline(wrap, source, st.run, {
    onSelect: (ev, id) => {
      details(box, ev, cur, pick);
      eventMore(box, id, cur.run, pick);
      go(cur = { ...cur, sel: id ?? "" }, { replace: true, rerender: false });
    },
    onView: v => go(cur = { ...cur, t0: v[0].toFixed(3), t1: v[1].toFixed(3) }, { replace: true, rerender: false }),
    onMemory: m => memoryDetails(box, m),
  });
  const pick = id => tl.select(id).then(ev => { tl.reveal(id); return ev; });
  window.profuseTimeline = tl;  // for tests: positions, highlight and arrows of what is drawn
  // the search box: Enter shows the next event whose name holds the text, Shift+Enter the previous
  let hits = null, at = -1;
  const step = async dir => {
    const q = search.value.trim();
    if (!q) { hits = null; found.textContent = ""; return; }
    if (!hits || hits.query !== q) { hits = await tl.find(q); at = -1; }
    if (!hits.matches.length) { found.textContent = "no event's name holds that"; return; }
    at = (at + dir + hits.matches.length) % hits.matches.length;
    const listed = hits.total > hits.matches.length ? ` (the first ${hits.matches.length} in time)` : "";
    found.textContent = `${at + 1} of ${hits.total}${listed}`;
    await tl.jump(hits.matches[at]);
  };
  search.addEventListener("keydown", e => {
    if (e.key === "Enter") { e.preventDefault(); step(e.shiftKey ? -1 : 1); }
    else if (e.key === "Escape") { search.value = ""; hits = null; found.textContent = ""; tl.canvas.focus(); }
  });
  const slash = e => {  // "/" anywhere on the timeline view goes to the search box
    if (e.key === "/" && document.activeElement !== search) { e.preventDefault(); search.focus(); }
  };
  document.addEventListener("keydown", slash);
  life.onLeave(() => {
    document.removeEventListener("keydown", slash);
    tl.destroy();
    if (window.profuseTimeline === tl) delete window.profuseTimeline;
  });
  const viewOf = s => (s.t0 && s.t1 ? [parseFloat(s.t0), parseFloat(s.t1)] : null);
  const selOf = s => (s.sel !== undefined && s.sel !== "" ? parseInt(s.sel, 10) : null);
  await tl.init(viewOf(st));
  details(box, null, st);
  if (selOf(st) !== null) details(box, await pick(selOf(st)), st, pick);
  life.onUpdate(async next => {  // a URL with another window or selection: zoom and select in place
    cur = next;
    await tl.show(viewOf(next));
    if (selOf(next) !== tl.selected) details(box, selOf(next) === null ? await tl.select(null) : await pick(selOf(next)), next, pick);
    return true;
  });
}

async function modules(main, st) {
  const d = await get(`/api/${st.run}/modules`);
  if (!d || !d.nodes.length) return main.append(el("p", { class: "muted" }, "no nn.Module scopes in this trace (record with the python stream)"));
  main.append(table([
    { key: "name", label: "Module", name: true, fmt: (v, r) => el("span", { style: `padding-left:${r.depth * 14}px` }, v) },
    { key: "calls", label: "Calls" }, { key: "device_us", label: `${d.device_label} time`, fmt: fmtUs },
    { key: "cpu_us", label: "CPU time", fmt: fmtUs }], d.nodes, { sortable: false }));
}

/**
 * The Python call tree (pyinstrument's view): call paths with calls, total, self and Python time, a node
 * opened or closed by a click (or Enter), the largest opened at first; a filter shows the nodes whose
 * function or file holds its text, with the nodes above them.
 */
async function calltree(main, st) {
  const d = await get(`/api/${st.run}/calltree`);
  if (!d || !d.nodes.length) {
    return main.append(el("p", { class: "muted", id: "no-calltree" }, "no python_function events in this trace: record with " +
      "torch.profiler's with_stack=True for the Python call tree"));
  }
  const nodes = d.nodes, total = d.total_us || 1;
  const kids = nodes.map(() => []);
  for (const n of nodes) if (n.parent >= 0) kids[n.parent].push(n.id);
  // opened at first: every node over a tenth of the time
  const open = new Set(nodes.filter(n => kids[n.id].length && n.total_us >= total / 10).map(n => n.id));
  const filter = el("input", { placeholder: "filter by function or file", id: "calltree-filter" });
  const holder = el("div");
  const row = (n, shown) => {
    const has = kids[n.id].length > 0;
    const mark = has ? (open.has(n.id) || shown ? "▾ " : "▸ ") : "  ";
    const name = n.folded ? el("i", { class: "muted" }, `other (${n.folded} call paths under ${d.min_share_pct}%)`)
      : el("span", {}, el("b", {}, n.function), n.location ? el("span", { class: "muted" }, "  " + n.location) : "");
    const tr = el("tr", { dataset: { node: n.id } },
      el("td", { class: "name" }, el("span", { class: "tree", style: `padding-left:${n.depth * 14}px` }, mark), name),
      el("td", {}, String(n.calls)), el("td", {}, fmtUs(n.total_us)), el("td", {}, fmtUs(n.self_us)),
      el("td", {}, fmtUs(n.python_us)), el("td", {}, (100 * n.total_us / total).toFixed(1) + "%"));
    tr.title = n.name;
    if (has) {
      tr.tabIndex = 0; tr.style.cursor = "pointer";
      const toggle = () => { if (open.has(n.id)) open.delete(n.id); else open.add(n.id); render(); };
      tr.addEventListener("click", toggle);
      tr.addEventListener("keydown", e => { if (e.key === "Enter") toggle(); });
    }
    return tr;
  };
  const render = () => {
    const q = filter.value.toLowerCase();
    // with a filter: the matching nodes and every node above one
    const keep = new Set();
    if (q) for (const n of nodes) if (!n.folded && (n.name.toLowerCase().includes(q))) for (let i = n.id; i >= 0 && !keep.has(i); i = nodes[i].parent) keep.add(i);
    const rows = [];
    for (const n of nodes) {
      if (q ? !keep.has(n.id) : (n.parent >= 0 && !shownAll(n.parent))) continue;
      rows.push(row(n, q !== ""));
    }
    holder.replaceChildren(el("table", { id: "calltree" }, el("thead", {}, el("tr", {}, el("th", { class: "name" }, "Function"),
      el("th", {}, "Calls"), el("th", {}, "Total"), el("th", {}, "Self"), el("th", {}, "Python"), el("th", {}, "Share"))),
    el("tbody", {}, ...rows)));
  };
  // a node shows where it and every node above it are opened
  const shownAll = i => { for (; i >= 0; i = nodes[i].parent) if (!open.has(i)) return false; return true; };
  filter.addEventListener("input", render);
  main.append(
    el("p", { class: "muted" }, `${fmtUs(d.total_us)} of Python in ${d.frames} frames on ${d.threads} thread(s), ${d.paths} call paths; ` +
      `${fmtUs(d.python_us)} of it in Python itself (the Python column: in no op or runtime call)` +
      (d.waiting_us ? `; ${fmtUs(d.waiting_us)} of it waiting (in a frame that waits: a lock, a wait, a sleep, a select, autograd's backward; not Python time)` : "") +
      ". Self: the time in no child frame."),
    el("div", { class: "toolbar" }, filter, el("span", { class: "muted" }, "click a row (or Enter) to open or close it")), holder);
  render();
}

async function compiled(main, st) {
  const d = await get(`/api/${st.run}/compiled`);
  for (const n of (d && d.neffs) || []) neffSection(main, n);
  if (!d || !d.regions.length) {
    if (!d || !(d.neffs || []).length) main.append(el("p", { class: "muted" }, "no torch.compile regions in this trace"));
    return;
  }
  main.append(el("p", {}, `graph breaks: ${d.graph_breaks}`));
  for (const r of d.regions) {
    const evs = r.device_events ? `, ${r.device_events} device event(s)${r.replayed ? ` (${r.replayed} replayed)` : ""}` : "";
    main.append(el("h2", {}, `${r.name} — ${r.calls} call(s), ${fmtUs(r.device_us)}${evs}`));
    if (r.kernels.length) main.append(table([{ key: "name", label: "Kernel", name: true }, { key: "calls", label: "Calls" },
        { key: "device_us", label: "Time", fmt: fmtUs }, { key: "fused_ops", label: "Fuses", name: true, fmt: v => v.length ? v.join(", ") : "extern (not generated)" }],
        r.kernels));
    else if (d.generated_kernels.length) main.append(
      el("p", { class: "muted" }, "the profiler does not see these kernels one by one here; the bundle saved their code:"),
      table([{ key: "name", label: "Generated kernel", name: true }, { key: "fused_ops", label: "Fuses", name: true,
        fmt: v => v.join(", ") }], d.generated_kernels));
    if (r.eager_ops_inside.length) main.append(el("p", { class: "muted" }, "extern, not fused: " + r.eager_ops_inside.join(", ")));
  }
  for (const [name, code] of Object.entries(d.code || {})) main.append(el("h2", {}, name), el("pre", { class: "code" }, code));
}

function neffSection(main, n) {
  const num = v => (typeof v === "number" && isFinite(v) ? v.toLocaleString() : "unknown");  // a string stat is not a number
  main.append(el("h2", {}, `Compiled NEFF ${n.file}`));
  if (n.error) return main.append(el("p", { class: "muted" }, `not read: ${n.error}`));
  const s = n.hlo_stats || {};
  main.append(el("p", {}, `${n.subgraphs} subgraph(s) · HLO MACs ${num(s.macs)} · traffic ${num(s.traffic)} · ` +
    `arithmetic intensity ${num(s.arithmetic_intensity)}`));
  main.append(table([{ key: "name", label: "Engine", name: true }, { key: "instructions", label: "Instructions", fmt: num },
    { key: "bytes", label: "Bytes", fmt: num }], n.engines, { sortable: false }));
  if (n.sources.length) main.append(table([{ key: "engine", label: "Engine", name: true },
    { key: "instructions", label: "Instructions" }, { key: "hlo", label: "HLO", name: true, fmt: v => v || "-" },
    { key: "framework", label: "Framework op", name: true, fmt: v => v || "-" }], n.sources, { sortable: false }));
}

async function compare(main, st, go, life) {
  const d = await get(`/api/compare`);
  if (!d || d.error) return main.append(el("p", { class: "muted" }, (d && d.error) || "compare needs two runs: profuse explore A B"));
  // "0.52x (1.92x slower)": a speed above or below 1 says which way, never a bare factor
  const speed = s => !s ? "n/a" : s.toFixed(2) === "1.00" ? "1.00x (same)"
    : s < 1 ? `${s.toFixed(2)}x (${(1 / s).toFixed(2)}x slower)` : `${s.toFixed(2)}x (${s.toFixed(2)}x faster)`;
  const dev = k => `${d.sides[k].kind} (${d.devices[k] || "device name not recorded"})`;
  // totals over unequal numbers of steps say so (the record's note, as every headline): the verdicts compare per step
  const apart = d.totals_note ? ` (${d.totals_note})` : "";
  main.append(el("h2", { id: "compare-title" }, `${fmtUs(d.a_device_us)} → ${fmtUs(d.b_device_us)}: ${speed(d.speedup)}${apart}`),
    el("p", { class: "muted" }, `A: ${d.a} · ${dev("a")}`), el("p", { class: "muted" }, `B: ${d.b} · ${dev("b")}`),
    el("p", { id: "compare-devices" }, d.same_device ? "same device" : "different devices: kernels not matched"));
  for (const v of d.verdicts) main.append(el("p", { class: "verdict" }, `${v.metric}: ${v.verdict}` +
    (v.p_value === null ? "" : ` (p = ${v.p_value.toPrecision(3)})`) + `, ${speed(v.b_median_us ? v.a_median_us / v.b_median_us : 0)}`));
  const by = k => d.op_groups.filter(g => g.matched_by === k).length;
  main.append(el("p", { id: "compare-matched" }, `op groups (name, shapes) matched: ${by("name")} by name, ${by("class")} by class; ` +
    `${d.matched_device_pct.a.toFixed(1)}% of A's device time, ${d.matched_device_pct.b.toFixed(1)}% of B's`));
  for (const k of ["a", "b"]) {  // what one run has and the other does not
    const o = d.only_in[k], bits = [];
    if (o.op_groups) bits.push(`${o.op_groups} op group(s)`);
    if (o.compiled_regions.length) bits.push(`compiled region(s) ${o.compiled_regions.join(", ")}`);
    if (o.graph_replay_kernels) bits.push(`${o.graph_replay_kernels} graph-replayed kernel(s)`);
    if (o.fused_kernels.length) bits.push(`${o.fused_kernels.length} fused kernel name(s)`);
    if (bits.length) main.append(el("p", { class: "muted only-in" }, `only in ${k.toUpperCase()}: ${bits.join(", ")}`));
  }
  // names cut at their end, the whole name on hover; a change, B/A, shapes and modules written as the
  // console writes them (report/diff.py: signed_us, factor_words, shapes_text, modules_text)
  const short = v => el("span", { title: v }, v.length > 60 ? v.slice(0, 59) + "…" : v);
  const signed = v => (v > 0 ? "+" : v < 0 ? "-" : "") + fmtUs(Math.abs(v));
  const factor = v => v === null ? "-" : v.toFixed(2) === "1.00" ? "1.00x" : v === 0 ? "0.00x"
    : v > 1 ? `${v.toFixed(2)}x slower` : `${(1 / v).toFixed(2)}x faster`;
  const ratio = (v, r) => !r.a_calls ? "only in B" : !r.b_calls ? "only in A" : factor(v);
  const shapes = s => {
    let dims = [];
    try { dims = s ? JSON.parse(s) : []; } catch { return s; }
    if (!Array.isArray(dims)) return s;
    while (dims.length && (dims[dims.length - 1] === null || (Array.isArray(dims[dims.length - 1]) && !dims[dims.length - 1].length))) dims.pop();
    return dims.map(x => Array.isArray(x) && x.length ? x.map(n => typeof n === "number" ? String(n) : JSON.stringify(n)).join("x") : "-").join(", ");
  };
  const modules = g => {
    if (g.instances === 1) return g.by_module[0].module || "-";
    const classes = new Set(g.by_module.map(m => m.module.replace(/_[0-9]+$/, "")));
    return classes.size === 1 && !classes.has("") ? `${g.instances}× ${[...classes][0]}` : `${g.instances} modules`;
  };
  const cols = [{ key: "name", label: "Name", name: true, fmt: short }, { key: "a_calls", label: "Calls A" }, { key: "b_calls", label: "Calls B" },
    { key: "a_us", label: "Time A", fmt: fmtUs }, { key: "b_us", label: "Time B", fmt: fmtUs }, { key: "delta_us", label: "Delta", fmt: signed }];
  // one row per op and shapes (largest change first); a click opens its module instances
  const groupCols = [{ key: "name", label: "Op", name: true, fmt: (v, g) => short(g.matched_by === "class" ? `${v} → ${g.b_name}` : v) },
    { key: "shape", label: "Shapes", name: true, fmt: v => shapes(v) }, { key: "instances", label: "Modules", name: true, fmt: (v, g) => modules(g) },
    ...cols.slice(1), { key: "ratio", label: "B/A", fmt: ratio }];
  const instCols = [{ key: "module", label: "Module", name: true, fmt: v => v || "-" }, ...cols.slice(1), { key: "ratio", label: "B/A", fmt: ratio }];
  const open = new Set(), shown = d.op_groups.slice(0, 200), wrap = el("div", { id: "diff-ops" });
  const draw = () => wrap.replaceChildren(table(groupCols, shown, {
    onRow: g => { if (!open.delete(g)) open.add(g); draw(); }, selected: g => open.has(g),
    detail: g => open.has(g) ? el("div", { class: "diff-instances" }, table(instCols, g.by_module, { sortable: false })) : null }));
  draw();
  main.append(el("h2", {}, "Ops, by name and shapes"), wrap);
  if (shown.length < d.op_groups.length) main.append(el("p", { class: "muted" }, `${shown.length} of ${d.op_groups.length} op groups`));
  if (d.modules.length) main.append(el("h2", {}, "Modules"), table(cols, d.modules.slice(0, 100)));
  const pct = v => v === null ? "unknown" : `${v.toFixed(1)}%`;
  if (d.roofline.length) main.append(el("h2", {}, "Roofline of the ops both have (each on its own peaks)"),
    table([{ key: "name", label: "Name", name: true, fmt: short }, { key: "a_us", label: "Time A", fmt: fmtUs },
      { key: "b_us", label: "Time B", fmt: fmtUs }, { key: "a_pct", label: "% roofline A", fmt: pct },
      { key: "b_pct", label: "% roofline B", fmt: pct }], d.roofline.slice(0, 50)));
  if (d.kernels_removed.length || d.kernels_added.length)
    main.append(el("p", {}, `${d.kernels_removed.length} kernel name(s) removed, ${d.kernels_added.length} added`));
  if (isReport()) return;
  main.append(el("h2", {}, "Both timelines, one time scale"));
  const wa = el("div", { id: "tl-a" }), wb = el("div", { id: "tl-b" });
  main.append(el("div", { class: "split" }, el("div", { class: "muted" }, "A"), wa, el("div", { class: "muted" }, "B"), wb));
  const a = new Timeline(wa, source, 0), b = new Timeline(wb, source, 1);
  life.onLeave(() => { a.destroy(); b.destroy(); });
  await Promise.all([a.init(null), b.init(null)]);
  const lo = Math.min(a.span[0], b.span[0]), hi = Math.max(a.span[1], b.span[1]);
  const sync = (src, dst) => { src.onView = v => dst.setView(v[0], v[1], { silent: true }); };
  sync(a, b); sync(b, a);
  a.setView(lo, hi, { silent: true }); b.setView(lo, hi, { silent: true });
}

// Ranks of a distributed run (profuse explore DIR): click a rank to open its own views.
async function ranks(main, st, go) {
  const d = await get("/api/ranks");
  if (!d || d.error) return main.append(el("p", { class: "muted" }, (d && d.error) || "no ranks: profuse explore DIR"));
  const runs = (await get("/api/runs")) || [];
  const runOf = Object.fromEntries(runs.map(r => [r.rank, r.run]));
  // a report page holds no rank's own views: rows open nothing there
  const open = source.live ? r => go({ view: "overview", run: runOf[r.rank] }) : undefined;
  main.append(el("h2", { id: "ranks-title" }, `${d.ranks_found} ranks · ${d.source}`),
    el("p", { class: "muted" }, `ranks named by ${d.rank_source}; clocks aligned to rank ${d.clock.reference_rank} from collective end times` + (open ? "; click a rank to open it" : "")));
  const pct = v => v === null || v === undefined ? "-" : v.toFixed(0) + "%";
  const holder = el("div", { id: "ranks-table" }, table([
    { key: "rank", label: "Rank" }, { key: "path", label: "Trace", name: true },
    { key: "device_us", label: "Device", fmt: fmtUs }, { key: "compute_us", label: "Compute", fmt: fmtUs },
    { key: "comm_us", label: "Comm", fmt: fmtUs }, { key: "overlap_pct", label: "Overlap", fmt: pct },
    { key: "idle_us", label: "Idle", fmt: fmtUs },
    // the report's unrecorded waits, where a rank's device window holds any: never called idle
    ...(d.ranks.some(r => r.unrecorded_us) ? [{ key: "unrecorded_us", label: "Unrecorded", fmt: fmtUs }] : []),
    { key: "step_median_us", label: "Step median", fmt: fmtUs },
    { key: "clock_offset_us", label: "Clock offset", fmt: v => v === null ? "unknown" : fmtUs(v) }], d.ranks, { onRow: open }));
  main.append(holder);
  const late = d.stragglers.filter(s => s.late_collectives > 0);
  main.append(el("h2", {}, "Stragglers"), late.length ? el("div", { id: "stragglers" }, table([
    { key: "rank", label: "Rank" }, { key: "late_collectives", label: "Late collectives" },
    { key: "wait_caused_us", label: "Wait caused (all other ranks)", fmt: fmtUs }], late, { onRow: open }))
    : el("p", { class: "muted" }, "no rank arrived late at a matched collective"));
  const sp = d.steps;
  if (sp.steps.length) {
    const vals = sp.dur_us.flat().filter(v => v !== null).sort((a, b) => a - b);
    const med = vals.length ? vals[Math.floor(vals.length / 2)] : 0;
    const color = v => {
      const r = med ? v / med : 1;
      return r >= 1 ? `rgba(192,57,43,${Math.min((r - 1) / 0.5, 1).toFixed(2)})` : `rgba(41,128,185,${Math.min((1 - r) / 0.5, 1).toFixed(2)})`;
    };
    const head = el("tr", {}, el("th", {}, "Rank"), sp.steps.map(s => el("th", {}, "#" + s)));
    const body = sp.ranks.map((rank, i) => el("tr", open ? { on: { click: () => open({ rank }) } } : {}, el("td", {}, rank),
      sp.dur_us[i].map(v => v === null ? el("td", {}, "-") : el("td", { style: `background:${color(v)}`, title: fmtUs(v) }, fmtUs(v)))));
    main.append(el("h2", {}, "Step time, rank × step"), el("table", { id: "heat" }, el("thead", {}, head), el("tbody", {}, body)));
  }
  const calls = [...d.collectives].sort((a, b) => b.skew_us - a.skew_us).slice(0, 50);
  if (calls.length) {
    const worst = calls[0].skew_us || 1;
    main.append(el("h2", {}, "Collective skew (largest 50)"), el("div", { id: "skew" }, table([
      { key: "name", label: "Collective", name: true, fmt: (v, r) => `${v} #${r.seq}` },
      { key: "bytes", label: "Bytes", fmt: v => v === null ? "unknown" : fmtBytes(v) },
      { key: "skew_us", label: "Skew", fmt: fmtUs },
      { key: "skew_bar", label: "", fmt: (v, r) => el("span", { class: "bar", style: `width:${Math.round(200 * r.skew_us / worst)}px` }) },
      { key: "last_arriver", label: "Last arriver", fmt: v => v === null ? "-" : v }], calls, { sortable: false })));
  }
  if (d.fusion.length) {
    main.append(el("h2", {}, "Fusion candidates, merged over ranks"), table([
      { key: "pattern", label: "Pattern", name: true }, { key: "scope", label: "Scope", name: true },
      { key: "ranks", label: "Ranks" }, { key: "instances", label: "Instances" },
      { key: "saving_per_rank_us", label: "Saving per rank (median)", fmt: fmtUsOrDash },
      { key: "step_saving_us", label: "Step-time saving", fmt: fmtUsOrDash },
      { key: "recommendation", label: "Do", name: true }], d.fusion));
  }
}

profuse.views = { bind, ranks, overview, ops, timeline, modules, calltree, compiled, compare };
})(globalThis.profuse = globalThis.profuse || {});
