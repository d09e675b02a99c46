// Runs wviz/ui/js/kernels.js on the cases that tests/test_js_kernels.py writes to stdin (a JSON list of
// {fn, args}; inside arrays null stands for -Infinity, "NaN" and "Infinity" for themselves) and prints one
// result per case: {out} or {error}.
import { readFileSync } from "node:fs";
import * as kernels from "../../wviz/ui/js/kernels.js";

const SPECIAL = new Map([[null, -Infinity], ["NaN", NaN], ["Infinity", Infinity]]);
const revive = (a) => (Array.isArray(a) ? a.map((x) => (SPECIAL.has(x) ? SPECIAL.get(x) : revive(x))) : a);
const cases = JSON.parse(readFileSync(0, "utf8"));
const results = cases.map(({ fn, args }) => {
  try {
    return { out: Array.from(kernels[fn](...args.map(revive))) };
  } catch (e) {
    if (!(e instanceof kernels.KernelError)) throw e;
    return { error: e.message };
  }
});
process.stdout.write(JSON.stringify(results));
