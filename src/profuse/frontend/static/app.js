// @ts-check
// The front end's one entry, start(source): a hash router over the views, reading from `source`
// (the explorer's HTTP API or a report's embedded payload, see api.js). The URL carries the view
// and the selection. body[data-ready] is the view's name once it rendered, "error" if it threw
// (the error is shown on the page and in body[data-error]); tests wait on it.
(function (/** @type {any} the profuse namespace */ profuse) {
  "use strict";

  const { el } = profuse.dom;
  const views = profuse.views;
  const VIEWS = ["ranks", "overview", "ops", "timeline", "modules", "calltree", "compiled", "compare"];

  /**
   * What the route in place holds: callbacks to run when it is left, the state it rendered, and the
   * view's own update for a URL that differs only in its time window and selection (the timeline
   * zooms in place: no new page, no refetch of its lanes). `update` resolves to false where it cannot.
   * @typedef {{left: boolean, leave: Array<() => void>, onLeave: (fn: () => void) => void,
   *   st: Record<string, any> | null, update: ((st: Record<string, any>) => Promise<boolean>) | null,
   *   onUpdate: (fn: (st: Record<string, any>) => Promise<boolean>) => void}} Life
   */

  /** @returns {Life} */
  function newLife() {
    /** @type {Life} */
    const life = {
      left: false, leave: [], st: null, update: null,
      onLeave(fn) { if (life.left) fn(); else life.leave.push(fn); },
      onUpdate(fn) { life.update = fn; },
    };
    return life;
  }

  /** The URL keys a view updates in place, without rendering anew. */
  const IN_PLACE = ["t0", "t1", "sel"];

  /** Whether two states differ in nothing but IN_PLACE keys. */
  function sameRoute(a, b) {
    const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
    for (const k of keys) if (!IN_PLACE.includes(k) && String(a[k] ?? "") !== String(b[k] ?? "")) return false;
    return true;
  }

  /** Shows on the page that `what` failed and sets body[data-ready] to "error". */
  function fail(what, err) {
    console.error(err);
    const message = `${what} failed: ${err && err.message ? err.message : err}`;
    document.getElementById("status").textContent = "error";
    document.getElementById("main").prepend(el("p", { class: "error", role: "alert" }, message));
    document.body.dataset.error = message;
    document.body.dataset.ready = "error";
  }

  /**
   * A navigation link (an `a` of #nav) as the HTML element it is.
   * @param {Element | null} a
   * @returns {HTMLElement}
   */
  const nav = a => /** @type {HTMLElement} */ (a);

  class Router {
    /** @param {Source} source */
    constructor(source) {
      this.source = source;
      this.ranksMode = false;  // started on a folder of rank traces: the Ranks view is home
      this.life = newLife();
    }

    /**
     * The view, run and selection the URL holds.
     * @returns {Record<string, any>}
     */
    state() {
      /** @type {Record<string, any>} */
      const st = Object.fromEntries(new URLSearchParams(location.hash.slice(1)).entries());
      if (!VIEWS.includes(st.view) || (st.view === "ranks" && !this.ranksMode)
          || (this.ranksMode && !this.source.live)) st.view = this.ranksMode ? "ranks" : "overview";
      st.run = parseInt(st.run || "0", 10) || 0;
      return st;
    }

    /** Puts `st` in the URL and, unless told not to, renders it. */
    go(st, { replace = false, rerender = true } = {}) {
      const p = new URLSearchParams();
      for (const [k, v] of Object.entries(st)) if (v !== undefined && v !== null && v !== "") p.set(k, v);
      const hash = "#" + p.toString();
      if (replace) history.replaceState(null, "", hash); else history.pushState(null, "", hash);
      if (rerender) this.render();
    }

    /**
     * The URL changed (back, forward, a hash set by hand or by a test): the view in place updates
     * itself where only its window or selection changed, else the URL's route is rendered.
     */
    async changed() {
      const life = this.life, st = this.state();
      if (life.update && life.st && sameRoute(life.st, st)) {
        document.body.dataset.ready = "loading";
        try {
          const done = await life.update(st);
          if (life !== this.life) return;  // the route changed meanwhile: the newer render reports
          if (done) {
            life.st = st;
            document.body.dataset.ready = st.view;
            return;
          }
        } catch (err) {
          if (life === this.life) fail(`the ${st.view} view`, err);
          return;
        }
      }
      await this.render();
    }

    /** Leaves the route in place (its onLeave callbacks run) and renders the URL's. */
    async render() {
      const old = this.life;
      old.left = true;
      for (const fn of old.leave.splice(0)) fn();
      const mine = this.life = newLife();
      const st = this.state();
      for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", nav(a).dataset.view === st.view);
      const main = document.getElementById("main");
      main.replaceChildren();
      document.getElementById("status").textContent = "loading…";
      delete document.body.dataset.error;
      document.body.dataset.ready = "loading";
      try {
        await views[st.view](main, st, (s, opts) => this.go(s, opts), mine);
        if (mine !== this.life) return;  // the route changed meanwhile: the newer render reports
        mine.st = st;
        document.getElementById("status").textContent = "";
        document.body.dataset.ready = st.view;
      } catch (err) {
        if (mine === this.life) fail(`the ${st.view} view`, err);
      }
    }

    /** The run picker, the navigation and the first render. */
    async boot() {
      const runs = (await this.source.get("/api/runs")) || [];
      this.ranksMode = runs.some(r => r.rank !== undefined);
      const sel = /** @type {HTMLSelectElement} */ (document.getElementById("run"));
      const label = r => r.rank !== undefined ? `rank ${r.rank}` : (r.run === 0 ? "A" : "B");
      sel.replaceChildren(...runs.map(r => el("option", { value: r.run }, `${label(r)}: ${r.path}`)));
      sel.value = String(this.state().run);
      sel.addEventListener("change", () => this.go({ ...this.state(), run: sel.value, sel: "", t0: "", t1: "" }));
      const hide = v => { nav(document.querySelector(`#nav a[data-view="${v}"]`)).style.display = "none"; };
      if (runs.length < 2 || this.ranksMode) hide("compare");
      if (!this.ranksMode) hide("ranks");
      // a report holds the Compiled view only where the trace has compiled regions (or a NEFF)
      if (!this.source.live && !(await this.source.get("/api/0/compiled"))) hide("compiled");
      // and the Python call tree only where the trace has python_function events
      if (!this.source.live && !(await this.source.get("/api/0/calltree"))) hide("calltree");
      // a cross-rank report page embeds the Ranks view's data only: no rank's own views, no run picker
      if (this.ranksMode && !this.source.live) {
        for (const v of ["overview", "ops", "timeline", "modules", "calltree"]) hide(v);
        sel.style.display = "none";
      }
      for (const a of document.querySelectorAll("#nav a")) a.addEventListener("click", e => {
        e.preventDefault(); this.go({ view: nav(a).dataset.view, run: this.state().run });
      });
      window.addEventListener("popstate", () => this.changed());
      await this.render();
    }
  }

  /**
   * Starts the front end on this page over `source`: the one entry (start_explorer.js and
   * start_report.js call it).
   * @param {Source} source
   */
  async function start(source) {
    views.bind(source);
    try {
      await new Router(source).boot();
    } catch (err) {
      fail("starting", err);
    }
  }

  profuse.app = { start };
})(globalThis.profuse = globalThis.profuse || {});
