// @ts-check
// Building DOM from data: every string goes through textContent, never innerHTML.
// A classic script (body not indented) that adds `profuse.dom`.
/**
 * A table column: the row key it shows, its header, whether it holds a name (left-aligned), how to format it.
 * @typedef {{key: string, label: string, name?: boolean, fmt?: (v: any, row: any) => any}} Column
 */
(function (/** @type {any} the profuse namespace */ profuse) {
"use strict";

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "on") for (const [ev, fn] of Object.entries(v)) node.addEventListener(ev, fn);
    else if (k === "dataset") Object.assign(node.dataset, v);
    else if (k === "style") {  // through CSSOM: the page's CSP forbids style attributes
      for (const decl of String(v).split(";")) {
        const i = decl.indexOf(":");
        if (i > 0) node.style.setProperty(decl.slice(0, i).trim(), decl.slice(i + 1).trim());
      }
    }
    else node.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function fmtUs(us) {
  if (us === null || us === undefined) return "";
  const a = Math.abs(us);
  if (a >= 1e6) return (us / 1e6).toFixed(2) + " s";
  if (a >= 1e3) return (us / 1e3).toFixed(2) + " ms";
  return us.toFixed(1) + " µs";
}

/** A duration as fmtUs writes it, or "-" where there is no figure (a column that does not apply to the row). */
function fmtUsOrDash(us) {
  return us === null || us === undefined ? "-" : fmtUs(us);
}

/** A count or a mean of counts as the console writes it (report/console_diagnosis.py): thousands separated,
 * whole where it is whole, else to one decimal. */
function fmtCount(v) {
  const whole = Number.isInteger(v);
  return v.toLocaleString("en-US", { minimumFractionDigits: whole ? 0 : 1, maximumFractionDigits: whole ? 0 : 1 });
}

function fmtBytes(b) {
  if (b >= 1e9) return (b / 1e9).toFixed(2) + " GB";
  if (b >= 1e6) return (b / 1e6).toFixed(1) + " MB";
  if (b >= 1e3) return (b / 1e3).toFixed(1) + " kB";
  return b + " B";
}

/**
 * A table of `rows` under `columns`, sortable by a header click unless `sortable` is false.
 * @param {Column[]} columns
 * @param {any[]} rows
 * @param {{onRow?: (row: any) => void, selected?: any, sortable?: boolean, detail?: (row: any) => (Node | null)}} [options]
 */
function table(columns, rows, { onRow, selected, sortable = true, detail } = {}) {
  // columns: [{key, label, name?: bool, fmt?: fn}]; rows: array of objects;
  // detail(r): a node shown in a full-width row right under r's row (it follows r when sorted), or null
  let sortKey = null, asc = false;
  const tbody = el("tbody");
  const render = () => {
    tbody.replaceChildren();
    const data = sortKey === null ? rows : [...rows].sort((a, b) => {
      const x = a[sortKey], y = b[sortKey];
      const c = typeof x === "number" ? x - y : String(x).localeCompare(String(y));
      return asc ? c : -c;
    });
    for (const r of data) {
      const tr = el("tr", {}, columns.map(c => el("td", { class: c.name ? "name" : "" },
        c.fmt ? c.fmt(r[c.key], r) : r[c.key])));
      if (selected && selected(r)) tr.className = "sel";
      if (onRow) {  // a row opens on click, or on Enter when focused (Tab reaches it)
        tr.style.cursor = "pointer"; tr.tabIndex = 0;
        tr.addEventListener("click", () => onRow(r));
        tr.addEventListener("keydown", e => { if (e.key === "Enter") onRow(r); });
      }
      tbody.appendChild(tr);
      const more = detail && detail(r);
      if (more) tbody.appendChild(el("tr", { class: "detail" }, el("td", { colspan: columns.length }, more)));
    }
  };
  const head = el("tr", {}, columns.map(c => el("th", {
    class: c.name ? "name" : "",
    on: sortable ? { click: () => { asc = sortKey === c.key ? !asc : false; sortKey = c.key; render(); } } : {},
  }, c.label)));
  render();
  return el("table", {}, el("thead", {}, head), tbody);
}

profuse.dom = { el, fmtUs, fmtUsOrDash, fmtBytes, fmtCount, table };
})(globalThis.profuse = globalThis.profuse || {});
