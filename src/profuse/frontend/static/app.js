// The front end's one entry, start(source): a hash router over the views, reading from `source`
// (the explorer's HTTP API or a report's embedded payload, see api.js). The URL carries the view
// and the selection. body[data-ready] is the view's name once it rendered, "error" if it threw
// (the error is shown on the page and in body[data-error]); tests wait on it.
(function (profuse) {
  "use strict";

  const { el } = profuse.dom;
  const views = profuse.views;
  const VIEWS = ["ranks", "overview", "ops", "timeline", "modules", "compiled", "compare"];

  /**
   * What the route in place holds: callbacks to run when it is left.
   * @typedef {{left: boolean, leave: Array<() => void>, onLeave: (fn: () => void) => void}} Life
   */

  /** @returns {Life} */
  function newLife() {
    const life = {
      left: false, leave: [],
      onLeave(fn) { if (life.left) fn(); else life.leave.push(fn); },
    };
    return life;
  }

  function leave(life) {
    life.left = true;
    for (const fn of life.leave.splice(0)) fn();
  }

  /**
   * Starts the front end on this page over `source`.
   * @param {Source} source
   */
  async function start(source) {
    views.bind(source);
    let ranksMode = false;  // started on a folder of rank traces: the Ranks view is home
    let life = newLife();

    const state = () => {
      const st = Object.fromEntries(new URLSearchParams(location.hash.slice(1)).entries());
      if (!VIEWS.includes(st.view) || (st.view === "ranks" && !ranksMode)) st.view = ranksMode ? "ranks" : "overview";
      st.run = parseInt(st.run || "0", 10) || 0;
      return st;
    };

    const go = (st, { replace = false, rerender = true } = {}) => {
      const p = new URLSearchParams();
      for (const [k, v] of Object.entries(st)) if (v !== undefined && v !== null && v !== "") p.set(k, v);
      const hash = "#" + p.toString();
      if (replace) history.replaceState(null, "", hash); else history.pushState(null, "", hash);
      if (rerender) render();
    };

    const render = async () => {
      leave(life);
      const mine = life = newLife();
      const st = state();
      for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.view === st.view);
      const main = document.getElementById("main"), status = document.getElementById("status");
      main.replaceChildren();
      status.textContent = "loading…";
      delete document.body.dataset.error;
      document.body.dataset.ready = "loading";
      try {
        await views[st.view](main, st, go, mine);
        if (mine !== life) return;  // the route changed meanwhile: the newer render reports
        status.textContent = "";
        document.body.dataset.ready = st.view;
      } catch (err) {
        if (mine !== life) return;
        console.error(err);
        const message = `the ${st.view} view failed: ${err && err.message ? err.message : err}`;
        status.textContent = "error";
        main.prepend(el("p", { class: "error", role: "alert" }, message));
        document.body.dataset.error = message;
        document.body.dataset.ready = "error";
      }
    };

    const runs = (await source.get("/api/runs")) || [];
    ranksMode = source.live && runs.some(r => r.rank !== undefined);
    const sel = document.getElementById("run");
    const label = r => r.rank !== undefined ? `rank ${r.rank}` : (r.run === 0 ? "A" : "B");
    sel.replaceChildren(...runs.map(r => el("option", { value: r.run }, `${label(r)}: ${r.path}`)));
    sel.value = String(state().run);
    sel.addEventListener("change", () => go({ ...state(), run: sel.value, sel: "", t0: "", t1: "" }));
    const hide = v => { document.querySelector(`#nav a[data-view="${v}"]`).style.display = "none"; };
    if (runs.length < 2 || ranksMode) hide("compare");
    if (!ranksMode) hide("ranks");
    if (!source.live) hide("compiled");
    for (const a of document.querySelectorAll("#nav a")) a.addEventListener("click", e => {
      e.preventDefault(); go({ view: a.dataset.view, run: state().run });
    });
    window.addEventListener("popstate", render);
    await render();
  }

  profuse.app = { start };
})(globalThis.profuse = globalThis.profuse || {});
