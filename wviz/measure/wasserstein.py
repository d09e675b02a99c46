"""W1 with the l1 (or l2) ground metric of 003 Sec. 4, by exact OT."""
from __future__ import annotations


import torch

from wviz import ot

from .measures import _measure, GROUNDS


def _ground(ground: str) -> str:
    if ground not in GROUNDS:
        raise ValueError(f"unknown ground metric {ground!r}; choose from {', '.join(GROUNDS)}")
    return "l1" if ground == "l1" else "euclidean"


def w1(mu, nu, ground: str = "l1") -> torch.Tensor:
    """W1(mu, nu) = min over couplings pi of int ||x - y|| dpi (Sec. 4, the paper's ground metric is l1; "l2" uses
    ||x - y||_2), exactly by POT's network simplex. mu, nu: Measures or point arrays (read as m(X)).

    Example: the W1 distance of two Diracs is the distance of their points (l1 by default, or l2).

    >>> from wviz.measure import w1
    >>> float(w1([[0.0, 0.0]], [[3.0, 4.0]])), float(w1([[0.0, 0.0]], [[3.0, 4.0]], ground="l2"))
    (7.0, 5.0)
    """
    mu, nu = _measure(mu), _measure(nu)
    if mu.d != nu.d:
        raise ValueError(f"the two measures live in different dimensions ({mu.d} and {nu.d})")
    C = ot.cost_matrix(mu.points, nu.points, _ground(ground))
    res = ot.emd(mu.weights, nu.weights.to(C.device), C)
    if not bool(res.converged.all()):
        raise ValueError("exact OT did not reach an optimal plan; use fewer points")
    return res.cost.clamp_min(0)
