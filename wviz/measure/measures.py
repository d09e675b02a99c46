"""Measures of tokens (003 Sec. 3): the empirical measure m(X), the Boltzmann-Gibbs transformation (Def. 3), the
potentials, ground metrics and perturbations the package offers."""
from __future__ import annotations

from dataclasses import dataclass

import torch



POTENTIALS = ("dot", "gaussian")
GROUNDS = ("l1", "l2")
PERTURBATIONS = ("noise", "drop", "swap")


@dataclass(frozen=True, eq=False)
class Measure:
    """A discrete probability measure sum_j w_j delta_{x_j}: points (..., N, d), weights (..., N) summing to 1."""

    points: torch.Tensor
    weights: torch.Tensor

    @property
    def n(self) -> int:
        return self.points.shape[-2]

    @property
    def d(self) -> int:
        return self.points.shape[-1]


def _points(x, name: str = "the points") -> torch.Tensor:
    """x as a floating tensor (..., N, d) with N, d >= 1 and finite entries."""
    x = torch.as_tensor(x)
    if not x.dtype.is_floating_point:
        x = x.to(torch.float64)
    if x.ndim < 2:
        raise ValueError(f"{name} must be an array of shape (N, d), got shape {tuple(x.shape)}")
    if x.shape[-2] == 0:
        raise ValueError(f"{name} form an empty measure: give at least one point")
    if x.shape[-1] == 0:
        raise ValueError(f"{name} have no coordinates (d = 0)")
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        i = bad.nonzero()[0].tolist()
        raise ValueError(f"{name} contain NaN or inf: point {i[-2]}, coordinate {i[-1]}")
    return x


def empirical(points, weights=None) -> Measure:
    """The empirical measure m(X) = (1/N) sum_t delta_{x_t} (Sec. 3.1), or sum_t w_t delta_{x_t} with the given
    non-negative weights (normalised to total 1).

    Example: m(X) puts mass 1/N on each token; given weights are normalised.

    >>> from wviz.measure import empirical
    >>> empirical([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]).weights.tolist()
    [0.25, 0.25, 0.25, 0.25]
    >>> empirical([[0.0], [1.0]], weights=[1.0, 3.0]).weights.tolist()
    [0.25, 0.75]
    """
    x = _points(points)
    if weights is None:
        w = torch.full(x.shape[:-1], 1.0 / x.shape[-2], dtype=x.dtype, device=x.device)
        return Measure(x, w)
    w = torch.as_tensor(weights, dtype=x.dtype, device=x.device)
    if w.shape != x.shape[:-1]:
        raise ValueError(f"give one weight per point: {x.shape[-2]} points but weights of shape {tuple(w.shape)}")
    if not bool(torch.isfinite(w).all()):
        raise ValueError("the weights contain NaN or inf")
    if bool((w < 0).any()):
        raise ValueError(f"weights must be non-negative, got {w.min().item():.4g}")
    total = w.sum(-1, keepdim=True)
    if bool((total <= 0).any()):
        raise ValueError("the weights sum to zero: give at least one point a positive weight")
    return Measure(x, w / total)


def _measure(m) -> Measure:
    return m if isinstance(m, Measure) else empirical(m)


def _potential(potential: str) -> str:
    if potential not in POTENTIALS:
        raise ValueError(f"unknown potential {potential!r}; choose from {', '.join(POTENTIALS)}")
    return potential


def boltzmann_gibbs(nu: Measure, g) -> Measure:
    """Def. 3: Psi_g(nu)(dx) = g(x) nu(dx) / nu(g) for a positive function g, given by its values g(x_j) (..., N)
    at the atoms of nu (a leading batch of g gives a batch of measures on the same atoms).

    Example: reweighting two equal atoms by g = (1, 3) gives masses 1/4 and 3/4 on the same atoms.

    >>> from wviz.measure import boltzmann_gibbs, empirical
    >>> nu = empirical([[0.0], [1.0]])
    >>> boltzmann_gibbs(nu, [1.0, 3.0]).weights.tolist()
    [0.25, 0.75]
    """
    g = torch.as_tensor(g, dtype=nu.weights.dtype, device=nu.weights.device)
    if g.shape[-1:] != nu.weights.shape[-1:]:
        raise ValueError(f"g needs one value per atom of nu ({nu.n}), got shape {tuple(g.shape)}")
    if not bool((torch.isfinite(g) & (g > 0)).all()):
        raise ValueError("g must be positive and finite at every atom (Def. 3 asks for g: E -> R_>0 bounded)")
    gw = g * nu.weights
    return Measure(nu.points.expand(*gw.shape, nu.d), gw / gw.sum(-1, keepdim=True))


def _projections(projections, d: int, dtype, device):
    """(W_Q, W_K, W_V) as tensors; None means identities."""
    if projections is None:
        eye = torch.eye(d, dtype=dtype, device=device)
        return eye, eye, eye
    try:
        W_Q, W_K, W_V = projections
    except (TypeError, ValueError):
        raise ValueError("projections must be a triple (W_Q, W_K, W_V) of matrices, or None for identities") from None
    out = []
    for name, W in (("W_Q", W_Q), ("W_K", W_K), ("W_V", W_V)):
        W = torch.as_tensor(W, dtype=dtype, device=device)
        if W.ndim != 2 or W.shape[0] != d:
            raise ValueError(f"{name} must be a matrix with d = {d} rows (x {name} maps a token), got shape "
                             f"{tuple(W.shape)}")
        if not bool(torch.isfinite(W).all()):
            raise ValueError(f"{name} contains NaN or inf")
        out.append(W)
    if out[0].shape[1] != out[1].shape[1]:
        raise ValueError(f"W_Q and W_K must map to the same dimension, got {out[0].shape[1]} and {out[1].shape[1]}")
    return tuple(out)
