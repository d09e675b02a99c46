"""Wasserstein self-attention on a sequence: the 000 note, "Wasserstein Self-Attention Mechanism" (an unpublished
technical note; see the References page).

In the note's notation: X = [x_1, ..., x_n] (..., n, d); Q = X W_Q, K = X W_K, V = X W_V; W_ij = W(q_i, k_j), a
Wasserstein distance between the distributions that q_i and k_j stand for; A_ij = f(W_ij) with f decreasing
(small distance, large weight); Y_i = sum_j A_ij v_j, i.e. Y = A V.

How a vector stands for a distribution (``representation``); in every case W_ij is an optimal transport cost:

    "gaussian"   first half mean mu, second half log-variance log sigma^2 (the diagonal Gaussian embedding of 004):
                 W_ij = W2^2 = ||mu_i - mu_j||^2 + ||sigma_i - sigma_j||^2 (wviz.gaussian's Bures-Wasserstein form)
    "empirical"  the d_k coordinates as d_k equally weighted points on the line: W_ij = W_p^p
                 = (1/d_k) sum_l |q_(l) - k_(l)|^p with q_(l), k_(l) the sorted coordinates (monotone coupling)
    "cloud"      the vector reshaped into k points of dimension d_k / k with weights 1/k: W_ij = W2^2 = the exact
                 OT cost with ground cost ||x - y||^2, which for equal uniform clouds is an assignment problem,
                 min over permutations s of (1/k) sum_l ||x_l - y_s(l)||^2 (Birkhoff), solved exactly for all
                 pairs at once by an auction (``assignment``); 1-D points (k = d_k) by sorting

Weight maps f (``weight_map``): "softmax", A_ij = softmax_j(-W_ij / tau); "sigmoid" (the note's suggestion),
A_ij = sigmoid((b - W_ij) / s), each row divided by its sum when ``normalize``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
import torch.nn.functional as F

from wviz import attention, gaussian
from wviz._checks import number, positive

__all__ = ["WSAResult", "REPRESENTATIONS", "WEIGHT_MAPS", "wasserstein_distances", "weights",
           "wasserstein_self_attention", "dot_product_attention", "WassersteinSelfAttention", "assignment"]

REPRESENTATIONS = ("gaussian", "empirical", "cloud")
WEIGHT_MAPS = ("softmax", "sigmoid")


@dataclass(frozen=True)
class WSAResult:
    """Y (..., n, d_v) the outputs A V; A (..., n, n) the attention weights (rows: queries); W (..., n, n) the
    matrix A was computed from: the distances W_ij for Wasserstein attention, -q_i.k_j / sqrt(d_k) for
    dot-product attention (so that A = softmax(-W) there too)."""

    Y: torch.Tensor
    A: torch.Tensor
    W: torch.Tensor


# ----------------------------------------------------------------------------------------------- input checks

def _check_inputs(X, W_Q, W_K, W_V):
    for t, name in ((X, "X"), (W_Q, "W_Q"), (W_K, "W_K"), (W_V, "W_V")):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch tensor, got {type(t).__name__}")
        if t.dtype not in (torch.float32, torch.float64):
            raise ValueError(f"{name} must be float32 or float64, got {t.dtype}")
        if not bool(torch.isfinite(t.detach()).all()):
            raise ValueError(f"{name} contains NaN or inf")
    if X.dim() < 2 or X.shape[-2] == 0 or X.shape[-1] == 0:
        raise ValueError(f"X must have shape (..., n, d) with n, d >= 1 (one row per token), got {tuple(X.shape)}")
    d = X.shape[-1]
    for t, name in ((W_Q, "W_Q"), (W_K, "W_K"), (W_V, "W_V")):
        if t.dim() != 2 or t.shape[0] != d or t.shape[1] == 0:
            raise ValueError(f"{name} must have shape (d, d_out) = ({d}, ...) to multiply X of width d = {d}, "
                             f"got {tuple(t.shape)}")
    if W_Q.shape[1] != W_K.shape[1]:
        raise ValueError(f"W_Q and W_K must have the same number of columns (queries and keys are compared), got "
                         f"{W_Q.shape[1]} and {W_K.shape[1]}")
    if len({X.device, W_Q.device, W_K.device, W_V.device}) > 1:
        raise ValueError("X, W_Q, W_K and W_V must be on the same device")
    dtype = torch.float64 if any(t.dtype == torch.float64 for t in (X, W_Q, W_K, W_V)) else torch.float32
    return [t.to(dtype) for t in (X, W_Q, W_K, W_V)]


def _check_options(representation, weight_map, d_k: int | None, k, p) -> tuple[int, float]:
    if representation not in REPRESENTATIONS:
        raise ValueError(f"unknown representation {representation!r}; choose one of {', '.join(REPRESENTATIONS)}")
    if weight_map not in WEIGHT_MAPS:
        raise ValueError(f"unknown weight_map {weight_map!r}; choose one of {', '.join(WEIGHT_MAPS)}")
    if not (isinstance(k, int) and not isinstance(k, bool) and k >= 1):
        raise ValueError(f"k (points per cloud) must be a positive integer, got {k!r}")
    p = number(p, "p")
    if p < 1:
        raise ValueError(f"p must be >= 1 (W_p is a distance for p >= 1), got {p}")
    if d_k is not None:
        if representation == "gaussian" and d_k % 2:
            raise ValueError(f"the gaussian reading splits each query/key vector into a mean half and a "
                             f"log-variance half, so its width must be even; got {d_k}")
        if representation == "cloud" and d_k % k:
            raise ValueError(f"the cloud reading reshapes each query/key vector of width {d_k} into k = {k} points; "
                             f"{d_k} is not divisible by {k}")
    return k, p


# ------------------------------------------------------------------------------------- exact assignment (cloud)

@torch.no_grad()
def assignment(C: torch.Tensor, rel_eps: float = 1e-10) -> torch.Tensor:
    """Optimal assignment s minimising sum_l C[l, s(l)] for each (..., k, k) cost matrix: (..., k) int64 indices.

    Bertsekas' auction algorithm (Bertsekas 1988; Bertsekas & Castanon 1989), Jacobi form with epsilon scaling,
    run on all matrices of the batch at once in float64: every unassigned row bids for its best column at price
    + (best - second-best value) + eps, each column goes to its highest bidder, eps shrinks 5x per phase (rows
    still within eps of their best column keep it), and each round works only on the matrices with unassigned
    rows. The final assignment is within k * eps of the optimum with eps = rel_eps * (max C - min C) per matrix:
    exact up to rounding. No gradients: the caller gathers C at the indices (the OT cost is piecewise linear in
    C; this is its gradient, Danskin's theorem).

    Why not entropic OT (wviz.ot.sinkhorn) with a small gamma: on these small uniform problems it needs many
    iterations at a small gamma, and its cost <C, P_gamma> is biased, by up to gamma log k relative to the cost;
    the auction is exact.

    Example: the auction finds the cheapest of the 3! assignments, as brute force does.

    >>> from itertools import permutations
    >>> import torch
    >>> from wviz.wsa import assignment
    >>> C = torch.tensor([[4.0, 1.0, 3.0], [2.0, 0.0, 5.0], [3.0, 2.0, 2.0]])
    >>> s = assignment(C)
    >>> s.tolist(), float(C[torch.arange(3), s].sum())
    ([1, 0, 2], 5.0)
    >>> min(float(C[torch.arange(3), list(p)].sum()) for p in permutations(range(3)))
    5.0
    """
    if not isinstance(C, torch.Tensor) or C.dim() < 2 or C.shape[-1] != C.shape[-2]:
        raise ValueError("assignment needs square cost matrices, a tensor of shape (..., k, k)")
    if not bool(torch.isfinite(C).all()):
        raise ValueError("the assignment costs contain NaN or inf (a coordinate is too large?)")
    lead, k = C.shape[:-2], C.shape[-1]
    C = C.detach().reshape(-1, k, k).double()
    B = C.shape[0]
    dev = C.device
    if k == 1 or B == 0:
        return torch.zeros(*lead, k, dtype=torch.long, device=dev)
    low = C.amin(dim=(-2, -1), keepdim=True)
    span = (C.amax(dim=(-2, -1), keepdim=True) - low)[:, :, 0]  # (B, 1)
    # the auction maximises benefit = -cost; shifting by the minimum keeps values and prices within [0, span],
    # so an increment of eps = rel_eps * span is never lost to rounding; a constant matrix takes eps = 1 (any
    # assignment is optimal)
    value = low - C
    span = torch.where(span > 0, span, 1.0)
    eps_final, eps = rel_eps * span, span / 4
    price = torch.zeros(B, k, dtype=C.dtype, device=dev)
    rows = torch.arange(k, device=dev)
    owner = torch.full((B, k), -1, dtype=torch.long, device=dev)       # column -> row
    assign = torch.full((B, k + 1), -1, dtype=torch.long, device=dev)  # row -> column; column k: scratch
    while True:
        # a new phase keeps the rows that satisfy eps-complementary slackness for the new eps, frees the others
        # (Bertsekas' advice): late phases then only repair the few rows whose price margin is still too wide
        profit = value - price.unsqueeze(-2)
        mine = profit.gather(2, assign[:, :k].clamp(min=0).unsqueeze(-1)).squeeze(-1)
        loose = (assign[:, :k] >= 0) & (mine < profit.amax(dim=-1) - eps)
        cols = torch.where(loose, assign[:, :k], k)  # column k: scratch
        owner = torch.cat([owner, owner[:, :1]], 1).scatter_(1, cols, -1)[:, :k]
        assign[:, :k] = torch.where(loose, -1, assign[:, :k])
        act = torch.arange(B, device=dev)  # the matrices that still have unassigned rows
        while True:
            free = assign[act, :k] < 0
            still = free.any(dim=1)
            if not bool(still.all()):  # most matrices finish in a few rounds: work on the others only
                act, free = act[still], free[still]
                if act.numel() == 0:
                    break
            pr, ow, asg = price[act], owner[act], assign[act]
            top = (value[act] - pr.unsqueeze(-2)).topk(2, dim=-1)
            j1 = top.indices[..., 0]
            bid = pr.gather(1, j1) + (top.values[..., 0] - top.values[..., 1]) + eps[act]
            bid = torch.where(free, bid, -math.inf)
            best = torch.full_like(pr, -math.inf).scatter_reduce(1, j1, bid, "amax")  # highest bid per column
            won = free & (bid == best.gather(1, j1))
            winner = torch.full_like(ow, k).scatter_reduce(1, j1, torch.where(won, rows, k), "amin")
            got = winner < k  # columns that received a bid; ties go to the lowest row
            # the previous owners of the columns that were won become free; then the winners take them
            asg.scatter_(1, torch.where(got & (ow >= 0), ow, k), -1)
            asg.scatter_(1, torch.where(got, winner, k), rows.expand_as(winner))
            owner[act] = torch.where(got, winner, ow)
            price[act] = torch.where(got, best, pr)
            assign[act] = asg
        if bool((eps <= eps_final).all()):
            return assign[:, :k].reshape(*lead, k)
        eps = torch.maximum(eps / 5, eps_final)


# ------------------------------------------------------------------------------------------------ distances

def _cloud_cost(Q: torch.Tensor, K: torch.Tensor, k: int) -> torch.Tensor:
    """Exact W2^2 between the uniform k-point clouds of every query and key: (..., n, m)."""
    *lead, n, dk = Q.shape
    m = K.shape[-2]
    if dk == k:  # points on the line: the sorted (monotone) coupling is optimal, no assignment problem to solve
        Qs, Ks = Q.sort(dim=-1).values, K.sort(dim=-1).values
        return torch.cdist(Qs, Ks, compute_mode="donot_use_mm_for_euclid_dist") ** 2 / k
    P = Q.reshape(*lead, n, 1, k, dk // k)
    R = K.reshape(*lead, 1, m, k, dk // k)
    # ground costs ||x_l - y_l'||^2 of every pair of tokens (..., n, m, k, k), by differences: exactly 0 for
    # identical points, so a token's distance to itself is exactly 0
    C = ((P.unsqueeze(-2) - R.unsqueeze(-3)) ** 2).sum(-1)
    if k == 1 or not bool(torch.isfinite(C.detach()).all()):  # overflow: reported by the caller
        return C[..., 0, 0]
    s = assignment(C)
    return C.gather(-1, s.unsqueeze(-1)).squeeze(-1).mean(-1)


def wasserstein_distances(Q: torch.Tensor, K: torch.Tensor, representation: str = "gaussian", *, k: int = 2,
                          p: float = 2.0) -> torch.Tensor:
    """W_ij = W(q_i, k_j) of the 000 note for queries Q (..., n, d_k) and keys K (..., m, d_k): (..., n, m).

    Representations as in the module docstring: "gaussian" W2^2 between diagonal Gaussians (mean, log-variance
    halves; 004), "empirical" W_p^p between the 1-D empirical distributions of the coordinates (sorting), "cloud"
    W2^2 between uniform k-point clouds of dimension d_k / k (exact assignment). Differentiable in Q and K.

    Example: "gaussian" reads (mean, log-variance) halves: W2^2 = ||mu_q - mu_k||^2 + ||sigma_q - sigma_k||^2;
    "empirical" and "cloud" ignore the order of the coordinates or points.

    >>> import math
    >>> import torch
    >>> from wviz.wsa import wasserstein_distances
    >>> Q = torch.tensor([[0.0, 0.0, 0.0, 0.0]])                          # mean (0, 0), sigma (1, 1)
    >>> K = torch.tensor([[3.0, 4.0, 0.0, 0.0], [0.0, 0.0, math.log(4.0), math.log(4.0)]])   # sigma (2, 2) in row 2
    >>> wasserstein_distances(Q, K).tolist()
    [[25.0, 2.0]]
    >>> wasserstein_distances(torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[3.0, 1.0, 2.0]]), "empirical").tolist()
    [[0.0]]
    >>> q, k = torch.tensor([[0.0, 0.0, 1.0, 1.0]]), torch.tensor([[1.0, 1.0, 0.0, 0.0]])   # points (0, 0), (1, 1)
    >>> wasserstein_distances(q, k, "cloud", k=2).tolist()
    [[0.0]]
    """
    for t, name in ((Q, "Q"), (K, "K")):
        if not isinstance(t, torch.Tensor) or t.dim() < 2:
            raise ValueError(f"{name} must be a tensor of shape (..., n, d_k)")
    if Q.shape[-1] != K.shape[-1]:
        raise ValueError(f"queries and keys have different widths ({Q.shape[-1]} and {K.shape[-1]})")
    k, p = _check_options(representation, "softmax", Q.shape[-1], k, p)
    if representation == "gaussian":
        h = Q.shape[-1] // 2
        # sigma = exp(log sigma^2 / 2): the std directly, so the gradient is finite for every log-variance
        W = gaussian._sqdist(torch.cat([Q[..., :h], (Q[..., h:] / 2).exp()], -1),
                             torch.cat([K[..., :h], (K[..., h:] / 2).exp()], -1))
    elif representation == "empirical":
        # the monotone (sorted) coupling is optimal on the line; cdist without the matrix-product shortcut keeps
        # identical sorted vectors at distance exactly 0
        Qs, Ks = Q.sort(dim=-1).values, K.sort(dim=-1).values
        W = torch.cdist(Qs, Ks, p=p, compute_mode="donot_use_mm_for_euclid_dist") ** p / Q.shape[-1]
    else:
        W = _cloud_cost(Q, K, k)
    if not bool(torch.isfinite(W.detach()).all()):
        raise ValueError("the distances overflowed (a log-variance or coordinate is too large); scale X or the "
                         "projections W_Q, W_K down")
    return W


def weights(W: torch.Tensor, weight_map: str = "softmax", *, tau: float = 1.0, b: float = 0.0, s: float = 1.0,
            normalize: bool = True) -> torch.Tensor:
    """A = f(W) along the last dimension: "softmax" A_ij = softmax_j(-W_ij / tau) (004's W2 attention);
    "sigmoid" A_ij = sigmoid((b - W_ij) / s), the 000 note's example of f, divided by its row sum when
    ``normalize`` (computed as softmax_j(log sigmoid((b - W_ij) / s)), which cannot divide by an underflowed 0).

    Example: softmax(-W / tau) favours the closest key; the note's sigmoid gives 1/2 at W = b before normalising.

    >>> import torch
    >>> from wviz.wsa import weights
    >>> W = torch.tensor([[0.0, 1.0, 2.0]])
    >>> [round(x, 4) for x in weights(W)[0].tolist()]
    [0.6652, 0.2447, 0.09]
    >>> [round(x, 4) for x in weights(W, "sigmoid", normalize=False)[0].tolist()]
    [0.5, 0.2689, 0.1192]
    >>> [round(x, 4) for x in weights(W, "sigmoid")[0].tolist()]
    [0.563, 0.3028, 0.1342]
    """
    if weight_map not in WEIGHT_MAPS:
        raise ValueError(f"unknown weight_map {weight_map!r}; choose one of {', '.join(WEIGHT_MAPS)}")
    if weight_map == "softmax":
        return attention.softmax(-W, tau=tau)
    b, s = number(b, "b"), positive(s, "s")
    z = (b - W) / s
    return torch.softmax(F.logsigmoid(z), dim=-1) if normalize else torch.sigmoid(z)


def wasserstein_self_attention(X, W_Q, W_K, W_V, representation: str = "gaussian", weight_map: str = "softmax",
                               tau: float = 1.0, b: float = 0.0, s: float = 1.0, normalize: bool = True,
                               k: int = 2, p: float = 2.0) -> WSAResult:
    """Wasserstein self-attention of the 000 note: Q = X W_Q, K = X W_K, V = X W_V, W_ij = W(q_i, k_j),
    A_ij = f(W_ij), Y = A V.

    X (..., n, d); W_Q, W_K (d, d_k); W_V (d, d_v). representation: "gaussian" (d_k even), "empirical" (order p),
    "cloud" (k points, d_k divisible by k); weight_map: "softmax" (tau) or "sigmoid" (b, s, normalize); see the
    module docstring. Returns WSAResult(Y (..., n, d_v), A (..., n, n), W (..., n, n)).

    Example: every row of A is a distribution over the tokens, and Y = A V.

    >>> import torch
    >>> from wviz.wsa import wasserstein_self_attention
    >>> X = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    >>> I = torch.eye(4)
    >>> r = wasserstein_self_attention(X, W_Q=I, W_K=I, W_V=I)
    >>> tuple(r.Y.shape), tuple(r.A.shape), tuple(r.W.shape)
    ((5, 4), (5, 5), (5, 5))
    >>> torch.allclose(r.A.sum(-1), torch.ones(5)), torch.allclose(r.Y, r.A @ X)
    (True, True)
    """
    X, W_Q, W_K, W_V = _check_inputs(X, W_Q, W_K, W_V)
    k, p = _check_options(representation, weight_map, W_Q.shape[1], k, p)
    tau = positive(tau, "tau")
    if weight_map == "sigmoid":
        number(b, "b"), positive(s, "s")
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    W = wasserstein_distances(Q, K, representation, k=k, p=p)
    A = weights(W, weight_map, tau=tau, b=b, s=s, normalize=normalize)
    return WSAResult(A @ V, A, W)


def dot_product_attention(X, W_Q, W_K, W_V) -> WSAResult:
    """Scaled dot-product attention for comparison: A = softmax(Q K^T / sqrt(d_k)), Y = A V (the traditional
    attention of the 000 note, with the usual 1 / sqrt(d_k)). W = -Q K^T / sqrt(d_k), so that A = softmax(-W).

    Example: the same as torch's scaled dot-product attention.

    >>> import torch
    >>> from wviz.wsa import dot_product_attention
    >>> X = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    >>> I = torch.eye(4)
    >>> r = dot_product_attention(X, I, I, I)
    >>> torch.allclose(r.Y, torch.nn.functional.scaled_dot_product_attention(X, X, X), atol=1e-6)
    True
    """
    X, W_Q, W_K, W_V = _check_inputs(X, W_Q, W_K, W_V)
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    W = -(Q @ K.mT) / math.sqrt(Q.shape[-1])
    A = attention.softmax(-W)
    return WSAResult(A @ V, A, W)


class WassersteinSelfAttention(nn.Module):
    """wasserstein_self_attention (000 note) with learnable W_Q, W_K (d_model, d_k) and W_V (d_model, d_v),
    initialised with i.i.d. N(0, 1 / d_model) entries; the other arguments are fixed hyperparameters.
    forward(X (..., n, d_model)) -> WSAResult. Gradients reach W_Q and W_K through W for every representation
    (for "cloud" through the costs of the optimal assignment)."""

    def __init__(self, d_model: int, d_k: int | None = None, d_v: int | None = None, *,
                 representation: str = "gaussian", weight_map: str = "softmax", tau: float = 1.0, b: float = 0.0,
                 s: float = 1.0, normalize: bool = True, k: int = 2, p: float = 2.0, dtype=torch.float32):
        super().__init__()
        # None means "as wide as the model"; 0 is an error, not a request for the default
        d_k, d_v = (d_model if v is None else v for v in (d_k, d_v))
        for v, name in ((d_model, "d_model"), (d_k, "d_k"), (d_v, "d_v")):
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        self.k, self.p = _check_options(representation, weight_map, d_k, k, p)
        self.tau = positive(tau, "tau")
        self.b, self.s = number(b, "b"), positive(s, "s")
        self.representation, self.weight_map, self.normalize = representation, weight_map, bool(normalize)
        scale = d_model ** -0.5
        self.W_Q = nn.Parameter(torch.randn(d_model, d_k, dtype=dtype) * scale)
        self.W_K = nn.Parameter(torch.randn(d_model, d_k, dtype=dtype) * scale)
        self.W_V = nn.Parameter(torch.randn(d_model, d_v, dtype=dtype) * scale)

    def forward(self, X: torch.Tensor) -> WSAResult:
        return wasserstein_self_attention(X, self.W_Q, self.W_K, self.W_V, self.representation, self.weight_map,
                                          self.tau, self.b, self.s, self.normalize, self.k, self.p)

    def extra_repr(self) -> str:
        return (f"d_model={self.W_Q.shape[0]}, d_k={self.W_Q.shape[1]}, d_v={self.W_V.shape[1]}, "
                f"representation={self.representation!r}, weight_map={self.weight_map!r}")
