"""What the "Attention solves a dual problem" page computes, built on :mod:`wviz.fenchel` (source: 002, INDEX.md).

Templates t_i in the plane with preference weights u_i, an evidence z and a reliability alpha; every function
batches over the alphas (or gammas) it is given, so a sweep is one Newton solve.
"""
from __future__ import annotations

import torch

from wviz import fenchel

F64 = torch.float64
FIGURE3_ALPHAS = (0.1, 0.5, 1.0, 2.0, 5.0)   # the grid of the paper's Figure 3


def estimates(templates, u, z, alphas) -> dict:
    """For each alpha (A,): lambda* of (9), alpha z (16), lambda of (15), and the estimates h of (12), (18) and
    (12) at (15); plus mu. Tensors (A, d) (mu (d,))."""
    alphas = torch.as_tensor(alphas, dtype=F64)
    sol = fenchel.solve_dual(templates, u, z, alphas)
    lam2 = fenchel.lambda_approx(templates, u, z, alphas, order=2)
    return dict(
        alphas=alphas, mu=fenchel.mean_and_covariance(templates, u).mu, lam=sol.lam, lam1=alphas[:, None] * z,
        lam2=lam2, h=tilted_mean(templates, u, sol.lam), h1=fenchel.h_approx(templates, u, z, alphas, order=1),
        h2=tilted_mean(templates, u, lam2), deviation=fenchel.relative_deviation(sol.lam, z, alphas),
    )


def gaussian_check(mu, z, alpha: float) -> dict:
    """Sec. 5: Newton on the dual (9) with the Gaussian log-MGF of u = N(mu, I), started from lambda = 0 (the
    default start (15) is already exact for a Gaussian), against the closed form mu/(1+alpha) + alpha b/(1+alpha).
    h (d,) from the solver, closed (d,), n_iter and grad_norm of that solve."""
    u = fenchel.Gaussian(mu)
    sol = fenchel.solve_dual(None, u, z, alpha, lam0=torch.zeros_like(u.mu))
    return dict(h=u.grad(sol.lam), closed=fenchel.gaussian_estimate(mu, z, alpha), n_iter=sol.n_iter,
                grad_norm=float(sol.grad_norm))


def tilted_mean(templates, u, lam) -> torch.Tensor:
    """h = sum_i p~_i t_i with p~ of (11) at lam: (12) when lam = lambda*."""
    return fenchel.tilted_weights(templates, u, lam) @ torch.as_tensor(templates, dtype=F64)


def dual_surface(templates, u, z, alpha: float, centre, half_width: float, n: int = 81):
    """The dual objective (9) on an n x n grid of lambda around ``centre``: (xs, ys, values (n, n), rows = ys)."""
    cx, cy = (float(c) for c in centre)
    xs = torch.linspace(cx - half_width, cx + half_width, n, dtype=F64)
    ys = torch.linspace(cy - half_width, cy + half_width, n, dtype=F64)
    lam = torch.stack(torch.meshgrid(ys, xs, indexing="ij")[::-1], dim=-1)    # (n, n, 2): (x, y) per cell
    return xs, ys, fenchel.dual_objective(lam, templates, u, z, alpha)


def alpha_sweep(templates, u, z, alphas) -> dict:
    """Against alpha: the relative deviation of Sec. 8 and the errors ||h(12) - h(18)||, ||h(12) - h(12 at 15)||."""
    est = estimates(templates, u, z, alphas)
    return dict(alphas=est["alphas"], deviation=est["deviation"], err1=(est["h"] - est["h1"]).norm(dim=-1),
                err2=(est["h"] - est["h2"]).norm(dim=-1))


def ot_panel(templates_all, u, z, alpha: float, gamma: float, M) -> dict:
    """Over the universe A: u, the true preference (40), the OT attention (25) and the exact p* of (38)."""
    return dict(u=torch.as_tensor(u, dtype=F64), true=fenchel.true_preference(u, M, gamma),
                approx=fenchel.ot_attention(templates_all, u, z, alpha, gamma, M),
                exact=fenchel.ot_exact(templates_all, u, z, alpha, gamma, M))


def ot_gamma_sweep(templates_all, u, z, alpha: float, gammas, M) -> dict:
    """Against gamma: ||u~ - u||_1 (-> 0 as gamma -> 0, Prop. 1) and ||p*(38) - p*(25)||_1."""
    gammas = torch.as_tensor(gammas, dtype=F64)
    u = torch.as_tensor(u, dtype=F64)
    true = fenchel.true_preference(u, M, gammas)
    approx = fenchel.ot_attention(templates_all, u, z, alpha, gammas, M)
    exact = fenchel.ot_exact(templates_all, u, z, alpha, gammas, M)
    return dict(gammas=gammas, gap_u=(true - u).abs().sum(-1), gap_p=(exact - approx).abs().sum(-1))
