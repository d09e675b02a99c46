"""What the "Attention as transport" page computes, built on :mod:`wviz.attention` and, for semi-relaxed OT,
:mod:`wviz.ot`.

Each regularised map returns argmin_{p in simplex} -<s, p> + tau * Omega(p) (eq. (13) of the 001 note), so
dividing the scores by tau and solving with tau = 1 gives the same point; the tau sweep uses this to solve all
temperatures in one batched call.

Semi-relaxed OT (Chizat et al. 2018; wviz.ot.semirelaxed) couples queries through the keys' column sums, so it
needs several queries: the page's query and every key as a query too (the self-attention of the tokens: s_ij =
<x_i, k_j> with x = (q, k_1, ..., k_m)), each with mass 1 / n, the keys' target b the prior (uniform without one),
gamma = tau. Its bars are the page's query's row of the plan times n; with typed scores there is one query, and
the problem is the prior-softmax at temperature tau + rho (its one row is its column sums).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from wviz import attention, grids, io, ot
from wviz.guide import Try

MECHANISMS = attention.MECHANISMS
TAUS = torch.logspace(-3, 3, 121, dtype=torch.float64)   # the tau sweep's grid
ANIMATION_TAUS = torch.logspace(-3, 3, 25, dtype=torch.float64)  # the tau sweep's animation: the sweep's range
ANIMATION_TITLE = f"The weights as tau grows from {float(ANIMATION_TAUS[0]):g} to {float(ANIMATION_TAUS[-1]):g}"
SIDE_TAUS = (0.1, 10.0)                                   # the side-by-side view's default temperatures
F64 = torch.float64


# ---- widget keys and view labels -------------------------------------------------------------------------------

class Keys:
    """The page's widget keys: the names its URL holds (bind="query-params"). The page, TRY_THIS and the tests
    read them here, so a rename cannot leave a guided link pointing nowhere."""
    SOURCE = "source"
    MECHANISMS = "mechanisms"
    ALPHA = "alpha"
    RHO = "rho"
    QUERY_X = "qx"
    QUERY_Y = "qy"
    KEYS_TABLE = "keys_table"
    M = "m"
    D = "d"
    SEED = "seed"
    SCORES = "scores"
    PRIOR_TABLE = "prior_table_{}"
    TAU = "tau"
    LANDSCAPE_MECHANISM = "land_mech"
    SWEEP_MECHANISM = "sweep_mech"
    SIDE_TAU = "side_tau"
    MANY_N = "many_n"
    MANY_M = "many_m"
    MANY_D = "many_d"
    MANY_MECHANISM = "many_mech"
    VIEW = "view"


class Labels:
    """The labels of the page's views (the values of its view selectors)."""
    SIDE_BY_SIDE = "Side by side"
    LANDSCAPE = "Objective on the simplex (m = 3)"
    TAU_SWEEP = "tau sweep"
    RHO_SWEEP = "rho sweep"
    MANY_QUERIES = "Many queries"


def attend(mechanism: str, scores: torch.Tensor, tau: float, alpha: float = 1.5,
           prior: torch.Tensor | None = None) -> torch.Tensor:
    """The closed-form weights p* of ``mechanism`` for scores s (..., m) at temperature tau."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown mechanism {mechanism!r}; choose from {', '.join(MECHANISMS)}")
    if MECHANISMS[mechanism].needs_prior and prior is None:
        raise ValueError("prior-softmax needs a prior distribution over the keys")
    return MECHANISMS[mechanism](scores, tau, prior=prior, alpha=alpha)


def objective(mechanism: str, p: torch.Tensor, scores: torch.Tensor, tau: float, alpha: float = 1.5,
              prior: torch.Tensor | None = None) -> torch.Tensor:
    """-<s, p> + tau * Omega(p) for the regulariser of ``mechanism`` (eq. (13) of the 001 note)."""
    return MECHANISMS[mechanism].objective(p, scores, tau, prior=prior, alpha=alpha)


def dot_scores(query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """s_j = <q, k_j>, i.e. the cost C_j = -<q, k_j> of the one-sided transport problem (eq. (4)-(5), 001)."""
    return keys @ query.unsqueeze(-1) if query.dim() == 1 else query @ keys.transpose(-1, -2)


def random_queries_keys(n: int, m: int, d: int, seed: int, device=None, dtype=torch.float32):
    """n queries and m keys with i.i.d. N(0, 1) entries in R^d, reproducible from ``seed``."""
    g = torch.Generator().manual_seed(int(seed))
    q = torch.randn(n, d, generator=g, dtype=dtype)
    k = torch.randn(m, d, generator=g, dtype=dtype)
    return q.to(device), k.to(device)


@dataclass(frozen=True)
class Landscape:
    """The objective over the 2-simplex for m = 3 keys, with the closed-form and the numerical argmin. The simplex
    is drawn as a triangle (p_1 at the top, p_2 bottom left, p_3 bottom right) rastered into cells."""
    x: torch.Tensor             # (W,) cell centres across
    y: torch.Tensor             # (H,) cell centres up
    points: torch.Tensor        # (H, W, 3) each cell's point p on the simplex
    values: torch.Tensor        # (H, W) objective at p; NaN for cells outside the triangle
    closed_form: torch.Tensor   # (3,) p* from the closed form
    numerical: torch.Tensor     # (3,) argmin found by wviz.attention.solve_simplex (no closed form used)
    closed_value: float
    numerical_value: float

    @property
    def gap(self) -> float:
        """The largest difference between the closed-form and the numerical argmin."""
        return float((self.closed_form - self.numerical).abs().max())

    @staticmethod
    def xy(p):
        """Where the point p (..., 3) of the simplex is drawn on the triangle: x = p_1/2 + p_3, y = sqrt(3)/2 p_1."""
        return p[..., 0] / 2 + p[..., 2], HEIGHT * p[..., 0]


HEIGHT = math.sqrt(3) / 2   # of the equilateral triangle with unit sides that pictures the simplex


def simplex_raster(width: int, dtype=torch.float64):
    """The triangle with corners (1/2, sqrt(3)/2), (0, 0), (1, 0) -- the points x = p_1/2 + p_3, y = sqrt(3)/2 p_1
    for p on the simplex -- cut into square cells, ``width`` across: the centres x (W,), y (H,) and their
    barycentric coordinates (H, W, 3). A cell whose centre is outside the triangle has a negative coordinate.
    One heatmap of these cells redraws faster than a ternary scatter of as many points (BENCHMARKS.md)."""
    height = round(width * HEIGHT)
    x = (torch.arange(width, dtype=dtype) + 0.5) / width
    y = (torch.arange(height, dtype=dtype) + 0.5) / height * HEIGHT
    p1 = (y / HEIGHT).unsqueeze(1).expand(height, width)
    p3 = x - p1 / 2
    return x, y, torch.stack([p1, 1 - p1 - p3, p3], dim=-1)


LANDSCAPE_WIDTH = 80   # cells across the simplex's triangle


def landscape(mechanism: str, scores: torch.Tensor, tau: float, alpha: float = 1.5,
              prior: torch.Tensor | None = None, width: int = LANDSCAPE_WIDTH) -> Landscape:
    """Objective landscape on the 2-simplex for three scores, closed form vs generic solver."""
    if scores.shape[-1] != 3:
        raise ValueError(f"the simplex landscape needs exactly 3 keys, got {scores.shape[-1]}")
    s = scores.detach().to("cpu", torch.float64)
    pr = None if prior is None else prior.detach().to("cpu", torch.float64)
    x, y, points = simplex_raster(width)
    # Cells that the triangle's sides cut get the value at a point of the simplex next to their centre (clamped
    # and renormalised), so that the drawn triangle is filled to its sides.
    inside = (points >= -1.0 / width).all(-1)
    points = points.clamp(min=0)
    points = points / points.sum(-1, keepdim=True)
    values = torch.full(inside.shape, math.nan, dtype=torch.float64)
    values[inside] = objective(mechanism, points[inside], s.expand(int(inside.sum()), 3), tau, alpha, pr)
    closed = attend(mechanism, s, tau, alpha, pr)
    numerical = MECHANISMS[mechanism].solve(s, tau, prior=pr, alpha=alpha, tol=1e-13)
    return Landscape(x, y, points, values, closed, numerical,
                     float(objective(mechanism, closed, s, tau, alpha, pr)),
                     float(objective(mechanism, numerical, s, tau, alpha, pr)))


def landscape_live_inputs(mechanism: str, scores: torch.Tensor, prior: torch.Tensor | None) -> dict:
    """What the browser recomputes the landscape from while tau or alpha moves (wviz.ui.drag, its "landscape"
    figure): the mechanism, its regulariser Omega, the three scores, the prior and the raster's width."""
    return {"mechanism": mechanism, "omega": MECHANISMS[mechanism].omega, "scores": scores, "prior": prior,
            "width": LANDSCAPE_WIDTH}


def tau_sweep(mechanism: str, scores: torch.Tensor, taus: torch.Tensor, alpha: float = 1.5,
              prior: torch.Tensor | None = None) -> torch.Tensor:
    """Weights (T, m) for each tau in ``taus``: from argmax (tau -> 0) to uniform or the prior (tau -> inf)."""
    s = scores.reshape(1, -1) / taus.to(scores).reshape(-1, 1)
    return attend(mechanism, s, 1.0, alpha, prior)


# ---- the page's inputs -----------------------------------------------------------------------------------------

DEFAULT_KEYS = pd.DataFrame({"x": [1.0, 0.2, -0.8], "y": [0.2, 1.0, -0.4]})
DEFAULT_QUERY = (1.0, 0.3)
DEFAULT_MECHANISMS = ("softmax", "sparsemax", "entmax")
DEFAULT_ALPHA = 1.5


def scores_from_points(query: tuple[float, float], keys: pd.DataFrame) -> torch.Tensor:
    """s_j = <q, k_j> (m,) for a 2-D query and the keys table (columns x, y, one key per row)."""
    if len(keys) == 0:
        raise ValueError("add at least one key to the table")
    k = torch.tensor(io.table_values(keys, ["x", "y"], "keys table"), dtype=F64)
    return dot_scores(torch.tensor(query, dtype=F64), k).squeeze(-1)


def scores_random(m: int, d: int, seed: int) -> torch.Tensor:
    """s_j = <q, k_j> (m,) for a random query and m random keys in R^d."""
    q, k = random_queries_keys(1, m, d, seed, dtype=F64)
    return dot_scores(q[0], k).squeeze(-1)


def scores_typed(text: str) -> torch.Tensor:
    """The scores s_j typed as numbers ('2, 1, 0.5'; -inf masks a key)."""
    return torch.tensor(io.parse_numbers(text, "score"), dtype=F64)


def prior_table(m: int) -> pd.DataFrame:
    """The prior editor's starting table: uniform over the m keys."""
    return pd.DataFrame({"key": [f"k{j + 1}" for j in range(m)], "prior": [1.0 / m] * m})


def prior_from_table(table: pd.DataFrame) -> torch.Tensor:
    """The prior pi (m,) from the editor. Every problem with it is named at once in one ValueError: empty or
    non-numeric cells and negative weights by key, then a total that is not 1."""
    keys = [str(k) for k in table["key"]]
    values = pd.to_numeric(table["prior"], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    problems = [f"{k} is empty or not a number" for k, v in zip(keys, values) if not np.isfinite(v)]
    problems += [f"{k} has a negative weight ({v:g})" for k, v in zip(keys, values) if v < 0]
    if not problems and abs(values.sum() - 1) > 1e-6:   # the tolerance of wviz.attention's own check
        problems.append(f"the weights sum to {values.sum():.6g}, not 1")
    if problems:
        example = ", ".join(f"{k} = {1 / len(keys):.3g}" for k in keys[:3]) + (", ..." if len(keys) > 3 else "")
        raise ValueError("The prior table has a problem: " + "; ".join(problems) + ". A prior gives each key a "
                         f"number >= 0 and the numbers sum to 1 (uniform: {example}); a zero masks a key.")
    return torch.tensor(values, dtype=F64)


@dataclass(frozen=True)
class Inputs:
    """What the controls set apart from tau: scores s (m,), the prior pi (m,) (None unless prior-softmax or
    semi-relaxed OT is chosen), the mechanisms and the entmax index alpha; for semi-relaxed OT every query's scores
    (n, m) (row 0: s; None: s alone) and rho."""

    scores: torch.Tensor
    prior: torch.Tensor | None
    mechanisms: tuple[str, ...]
    alpha: float
    queries: torch.Tensor | None = None
    rho: float = 1.0

    def __post_init__(self):
        if not self.mechanisms:
            raise ValueError("choose at least one mechanism")

    @property
    def labels(self) -> list[str]:
        return [f"k{j + 1}" for j in range(self.scores.shape[-1])]

    @property
    def cache_key(self) -> tuple:
        """What names the semi-relaxed problem of these inputs in a cache: every query's scores and the prior."""
        return tuple(None if t is None else tuple(t.reshape(-1).tolist()) + tuple(t.shape)
                     for t in (self.scores, self.queries, self.prior))


@dataclass(frozen=True)
class Weights:
    """p* of every chosen mechanism (name -> (m,)) at temperature tau; semi: the semi-relaxed problem when it is
    chosen (its p is the page's query's row)."""

    inputs: Inputs
    tau: float
    p: dict[str, torch.Tensor]
    semi: SemiRelaxed | None = None


def weights(inputs: Inputs, tau: float) -> Weights:
    semi = semi_relaxed(inputs, tau, inputs.rho) if SEMI in inputs.mechanisms else None
    return Weights(inputs, tau, {name: semi.weights if name == SEMI and semi is not None else
                                 attend(name, inputs.scores, tau, inputs.alpha, inputs.prior)
                                 for name in inputs.mechanisms}, semi)


def live_inputs(w: Weights) -> dict:
    """What the browser recomputes the weights bars from while tau, alpha or rho moves (wviz.ui.drag, its
    "weights" figure); with semi-relaxed OT its problem (:func:`semi_problem`) and the released plan's potentials,
    where the browser's Sinkhorn starts."""
    i = w.inputs
    live = {"scores": i.scores, "prior": i.prior, "mechanisms": list(i.mechanisms)}
    if w.semi is not None:
        a, b, C = semi_problem(i)
        live["semi"] = {"a": a, "b": b, "C": C, "f": w.semi.potentials[0], "g": w.semi.potentials[1], "tol": SEMI_TOL}
    return live


def at_defaults():
    """The page's weights at its default inputs as a function of tau (its main slider): bench_latency's
    reference draws them (wviz.registry)."""
    inputs = Inputs(scores_from_points(DEFAULT_QUERY, DEFAULT_KEYS), None, DEFAULT_MECHANISMS, DEFAULT_ALPHA)
    return lambda tau: weights(inputs, tau)


MAX_WEIGHT_COLUMNS = 6   # the summary table lists each key's weight p*(k_j) up to this many keys (the bars show all)


def summary(w: Weights) -> pd.DataFrame:
    """Per mechanism: support size, entropy H(p*) and the objective -<s, p*> + tau Omega(p*) (eq. (13), 001); with
    at most MAX_WEIGHT_COLUMNS keys, each key's weight p*(k_j) too (the numbers the bars only hint at: 6e-244, 0)."""
    i = w.inputs
    table = {
        "mechanism": list(w.p),
        "support size": [int(attention.support_size(p)) for p in w.p.values()],
        "entropy (nats)": [float(attention.entropy(p)) for p in w.p.values()],
        # semi-relaxed OT's objective belongs to all queries together, not to one query's p: none here
        "objective": [math.nan if n == SEMI else float(objective(n, p, i.scores, w.tau, i.alpha, i.prior))
                      for n, p in w.p.items()],
    }
    if len(i.labels) <= MAX_WEIGHT_COLUMNS:
        table |= {f"p({label})": [float(p[j]) for p in w.p.values()] for j, label in enumerate(i.labels)}
    return pd.DataFrame(table)


def sweep_frames(inputs: Inputs, taus=ANIMATION_TAUS) -> list[Weights]:
    """The weights of every chosen mechanism at each tau of ``taus`` (the frames of the tau-sweep animation)."""
    return [weights(inputs, float(t)) for t in taus]


# ---- semi-relaxed OT: from softmax to Sinkhorn -------------------------------------------------------------------

SEMI = "semi-relaxed OT"
CHOICES = (*MECHANISMS, SEMI)                                # what the page's mechanisms multiselect offers
RHOS = grids.rho_grid()                                # the rho slider: 1e-3 to 1e4, then infinity
DEFAULT_RHO = 1.0
rho_text = grids.rho_text
SWEEP_RHOS = torch.tensor(grids.rho_grid(per_decade=6, infinity=False), dtype=F64)   # the rho sweep's grid
# the frames of the rho sweep's animation: softmax's end, 22 values from 1e-3 to 1e4, the balanced end
ANIMATION_RHOS = (0.0, *grids.rho_grid(per_decade=3, infinity=False), math.inf)


def queries_from_points(scores: torch.Tensor, keys: pd.DataFrame) -> torch.Tensor:
    """Every query's scores (m + 1, m) for semi-relaxed OT: the page's query's scores s first, then each key as a
    query, s_ij = <k_i, k_j> (the self-attention of the tokens q, k_1, ..., k_m)."""
    k = torch.tensor(io.table_values(keys, ["x", "y"], "keys table"), dtype=F64)
    return torch.cat([scores[None], k @ k.T])


def queries_random(scores: torch.Tensor, m: int, d: int, seed: int) -> torch.Tensor:
    """As :func:`queries_from_points` for the random query's scores s and its m random keys in R^d."""
    _, k = random_queries_keys(1, m, d, seed, dtype=F64)
    return torch.cat([scores[None], k @ k.T])


@dataclass(frozen=True)
class SemiRelaxed:
    """Semi-relaxed OT of the page's n queries over its m keys at gamma = tau and rho (wviz.ot.sinkhorn):

    plan      (n, m) P, each row holding its query's mass 1 / n
    weights   (m,) the page's query's weights: n times row 0 of P
    columns   (m,) P^T 1, what each key receives from all queries, against its target b (m,)
    kl        KL(P^T 1 | b)
    n_iter, converged  of the solve (0 and True at the closed-form ends)
    potentials (f, g) with P_ij = exp((f_i + g_j - C_ij) / tau): where the browser starts its solve during a drag
    """

    tau: float
    rho: float
    plan: torch.Tensor
    weights: torch.Tensor
    columns: torch.Tensor
    b: torch.Tensor
    kl: float
    n_iter: int
    converged: bool
    potentials: tuple[torch.Tensor, torch.Tensor] = field(compare=False)


def semi_problem(inputs: Inputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """a (n,), b (m,) and C (n, m) = -scores of the page's semi-relaxed problem: every query with mass 1 / n, the
    keys' target b the prior (uniform without one) on the keys that no score masks (-inf), renormalised."""
    S = inputs.scores[None] if inputs.queries is None else inputs.queries
    if bool((torch.isnan(S) | (S == math.inf)).any()):
        raise ValueError("the scores contain NaN or +inf; use large finite scores (-inf masks a key)")
    n, m = S.shape
    live = torch.isfinite(S).all(0)
    b = inputs.prior if inputs.prior is not None else torch.full((m,), 1.0 / m, dtype=F64)
    b = torch.where(live, b.to(F64), 0)
    if not float(b.sum()) > 0:
        raise ValueError("every key is masked: give at least one key a finite score and a prior above 0")
    return torch.full((n,), 1.0 / n, dtype=F64), b / b.sum(), torch.where(live, -S, 0)


SEMI_TOL = 1e-6   # the L1 marginal error at which semi-relaxed OT's Sinkhorn stops


def _semi(a, b, C, tau: float, rho: float, init=None) -> tuple[SemiRelaxed, ot.OTResult]:
    res = ot.sinkhorn(a, b, C, tau, tol=SEMI_TOL, rho=rho, init=init)
    P = res.plan
    return SemiRelaxed(tau, rho, P, P[0] * P.shape[0], res.column_sums, b, float(res.column_kl), res.n_iter,
                       bool(res.converged), (res.f, res.g)), res


def semi_relaxed(inputs: Inputs, tau: float, rho: float) -> SemiRelaxed:
    """The page's semi-relaxed problem (:func:`semi_problem`) at gamma = tau and rho (0: each row's
    prior-softmax, inf: the balanced plan)."""
    return _semi(*semi_problem(inputs), tau, rho)[0]


@dataclass(frozen=True)
class RhoSweep:
    """Semi-relaxed OT over a grid of rhos at one tau: the page's query's weights (R, m) and the keys' column sums
    (R, m) at each rho of rhos (R,), the two closed ends (rho = 0: prior-softmax; rho = inf: balanced) and b."""

    tau: float
    rhos: torch.Tensor
    weights: torch.Tensor
    columns: torch.Tensor
    ends: tuple[SemiRelaxed, SemiRelaxed]
    b: torch.Tensor


def _semi_series(inputs: Inputs, tau: float, rhos) -> list[SemiRelaxed]:
    """The page's semi-relaxed problem at each rho, in order, each solve warm-started from the one before."""
    a, b, C = semi_problem(inputs)
    out, previous = [], None
    for rho in rhos:
        semi, res = _semi(a, b, C, tau, float(rho), previous if 0 < rho < math.inf else None)
        out.append(semi)
        previous = res if 0 < rho < math.inf else previous
    return out


def rho_sweep(inputs: Inputs, tau: float, rhos: torch.Tensor = SWEEP_RHOS) -> RhoSweep:
    """The road from softmax to the balanced plan: semi-relaxed OT at every rho of the grid (and the two ends)."""
    series = _semi_series(inputs, tau, [0.0, *rhos.tolist(), math.inf])
    inner = series[1:-1]
    return RhoSweep(tau, rhos, torch.stack([x.weights for x in inner]), torch.stack([x.columns for x in inner]),
                    (series[0], series[-1]), series[0].b)


def rho_frames(inputs: Inputs, tau: float, rhos=ANIMATION_RHOS) -> list[SemiRelaxed]:
    """The frames of the rho sweep's animation: semi-relaxed OT at each rho of ``rhos`` (0 to infinity)."""
    return _semi_series(inputs, tau, rhos)


# ---- guided experiments ----------------------------------------------------------------------------------------

# A non-uniform prior over the three default keys, as the prior editor writes it to the URL (parameter prior_table_3).
# The temperatures are written as the tau slider writes them to the URL ("100", not "100.0"): 100, not 100.0.
PRIOR_EXAMPLE = '[["k1",0.6],["k2",0.3],["k3",0.1]]'
TRY_THIS = (
    Try("Send tau to 0.001", {Keys.TAU: 0.001},
        "Sparsemax and entmax put all the mass on k1 (support 1 in the table). Softmax is one-hot to the eye "
        "too: its other weights are exp(-(s_1 - s_j) / tau), 6.239e-244 for k2 (the table's p(k2)) and, for k3, "
        "smaller than the smallest double, so it shows as 0 (support 2), although in exact arithmetic softmax "
        "keeps every weight above zero."),
    Try("Send tau to 100", {Keys.TAU: 100},
        "Every mechanism flattens to about 1/3 per key (the table's weights run from 0.322 to 0.3418): the "
        "regulariser outweighs the scores, and even sparsemax keeps all three keys (support 3)."),
    Try("entmax with alpha = 1", {Keys.MECHANISMS: ["softmax", "entmax"], Keys.ALPHA: 1.0},
        "The entmax bars equal the softmax bars (and so do their rows of the table): the Tsallis entropy with "
        "alpha = 1 is Shannon's."),
    Try("Semi-relaxed OT: from softmax to Sinkhorn", {Keys.MECHANISMS: ["softmax", SEMI], Keys.RHO: 1000.0,
                                                       Keys.VIEW: Labels.RHO_SWEEP},
        "The four tokens (the query and the three keys) attend to the three keys. Softmax gives k3 0.08078 (the "
        "table's p(k3)); semi-relaxed OT at rho = 1000 holds every key's column sum at b = 1/3 (the caption reads "
        "KL(P^T 1 | b) = 5.5e-08), so the query's weight on k3 nearly doubles, to 0.1512. The sweep walks rho from "
        "0 (softmax) to infinity (Sinkhorn's balanced plan)."),
    Try("prior-softmax with the prior (0.6, 0.3, 0.1) at tau = 100",
        {Keys.MECHANISMS: ["softmax", "prior-softmax"], Keys.TAU: 100, Keys.PRIOR_TABLE.format(3): PRIOR_EXAMPLE},
        "Softmax goes to uniform but prior-softmax goes to the prior (0.6, 0.3, 0.1): the table reads 0.6022, "
        "0.2994 and 0.0984. KL(p || pi) pulls the weights towards pi, not towards uniform."),
)


# ---- many queries at once ------------------------------------------------------------------------------------

def pool_for_display(matrix: torch.Tensor, max_side: int = 512) -> tuple[torch.Tensor, int, int]:
    """Average-pool a large (n, m) matrix to at most max_side per side for the browser.

    Returns the pooled matrix and the block size along each axis (1 where nothing was pooled); a 4096 x 4096
    heatmap would send 16 M cells to the browser, a 512 x 512 block mean keeps the picture.
    """
    n, m = matrix.shape[-2:]
    bn, bm = -(-n // max_side), -(-m // max_side)
    if bn == 1 and bm == 1:
        return matrix.detach().cpu(), 1, 1
    pooled = F.avg_pool2d(matrix.reshape(1, 1, n, m).float(), (bn, bm), ceil_mode=True)
    return pooled[0, 0].cpu(), bn, bm


@dataclass(frozen=True)
class ManyQueries:
    """n random queries against m random keys: the (pooled) n x m weights, how much they were pooled, the time
    the weights took, their mean support size and where they were computed ('cpu' or 'cuda': semi-relaxed OT of at
    most wviz.ot's CPU_ROUTE_SIZE entries is solved on the CPU, wviz.ot.OTResult.solved_on)."""

    pooled: torch.Tensor
    block: tuple[int, int]
    seconds: float
    mean_support: float
    solved_on: str = "cpu"
    potentials: tuple | None = None   # semi-relaxed OT's (f, g), where the browser's Sinkhorn starts


def many_queries(mechanism: str, n: int, m: int, d: int, seed: int, tau: float, alpha: float,
                 device: str = "cpu", rho: float = DEFAULT_RHO) -> ManyQueries:
    """Attention of n random queries over m random keys (prior-softmax with a uniform prior; semi-relaxed OT with
    a uniform b, each query of mass 1 / n, its rows times n), timed on ``device``."""
    q, k = random_queries_keys(n, m, d, seed, device=device)
    prior = torch.full((m,), 1.0 / m, device=device) if mechanism == "prior-softmax" else None
    s = dot_scores(q, k)
    t0 = time.perf_counter()
    res = None
    if mechanism == SEMI:
        uniform = (torch.full((n,), 1.0 / n, device=device), torch.full((m,), 1.0 / m, device=device))
        res = ot.sinkhorn(*uniform, -s, tau, tol=SEMI_TOL, rho=rho)
        p, where = res.plan * n, res.solved_on
    else:
        p = attend(mechanism, s, tau, alpha, prior)
        where = p.device.type
    if p.is_cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    pooled, bn, bm = pool_for_display(p)
    return ManyQueries(pooled, (bn, bm), seconds, float(attention.support_size(p).float().mean()), where,
                       None if res is None else (res.f, res.g))


def many_live_inputs(res: ManyQueries, mechanism: str, n: int, m: int, d: int, seed: int) -> dict:
    """What the browser recomputes many_queries' heatmap from while tau, alpha or rho moves (wviz.ui.drag, its
    "many" figure): the mechanism, the scores (n, m) of the same random queries and keys and the uniform prior;
    for semi-relaxed OT its problem and the released plan's potentials, where the browser's Sinkhorn starts."""
    s = dot_scores(*random_queries_keys(n, m, d, seed))
    live = {"mechanism": mechanism, "scores": s, "prior": [1.0 / m] * m if mechanism == "prior-softmax" else None}
    if res.potentials is not None:
        live["semi"] = {"a": [1.0 / n] * n, "b": [1.0 / m] * m, "C": -s, "f": res.potentials[0],
                        "g": res.potentials[1], "tol": SEMI_TOL}
    return live
