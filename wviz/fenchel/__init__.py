"""Attention as the solution of a dual problem: the Fenchel-dual view of the 002 paper.

Source: the Fenchel-dual paper 002, "Deciphering Attention Mechanisms: Optimization and Fenchel Dual Solutions"
(anonymous authors, under double-blind review; see the References page), Secs. 4-9 and Appendix D. Notation as
there:

    templates t_i (..., n, d), a preference distribution u over them (u_i >= 0, sum_i u_i = 1), its mean
    mu = sum_i u_i t_i and covariance Sigma, the evidence z (..., d), the reliability alpha > 0.

Problem (4):   min_p  alpha/2 ||(mu + z) - sum_i p_i t_i||^2 + KL(p || u)
Dual (9):      max_lam  <lam, mu + z> - ||lam||^2 / (2 alpha) - log M(lam),   M(lam) = sum_i u_i exp<t_i, lam> (10)
Primal (11):   p~_i = u_i exp<t_i, lam*> / sum_j u_j exp<t_j, lam*>,   h = sum_i p~_i t_i (12)
Approximations of lam*:  alpha (I + alpha Sigma)^-1 z (15)  and  alpha z (16), which turns (12) into the
generalised attention (18): h = sum_i t_i softmax_i(log u_i + alpha <t_i, z>).

The dual is strongly concave (its Hessian is -(I / alpha + Cov_p(t)), Cov_p the covariance of the templates under
the tilted weights p of (11)), so :func:`solve_dual` finds lam* by damped Newton to a gradient norm below 1e-10.
The log-MGF is pluggable: any :class:`Preference` (log_mgf, its gradient and Hessian) may be passed as ``u`` with
``templates=None``; built in are :class:`Discrete` (what arrays (templates, u) become) and :class:`Gaussian`
N(mu, Sigma) of Sec. 5, whose log-MGF is <mu, lam> + lam' Sigma lam / 2.

Sec. 9 / Appendix D replace KL by the entropic OT cost W_gamma(p, u; M) of (23) over a universe A of templates
(``templates_all`` (..., N, d), u (..., N) zero outside T, a cost M (..., N, N) >= 0, symmetric): the true
preference (40), the OT attention (25) (= (38) with lam = alpha z), the dual (39) and its exact solution (38).

Everything is torch in, torch out, batched over leading dimensions (they broadcast), on CPU or CUDA. The solvers
work in float64 internally and return the dtype of z. Bad input raises ValueError with a plain message.

Typical use (a real transformer head, Sec. 8: t_i = x_i / sqrt(d'), z = K^T Q x_k, alpha = 1, u uniform):

    sol = solve_dual(x / d_head ** 0.5, u, z, 1.0)        # x (n, d), u (n,), z (q, d) -> sol.lam (q, d)
    dev = relative_deviation(sol.lam, z, 1.0)             # (q,) ||lam* - alpha z|| / ||lam*||

The package along its jobs: preference (the log-MGF (10): Preference, Discrete, Gaussian, moments), dual (the
dual (9), Newton, the primal (11)-(12), the approximations (15), (16), (18)), t5 ((19)-(20)), transport (Sec. 9
and Appendix D), _inputs (the checks they share).
"""
from __future__ import annotations

from .dual import (attention_weights, dual_objective, DualSolution, gaussian_estimate, h_approx, h_exact,
                   lambda_approx, relative_deviation, solve_dual, tilted_weights)
from .preference import Discrete, Gaussian, log_mgf, mean_and_covariance, Moments, Preference
from .t5 import t5_attention, t5_preference
from .transport import ot_attention, ot_dual_objective, ot_exact, ot_weights, solve_ot_dual, true_preference

__all__ = [
    "DualSolution", "Moments", "Preference", "Discrete", "Gaussian", "mean_and_covariance", "log_mgf",
    "dual_objective", "solve_dual", "tilted_weights", "h_exact", "lambda_approx", "h_approx", "attention_weights",
    "relative_deviation", "gaussian_estimate", "t5_preference", "t5_attention", "true_preference", "ot_weights",
    "ot_attention", "ot_dual_objective", "solve_ot_dual", "ot_exact"
]
