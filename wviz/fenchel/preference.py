"""The preference u and its log-MGF M (10) of 002, pluggable: Preference, Discrete, Gaussian (Sec. 5), its moments."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ._inputs import _batch, _distribution, _out_dtype, _scores, _spd_solve, _templates, _tensor, _vector, F64


@dataclass(frozen=True, eq=False)
class Moments:
    """mu (..., d) and Sigma (..., d, d) of a preference: the moments in the expansion (13) of 002."""

    mu: torch.Tensor
    sigma: torch.Tensor


def _device(*xs):
    """Where to compute: a preference object's device first (its tensors cannot move), else the first tensor's."""
    for x in xs:
        if isinstance(x, Preference) and x.device is not None:
            return x.device
    for x in xs:
        if isinstance(x, torch.Tensor):
            return x.device
    return None


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
