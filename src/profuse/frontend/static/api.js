// @ts-check
// Data sources: the explorer's HTTP API, or the payload embedded in a self-contained HTML report.
// Both answer the same paths ("/api/0/overview", "/api/0/timeline?width=800", ...) with the same JSON,
// or null where they have nothing; `live` says whether the source can answer new questions (a server)
// or only holds what was embedded (a report: one timeline over the whole span, no event details).
/**
 * @typedef {{live: boolean, get: (path: string) => Promise<any>}} Source
 */
(function (/** @type {any} the profuse namespace */ profuse) {
  "use strict";

  /**
   * The explorer's server, same origin.
   * @returns {Source}
   */
  function httpSource() {
    return {
      live: true,
      async get(path) {
        const r = await fetch(path);
        return r.ok ? r.json() : null;
      },
    };
  }

  /**
   * The data a report embeds: a JSON object keyed by API path without "/api/" and the query
   * ("runs", "0/overview", "0/timeline", ...).
   * @param {Record<string, any>} payload
   * @returns {Source}
   */
  function embeddedSource(payload) {
    return {
      live: false,
      async get(path) {
        const key = path.replace(/^\/api\//, "").split("?")[0];
        return Object.prototype.hasOwnProperty.call(payload, key) ? payload[key] : null;
      },
    };
  }

  /**
   * The payload of this page's JSON data element (type "application/json") with this id.
   * @returns {Source}
   */
  function embeddedSourceFrom(elementId) {
    const node = document.getElementById(elementId);
    if (!node) throw new Error(`no #${elementId} data in this page`);
    return embeddedSource(JSON.parse(node.textContent));
  }

  profuse.api = { httpSource, embeddedSource, embeddedSourceFrom };
})(globalThis.profuse = globalThis.profuse || {});
