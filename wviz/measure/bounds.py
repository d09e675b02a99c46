"""The paper's contraction bounds: Thm. 23 (compact E, corrected; see the package docstring), Cor. 30 / Thm. 29
(the Gaussian potential on R^d) and where Cor. 30 fails."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from wviz._checks import positive, renamed

from .lipschitz import contraction
from .measures import _potential, _projections, empirical


def thm23_bound(diam: float, lip_first: float, lip_second: float, eps: float, d: int, k_l: float = 1.0,
                sup: float | None = None, *, printed: bool = False) -> float:
    """Thm. 23: kappa(A) <= kappa(Pi) kappa(Psi_G) kappa(L) with kappa(Pi) = d (Prop. 20), kappa(L) = K_l (Prop. 21)
    and

        kappa(Psi_G) = (2 (||G||_{Lip,inf} + ||G||_{inf,Lip}) diam(E) + ||G||_inf) / eps(G)   (corrected, default)
        kappa(Psi_G) =  2 (||G||_{Lip,inf} + ||G||_{inf,Lip}) diam(E) / eps(G)                 (printed=True)

    The printed constant comes from the second inequality of Prop. 19, whose proof bounds
    |int G f d(mu - nu)| by ||f||_inf |int G d(mu - nu)|; a signed measure does not allow that. Bounding it by
    Lip(G f) W1(mu, nu) <= (||G||_inf + ||f||_inf ||G||_{inf,Lip}) W1(mu, nu) adds the ||G||_inf term. Without it
    the bound fails: for the Gaussian potential and l = identity, translating mu by a vector v translates mu A_mu
    by v, a ratio of exactly 1, while the printed bound tends to 0 as tau grows.

    diam      diam(E) in the l1 metric, E compact (and convex) containing every token
    lip_first ||G||_{Lip,inf} = sup_y Lip(G(., y)) on E (l1 metric): how fast the potential changes with the query
    lip_second ||G||_{inf,Lip} = sup_x Lip(G(x, .)) on E: how fast it changes with the key
    eps       eps(G) > 0 with G(x, y) >= eps(G) on E x E
    d         the dimension of E
    k_l       K_l, the l1 Lipschitz constant of the lookup l (||W_V|| for l(x) = x W_V)
    sup       ||G||_inf = sup of G on E x E; needed by the corrected bound, not used when printed=True
    printed   True: the constant as the paper prints it (false in general, kept for comparison)

    Example: the corrected bound adds ||G||_inf / eps(G) times d K_l to the printed one.

    >>> from wviz.measure import thm23_bound
    >>> thm23_bound(diam=2.0, lip_first=1.0, lip_second=1.0, eps=0.5, d=2, sup=1.0)
    36.0
    >>> thm23_bound(diam=2.0, lip_first=1.0, lip_second=1.0, eps=0.5, d=2, printed=True)
    32.0
    """
    for name, v in (("diam", diam), ("lip_first", lip_first), ("lip_second", lip_second), ("k_l", k_l),
                    ("sup", 0.0 if sup is None else sup)):
        if not (math.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a non-negative finite number, got {v:g}")
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"eps(G) must be positive (Thm. 23 assumes G >= eps(G) > 0), got {eps:g}")
    if not (isinstance(d, int) and d >= 1):
        raise ValueError(f"d must be a positive integer, got {d!r}")
    if printed:
        return d * 2 * (lip_first + lip_second) * diam / eps * k_l
    if sup is None:
        raise ValueError("the corrected Thm. 23 bound needs sup = ||G||_inf on E x E; pass printed=True for the "
                         "bound as the paper prints it")
    return d * (2 * (lip_first + lip_second) * diam + sup) / eps * k_l


@dataclass(frozen=True)
class Thm23Constants:
    """The inputs of Thm. 23 for a potential on the box E = [lo, hi] (see :func:`thm23_bound`): bound is the
    corrected bound on kappa(A), printed the constant as the paper prints it."""

    d: int
    diam: float
    lip_first: float
    lip_second: float
    eps: float
    sup: float
    k_l: float
    bound: float
    printed: float


def _interval_product(a_lo, a_hi, b_lo, b_hi):
    """Range of a * b for a in [a_lo, a_hi], b in [b_lo, b_hi] (elementwise, broadcast)."""
    c = torch.stack([a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi])
    return c.amin(0), c.amax(0)


def _linear_range(lo, hi, W):
    """Range of (x W)_k over the box x in [lo, hi] (d,), for each output k: exact."""
    a, b = lo[:, None] * W, hi[:, None] * W
    return torch.minimum(a, b).sum(0), torch.maximum(a, b).sum(0)


@renamed(weights="projections")
def thm23_constants(lo, hi, potential: str = "dot", tau: float = 1.0, projections=None) -> Thm23Constants:
    """Upper bounds of ||G||_{Lip,inf}, ||G||_{inf,Lip}, ||G||_inf, 1 / eps(G) and K_l on the box E = [lo, hi] in
    the l1 metric (Lipschitz constants in l1 are sups of the l-infinity norm of the gradient), and Thm. 23.

    With identity W_Q, W_K the extremes of <x, y> and ||x - y||^2 over E x E are exact (the coordinates decouple);
    otherwise interval arithmetic gives valid, slightly larger constants. Derivatives, with q = x W_Q, k = y W_K:
    dot: grad_x G = W_Q k G / tau, so ||grad_x G||_inf <= max_{y in E} ||y W_K W_Q^T||_inf / tau * max G;
    gaussian: grad_x G = -2 W_Q (q - k) G / tau, ||.||_inf <= (2 / tau) r_Q s e^{-s^2 / tau} with s = ||q - k||_2
    and r_Q the largest l2 norm of a row of W_Q; s e^{-s^2/tau} grows up to s = sqrt(tau / 2). K_l = max_i
    ||W_V[i, :]||_1, the l1 operator norm of x -> x W_V.

    Example: the constants of the Gaussian potential on the unit square E = [0, 1]^2, and Thm. 23's two bounds.

    >>> from wviz.measure import thm23_constants
    >>> c = thm23_constants([0.0, 0.0], [1.0, 1.0], "gaussian")
    >>> c.d, c.diam, round(c.eps, 4), c.sup
    (2, 2.0, 0.1353, 1.0)
    >>> round(c.bound, 4), round(c.printed, 4)
    (116.1872, 101.409)
    """
    lo, hi = (torch.as_tensor(v, dtype=torch.float64).cpu() for v in (lo, hi))
    if lo.ndim != 1 or lo.shape != hi.shape or not bool((lo <= hi).all()):
        raise ValueError("the box E needs lo <= hi, two vectors of length d")
    if not bool(torch.isfinite(lo).all() & torch.isfinite(hi).all()):
        raise ValueError("the box E must be bounded (Thm. 23 needs a compact E)")
    potential, tau = _potential(potential), positive(tau, "tau")
    d = lo.shape[0]
    W_Q, W_K, W_V = _projections(projections, d, torch.float64, "cpu")
    if W_V.shape[1] != d:
        raise ValueError("Thm. 23 needs a lookup l: E -> E (W_V square)")
    q_lo, q_hi = _linear_range(lo, hi, W_Q)
    k_lo, k_hi = _linear_range(lo, hi, W_K)
    if potential == "dot":
        p_lo, p_hi = _interval_product(q_lo, q_hi, k_lo, k_hi)     # each term q_m k_m of <q, k>
        a_min, a_max = p_lo.sum().item() / tau, p_hi.sum().item() / tau
        g_first = torch.stack(_linear_range(lo, hi, W_K @ W_Q.T)).abs().amax().item()   # max ||W_Q k||_inf
        g_second = torch.stack(_linear_range(lo, hi, W_Q @ W_K.T)).abs().amax().item()
        lip_first = g_first / tau * math.exp(a_max)
        lip_second = g_second / tau * math.exp(a_max)
    else:
        u_lo, u_hi = q_lo - k_hi, q_hi - k_lo                       # the range of q - k, coordinate-wise
        s2 = torch.maximum(u_lo ** 2, u_hi ** 2).sum().item()
        near = (torch.clamp_min(u_lo, 0) ** 2 + torch.clamp_max(u_hi, 0) ** 2).sum().item()  # <= min ||q - k||^2
        a_min, a_max = -s2 / tau, -near / tau
        s = min(math.sqrt(s2), math.sqrt(tau / 2))
        peak = 2 / tau * s * math.exp(-s * s / tau)
        lip_first = W_Q.norm(dim=1).max().item() * peak
        lip_second = W_K.norm(dim=1).max().item() * peak
    diam = (hi - lo).sum().item()
    k_l = W_V.abs().sum(1).max().item()
    eps, sup = math.exp(a_min), math.exp(a_max)
    if eps == 0.0:
        raise ValueError("eps(G) underflows to 0 on this E (tokens far apart for this tau): Thm. 23 gives no bound")
    if not math.isfinite(sup * (lip_first + lip_second)):
        return Thm23Constants(d, diam, lip_first, lip_second, eps, sup, k_l, math.inf, math.inf)
    return Thm23Constants(d, diam, lip_first, lip_second, eps, sup, k_l,
                          thm23_bound(diam, lip_first, lip_second, eps, d, k_l, sup),
                          thm23_bound(diam, lip_first, lip_second, eps, d, k_l, printed=True))


# ||G||_Lip (jointly in (x, y), l1 metric) and ||G||_inf of G(x, y) = exp(-||x - y||_2^2): the l-infinity norm of
# the gradient (-2u, 2u) G with u = x - y is 2 ||u||_inf e^{-||u||^2} <= max_t 2 t e^{-t^2} = sqrt(2 / e).
GAUSSIAN_LIP = math.sqrt(2 / math.e)
GAUSSIAN_SUP = 1.0


def cor30_bound(n: int, d: int, lip: float = GAUSSIAN_LIP, sup: float = GAUSSIAN_SUP, k_l: float = 1.0,
                m: int | None = None) -> float:
    """Cor. 30 (Thm. 29 when m is given): for G(x, y) = exp(-||x - y||_2^2) on E = R^d, mu = m(X), nu = m(Y),

        W1(mu A_mu, nu A_nu) <= 2 kappa(Pi) kappa(L) [sqrt(d) sqrt(ln N + 1/(2e)) ||G||_Lip + ||G||_inf + sqrt(d) + 2]
                                * W1(mu, nu),    N = min(n, m)

    n, m      the numbers of tokens of mu and nu (N = n when m is None)
    d         the dimension; kappa(Pi) = d (Prop. 20)
    lip       ||G||_Lip, the l1 Lipschitz constant of G on R^d x R^d: sqrt(2/e) for this G
    sup       ||G||_inf = 1 for this G
    k_l       kappa(L) = K_l, the l1 Lipschitz constant of the lookup (||W_V||)

    The sqrt(d) + 2 is the paper's loose bound on sup 2 (2 + ||t||_1) ||t||_inf e^{-||t||^2} (Prop. 28's proof).
    The bound fails for large N (package docstring): with x_0 = 0 between two clusters of m tokens at -R and R,
    R^2 = ln(2m) - ln(q / (1 - q)), moving x_0 alone gives the ratio (1 - q) + 2 q R^2 ~ 2 q ln N.
    For G = exp(-||x - y||^2 / tau) (identity W_Q, W_K) the same number bounds the ratio: A_tau(X) =
    sqrt(tau) A_1(X / sqrt(tau)) and a W1 ratio does not change when every point is scaled.

    Example: the bound grows like sqrt(ln N): slowly, from 10 tokens to a million.

    >>> from wviz.measure import cor30_bound
    >>> round(cor30_bound(10, d=1), 4), round(cor30_bound(10 ** 6, d=1), 4)
    (10.7052, 14.4188)
    """
    N = n if m is None else min(n, m)
    if not (isinstance(N, int) and N >= 1):
        raise ValueError(f"the numbers of tokens must be positive integers, got {n!r} and {m!r}")
    if not (isinstance(d, int) and d >= 1):
        raise ValueError(f"d must be a positive integer, got {d!r}")
    for name, v in (("lip", lip), ("sup", sup), ("k_l", k_l)):
        if not (math.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a non-negative finite number, got {v:g}")
    bracket = math.sqrt(d) * math.sqrt(math.log(N) + 1 / (2 * math.e)) * lip + sup + math.sqrt(d) + 2
    return 2 * d * k_l * bracket


@dataclass(frozen=True, eq=False)
class Cor30Failure:
    """The counterexample to Cor. 30 for N = 10^k tokens (each (K,)): n the numbers of tokens N, ratio the
    W1 ratio of moving the middle token, bound the Cor. 30 bound for that N."""

    n: torch.Tensor
    ratio: torch.Tensor
    bound: torch.Tensor


def cor30_failure(log10_n=range(1, 13), q: float = 0.85, d: int = 1, delta: float = 1e-6) -> Cor30Failure:
    """The paper's Cor. 30 against a counterexample (package docstring): a token at 0 between two clusters of
    m = (N - 1) / 2 tokens at -R and R along the first axis of R^d, R^2 = ln(2m) - ln(q / (1 - q)), so that the
    clusters hold the share q of the token's Boltzmann-Gibbs measure (Gaussian potential, tau = 1, identity
    projections). Moving that token alone by ``delta`` gives the ratio W1(mu A_mu, nu A_nu) / W1(mu, nu)
    ~ (1 - q) + 2 q R^2 ~ 2 q ln N, while the bound grows like sqrt(ln N), for N = 10^k, k in ``log10_n``.
    The clusters are weighted atoms: exactly the uniform measure of the repeated tokens.

    Example: the counterexample's ratio stays below Cor. 30's bound for 10 tokens and exceeds it for a million.

    >>> from wviz.measure import cor30_failure
    >>> f = cor30_failure(log10_n=[1, 6])
    >>> [round(float(r), 4) for r in f.ratio], [round(float(b), 4) for b in f.bound]
    ([1.3236, 20.6875], [10.7052, 14.4188])
    >>> (f.ratio > f.bound).tolist()
    [False, True]
    """
    if not (0 < q < 1 and isinstance(d, int) and d >= 1 and delta > 0):
        raise ValueError("cor30_failure needs 0 < q < 1, a positive integer d and a positive move delta")
    n, ratios, bounds = [], [], []
    for k in log10_n:
        N = int(round(10 ** k))
        m = (N - 1) / 2
        if 2 * m <= q / (1 - q):   # R^2 > 0
            raise ValueError(f"N = {N} tokens are too few for the share q = {q} of the clusters")
        R = math.sqrt(math.log(2 * m) - math.log(q / (1 - q)))
        pts = torch.zeros(3, d, dtype=torch.float64)
        pts[1, 0], pts[2, 0] = -R, R
        w = torch.tensor([1.0, m, m], dtype=torch.float64)
        moved = pts.clone()
        moved[0, 0] += delta
        n.append(N)
        ratios.append(contraction(empirical(pts, w), empirical(moved, w), "gaussian", 1.0).ratio.item())
        bounds.append(cor30_bound(N, d))
    return Cor30Failure(*(torch.tensor(v, dtype=torch.float64) for v in (n, ratios, bounds)))
