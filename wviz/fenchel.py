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
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch

__all__ = [
    "DualSolution", "Moments", "Preference", "Discrete", "Gaussian", "mean_and_covariance", "log_mgf",
    "dual_objective", "solve_dual", "tilted_weights", "h_exact", "lambda_approx", "h_approx", "attention_weights",
    "relative_deviation", "gaussian_estimate", "t5_preference", "t5_attention", "true_preference", "ot_weights",
    "ot_attention", "ot_dual_objective", "solve_ot_dual", "ot_exact",
]

F64 = torch.float64


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


@dataclass(frozen=True, eq=False)
class Moments:
    """mu (..., d) and Sigma (..., d, d) of a preference: the moments in the expansion (13) of 002."""

    mu: torch.Tensor
    sigma: torch.Tensor


# ---- input checks ---------------------------------------------------------------------------------------------------

def _tensor(x, name: str, device=None) -> torch.Tensor:
    try:
        out = torch.as_tensor(x, device=device)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"{name} must be an array of numbers, got {type(x).__name__}") from None
    if not (out.is_floating_point() or out.dtype in (torch.int32, torch.int64, torch.bool)):
        raise ValueError(f"{name} must hold real numbers, got {out.dtype}")
    out = out.to(F64)
    if not bool(torch.isfinite(out).all()):
        raise ValueError(f"{name} contains NaN or inf")
    return out


def _positive(x, name: str, device) -> torch.Tensor:
    """alpha or gamma: a positive finite float or a tensor of them (broadcast over the batch)."""
    try:
        value = torch.as_tensor(x, dtype=F64, device=device)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"{name} must be a positive number, got {x!r}") from None
    if not bool((torch.isfinite(value) & (value > 0)).all()):
        bad = value[~(torch.isfinite(value) & (value > 0))].reshape(-1)[0].item()
        raise ValueError(f"{name} must be a positive finite number, got {bad:g}")
    return value


def _templates(templates, name: str = "templates", device=None) -> torch.Tensor:
    t = _tensor(templates, name, device)
    if t.ndim < 2 or t.shape[-2] == 0 or t.shape[-1] == 0:
        raise ValueError(f"{name} must be an array (n, d) of n >= 1 templates in d >= 1 dimensions, got shape "
                         f"{tuple(t.shape)}")
    return t


def _distribution(u, n: int, device, name: str = "u") -> torch.Tensor:
    """u (..., n): non-negative, summing to 1 along the last axis."""
    u = _tensor(u, name, device)
    if u.ndim < 1 or u.shape[-1] != n:
        raise ValueError(f"{name} must have one weight per template ({n}), got shape {tuple(u.shape)}")
    if bool((u < 0).any()):
        raise ValueError(f"{name} is not a distribution: it has a negative weight ({u.min().item():.4g})")
    total = u.sum(-1)
    if not bool(((total - 1).abs() <= 1e-6).all()):
        bad = total.reshape(-1)[((total - 1).abs() > 1e-6).reshape(-1)][0].item()
        raise ValueError(f"{name} is not a distribution: its weights sum to {bad:.6g}, not 1")
    return u / total[..., None]   # exact normalisation of a sum within rounding of 1


def _vector(z, d: int, name: str, device) -> torch.Tensor:
    z = _tensor(z, name, device)
    if z.ndim < 1 or z.shape[-1] != d:
        raise ValueError(f"{name} must be a vector of dimension d = {d} (the templates' dimension), got shape "
                         f"{tuple(z.shape)}")
    return z


def _batch(*shapes) -> torch.Size:
    try:
        return torch.broadcast_shapes(*shapes)
    except RuntimeError:
        raise ValueError("the batch shapes " + ", ".join(str(tuple(s)) for s in shapes) + " do not match") from None


def _device(*xs):
    """Where to compute: a preference object's device first (its tensors cannot move), else the first tensor's."""
    for x in xs:
        if isinstance(x, Preference) and x.device is not None:
            return x.device
    for x in xs:
        if isinstance(x, torch.Tensor):
            return x.device
    return None


def _out_dtype(z) -> torch.dtype:
    return z.dtype if isinstance(z, torch.Tensor) and z.dtype in (torch.float32, torch.float64) else F64


def _scores(t, v):
    """<t_i, v> (..., n) for t (..., n, d), v (..., d); written as v^T t^T so that a template matrix shared by a
    batch of v is not copied once per v (t @ v[..., None] would expand it)."""
    return (v[..., None, :] @ t.mT)[..., 0, :]


def _spd_solve(H, b):
    """H^-1 b for symmetric positive definite H (..., d, d) and vectors b (..., d). A single H shared by a batch of
    b is factorised once and solved against all of them as columns (no per-vector copy of H)."""
    L = torch.linalg.cholesky(H)
    d = b.shape[-1]
    if H.ndim == 2:
        return torch.cholesky_solve(b.reshape(-1, d).mT, L).mT.reshape(b.shape)
    shape = _batch(H.shape[:-2], b.shape[:-1])
    return torch.cholesky_solve(b.expand(*shape, d)[..., None], L.expand(*shape, d, d))[..., 0]


# ---- the preference: its log-MGF (10), pluggable -------------------------------------------------------------------

class Preference:
    """The preference u of 002 seen through its log-MGF, the only thing the dual (9) needs of u. Subclass it to plug
    in another distribution of templates, then pass an instance as ``u`` with ``templates=None`` to
    :func:`log_mgf`, :func:`dual_objective`, :func:`solve_dual`, :func:`h_exact`, :func:`lambda_approx`,
    :func:`h_approx` and :func:`mean_and_covariance`.

    A subclass sets ``d`` (the templates' dimension) and implements, for lam (..., d) in float64:

        log_mgf(lam)   log M(lam) = log E_{t~u} exp<t, lam>                                       (...)
        grad(lam)      its gradient: the mean of t under u tilted by exp<t, lam> (h of (12))      (..., d)
        hessian(lam)   its Hessian: the covariance of t under the tilted u                        (..., d, d)

    log M must be finite everywhere (u with light tails) so that (9) stays strongly concave. The moments of (13)
    are mu = grad(0) and Sigma = hessian(0), with the zero made on ``device`` (None: the CPU). Built in:
    :class:`Discrete` (what arrays (templates, u) become) and :class:`Gaussian` (Sec. 5); they also override
    ``solve``, the Newton system, with cheaper forms.
    """

    d: int
    device = None

    def log_mgf(self, lam):
        raise NotImplementedError("a Preference must implement log_mgf(lam)")

    def grad(self, lam):
        raise NotImplementedError("a Preference must implement grad(lam), the gradient of log_mgf")

    def hessian(self, lam):
        raise NotImplementedError("a Preference must implement hessian(lam), the Hessian of log_mgf")

    def mean(self):
        return self.grad(torch.zeros(self.d, dtype=F64, device=self.device))

    def covariance(self):
        return self.hessian(torch.zeros(self.d, dtype=F64, device=self.device))

    def solve(self, lam, g, alpha):
        """The Newton direction (I / alpha + hessian(lam))^-1 g of the dual (9); alpha (...)."""
        H = self.hessian(lam) + torch.eye(self.d, dtype=F64, device=g.device) / alpha[..., None, None]
        return _spd_solve(H, g)


class Discrete(Preference):
    """u = sum_i u_i delta_{t_i}: templates (..., n, d), weights u (..., n) (>= 0, summing to 1).
    log M(lam) = logsumexp_i(log u_i + <t_i, lam>) (10); its gradient is the mean h of the tilted weights p of (11),
    its Hessian their covariance Cov_p(t)."""

    def __init__(self, templates, u):
        self.t = _templates(templates)
        self.u = _distribution(u, self.t.shape[-2], self.t.device)
        self.log_u = torch.where(self.u > 0, self.u.clamp_min(1e-300).log(),
                                 torch.tensor(-math.inf, dtype=F64, device=self.t.device))
        self.d, self.device = self.t.shape[-1], self.t.device
        _batch(self.t.shape[:-2], self.u.shape[:-1])     # raises if the batches of templates and u do not match
        self._gram = None

    def mean(self):
        return (self.u[..., None, :] @ self.t)[..., 0, :]

    def covariance(self):
        c = self.t - self.mean()[..., None, :]
        return c.mT @ (self.u[..., None] * c)

    def logits(self, lam):
        return self.log_u + _scores(self.t, lam)

    def log_mgf(self, lam):
        return torch.logsumexp(self.logits(lam), dim=-1)

    def weights(self, lam):
        return torch.softmax(self.logits(lam), dim=-1)

    def grad(self, lam):
        p = self.weights(lam)
        return (p[..., None, :] @ self.t)[..., 0, :]

    def hessian(self, lam):
        p = self.weights(lam)
        c = self.t - (p[..., None, :] @ self.t)
        return c.mT @ (p[..., None] * c)

    def solve(self, lam, g, alpha):
        """s = (I / alpha + Cov_p(t))^-1 g. Cov_p = A^T A with A = diag(sqrt p)(T - 1 h^T) (n x d): a d x d system
        when d <= n, else Woodbury, s = alpha g - alpha^2 A^T (I_n + alpha A A^T)^-1 A g, an n x n system built
        from the Gram matrix T T^T (shared by the batch) so that no (batch, n, d) tensor is formed."""
        p = self.weights(lam)
        h = (p[..., None, :] @ self.t)[..., 0, :]
        a = alpha[..., None]
        n = self.t.shape[-2]
        if self.d <= n:
            c = self.t - h[..., None, :]
            H = c.mT @ (p[..., None] * c) + torch.eye(self.d, dtype=F64, device=g.device) / a[..., None]
            return _spd_solve(H, g)
        if self._gram is None:
            self._gram = self.t @ self.t.mT
        th = _scores(self.t, h)                       # <t_i, h>
        cc = self._gram - th[..., :, None] - th[..., None, :] + (h * h).sum(-1)[..., None, None]  # <t_i-h, t_j-h>
        sp = p.sqrt()
        K = torch.eye(n, dtype=F64, device=g.device) + a[..., None] * sp[..., :, None] * cc * sp[..., None, :]
        Ag = sp * (_scores(self.t, g) - (h * g).sum(-1, keepdim=True))
        w = sp * torch.cholesky_solve(Ag[..., None], torch.linalg.cholesky(K))[..., 0]
        AtKAg = (w[..., None, :] @ self.t)[..., 0, :] - w.sum(-1, keepdim=True) * h
        return a * g - a * a * AtKAg


class Gaussian(Preference):
    """u = N(mu, Sigma) (Sec. 5 of 002 takes Sigma = I): log M(lam) = <mu, lam> + lam' Sigma lam / 2 exactly (the
    expansion (13) stops there). mu (..., d); sigma (..., d, d) symmetric positive semi-definite, or None for the
    identity."""

    def __init__(self, mu, sigma=None):
        mu = _tensor(mu, "mu")
        if mu.ndim < 1 or mu.shape[-1] == 0:
            raise ValueError(f"mu must be a vector (d,), got shape {tuple(mu.shape)}")
        d = mu.shape[-1]
        if sigma is None:
            sigma = torch.eye(d, dtype=F64, device=mu.device)
        else:
            sigma = _tensor(sigma, "Sigma", mu.device)
            if sigma.ndim < 2 or sigma.shape[-2:] != (d, d):
                raise ValueError(f"Sigma must be a {d} x {d} matrix, got shape {tuple(sigma.shape)}")
            if not torch.allclose(sigma, sigma.mT, rtol=1e-9, atol=1e-12):
                raise ValueError("Sigma must be symmetric")
            low = torch.linalg.eigvalsh(sigma).min().item()
            if low < -1e-10 * max(1.0, sigma.abs().max().item()):
                raise ValueError(f"Sigma must be positive semi-definite, but its smallest eigenvalue is {low:.4g}")
        _batch(mu.shape[:-1], sigma.shape[:-2])           # raises if the batches of mu and Sigma do not match
        self.mu, self.sigma, self.d, self.device = mu, sigma, d, mu.device

    def mean(self):
        return self.mu

    def covariance(self):
        return self.sigma

    def log_mgf(self, lam):
        return (lam * self.mu).sum(-1) + 0.5 * (lam * _scores(self.sigma, lam)).sum(-1)

    def grad(self, lam):
        return self.mu + _scores(self.sigma, lam)

    def hessian(self, lam):
        return self.sigma.expand(*_batch(self.sigma.shape[:-2], lam.shape[:-1]), self.d, self.d)

    def solve(self, lam, g, alpha):
        return _spd_solve(self.sigma + torch.eye(self.d, dtype=F64, device=g.device) / alpha[..., None, None], g)


def _preference(templates, u, device=None) -> Preference:
    """The preference: u itself when it is a :class:`Preference`, else the discrete one on (templates, u)."""
    if isinstance(u, Preference):
        if templates is not None:
            raise ValueError(f"the preference u ({type(u).__name__}) carries its own templates; pass templates=None")
        if not (isinstance(u.d, int) and u.d >= 1):
            raise ValueError(f"the preference's dimension d must be a positive integer, got {u.d!r}")
        return u
    if templates is None:
        raise ValueError("give the templates t_i (n, d) over which u puts its weights (or a Preference u, such as "
                         "a Gaussian)")
    return Discrete(_templates(templates, device=device), u)


def _mean(pref: Preference) -> torch.Tensor:
    """mu of the preference, checked: a user's Preference could return anything."""
    mu = pref.mean()
    if not (isinstance(mu, torch.Tensor) and mu.ndim >= 1 and mu.shape[-1] == pref.d):
        raise ValueError(f"the preference's mean (grad of log_mgf at 0) must be a tensor (..., {pref.d})")
    if not bool(torch.isfinite(mu).all()):
        raise ValueError("the preference's mean (grad of log_mgf at 0) contains NaN or inf")
    return mu.to(F64)


def mean_and_covariance(templates, u) -> Moments:
    """mu = sum_i u_i t_i and Sigma = sum_i u_i (t_i - mu)(t_i - mu)^T (or those of a :class:`Preference` u): the
    moments in the expansion (13) of 002.

    Example: the moments of a uniform preference over three templates.

    >>> from wviz.fenchel import mean_and_covariance
    >>> t = [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]   # three templates t_i in R^2
    >>> u = [1 / 3, 1 / 3, 1 / 3]                    # a uniform preference over them
    >>> m = mean_and_covariance(t, u)
    >>> [round(x, 4) for x in m.mu.tolist()]
    [0.0, 0.3333]
    >>> [[round(x, 4) for x in row] for row in m.sigma.tolist()]
    [[0.6667, 0.0], [0.0, 0.2222]]
    """
    pref = _preference(templates, u, _device(templates, u))
    return Moments(mu=_mean(pref), sigma=pref.covariance())


def log_mgf(lam, templates, u) -> torch.Tensor:
    """log M(lam), eq. (10) of 002: log sum_i u_i exp<t_i, lam> (discrete u) or that of a :class:`Preference` u,
    e.g. <mu, lam> + lam' Sigma lam / 2 for a :class:`Gaussian`. lam (..., d) -> (...).

    Example: log M(0) = 0 for any preference (its weights sum to 1); for N(mu, I) it is <mu, lam> + ||lam||^2 / 2.

    >>> from wviz.fenchel import Gaussian, log_mgf
    >>> t = [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]   # three templates t_i in R^2
    >>> u = [1 / 3, 1 / 3, 1 / 3]                    # a uniform preference over them
    >>> float(log_mgf([0.0, 0.0], t, u))
    0.0
    >>> round(float(log_mgf([1.0, 2.0], None, Gaussian([0.5, 0.0]))), 4)
    3.0
    """
    device = _device(u, lam, templates)
    pref = _preference(templates, u, device)
    return pref.log_mgf(_vector(lam, pref.d, "lambda", _mean(pref).device)).to(_out_dtype(lam))


# ---- the dual (9) and its solution ----------------------------------------------------------------------------------

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


# ---- T5: preference from masks and relative-position biases (19)-(20) ---------------------------------------------

def _relative_bias(relative_bias, mask, j):
    """b_{j-i} (..., n) for target positions j; offsets beyond the table are clipped to its ends (T5 puts far
    offsets in one bucket)."""
    device = _device(relative_bias, mask, j)
    b = _tensor(relative_bias, "relative_bias", device)
    if b.ndim != 1 or b.shape[0] % 2 == 0:
        raise ValueError(f"relative_bias must be a vector of odd length 2R + 1 (offsets j - i = -R..R), got shape "
                         f"{tuple(b.shape)}")
    R = b.shape[0] // 2
    mask = torch.as_tensor(mask, device=device)
    if mask.dtype != torch.bool:
        raise ValueError("mask must be a boolean array (True = the word is masked)")
    if mask.ndim < 1 or mask.shape[-1] == 0:
        raise ValueError(f"mask must have one entry per word, got shape {tuple(mask.shape)}")
    n = mask.shape[-1]
    j = torch.as_tensor(j, device=device)
    if j.is_floating_point() or j.dtype == torch.bool or bool(((j < 0) | (j >= n)).any()):
        raise ValueError(f"the target position j must be an integer in 0..{n - 1}")
    offset = (j[..., None] - torch.arange(n, device=device)).clamp(-R, R) + R
    return b[offset], mask


def t5_preference(relative_bias, mask, j) -> torch.Tensor:
    """The preference (19) of 002: u(t_i) = 0 if word i is masked, else exp(b_{j-i}) / Z.

    relative_bias (2R + 1,) holds b_r for offsets r = j - i = -R..R (clipped beyond), mask (..., n) bool
    (True = masked), j the position being inferred (int or tensor (...) of ints). Returns u (..., n).

    Example: four words, the second masked, inferring word j = 2 with biases b_-1 = 0, b_0 = 1, b_1 = 0: the masked
    word gets 0, the word at offset 0 the most, and the preference sums to 1.

    >>> import torch
    >>> from wviz.fenchel import t5_preference
    >>> u = t5_preference([0.0, 1.0, 0.0], torch.tensor([False, True, False, False]), 2)
    >>> [round(x, 4) for x in u.tolist()], round(float(u.sum()), 4)
    ([0.2119, 0.0, 0.5761, 0.2119], 1.0)
    """
    bias, mask = _relative_bias(relative_bias, mask, j)
    logits = bias.masked_fill(mask, -math.inf)
    if bool((logits == -math.inf).all(-1).any()):
        raise ValueError("every word is masked: at least one word must be visible")
    return torch.softmax(logits, dim=-1)


def t5_attention(scores, relative_bias, mask, j) -> torch.Tensor:
    """The weights of (20) as T5 computes them: softmax_i(<t_i, z> + b_{j-i} + 1_masked(i)), with
    1_masked = -inf on masked words. scores (..., n) are <t_i, z>. Equal to (18) with alpha = 1 and u of (19).

    Example: T5's weights equal the generalised attention (18) with alpha = 1 and the preference (19).

    >>> import torch
    >>> from wviz.fenchel import attention_weights, t5_attention, t5_preference
    >>> t = [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.5, 0.5]]
    >>> z = [0.5, 0.2]
    >>> bias, mask = [0.0, 1.0, 0.0], torch.tensor([False, True, False, False])
    >>> p = t5_attention(torch.tensor(t) @ torch.tensor(z), bias, mask, 2)
    >>> [round(x, 4) for x in p.tolist()]
    [0.3496, 0.0, 0.3496, 0.3009]
    >>> torch.allclose(p.double(), attention_weights(t, t5_preference(bias, mask, 2), z, 1.0))
    True
    """
    bias, mask = _relative_bias(relative_bias, mask, j)
    scores_ = _tensor(scores, "scores", bias.device)
    if scores_.shape[-1] != mask.shape[-1]:
        raise ValueError(f"scores must have one entry per word ({mask.shape[-1]}), got shape {tuple(scores_.shape)}")
    logits = (scores_ + bias).masked_fill(mask, -math.inf)
    if bool((logits == -math.inf).all(-1).any()):
        raise ValueError("every word is masked: at least one word must be visible")
    return torch.softmax(logits, dim=-1).to(_out_dtype(scores))


# ---- OT-based attention: Sec. 9 and Appendix D ---------------------------------------------------------------------

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
