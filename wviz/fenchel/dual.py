"""The dual (9) of problem (4) of 002, its maximiser by damped Newton, the primal (11)-(12), and the approximations
(15), (16) and (18) with their deviation from lambda*."""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch

from ._inputs import _batch, _out_dtype, _positive, _spd_solve, _tensor, _vector, F64
from .preference import _device, _mean, _preference, Discrete


@dataclass(frozen=True, eq=False)
class DualSolution:
    """The maximiser of the dual (9) (or (39)), one per problem of the batch ``...``.

    lam        (..., d)  lambda*
    grad_norm  (...)     ||gradient of the dual at lambda*|| (below tol when converged)
    converged  (...)     bool: grad_norm <= tol
    n_iter     Newton iterations run
    """

    lam: torch.Tensor
    grad_norm: torch.Tensor
    converged: torch.Tensor
    n_iter: int


def _dual(pref, c, alpha):
    """F(lam) = <lam, c> - ||lam||^2 / (2 alpha) - Phi(lam) and its gradient c - lam / alpha - grad Phi(lam)."""
    def value(lam):
        return (lam * c).sum(-1) - (lam * lam).sum(-1) / (2 * alpha) - pref.log_mgf(lam)

    def grad(lam):
        return c - lam / alpha[..., None] - pref.grad(lam)
    return value, grad


def _inputs(templates, u, z, alpha):
    """The preference, its mean mu, z expanded to the batch and alpha, all on one device."""
    pref = _preference(templates, u, _device(u, z, templates))
    mu = _mean(pref)
    z = _vector(z, pref.d, "z", mu.device)
    alpha = _positive(alpha, "alpha", mu.device)
    batch = _batch(mu.shape[:-1], z.shape[:-1], alpha.shape)
    return pref, mu, z.expand(*batch, pref.d), alpha


def dual_objective(lam, templates, u, z, alpha) -> torch.Tensor:
    """The Fenchel dual (9) of 002: <lam, mu + z> - ||lam||^2 / (2 alpha) - log M(lam), M of (10).

    lam (..., d); templates (..., n, d) and u (..., n) a discrete preference, or templates=None and u a
    :class:`Preference` (e.g. a :class:`Gaussian`: its log-MGF is plugged in instead); z (..., d); alpha > 0 (float
    or (...)). Returns (...).

    Example: lambda* of :func:`solve_dual` scores higher on the dual than its approximation alpha z (16).

    >>> from wviz.fenchel import dual_objective, solve_dual
    >>> t = [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]   # three templates t_i in R^2
    >>> u = [1 / 3, 1 / 3, 1 / 3]                    # a uniform preference over them
    >>> z = [0.5, 0.2]
    >>> lam = solve_dual(t, u, z, 1.0).lam
    >>> round(float(dual_objective(lam, t, u, z, 1.0)), 4), round(float(dual_objective(z, t, u, z, 1.0)), 4)
    (0.0933, 0.0642)
    """
    pref, mu, z_, alpha_ = _inputs(templates, u, z, alpha)
    value, _ = _dual(pref, mu + z_, alpha_)
    return value(_vector(lam, pref.d, "lambda", z_.device)).to(_out_dtype(z))


def _newton(pref, c, alpha, lam, tol, max_iter):
    """Newton ascent on a strongly concave dual with an exact line search on the directional derivative.

    Direction s = (I/alpha + Hess Phi)^-1 grad. The full step is taken when the dual still rises at its end
    (grad(lam + s) . s >= 0); otherwise the maximum along s lies inside the step and is found by bisection on the
    sign of the derivative (it decreases along s: concavity). Backtracking on values is not enough here: for a
    large alpha the tilted weights are nearly one-hot, the Newton model sees curvature 1/alpha only and
    overshoots the kink where the weights switch template, and halving steps zig-zag across it for hundreds of
    iterations; landing on the exact maximum puts the next Hessian on the kink. Derivative signs also stay
    meaningful where dual values differ by less than their rounding. Batched; finished problems stop moving."""
    _, grad = _dual(pref, c, alpha)
    g = grad(lam)
    gn = g.norm(dim=-1)
    it, stalled, worst = 0, 0, math.inf
    # stop early when the worst gradient stops falling: with huge scores (|<t_i, lambda>| ~ 1e5) float64 rounding
    # of the tilted weights alone can exceed tol
    while it < max_iter and stalled < 5 and bool((gn > tol).any()):
        it += 1
        s = pref.solve(lam, g, alpha) * (gn > tol)[..., None]
        d_hi = (grad(lam + s) * s).sum(-1)
        short = d_hi < 0
        step = torch.ones_like(gn)
        if bool(short.any()):
            step = torch.where(short, _line_search(grad, lam, s, (g * s).sum(-1), d_hi, short), step)
        lam = lam + step[..., None] * s
        g = grad(lam)
        gn = g.norm(dim=-1)
        now = gn.max().item()
        stalled = stalled + 1 if now >= worst else 0
        worst = min(worst, now)
    return lam, gn, it


def _line_search(grad, lam, s, d_lo, d_hi, short):
    """The step in (0, 1) where the directional derivative d(step) = grad(lam + step s) . s changes sign (d(0) > 0
    > d(1) on the ``short`` rows; d decreases, by concavity): regula falsi with the Illinois modification (the end
    kept twice has its value halved), which converges superlinearly where bisection gains one bit per batched
    gradient evaluation. Returns the end of the bracket with the smaller |d|."""
    lo, hi = torch.zeros_like(d_lo), torch.ones_like(d_lo)
    enough = 1e-10 * d_lo.abs()                    # |d(step)| this small: step is the maximiser to ~1e-10 relative
    d_lo = torch.where(short, d_lo, 1.0)
    d_hi = torch.where(short, d_hi, -1.0)
    kept = torch.zeros_like(d_lo)                  # +1: lo kept last time, -1: hi kept last time
    for _ in range(60):
        step = (lo * d_hi - hi * d_lo) / (d_hi - d_lo)
        step = torch.where((step > lo) & (step < hi), step, (lo + hi) / 2)
        d = (grad(lam + step[..., None] * s) * s).sum(-1)
        rising = d >= 0
        lo, d_lo = torch.where(rising, step, lo), torch.where(rising, d, d_lo)
        hi, d_hi = torch.where(rising, hi, step), torch.where(rising, d_hi, d)
        d_hi = torch.where(rising & (kept == -1), d_hi / 2, d_hi)      # hi kept twice in a row
        d_lo = torch.where(~rising & (kept == 1), d_lo / 2, d_lo)      # lo kept twice in a row
        kept = torch.where(rising, -1.0, 1.0)
        if bool(((hi - lo <= 1e-12) | (d.abs() <= enough) | ~short).all()):
            break
    return torch.where(d_lo.abs() <= d_hi.abs(), lo, hi)


def _solve(pref, c, alpha, lam0, tol, max_iter, what):
    if not (isinstance(tol, (int, float)) and tol > 0):
        raise ValueError(f"tol must be a positive number, got {tol!r}")
    if not (isinstance(max_iter, int) and max_iter >= 1):
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}")
    lam, gn, it = _newton(pref, c, alpha, lam0, tol, max_iter)
    converged = gn <= tol
    if not bool(converged.all()):
        warnings.warn(f"{what}: Newton stopped after {it} iterations with gradient norm {gn.max().item():.3g} "
                      f"> tol = {tol:g} (at this scale of templates and lambda float64 rounding may not allow tol)",
                      RuntimeWarning, stacklevel=3)
    return lam, gn, converged, it


def solve_dual(templates, u, z, alpha, *, tol: float = 1e-10, max_iter: int = 100, lam0=None) -> DualSolution:
    """lambda*, the maximiser of the dual (9) of 002, by damped Newton with the exact Hessian I/alpha + Cov_p(t).

    templates (..., n, d), u (..., n) (or templates=None and u a :class:`Preference`, e.g. a :class:`Gaussian`),
    z (..., d), alpha > 0 a float or a tensor (...); leading dimensions broadcast, e.g. templates (n, d), u (n,),
    z (q, d) solves q problems at once. The start lam0 (..., d) defaults to the second-order approximation (15),
    which is already lambda* for a Gaussian u (then n_iter = 0); pass e.g. zeros or alpha z to watch Newton work.
    The dual is strongly concave and smooth, so Newton converges quadratically. Stops when every problem's
    gradient norm is <= tol (1e-10 by default, in float64); a problem that does not get there in max_iter
    iterations is flagged in ``converged`` (and warned about).
    Returns a :class:`DualSolution` (lam in the dtype of z).

    Example: Newton converges in a few steps; for a Gaussian u the start (15), alpha (I + alpha Sigma)^-1 z, is
    already lambda* (here z / 2), so no step is taken.

    >>> from wviz.fenchel import Gaussian, solve_dual
    >>> t = [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]   # three templates t_i in R^2
    >>> u = [1 / 3, 1 / 3, 1 / 3]                    # a uniform preference over them
    >>> sol = solve_dual(t, u, [0.5, 0.2], 1.0)
    >>> bool(sol.converged), sol.n_iter, [round(x, 4) for x in sol.lam.tolist()]
    (True, 2, [0.3089, 0.1717])
    >>> sol = solve_dual(None, Gaussian([0.0, 0.0]), [0.5, 0.2], 1.0)
    >>> sol.n_iter, [round(x, 4) for x in sol.lam.tolist()]
    (0, [0.25, 0.1])
    """
    pref, mu, z_, alpha_ = _inputs(templates, u, z, alpha)
    lam, gn, conv, it = _solve(pref, mu + z_, alpha_, _start(pref, z_, alpha_, lam0), tol, max_iter, "solve_dual")
    return DualSolution(lam=lam.to(_out_dtype(z)), grad_norm=gn, converged=conv, n_iter=it)


def _start(pref, z, alpha, lam0):
    """Newton's starting point: (15) when lam0 is None, else lam0 (validated, broadcast to the batch of z)."""
    if lam0 is None:
        return _lambda2(pref, z, alpha)
    lam0 = _vector(lam0, pref.d, "lam0", z.device)
    try:
        return lam0.expand_as(z)
    except RuntimeError:
        raise ValueError(f"lam0 of shape {tuple(lam0.shape)} does not match the batch of problems "
                         f"{tuple(z.shape[:-1])}") from None


def _lambda2(pref, z, alpha):
    """(15): alpha (I + alpha Sigma)^-1 z."""
    H = torch.eye(pref.d, dtype=F64, device=z.device) + alpha[..., None, None] * pref.covariance()
    return _spd_solve(H, alpha[..., None] * z)


def tilted_weights(templates, u, lam) -> torch.Tensor:
    """p~ of (11) (discrete u): p~_i = u_i exp<t_i, lam> / sum_j u_j exp<t_j, lam>; (..., n).

    Example: at lambda = 0 the weights are the preference u; lambda tilts them towards the templates it points at.

    >>> from wviz.fenchel import tilted_weights
    >>> t = [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]   # three templates t_i in R^2
    >>> u = [1 / 3, 1 / 3, 1 / 3]                    # a uniform preference over them
    >>> [round(x, 4) for x in tilted_weights(t, u, [0.0, 0.0]).tolist()]
    [0.3333, 0.3333, 0.3333]
    >>> [round(x, 4) for x in tilted_weights(t, u, [2.0, 0.0]).tolist()]
    [0.8668, 0.1173, 0.0159]
    """
    device = _device(u, lam, templates)
    pref = _preference(templates, u, device)
    if not isinstance(pref, Discrete):
        raise ValueError("tilted_weights needs a discrete preference (templates and weights u)")
    return pref.weights(_vector(lam, pref.d, "lambda", device)).to(_out_dtype(lam))


def h_exact(templates, u, z, alpha, *, tol: float = 1e-10) -> torch.Tensor:
    """h of (12) of 002: the mean of p~ (11) at lambda* maximising (9) (the exact solution of problem (4)); for a
    :class:`Preference` u, its grad at lambda* (mu + Sigma lambda* for a Gaussian u = N(mu, Sigma)).

    Example: for u = N(mu, I), h is the estimate of Sec. 5, mu / (1 + alpha) + alpha (mu + z) / (1 + alpha).

    >>> import torch
    >>> from wviz.fenchel import Gaussian, gaussian_estimate, h_exact
    >>> h = h_exact(None, Gaussian([1.0, 0.0]), [0.5, 0.2], 2.0)
    >>> [round(x, 4) for x in h.tolist()]
    [1.3333, 0.1333]
    >>> torch.allclose(h, gaussian_estimate([1.0, 0.0], [0.5, 0.2], 2.0))
    True
    """
    pref, mu, z_, alpha_ = _inputs(templates, u, z, alpha)
    lam, *_ = _solve(pref, mu + z_, alpha_, _lambda2(pref, z_, alpha_), tol, 100, "h_exact")
    return pref.grad(lam).to(_out_dtype(z))  # the mean of p~ (11) at lam


def lambda_approx(templates, u, z, alpha, order: int = 1) -> torch.Tensor:
    """The closed-form approximations of lambda*: order 1 is (16), alpha z; order 2 is (15),
    alpha (I + alpha Sigma)^-1 z, exact when u is Gaussian. (..., d).

    Example: order 1 is alpha z; order 2 corrects it with the covariance of the templates and is closer to lambda*.

    >>> from wviz.fenchel import lambda_approx, solve_dual
    >>> t = [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]   # three templates t_i in R^2
    >>> u = [1 / 3, 1 / 3, 1 / 3]                    # a uniform preference over them
    >>> z = [0.5, 0.2]
    >>> [round(x, 4) for x in lambda_approx(t, u, z, 2.0).tolist()]
    [1.0, 0.4]
    >>> [round(x, 4) for x in lambda_approx(t, u, z, 2.0, order=2).tolist()]
    [0.4286, 0.2769]
    >>> [round(x, 4) for x in solve_dual(t, u, z, 2.0).lam.tolist()]
    [0.4633, 0.3069]
    """
    if order not in (1, 2):
        raise ValueError(f"order must be 1 (eq. 16, lambda = alpha z) or 2 (eq. 15), got {order!r}")
    pref, _, z_, alpha_ = _inputs(templates, u, z, alpha)
    lam = alpha_[..., None] * z_ if order == 1 else _lambda2(pref, z_, alpha_)
    return lam.to(_out_dtype(z))


def h_approx(templates, u, z, alpha, order: int = 1) -> torch.Tensor:
    """Approximate h. order=1: the generalised attention (18) of 002 (= (17); lambda = alpha z),
    h = sum_i t_i u_i exp(alpha <t_i, z>) / sum_j u_j exp(alpha <t_j, z>). order=2: (12) with lambda of (15).

    Example: order 1 is the generalised attention (18): the templates averaged with softmax(log u_i + alpha <t_i, z>).

    >>> import torch
    >>> from wviz.fenchel import h_approx, h_exact
    >>> t = [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]   # three templates t_i in R^2
    >>> u = [1 / 3, 1 / 3, 1 / 3]                    # a uniform preference over them
    >>> z = [0.5, 0.2]
    >>> p = torch.softmax(torch.tensor(t) @ torch.tensor(z), dim=0)    # u uniform, alpha = 1
    >>> torch.allclose(h_approx(t, u, z, 1.0), (p @ torch.tensor(t)).double())
    True
    >>> [round(x, 4) for x in h_approx(t, u, z, 1.0).tolist()], [round(x, 4) for x in h_exact(t, u, z, 1.0).tolist()]
    ([0.2998, 0.3513], [0.1911, 0.3616])
    """
    lam = lambda_approx(templates, u, z, alpha, order).to(F64)
    pref = _preference(templates, u, lam.device)
    return pref.grad(lam).to(_out_dtype(z))  # the mean of p~ (11) at lam


def attention_weights(templates, u, z, alpha) -> torch.Tensor:
    """The attention weights of (18): softmax_i(log u_i + alpha <t_i, z>); (..., n). With u uniform and alpha = 1
    this is dot-product attention softmax(<t_i, z>) (Sec. 7).

    Example: with u uniform and alpha = 1 the weights of (18) are dot-product attention, softmax(<t_i, z>).

    >>> import torch
    >>> from wviz.fenchel import attention_weights
    >>> t = [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]   # three templates t_i in R^2
    >>> u = [1 / 3, 1 / 3, 1 / 3]                    # a uniform preference over them
    >>> z = [0.5, 0.2]
    >>> p = attention_weights(t, u, z, 1.0)
    >>> [round(x, 4) for x in p.tolist()]
    [0.4742, 0.3513, 0.1745]
    >>> torch.allclose(p, torch.softmax(torch.tensor(t) @ torch.tensor(z), dim=0).double())
    True
    """
    return tilted_weights(templates, u, lambda_approx(templates, u, z, alpha, 1))


def relative_deviation(lam, z, alpha) -> torch.Tensor:
    """The relative deviation of Sec. 8 / Figure 4 of 002: ||lambda* - alpha z|| / ||lambda*||.

    lam (..., d) is lambda* (e.g. ``solve_dual(...).lam``), z (..., d), alpha a float or (...). lambda* = 0 only
    when z = 0, where alpha z = lambda* and the deviation is 0.

    Example: ||lambda* - alpha z|| / ||lambda*||; alpha z approximates lambda* well only for a small alpha.

    >>> from wviz.fenchel import relative_deviation, solve_dual
    >>> round(float(relative_deviation([1.0, 0.0], [0.5, 0.0], 1.0)), 4)
    0.5
    >>> t = [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]   # three templates t_i in R^2
    >>> u = [1 / 3, 1 / 3, 1 / 3]                    # a uniform preference over them
    >>> z = [0.5, 0.2]
    >>> [round(float(relative_deviation(solve_dual(t, u, z, a).lam, z, a)), 4) for a in (0.1, 1.0, 10.0)]
    [0.0616, 0.5467, 3.3035]
    """
    device = _device(lam, z)
    lam_ = _tensor(lam, "lambda", device)
    z_ = _vector(z, lam_.shape[-1], "z", device)
    alpha_ = _positive(alpha, "alpha", z_.device)
    num = (lam_ - alpha_[..., None] * z_).norm(dim=-1)
    den = lam_.norm(dim=-1)
    out = torch.where(den > 0, num / den.clamp_min(1e-300), torch.zeros_like(num))
    return out.to(_out_dtype(lam))


def gaussian_estimate(mu, z, alpha) -> torch.Tensor:
    """Sec. 5 of 002: for u = N(mu, I) the exact estimate is mu / (1 + alpha) + alpha b / (1 + alpha), b = mu + z.

    Example: alpha is the reliability of the evidence z: alpha = 1 goes half way from mu to mu + z, a large alpha
    nearly all the way.

    >>> from wviz.fenchel import gaussian_estimate
    >>> [round(x, 4) for x in gaussian_estimate([0.0, 0.0], [1.0, 0.0], 1.0).tolist()]
    [0.5, 0.0]
    >>> [round(x, 4) for x in gaussian_estimate([0.0, 0.0], [1.0, 0.0], 99.0).tolist()]
    [0.99, 0.0]
    """
    mu_ = _tensor(mu, "mu", _device(mu, z))
    z_ = _vector(z, mu_.shape[-1], "z", mu_.device)
    a = _positive(alpha, "alpha", mu_.device)[..., None]
    return (mu_ / (1 + a) + a * (mu_ + z_) / (1 + a)).to(_out_dtype(z))
