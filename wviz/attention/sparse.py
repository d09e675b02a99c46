"""sparsemax and entmax: the maps of the l2 and Tsallis regularisers (001 eq. (13)), through their threshold:
the sorted closed form (sparsemax, 1.5-entmax), Newton on the threshold, the top-k shortcut on a GPU, and
bisection for any other alpha."""
from __future__ import annotations

import math
import threading

import torch

from wviz._checks import positive

from ._inputs import check_alpha, row_max, tau_for
from .dense import softmax


def _threshold_sorted(v: torch.Tensor, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Threshold theta and support size k* from rows sorted in decreasing order with v[..., 0] == 0.

    alpha == 2 (sparsemax): p = (v - theta)_+ sums to 1 (Martins & Astudillo 2016, sec. 2: key k is in the
    support iff 1 + k v_k > sum_{i<=k} v_i). alpha == 1.5: p = (v - theta)_+^2 sums to 1 (Peters, Niculae &
    Martins 2019, sec. 3, sort-based exact 1.5-entmax: theta_k is the smaller root of sum_{i<=k} (v_i - t)^2 = 1
    and k* the largest k with theta_k <= v_k). Works on a prefix of the sorted row (top-k): k* < k proves the
    prefix held the whole support.
    """
    # The top key has p <= 1, so theta >= -1 and no key with v <= -1 is in the support. Clamping at -2 keeps
    # such keys out of the support test (shown for both rules) and turns -inf (masked keys) into finite numbers.
    v = v.clamp(min=-2.0)
    rho = torch.arange(1, v.shape[-1] + 1, device=v.device, dtype=v.dtype)
    csum = v.cumsum(dim=-1)
    if alpha == 2.0:
        cand = csum - 1.0
        in_support = 1.0 + rho * v > csum
    else:
        mean = csum / rho
        var = (v * v).cumsum(dim=-1) / rho - mean * mean
        cand = mean - (1.0 / rho - var).clamp(min=0).sqrt()  # no real root: mean > v_k, so k fails the test
        in_support = cand <= v
    kstar = (in_support * rho).amax(dim=-1, keepdim=True).long()  # k = 1 always passes
    theta = cand.gather(-1, kstar - 1)
    if alpha == 2.0:
        theta = theta / kstar
    return theta, kstar


def _topk_threshold(s2: torch.Tensor, mx: torch.Tensor, scale: float, alpha: float, k: int):
    """theta, k* (float64 / int64, shape (n, 1)) for the rows of v = (s2 - mx) / scale, from a partial sort.

    Starts with the top k of every row; rows whose support fills the top k (k* == k < m) may have a larger
    support and are redone with k doubled, so the result is exact whatever the first k.
    """
    m = s2.shape[-1]
    theta: torch.Tensor
    kstar: torch.Tensor
    rows: torch.Tensor | None = None
    k = min(k, m)
    while True:
        sub, sub_mx = (s2, mx) if rows is None else (s2[rows], mx[rows])
        top = torch.topk(sub, k, dim=-1).values if k < m else torch.sort(sub, dim=-1, descending=True).values
        v = top - sub_mx      # promoted to float64 (sub_mx is) in one kernel: a small tensor, and the shift is exact
        th, ks = _threshold_sorted(v / scale if scale != 1.0 else v, alpha)
        if rows is None:
            theta, kstar = th, ks
        else:
            theta[rows], kstar[rows] = th, ks
        if k >= m:
            return theta, kstar
        todo = (ks >= k).reshape(-1)
        if not bool(todo.any()):
            return theta, kstar
        rows = todo.nonzero().reshape(-1) if rows is None else rows[todo]
        k = min(2 * k, m)


_GPU_FULL_SORT = 1024


def _sorted_threshold(scores: torch.Tensor, smax: torch.Tensor, scale: float, alpha: float) -> torch.Tensor:
    """theta (float64, shape of smax) for v = (s - smax) / scale.

    The first k only decides the speed (a top-k costs more the larger k is, a redone row costs a second
    top-k): on the CPU it is guessed from the support sizes of 32 sample rows, solved the same way from k = 64
    (one cheap round for most inputs). On a GPU the time goes to kernel launches and host synchronisations, not
    arithmetic, so there is no sample: rows of up to _GPU_FULL_SORT keys are sorted whole (no redo, hence no
    synchronisation), longer rows start from k = 64 (a full sort of a long row costs more than a second round).
    """
    m = scores.shape[-1]
    s2 = scores.detach().reshape(-1, m)
    mx = smax.reshape(-1, 1).double()
    k = 16
    if s2.is_cuda:
        k = m if m <= _GPU_FULL_SORT else 64
    elif s2.shape[0] > 64:
        sample = torch.linspace(0, s2.shape[0] - 1, 32, device=s2.device).long()
        _, ks = _topk_threshold(s2[sample], mx[sample], scale, alpha, 64)
        k = int(ks.max()) * 5 // 4 + 2  # margin so that most rows fit the first round
    theta, _ = _topk_threshold(s2, mx, scale, alpha, k)
    return theta.reshape(smax.shape)


def _entmax_bisect(scores: torch.Tensor, smax: torch.Tensor, tau: float, alpha: float) -> torch.Tensor:
    """alpha-entmax for 1 < alpha < 2 by bisection on the normaliser, in float64.

    With y = (s - max s) / tau <= 0 the solution is p_j = [1 + (alpha - 1)(y_j - c)]_+^(1 / (alpha - 1)) with the
    unique c in [0, (1 - m^(1 - alpha)) / (alpha - 1)] making sum_j p_j = 1 (the top key gives p >= 1 at c = 0,
    the uniform row gives the upper end). This is Peters et al.'s [(alpha-1) z - theta]_+^(1/(alpha-1)) with
    theta = (alpha - 1)(max z + c) - 1; the c form tends to exp(y - c) as alpha -> 1 and stays well conditioned.
    """
    a1 = alpha - 1.0
    y = (scores.detach().double() - smax.double()) / tau
    m = scores.shape[-1]
    lo = torch.zeros_like(smax, dtype=torch.float64)
    hi = torch.full_like(lo, -math.expm1(-a1 * math.log(m)) / a1)

    def weights(c):
        return torch.exp(torch.log1p((a1 * (y - c)).clamp_(min=-1.0)) / a1)

    width = 1e-9 if scores.dtype == torch.float32 else 1e-14
    for _ in range(max(1, math.ceil(math.log2(max(float(hi.max()), width) / width)))):
        mid = (lo + hi) / 2
        big = weights(mid).sum(dim=-1, keepdim=True) >= 1.0
        lo = torch.where(big, mid, lo)
        hi = torch.where(big, hi, mid)
    p = weights(lo)
    return (p / p.sum(dim=-1, keepdim=True)).to(scores.dtype)


# Newton's method on the threshold (CPU). With v = (s - max s) / scale <= 0 (scale = tau for sparsemax, 2 tau for
# 1.5-entmax: Peters et al. 2019's (alpha - 1) z) and q = 1 / (alpha - 1), the threshold theta solves
#     F(theta) = sum_j (v_j - theta)_+^q = 1,
# F convex and decreasing, with F(-1) >= 1 (the top key has v = 0), so theta lies in [-1, 0). Newton's method on
# G = F^(1/q) = ||(v - t)_+||_q, a norm of convex functions hence convex too, started below the root (t = -1)
# rises monotonically to it, and is exact in one step on a row of equal scores (G is linear there), where the
# plain Newton step on F halves the distance per step. Once the support S = {j : v_j > t} is the final one, the
# closed form on S (sparsemax: the mean formula, 1.5-entmax: the smaller root of a quadratic) is the exact
# threshold, which a row's pass shows: the closed form lies between t and the smallest v_j of S. For sparsemax
# the Newton step is that closed form, as in Michelot's projection algorithm.
_NEWTON_PASSES = 30  # rows not settled by then (none seen on real or random scores) take the sort-based path
_GROUP = 8  # Newton starts from the threshold of the maxima of groups of 8 keys (_start)


def _newton_pass(v, t, q: int, e):
    """One pass over rows v (n, m) at thresholds t (n, 1): with d = (v - t)_+, returns k = |{j : d_j > 0}|,
    P = sum_j d_j^q, Q = sum_j d_j^(q - 1) (Q = k for q = 1) and gap = min_{d_j > 0} d_j, each (n, 1) in v's dtype.
    e is a buffer shaped like v: in-place passes only (a fresh full-size tensor costs more than a pass over it)."""
    # 1 / (v_j - t) is largest at the smallest positive difference and <= 0 off the support: gap without a mask
    gap = torch.sub(v, t, out=e).reciprocal_().amax(dim=-1, keepdim=True).reciprocal_()
    d = torch.sub(v, t, out=e).clamp_(min=0)
    first = d.sum(dim=-1, keepdim=True)
    P = d.square_().sum(dim=-1, keepdim=True) if q == 2 else first
    k = d.sign_().sum(dim=-1, keepdim=True)
    return k, P, (first if q == 2 else k), gap


def _closed_form(t, k, P, Q, q: int):
    """theta on the support S = {j : v_j > t} that _newton_pass read at t, from its k, P, Q (d_j = v_j - t):
    sparsemax (q = 1) sum_S (v_j - theta) = 1, theta = t + (P - 1) / k; 1.5-entmax (q = 2) sum_S (v_j - theta)^2 = 1,
    k x^2 - 2 Q x + P - 1 = 0 for x = theta - t, whose smaller root is x = (P - 1) / (Q + sqrt(Q^2 - k (P - 1))).
    NaN where the quadratic has no real root (S is then too large)."""
    if q == 1:
        return t + (P - 1) / k
    return t + (P - 1) / (Q + (Q * Q - k * (P - 1)).sqrt())


def _start(v: torch.Tensor, q: int) -> torch.Tensor:
    """A lower bound on the threshold of rows v (n, m) to start Newton's method from ((n, 1), v's dtype): -1, or for
    long rows the threshold of the maxima of groups of _GROUP keys, solved the same way. Fewer keys make a smaller
    sum F, hence a smaller root; and most of a sparse map's support is among the group maxima: a close bound."""
    n, m = v.shape
    if m < 32 * _GROUP:
        return torch.full((n, 1), -1.0, dtype=v.dtype, device=v.device)
    if m % _GROUP == 0:  # groups of keys m / _GROUP apart: one contiguous elementwise pass
        top = v.view(n, _GROUP, m // _GROUP).amax(dim=1)
    else:
        top = torch.nn.functional.max_pool1d(v[:, None], _GROUP, ceil_mode=True)[:, 0]
    return _newton_threshold(top, q, torch.empty((2, *top.shape), dtype=v.dtype, device=v.device))[0].nan_to_num_(-1)


def _newton_threshold(v: torch.Tensor, q: int, work: torch.Tensor):
    """(theta, t, k), each (n, 1) in v's dtype, for rows v (n, m) <= 0 with max 0: theta the closed form on the
    support S = {j : v_j > t} of size k, which a pass at t showed consistent (0 <= theta - t <= gap, up to rounding:
    the caller counts the support again at theta); NaN for a row not settled (a near tie stalls Newton's method).
    work: two buffers shaped like v. Once a quarter of the rows has settled, the others are copied into one, the
    other being the passes' scratch: later passes read only the rows still moving."""
    n = v.shape[0]
    found = torch.full((3, n, 1), math.nan, dtype=v.dtype, device=v.device)
    rows = torch.arange(n, device=v.device)
    moving = torch.ones(n, dtype=torch.bool, device=v.device)
    t, sub, (e, spare) = _start(v, q), v, work
    slack = 16 * torch.finfo(v.dtype).eps  # at the root, rounding puts theta on either side of t (|v_j| <= 1)
    for _ in range(_NEWTON_PASSES):
        k, P, Q, gap = _newton_pass(sub, t, q, e[:len(rows)])
        theta = _closed_form(t, k, P, Q, q)
        x = theta - t
        done = ((x >= -slack) & (x <= gap)).reshape(-1) & moving
        if bool(done.any()):
            found[:, rows[done]] = torch.stack((theta, t, k))[:, done]
            moving &= ~done
            more = moving.nonzero().reshape(-1)
            if len(more) == 0:
                break
            if 4 * len(more) <= 3 * len(rows):
                rows, moving, t, P, Q = rows[more], moving[more], t[more], P[more], Q[more]
                sub, e, spare = torch.index_select(sub, 0, more, out=e[:len(more)]), spare, e
        # the Newton step on G = P^(1/q) = 1: t + (G - 1) / (-G'), with -G' = P^(1/q - 1) Q
        step = t + (P - (P.sqrt() if q == 2 else 1.0)) / Q
        if bool(((step == t).reshape(-1) | ~moving).all()):
            break  # stalled: a key within rounding of theta (a near tie); the caller's sort decides those rows
        t = step
    return found.unbind(0)


def _sums64(c: torch.Tensor, q: int) -> torch.Tensor:
    """Per row of float32 c (n, m): sum_j c_j, and for q = 2 sum_j c_j^2, accumulated in float64 ((n, 1) or (n, 2)).
    Blocks of about 2^16 entries: their float64 copies stay in cache."""
    parts = []
    for block in c.split(max(1, 2 ** 16 // c.shape[1])):
        b = block.double()
        first = b.sum(dim=-1, keepdim=True)
        parts.append(torch.cat((first, b.square_().sum(dim=-1, keepdim=True)), dim=-1) if q == 2 else first)
    return torch.cat(parts)


_KEPT = threading.local()


def _workspace(v: torch.Tensor) -> torch.Tensor:
    """Two scratch buffers shaped like v (2, n, m), from memory this thread keeps between calls."""
    need = 2 * v.numel()
    buf = getattr(_KEPT, "buf", None)
    if buf is None or buf.numel() < need or buf.dtype != v.dtype or buf.device != v.device:
        with torch.inference_mode(False):  # a normal tensor: written in place in and out of inference mode
            buf = _KEPT.buf = torch.empty(need, dtype=v.dtype, device=v.device)
    return buf[:need].view(2, *v.shape)


def _newton_map(v: torch.Tensor, s2: torch.Tensor, mx: torch.Tensor, scale: float, alpha: float) -> torch.Tensor:
    """(v - theta)_+ in place for rows v = (s2 - mx) / scale (n, m), theta from _newton_threshold; a float32 row's
    theta is recomputed from float64 sums over its support, as the sort-based path's is. Each row's support is then
    counted: a row whose count differs from its k, or that did not settle, takes the sort-based path."""
    q = 1 if alpha == 2.0 else 2
    work = _workspace(v)
    theta, t, k = _newton_threshold(v, q, work)
    if v.dtype != torch.float64:
        # c = max(v, t) is exact in float32, and sum_S (v_j - t)^i = sum_j (c_j - t)^i, expanded in float64
        sums = _sums64(torch.clamp(v, min=t, out=work[0]), q)
        t64, m = t.double(), v.shape[-1]
        Q = sums[:, :1] - m * t64
        P = Q if q == 1 else sums[:, 1:] - 2 * t64 * sums[:, :1] + m * t64 * t64
        theta = _closed_form(t64, k.double(), P, Q, q)
    v.sub_(theta.to(v.dtype)).clamp_(min=0)
    bad = (torch.sign(v, out=work[0]).sum(dim=-1, keepdim=True) != k).reshape(-1)  # also NaN: rows not settled
    if bool(bad.any()):
        rows = bad.nonzero().reshape(-1)
        w = torch.sub(s2[rows], mx[rows])
        if scale != 1.0:
            w.div_(scale)
        v[rows] = w.sub_(_sorted_threshold(s2[rows], mx[rows], scale, alpha).to(w.dtype)).clamp_(min=0)
    return v


def _sparse_forward(scores: torch.Tensor, smax: torch.Tensor, tau: float, alpha: float) -> torch.Tensor:
    if alpha not in (1.5, 2.0):
        return _entmax_bisect(scores, smax, tau, alpha)
    scale = tau_for(scores.dtype, tau * (2.0 if alpha == 1.5 else 1.0))  # 1.5-entmax thresholds s / (2 tau)
    # One allocation, then in-place passes: the full-size temporaries, not the arithmetic, dominate at 4096^2.
    out = torch.sub(scores.detach(), smax)  # shift first: exact near the max even for |s| ~ 1e8 in float32
    if scale != 1.0:
        out.div_(scale)
    if scores.is_cuda:  # a sort costs a GPU less than Newton's host synchronisations (_sorted_threshold)
        out.sub_(_sorted_threshold(scores, smax, scale, alpha).to(out.dtype)).clamp_(min=0)
    else:
        m = scores.shape[-1]
        out = _newton_map(out.reshape(-1, m), scores.detach().reshape(-1, m), smax.reshape(-1, 1), scale,
                          alpha).reshape(scores.shape)
    if alpha == 1.5:
        out.square_()
    return out


class _SparseMap(torch.autograd.Function):
    """alpha-entmax (1 < alpha <= 2) of s / tau with its closed-form Jacobian-vector product.

    With w = p^(2 - alpha) on the support (w = 1 there for sparsemax) and 0 elsewhere, the Jacobian of
    p(z) is diag(w) - w w^T / sum(w) (Martins & Astudillo 2016 for sparsemax; Peters, Niculae & Martins 2019
    for entmax); the chain rule through z = s / tau divides by tau.
    """

    @staticmethod
    def forward(ctx, scores, smax, tau, alpha):
        p = _sparse_forward(scores, smax, tau, alpha)
        ctx.save_for_backward(p)
        ctx.tau, ctx.alpha = tau, alpha
        return p

    @staticmethod
    def backward(ctx, grad):
        (p,) = ctx.saved_tensors
        w = (p > 0).to(p.dtype) if ctx.alpha == 2.0 else p.pow(2.0 - ctx.alpha)
        gw = grad * w
        out = gw - w * (gw.sum(dim=-1, keepdim=True) / w.sum(dim=-1, keepdim=True))
        return out / ctx.tau, None, None, None


def sparsemax(scores: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
    """Sparsemax attention p = argmin_{p in simplex} -<s, p> + (tau / 2) ||p||^2 = Euclidean projection of s / tau
    onto the simplex, p_j = (s_j / tau - theta)_+ (Sparsemax row of the table under eq. (13) of the 001 note;
    sparsemax: Martins & Astudillo 2016).

    NB: the 001 note writes p_j = (<q, k_j> - tau)_+ with tau the threshold; here tau is a temperature, as in
    every map of wviz.attention, and the threshold is called theta. Exact: theta comes from a partial sort (top-k,
    k doubled for rows whose support does not fit). -inf scores get weight exactly 0.

    Example: unlike softmax, sparsemax gives low-scoring keys exactly zero weight; a high tau spreads it again.

    >>> import torch
    >>> from wviz.attention import sparsemax
    >>> s = torch.tensor([0.0, 0.5, 1.0])
    >>> [round(x, 4) for x in sparsemax(s).tolist()]
    [0.0, 0.25, 0.75]
    >>> [round(x, 4) for x in sparsemax(s, tau=10.0).tolist()]
    [0.2833, 0.3333, 0.3833]
    """
    tau = positive(tau, "tau")
    smax = row_max(scores)
    return _SparseMap.apply(scores, smax, tau, 2.0)


def entmax(scores: torch.Tensor, alpha: float = 1.5, tau: float = 1.0) -> torch.Tensor:
    """alpha-entmax attention: argmin_{p in simplex} -<s, p> + tau * (sum_j p_j^alpha - 1) / (alpha (alpha - 1)),
    i.e. p_j = [(alpha - 1) s_j / tau - theta]_+^(1 / (alpha - 1)) (entmax: Peters, Niculae & Martins 2019, sec. 3;
    the Tsallis member of the family of eq. (13) of the 001 note).

    alpha == 1 is softmax and alpha == 2 sparsemax (dispatched exactly); alpha == 1.5 uses the exact sort-based
    threshold on a partial sort; other alpha in (1, 2) bisect the threshold in float64 to ~1e-9 (float32 output)
    or ~1e-14 (float64). -inf scores get weight exactly 0.

    Example: alpha = 1 is softmax, alpha = 2 is sparsemax, and 1.5-entmax lies between (sparse, but less so).

    >>> import torch
    >>> from wviz.attention import entmax, softmax, sparsemax
    >>> s = torch.tensor([0.0, 1.0, 2.0])
    >>> torch.allclose(entmax(s, alpha=1.0), softmax(s)), torch.allclose(entmax(s, alpha=2.0), sparsemax(s))
    (True, True)
    >>> [round(x, 4) for x in softmax(s).tolist()]
    [0.09, 0.2447, 0.6652]
    >>> [round(x, 4) for x in entmax(s, alpha=1.5).tolist()]
    [0.0, 0.1693, 0.8307]
    >>> [round(x, 4) for x in sparsemax(s).tolist()]
    [0.0, 0.0, 1.0]
    """
    alpha = check_alpha(alpha)
    if alpha == 1.0:
        return softmax(scores, tau)
    if alpha == 2.0:
        return sparsemax(scores, tau)
    tau = positive(tau, "tau")
    smax = row_max(scores)
    return _SparseMap.apply(scores, smax, tau, alpha)
