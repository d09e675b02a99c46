"""OT-based attention, Sec. 9 and Appendix D of 002: the true preference (40), the OT attention (25), the dual (39)
and its exact solution (38)."""
from __future__ import annotations


import torch

from ._inputs import (_batch, _distribution, _out_dtype, _positive, _scores, _spd_solve, _templates, _tensor, _vector,
                      F64)
from .dual import _dual, _solve, DualSolution
from .preference import _device


def _cost(M, N: int, device) -> torch.Tensor:
    """M (..., N, N): non-negative, symmetric, +inf allowed off the diagonal (no transport between groups)."""
    try:
        M = torch.as_tensor(M, device=device).to(F64)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError("the cost M must be an array of numbers") from None
    if M.ndim < 2 or M.shape[-2:] != (N, N):
        raise ValueError(f"the cost M must be an N x N matrix over the {N} templates of A, got shape "
                         f"{tuple(M.shape)}")
    if bool(torch.isnan(M).any()):
        raise ValueError("the cost M contains NaN")
    if bool((M < 0).any()):
        raise ValueError(f"the cost M must be non-negative, but it has an entry {M.min().item():.4g}")
    if not bool(torch.isclose(M, M.mT, rtol=1e-9, atol=1e-12).all()):
        i, k = (~torch.isclose(M, M.mT, rtol=1e-9, atol=1e-12)).nonzero()[0, -2:].tolist()
        raise ValueError(f"the cost M must be symmetric, but M[{i}, {k}] = {M[..., i, k].reshape(-1)[0].item():.4g} "
                         f"and M[{k}, {i}] = {M[..., k, i].reshape(-1)[0].item():.4g}")
    if not bool(torch.isfinite(torch.diagonal(M, dim1=-2, dim2=-1)).all()):
        raise ValueError("the cost M must be finite on its diagonal (M(t, t))")
    return M


def _ot_inputs(templates_all, u, gamma, M, device=None):
    A = _templates(templates_all, "templates_all", device)
    N = A.shape[-2]
    u_ = _distribution(u, N, A.device)
    gamma_ = _positive(gamma, "gamma", A.device)
    M_ = _cost(M, N, A.device)
    return A, u_, gamma_, M_


def _plan_conditionals(A, lam, gamma, M):
    """The summand of (38) per source template t': Q[t', t] = softmax_t((<t, lam> - M(t, t')) / gamma), (..., N, N);
    row t' is the distribution q_t' over A to which the plan sends the mass u(t'), so p(t) = sum_t' u(t') Q[t', t]
    (the transport plan of W_gamma divided by its marginal u)."""
    scores = _scores(A, lam)
    g = gamma[..., None, None]
    return torch.softmax((scores[..., None, :] - M) / g, dim=-1)


def true_preference(u, M, gamma) -> torch.Tensor:
    """The true preference u~ of (40) of 002 (Prop. 1, the minimiser of W_gamma(p, u; M) over p):
    u~(t) = sum_t' u(t') exp(-M(t, t') / gamma) / sum_t'' exp(-M(t', t'') / gamma). u (..., N) over the universe
    A, M (..., N, N) >= 0 symmetric, gamma > 0. A distribution; u~ -> u as gamma -> 0 when M(t, t) < M(t', t).

    Example: all of u on the first template; transport at temperature gamma spreads it to the cheap neighbours, and
    u~ returns to u as gamma -> 0.

    >>> from wviz.fenchel import true_preference
    >>> M = [[0.0, 1.0, 4.0], [1.0, 0.0, 1.0], [4.0, 1.0, 0.0]]
    >>> [round(x, 4) for x in true_preference([1.0, 0.0, 0.0], M, 1.0).tolist()]
    [0.7214, 0.2654, 0.0132]
    >>> [round(x, 4) for x in true_preference([1.0, 0.0, 0.0], M, 0.01).tolist()]
    [1.0, 0.0, 0.0]
    """
    device = _device(u, M)
    u_ = _tensor(u, "u", device)
    if u_.ndim < 1:
        raise ValueError("u must be a vector of weights over the templates of A")
    u_ = _distribution(u_, u_.shape[-1], u_.device)
    M_ = _cost(M, u_.shape[-1], u_.device)
    gamma_ = _positive(gamma, "gamma", u_.device)
    Q = torch.softmax(-M_ / gamma_[..., None, None], dim=-1)
    return (u_[..., None, :] @ Q)[..., 0, :].to(_out_dtype(u))


def ot_weights(templates_all, u, lam, gamma, M) -> torch.Tensor:
    """p of (38) for a given lam: p(t) = sum_t' u(t') exp((<t, lam> - M(t, t')) / gamma) /
    sum_t'' exp((<t'', lam> - M(t', t'')) / gamma); (..., N). lam = alpha z gives (25), lam = lambda* of (39)
    the exact minimiser of (34).

    Example: at lambda = alpha z these are the OT attention weights (25); they sum to 1.

    >>> import torch
    >>> from wviz.fenchel import ot_attention, ot_weights
    >>> t = [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]   # three templates t_i in R^2
    >>> u = [1 / 3, 1 / 3, 1 / 3]                    # a uniform preference over them
    >>> M = [[0.0, 1.0, 4.0], [1.0, 0.0, 1.0], [4.0, 1.0, 0.0]]   # the cost of moving between templates
    >>> p = ot_weights(t, u, [0.5, 0.2], 1.0, M)
    >>> torch.allclose(p, ot_attention(t, u, [0.5, 0.2], 1.0, 1.0, M)), round(float(p.sum()), 4)
    (True, 1.0)
    """
    device = _device(lam, templates_all, u)
    A, u_, gamma_, M_ = _ot_inputs(templates_all, u, gamma, M, device)
    lam_ = _vector(lam, A.shape[-1], "lambda", A.device)
    return (u_[..., None, :] @ _plan_conditionals(A, lam_, gamma_, M_))[..., 0, :].to(_out_dtype(lam))


def ot_attention(templates_all, u, z, alpha, gamma, M) -> torch.Tensor:
    """The OT-based attention weights p* of (25) of 002 over the universe A (lambda = alpha z in (38)):
    p*(t) = sum_i u_i exp((alpha <t, z> - M(t, t_i)) / gamma) / Z_i, Z_i = sum_t' exp((alpha <t', z> - M(t', t_i))
    / gamma). Appendix D prints the same formula as (47) with t' in place of t in the numerator, which would not
    sum to 1; (25) and (38) agree on t. templates_all (..., N, d), u (..., N) (zero outside T), z (..., d).
    The attention output is h = p* @ templates_all.

    Example: the preference puts nothing on the third template of the universe A, yet the transport gives it weight.

    >>> from wviz.fenchel import ot_attention
    >>> t = [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]
    >>> M = [[0.0, 1.0, 4.0], [1.0, 0.0, 1.0], [4.0, 1.0, 0.0]]
    >>> p = ot_attention(t, [0.5, 0.5, 0.0], [0.5, 0.2], 1.0, 1.0, M)
    >>> [round(x, 4) for x in p.tolist()]
    [0.5387, 0.4043, 0.057]
    """
    device = _device(z, templates_all, u)
    z_ = _tensor(z, "z", device)
    alpha_ = _positive(alpha, "alpha", z_.device)
    return ot_weights(templates_all, u, alpha_[..., None] * z_, gamma, M).to(_out_dtype(z))


class _OTDual:
    """Phi(lam) = gamma sum_t u(t) logsumexp_t'((<t', lam> - M(t, t')) / gamma), the W_gamma* term of (39); its
    gradient is the mean of p of (38), its Hessian (1/gamma) sum_t u(t) Cov_{q_t}. Phi takes the place of log M
    of (9) in the Newton solver, so it answers to the same method names (log_mgf, grad, solve)."""

    def __init__(self, A, u, gamma, M):
        self.A, self.u, self.gamma, self.M = A, u, gamma, M
        self.d = A.shape[-1]
        self.batch = _batch(A.shape[:-2], u.shape[:-1], gamma.shape, M.shape[:-2])

    def mean(self):   # mu~ of (41): the mean of the true preference (40)
        Q = torch.softmax(-self.M / self.gamma[..., None, None], dim=-1)
        return ((self.u[..., None, :] @ Q) @ self.A)[..., 0, :]

    def log_mgf(self, lam):
        scores = _scores(self.A, lam)
        lse = torch.logsumexp((scores[..., None, :] - self.M) / self.gamma[..., None, None], dim=-1)
        return self.gamma * (self.u * lse).sum(-1)

    def grad(self, lam):
        Q = _plan_conditionals(self.A, lam, self.gamma, self.M)
        return ((self.u[..., None, :] @ Q) @ self.A)[..., 0, :]

    def solve(self, lam, g, alpha):
        Q = _plan_conditionals(self.A, lam, self.gamma, self.M)              # (..., N, N)
        m = Q @ self.A                                                       # means of q_t
        D = self.A[..., None, :, :] - m[..., :, None, :]                     # t' - m_t
        w = (self.u[..., :, None] * Q)[..., None]
        H = (D * w).flatten(-3, -2).mT @ D.flatten(-3, -2) / self.gamma[..., None, None]
        return _spd_solve(H + torch.eye(self.d, dtype=F64, device=g.device) / alpha[..., None, None], g)


def _ot_problem(templates_all, u, z, alpha, gamma, M):
    device = _device(z, templates_all, u)
    A, u_, gamma_, M_ = _ot_inputs(templates_all, u, gamma, M, device)
    z_ = _vector(z, A.shape[-1], "z", A.device)
    alpha_ = _positive(alpha, "alpha", A.device)
    pref = _OTDual(A, u_, gamma_, M_)
    batch = _batch(pref.batch, z_.shape[:-1], alpha_.shape)
    return pref, z_.expand(*batch, pref.d), alpha_


def ot_dual_objective(lam, templates_all, u, z, alpha, gamma, M) -> torch.Tensor:
    """The dual (39) of 002: <mu~ + z, lam> - ||lam||^2 / (2 alpha)
    - gamma sum_t u(t) log sum_t' exp((<t', lam> - M(t, t')) / gamma), mu~ the mean (41) of u~. (...).

    Example: lambda* of :func:`solve_ot_dual` scores higher on the dual (39) than alpha z, the approximation of (25).

    >>> from wviz.fenchel import ot_dual_objective, solve_ot_dual
    >>> t = [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]   # three templates t_i in R^2
    >>> u = [1 / 3, 1 / 3, 1 / 3]                    # a uniform preference over them
    >>> M = [[0.0, 1.0, 4.0], [1.0, 0.0, 1.0], [4.0, 1.0, 0.0]]   # the cost of moving between templates
    >>> z = [0.5, 0.2]
    >>> lam = solve_ot_dual(t, u, z, 1.0, 1.0, M).lam
    >>> at_optimum = ot_dual_objective(lam, t, u, z, 1.0, 1.0, M)
    >>> at_alpha_z = ot_dual_objective(z, t, u, z, 1.0, 1.0, M)
    >>> round(float(at_optimum), 4), round(float(at_alpha_z), 4)
    (-0.2882, -0.2969)
    """
    pref, z_, alpha_ = _ot_problem(templates_all, u, z, alpha, gamma, M)
    value, _ = _dual(pref, pref.mean() + z_, alpha_)
    return value(_vector(lam, pref.d, "lambda", z_.device)).to(_out_dtype(z))


def solve_ot_dual(templates_all, u, z, alpha, gamma, M, *, tol: float = 1e-10, max_iter: int = 100) -> DualSolution:
    """lambda* maximising (39) of 002 by damped Newton (Hessian I/alpha + (1/gamma) sum_t u(t) Cov_{q_t}),
    started from alpha z, the approximation behind (25). Arguments as :func:`ot_attention`.

    Example: Newton reaches a gradient norm below tol in a few steps.

    >>> from wviz.fenchel import solve_ot_dual
    >>> t = [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]   # three templates t_i in R^2
    >>> u = [1 / 3, 1 / 3, 1 / 3]                    # a uniform preference over them
    >>> M = [[0.0, 1.0, 4.0], [1.0, 0.0, 1.0], [4.0, 1.0, 0.0]]   # the cost of moving between templates
    >>> sol = solve_ot_dual(t, u, [0.5, 0.2], 1.0, 1.0, M)
    >>> bool(sol.converged), sol.n_iter, [round(x, 4) for x in sol.lam.tolist()]
    (True, 3, [0.3875, 0.1669])
    """
    pref, z_, alpha_ = _ot_problem(templates_all, u, z, alpha, gamma, M)
    lam, gn, conv, it = _solve(pref, pref.mean() + z_, alpha_, alpha_[..., None] * z_, tol, max_iter, "solve_ot_dual")
    return DualSolution(lam=lam.to(_out_dtype(z)), grad_norm=gn, converged=conv, n_iter=it)


def ot_exact(templates_all, u, z, alpha, gamma, M, *, tol: float = 1e-10) -> torch.Tensor:
    """The exact minimiser p* of (34), eq. (38) of 002 with lambda* maximising (39); (..., N). Compare with the
    approximation (25) (:func:`ot_attention`), which it approaches as alpha and alpha / gamma shrink.

    Example: the exact weights approach the OT attention (25) as alpha shrinks.

    >>> from wviz.fenchel import ot_attention, ot_exact
    >>> t = [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]   # three templates t_i in R^2
    >>> u = [1 / 3, 1 / 3, 1 / 3]                    # a uniform preference over them
    >>> M = [[0.0, 1.0, 4.0], [1.0, 0.0, 1.0], [4.0, 1.0, 0.0]]   # the cost of moving between templates
    >>> z = [0.5, 0.2]
    >>> def gap(alpha):
    ...     return (ot_exact(t, u, z, alpha, 1.0, M) - ot_attention(t, u, z, alpha, 1.0, M)).abs().max()
    >>> [round(float(gap(alpha)), 4) for alpha in (1.0, 0.1, 0.01)]
    [0.0185, 0.0003, 0.0]
    """
    sol = solve_ot_dual(templates_all, u, z, alpha, gamma, M, tol=tol)
    return ot_weights(templates_all, u, sol.lam.to(F64), gamma, M).to(_out_dtype(z))
