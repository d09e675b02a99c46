"""What the "Transport plans" page computes, built on :mod:`wviz.ot`.

The problem is eq. (23) of the 002 paper, min_{P in U(a, b)} <C, P> - gamma H(P), its exact limit gamma -> 0 (a
linear programme), and its squared-L2 variant <C, P> + gamma/2 ||P||^2 (Blondel et al. 2018). gamma is set
relative to the largest cost, gamma = gamma_rel * max|C_ij|, so that one slider position means the same blur
whatever the units of C.

Semi-relaxed (Chizat et al. 2018, wviz.ot.semirelaxed): the Sinkhorn solver with rho < infinity holds the
sources' masses a exactly and the targets' b with the weight rho, min_{P 1 = a} <C, P> + gamma KL(P | a b^T)
+ rho KL(P^T 1 | b); rho is relative to the largest cost too, rho = rho_rel * max|C_ij| (infinity: eq. (23)).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from wviz import attention, grids, io, ot, sample_data
from wviz.device import get_device
from wviz.guide import Try

SOLVERS = ("sinkhorn", "exact", "quadratic")
# "line" and "two clusters" come in an order that shows the plan's structure (a band along the diagonal, two
# blocks); sample_data's presets come in random order, so their plans look like noise until read as lines.
ORDERED = ("line", "two clusters")
PRESETS = (*ORDERED, *sample_data.PRESETS)
COST_KINDS = ot.COST_KINDS
MAX_POINTS = io.MAX_POINTS                        # per cloud, or per side of a cost matrix
MAX_UPLOAD_MB = io.MAX_UPLOAD_BYTES // 2**20
TOL = 1e-6                                        # L1 marginal error at which the solvers stop
DEFAULT_COST = "0 2 4\n2 0 2\n4 2 0\n1 1 3"      # the typed cost matrix the page starts from
DEFAULT_SIZES = (40, 30)                          # the point clouds' n and m the page starts from
SWEEP = torch.logspace(-3, 1, 13, dtype=torch.float64)   # the "cost against gamma" grid, in units of max|C|
RHOS = grids.rho_grid()                            # the rho slider (units of max|C|): 1e-3 to 1e4, then inf
rho_text = grids.rho_text
RHO_SWEEP = torch.tensor(grids.rho_grid(per_decade=3, infinity=False), dtype=torch.float64)   # cost vs rho


# ---- widget keys and view labels -------------------------------------------------------------------------------

class Keys:
    """The page's widget keys: the names its URL holds (bind="query-params"). The page, TRY_THIS and the tests
    read them here, so a rename cannot leave a guided link pointing nowhere."""
    PROBLEM = "problem"
    POINTS_CSV = "points_csv"
    PRESET = "preset"
    N = "n"
    M = "m"
    SEED = "seed"
    EDIT_POINTS = "edit_points"
    POINTS = "points_{}_{}_{}_{}"
    COST_CSV = "cost_csv"
    COST_TEXT = "cost_text"
    MARGINALS = "marginals"
    A = "a_{}"
    B = "b_{}"
    COST_KIND = "cost_kind"
    SOLVER = "solver"
    RHO_REL = "rho_rel"        # rho / max C, as the slider shows it (rho itself is absolute on the other pages)
    GAMMA_REL = "gamma_rel"    # gamma / max C
    SCRUB = "scrub"
    SIDE_GAMMA_REL = "side_gamma_rel"
    VIEW = "view"


# The page's URL parameters before they were renamed (old name -> Keys): a link shared then opens the same state.
RENAMED = {"gamma": Keys.GAMMA_REL, "rho": Keys.RHO_REL, "side_gamma_left": Keys.SIDE_GAMMA_REL + "_left",
           "side_gamma_right": Keys.SIDE_GAMMA_REL + "_right"}


class Labels:
    """The labels of the page's views (the values of its view selectors)."""
    SIDE_BY_SIDE = "Side by side"
    MASS_MOVED = "Mass moved"
    CONVERGE = "Watch Sinkhorn converge"
    COST_AGAINST_GAMMA = "Cost against gamma"
    COST_AGAINST_RHO = "Cost against rho"


# ---- the problem -----------------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Problem:
    """Masses a (n,) on the sources and b (m,) on the targets, costs C (n, m), and for two point clouds the points
    x (n, 2) and y (m, 2) (None for a typed cost matrix). Held as float64 numpy arrays, so that st.cache_data
    hashes a problem by its values."""

    a: np.ndarray
    b: np.ndarray
    C: np.ndarray
    x: np.ndarray | None = None
    y: np.ndarray | None = None

    @property
    def clouds(self) -> bool:
        return self.x is not None

    @property
    def scale(self) -> float:
        """max|C_ij|, the unit of gamma (1 when every cost is 0)."""
        top = float(np.abs(self.C).max())
        return top if top > 0 else 1.0

    def tensors(self, device="cpu") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """a, b, C as float64 tensors on ``device``."""
        return tuple(torch.as_tensor(v, device=device) for v in (self.a, self.b, self.C))


def _two_clusters(k: int, centres, g: torch.Generator) -> torch.Tensor:
    """k points in two Gaussian clusters (k // 2 around the first centre), each cluster sorted by height."""
    out = []
    for size, centre in zip((k // 2, k - k // 2), centres):
        pts = 0.25 * torch.randn(size, 2, generator=g, dtype=torch.float64) + torch.tensor(centre, dtype=torch.float64)
        out.append(pts[torch.argsort(pts[:, 1], descending=True)])
    return torch.cat(out)


def preset_clouds(preset: str, n: int, m: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Source points x (n, 2) and target points y (m, 2) of a preset.

    line          x_i = (u_i, 0) with u uniform on [-1, 1], y_j = (v_j, 0.5) with v ~ N(0.3, 0.5^2), both sorted
                  left to right: in one dimension the optimal plan is the monotone (quantile) map, so the plan is a
                  band along the diagonal, bent where v is dense
    two clusters  each cloud in two clusters (top first, then bottom, each sorted by height), the top ones closer
                  to each other: the plan is two blocks on the diagonal
    others        :func:`wviz.sample_data.point_clouds`, in random order
    """
    if preset not in ORDERED:
        return sample_data.point_clouds(preset, n, m, seed)
    if n < 1 or m < 1:
        raise ValueError("each cloud needs at least one point")
    g = torch.Generator().manual_seed(int(seed))
    if preset == "line":
        u = torch.sort(2 * torch.rand(n, generator=g, dtype=torch.float64) - 1).values
        v = torch.sort(0.5 * torch.randn(m, generator=g, dtype=torch.float64) + 0.3).values
        return torch.stack([u, torch.zeros(n, dtype=torch.float64)], -1), torch.stack([v, torch.full_like(v, 0.5)], -1)
    return _two_clusters(n, ((-1.0, 1.0), (-1.0, -1.0)), g), _two_clusters(m, ((1.0, 1.3), (1.0, -0.7)), g)


def points_table(preset: str, n: int, m: int, seed: int) -> pd.DataFrame:
    """A preset's two clouds as the page's editable table: one row per point (cloud, x, y, mass), unit masses."""
    x, y = preset_clouds(preset, n, m, seed)
    xy = torch.cat([x, y]).numpy()
    return pd.DataFrame({"cloud": ["source"] * n + ["target"] * m, "x": xy[:, 0], "y": xy[:, 1],
                         "mass": [1.0] * (n + m)})


def clouds(x: torch.Tensor, a: torch.Tensor, y: torch.Tensor, b: torch.Tensor, cost_kind: str) -> Problem:
    """The problem between two weighted clouds with the ground cost C_ij = c(x_i, y_j) of ``cost_kind``."""
    C = ot.cost_matrix(x, y, cost_kind)
    return Problem(*(np.asarray(t, dtype=np.float64) for t in (a, b, C, x, y)))


def clouds_from_table(table: pd.DataFrame, cost_kind: str) -> Problem:
    """The problem from the edited points table (columns cloud, x, y, mass); masses normalised per cloud."""
    return clouds(*io.read_points_table(table), cost_kind)


def clouds_from_csv(data: bytes, cost_kind: str) -> Problem:
    """The problem from an uploaded points CSV (columns cloud, x, y[, mass])."""
    return clouds(*io.read_points_csv(data), cost_kind)


def cost_from_csv(data: bytes) -> torch.Tensor:
    """C (n, m) from an uploaded CSV of n rows of m numbers."""
    return io.read_matrix_csv(data)


def cost_from_text(text: str) -> torch.Tensor:
    """C (n, m) typed as n lines of m numbers."""
    return io.parse_matrix(text)


def default_masses(n: int, m: int) -> tuple[str, str]:
    """The typed masses' starting text, of equal totals: a_i = 1 and b_j = n / m. When n / m has no short decimal
    (4 / 3 = 1.33333 would miss the total by more than the solvers accept, 1e-6), a_i = m / d and b_j = n / d with
    d = gcd(n, m): whole numbers, both totalling n m / d."""
    ratio = f"{n / m:.6g}"
    if abs(float(ratio) * m - n) <= 1e-12 * n:
        return ", ".join(["1"] * n), ", ".join([ratio] * m)
    d = math.gcd(n, m)
    return ", ".join([str(m // d)] * n), ", ".join([str(n // d)] * m)


def cost_problem(C: torch.Tensor, a_text: str | None = None, b_text: str | None = None) -> Problem:
    """The problem for a cost matrix C (n, m): uniform masses a_i = 1/n, b_j = 1/m, or the typed ones. Every
    problem of the typed masses is reported at once, and unequal totals (U(a, b) of eq. (23) of 002 is then
    empty) with a pair of masses that would do."""
    n, m = C.shape
    if a_text is None or b_text is None:   # the page gives both or neither
        return Problem(np.full(n, 1.0 / n), np.full(m, 1.0 / m), np.asarray(C, dtype=np.float64))
    masses, problems = [], []
    for text, size, name, per in ((a_text, n, "a", "row"), (b_text, m, "b", "column")):
        try:
            masses.append(io.parse_masses(text, size, name, per=per).numpy())
        except ValueError as err:
            problems.append(str(err))
    if problems:
        raise ValueError("; ".join(problems))
    a, b = masses
    if abs(a.sum() - b.sum()) > 1e-6 * max(a.sum(), b.sum()):
        good_a, good_b = default_masses(n, m)
        raise ValueError(f"the masses a total {a.sum():g} but the masses b total {b.sum():g}: a plan moves all of "
                         f"a onto all of b, so both totals must be equal (for example a = {good_a} and b = "
                         f"{good_b})")
    return Problem(a, b, np.asarray(C, dtype=np.float64))


# ---- example uploads -------------------------------------------------------------------------------------------

def example_points_csv() -> bytes:
    """An example of the points upload: 4 sources on a line and 3 targets above them, one target twice as heavy
    (masses are normalised per cloud: a = 1/4 each, b = (1/4, 1/4, 1/2))."""
    rows = ["cloud,x,y,mass", "source,0,0,1", "source,1,0,1", "source,2,0,1", "source,3,0,1",
            "target,0.5,1,1", "target,1.5,1,1", "target,2.5,1,2"]
    return ("\n".join(rows) + "\n").encode()


def example_cost_csv() -> bytes:
    """An example of the cost-matrix upload: 3 sources, 4 targets, C_ij = |i - j| (row i, column j)."""
    return "".join(",".join(str(abs(i - j)) for j in range(4)) + "\n" for i in range(3)).encode()


# ---- the plan at the slider's gamma ----------------------------------------------------------------------------

def solve(solver: str, a: torch.Tensor, b: torch.Tensor, C: torch.Tensor, gamma: float,
          tol: float = TOL, rho: float = math.inf) -> ot.OTResult:
    """One transport problem with the chosen solver: entropic (eq. (23) of 002; semi-relaxed with a finite rho),
    exact, or squared-L2."""
    if solver == "sinkhorn":
        return ot.sinkhorn(a, b, C, gamma, tol=tol) if math.isinf(rho) else ot.sinkhorn(a, b, C, gamma, tol=tol,
                                                                                         rho=rho)
    if solver == "exact":
        return ot.emd(a, b, C)
    if solver == "quadratic":
        return ot.quadratic_ot(a, b, C, gamma)
    raise ValueError(f"unknown solver {solver!r}; choose from {', '.join(SOLVERS)}")


SPARSE_BELOW = 1e-8   # an entry below this times the plan's largest carries no mass that a figure or a sum shows


def sparsity(plan: torch.Tensor, rel: float = SPARSE_BELOW) -> float:
    """Fraction of the plan's entries below ``rel`` times its largest entry. Exact and quadratic plans have exact
    zeros; an entropic plan is positive everywhere (P_ij = u_i exp(-C_ij / gamma) v_j), but at a small gamma most of
    its entries fall below the threshold (or underflow to 0), so it counts as nearly sparse there."""
    return float((plan <= rel * plan.max()).float().mean())


@dataclass(frozen=True)
class Transport:
    """A problem solved at gamma = gamma_rel max|C|: the plan P (n, m) on the CPU and what the solver reports.

    cost            <C, P>
    reg_cost        the solver's objective at P: <C, P> - gamma H(P) (sinkhorn), <C, P> + gamma/2 ||P||^2
                    (quadratic), <C, P> (exact)
    n_iter          iterations run (0 for the exact solver)
    marginal_error  max(||P 1 - a||_1, ||P^T 1 - b||_1); semi-relaxed, the columns' error against the column
                    sums that optimality asks of the rows, which hold a to rounding (wviz.ot.OTResult)
    converged       the marginal error met the tolerance (exact: an optimal basis was found)
    rho             the weight that holds the targets' masses b (rho_rel max|C|; inf: held exactly, eq. (23))
    columns         P^T 1 of a semi-relaxed plan (None at rho = inf), column_kl = KL(P^T 1 | b)
    solved_on       where the solver ran, 'cpu' or 'cuda' (wviz.ot.OTResult.solved_on)
    potentials      Sinkhorn's (f, g), P_ij = exp((f_i + g_j - C_ij) / gamma), on the CPU (None for the other
                    solvers): a live figure's warm start (live_inputs)
    """

    problem: Problem
    solver: str
    gamma: float
    plan: torch.Tensor
    cost: float
    reg_cost: float
    n_iter: int
    marginal_error: float
    converged: bool
    rho: float = math.inf
    columns: torch.Tensor | None = field(default=None, compare=False)
    column_kl: float = 0.0
    solved_on: str = "cpu"
    potentials: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, compare=False)

    @property
    def gamma_rel(self) -> float:
        """gamma in units of max|C|, as the slider sets it."""
        return self.gamma / self.problem.scale

    @property
    def rho_rel(self) -> float:
        """rho in units of max|C|, as the slider sets it."""
        return self.rho / self.problem.scale

    @property
    def semi(self) -> bool:
        """Whether the targets' masses are held softly (the Sinkhorn solver at a finite rho)."""
        return self.columns is not None

    @property
    def plan_kl(self) -> float:
        """KL(P | a b^T) = sum P log(P / (a b^T)) - sum P + sum a sum b, the entropic term of the semi-relaxed
        objective (wviz.ot.semirelaxed)."""
        a, b = (torch.as_tensor(x) for x in (self.problem.a, self.problem.b))
        ab = a[:, None] * b[None, :]
        P = self.plan.double()
        return float((torch.xlogy(P, P) - P * torch.where(ab > 0, ab, 1).log()).sum() - P.sum() + ab.sum())

    @property
    def entropy(self) -> float:
        """H(P) = -sum_ij P_ij log P_ij with 0 log 0 = 0, the H of eq. (23) of 002."""
        return float(attention.entropy(self.plan.flatten()))

    @property
    def sq_norm(self) -> float:
        """||P||^2 = sum_ij P_ij^2, the quadratic regulariser without its gamma / 2."""
        return float((self.plan ** 2).sum())

    @property
    def sparsity(self) -> float:
        """Fraction of the plan's entries below SPARSE_BELOW times its largest (see :func:`sparsity`)."""
        return sparsity(self.plan)


def transport(problem: Problem, solver: str, gamma_rel: float, device="cpu", rho_rel: float = math.inf) -> Transport:
    """Solve ``problem`` with ``solver`` at gamma = gamma_rel * max|C| on ``device``; the Sinkhorn solver at a
    finite rho_rel holds the targets at rho = rho_rel * max|C| (semi-relaxed)."""
    gamma = gamma_rel * problem.scale
    rho = rho_rel * problem.scale if solver == "sinkhorn" else math.inf
    res = solve(solver, *problem.tensors(device), gamma, rho=rho)
    semi = {}
    if rho < math.inf:
        assert res.column_sums is not None and res.column_kl is not None   # a solve with rho reports them
        semi = dict(rho=rho, columns=res.column_sums.cpu(), column_kl=float(res.column_kl))
    f, g = res.f, res.g   # Sinkhorn's potentials (the other solvers give none)
    potentials = (f.cpu(), g.cpu()) if solver == "sinkhorn" and f is not None and g is not None else None
    return Transport(problem, solver, gamma, res.plan.cpu(), float(res.cost), float(res.reg_cost),
                     int(res.n_iter), float(res.marginal_error), bool(res.converged), **semi,
                     solved_on=res.solved_on, potentials=potentials)


def live_inputs(t: Transport) -> dict | None:
    """What the browser re-solves the plan from while gamma or rho moves (wviz.ui.drag, its "plan" figure): the
    masses, the costs, the unit max|C| of gamma and rho, the rho slider's options and the released plan's
    potentials (its warm start). None unless the solver is Sinkhorn: the exact one has no gamma, the quadratic one
    runs in Python."""
    if t.solver != "sinkhorn" or t.potentials is None:
        return None
    p = t.problem
    return {"a": p.a, "b": p.b, "C": p.C, "f": t.potentials[0], "g": t.potentials[1], "scale": p.scale, "tol": TOL,
            "rhos": RHOS}


def at_defaults():
    """The page's plan at its default inputs (the first preset's clouds, seed 0, the first ground cost and solver)
    as a function of gamma / max C (its main slider), on WVIZ_DEVICE: bench_latency's reference draws it."""
    problem = clouds_from_table(points_table(PRESETS[0], *DEFAULT_SIZES, 0), COST_KINDS[0])
    device = str(get_device())
    return lambda gamma_rel: transport(problem, SOLVERS[0], gamma_rel, device)


# ---- watch Sinkhorn converge -----------------------------------------------------------------------------------

# Plain Sinkhorn needs about 1 / (1 - r) iterations, which grows like 1 / gamma: at gamma = 1e-4 max C it has not
# converged after 10^5 iterations (seconds of waiting). The scrubber records at most this many; the page says so.
SCRUB_MAX_ITER = 3000


def scrub_schedule(n_iter: int, snapshots: int = 40, max_iter: int = SCRUB_MAX_ITER) -> tuple[int, int]:
    """(every, budget) of the scrubber's plain-Sinkhorn run: record the plan and the marginal error every ``every``
    iterations, for at most ``budget`` iterations. ``n_iter`` (the iterations a first solve needed) sets the
    interval; plain Sinkhorn takes a few times more, so the budget is 10 n_iter (at least 1000), capped at
    ``max_iter`` and rounded down to a multiple of ``every`` so that the last iterate is recorded."""
    every = max(1, min(n_iter, max_iter) // snapshots)
    budget = min(max(10 * n_iter, 1000), max_iter)
    return every, max(every, budget // every * every)


def sinkhorn_snapshots(a: torch.Tensor, b: torch.Tensor, C: torch.Tensor, gamma: float, n_iter: int,
                       snapshots: int = 40, tol: float = TOL, max_iter: int = SCRUB_MAX_ITER,
                       rho: float = math.inf) -> ot.OTResult:
    """Plain Sinkhorn at gamma (no epsilon scaling, no over-relaxation) from the uniform start, keeping about
    ``snapshots`` iterates of the plan to scrub through (see :func:`scrub_schedule`); semi-relaxed at a finite rho.
    ``converged=False`` means the run stopped at its budget: it shows only the first iterations."""
    every, budget = scrub_schedule(n_iter, snapshots, max_iter)
    semi = {} if math.isinf(rho) else dict(rho=rho)
    return ot.sinkhorn(a, b, C, gamma, tol=tol, eps_scaling=False, omega=1.0, record_plans=every,
                       max_iter=budget, **semi)


@dataclass(frozen=True)
class Frame:
    """Plain Sinkhorn's plan after iteration ``step`` and its marginals P 1 (n,) and P^T 1 (m,); rho < inf: of
    the semi-relaxed problem."""

    step: int
    plan: torch.Tensor
    rows: torch.Tensor
    columns: torch.Tensor
    rho: float = math.inf

    def marginal_error(self, a, b) -> float:
        """The solver's marginal error of this iterate (wviz.ot.problem.marginal_error), the measure its curve
        plots: max(||P 1 - a||_1, ||P^T 1 - b||_1); semi-relaxed, the columns are measured against the column sums
        that optimality asks of the rows, which a plain column update (the iterate's last) meets, so what is left
        is the rows' error."""
        a, b = torch.as_tensor(a, dtype=self.rows.dtype), torch.as_tensor(b, dtype=self.columns.dtype)
        if self.rho < math.inf:
            return float(ot.marginal_error(a, None, self.rows))
        return float(ot.marginal_error(a, b, self.rows, self.columns))


@dataclass(frozen=True)
class Scrub:
    """Plain Sinkhorn's run behind the scrubber, on the CPU: the plans it recorded (iteration -> plan), and its
    L1 marginal error ``errors`` read at the iterations ``checked``, every ``every`` iterations.

    n_iter, converged, marginal_error  where the run stopped: converged=False means it hit its budget
    tol                                the tolerance it ran to
    """

    plans: dict[int, torch.Tensor]
    every: int
    checked: torch.Tensor
    errors: torch.Tensor
    n_iter: int
    converged: bool
    marginal_error: float
    tol: float = TOL
    rho: float = math.inf

    @property
    def iterations(self) -> list[int]:
        return list(self.plans)

    @property
    def plan_every(self) -> int:
        """The smallest gap between two recorded plans (the interval doubles when too many come)."""
        its = self.iterations
        return min((j - i for i, j in itertools.pairwise(its)), default=self.every)

    def frame(self, step: int | None = None) -> Frame:
        """The plan recorded at iteration ``step`` (default: the last one) with its marginals."""
        step = self.iterations[-1] if step is None else step
        P = self.plans[step]
        return Frame(step, P, P.sum(1), P.sum(0), self.rho)


def scrub(problem: Problem, gamma: float, n_iter: int, device="cpu", rho: float = math.inf) -> Scrub:
    """The scrubber's plain-Sinkhorn run at gamma (semi-relaxed at a finite rho), its schedule set by ``n_iter``
    (the solver's iterations)."""
    every, _ = scrub_schedule(n_iter)
    snap = sinkhorn_snapshots(*problem.tensors(device), gamma, n_iter, rho=rho)
    history = snap.history.cpu()
    return Scrub({int(it): P.cpu() for it, P in snap.plans}, every, history[:, 0], history[:, 1], int(snap.n_iter),
                 bool(snap.converged), float(snap.marginal_error), rho=rho)


ANIMATION_FRAMES = 20


def animation_frames(s: Scrub, count: int = ANIMATION_FRAMES) -> list[Frame]:
    """About ``count`` of the scrubber's recorded iterates, the frames of the Sinkhorn animation: from the first
    recorded iteration after the start (iteration 0 is the unscaled kernel exp(-C / gamma), not yet a plan) to the
    last one, spaced geometrically, since the plan changes most in the first iterations (fewer frames when fewer
    iterates were recorded)."""
    its = s.iterations[1:] or s.iterations
    picks = np.unique(np.round(np.geomspace(1, len(its), count)).astype(int)) - 1
    return [s.frame(its[i]) for i in picks]


# ---- cost against gamma ----------------------------------------------------------------------------------------

def gamma_sweep(a: torch.Tensor, b: torch.Tensor, C: torch.Tensor, gammas: torch.Tensor,
                tol: float = TOL) -> torch.Tensor:
    """Transport cost <C, P_gamma> of the entropic plan for each gamma, largest gamma first.

    Each solve starts from the previous one's dual potentials (a warm start), so the sweep costs little more
    than its smallest gamma alone.
    """
    costs = torch.empty(len(gammas), dtype=C.dtype)
    order = torch.argsort(gammas, descending=True)
    previous = None
    for i in order.tolist():
        previous = ot.sinkhorn(a, b, C, float(gammas[i]), tol=tol, init=previous)
        costs[i] = previous.cost
    return costs


@dataclass(frozen=True)
class Sweep:
    """<C, P_gamma> (costs) for gammas = SWEEP max|C| (scale = max|C|), and the exact (unregularised) cost they
    tend to."""

    gammas: torch.Tensor
    costs: torch.Tensor
    exact: float
    scale: float = 1.0

    @property
    def gammas_rel(self) -> torch.Tensor:
        """gamma / max|C|, the unit of the page's slider."""
        return self.gammas / self.scale


def sweep(problem: Problem, device="cpu") -> Sweep:
    """The entropic cost over the grid SWEEP (in units of max|C|) and the exact cost, on ``device``."""
    a, b, C = problem.tensors(device)
    gammas = SWEEP * problem.scale
    return Sweep(gammas, gamma_sweep(a, b, C, gammas), float(ot.emd(a, b, C).cost), problem.scale)


# ---- cost against rho ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RhoSweep:
    """The semi-relaxed plans at one gamma over rho = rhos max|C| (rhos: RHO_SWEEP, relative like the slider):
    their transport cost <C, P_rho> (costs) and how far their columns are from b, KL(P_rho^T 1 | b) (kls);
    ends = ((cost, KL) at rho = 0, each source's prior-softmax over the targets; (cost, KL) at rho = inf, eq. (23)
    of 002)."""

    gamma: float
    rhos: torch.Tensor
    costs: torch.Tensor
    kls: torch.Tensor
    ends: tuple[tuple[float, float], tuple[float, float]]


def rho_sweep(problem: Problem, gamma_rel: float, device="cpu", rhos: torch.Tensor = RHO_SWEEP) -> RhoSweep:
    """Cost against rho at gamma = gamma_rel max|C|: every solve warm-started from the previous rho's."""
    a, b, C = problem.tensors(device)
    gamma = gamma_rel * problem.scale
    costs, kls = torch.empty(len(rhos), dtype=torch.float64), torch.empty(len(rhos), dtype=torch.float64)
    previous = None
    for i, rho_rel in enumerate(rhos.tolist()):
        previous = ot.sinkhorn(a, b, C, gamma, tol=TOL, rho=rho_rel * problem.scale, init=previous)
        costs[i], kls[i] = float(previous.cost), float(previous.column_kl)
    zero, balanced = (ot.sinkhorn(a, b, C, gamma, tol=TOL, rho=rho) for rho in (0.0, math.inf))
    ends = ((float(zero.cost), float(zero.column_kl)), (float(balanced.cost), float(balanced.column_kl)))
    return RhoSweep(gamma, rhos, costs, kls, ends)


# ---- side by side ----------------------------------------------------------------------------------------------

SIDE_GAMMAS = (0.001, 0.1)   # the two gammas / max C of the "Side by side" view (log-slider grid values)


def side_solver(solver: str) -> str:
    """The solver of the side-by-side view: the page's one when it has a gamma, else Sinkhorn (exact OT has none)."""
    return "sinkhorn" if solver == "exact" else solver


# ---- guided experiments ----------------------------------------------------------------------------------------

TRY_THIS = (
    Try("Send gamma to 0.001", {Keys.GAMMA_REL: 0.001, Keys.VIEW: Labels.COST_AGAINST_GAMMA},
        r"The band of the plan narrows towards the monotone map, and the entropic cost $\langle C, P\rangle$ comes "
        r"down to the exact OT cost: the metric reads 0.409 against the dashed line's exact OT = 0.4079."),
    Try("Hold the targets loosely", {Keys.RHO_REL: 0.01, Keys.VIEW: Labels.COST_AGAINST_RHO},
        r"At $\rho = 0.01 \max C$ the targets' masses are barely held: the sources send their mass to their nearest "
        r"targets, the column sums (black marks over $b$) leave $b$, and the cost $\langle C, P\rangle$ (the "
        r"metric, 0.2737) falls below the balanced plan's (the dashed line, $\rho = \infty$)."),
    Try("Solve exactly", {Keys.SOLVER: "exact", Keys.PRESET: "two clusters"},
        "The exact plan is sparse: at most $n + m - 1$, here 69 of its 1200 entries, are nonzero (the metric reads "
        "94.8 % below 1e-8 max P), and it stays within the two blocks: each cluster is sent to the nearer one."),
    Try("Uneven masses", {Keys.PROBLEM: "cost matrix", Keys.SOLVER: "exact", Keys.MARGINALS: "edited",
                          Keys.A.format(4): "3, 1, 1, 1", Keys.B.format(3): "1, 1, 4"},
        "Source 1 holds half of the mass and target 3 two thirds: the other sources cannot fill target 3, so "
        "source 1 must send part of its mass the longest way, at cost 4 (the plan's brightest cell, row 1, "
        "column 3; the cost metric reads 11)."),
    Try("Watch Sinkhorn converge", {Keys.GAMMA_REL: 0.001, Keys.VIEW: Labels.CONVERGE},
        r"Each iteration rescales rows then columns: after it the columns match $b$ exactly, and the rows' error "
        r"shrinks at every step, by a steady factor at the end: plain Sinkhorn runs to iteration 1490 (the "
        r"Iteration slider's last step) where the solver above, with epsilon scaling and over-relaxation, needs "
        r"208 (the caption)."),
)
