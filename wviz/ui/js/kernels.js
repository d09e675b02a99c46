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

// J(p) = -<s, p> + tau Omega(p), eq. (13) of the 001 note, as wviz.attention.regularized_objective: Omega
// "shannon" sum p log p, "l2" 1/2 ||p||^2, "tsallis" (sum p^alpha - 1) / (alpha (alpha - 1)) (Shannon at alpha = 1)
// or "kl" KL(p || prior); 0 log 0 = 0 and a key with p_j = 0 adds nothing, even where s_j = -inf.
export function objective(omega, p, s, tau, alpha, prior) {
  if (omega === "tsallis" && alpha === 1) omega = "shannon";
  let lin = 0, reg = 0;
  p.forEach((x, j) => {
    if (x === 0) return;
    lin -= s[j] * x;
    const xlogx = x * Math.log(x);
    reg += omega === "shannon" ? xlogx : omega === "l2" ? 0.5 * x * x
      : omega === "tsallis" ? x ** alpha : xlogx - x * Math.log(prior[j]);
  });
  if (omega === "tsallis") reg = (reg - 1) / (alpha * (alpha - 1));
  return lin + tau * reg;
}

// The objective over the 2-simplex of three keys, as wviz.views.attention_transport.landscape draws it: the
// triangle x = p_1 / 2 + p_3, y = sqrt(3)/2 p_1 cut into cells `width` across (simplex_raster); a cell whose
// centre lies more than a cell outside is NaN (blank), a cell the sides cut takes the value at its centre clamped
// onto the simplex. Rows from the bottom (y up), as z of the landscape's heatmap.
export function landscapeValues(omega, s, tau, alpha, prior, width) {
  const side = Math.sqrt(3) / 2, height = Math.round(width * side);
  return Array.from({ length: height }, (_, r) => Array.from({ length: width }, (_, c) => {
    const p1 = (r + 0.5) / height, p3 = (c + 0.5) / width - p1 / 2;
    const p = [p1, 1 - p1 - p3, p3];
    if (p.some((x) => x < -1 / width)) return NaN;
    const clamped = p.map((x) => Math.max(x, 0));
    const total = clamped[0] + clamped[1] + clamped[2];
    const value = objective(omega, clamped.map((x) => x / total), s, tau, alpha, prior);
    return Number.isFinite(value) ? value : NaN;   // KL is +inf off the prior's support: blank, as outside
  }));
}

// The argmin over the simplex of -<s, p> + tau Omega(p) without a closed form, as wviz.attention.solve_simplex:
// a log-barrier interior-point method with equality-constrained Newton steps on J / tau - mu sum_j log p_j (the
// diagonal Hessian of Omega), damped by 1 / (1 + lambda) until the Newton decrement lambda < 1/4, mu shrinking
// tenfold whenever the point is centred, down to tol (the landscape's 1e-13). Masked keys (s_j = -inf, prior 0)
// get 0.
export function solveSimplex(s, omega, tau, alpha, prior, tol = 1e-13, maxIter = 400) {
  positive(tau, "tau");
  const max = rowMax(s);
  let a = 1;
  if (omega === "tsallis") {
    a = alpha;
    if (a === 1) omega = "shannon";
  }
  let z = Array.from(s, (x) => (x - max) / tau);
  if (omega === "kl") {
    z = z.map((x, j) => x + (prior[j] > 0 ? Math.log(prior[j]) : -Infinity));
    if (z.every((x) => x === -Infinity)) {
      throw new KernelError("every key is masked: the prior is 0 on every key whose score is finite");
    }
    omega = "shannon";
  }
  const free = z.map(Number.isFinite);
  const nFree = free.filter(Boolean).length;
  z = z.map((x, j) => (free[j] ? x : 0));
  let p = free.map((f) => (f ? 1 / nFree : 0));
  let mu = Math.max(-Math.min(...z.filter((_, j) => free[j])), 1);
  for (let it = 0; it < maxIter; it++) {
    const g = [], hinv = [];
    p.forEach((x, j) => {
      const q = free[j] ? x : 1;
      const [gj, hj] = omega === "shannon" ? [1 + Math.log(q) - z[j], 1 / q] : omega === "l2" ? [q - z[j], 1]
        : [q ** (a - 1) / (a - 1) - z[j], q ** (a - 2)];
      g.push(free[j] ? gj - mu / q : 0);
      hinv.push(free[j] ? 1 / (hj + mu / (q * q)) : 0);
    });
    const nu = g.reduce((t, x, j) => t + x * hinv[j], 0) / hinv.reduce((t, x) => t + x, 0);
    const r = g.map((x) => x - nu);
    const lam2 = r.reduce((t, x, j) => t + x * x * hinv[j], 0) / mu;
    if (mu <= tol && lam2 < 1e-12) break;
    const step = lam2 > 0.0625 ? 1 / (1 + Math.sqrt(lam2)) : 1;
    p = p.map((x, j) => x - step * r[j] * hinv[j]);
    if (lam2 < 1e-2 && mu > tol) mu = Math.max(mu / 10, tol);
  }
  return Float64Array.from(p, (x) => Math.max(x, 0));
}

// Entropic OT, eq. (23) of 002: min_{P in U(a, b)} <C, P> - gamma H(P), whose plan is P_ij =
// exp((f_i + g_j - C_ij) / gamma) (the potentials f, g of wviz.ot.sinkhorn), from the potentials given (the
// released plan's, then the last frame's: a warm start). One Sinkhorn iteration in the log domain,
//   f_i <- gamma log a_i - gamma LSE_j((g_j - C_ij) / gamma),
//   g_j <- gamma log b_j - gamma LSE_i((f_i - C_ij) / gamma),
// puts every row and column of the kernel K_ij = exp((f_i + g_j - C_ij) / gamma) near its mass whatever gamma the
// potentials came from; then the stabilised iteration of wviz.ot.sinkhorn (Schmitzer 2019) on the scalings,
// u <- a / K v, v <- b / K^T u, over-relaxed as wviz.ot.relaxation.relaxed (a step's over-relaxation part
// clamped to [1/e, e]), with u, v absorbed into f, g (f += gamma log u) before they outgrow ABSORB. Stops when the
// L1 error of the worse marginal is at most tol (wviz.ot.marginal_error), or once `budget` milliseconds have
// passed: then converged is false and f, g are where it stopped, to go on from at the next frame.
// a (n), b (m): non-negative masses of equal totals; C: n rows of m finite costs; f, g: finite where a, b > 0.
// omega is fixed, not adapted as in wviz.ot.relaxation: a frame runs tens of iterations, too few to measure a rate
// (BENCHMARKS.md "Live while the slider moves: what the table says").
const ABSORB = 50, BOUND = Math.exp(ABSORB);
const outgrown = (x) => x > BOUND || (x > 0 && x < 1 / BOUND);   // |log x| > ABSORB; a zero mass's scaling stays 0

export function sinkhorn(a, b, C, gamma, { f, g, tol = 1e-6, omega = 1.8, checkEvery = 4, budget = Infinity } = {}) {
  positive(gamma, "gamma");
  const started = performance.now();
  const n = a.length, m = b.length;
  const cost = checkCost(C, n, m);
  f = Float64Array.from(f);
  g = Float64Array.from(g);
  logStep(f, g, a, cost, gamma, m, 1);   // rows
  logStep(g, f, b, cost, gamma, 1, m);   // columns
  const K = new Float64Array(n * m), u = new Float64Array(n), v = new Float64Array(m);
  const Kv = new Float64Array(n), KTu = new Float64Array(m);
  const absorb = () => absorbInto(K, f, g, u, v, cost, gamma);
  absorb();   // u = v = 0 yet: K from the log-domain potentials alone
  let iterations = 1, error = Infinity;
  for (;;) {
    product(K, v, Kv, n, m, m, 1);
    scale(u, a, Kv, omega);
    product(K, u, KTu, m, n, 1, m);
    scale(v, b, KTu, omega);
    iterations++;
    if (u.some(outgrown) || v.some(outgrown)) absorb();
    if (iterations % checkEvery) continue;
    product(K, v, Kv, n, m, m, 1);
    error = Math.max(l1(u, Kv, a), l1(v, KTu, b));
    if (error <= tol || performance.now() - started > budget) break;
  }
  absorb();
  return { ...rowsOf(K, n, m), f, g, error, iterations, converged: error <= tol };
}

// Semi-relaxed entropic OT (wviz.ot.semirelaxed; Chizat, Peyre, Schmitzer & Vialard 2018):
//   min_{P >= 0, P 1 = a} <C, P> + gamma KL(P | a b^T) + rho KL(P^T 1 | b),
// whose plan is P_ij = exp((f_i + g_j - C_ij) / gamma), from the potentials given, as wviz.ot.sinkhorn with rho.
// rho = 0 is each row's prior-softmax in closed form, rho = inf the balanced problem (sinkhorn above). Between
// them: one log-domain iteration, the rows' as in sinkhorn and the columns' from the column condition
//   g_j = gamma log b_j - phi gamma LSE_i((f_i - C_ij) / gamma),   phi = rho / (rho + gamma),
// then the scaling iteration of wviz.ot.scaling (_iterate_semi): the rows' update u <- a / K v, the columns'
// t = exp(c - phi log K^T u), c = log b - g / (rho + gamma), held at FLOOR or above, each over-relaxed as in
// sinkhorn (omega at most Young's optimum for the rate phi, as wviz.ot.relaxation), and before each row update the
// translation f -= lambda, g += lambda with lambda = rho log(sum_j t_j (K^T u)_j / sum a), which solves the mass
// mode in one step (Sejourne, Vialard & Peyre 2022). Stops at the L1 error tol of the rows and of the columns
// against t K^T u (wviz.ot.semirelaxed's stopping measure) or at the budget, as sinkhorn does.
const FLOOR = Math.exp(-2 * ABSORB);

export function semiSinkhorn(a, b, C, gamma, rho, options = {}) {
  positive(gamma, "gamma");
  if (!(rho >= 0)) throw new KernelError(`rho must be a number >= 0 (or inf for the balanced problem), got ${rho}`);
  if (rho === Infinity) return sinkhorn(a, b, C, gamma, options);
  const n = a.length, m = b.length;
  const cost = checkCost(C, n, m);
  if (rho === 0) return priorSoftmaxPlan(a, b, cost, gamma);
  const { tol = 1e-6, checkEvery = 4, budget = Infinity } = options;
  const started = performance.now();
  const phi = rho / (rho + gamma), total = a.reduce((x, y) => x + y, 0);
  const omega = Math.min(options.omega ?? 1.8, 2 / (1 + Math.sqrt(1 - phi)));
  const f = Float64Array.from(options.f), g = Float64Array.from(options.g);
  logStep(f, g, a, cost, gamma, m, 1);   // rows
  logStep(g, f, b, cost, gamma, 1, m);   // columns, balanced: gamma log b_j - gamma LSE_i, then their phi part
  for (let j = 0; j < m; j++) if (b[j] > 0) g[j] = phi * g[j] + (1 - phi) * gamma * Math.log(b[j]);
  const K = new Float64Array(n * m), u = new Float64Array(n), v = new Float64Array(m), c = new Float64Array(m);
  const Kv = new Float64Array(n), KTu = new Float64Array(m), t = new Float64Array(m);
  let fresh = true;   // no column update since the kernel was rebuilt: no translation yet
  const absorb = () => {
    absorbInto(K, f, g, u, v, cost, gamma);
    for (let j = 0; j < m; j++) c[j] = b[j] > 0 ? Math.log(b[j]) - g[j] / (rho + gamma) : -Infinity;
    fresh = true;
  };
  absorb();
  let iterations = 1, error = Infinity;
  for (;;) {
    if (!fresh) {
      let mass = 0;
      for (let j = 0; j < m; j++) mass += t[j] * KTu[j];
      const lambda = rho * Math.log(mass / total);
      for (let i = 0; i < n; i++) f[i] -= lambda;
      for (let j = 0; j < m; j++) {
        g[j] += lambda;
        c[j] -= lambda / (rho + gamma);
      }
    }
    product(K, v, Kv, n, m, m, 1);
    scale(u, a, Kv, omega);
    product(K, u, KTu, m, n, 1, m);
    for (let j = 0; j < m; j++) {
      // a column whose K^T u underflows carries no mass worth a float: its scaling is held at the floor
      t[j] = !(b[j] > 0) ? 0 : KTu[j] > 0 ? Math.max(Math.exp(c[j] - phi * Math.log(KTu[j])), FLOOR) : FLOOR;
      v[j] = t[j] > 0 ? relaxed(t[j], v[j], omega) : 0;
    }
    fresh = false;
    iterations++;
    if (u.some(outgrown) || v.some((x) => x > BOUND)) absorb();   // a small column scaling cannot overflow
    if (iterations % checkEvery || fresh) continue;
    product(K, v, Kv, n, m, m, 1);
    let columns = 0;
    for (let j = 0; j < m; j++) columns += Math.abs((v[j] - t[j]) * KTu[j]);
    error = Math.max(l1(u, Kv, a), columns);
    if (error <= tol || performance.now() - started > budget) break;
  }
  absorb();
  return { ...rowsOf(K, n, m), f, g, error, iterations, converged: error <= tol };
}

// rho = 0: P_ij = a_i b_j exp(-C_ij / gamma) / sum_k b_k exp(-C_ik / gamma), with wviz.ot.semirelaxed's
// potentials f_i = gamma log a_i - gamma LSE_k(log b_k - C_ik / gamma), g_j = gamma log b_j.
function priorSoftmaxPlan(a, b, cost, gamma) {
  const n = a.length, m = b.length;
  const g = Float64Array.from(b, (x) => (x > 0 ? gamma * Math.log(x) : -Infinity));
  const f = new Float64Array(n);
  logStep(f, g, a, cost, gamma, m, 1);
  if (f.some((x, i) => a[i] > 0 && !Number.isFinite(x))) {
    throw new KernelError("every key is masked: the prior is 0 on every key whose score is finite");
  }
  const K = Float64Array.from(cost, (x, k) => Math.exp((f[Math.floor(k / m)] + g[k % m] - x) / gamma));
  return { ...rowsOf(K, n, m), f, g, error: 0, iterations: 0, converged: true };
}

// The plan's rows and its column sums P^T 1.
function rowsOf(K, n, m) {
  const plan = Array.from({ length: n }, (_, i) => K.slice(i * m, (i + 1) * m));
  const columns = new Float64Array(m);
  for (const row of plan) for (let j = 0; j < m; j++) columns[j] += row[j];
  return { plan, columns };
}

// C (n rows of m) as one row-major array, refusing a non-finite cost as wviz.ot.problem.check_cost does (its index
// in a batch of one problem).
function checkCost(C, n, m) {
  const cost = Float64Array.from(C.flat());
  if (C.length !== n || cost.length !== n * m) throw new KernelError(`the cost matrix must be ${n} x ${m}`);
  const bad = cost.findIndex((x) => !Number.isFinite(x));
  if (bad >= 0) {
    const x = cost[bad];
    const name = Number.isNaN(x) ? "NaN" : x > 0 ? "inf" : "-inf";
    const at = `[0, ${Math.floor(bad / m)}, ${bad % m}]`;
    throw new KernelError(`the cost matrix C contains ${name} at ${at}; costs must be finite`);
  }
  return cost;
}

// x_i <- gamma log mass_i - gamma LSE_j((y_j - C[i, j]) / gamma), C[i, j] = cost[i si + j sj] (si, sj: the
// strides of the side updated and of the other); a zero mass keeps -inf (no plan there).
function logStep(x, y, mass, cost, gamma, si, sj) {
  for (let i = 0; i < x.length; i++) {
    if (!(mass[i] > 0)) {
      x[i] = -Infinity;
      continue;
    }
    let top = -Infinity;
    for (let j = 0; j < y.length; j++) top = Math.max(top, y[j] - cost[i * si + j * sj]);
    let sum = 0;
    for (let j = 0; j < y.length; j++) sum += Math.exp((y[j] - cost[i * si + j * sj] - top) / gamma);
    x[i] = gamma * Math.log(mass[i]) - top - gamma * Math.log(sum);
  }
}

// out_i = sum_j K[i, j] x_j with K[i, j] = K[i si + j sj]
function product(K, x, out, n, m, si, sj) {
  for (let i = 0; i < n; i++) {
    let sum = 0;
    for (let j = 0; j < m; j++) sum += K[i * si + j * sj] * x[j];
    out[i] = sum;
  }
}

// The over-relaxed scaling update of wviz.ot.relaxation.relaxed: t = mass / (x Kx), x <- x t clamp(t)^(omega - 1)
// with the clamp to [1/e, e]; a zero mass keeps a zero scaling.
function scale(x, mass, Kx, omega) {
  for (let i = 0; i < x.length; i++) {
    if (!(mass[i] > 0)) {
      x[i] = 0;
      continue;
    }
    x[i] = relaxed(mass[i] / Kx[i], x[i], omega);
  }
}

// wviz.ot.relaxation.relaxed_from: the over-relaxed step from the plain update t of the scaling x,
// t clamp(t / x)^(omega - 1) with the clamp to [1/e, e].
const relaxed = (t, x, omega) => t * Math.min(Math.max(t / x, Math.E ** -1), Math.E) ** (omega - 1);

// f += gamma log u, g += gamma log v (a zero scaling, a zero mass, keeps its -inf), the kernel
// K_ij = exp((f_i + g_j - C_ij) / gamma) rebuilt from them, and u = v = 1.
function absorbInto(K, f, g, u, v, cost, gamma) {
  const m = g.length;
  for (let i = 0; i < f.length; i++) if (u[i] > 0) f[i] += gamma * Math.log(u[i]);
  for (let j = 0; j < m; j++) if (v[j] > 0) g[j] += gamma * Math.log(v[j]);
  for (let i = 0; i < f.length; i++) {
    for (let j = 0; j < m; j++) K[i * m + j] = Math.exp((f[i] + g[j] - cost[i * m + j]) / gamma);
  }
  u.fill(1);
  v.fill(1);
}

// ||x * Kx - mass||_1: the L1 error of one marginal of diag(u) K diag(v)
function l1(x, Kx, mass) {
  let sum = 0;
  for (let i = 0; i < x.length; i++) sum += Math.abs(x[i] * Kx[i] - mass[i]);
  return sum;
}

// W2^2 between the 2-D Gaussians N(m_i, S_i) of wviz.views.gaussian_w2's token table, every pair (i, j): each token
// [x, y, sigma_x, sigma_y, rho], S = [[sx^2, rho sx sy], [rho sx sy, sy^2]] (rho dropped when `diagonal`). The
// Bures-Wasserstein closed form of 004 (wviz.gaussian),
//   W2^2 = ||m_i - m_j||^2 + tr S_i + tr S_j - 2 tr (S_j^{1/2} S_i S_j^{1/2})^{1/2},
// where for 2 x 2 matrices tr X^{1/2} = sqrt(tr X + 2 sqrt(det X)) (the sum of the roots of X's two eigenvalues),
// and X = S_j^{1/2} S_i S_j^{1/2} has the trace and determinant of S_i S_j: no square root of a matrix is taken.
// Diagonal covariances give ||sigma_i - sigma_j||^2 for the trace part, as the formula does.
export function gaussianW2(tokens, diagonal) {
  const S = tokens.map(([, , sx, sy, rho]) => {
    const r = diagonal ? 0 : rho;
    return { a: sx * sx, b: sy * sy, c: r * sx * sy, det: sx * sx * sy * sy * (1 - r * r) };
  });
  return tokens.map(([xi, yi], i) => Float64Array.from(tokens, ([xj, yj], j) => {
    const p = S[i], q = S[j];
    const trProduct = p.a * q.a + 2 * p.c * q.c + p.b * q.b;
    const root = Math.sqrt(Math.max(trProduct + 2 * Math.sqrt(p.det * q.det), 0));
    const bures = i === j ? 0 : Math.max(p.a + p.b + q.a + q.b - 2 * root, 0);
    return (xi - xj) ** 2 + (yi - yj) ** 2 + bures;
  }));
}

// The n_sigma ellipse {m + n_sigma S^{1/2} u : ||u|| = 1} of a token [x, y, sigma_x, sigma_y, rho] at `count`
// angles from 0 to 2 pi (the first point repeated as the last), as wviz.gaussian.ellipse: {x, y}. The root of a
// 2 x 2 covariance in closed form, S^{1/2} = (S + sqrt(det S) I) / sqrt(tr S + 2 sqrt(det S)) (0 for S = 0).
export function gaussianEllipse([mx, my, sx, sy, rho], diagonal, nSigma, count) {
  const r = diagonal ? 0 : rho;
  const a = sx * sx, b = sy * sy, c = r * sx * sy, sqrtDet = sx * sy * Math.sqrt(1 - r * r);
  const norm = Math.sqrt(a + b + 2 * sqrtDet);
  const [p, q, s] = norm > 0 ? [(a + sqrtDet) / norm, c / norm, (b + sqrtDet) / norm] : [0, 0, 0];
  const x = new Float64Array(count), y = new Float64Array(count);
  for (let k = 0; k < count; k++) {
    const t = (2 * Math.PI * k) / (count - 1), cos = Math.cos(t), sin = Math.sin(t);
    x[k] = mx + nSigma * (p * cos + q * sin);
    y[k] = my + nSigma * (q * cos + s * sin);
  }
  return { x, y };
}

// The particle flow of 003 (Sec. 3.1) as wviz.measure.self_attention_flow: through `layers` layers every particle
// moves to x_i <- sum_j softmax_j(a(q_i, k_j)) v_j with q = x W_Q, k = x W_K, v = x W_V and a(q, k) = <q, k> / tau
// ("dot") or -||q - k||^2 / tau ("gaussian"), the softmax shifted by its row max; `residual` adds x, `norm` then
// projects onto the unit sphere. x0: N points of d coordinates; projections: null (identities) or one
// [W_Q, W_K, W_V] of d x d arrays per layer. Returns the trajectory, x0 first: layers + 1 arrays of N points.
// Flat Float64Arrays and plain loops: a frame runs N^2 L of these steps (BENCHMARKS.md "Live while the slider moves").
// The softmax is written out, not softmax() above: Python's flow takes torch.softmax unchecked and reports
// particles that left the float range after the layer, where softmax() would refuse an infinite score first.
export function particleFlow(x0, layers, potential, tau, projections, residual, norm) {
  positive(tau, "tau");
  const n = x0.length, d = x0[0].length, gaussian = potential === "gaussian";
  let x = Float64Array.from(x0.flat());
  const trajectory = [x0];
  const e = new Float64Array(n);
  for (let h = 1; h <= layers; h++) {
    const W = projections?.[h - 1];
    const [q, k, v] = W ? W.map((M) => times(x, M, n, d)) : [x, x, x];
    const y = new Float64Array(n * d);
    for (let i = 0; i < n; i++) {
      let max = -Infinity;
      for (let j = 0; j < n; j++) {
        let a = 0;
        for (let c = 0; c < d; c++) a += gaussian ? -((q[i * d + c] - k[j * d + c]) ** 2) : q[i * d + c] * k[j * d + c];
        e[j] = a;
        if (a > max) max = a;
      }
      let total = 0;
      for (let j = 0; j < n; j++) total += (e[j] = Math.exp((e[j] - max) / tau));
      for (let j = 0; j < n; j++) {
        for (let c = 0; c < d; c++) y[i * d + c] += (e[j] / total) * v[j * d + c];
      }
      if (residual) for (let c = 0; c < d; c++) y[i * d + c] += x[i * d + c];
      if (norm) normalise(y, i, d, h);
    }
    if (!y.every(Number.isFinite)) {
      throw new KernelError(`the particles left the floating-point range at layer ${h} (residual connections `
        + "without normalisation grow exponentially); use fewer layers or turn normalisation on");
    }
    trajectory.push(Array.from({ length: n }, (_, i) => Array.from(y.subarray(i * d, (i + 1) * d))));
    x = y;
  }
  return trajectory;
}

// The rows of x (n x d, flat) times W (d x d).
function times(x, W, n, d) {
  const out = new Float64Array(n * d);
  for (let i = 0; i < n; i++) {
    for (let c = 0; c < d; c++) {
      for (let r = 0; r < d; r++) out[i * d + c] += x[i * d + r] * W[r][c];
    }
  }
  return out;
}

// Point i of y (flat, d per point) divided by its length, or Python's message where it is 0.
function normalise(y, i, d, layer) {
  let r = 0;
  for (let c = 0; c < d; c++) r = Math.hypot(r, y[i * d + c]);
  if (r === 0) {
    throw new KernelError(`token ${i} reached the origin at layer ${layer}; it cannot be normalised onto the unit `
      + "sphere");
  }
  for (let c = 0; c < d; c++) y[i * d + c] /= r;
}

// The estimates of h in Figure 3 of 002 at alpha (wviz.fenchel; templates t, n rows of d, preference u, evidence
// z): the exact h of (12), the mean of the tilted weights p~ of (11) at the maximiser lambda* of the dual (9),
//   max_lambda <lambda, mu + z> - ||lambda||^2 / (2 alpha) - log sum_i u_i exp<t_i, lambda>,
// and the same mean at the first-order lambda = alpha z (18) and at the second-order
// lambda = alpha (I + alpha Sigma)^-1 z (15), with mu and Sigma the mean and covariance of the templates under u.
// lambda* by Newton from (15) as wviz.fenchel.solve_dual: direction (I / alpha + Cov_p~(t))^-1 grad, the full step
// while the dual still rises at its end, else the point of the step where its slope changes sign (bisection), to a
// gradient norm of 1e-10.
export function fenchelEstimates(t, u, z, alpha) {
  positive(alpha, "alpha");
  const d = z.length;
  const { mean: mu, cov: sigma } = moments(t, u);
  const lam2 = solveSpd(sigma.map((row, i) => row.map((x, j) => alpha * x + (i === j ? 1 : 0))),
    z.map((x) => alpha * x));
  const c = mu.map((x, k) => x + z[k]);
  const grad = (lam) => {
    const { mean } = moments(t, tilted(t, u, lam));
    return lam.map((x, k) => c[k] - x / alpha - mean[k]);
  };
  const dot = (x, y) => x.reduce((s, xi, k) => s + xi * y[k], 0);
  let lam = lam2, g = grad(lam), iterations = 0;
  while (Math.hypot(...g) > 1e-10 && iterations < 100) {
    iterations++;
    const { cov } = moments(t, tilted(t, u, lam));
    const s = solveSpd(cov.map((row, i) => row.map((x, j) => x + (i === j ? 1 / alpha : 0))), g);
    const at = (step) => lam.map((x, k) => x + step * s[k]);
    let step = 1;
    if (dot(grad(at(1)), s) < 0) {   // the maximum along s lies inside the step: bisect the slope's sign change
      let lo = 0, hi = 1;
      for (let k = 0; k < 60; k++) {
        step = (lo + hi) / 2;
        if (dot(grad(at(step)), s) >= 0) lo = step; else hi = step;
      }
    }
    lam = at(step);
    g = grad(lam);
  }
  const h = (l) => moments(t, tilted(t, u, l)).mean;
  return { h: h(lam), h1: h(z.map((x) => alpha * x)), h2: h(lam2), lam, iterations };
}

// p~_i = u_i exp<t_i, lambda> / sum_j u_j exp<t_j, lambda> (11); 0 where u_i = 0.
function tilted(t, u, lam) {
  const logits = t.map((ti, i) => (u[i] > 0 ? Math.log(u[i]) + ti.reduce((s, x, k) => s + x * lam[k], 0) : -Infinity));
  const top = Math.max(...logits);
  return normalised(Float64Array.from(logits, (x) => Math.exp(x - top)));
}

// The mean and covariance of the rows of t under the weights w (summing to 1).
function moments(t, w) {
  const d = t[0].length;
  const mean = Array.from({ length: d }, (_, k) => t.reduce((s, ti, i) => s + w[i] * ti[k], 0));
  const cov = Array.from({ length: d }, (_, a) => Array.from({ length: d }, (_, b) => t.reduce(
    (s, ti, i) => s + w[i] * (ti[a] - mean[a]) * (ti[b] - mean[b]), 0)));
  return { mean, cov };
}

// x with A x = b for a symmetric positive definite A (Cholesky).
function solveSpd(A, b) {
  const d = b.length, L = A.map((row) => row.map(() => 0));
  for (let i = 0; i < d; i++) {
    for (let j = 0; j <= i; j++) {
      let s = A[i][j];
      for (let k = 0; k < j; k++) s -= L[i][k] * L[j][k];
      L[i][j] = i === j ? Math.sqrt(s) : s / L[j][j];
    }
  }
  const y = new Array(d), x = new Array(d);
  for (let i = 0; i < d; i++) y[i] = (b[i] - L[i].slice(0, i).reduce((s, l, k) => s + l * y[k], 0)) / L[i][i];
  for (let i = d - 1; i >= 0; i--) {
    let s = y[i];
    for (let k = i + 1; k < d; k++) s -= L[k][i] * x[k];
    x[i] = s / L[i][i];
  }
  return x;
}
