"""Squared-L2-regularised optimal transport (Blondel, Seguy & Rolet 2018): eq. (23) of 002 with the entropy
replaced by a quadratic, min_{P in U(a, b)} <C, P> + (gamma / 2) ||P||^2, whose plans are sparse."""
from __future__ import annotations

import math

import numpy as np
import torch

from wviz._checks import positive

from .problem import OTResult, check_iter_args, dot, finish, init_potentials, marginal_error, prepare
from .relaxation import OverRelaxation, check_omega


def _threshold(G, t, target, dim, steps: int = 60):
    """Per row (dim=-1) or column (dim=-2) of G, the t with sum [t + G]_+ = target: a 1-D piecewise-linear root.

    phi(t) = sum_k [t + G_k]_+ is convex and increasing, so Newton's method started anywhere with phi'(t) > 0 lands
    at or right of the root and then decreases to it monotonically, exactly once the support is found (the
    simplex-projection threshold, without sorting). t is the warm start (the previous potentials).
    """
    lo = -G.amax(dim)                        # phi(lo) = 0: the largest t with an empty support
    t = torch.where(torch.isfinite(t), torch.maximum(t, lo), lo + target)
    t = torch.where(t <= lo, lo + target, t)  # phi'(t) > 0 from here on
    D = torch.empty_like(G)
    for _ in range(steps):
        torch.add(G, t.unsqueeze(dim), out=D).clamp_min_(0)
        phi = D.sum(dim)
        cnt = torch.count_nonzero(D, dim).to(G.dtype)
        step = (phi - target) / cnt.clamp_min(1)
        t = t - step
        if not bool((step.abs() > 4 * torch.finfo(G.dtype).eps * (t.abs() + target)).any()):
            break
    return t


def _block_ascent(f, g, C, G, gamma_a, gamma_b, pos_a, pos_b, omegas, first: bool):
    """One round of the dual's alternating exact block maximisation, over-relaxed by omegas (B, 1): each f_i
    solves sum_j [f_i + g_j - C_ij]_+ = gamma a_i, then each g_j the same for the columns. Leaves G_ij = f_i - C_ij.
    Masses 0 get potential -inf (no plan entry)."""
    torch.sub(g[:, None, :], C, out=G)           # rows of G = g_j - C_ij (masked columns have g = -inf)
    f_new = _threshold(G, f, gamma_a, dim=-1)
    f = f_new if first else f + omegas * (f_new - f)
    f = torch.where(pos_a, f, -torch.inf)
    torch.sub(f[:, :, None], C, out=G)           # columns of G = f_i - C_ij
    g_new = _threshold(G, g, gamma_b, dim=-2)
    g = g_new if first else g + omegas * (g_new - g)
    g = torch.where(pos_b, g, -torch.inf)
    return f, g


@torch.no_grad()
def quadratic_ot(a, b, C, gamma, tol: float = 1e-6, max_iter: int = 5000, *, init=None,
                 omega: float | None = None, check_every: int | None = None) -> OTResult:
    """Squared-L2-regularised optimal transport (Blondel, Seguy & Rolet 2018): eq. (23) of 002 with the entropy
    replaced by a quadratic, min_{P in U(a, b)} <C, P> + (gamma / 2) ||P||^2, whose plans are sparse.

    Its dual max_{f, g} <f, a> + <g, b> - (1 / (2 gamma)) sum_ij [f_i + g_j - C_ij]_+^2 is concave and smooth, with
    P_ij = [f_i + g_j - C_ij]_+ / gamma. It is solved by alternating exact block maximisation: for fixed g, each f_i
    solves sum_j [f_i + g_j - C_ij]_+ = gamma a_i (a 1-D piecewise-linear root: a simplex projection), then the same
    for g; the block updates are over-relaxed (omega in [1, 2), adapted as in :func:`sinkhorn`: the alternation is
    2-cyclic). Stops when max(||P1 - a||_1, ||P^T 1 - b||_1) <= tol; converged=False otherwise.

    gamma is in units of C times mass^-1: plans spread out when gamma is comparable to max|C| n m.
    init: a previous OTResult of quadratic_ot (or a pair (f, g)) to warm-start from.

    The plan is [f + g - C]_+ / gamma, meets both marginals to tol and has exact zeros, where sinkhorn's has none:

    >>> import torch
    >>> from wviz.ot import cost_matrix, quadratic_ot, sinkhorn
    >>> g = torch.Generator().manual_seed(0)
    >>> x, y = torch.rand(5, 2, generator=g, dtype=torch.float64), torch.rand(4, 2, generator=g, dtype=torch.float64)
    >>> C = cost_matrix(x, y)
    >>> a, b = torch.full((5,), 1 / 5, dtype=torch.float64), torch.full((4,), 1 / 4, dtype=torch.float64)
    >>> res = quadratic_ot(a, b, C, gamma=0.1)
    >>> bool(res.converged), torch.allclose(res.plan, (res.f[:, None] + res.g[None, :] - C).clamp_min(0) / 0.1)
    (True, True)
    >>> int((res.plan == 0).sum()), int((sinkhorn(a, b, C, 0.1).plan == 0).sum())   # zeros of the 20 entries
    (11, 0)
    """
    gamma = positive(gamma, "gamma")
    check_iter_args(tol, max_iter)
    check_omega(omega)
    a, b, C, shape, _ = prepare(a, b, C)
    B, n, m = C.shape
    dtype, device = C.dtype, C.device
    if check_every is None:
        check_every = 10 if device.type == "cuda" else 1
    pos_a, pos_b = a > 0, b > 0
    warm = None if init is None else init_potentials(init, a, b, B, n, m)
    f, g = (warm[0], warm[1]) if warm is not None else (torch.full_like(a, torch.nan), torch.zeros_like(b))
    g = g.masked_fill(~pos_b, -torch.inf)
    relax = OverRelaxation(B, None if omega is None else float(omega))
    relax.start_stage(gamma)
    if omega is None:
        relax.omega = np.ones(B)    # exact block maximisation (monotone ascent) until a convergence rate is measured
    omegas = torch.as_tensor(relax.omega, dtype=dtype, device=device).view(B, 1)
    G = torch.empty_like(C)
    history, it = [], 0
    while it < max_iter:
        f, g = _block_ascent(f, g, C, G, gamma * a, gamma * b, pos_a, pos_b, omegas, it == 0)
        it += 1
        if it % check_every == 0 or it >= max_iter:
            torch.add(G, g[:, None, :], out=G).clamp_min_(0)     # gamma P
            err = marginal_error(a, b, G.sum(-1) / gamma, G.sum(-2) / gamma)   # the marginals of P = G / gamma
            errs = err.cpu().numpy()
            worst = float(errs.max())
            history.append((it, worst))
            if worst <= tol or not math.isfinite(worst):
                break
            if relax.update(errs, it):
                omegas = torch.as_tensor(relax.omega, dtype=dtype, device=device).view(B, 1)
    P = torch.sub(f[:, :, None], C).add_(g[:, None, :]).clamp_min_(0).div_(gamma)
    err = marginal_error(a, b, P.sum(-1), P.sum(-2))
    cost = dot(C, P)
    reg = cost + gamma / 2 * (P * P).sum((-2, -1))
    return finish(shape, P, cost, reg, it, err, err <= tol, history, f, g, gamma)
