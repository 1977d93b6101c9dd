// The explorer: a hash router over the views. The URL carries the view and the selection.
import { get, isReport } from "./api.js";
import { el } from "./dom.js";
import * as views from "./views.js";

const VIEWS = ["ranks", "overview", "ops", "timeline", "modules", "compiled", "compare"];
let ranksMode = false;  // started on a folder of rank traces: the Ranks view is home

function state() {
  const p = new URLSearchParams(location.hash.slice(1));
  const st = Object.fromEntries(p.entries());
  if (!VIEWS.includes(st.view) || (st.view === "ranks" && !ranksMode)) st.view = ranksMode ? "ranks" : "overview";
  st.run = parseInt(st.run || "0", 10) || 0;
  return st;
}

function go(st, { replace = false, rerender = true } = {}) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(st)) if (v !== undefined && v !== null && v !== "") p.set(k, v);
  const hash = "#" + p.toString();
  if (replace) history.replaceState(null, "", hash); else history.pushState(null, "", hash);
  if (rerender) render();
}

async function render() {
  const st = state();
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.view === st.view);
  const main = document.getElementById("main");
  main.replaceChildren();
  document.getElementById("status").textContent = "loading…";
  try {
    await views[st.view](main, st, go);
    document.getElementById("status").textContent = "";
  } catch (err) {
    document.getElementById("status").textContent = "error: " + err;
  }
  document.body.dataset.ready = st.view;
}

async function start() {
  const runs = (await get("/api/runs")) || [];
  ranksMode = !isReport && runs.some(r => r.rank !== undefined);
  const sel = document.getElementById("run");
  const label = r => r.rank !== undefined ? `rank ${r.rank}` : (r.run === 0 ? "A" : "B");
  sel.replaceChildren(...runs.map(r => el("option", { value: r.run }, `${label(r)}: ${r.path}`)));
  sel.value = String(state().run);
  sel.addEventListener("change", () => go({ ...state(), run: sel.value, sel: "", t0: "", t1: "" }));
  if (runs.length < 2 || ranksMode) document.querySelector('#nav a[data-view="compare"]').style.display = "none";
  if (!ranksMode) document.querySelector('#nav a[data-view="ranks"]').style.display = "none";
  if (isReport) for (const v of ["compiled"]) document.querySelector(`#nav a[data-view="${v}"]`).style.display = "none";
  for (const a of document.querySelectorAll("#nav a")) a.addEventListener("click", e => {
    e.preventDefault(); go({ view: a.dataset.view, run: state().run });
  });
  window.addEventListener("popstate", render);
  await render();
}

start();
