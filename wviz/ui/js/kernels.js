// The maps of wviz.attention in float64, for figures recomputed in the browser while a slider moves
// (wviz/ui/drag.py). Each follows its Python twin step for step, so that a frame drawn here equals the figure
// Python draws at the released value (tests/test_js_kernels.py holds them to 1e-9 on vectors made by wviz).
// Scores arrive as arrays of numbers, -Infinity masking a key; every function returns a new Float64Array.

export class KernelError extends Error {}

// wviz.attention._row_max: the row's max, refusing what Python refuses with Python's words.
function rowMax(s) {
  let max = -Infinity;
  for (const x of s) {
    if (Number.isNaN(x)) throw new KernelError("scores contain NaN");
    if (x === Infinity) {
      throw new KernelError("scores contain +inf; use a large finite score (-inf is allowed and masks a key)");
    }
    if (x > max) max = x;
  }
  if (max === -Infinity) {
    throw new KernelError("every key is masked (-inf): at least one score per row must be finite");
  }
  return max;
}

// wviz._checks.positive
function positive(value, name) {
  if (!(Number.isFinite(value) && value > 0)) {
    throw new KernelError(`${name} must be a positive finite number, got ${value}`);
  }
  return value;
}

function normalised(e) {
  let total = 0;
  for (const x of e) total += x;
  for (let j = 0; j < e.length; j++) e[j] /= total;
  return e;
}

// Softmax p_j = exp(s_j / tau) / sum_l exp(s_l / tau): eq. (12) of the 001 note, shifted by the row max.
export function softmax(s, tau) {
  positive(tau, "tau");
  const max = rowMax(s);
  return normalised(Float64Array.from(s, (x) => Math.exp((x - max) / tau)));
}

// Prior-softmax p_j = pi_j exp(s_j / tau) / sum_l pi_l exp(s_l / tau): the PriorSoftmax row under eq. (13), 001.
export function priorSoftmax(s, prior, tau) {
  positive(tau, "tau");
  const max = rowMax(s);
  const logits = Float64Array.from(s, (x, j) => (x - max) / tau + (prior[j] > 0 ? Math.log(prior[j]) : -Infinity));
  const top = Math.max(...logits);
  if (top === -Infinity) {
    throw new KernelError("every key is masked: the prior is 0 on every key whose score is finite");
  }
  return normalised(logits.map((x) => Math.exp(x - top)));
}

// wviz.attention._threshold_sorted: theta from v = (s - max s) / scale sorted in decreasing order, for
// sparsemax (alpha 2: p = (v - theta)_+, Martins & Astudillo 2016) and 1.5-entmax (p = (v - theta)_+^2, Peters,
// Niculae & Martins 2019, the sort-based exact threshold).
function thresholdSorted(sorted, alpha) {
  let csum = 0, csq = 0, theta = 0, kstar = 1;
  for (let k = 1; k <= sorted.length; k++) {
    const v = Math.max(sorted[k - 1], -2);   // no key with v <= -1 is in the support; -inf becomes finite
    csum += v;
    csq += v * v;
    let cand, inSupport;
    if (alpha === 2) {
      cand = csum - 1;
      inSupport = 1 + k * v > csum;
    } else {
      const mean = csum / k;
      cand = mean - Math.sqrt(Math.max(1 / k - (csq / k - mean * mean), 0));
      inSupport = cand <= v;
    }
    if (inSupport) {
      kstar = k;
      theta = cand;
    }
  }
  return alpha === 2 ? theta / kstar : theta;
}

function sortedMap(s, tau, alpha) {
  const max = rowMax(s);
  const scale = alpha === 2 ? tau : 2 * tau;   // 1.5-entmax thresholds s / (2 tau)
  const v = Float64Array.from(s, (x) => (x - max) / scale);
  const theta = thresholdSorted(Float64Array.from(v).sort().reverse(), alpha);
  return v.map((x) => {
    const p = Math.max(x - theta, 0);
    return alpha === 2 ? p : p * p;
  });
}

// Sparsemax: the Euclidean projection of s / tau onto the simplex (Sparsemax row under eq. (13), 001).
export function sparsemax(s, tau) {
  positive(tau, "tau");
  return sortedMap(s, tau, 2);
}

// wviz.attention._entmax_bisect: p_j = [1 + (alpha - 1)(y_j - c)]_+^(1 / (alpha - 1)), y = (s - max s) / tau,
// with c bisected in [0, (1 - m^(1 - alpha)) / (alpha - 1)] to a width of 1e-14.
function entmaxBisect(s, tau, alpha) {
  const a1 = alpha - 1;
  const max = rowMax(s);
  const y = Float64Array.from(s, (x) => (x - max) / tau);
  const weights = (c) => y.map((x) => Math.exp(Math.log1p(Math.max(a1 * (x - c), -1)) / a1));
  const sum = (w) => w.reduce((t, x) => t + x, 0);
  let lo = 0, hi = -Math.expm1(-a1 * Math.log(s.length)) / a1;
  const width = 1e-14;
  const steps = Math.max(1, Math.ceil(Math.log2(Math.max(hi, width) / width)));
  for (let i = 0; i < steps; i++) {
    const mid = (lo + hi) / 2;
    if (sum(weights(mid)) >= 1) lo = mid;
    else hi = mid;
  }
  return normalised(weights(lo));
}

// alpha-entmax, argmin of -<s, p> + tau (sum_j p_j^alpha - 1) / (alpha (alpha - 1)): alpha 1 is softmax, 2 is
// sparsemax, 1.5 the exact sorted threshold, others bisection (as wviz.attention.entmax dispatches them).
export function entmax(s, alpha, tau) {
  if (!(alpha >= 1 && alpha <= 2)) {
    throw new KernelError(`alpha must lie in [1, 2] (1 = softmax, 2 = sparsemax), got ${alpha}`);
  }
  if (alpha === 1) return softmax(s, tau);
  if (alpha === 2) return sparsemax(s, tau);
  positive(tau, "tau");
  return alpha === 1.5 ? sortedMap(s, tau, 1.5) : entmaxBisect(s, tau, alpha);
}

// The weights of the mechanism named as in wviz.attention.MECHANISMS.
export function attend(mechanism, s, tau, alpha, prior) {
  switch (mechanism) {
    case "softmax": return softmax(s, tau);
    case "sparsemax": return sparsemax(s, tau);
    case "entmax": return entmax(s, alpha, tau);
    case "prior-softmax": return priorSoftmax(s, prior, tau);
    default: throw new KernelError(`no kernel for ${mechanism}`);
  }
}
