// Data access: the live server's JSON API, or the data embedded in a self-contained report.
const embedded = (() => {
  const node = document.getElementById("profuse-data");
  return node ? JSON.parse(node.textContent) : null;
})();

export const isReport = embedded !== null;

export async function get(path) {
  if (embedded) {
    const key = path.replace(/^\/api\//, "").split("?")[0];
    if (key in embedded) return embedded[key];
    if (/\/timeline$/.test(key)) return embedded[key.replace(/\/timeline$/, "/timeline")] ?? null;
    return null;
  }
  const r = await fetch(path);
  if (!r.ok) return null;
  return r.json();
}
