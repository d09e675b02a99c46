"""What the "Particles and contraction" page computes, built on :mod:`wviz.measure` (source: 003).

Tokens are 2-D particles, X^0 a preset cloud or an upload; every layer moves each particle to its attention
output (the measure flow mu -> mu A_mu, Sec. 3.1). kappa(A) is the contraction coefficient of Def. 22 (named as in
wviz.measure); tau is the temperature of G. The bounds are those of Thm. 23 (compact E, with the corrected constant
of wviz.measure), Cor. 30 (Gaussian potential on R^d, as printed) and Prop. 26 (the fixed point of the
weight-shared layer).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from wviz import io, measure, sample_data
from wviz.guide import Try

PRESETS = ("clusters", "ring", "random")
UPLOAD = "uploaded CSV"
POTENTIALS, GROUNDS, PERTURBATIONS = measure.POTENTIALS, measure.GROUNDS, measure.PERTURBATIONS
COR30_LOG10_N = range(1, 13)   # the counterexample to Cor. 30 for N = 10, 100, ..., 10^12 tokens


# ---- widget keys and view labels -------------------------------------------------------------------------------

class Keys:
    """The page's widget keys: the names its URL holds (bind="query-params"). The page, TRY_THIS and the tests
    read them here, so a rename cannot leave a guided link pointing nowhere."""
    PRESET = "preset"
    N = "n"
    PARTICLES_CSV = "particles_csv"
    SEED = "seed"
    LAYERS = "layers"
    POTENTIAL = "potential"
    TAU = "tau"
    IDENTITY = "identity"
    SHARED = "shared"
    VALUE_SCALE = "value_scale"
    RESIDUAL = "residual"
    NORM = "norm"
    GROUND = "ground"
    PERTURBATION = "perturbation"
    SIGMA = "sigma"
    SAMPLES = "samples"
    QUERY = "query"
    SIDE_TAU = "side_tau"
    VIEW = "view"


class Labels:
    """The labels of the page's views (the values of its view selectors)."""
    CONTRACTION = "Contraction"
    INFINITE_DEPTH = "Infinite depth"
    MAXIMUM_ENTROPY = "Maximum entropy"
    SIDE_BY_SIDE = "Side by side"


# ---- the page's inputs -----------------------------------------------------------------------------------------

def particles(preset: str, n: int, seed: int = 0) -> torch.Tensor:
    """n particles (n, 2): two Gaussian clusters, a noisy ring of radius 1, or uniform in [-1, 1]^2."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
    if n < 2:
        raise ValueError("use at least two particles")
    if preset == "clusters":
        x, y = sample_data.point_clouds("gaussians", n // 2, n - n // 2, seed)
        return torch.cat([x, y])
    if preset == "ring":
        return 2 * sample_data.point_clouds("rings", n, 1, seed)[0]
    return 2 * sample_data.point_clouds("random", n, 1, seed)[0] - 1


def uploaded_particles(data: bytes | None) -> tuple[torch.Tensor, torch.Tensor]:
    """X and a second input Y from a CSV with columns cloud, x, y (the 'source' and the 'target' rows). Particles
    are the uniform measure m(X) (Sec. 3.1), so a mass column, if there is one, must be constant."""
    if data is None:
        raise ValueError("upload a CSV with columns cloud, x, y, or choose a preset")
    x, a, y, b = io.read_points_csv(data)
    for name, w in (("source", a), ("target", b)):
        if not torch.allclose(w, torch.full_like(w, 1 / len(w))):
            raise ValueError(f"the {name} masses differ: particles are the uniform measure m(X), so leave out the "
                             "mass column or make it constant")
    return x, y


def example_particles_csv() -> bytes:
    """An example of the particles upload: X, six points on a circle of radius 1 (the 'source' rows), and Y, the
    same points turned by 30 degrees and pulled in to radius 0.8 (the 'target' rows), coordinates to 4 decimals."""
    rows = ["cloud,x,y"]
    for cloud, radius, turn in (("source", 1.0, 0.0), ("target", 0.8, math.pi / 6)):
        for k in range(6):
            angle = turn + k * math.pi / 3
            x, y = (round(radius * f(angle), 4) + 0.0 for f in (math.cos, math.sin))   # + 0.0: no "-0.0"
            rows.append(f"{cloud},{x:.4f},{y:.4f}")
    return ("\n".join(rows) + "\n").encode()


def layer_projections(d: int, layers: int, identity: bool, shared: bool, seed: int, value_scale: float = 1.0):
    """The projections argument of measure.self_attention_flow: None (identities), one triple (W_Q, W_K, s W_V)
    from ``seed`` (shared), or one triple per layer from seeds seed, seed + 1, ... (s = value_scale)."""
    if identity and value_scale == 1.0:
        return None

    def triple(h):
        W_Q, W_K, W_V = sample_data.projections(d, None if identity else seed + h)
        return W_Q, W_K, value_scale * W_V

    return triple(0) if shared or identity else [triple(h) for h in range(layers)]


def first_layer(projections):
    """The (W_Q, W_K, W_V) of layer 1 (None: identities)."""
    return projections if projections is None or isinstance(projections, tuple) else projections[0]


@dataclass(frozen=True)
class Inputs:
    """What the controls set apart from tau: X^0 (N, 2) and the uploaded second input Y (or None); the depth L;
    the potential G; the projections (None: identities; one triple (W_Q, W_K, W_V) shared by every layer, or a
    list of one per layer); residual connections and normalisation; the W1 ground metric; the seed of the
    sampled perturbations."""

    x: torch.Tensor
    y: torch.Tensor | None
    layers: int
    potential: str
    projections: object
    residual: bool
    norm: bool
    ground: str
    seed: int

    @property
    def n(self) -> int:
        """N, the number of particles of X^0."""
        return self.x.shape[0]

    @property
    def first(self):
        """The first layer's projections, those of the one-layer checks (None: identities)."""
        return first_layer(self.projections)


def inputs(source: str, n: int | None, upload: bytes | None, seed: int, layers: int, potential: str,
           identity: bool, shared: bool, value_scale: float, residual: bool, norm: bool, ground: str) -> Inputs:
    """The page's Inputs from its controls: ``source`` a preset (n particles) or UPLOAD (the CSV's bytes)."""
    if source == UPLOAD:
        x, y = uploaded_particles(upload)
    elif n is None:
        raise ValueError("a preset needs its number of particles n")
    else:
        x, y = particles(source, n, seed), None
    projections = layer_projections(x.shape[-1], layers, identity, shared, seed, value_scale)
    return Inputs(x, y, layers, potential, projections, residual, norm, ground, int(seed))


# ---- the particle flow -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Flow:
    """The particles through L layers at temperature tau: trajectory (L + 1, N, 2), X^0 first, and steps (L,)
    W1(m(X^{h-1}), m(X^h)) between consecutive layers."""

    inputs: Inputs
    tau: float
    trajectory: torch.Tensor
    steps: torch.Tensor


def flow(i: Inputs, tau: float) -> Flow:
    """delta_{x^{h+1}} = delta_{x^h} A^h_{m(X^h)} (Sec. 3.1) for L layers, and how far each layer moved the
    measure."""
    shared = not isinstance(i.projections, list)
    traj = measure.self_attention_flow(i.x, i.layers, i.potential, tau, i.projections, shared, i.residual, i.norm)
    steps = torch.stack([measure.w1(traj[h], traj[h + 1], i.ground) for h in range(i.layers)]) if i.layers else \
        torch.zeros(0, dtype=traj.dtype)
    return Flow(i, tau, traj, steps)


def live_inputs(f: Flow) -> dict:
    """What the browser recomputes the flow from while tau moves (wviz.ui.drag, its "flow" figure): X^0, the depth,
    the potential, each layer's (W_Q, W_K, W_V) (None: identities), residual and normalisation."""
    i = f.inputs
    per_layer = [i.projections] * i.layers if isinstance(i.projections, tuple) else i.projections
    return {"x": i.x, "layers": i.layers, "potential": i.potential, "projections": per_layer,
            "residual": i.residual, "norm": i.norm}


def at_defaults():
    """The page's particle flow at its default inputs (the first preset, N = 40, seed 0, 10 layers, the Gaussian
    potential, shared identity weights) as a function of tau (its main slider): bench_latency's reference draws
    it."""
    i = inputs(PRESETS[0], 40, None, 0, 10, POTENTIALS[1], True, True, 1.0, False, False, GROUNDS[0])
    return lambda tau: flow(i, tau)


# ---- contraction (Def. 22, Thm. 23, Cor. 30) -------------------------------------------------------------------

@dataclass(frozen=True)
class ContractionCheck:
    """Pairs through one attention layer (the first layer's projections, no residual, no normalisation):
    sampled the pairs around m(X^0) (measure.contraction_ratio); pair (W1 in, W1 out) of the uploaded X and Y;
    local the worst infinitesimal move ||J||_{1->1}; thm23 Thm. 23's constants on a box around every input;
    cor30 Cor. 30's bound (Gaussian potential, W_Q = W_K = I). The last three only for the l1 ground metric, and
    None where they do not apply."""

    perturbation: str
    sampled: measure.Contraction
    pair: tuple[float, float] | None
    local: float | None
    thm23: measure.Thm23Constants | None
    cor30: float | None

    @property
    def largest_ratio(self) -> float:
        """The largest sampled W1(mu A_mu, nu A_nu) / W1(mu, nu), a lower bound of kappa(A)."""
        return float(self.sampled.ratio.max())

    @property
    def slopes(self) -> dict[str, float | None]:
        """The lines y = slope x of the chart: no change, the worst infinitesimal move and the bounds on kappa(A)."""
        t23 = self.thm23
        return {"y = x": 1.0, "worst infinitesimal move ||J||": self.local,
                "Thm. 23 (corrected)": t23.bound if t23 else None, "Thm. 23 as printed": t23.printed if t23 else None,
                "Cor. 30": self.cor30}


def _identity_qk(W) -> bool:
    if W is None:
        return True
    eye = torch.eye(W[0].shape[0], dtype=W[0].dtype)
    return bool(torch.equal(W[0], eye) and torch.equal(W[1], eye))


def _cor30(i: Inputs, perturbation: str) -> float | None:
    """Cor. 30's bound for the pairs of ``perturbation`` (N = the smaller number of tokens of the two measures),
    for the Gaussian potential with W_Q = W_K = I only; K_l = ||W_V||, the l1 operator norm of x -> x W_V."""
    W = i.first
    if i.potential != "gaussian" or not _identity_qk(W):
        return None
    N, d = i.x.shape
    m = {"noise": N, "drop": N - 1, "swap": math.ceil(N / 2)}[perturbation]
    if i.y is not None:
        m = min(m, i.y.shape[0])
    k_l = 1.0 if W is None else W[2].abs().sum(1).max().item()
    return measure.cor30_bound(min(N, m), d, k_l=k_l)


def contraction(f: Flow, perturbation: str, n_samples: int, sigma: float) -> ContractionCheck:
    """Sampled pairs (and the uploaded pair) through one layer, with the bounds on kappa(A) that apply: Thm. 23
    (corrected and as printed) on a box containing every input, Cor. 30 / Thm. 29 (l1 ground metric only)."""
    i, W = f.inputs, f.inputs.first
    res = measure.contraction_ratio(i.x, perturbation, n_samples, i.potential, f.tau, W, i.ground, sigma=sigma,
                                    seed=i.seed)
    lo, hi, pair = res.lo, res.hi, None
    if i.y is not None:
        both = measure.contraction(i.x, i.y, i.potential, f.tau, W, i.ground)
        pair = (float(both.w1_in), float(both.w1_out))
        lo, hi = torch.minimum(lo, i.y.amin(0)), torch.maximum(hi, i.y.amax(0))
    if i.ground != "l1":
        return ContractionCheck(perturbation, res, pair, None, None, None)
    try:
        thm23 = measure.thm23_constants(lo, hi, i.potential, f.tau, W)
    except ValueError:   # eps(G) underflows: Thm. 23 says nothing on this E
        thm23 = None
    return ContractionCheck(perturbation, res, pair, measure.local_contraction(i.x, i.potential, f.tau, W), thm23,
                            _cor30(i, perturbation))


# ---- infinite depth (Prop. 26) ---------------------------------------------------------------------------------

def banach(x: torch.Tensor, potential: str, tau: float, W, residual: bool, norm: bool):
    """The corrected Thm. 23 bound on E = [-r, r]^d, r = max |x|, when Prop. 26 applies: no residual or norm and
    x -> x W_V maps E into itself (largest column l1 norm of W_V <= 1, so the outputs, averages of the x_j W_V,
    stay in E). None otherwise."""
    if residual or norm:
        return None
    d = x.shape[-1]
    W_V = torch.eye(d, dtype=x.dtype) if W is None else W[2]
    if W_V.abs().sum(0).max().item() > 1:
        return None
    r = x.abs().max().item()
    try:
        return measure.thm23_constants([-r] * d, [r] * d, potential, tau, W)
    except ValueError:
        return None


@dataclass(frozen=True)
class FixedPointCheck:
    """The shared first layer T iterated from X^0 (measure.FixedPoint); banach the corrected Thm. 23 constants on
    E = [-r, r]^d when T maps E into itself (else None); envelope (n_iter + 1,) Prop. 26's bound
    kappa(T)^l / (1 - kappa(T)) W1(mu^1, mu^0) when kappa(T) <= banach.bound < 1 (else None); lone_points_fixed:
    Gaussian potential with identity projections, where every single point is a fixed point."""

    result: measure.FixedPoint
    banach: measure.Thm23Constants | None
    envelope: torch.Tensor | None
    lone_points_fixed: bool


def fixed_point(f: Flow, max_iter: int = 60) -> FixedPointCheck:
    """X^{l+1} = T(X^l) to its fixed point (Sec. 6.2) and, when Thm. 23 proves kappa(T) < 1, the geometric envelope
    W1(mu^l, mu*) <= kappa(T)^l / (1 - kappa(T)) W1(mu^1, mu^0) of Prop. 26 (l1 ground metric only)."""
    i, W = f.inputs, f.inputs.first
    fp = measure.fixed_point(i.x, i.potential, f.tau, W, i.residual, i.norm, max_iter=max_iter, ground=i.ground)
    c = banach(i.x, i.potential, f.tau, W, i.residual, i.norm) if i.ground == "l1" else None
    envelope = None
    if c is not None and c.bound < 1:
        levels = torch.arange(fp.n_iter + 1, dtype=torch.float64)
        envelope = c.bound ** levels / (1 - c.bound) * fp.steps[0]
    return FixedPointCheck(fp, c, envelope, i.potential == "gaussian" and W is None)


# ---- maximum entropy (Thm. 14) and the counterexample to Cor. 30 ----------------------------------------------

# A token carries weight in the maximum-entropy view from this fraction of the largest Gibbs weight on
CARRIES = 1e-3


def max_entropy(f: Flow, query: int) -> measure.MaxEntropyCheck:
    """Thm. 14 at the query x = x_i^0 against nu = m(X^0), with the first layer's W_Q, W_K; the query token i counted
    from 1 as the page numbers the particles (past the last: the last).

    The competitors gibbs + t v move mass only between the tokens that carry weight (:func:`carriers`): at the
    defaults the far cluster's Gibbs weights are about 1e-18, and directions through them drew a real peak a
    femto-step wide (measure.max_entropy_check's ``carries``)."""
    i, W = f.inputs, f.inputs.first
    W_Q, W_K = (None, None) if W is None else W[:2]
    return measure.max_entropy_check(measure.empirical(i.x), i.x[min(max(int(query), 1), len(i.x)) - 1],
                                     i.potential, f.tau, W_Q, W_K, seed=i.seed, carries=CARRIES)


def carriers(chk: measure.MaxEntropyCheck) -> int:
    """How many tokens the maximum-entropy view's directions move mass between (:func:`max_entropy`)."""
    return int((chk.directions != 0).any(0).sum())


def cor30_failure() -> measure.Cor30Failure:
    """The paper's Cor. 30 against its counterexample (measure.cor30_failure) for N = 10 to 10^12 tokens, d = 1."""
    return measure.cor30_failure(COR30_LOG10_N)


# ---- side by side and guided experiments -----------------------------------------------------------------------

SIDE_TAUS = (0.1, 1.0)   # the two temperatures of the "Side by side" view (log-slider grid values)

TRY_THIS = (
    Try("Raise tau to 3.16", {Keys.TAU: 3.16},
        "Each particle now attends to every other one: within five layers both clusters collapse to a single point "
        r"and the $W_1$ steps between consecutive layers drop to zero from layer 5 on."),
    Try("Lower tau to 0.0316", {Keys.TAU: 0.0316},
        "Each particle listens to its nearest neighbours only: after the 10 layers the clouds have broken into "
        "many small clusters that stay apart."),
    Try("Compare two temperatures", {Keys.VIEW: Labels.SIDE_BY_SIDE, Keys.SIDE_TAU + "_left": 0.0316,
                                     Keys.SIDE_TAU + "_right": 3.16},
        r"The same particles after the same layers: many small clusters at the small $\tau$, one point at the "
        r"large one."),
    Try("Measure the contraction on 32 sampled pairs", {Keys.SAMPLES: 32},
        r"The sampled ratios $W_1$ out / $W_1$ in stay below 1 here (the largest ratio metric reads 0.838), while "
        r"the corrected Thm. 23 bound is 3.79e42 (its metric; far above the chart): the bound holds but says "
        r"little; Cor. 30's line (its metric: 27.2) is far closer."),
    Try("Make the fixed point provable", {Keys.VIEW: Labels.INFINITE_DEPTH, Keys.PRESET: "random",
                                          Keys.VALUE_SCALE: 0.1, Keys.TAU: 31.6},
        r"Small values and a large $\tau$ make the corrected Thm. 23 bound on $\kappa(T)$ fall below 1 (the "
        r"caption reads kappa(T) <= 0.827): the distance to the fixed point stays under Prop. 26's geometric "
        r"envelope."),
)
