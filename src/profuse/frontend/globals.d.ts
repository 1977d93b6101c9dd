// For `make lint` only (tsc over static/*.js, tsconfig.json): the globals the classic scripts share.
// Each script adds one member to the `profuse` namespace (frontend/__init__.py MODULES); the payload
// shapes are the generated static/types.js.
// Its members are typed where they are defined, not across files: any here.
declare var profuse: any;

interface Window {
  /** The timeline view of the page, for the browser tests. */
  profuseTimeline?: any;
}
