"""The row normalisers that wviz swaps into a transformer's attention, for encoders and for causal decoders.

Each head's scores S = Q K^T / sqrt(d') (eq. (21) of 002) become weights A, row by row; a masked key (padding, or a
future token in a decoder) has score -inf and gets weight exactly 0:

    softmax    softmax(S / tau)                          wviz.attention.softmax (tau = 1: the model's own attention)
    sparsemax  sparsemax(S / tau)                        wviz.attention.sparsemax
    entmax     alpha-entmax(S / tau), alpha in [1, 2]    wviz.attention.entmax
    sinkhorn   A = n P, P the plan of n_iter plain Sinkhorn iterations for eq. (23) of 002 (Sinkformers,
               Sander et al. 2022): :func:`sinkhorn_attention`, and in a decoder :func:`causal_sinkhorn_attention`.

Sinkhorn in an encoder. P solves min_P <M, P> - gamma H(P) over U(1/n, 1/n) with cost M = -S and n the number of
real tokens: doubly-stochastic attention. The plan is solved for M^T, so Sinkhorn's last (column) update makes the
rows of A sum to exactly 1 (each output is a weighted average of values, as in the model); the columns of A sum to
1 up to n times the marginal error, which shrinks as n_iter grows. Rows of padding tokens are 0. With a finite rho
(rho = infinity is the above), the keys' columns are held softly: P solves the semi-relaxed problem
min_{P 1 = 1/n} <M, P> + gamma KL(P | 1/n^2) + rho KL(P^T 1 | 1/n) (Chizat et al. 2018; wviz.ot.sinkhorn(rho=...))
by n_iter plain iterations, then one more row update makes each row of A sum to exactly 1. rho -> 0 is
softmax(S / gamma), the model's own attention at gamma = 1; rho -> infinity is the doubly-stochastic attention:
one slider from softmax to Sinkformer.

Sinkhorn in a decoder. A causal head may not weight a future token: A is lower-triangular. With uniform marginals
the only doubly-stochastic lower-triangular matrix is the identity: column n has one entry that may be nonzero,
A_nn, so A_nn = 1 and row n holds nothing else; removing token n leaves the same problem on n - 1 tokens. Plain
Sinkhorn on the causally masked kernel therefore drifts to "every token attends to itself" as n_iter grows (see
:func:`causal_sinkhorn_attention`'s example). wviz balances each prefix instead: query i reads its row of the
doubly-stochastic plan of the tokens it may see, V_i = {j <= i} (and real),

    A_i. = |V_i| P^(i)_i.,    P^(i) = argmin_{P in U(1/|V_i|, 1/|V_i|)} <-S_{V_i V_i}, P> - gamma H(P)    (23)

(eq. (23) of 002 on V_i), by the same n_iter iterations (semi-relaxed with rho as above). This is the attention
Sinkformers would give if the sequence ended at token i, so it is causal (no future score enters A_i.), its rows
sum to 1, the last row is the encoder's Sinkhorn row on the whole sequence, and generating token by token sees the
same weights as one pass. Each query solves its own |V_i| x |V_i| problem: O(n^3) per head, against O(n^2) for the
encoder's.

In this module alpha is only the entmax index. Sources: 002 (eq. (21): BERT attention; eq. (23): entropic OT), the
001 note (softmax, sparsemax, entmax as regularised argmins, eq. (13)), Sinkformers (Sander et al. 2022).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from wviz import attention, ot
from wviz._checks import positive
from wviz.ot import semirelaxed

__all__ = ["NORMALISERS", "Normaliser", "make_normaliser", "sinkhorn_attention", "causal_sinkhorn_attention"]

NORMALISERS = ("softmax", "sparsemax", "entmax", "sinkhorn")
_PARAMS = {"softmax": ("tau",), "sparsemax": ("tau",), "entmax": ("alpha", "tau"),
           "sinkhorn": ("gamma", "n_iter", "rho")}
_BUDGET = 2 ** 22  # float64 entries of one batch of prefix problems (32 MB), causal_sinkhorn_attention


@dataclass(frozen=True)
class Normaliser:
    """A row normaliser for attention scores; call it on scores (..., n, n) with -inf on masked keys. tau is the
    temperature, alpha the entmax index (1 = softmax, 2 = sparsemax), gamma, n_iter and rho Sinkhorn's (rho: how
    firmly the keys' columns are held, infinity: doubly stochastic). ``keep`` (bool, broadcastable to the scores;
    the -inf of masked keys are then not needed) with ``causal=True`` makes Sinkhorn the prefix-balanced one of
    :func:`causal_sinkhorn_attention`; the row normalisers only mask."""

    name: str = "softmax"
    tau: float = 1.0
    alpha: float = 1.5
    gamma: float = 1.0
    n_iter: int = 5
    rho: float = math.inf

    def __call__(self, scores: torch.Tensor, keep: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
        if self.name == "sinkhorn" and causal and keep is not None:
            return causal_sinkhorn_attention(scores, keep, self.gamma, self.n_iter, self.rho)
        if keep is not None:
            scores = scores.masked_fill(~keep, -math.inf)
        if self.name == "softmax":
            return attention.softmax(scores, self.tau)
        if self.name == "sparsemax":
            return attention.sparsemax(scores, self.tau)
        if self.name == "entmax":
            return attention.entmax(scores, self.alpha, self.tau)
        return sinkhorn_attention(scores, self.gamma, self.n_iter, self.rho)

    def label(self) -> str:
        """'softmax (tau = 1)', 'entmax (alpha = 1.5, tau = 1)', 'sinkhorn (gamma = 1, 5 iterations)',
        'sinkhorn (gamma = 1, rho = 0.1, 5 iterations)'."""
        if self.name == "sinkhorn":
            rho = "" if math.isinf(self.rho) else f"rho = {self.rho:g}, "
            return f"sinkhorn (gamma = {self.gamma:g}, {rho}{self.n_iter} iterations)"
        parts = ([f"alpha = {self.alpha:g}"] if self.name == "entmax" else []) + [f"tau = {self.tau:g}"]
        return f"{self.name} ({', '.join(parts)})"


def make_normaliser(normaliser: str | Normaliser = "softmax", **params) -> Normaliser:
    """A validated :class:`Normaliser`: ``normaliser`` is one of NORMALISERS (or a Normaliser, returned as is);
    params are tau (softmax, sparsemax, entmax), alpha in [1, 2] (entmax) and gamma > 0, n_iter in 1..1000, rho >= 0
    or infinity (sinkhorn; None is infinity). A parameter the normaliser does not take raises ValueError rather
    than being ignored.

    Example: a normaliser is a row map on scores; a parameter it does not take is refused.

    >>> import torch
    >>> from wviz.models.normalisers import make_normaliser
    >>> make_normaliser("entmax", alpha=1.5).label()
    'entmax (alpha = 1.5, tau = 1)'
    >>> make_normaliser("sparsemax")(torch.tensor([[0.0, 0.5, 1.0]])).tolist()
    [[0.0, 0.25, 0.75]]
    >>> make_normaliser("sinkhorn", rho=0.1).label()
    'sinkhorn (gamma = 1, rho = 0.1, 5 iterations)'
    >>> make_normaliser("softmax", gamma=1.0)
    Traceback (most recent call last):
        ...
    ValueError: softmax takes tau, not gamma
    """
    if isinstance(normaliser, Normaliser):
        if params:
            raise ValueError("pass parameters either in the Normaliser or as keywords, not both")
        return normaliser
    if normaliser not in NORMALISERS:
        raise ValueError(f"unknown normaliser {normaliser!r}; choose one of {', '.join(NORMALISERS)}")
    extra = sorted(set(params) - set(_PARAMS[normaliser]))
    if extra:
        raise ValueError(f"{normaliser} takes {', '.join(_PARAMS[normaliser])}, not {', '.join(extra)}")
    out: dict[str, Any] = {}
    if "tau" in params:
        out["tau"] = positive(params["tau"], "tau")
    if "gamma" in params:
        out["gamma"] = positive(params["gamma"], "gamma")
    if "alpha" in params:
        a = positive(params["alpha"], "alpha")
        if not 1.0 <= a <= 2.0:
            raise ValueError(f"alpha must lie in [1, 2] (1 = softmax, 2 = sparsemax), got {a:g}")
        out["alpha"] = a
    if "n_iter" in params:
        k = params["n_iter"]
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 1000:
            raise ValueError(f"n_iter must be a whole number of Sinkhorn iterations from 1 to 1000, got {k!r}")
        out["n_iter"] = k
    if "rho" in params:
        rho = semirelaxed.check_rho(params["rho"])
        out["rho"] = math.inf if rho is None else rho
    return Normaliser(normaliser, **out)


def sinkhorn_attention(scores: torch.Tensor, gamma: float = 1.0, n_iter: int = 5,
                       rho: float = math.inf) -> torch.Tensor:
    """Doubly-stochastic attention A = n P from n_iter Sinkhorn iterations on eq. (23) of 002 (module docstring):
    scores (..., n, n) of a self-attention, -inf on padding keys (a key is real when some query gives it a finite
    score; queries are the same tokens). Computed in float64, returned in the dtype of ``scores``. A finite rho
    holds the keys' columns softly (semi-relaxed, module docstring): rho = 0 is softmax(S / gamma).

    Example: every row sums to 1, and so (almost, after 50 iterations) does every column.

    >>> import torch
    >>> from wviz.models.normalisers import sinkhorn_attention
    >>> A = sinkhorn_attention(torch.randn(6, 6, generator=torch.Generator().manual_seed(0)), n_iter=50)
    >>> round(float((A.sum(-1) - 1).abs().max()), 6), round(float((A.sum(-2) - 1).abs().max()), 6)
    (0.0, 0.0)
    """
    T = scores.shape[-1]
    s = scores.detach().double().reshape(-1, T, T)
    real = torch.isfinite(s).any(dim=-2)                          # (R, T): real tokens
    lengths = real.sum(dim=-1)
    if not bool((lengths > 0).all()):
        raise ValueError("every token of a row is masked: at least one key must be real")
    # Each problem is solved on its real tokens only: ot.sinkhorn's plain iteration (omega = 1) divides 0 by 0 on
    # a zero mass and then takes extra recovery iterations, so padding must not reach it as zero masses. The
    # problems are grouped by their number of real tokens n (one batched call per distinct n).
    order = torch.argsort((~real).to(torch.uint8), dim=-1, stable=True)  # real tokens first, in their order
    out = torch.zeros_like(s)
    for n in lengths.unique().tolist():
        rows = (lengths == n).nonzero()[:, 0]
        idx = order[rows, :n]                                     # (r, n) positions of the real tokens
        sub = s[rows[:, None, None], idx[:, :, None], idx[:, None, :]]
        w = torch.full((n,), 1.0 / n, dtype=s.dtype, device=s.device)
        out[rows[:, None, None], idx[:, :, None], idx[:, None, :]] = _plan(sub, w, gamma, n_iter, rho)
    return out.reshape(scores.shape).to(scores.dtype)


def _plan(sub: torch.Tensor, w: torch.Tensor, gamma: float, n_iter: int, rho: float) -> torch.Tensor:
    """A = n P for the scores sub (r, n, n) of the real tokens, masses w = 1/n: balanced (rho = inf) or
    semi-relaxed, each row of A summing to exactly 1."""
    if math.isinf(rho):
        # transposed problem: rows of the plan of M^T are keys, columns queries; the last update fixes columns
        res = ot.sinkhorn(w, w, -sub.mT, gamma, n_iter=n_iter, omega=1.0)
        return res.plan.mT * len(w)
    # The queries' rows are the semi-relaxed problem's exact side. As above, the keys are updated first (here from
    # u = 1: g_j = gamma log w - phi gamma LSE_i(S_ij / gamma)), then n_iter - 1 iterations, then a last row
    # update makes each row exact: n_iter updates of each side, the same sequence as rho = inf's as rho grows.
    g = gamma * w.log() - semirelaxed.phi(rho, gamma) * gamma * torch.logsumexp(sub / gamma, dim=-2)
    if n_iter == 1:
        P = torch.exp(sub / gamma + g[:, None, :] / gamma)
    else:
        P = ot.sinkhorn(w, w, -sub, gamma, n_iter=n_iter - 1, omega=1.0, rho=rho, init=(torch.zeros_like(g), g)).plan
    return P / P.sum(-1, keepdim=True)


def causal_sinkhorn_attention(scores: torch.Tensor, keep: torch.Tensor, gamma: float = 1.0, n_iter: int = 5,
                              rho: float = math.inf) -> torch.Tensor:
    """Prefix-balanced Sinkhorn attention for a causal head (module docstring): row i of A is row i of
    |V_i| P^(i), the n_iter-iteration plan of eq. (23) of 002 on the tokens V_i = {j : keep_ij} that query i may
    see, with uniform marginals (semi-relaxed columns for a finite rho). ``scores`` (..., T, T) are the head's raw
    scores, future keys included (query k's score for a later key j enters the problem of every query i >= j);
    ``keep`` (bool, broadcastable) is the causal (and padding) mask. A query outside its own V_i (padding) gets a
    row of 0. Computed in float64, returned in the dtype of ``scores``.

    Every query's problem shares one kernel K = exp(S / gamma - max), so the iterations of all T problems are two
    matrix products per head, U K and V K^T, with U, V (T, T) holding each query's scalings u_i, v_i (0 outside its
    V_i): v_i = (K^T u_i)^-phi, then u_i = 1 / (K v_i) (phi = rho / (rho + gamma), 1 when balanced). Where the
    scores span so much that K underflows (more than about 700 gamma), the problems are solved in the log domain
    instead, in batches of prefixes. (These loops are not wviz.ot.sinkhorn(n_iter=...), which the encoder uses: it
    would hold a kernel per query, T^3 numbers a head against T^2 here.)

    Example: the rows sum to 1 with no weight on a future token, and the last row is the encoder's Sinkhorn row
    on the whole sequence; plain Sinkhorn on the causally masked kernel instead drifts to the identity, the only
    doubly-stochastic lower-triangular matrix.

    >>> import torch
    >>> from wviz.models.normalisers import causal_sinkhorn_attention, sinkhorn_attention
    >>> S = torch.randn(5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    >>> causal = torch.ones(5, 5, dtype=torch.bool).tril()
    >>> A = causal_sinkhorn_attention(S, causal)
    >>> bool((A.sum(-1) - 1).abs().max() < 1e-12), bool((A.triu(1) == 0).all())
    (True, True)
    >>> torch.allclose(A[-1], sinkhorn_attention(S)[-1])
    True
    >>> def plain(n_iter):                                    # plain Sinkhorn on the causally masked kernel
    ...     K = S.exp() * causal
    ...     for _ in range(n_iter):
    ...         K = K / K.sum(-2, keepdim=True); K = K / K.sum(-1, keepdim=True)
    ...     return round(float(K.diagonal().min()), 2)
    >>> plain(5), plain(50), plain(200)
    (0.4, 0.93, 0.98)
    """
    gamma, T = positive(gamma, "gamma"), scores.shape[-1]
    phi = 1.0 if math.isinf(rho) else semirelaxed.phi(rho, gamma)
    s = scores.detach().double()
    keep = keep.expand(s.shape).reshape(-1, T, T)
    s = s.reshape(-1, T, T) / gamma
    if not bool(keep.any(dim=-1).all()):
        raise ValueError("every token of a row is masked: at least one key must be real")
    out = _scaled_rows(s, keep, phi, n_iter)
    if out is None:
        out = _log_rows(s, keep, phi, n_iter)
    return out.reshape(scores.shape).to(scores.dtype)


def _scaled_rows(L: torch.Tensor, keep: torch.Tensor, phi: float, n_iter: int) -> torch.Tensor | None:
    """All prefix problems at once on scalings (causal_sinkhorn_attention's docstring): L (R, T, T) scores /
    gamma, keep (R, T, T). Starts from u = 1 (f = 0 up to a constant, which the row update removes); None when a
    scaling left the floats."""
    real = keep.any(dim=-2)                                       # (R, T): keys some query sees
    pair = real[:, :, None] & real[:, None, :]
    top = torch.where(pair, L, -math.inf).amax(dim=(-2, -1), keepdim=True)
    K = torch.where(pair, torch.exp(L - top), torch.zeros((), dtype=L.dtype))
    zero = torch.zeros((), dtype=L.dtype, device=L.device)
    u, v = keep.to(L.dtype), None
    for _ in range(n_iter):
        v = torch.where(keep, (u @ K).pow(-phi), zero)             # v_i = (K^T u_i)^-phi, row i of V
        u = torch.where(keep, 1.0 / (v @ K.mT), zero)             # u_i = 1 / (K v_i)
    rows = K * u.diagonal(dim1=-2, dim2=-1)[..., None] * v        # row i of diag(u_i) K diag(v_i)
    return rows if bool(torch.isfinite(rows).all()) else None


def _log_rows(L: torch.Tensor, keep: torch.Tensor, phi: float, n_iter: int) -> torch.Tensor:
    """The prefix problems in the log domain, in batches of queries that fit _BUDGET (never out of floats)."""
    T = L.shape[-1]
    out = torch.zeros_like(L)
    last = torch.where(keep, torch.arange(T, device=keep.device), -1).amax(dim=-1).amax(dim=0)  # (T,) last key seen
    start = 0
    while start < T:
        stop = _batch_end(last, start, L.shape[0])
        m = max(int(last[start:stop].max()) + 1, stop)              # a padding query's own row is still read
        out[:, start:stop, :m] = _prefix_rows_log(L[:, :m, :m], keep[:, start:stop, :m], start, phi, n_iter)
        start = stop
    return out


def _batch_end(last: torch.Tensor, start: int, R: int) -> int:
    """The end of the batch of queries from ``start`` whose prefix problems, each cropped to the batch's m x m
    (m: one past the last key any of them sees), fit _BUDGET float64 entries for R heads."""
    T = last.shape[0]
    m = torch.maximum(torch.cummax(last[start:], dim=0).values + 1, torch.arange(start + 1, T + 1))
    size = R * torch.arange(1, T - start + 1) * m * m
    return start + max(1, int((size <= _BUDGET).sum()))


def _finite(x: torch.Tensor) -> torch.Tensor:
    return torch.where(torch.isfinite(x), x, torch.zeros((), dtype=x.dtype, device=x.device))


def _prefix_rows_log(L: torch.Tensor, vis: torch.Tensor, start: int, phi: float, n_iter: int) -> torch.Tensor:
    """Rows start..start+c-1 of the prefix-balanced attention in the log domain: L (R, m, m) scores / gamma, vis
    (R, c, m) the keys each of the c queries sees; each query's problem is L on vis x vis, solved from f = 0 by
    n_iter iterations g_j = -phi LSE_k(L_kj + f_k), f_k = -LSE_j(L_kj + g_j) (uniform masses only shift the
    potentials by constants, which the row update removes); the query's own row of exp(L + f + g) is returned."""
    M = torch.where(vis[..., :, None] & vis[..., None, :], L[:, None], -math.inf)   # (R, c, m, m)
    f = torch.zeros(M.shape[:-1], dtype=M.dtype, device=M.device)
    g = torch.zeros_like(f)
    for _ in range(n_iter):
        g = -phi * _finite(torch.logsumexp(M + f[..., :, None], dim=-2))
        f = -_finite(torch.logsumexp(M + g[..., None, :], dim=-1))
    c = vis.shape[1]
    own = torch.arange(start, start + c, device=M.device)
    return torch.exp(M[:, torch.arange(c), own] + f[:, torch.arange(c), own][..., None] + g)
