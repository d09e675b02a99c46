// Runs wviz/ui/js/kernels.js on the cases that tests/test_js_kernels.py writes to stdin (a JSON list of
// {fn, args}; inside arrays and objects null stands for -Infinity, "NaN" and "Infinity" for themselves) and prints
// one result per case: {out} (an array, or an object of arrays and numbers) or {error}.
import { readFileSync } from "node:fs";
import * as kernels from "../../wviz/ui/js/kernels.js";

const SPECIAL = new Map([[null, -Infinity], ["NaN", NaN], ["Infinity", Infinity]]);
const revive = (a) => {
  if (SPECIAL.has(a) && a !== null) return SPECIAL.get(a);   // a number given alone (rho = Infinity)
  if (Array.isArray(a)) return a.map((x) => (SPECIAL.has(x) ? SPECIAL.get(x) : revive(x)));
  if (a && typeof a === "object") return Object.fromEntries(Object.entries(a).map(([k, v]) => [k, revive(v)]));
  return a;
};
// typed arrays as arrays, -Infinity as null (JSON has none)
const plain = (x) => (ArrayBuffer.isView(x) || Array.isArray(x) ? Array.from(x, plain)
  : x && typeof x === "object" ? Object.fromEntries(Object.entries(x).map(([k, v]) => [k, plain(v)]))
    : x === -Infinity ? null : x);
const cases = JSON.parse(readFileSync(0, "utf8"));
const results = cases.map(({ fn, args }) => {
  try {
    return { out: plain(kernels[fn](...args.map(revive))) };
  } catch (e) {
    if (!(e instanceof kernels.KernelError)) throw e;
    return { error: e.message };
  }
});
process.stdout.write(JSON.stringify(results));
