"""What the "Attention solves a dual problem" page computes, built on :mod:`wviz.fenchel` (source: 002).

Templates t_i in the plane with preference weights u_i, an evidence z and alpha, the reliability of z in problem
(4); every function batches over the alphas (or gammas) it is given, so a sweep is one Newton solve.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch

from wviz import fenchel, io
from wviz.guide import Try
from wviz.ot import cost_matrix

F64 = torch.float64
FIGURE3_ALPHAS = (0.1, 0.5, 1.0, 2.0, 5.0)               # the grid of the paper's Figure 3
ALPHAS = torch.logspace(-2, 1, 61, dtype=F64)            # the alpha sweep of the dual view
GAMMAS = torch.logspace(-2, 1, 31, dtype=F64)            # the gamma sweep of the OT view
COSTS = {"squared Euclidean": "sqeuclidean", "Euclidean": "euclidean"}   # the cost M of the OT view, by label

# ---- widget keys and view labels -------------------------------------------------------------------------------

class Keys:
    """The page's widget keys: the names its URL holds (bind="query-params"). The page, TRY_THIS and the tests
    read them here, so a rename cannot leave a guided link pointing nowhere."""
    PRESET = "preset"
    NORMALISE = "normalise"
    Z1 = "z1"
    Z2 = "z2"
    TEMPLATES = "templates_{}"
    ALPHA = "alpha"
    T5_TARGET = "t5_j"
    T5_MASKED = "t5_mask"
    T5_BIAS = "t5_bias"
    EXTRAS = "extras"
    GAMMA = "gamma"
    COST_KIND = "cost_kind"
    COST_TABLE = "cost_{}"
    VIEW = "view"


class Labels:
    """The labels of the page's views (the values of its view selectors)."""
    FIGURE3 = "Figure 3 grid"
    WEIGHTS = "Attention weights"
    DUAL = "The dual problem (9)"
    T5 = "T5 (19)-(20)"
    OT = "OT-based attention"


# ---- the page's starting tables -------------------------------------------------------------------------------

DEFAULT_Z = (1.5, -1.0)   # the evidence z the page starts from
PRESETS = {
    "Figure 3 (four templates)": pd.DataFrame({
        "template": ["t1", "t2", "t3", "t4"], "x": [0.0, 2.0, 1.0, -1.0], "y": [0.0, 0.0, 1.5, 1.0],
        "u": [0.1, 0.4, 0.3, 0.2]}),
    "Uniform u (dot-product attention)": pd.DataFrame({
        "template": ["t1", "t2", "t3", "t4"], "x": [0.0, 2.0, 1.0, -1.0], "y": [0.0, 0.0, 1.5, 1.0],
        "u": [0.25, 0.25, 0.25, 0.25]}),
    "Two clusters": pd.DataFrame({
        "template": ["a1", "a2", "a3", "b1", "b2"], "x": [-2.0, -1.6, -2.2, 2.0, 2.4],
        "y": [0.0, 0.5, 0.6, 0.2, -0.3], "u": [0.3, 0.2, 0.2, 0.2, 0.1]}),
}
T5_BIAS = pd.DataFrame({"offset j - i": list(range(-3, 4)), "b": [-1.2, -0.6, 0.3, 0.0, 0.8, 0.1, -0.9]})
EXTRAS = pd.DataFrame({"template": ["t2'", "t3'", "far"], "x": [2.25, 0.8, 3.0], "y": [0.3, 1.75, 3.0]})


# ---- guided experiments ----------------------------------------------------------------------------------------

# alpha is written as its slider writes it to the URL ("10", not "10.0"): 10, not 10.0.
TRY_THIS = (
    Try("Shrink alpha to 0.01", {Keys.ALPHA: 0.01},
        "All three estimates sit next to mu, on top of each other: z barely counts. The metrics read how close: "
        "the error of (18), attention against the exact (12), is 0.000338, and the error of (15), the second "
        "order, 9.19e-7."),
    Try("Grow alpha to 10 with z = (0.5, 0.25)", {Keys.ALPHA: 10, Keys.Z1: 0.5, Keys.Z2: 0.25},
        "The exact h (the filled orange-red square) follows mu + z, which lies inside the templates' hull, while "
        "attention (18) (the open pink square) leaves it for t2, the template most aligned with z: the error of "
        "(18) metric reads 0.745."),
    Try("Uniform u: dot-product attention",
        {Keys.PRESET: "Uniform u (dot-product attention)", Keys.VIEW: Labels.WEIGHTS},
        "With u_i = 1/4 and alpha = 1, attention (18) is softmax_i <t_i, z>, the dot-product attention of a "
        "transformer."),
    Try("Errors against alpha", {Keys.VIEW: Labels.DUAL},
        "On the log-log plot, as alpha shrinks the error of (18) falls like alpha squared at the small end (two "
        "decades per decade of alpha), and the second-order (15) faster still (three decades per decade)."),
    Try("OT attention at gamma = 0.01", {Keys.VIEW: Labels.OT, Keys.GAMMA: 0.01},
        "The bars of the true preference (40) are back on u (Prop. 1), while those of (25) and of the exact (38) "
        "part ways: alpha / gamma = 100 is far from small."),
)


@dataclass(frozen=True)
class Templates:
    """The templates t (n, 2), their names and the preference u (n,) (normalised when asked)."""

    names: list[str]
    t: torch.Tensor
    u: torch.Tensor


def templates_from_table(table: pd.DataFrame, normalise: bool) -> Templates:
    """The templates table (columns template, x, y, u). With ``normalise``, weights u are divided by their total;
    without it they must already sum to 1. Every problem with the weights or the names is named at once in one
    ValueError; a row without a name is called after its row."""
    if len(table) < 1:
        raise ValueError("add at least one template to the table")
    values = torch.tensor(io.table_values(table, ["x", "y", "u"], "templates table"), dtype=F64)
    t, u = values[:, :2], values[:, 2]
    names = [f"row {k + 1}" if pd.isna(n) or not str(n).strip() else str(n) for k, n in enumerate(table["template"])]
    problems = [f"{n} has a negative weight (u = {w:g})" for n, w in zip(names, u.tolist()) if w < 0]
    problems += [f"the name {n!r} is used by rows {', '.join(str(k + 1) for k, m in enumerate(names) if m == n)}"
                 for n in dict.fromkeys(names) if names.count(n) > 1]
    if not problems and float(u.sum()) <= 0:
        problems.append("every weight u is zero")
    elif not problems and not normalise and abs(float(u.sum()) - 1) > 1e-6:   # the tolerance of wviz.fenchel
        problems.append(f"the weights u sum to {float(u.sum()):.6g}, not 1 (turn on 'Normalise u to sum to 1' to "
                        "rescale them)")
    if problems:
        raise ValueError("The templates table has a problem: " + "; ".join(problems) + ". Each template has its own "
                         "name and a preference weight u >= 0, at least one of them positive, summing to 1 (e.g. "
                         "0.1, 0.4, 0.3, 0.2).")
    return Templates(names, t, u / u.sum() if normalise else u)


# ---- problem (4), its dual (9) and the approximations (15)-(18) ------------------------------------------------

@dataclass(frozen=True)
class Estimates:
    """Per alpha of ``alphas`` (A,): lambda* of (9), alpha z (16) and lambda of (15) (A, d); h of (12), of (18) and
    of (12) at (15) (A, d); the relative deviation ||lambda* - alpha z|| / ||lambda*|| of Sec. 8 (A,); and mu (d,)."""

    alphas: torch.Tensor
    mu: torch.Tensor
    lam: torch.Tensor
    lam1: torch.Tensor
    lam2: torch.Tensor
    h: torch.Tensor
    h1: torch.Tensor
    h2: torch.Tensor
    deviation: torch.Tensor


def estimates(t, u, z, alphas) -> Estimates:
    """lambda* (9), its approximations (15)-(16) and the estimates h of (12), (18) and (12) at (15), per alpha."""
    alphas = torch.as_tensor(alphas, dtype=F64)
    sol = fenchel.solve_dual(t, u, z, alphas)
    lam2 = fenchel.lambda_approx(t, u, z, alphas, order=2)
    return Estimates(
        alphas=alphas, mu=fenchel.mean_and_covariance(t, u).mu, lam=sol.lam, lam1=alphas[:, None] * z, lam2=lam2,
        h=tilted_mean(t, u, sol.lam), h1=fenchel.h_approx(t, u, z, alphas, order=1), h2=tilted_mean(t, u, lam2),
        deviation=fenchel.relative_deviation(sol.lam, z, alphas))


def tilted_mean(t, u, lam) -> torch.Tensor:
    """h = sum_i p~_i t_i with p~ of (11) at lam: (12) when lam = lambda*."""
    return fenchel.tilted_weights(t, u, lam) @ torch.as_tensor(t, dtype=F64)


@dataclass(frozen=True)
class Solution:
    """Problem (4) for the page's templates and evidence z (2,) at one reliability alpha; ``est`` holds that one
    alpha (a batch of one)."""

    templates: Templates
    z: torch.Tensor
    alpha: float
    est: Estimates

    @property
    def lam(self) -> torch.Tensor:
        """lambda* (d,), the maximiser of (9)."""
        return self.est.lam[0]

    @property
    def alpha_z(self) -> torch.Tensor:
        """alpha z (d,), the approximation (16) of lambda*."""
        return self.est.lam1[0]

    @property
    def deviation(self) -> float:
        """||lambda* - alpha z|| / ||lambda*||, the relative deviation of Sec. 8."""
        return float(self.est.deviation[0])

    @property
    def error_18(self) -> float:
        """||h(12) - h(18)||: how far attention (18) lands from the exact estimate."""
        return float((self.est.h[0] - self.est.h1[0]).norm())

    @property
    def error_15(self) -> float:
        """||h(12) - h(12 at 15)||: the same for the second-order lambda of (15)."""
        return float((self.est.h[0] - self.est.h2[0]).norm())


def solve(templates: Templates, z, alpha: float) -> Solution:
    """Problem (4) at reliability alpha, with z = (z_1, z_2) (the library validates u, z and alpha)."""
    z = torch.as_tensor(z, dtype=F64)
    return Solution(templates, z, alpha, estimates(templates.t, templates.u, z, [alpha]))


def live_inputs(s: Solution) -> dict:
    """What the browser recomputes the estimates from while alpha moves (wviz.ui.drag, its "estimates" figure): the
    templates t, the preference u and the evidence z."""
    return {"t": s.templates.t, "u": s.templates.u, "z": s.z}


def at_defaults():
    """The page's solution at its default inputs (the first preset, u normalised, DEFAULT_Z) as a function of
    alpha (its main slider): bench_latency's reference draws it."""
    templates = templates_from_table(next(iter(PRESETS.values())), True)
    return lambda alpha: solve(templates, DEFAULT_Z, alpha)


@dataclass(frozen=True)
class Weights:
    """The weights over the templates (n,): exact p~ of (11) at lambda*, attention (18) (lambda = alpha z),
    p~ at lambda of (15), and the preference u."""

    exact: torch.Tensor
    attention: torch.Tensor
    second: torch.Tensor
    u: torch.Tensor


def weights(s: Solution) -> Weights:
    t, u = s.templates.t, s.templates.u
    return Weights(fenchel.tilted_weights(t, u, s.lam), fenchel.attention_weights(t, u, s.z, s.alpha),
                   fenchel.tilted_weights(t, u, s.est.lam2[0]), u)


def figure3(s: Solution) -> Estimates:
    """The estimates at the alphas of the paper's Figure 3, for the page's templates and z."""
    return estimates(s.templates.t, s.templates.u, s.z, FIGURE3_ALPHAS)


@dataclass(frozen=True)
class DualMap:
    """The dual objective (9) on a grid of lambda: xs (n,), ys (n,), values (n, n) with rows along ys."""

    xs: torch.Tensor
    ys: torch.Tensor
    values: torch.Tensor


def dual_surface(t, u, z, alpha: float, centre, half_width: float, n: int = 81) -> DualMap:
    """The dual objective (9) on an n x n grid of lambda around ``centre``."""
    cx, cy = (float(c) for c in centre)
    xs = torch.linspace(cx - half_width, cx + half_width, n, dtype=F64)
    ys = torch.linspace(cy - half_width, cy + half_width, n, dtype=F64)
    lam = torch.stack(torch.meshgrid(ys, xs, indexing="ij")[::-1], dim=-1)    # (n, n, 2): (x, y) per cell
    return DualMap(xs, ys, fenchel.dual_objective(lam, t, u, z, alpha))


def dual_map(s: Solution) -> DualMap:
    """(9) around lambda* and alpha z, on a square wide enough to show both (and at least +-0.65)."""
    span = max(float(s.lam.abs().max()), float((s.alpha * s.z).abs().max()), 0.5)
    return dual_surface(s.templates.t, s.templates.u, s.z, s.alpha, (s.lam + s.alpha * s.z) / 2, 1.3 * span)


@dataclass(frozen=True)
class AlphaSweep:
    """Against alpha (A,): the relative deviation of Sec. 8 and the errors ||h(12) - h(18)||, ||h(12) - h(12 at
    15)||."""

    alphas: torch.Tensor
    deviation: torch.Tensor
    err1: torch.Tensor
    err2: torch.Tensor


def alpha_sweep(t, u, z, alphas) -> AlphaSweep:
    est = estimates(t, u, z, alphas)
    return AlphaSweep(est.alphas, est.deviation, (est.h - est.h1).norm(dim=-1), (est.h - est.h2).norm(dim=-1))


def sweep(s: Solution) -> AlphaSweep:
    """The alpha sweep over ALPHAS for the page's templates and z."""
    return alpha_sweep(s.templates.t, s.templates.u, s.z, ALPHAS)


# ---- Sec. 5: a Gaussian preference ------------------------------------------------------------------------------

@dataclass(frozen=True)
class GaussianCheck:
    """h (d,) from Newton on (9) with the log-MGF of u = N(mu, I), the closed form (d,), and that solve's
    n_iter and gradient norm."""

    h: torch.Tensor
    closed: torch.Tensor
    n_iter: int
    grad_norm: float


def gaussian_check(mu, z, alpha: float) -> GaussianCheck:
    """Sec. 5: Newton on the dual (9) with the Gaussian log-MGF of u = N(mu, I), started from lambda = 0 (the
    default start (15) is already exact for a Gaussian), against the closed form mu/(1+alpha) + alpha b/(1+alpha),
    b = mu + z."""
    u = fenchel.Gaussian(mu)
    sol = fenchel.solve_dual(None, u, z, alpha, lam0=torch.zeros_like(u.mu))
    return GaussianCheck(u.grad(sol.lam), fenchel.gaussian_estimate(mu, z, alpha), sol.n_iter, float(sol.grad_norm))


# ---- T5: masks and relative positions as a preference (19)-(20) -------------------------------------------------

@dataclass(frozen=True)
class T5Weights:
    """For target word j (n,): u of (19), T5's weights (20), (18) with alpha = 1 and u of (19), and the plain
    softmax_i <t_i, z> (dot-product attention, no mask or bias)."""

    u: torch.Tensor
    w20: torch.Tensor
    w18: torch.Tensor
    dot: torch.Tensor


def t5(templates: Templates, z, j: int, masked, bias_table: pd.DataFrame) -> T5Weights:
    """T5's preference (19) and attention (20) for the templates read as a sequence in table order; ``masked``
    names the masked words, ``bias_table`` holds b for the offsets j - i."""
    b = torch.tensor(io.table_values(bias_table, ["b"], "relative-position bias table")[:, 0], dtype=F64)
    t, z = templates.t, torch.as_tensor(z, dtype=F64)
    mask = torch.tensor([n in masked for n in templates.names])
    u = fenchel.t5_preference(b, mask, j)
    return T5Weights(u, fenchel.t5_attention(t @ z, b, mask, j), fenchel.attention_weights(t, u, z, 1.0),
                     torch.softmax(t @ z, 0))


# ---- OT-based attention: Sec. 9 and Appendix D ------------------------------------------------------------------

@dataclass(frozen=True)
class Universe:
    """The universe A (N, 2): the templates T and the extra ones, their names, and u over A (zero on the
    extras)."""

    A: torch.Tensor
    names: list[str]
    u: torch.Tensor

    @property
    def in_T(self) -> torch.Tensor:
        """(N,) bool: the templates of T (u > 0)."""
        return self.u > 0


def universe(templates: Templates, extras: pd.DataFrame) -> Universe:
    """A = T and the extra templates of the ``extras`` table (columns template, x, y)."""
    ex = torch.tensor(io.table_values(extras, ["x", "y"], "extra templates table"), dtype=F64).reshape(-1, 2)
    return Universe(torch.cat([templates.t, ex]), templates.names + [str(n) for n in extras["template"]],
                    torch.cat([templates.u, torch.zeros(len(ex), dtype=F64)]))


def cost_table(world: Universe) -> pd.DataFrame:
    """The cost editor's starting table: the squared Euclidean cost between the templates of A, to 3 decimals."""
    return pd.DataFrame(cost_matrix(world.A, world.A).numpy().round(3), columns=world.names)


def cost(world: Universe, kind: str, table: pd.DataFrame | None = None) -> torch.Tensor:
    """M (N, N) between the templates of A: the metric labelled ``kind`` in COSTS, or the edited ``table``
    (kind "edited"); the library checks that M is non-negative and symmetric."""
    if kind in COSTS:
        return cost_matrix(world.A, world.A, COSTS[kind])
    if kind != "edited":
        raise ValueError(f"unknown cost {kind!r}; choose from {', '.join([*COSTS, 'edited'])}")
    if table is None:
        raise ValueError("an edited cost needs its table")
    numbered = table.set_axis([str(k + 1) for k in range(table.shape[1])], axis=1)  # names may repeat
    return torch.tensor(io.table_values(numbered, list(numbered.columns), "cost matrix"), dtype=F64)


@dataclass(frozen=True)
class OTPanel:
    """Over A (N,): u, the true preference u~ (40), the OT attention p* (25) and the exact p* of (38)."""

    u: torch.Tensor
    true: torch.Tensor
    approx: torch.Tensor
    exact: torch.Tensor


def ot_panel(A, u, z, alpha: float, gamma: float, M) -> OTPanel:
    return OTPanel(torch.as_tensor(u, dtype=F64), fenchel.true_preference(u, M, gamma),
                   fenchel.ot_attention(A, u, z, alpha, gamma, M), fenchel.ot_exact(A, u, z, alpha, gamma, M))


@dataclass(frozen=True)
class GammaSweep:
    """Against gamma (G,): ||u~ - u||_1 (-> 0 as gamma -> 0, Prop. 1) and ||p*(38) - p*(25)||_1."""

    gammas: torch.Tensor
    gap_u: torch.Tensor
    gap_p: torch.Tensor


def ot_gamma_sweep(A, u, z, alpha: float, gammas, M) -> GammaSweep:
    gammas = torch.as_tensor(gammas, dtype=F64)
    u = torch.as_tensor(u, dtype=F64)
    true = fenchel.true_preference(u, M, gammas)
    approx = fenchel.ot_attention(A, u, z, alpha, gammas, M)
    exact = fenchel.ot_exact(A, u, z, alpha, gammas, M)
    return GammaSweep(gammas, (true - u).abs().sum(-1), (exact - approx).abs().sum(-1))


@dataclass(frozen=True)
class OTAttention:
    """The OT view at the page's alpha and gamma: the universe, the weights over it and the gamma sweep."""

    world: Universe
    alpha: float
    gamma: float
    panel: OTPanel
    sweep: GammaSweep


def ot_attention(s: Solution, world: Universe, gamma: float, M) -> OTAttention:
    return OTAttention(world, s.alpha, gamma, ot_panel(world.A, world.u, s.z, s.alpha, gamma, M),
                       ot_gamma_sweep(world.A, world.u, s.z, s.alpha, GAMMAS, M))
