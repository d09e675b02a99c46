"""Thm. 14 of 003: the Boltzmann-Gibbs measure maximises nu(log g) - KL(. || nu), checked numerically."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from wviz._checks import positive

from .flow import softmatch
from .measures import _measure, _points, _potential


def relative_entropy(p: torch.Tensor, nu: torch.Tensor) -> torch.Tensor:
    """H_nu(mu) = -KL(mu || nu) = -sum_j p_j log(p_j / nu_j) for mu = sum p_j delta_{y_j} << nu (Sec. 4), with
    0 log 0 = 0; batched over leading dimensions of p.

    Example: H_nu(nu) = 0, the maximum; a Dirac under the uniform nu on two atoms has -log 2.

    >>> import torch
    >>> from wviz.measure import relative_entropy
    >>> nu = torch.tensor([0.5, 0.5])
    >>> float(relative_entropy(nu, nu)) == 0
    True
    >>> round(float(relative_entropy(torch.tensor([1.0, 0.0]), nu)), 4)
    -0.6931
    """
    ratio = torch.where(p > 0, p / nu, torch.ones_like(p))
    return -(p * ratio.log()).sum(-1)


@dataclass(frozen=True, eq=False)
class MaxEntropyCheck:
    """Thm. 14 at one query x: gibbs (N,) the weights of Psi_{G(x, .)}(nu); features (N, l) k(x, y_j); moment (l,)
    f(x) = Psi_{G(x, .)}(nu)(k(x, .)); lam (l,) with G(x, y) proportional to exp(<lam, k(x, y)>); entropy
    H_nu(gibbs); directions (S, N) unit vectors v with sum v = 0 and sum v_j k_j = 0 (moving along them keeps the
    moment); t (S, T) steps along each direction within the simplex, t = 0 included; entropies (S, T)
    H_nu(gibbs + t v)."""

    gibbs: torch.Tensor
    features: torch.Tensor
    moment: torch.Tensor
    lam: torch.Tensor
    entropy: torch.Tensor
    directions: torch.Tensor
    t: torch.Tensor
    entropies: torch.Tensor


def max_entropy_check(nu, x, potential: str = "dot", tau: float = 1.0, W_Q=None, W_K=None,
                      n_directions: int = 8, n_steps: int = 41, seed: int = 0, carries: float = 0.0) -> MaxEntropyCheck:
    """A numerical look at Thm. 14: among the measures mu << nu that encode the same moment f(x) = mu(k(x, .)),
    the Boltzmann-Gibbs measure Psi_{G(x, .)}(nu) with G = exp <lam(x), k(x, .)> has the largest H_nu(mu).

    The potentials are of that form: "dot" with k(x, y) = y W_K, lam = x W_Q / tau; "gaussian" with
    k(x, y) = (y W_K, ||y W_K||^2), lam = (2 x W_Q / tau, -1 / tau) (the factor exp(-||x W_Q||^2 / tau) cancels
    in Psi). The competitors mu = gibbs + t v run along random directions v of the null space of the constraints
    (total mass and moment), for every t that keeps mu >= 0; their entropies peak at t = 0. ``carries`` > 0 draws
    the directions among the atoms whose Gibbs weight is at least ``carries`` times the largest (at least l + 2 of
    them) and leaves the others' weights alone: a direction through an atom of weight 1e-18 keeps mu >= 0 only for
    |t| < 1e-18 / |v_j|, a real peak too narrow to see. Such competitors are still measures << nu of the same mass
    and moment, so the theorem bounds them all the same.

    Example: Thm. 14, no competitor that encodes the same moment has a larger entropy than the Gibbs measure.

    >>> import torch
    >>> from wviz.measure import empirical, max_entropy_check
    >>> y = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.5, 2.0]], dtype=torch.float64)
    >>> chk = max_entropy_check(empirical(y), [1.0, 0.5])
    >>> round(float(chk.entropy), 4), bool((chk.entropies <= chk.entropy + 1e-12).all())
    (-0.1325, True)
    """
    nu = _measure(nu)
    if nu.points.ndim != 2:
        raise ValueError("max_entropy_check takes one measure nu (N atoms in R^d)")
    if not (isinstance(n_directions, int) and n_directions >= 1 and isinstance(n_steps, int) and n_steps >= 2):
        raise ValueError("use at least one direction and two steps along it")
    x = _points(torch.as_tensor(x).reshape(1, -1).to(nu.points.dtype), "the query")
    potential, tau = _potential(potential), positive(tau, "tau")
    if x.shape[-1] != nu.d:
        raise ValueError(f"the query has {x.shape[-1]} coordinates but nu lives in R^{nu.d}")
    if not bool((nu.weights > 0).all()):
        raise ValueError("give every atom of nu a positive weight (mu << nu is then any measure on the atoms)")
    k = nu.points if W_K is None else nu.points @ W_K
    q = x[0] if W_Q is None else x[0] @ W_Q
    if potential == "dot":
        features, lam = k, q / tau
    else:
        features = torch.cat([k, (k * k).sum(-1, keepdim=True)], -1)
        lam = torch.cat([2 * q / tau, q.new_tensor([-1 / tau])])
    N, l = features.shape
    if N < l + 2:
        raise ValueError(f"with {l} moment constraints and the total mass, nu needs at least {l + 2} atoms for "
                         f"another measure to encode the same moment; it has {N}")
    gibbs = softmatch(x, nu, potential, tau, W_Q, W_K)[0]
    keep = torch.nonzero(gibbs >= carries * gibbs.max()).flatten().cpu()
    if len(keep) < l + 2:   # the fewest atoms that leave a direction keeping mass and moment
        keep = gibbs.argsort(descending=True)[:l + 2].cpu()
    # null space of the constraints [1; k^T] (l + 1 rows) on those atoms: the directions that keep mass and moment
    A = torch.cat([torch.ones(1, len(keep), dtype=features.dtype), features[keep.to(features.device)].T.cpu()])
    _, S, Vh = torch.linalg.svd(A, full_matrices=True)
    rank = int((S > S[0] * 1e-10).sum())
    null = Vh[rank:]
    g = torch.Generator().manual_seed(int(seed))
    coef = torch.randn(n_directions, null.shape[0], generator=g, dtype=gibbs.dtype)
    v = gibbs.new_zeros(n_directions, N)
    v[:, keep.to(gibbs.device)] = (coef @ null).to(gibbs.device)
    v = v / v.norm(dim=-1, keepdim=True)
    # the steps that keep gibbs + t v >= 0 form [t_min, t_max], with t_min <= 0 <= t_max
    t_max = torch.where(v < 0, -gibbs / v, torch.full_like(v, math.inf)).amin(-1)
    t_min = torch.where(v > 0, -gibbs / v, torch.full_like(v, -math.inf)).amax(-1)
    frac = torch.linspace(0, 1, n_steps, dtype=gibbs.dtype, device=gibbs.device)
    t = torch.cat([t_min[:, None] + (t_max - t_min)[:, None] * frac, torch.zeros_like(t_min)[:, None]], -1)
    t = t.sort(-1).values
    competitors = (gibbs + t[..., None] * v[:, None, :]).clamp_min(0)
    return MaxEntropyCheck(gibbs, features, gibbs @ features, lam, relative_entropy(gibbs, nu.weights), v, t,
                           relative_entropy(competitors, nu.weights))
