// A figure that follows its sliders while they move (wviz/ui/drag.py mounts it under the figure).
//
// Streamlit sends a slider's value to Python on release only. This component finds each slider's range input by
// its widget key, follows the pointer from a press on it (and the input's own value, for the keyboard and to
// correct any difference), recomputes the figure with the kernels of kernels.js and redraws the page's own Plotly
// chart, through the plotly.js that Streamlit loaded for it (window.Plotly), before the frame is painted. A frame
// never queues work: moves that arrive while one is drawn are drawn together at the next animation frame. On
// release Streamlit reruns the page as before: Python's figure at the released value replaces the one drawn here,
// equal to it to 1e-9 (tests/test_js_kernels.py), and the URL, share link and exports follow as for any slider.
// Nothing is drawn here but a refused problem's message; if this script fails to load, the page is as before.

import {
  attend, fenchelEstimates, gaussianEllipse, gaussianW2, KernelError, landscapeValues, particleFlow, semiSinkhorn,
  sinkhorn, softmax, solveSimplex,
} from "./kernels.js";

// Milliseconds of Sinkhorn iterations a frame may spend; a plan not converged by then is solved on at the next
// frame, and the figure keeps the last converged plan meanwhile.
const SOLVE_BUDGET = 8;

// What each figure recomputes: inputs (from Python), the sliders' values and a state kept from frame to frame
// (reset when Python draws the figure) -> the new values of the traces that change, by kind and in the traces'
// order ({bars: heights of each bar trace, heatmaps: z of each heatmap}, points: [{name or index of a scatter
// trace, x, y}], the title, and gaps: true where NaN marks a gap in them), or {pending: true} when the frame's
// budget ran out before the result.
const FIGURES = {
  // bars of weights, one trace per mechanism (Attention as transport); semi-relaxed OT's, its n queries' plan at
  // gamma = tau and rho solved as the plan below (its row 0 times n: the page's query's weights)
  weights: (inputs, v, state) => {
    const traces = [];
    for (const name of inputs.mechanisms) {
      if (name !== SEMI) {
        traces.push(attend(name, inputs.scores, v.tau, v.alpha, inputs.prior));
        continue;
      }
      const plan = semiPlan(state, inputs.semi, v);
      if (!plan) return { pending: true };
      traces.push(plan[0].map((x) => x * plan.length));
    }
    return { bars: traces };
  },
  // the objective over the simplex of three keys at tau (and alpha), with its closed-form argmin and the numerical
  // one (Attention as transport's landscape view; the points named in inputs.names); NaN cells are outside
  landscape: (inputs, v) => {
    const { mechanism, omega, scores, prior, width, names } = inputs;
    const xy = (p) => ({ x: [p[0] / 2 + p[2]], y: [(Math.sqrt(3) / 2) * p[0]] });   // Landscape.xy
    return {
      heatmaps: [landscapeValues(omega, scores, v.tau, v.alpha, prior, width)],
      points: [{ name: names[0], ...xy(attend(mechanism, scores, v.tau, v.alpha, prior)) },
        { name: names[1], ...xy(solveSimplex(scores, omega, v.tau, v.alpha, prior)) }],
      gaps: true,
    };
  },
  // the Many queries heatmap (Attention as transport): each row one random query's weights at tau (and alpha), or
  // semi-relaxed OT's n x m plan at gamma = tau and rho times n; the title of those values
  many: (inputs, v, state) => {
    let rows;
    if (inputs.semi) {
      const plan = semiPlan(state, inputs.semi, v);
      if (!plan) return { pending: true };
      rows = plan.map((row) => Array.from(row, (x) => x * plan.length));
    } else {
      rows = inputs.scores.map((s) => Array.from(attend(inputs.mechanism, s, v.tau, v.alpha, inputs.prior)));
    }
    const { taus, rhos, titles } = inputs;
    return { heatmaps: [rows], title: titles.tau[taus.indexOf(v.tau)] + (titles.rho?.[rhos.indexOf(v.rho)] ?? "") };
  },
  // Gaussian W2 attention's two heatmaps, each row softmax(s_i / tau) of the scores -W2^2 (Bures closed form) and
  // <m_i, m_j>, of the tokens (rows [x, y, sigma_x, sigma_y, rho]) with the query's row from its sliders
  gaussians: (inputs, v) => {
    const tokens = tokensAt(inputs, v);
    const scores = [gaussianW2(tokens, inputs.diagonal).map((row) => row.map((x) => -x)),
      tokens.map(([xi, yi]) => tokens.map(([xj, yj]) => xi * xj + yi * yj))];
    return { heatmaps: scores.map((matrix) => matrix.map((row) => Array.from(softmax(row, v.tau)))) };
  },
  // the same tokens drawn: the query's 1- and 2-sigma ellipses and its mean (every token's ellipses when they all
  // take the query's covariance), the traces inputs.traces[i] = [1-sigma, 2-sigma, mean] of token i
  ellipses: (inputs, v) => {
    const tokens = tokensAt(inputs, v);
    const points = [];
    for (const i of inputs.equal ? tokens.keys() : [inputs.query]) {
      const [one, two, mean] = inputs.traces[i];
      points.push({ index: one, ...gaussianEllipse(tokens[i], inputs.diagonal, 1, inputs.count) },
        { index: two, ...gaussianEllipse(tokens[i], inputs.diagonal, 2, inputs.count) },
        { index: mean, x: [tokens[i][0]], y: [tokens[i][1]] });
    }
    return { points };
  },
  // the heatmap of the entropic plan at gamma = gamma_rel max|C| (Transport plans), warm-started from the
  // released plan's potentials, then from the last frame's; semi-relaxed at rho = rho_rel max|C| when the inputs
  // hold the rho slider's options (rhos), with the plan's column sums and the title of that rho
  plan: (inputs, v, state) => {
    const { a, b, C, tol, scale, rhos } = inputs;
    const gamma = v.gamma * scale;
    const r = solve(state, inputs, (start) => (rhos ? semiSinkhorn(a, b, C, gamma, v.rho * scale, { ...start, tol })
      : sinkhorn(a, b, C, gamma, { ...start, tol })));
    if (!r.converged) return { pending: true };
    const heatmaps = [r.plan.map((row) => Array.from(row))];
    if (!rhos) return { heatmaps };
    const points = [{ name: inputs.sums, y: Array.from(r.columns) }];
    return { heatmaps, points, title: inputs.titles[rhos.indexOf(v.rho)] };
  },
  // the particle flow at tau (Particles): every particle's trail over the layers (one line, broken between
  // particles) and the last layer's particles, the traces inputs.traces, and the title of that tau
  flow: (inputs, v) => {
    const trajectory = particleFlow(inputs.x, inputs.layers, inputs.potential, v.tau, inputs.projections,
      inputs.residual, inputs.norm);
    const trails = { x: [], y: [] };
    trajectory[0].forEach((_, i) => {
      for (const layer of trajectory) {
        trails.x.push(layer[i][0]);
        trails.y.push(layer[i][1]);
      }
      trails.x.push(NaN);
      trails.y.push(NaN);
    });
    const last = trajectory[trajectory.length - 1];
    const [lines, particles] = inputs.traces;
    return {
      points: [{ index: lines, ...trails }, { index: particles, x: last.map((p) => p[0]), y: last.map((p) => p[1]) }],
      title: inputs.titles[inputs.taus.indexOf(v.tau)],
      gaps: true,
    };
  },
  // the exact h (12) and its approximations (18) and (15) at alpha, and the title (Fenchel dual), each a scatter
  // trace of one point named in inputs.names
  estimates: (inputs, v) => {
    const e = fenchelEstimates(inputs.t, inputs.u, inputs.z, v.alpha);
    return {
      points: [e.h, e.h1, e.h2].map(([x, y], k) => ({ name: inputs.names[k], x: [x], y: [y] })),
      title: inputs.titles[inputs.alphas.indexOf(v.alpha)],
    };
  },
};

const SEMI = "semi-relaxed OT";   // wviz.views.attention_transport.SEMI

// The token table's rows with the query's replaced by its sliders' values; every token given the query's
// covariance when inputs.equal (wviz.views.gaussian_w2.equal_covariances).
function tokensAt({ tokens, query, equal }, v) {
  const row = [v.x, v.y, v.sigma_x, v.sigma_y, v.rho];
  return tokens.map((t, i) => (i === query ? row : equal ? [t[0], t[1], ...row.slice(2)] : t));
}

// Semi-relaxed OT's plan at gamma = tau and rho (Attention as transport: its n queries' problem, inputs.semi), or
// null while it is solved on at the next frame.
function semiPlan(state, semi, v) {
  const { a, b, C, tol } = semi;
  const r = solve(state, semi, (start) => semiSinkhorn(a, b, C, v.tau, v.rho, { ...start, tol }));
  return r.converged ? r.plan : null;
}

// A Sinkhorn solve within the frame's budget, started from the last frame's potentials (the released plan's, f
// and g of the inputs, at first): run(start) with start = {f, g, budget}.
function solve(state, inputs, run) {
  const r = run({ ...(state.potentials ?? { f: inputs.f, g: inputs.g }), budget: SOLVE_BUDGET });
  state.potentials = { f: r.f, g: r.g };
  return r;
}

const followers = new WeakMap();   // the component's root -> its Follower
// What bench/bench_drag.py and the browser tests read: the frames drawn, the keys of the sliders being watched.
const stats = (window.__wvizDrag ??= {});   // a bench may have made it first
stats.frames ??= [];
stats.watching ??= [];

export default function mount({ parentElement, data }) {
  let follower = followers.get(parentElement);
  if (!follower) {
    follower = new Follower(parentElement);
    followers.set(parentElement, follower);
  }
  follower.update(data);
  return () => {
    follower.stop();
    followers.delete(parentElement);
  };
}

// null inside Python's lists stands for -inf and "Infinity" for +inf (JSON has no infinities).
const revive = (a) => (Array.isArray(a) ? a.map((x) => (x === null ? -Infinity : revive(x)))
  : a === "Infinity" ? Infinity
    : a && typeof a === "object" ? Object.fromEntries(Object.entries(a).map(([k, v]) => [k, revive(v)])) : a);

class Follower {
  constructor(root) {
    this.message = document.createElement("div");
    this.message.setAttribute("role", "status");
    this.message.style.cssText = "color: var(--st-red-color, #d33); font-size: 0.9rem;";
    root.appendChild(this.message);
    this.observers = [];
    this.frame = 0;
    this.inputAt = null;
  }

  update(data) {
    this.stop();
    this.data = revive(data);
    this.values = { ...this.data.values };   // the released values, which Python's figure shows
    this.state = {};
    this.spent = 0;   // ms of kernels in frames that ran out of budget since the last drawn frame
    this.message.textContent = "";
    this.watch(600);
  }

  // Observe each slider's range input; Streamlit draws a slider's chunk up to seconds after this component.
  watch(tries) {
    const missing = Object.entries(this.data.sliders).filter(([name, s]) => !this.observe(name, s));
    if (missing.length && tries > 0) this.retry = requestAnimationFrame(() => this.watch(tries - 1));
  }

  observe(name, slider) {
    if (this.observers.some((o) => o.name === name)) return true;
    const root = document.querySelector(`.st-key-${slider.key}`);
    const input = root?.querySelector('input[type="range"]');
    if (!input) return false;
    const observer = new MutationObserver(() => this.moved(name, slider, Number(input.value)));
    observer.observe(input, { attributes: true, attributeFilter: ["aria-valuetext", "value"] });
    const seen = (e) => { this.inputAt = e.timeStamp; };   // a key press; a pointer's moves are timed by pressed()
    root.addEventListener("keydown", seen, { capture: true, passive: true });
    const pressed = (e) => this.pressed(e, name, slider, input);
    root.addEventListener("pointerdown", pressed, { capture: true, passive: true });
    this.observers.push({ name, observer, root, seen, pressed });
    stats.watching.push(slider.key);
    return true;
  }

  // A drag is followed from the pointer itself, in the frame of each move: Streamlit's slider shows the move a
  // frame later (BENCHMARKS.md "Live while the slider moves"). The value is the slider's own rule (react-aria's):
  // a press on the thumb keeps its value, a press on the track takes the pointer's; then value + the pointer's
  // travel over the track's width, snapped to the step. The slider's value, when it comes, is drawn if it differs.
  pressed(e, name, slider, input) {
    const thumb = input.parentElement?.parentElement;
    const track = thumb?.parentElement?.getBoundingClientRect();
    if (!track?.width || e.button !== 0 || input.disabled) return;
    const min = Number(input.min), max = Number(input.max), step = Number(input.step) || 1;
    const digits = (String(input.step).split(".")[1] ?? "").length;
    const snap = (v) => {
      const k = Math.round((Math.min(Math.max(v, min), max) - min) / step);
      return Number((min + k * step).toFixed(digits));
    };
    const at = (x) => min + ((x - track.left) / track.width) * (max - min);
    const start = thumb.contains(e.target) ? Number(input.value) : snap(at(e.clientX));
    const x0 = e.clientX;
    const move = (m) => {
      this.inputAt = m.timeStamp;
      this.moved(name, slider, snap(start + ((m.clientX - x0) / track.width) * (max - min)));
    };
    const up = () => {
      window.removeEventListener("pointermove", move, true);
      window.removeEventListener("pointerup", up, true);
      window.removeEventListener("pointercancel", up, true);
    };
    window.addEventListener("pointermove", move, true);
    window.addEventListener("pointerup", up, true);
    window.addEventListener("pointercancel", up, true);
    move(e);
  }

  // The first move of a frame is drawn at once; later moves of the same frame are drawn together at the next one.
  moved(name, slider, raw) {
    const value = slider.options ? slider.options[Math.round(raw)] : raw;
    if (value === undefined || Number.isNaN(value) || value === this.values[name]) return;
    this.values[name] = value;
    if (this.frame) {
      this.pending = true;
      return;
    }
    this.draw(false);
    this.nextFrame();
  }

  nextFrame() {
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      if (this.pending) {
        this.pending = false;
        this.draw(true);
      }
    });
  }

  draw(inAnimationFrame) {
    const inputAt = this.inputAt ?? performance.now();
    const t0 = performance.now();
    if (stats.empty) {   // bench/bench_drag.py's floor: the frame with nothing computed or drawn
      this.record(inAnimationFrame, { inputAt, empty: true });
      return;
    }
    let result;
    try {
      result = FIGURES[this.data.figure](this.data.inputs, this.values, this.state);
      if (result.pending) {   // solved on at the next frame; its time counts in the frame that draws the result
        this.spent += performance.now() - t0;
        this.pending = true;
        if (!this.frame) this.nextFrame();
        return;
      }
      // where a figure has gaps (a line broken between pieces, cells outside a heatmap's shape), NaN marks them
      const numbers = [...KINDS.flatMap(({ name }) => result[name] ?? []),
        ...(result.points ?? []).flatMap(({ x, y }) => [x ?? [], y ?? []])];
      const bad = (x) => !Number.isFinite(x) && !(result.gaps && Number.isNaN(x));
      if (numbers.some((t) => Array.from(t).flat().some(bad))) {
        throw new KernelError("this setting gives weights that are not finite numbers");
      }
    } catch (e) {
      if (!(e instanceof KernelError)) throw e;
      this.message.textContent = `${e.message}. The figure keeps the last good values.`;
      return;
    }
    const gd = document.querySelector(`.st-key-${this.data.chart} .js-plotly-plot`);
    if (!gd || !window.Plotly) return;   // not drawn yet: the release path still updates the figure
    const t1 = performance.now();
    if (result.points && !drawPoints(gd, result.points)) restylePoints(gd, result.points);
    for (const { name, type, field, inPlace } of KINDS) {
      const traces = result[name];
      if (!traces || inPlace(gd, traces)) continue;
      const indices = gd._fullData.filter((t) => t.type === type).map((t) => t.index).slice(0, traces.length);
      if (indices.length) window.Plotly.restyle(gd, { [field]: traces.map((t) => Array.from(t)) }, indices);
    }
    if (result.title !== undefined) drawTitle(gd, result.title);
    const t2 = performance.now();
    this.message.textContent = "";
    this.record(inAnimationFrame, { inputAt, compute: this.spent + t1 - t0, draw: t2 - t1 });
    this.spent = 0;
  }

  // The frame's timings for bench/bench_drag.py and the browser tests, its paint's time added once painted.
  record(inAnimationFrame, timings) {
    const frame = { chart: this.data.chart, values: { ...this.values }, ...timings };
    stats.frames.push(frame);
    afterPaint(inAnimationFrame, () => { frame.paintedAt = performance.now(); });
  }

  stop() {
    cancelAnimationFrame(this.frame);
    cancelAnimationFrame(this.retry);
    this.frame = 0;
    this.pending = false;
    for (const { name, observer, root, seen, pressed } of this.observers) {
      const at = stats.watching.indexOf(this.data.sliders[name].key);
      if (at >= 0) stats.watching.splice(at, 1);
      observer.disconnect();
      root.removeEventListener("keydown", seen, { capture: true });
      root.removeEventListener("pointerdown", pressed, { capture: true });
    }
    this.observers = [];
  }
}

// The kinds of trace a figure's result may hold: each drawn in place, or by Plotly.restyle where that fails.
const KINDS = [
  { name: "bars", type: "bar", field: "y", inPlace: (gd, traces) => drawBars(gd, traces) },
  { name: "heatmaps", type: "heatmap", field: "z", inPlace: (gd, traces) => drawHeatmaps(gd, traces) },
];

// Vertical bars redrawn in place: each bar's path from the box Plotly computed for it (calcdata: p0, p1 across the
// category axis, base s0) and the new height, through the axes' own data-to-pixel maps, as Plotly's bar plot
// draws it but without Plotly.restyle's pass over the whole figure, which takes frames (BENCHMARKS.md "Live while
// the slider moves"). The hover reads the new heights too. False (nothing drawn) for any other figure, which
// Plotly.restyle then redraws.
function drawBars(gd, traces) {
  const layout = gd._fullLayout;
  const groups = gd.querySelectorAll(".barlayer .trace");
  if (!gd.calcdata || groups.length !== traces.length) return false;
  const boxes = [];
  for (const [i, y] of traces.entries()) {
    const cd = gd.calcdata[i];
    const trace = cd?.[0]?.trace;
    const points = groups[i].querySelectorAll(".point path");
    if (trace?.type !== "bar" || trace.orientation !== "v" || cd.length !== y.length || points.length !== y.length) {
      return false;
    }
    boxes.push({ cd, points, xa: axis(gd, trace.xaxis), ya: axis(gd, trace.yaxis) });
  }
  for (const [i, { cd, points, xa, ya }] of boxes.entries()) {
    cd.forEach((di, j) => {
      di.s = di.s1 = traces[i][j];
      const x0 = xa.c2p(di.p0, true), x1 = xa.c2p(di.p1, true);
      const y0 = ya.c2p(di.s0, true), y1 = ya.c2p(di.s1, true);
      points[j].setAttribute("d", `M${x0},${y0}V${y1}H${x1}V${y0}Z`);
    });
  }
  return true;
}

// Scatter traces moved in place to their new x and y, as Plotly's scatter plot draws them (a marker a path
// translated to its place, a text its x and y, a line one path through its points), the hover reading the new
// values; points: [{name or index of the trace, x, y}], an x or y left out staying. A point outside its axis's
// range (a column sum or an ellipse grown past Python's figure) widens the range by Plotly.relayout, which redraws
// the figure from the points just set (before any heatmap is drawn in place). False where a trace is not there or
// draws something else (a fill, error bars), which Plotly.restyle then redraws.
function drawPoints(gd, points) {
  const jobs = [];
  for (const { name, index, x, y } of points) {
    const cd = (gd.calcdata ?? []).find((c) => c[0]?.trace?.type === "scatter"
      && (index === undefined ? c[0].trace.name === name : c[0].trace.index === index));
    const trace = cd?.[0]?.trace;
    const group = trace && gd.querySelector(`.scatterlayer .trace${trace.uid}`);
    const n = (x ?? y).length;
    if (!group || cd.length !== n || trace.fill !== "none" || trace.error_x?.visible || trace.error_y?.visible) {
      return false;
    }
    const mode = trace.mode.split("+");
    const drawn = (part, selector) => (mode.includes(part) ? group.querySelectorAll(selector) : []);
    const markers = drawn("markers", ".points path"), texts = drawn("text", ".text text");
    const lines = drawn("lines", "path.js-line");   // Plotly draws a line with gaps as one path per piece
    if (markers.length !== (mode.includes("markers") ? n : 0) || texts.length !== (mode.includes("text") ? n : 0)
      || (mode.includes("lines") && !lines.length)) return false;
    jobs.push({ cd, markers, texts, lines, x, y, xa: axis(gd, trace.xaxis), ya: axis(gd, trace.yaxis) });
  }
  const widened = {};
  for (const { cd, x, y, xa, ya } of jobs) {
    cd.forEach((di, j) => {
      if (x) di.x = x[j];
      if (y) di.y = y[j];
    });
    for (const [ax, values] of [[xa, x], [ya, y]]) {
      const range = widened[`${ax._name}.range`] ?? ax.range;
      if (values && !ax._isLog) widened[`${ax._name}.range`] = widen(range, values);
    }
  }
  const grown = Object.entries(widened).filter(([key, range]) => {
    const ax = gd._fullLayout[key.split(".")[0]];
    return range[0] !== ax.range[0] || range[1] !== ax.range[1];
  });
  if (grown.length) {
    window.Plotly.relayout(gd, Object.fromEntries(grown));
    return true;
  }
  for (const { cd, markers, texts, lines, xa, ya } of jobs) {
    const px = cd.map((di) => [xa.c2p(di.x), ya.c2p(di.y)]);
    markers.forEach((path, j) => path.setAttribute("transform", `translate(${px[j].join(",")})`));
    texts.forEach((text, j) => {
      for (const node of [text, ...text.querySelectorAll("tspan.line")]) {
        node.setAttribute("x", px[j][0]);
        node.setAttribute("y", px[j][1]);
      }
    });
    lines.forEach((line, k) => line.setAttribute("d", k ? "" : linePath(px)));   // every piece in the first
  }
  return true;
}

// The path of a line through the pixels px, broken where a point is not a number (a gap between pieces).
function linePath(px) {
  let d = "", pen = "M";
  for (const [x, y] of px) {
    if (!Number.isFinite(x) || !Number.isFinite(y)) {   // c2p maps a NaN to undefined
      pen = "M";
      continue;
    }
    d += `${pen}${x},${y}`;
    pen = "L";
  }
  return d;
}

// An axis's range [r0, r1] (either way round) grown by a tenth of the values' spread beyond any value outside it.
function widen([r0, r1], values) {
  let lo = Infinity, hi = -Infinity;
  for (const v of values) {
    if (Number.isNaN(v)) continue;   // a line's gap
    lo = Math.min(lo, v);
    hi = Math.max(hi, v);
  }
  const [low, high] = r0 <= r1 ? [r0, r1] : [r1, r0];
  if (lo >= low && hi <= high) return [r0, r1];
  const pad = 0.1 * (Math.max(hi, high) - Math.min(lo, low));
  const grown = [lo < low ? lo - pad : low, hi > high ? hi + pad : high];
  return r0 <= r1 ? grown : grown.reverse();
}

// Plotly.restyle of the points' traces, by name or index.
function restylePoints(gd, points) {
  for (const { name, index = gd._fullData.findIndex((t) => t.name === name), x, y } of points) {
    if (index >= 0) window.Plotly.restyle(gd, { ...(x && { x: [x] }), ...(y && { y: [y] }) }, [index]);
  }
}

// The title's text replaced, in the span that styles it (the page draws titles bold); plain text, one line.
function drawTitle(gd, text) {
  const title = gd.querySelector(".g-gtitle text");
  const holder = title?.querySelector("tspan") ?? title;
  if (holder && title.textContent !== text) holder.textContent = text;
}

// A trace's axis ("x2" -> layout.xaxis2) in the full layout, whose c2p maps data to pixels.
const axis = (gd, id) => gd._fullLayout[id.replace(/^([xy])/, "$1axis")];

// Heatmaps redrawn in place: each one's image (Plotly draws a heatmap as one <image>) replaced by a canvas of one
// pixel per cell, coloured through the trace's own colour scale between its zmin and zmax (for a colour range that
// follows the data, zauto, the new data's min and max, and the colour bar relabelled to match), and shown with
// image-rendering: pixelated over the same box, not Plotly.restyle (as for the bars). False for a heatmap that
// smooths, which Plotly then redraws.
function drawHeatmaps(gd, traces) {
  const heatmaps = gd._fullData?.filter((t) => t.type === "heatmap") ?? [];
  const images = gd.querySelectorAll(".hm image");
  if (images.length !== traces.length || heatmaps.length !== traces.length) return false;
  const jobs = [];
  for (const [i, z] of traces.entries()) {
    const trace = heatmaps[i];
    if (trace.zsmooth || !z.length) return false;
    const xa = axis(gd, trace.xaxis), ya = axis(gd, trace.yaxis);
    const down = ya.c2p(0) <= ya.c2p(z.length - 1), right = xa.c2p(0) <= xa.c2p(z[0].length - 1);
    jobs.push({ image: images[i], z, trace, down, right });
  }
  for (const { image, z, trace, down, right } of jobs) {
    const rows = z.length, cols = z[0].length;
    const [lo, hi] = trace.zauto ? range(z) : [trace.zmin, trace.zmax];
    if (trace.zauto && trace.showscale) relabelColourBar(gd, trace, lo, hi);
    const canvas = document.createElement("canvas");
    canvas.width = cols;
    canvas.height = rows;
    const context = canvas.getContext("2d");
    const pixels = context.createImageData(cols, rows);
    const colour = colourScale(trace.colorscale, lo, hi, trace.reversescale);
    for (let r = 0; r < rows; r++) {
      for (let c = 0; c < cols; c++) {
        const at = 4 * ((down ? r : rows - 1 - r) * cols + (right ? c : cols - 1 - c));
        pixels.data.set(colour(z[r][c]), at);
      }
    }
    context.putImageData(pixels, 0, 0);
    image.style.imageRendering = "pixelated";
    image.setAttribute("href", canvas.toDataURL());
    trace.z = z;   // the hover reads the new values too
  }
  return true;
}

function range(z) {
  let lo = Infinity, hi = -Infinity;
  for (const row of z) {
    for (const x of row) {
      if (Number.isNaN(x)) continue;   // a gap
      lo = Math.min(lo, x);
      hi = Math.max(hi, x);
    }
  }
  return [lo, hi];
}

// The colour bar of a zauto heatmap relabelled for the range [lo, hi]: its fill spans the colour scale whatever
// the range, so only its ticks move. Plotly's own ticks (values and pixel places, kept per drawn figure) give the
// bar's pixel ends; the new ticks follow Plotly's rule for a linear axis (its autoTicks: about one per 40 px, a step
// of 2, 5 or 10 times a power of ten).
const colourBars = new WeakMap();   // Plotly's full trace -> {low, high}: the pixel places of its zmin and zmax

function relabelColourBar(gd, trace, lo, hi) {
  const texts = Array.from(gd.querySelectorAll(`.cb${trace.uid} .cbaxis text`));
  if (texts.length < 2 || !(hi > lo)) return;
  const place = (t) => Number(/translate\([^,]*,\s*([-\d.e]+)\)/.exec(t.getAttribute("transform"))?.[1]);
  let ends = colourBars.get(trace);
  if (!ends) {
    const [t0, t1] = [texts[0], texts[texts.length - 1]];
    const v0 = Number(t0.dataset.unformatted), v1 = Number(t1.dataset.unformatted);
    const slope = (place(t1) - place(t0)) / (v1 - v0);
    if (!Number.isFinite(slope)) return;
    ends = { low: place(t0) + slope * (trace.zmin - v0), high: place(t0) + slope * (trace.zmax - v0) };
    colourBars.set(trace, ends);
  }
  const rough = (hi - lo) / (Math.min(Math.max(Math.abs(ends.high - ends.low) / 40, 4), 9) + 1);
  const power = 10 ** Math.floor(Math.log10(rough));
  const step = power * [2, 5, 10].find((k) => k > rough / power);
  const digits = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  const ticks = [];
  for (let k = Math.ceil(lo / step - 1e-9); k * step <= hi * (1 + 1e-9); k++) ticks.push(k * step);
  const parent = texts[0].parentElement.parentElement;
  while (texts.length < ticks.length) {
    const group = texts[0].parentElement.cloneNode(true);
    parent.appendChild(group);
    texts.push(group.querySelector("text"));
  }
  texts.forEach((text, k) => {
    text.style.display = k < ticks.length ? "" : "none";
    if (k >= ticks.length) return;
    const y = ends.low + ((ticks[k] - lo) / (hi - lo)) * (ends.high - ends.low);
    text.textContent = String(Number(ticks[k].toFixed(Math.min(digits, 20))));
    text.setAttribute("transform", `translate(0,${y})`);
  });
}

// z -> [r, g, b, 255] through a Plotly colour scale ([[fraction, "rgb(r, g, b)" or "#rrggbb"], ...]), linear in
// RGB between its stops as Plotly's own, clamped to [zmin, zmax], read from its top when `reversed`; a gap (NaN)
// is transparent, as Plotly leaves it.
function colourScale(scale, zmin, zmax, reversed) {
  const stops = scale.map(([f, c]) => [f, parseColour(c)]);
  return (z) => {
    if (Number.isNaN(z)) return [0, 0, 0, 0];
    const u = Math.min(Math.max((z - zmin) / (zmax - zmin), 0), 1);
    const f = reversed ? 1 - u : u;
    let k = 1;
    while (k < stops.length - 1 && stops[k][0] < f) k++;
    const [f0, c0] = stops[k - 1], [f1, c1] = stops[k];
    const t = f1 > f0 ? (f - f0) / (f1 - f0) : 0;
    return [0, 1, 2].map((i) => Math.round(c0[i] + t * (c1[i] - c0[i]))).concat(255);
  };
}

function parseColour(c) {
  if (c.startsWith("#")) return [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16));
  return c.match(/[\d.]+/g).slice(0, 3).map(Number);
}

// Runs fn once the frame that shows what was just drawn has been painted: a message posted from that frame's
// animation callback is handled after its rendering (the "afterframe" technique).
function afterPaint(inAnimationFrame, fn) {
  const post = () => {
    const channel = new MessageChannel();
    channel.port1.onmessage = fn;
    channel.port2.postMessage(undefined);
  };
  if (inAnimationFrame) post();
  else requestAnimationFrame(post);
}
