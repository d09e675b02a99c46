"""What the "Gaussian W2 attention" page computes, built on :mod:`wviz.gaussian`.

Tokens are 2-D Gaussians N(m_i, S_i); every token is a query and a key (self-attention), and the attention of
004 is softmax(-W2^2(q_i, k_j) / tau) (wviz.gaussian gives the Bures-Wasserstein closed form of W2^2). The library
counts tokens from 0 like a tensor index ("token 2"); the page's messages name them as its table does (t1, t2, ...
or the names typed there).
"""
from __future__ import annotations

import contextlib
import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from wviz import attention, gaussian
from wviz.guide import Try

F64 = torch.float64
COLUMNS = ["x", "y", "sigma_x", "sigma_y", "rho"]           # a token's numbers in the table, in this order
SCALES = torch.logspace(-2, 2, 81, dtype=F64)              # the factors of the covariance sweep
DEFAULT = pd.DataFrame({
    "token": ["t1", "t2", "t3", "t4", "t5"],
    "x": [0.0, 1.0, -0.8, 0.2, 1.5], "y": [0.0, 0.2, 0.9, -1.0, 1.2],
    "sigma_x": [0.5, 0.3, 0.6, 0.2, 1.0], "sigma_y": [0.5, 0.8, 0.2, 0.2, 0.4],
    "rho": [0.0, 0.5, -0.3, 0.0, 0.7],
})
SIDE_TAUS = (0.1, 10.0)                                    # the "Side by side" view's two temperatures
ELLIPSE_POINTS = 100                                       # points of each drawn ellipse


# ---- widget keys and view labels -------------------------------------------------------------------------------

class Keys:
    """The page's widget keys: the names its URL holds (bind="query-params"). The page, TRY_THIS and the tests
    read them here, so a rename cannot leave a guided link pointing nowhere."""
    COVARIANCE = "cov_kind"
    EQUAL_COVARIANCES = "equal_cov"
    TOKENS = "tokens"
    QUERY = "query"
    MEAN_X = "mx_{}"
    MEAN_Y = "my_{}"
    SIGMA_X = "sx_{}"
    SIGMA_Y = "sy_{}"
    RHO = "rho_{}"
    TAU = "tau"
    SWEEP_TOKEN = "sweep_token"
    SIDE_TAU = "side_tau"
    VIEW = "view"


class Labels:
    """The labels of the page's views (the values of its view selectors)."""
    WEIGHTS = "The query's weights"
    SWEEP = "Sweep: one token grows uncertain"
    SIDE_BY_SIDE = "Side by side"
    CLICK = "Click a query"


# Guided experiments: query parameters of the page's widgets (bound to the URL) and what to watch.
TRY_THIS = (
    Try("Give every token the query's covariance", {Keys.EQUAL_COVARIANCES: True},
        "The covariance part of W2² is zero for every key: W2 attention becomes softmax(−‖m_i − m_j‖²/τ), a "
        "function of the means alone."),
    Try("Make one key very uncertain", {Keys.VIEW: Labels.SWEEP, Keys.SWEEP_TOKEN: "t3"},
        "t3's weight peaks at its drawn size (scale 1) and falls to zero as its covariance grows, although its "
        "mean stays put."),
    Try("Send tau to 0.01", {Keys.TAU: 0.01},
        "Every row of W2 attention is one-hot on the token itself (W2² = 0); dot-product attention sends t2 to t5, "
        "the larger ⟨m_i, m_j⟩, and leaves t1 (at the origin) uniform."),
    Try("Compare tau = 0.1 and tau = 1", {Keys.VIEW: Labels.SIDE_BY_SIDE, Keys.SIDE_TAU + "_left": 0.1,
                                          Keys.SIDE_TAU + "_right": 1},
        "At tau = 0.1 every row is one-hot on the token itself (one bright cell on the diagonal); at tau = 1 its "
        "neighbours share the weight: t1's row stays brightest on t1, shades t2, t3 and t4 alike and leaves the "
        "far t5 dark."),
    Try("Click a query row", {Keys.VIEW: Labels.CLICK},
        "Click t1's row: its dot-product weights are uniform (its mean is the origin, so every ⟨m_1, m_j⟩ = 0), "
        "while W2 attention's bars rank the keys by their W2² to it: t2 and t4 highest, nearly level, then t3, and "
        "the far t5 near zero."),
)


def dot_attention(means: torch.Tensor, tau: float) -> torch.Tensor:
    """softmax(<m_i, m_j> / tau): the usual dot-product attention of the means, for comparison."""
    return attention.softmax(means @ means.transpose(-1, -2), tau=tau)


def w2_split(means: torch.Tensor, covs: torch.Tensor, query: int) -> tuple[torch.Tensor, torch.Tensor]:
    """W2^2 from token ``query`` to every token, as (mean part ||m_q - m_k||^2, covariance (Bures) part)."""
    parts = gaussian.pairwise_w2_parts(means[query:query + 1], covs[query:query + 1], means, covs)
    return parts.mean[0], parts.covariance[0]


def covariance_sweep(means: torch.Tensor, covs: torch.Tensor, query: int, token: int, scales: torch.Tensor,
                     tau: float) -> torch.Tensor:
    """The W2 weights of ``query`` (S, n) as the covariance of ``token`` is multiplied by each scale: one batched
    w2_attention call over the S scaled copies of the tokens."""
    factor = torch.ones(len(scales), len(means), dtype=covs.dtype)
    factor[:, token] = scales.to(covs.dtype)
    swept = covs.unsqueeze(0) * factor.reshape(len(scales), len(means), *([1] * (covs.dim() - 1)))
    m = means.unsqueeze(0).expand(len(scales), -1, -1)
    return gaussian.w2_attention(m[:, query:query + 1], swept[:, query:query + 1], m, swept, tau)[:, 0]


# ---- the token table -----------------------------------------------------------------------------------------

def token_names(table: pd.DataFrame) -> list[str]:
    """The tokens' names as the table shows them; an empty name is t1, t2, ... by row."""
    return [f"t{i + 1}" if pd.isna(t) or not str(t).strip() else str(t) for i, t in enumerate(table["token"])]


@contextlib.contextmanager
def named(names: list[str]):
    """Re-raise a library ValueError with its tokens named as in the table: the library's "token 2" is the
    table's third row (t3, or the name typed there)."""
    try:
        yield
    except ValueError as err:
        raise ValueError(re.sub(r"\btoken (\d+)\b",
                                lambda m: f"token {names[int(m[1])]}" if int(m[1]) < len(names) else m[0],
                                str(err))) from None


@dataclass(frozen=True)
class Tokens:
    """The tokens: names, the table's numbers (n, 5) in COLUMNS order, means (n, 2) and covariances, (n, 2, 2)
    full or (n, 2) variances when ``diagonal`` (rho dropped)."""

    names: list[str]
    params: torch.Tensor
    means: torch.Tensor
    covs: torch.Tensor
    diagonal: bool

    @property
    def full_covs(self) -> torch.Tensor:
        """(n, 2, 2) covariance matrices, diagonal ones too."""
        return torch.diag_embed(self.covs) if self.diagonal else self.covs


def tokens(names: list[str], params: torch.Tensor, diagonal: bool) -> Tokens:
    """Means and covariances from the numbers (n, 5); the library rejects a negative sigma or |rho| > 1 (also in
    diagonal mode, where rho is then dropped)."""
    means = params[:, :2]
    with named(names):
        covs = gaussian.gaussian_from_params(means, params[:, 2], params[:, 3], params[:, 4])
    if diagonal:
        covs = torch.diagonal(covs, dim1=-2, dim2=-1)   # the variances (sigma_x^2, sigma_y^2), rho dropped
    return Tokens(names, params, means, covs, diagonal)


def table_problems(names: list[str], values: np.ndarray) -> list[str]:
    """What is wrong with each row of the table's numbers (n, 5) in COLUMNS order, every problem, in the table's
    words (its token names)."""
    problems = []
    for name, row in zip(names, values):
        if np.isnan(row).any():
            problems.append(f"token {name} has an empty entry")
            continue
        for column, v in zip(("sigma_x", "sigma_y"), row[2:4]):
            if v < 0:
                problems.append(f"{column} of token {name} is {v:.3g}; a standard deviation must be >= 0")
        if abs(row[4]) > 1:
            problems.append(f"rho of token {name} is {row[4]:.3g}; a correlation must lie in [-1, 1]")
    return problems


def tokens_from_table(table: pd.DataFrame, diagonal: bool) -> Tokens:
    """Every token of the table (columns token, x, y, sigma_x, sigma_y, rho), each row checked: one ValueError
    lists every problem."""
    if len(table) < 2:
        raise ValueError("add at least two tokens to the table")
    names = token_names(table)
    values = table[COLUMNS].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    problems = table_problems(names, values)
    if len(problems) == 1:
        raise ValueError(problems[0])
    if problems:
        raise ValueError(f"the token table has {len(problems)} problems:\n" + "\n".join(f"- {p}" for p in problems))
    return tokens(names, torch.tensor(values, dtype=F64), diagonal)


def query_row(t: Tokens, query: int) -> list[float]:
    """The numbers of token ``query`` (x, y, sigma_x, sigma_y, rho), which start its sliders."""
    return t.params[query].tolist()


def with_query(t: Tokens, query: int, row) -> Tokens:
    """The tokens with row ``query`` replaced by ``row`` (x, y, sigma_x, sigma_y, rho), checked."""
    params = t.params.clone()
    params[query] = torch.tensor([float(v) for v in row], dtype=F64)
    return tokens(t.names, params, t.diagonal)


def equal_covariances(t: Tokens, query: int) -> Tokens:
    """Every token given the covariance of token ``query`` (its sigma_x, sigma_y, rho), the means kept: then the
    covariance (Bures) part of W2^2 is zero and W2^2 = ||m_i - m_j||^2."""
    params = t.params.clone()
    params[:, 2:] = params[query, 2:]
    return tokens(t.names, params, t.diagonal)


def slider_range(lo: float, hi: float, value: float) -> tuple[float, float]:
    """A slider's range [lo, hi] widened to whole numbers around ``value`` when it lies outside, so that a value
    from the table is shown as it is, never clipped."""
    return float(min(lo, math.floor(value))), float(max(hi, math.ceil(value)))


# ---- what the page shows ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Scene:
    """What does not depend on tau: the tokens, the query, the query's W2^2 to every token split into the mean
    part and the covariance (Bures) part (n,), and each token's 1- and 2-sigma ellipses
    {1: (n, ELLIPSE_POINTS, 2), 2: ...}."""

    tokens: Tokens
    query: int
    mean_part: torch.Tensor
    cov_part: torch.Tensor
    ellipses: dict


def scene(t: Tokens, query: int) -> Scene:
    with named(t.names):
        mean_part, cov_part = w2_split(t.means, t.covs, query)
        ellipses = {k: gaussian.ellipse(t.means, t.full_covs, k, ELLIPSE_POINTS) for k in (1, 2)}
    return Scene(t, query, mean_part, cov_part, ellipses)


@dataclass(frozen=True)
class Attention:
    """At temperature tau: W2 attention softmax(-W2^2 / tau) and dot-product attention of the means, (n, n)."""

    scene: Scene
    tau: float
    w2: torch.Tensor
    dot: torch.Tensor


def attend(s: Scene, tau: float) -> Attention:
    t = s.tokens
    with named(t.names):
        return Attention(s, tau, gaussian.w2_attention(t.means, t.covs, t.means, t.covs, tau),
                         dot_attention(t.means, tau))


def live_inputs(s: Scene, equal: bool) -> dict:
    """What the browser recomputes the figures from while tau or a slider of the query moves (wviz.ui.drag, its
    "gaussians" and "ellipses" figures): the table's numbers (n, 5), whose query row its sliders replace, the query,
    whether the covariances are diagonal and whether every token takes the query's (``equal``), and the number of
    points of an ellipse."""
    t = s.tokens
    return {"tokens": t.params, "query": s.query, "diagonal": t.diagonal, "equal": equal, "count": ELLIPSE_POINTS}


def query_values(s: Scene) -> dict[str, float]:
    """The released values of the query's sliders, by COLUMNS name."""
    return dict(zip(COLUMNS, query_row(s.tokens, s.query)))


def live_values(a: Attention) -> dict[str, float]:
    """The released values of the sliders the heatmaps follow: tau and the query's row."""
    return {"tau": a.tau, **query_values(a.scene)}


def at_defaults():
    """The page's attention at its default inputs (the DEFAULT tokens, full covariances, query 0) as a function of
    tau (its main slider): bench_latency's reference draws it."""
    s = scene(tokens_from_table(DEFAULT, False), 0)
    return lambda tau: attend(s, tau)


def sweep(a: Attention, token: int) -> torch.Tensor:
    """The query's W2 weights (len(SCALES), n) as the covariance of ``token`` is scaled by SCALES."""
    t = a.scene.tokens
    with named(t.names):
        return covariance_sweep(t.means, t.covs, a.scene.query, token, SCALES, a.tau)



def unique_names(names: list[str]) -> list[str]:
    """The names, a repeated one numbered by its row ("cat (3)"), so that each token has its own row and column."""
    return [f"{n} ({i + 1})" if names.count(n) > 1 else n for i, n in enumerate(names)]


def weights_table(a: Attention) -> pd.DataFrame:
    """Both attentions in long form, one row per (attention, query, key): columns attention ("W2" or "dot
    product"), query, key (unique_names) and weight; for the Altair chart, which filters it in the browser."""
    names = unique_names(a.scene.tokens.names)
    n = len(names)
    frames = [pd.DataFrame({"attention": label, "query": np.repeat(names, n), "key": np.tile(names, n),
                            "weight": A.detach().cpu().reshape(-1).numpy()})
              for label, A in (("W2", a.w2), ("dot product", a.dot))]
    return pd.concat(frames, ignore_index=True)
