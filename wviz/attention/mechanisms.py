"""The table under eq. (13) of the 001 note as objects: each map with the Omega it regularises with."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .dense import prior_softmax, softmax
from .simplex import regularized_objective, solve_simplex
from .sparse import entmax, sparsemax



@dataclass(frozen=True)
class Mechanism:
    """One row of the table under eq. (13) of the 001 note: an attention map and the Omega it regularises with.

    Calling it applies the map with a uniform signature, ``mech(scores, tau, prior=..., alpha=...)``;
    ``objective`` and ``solve`` pass its omega to regularized_objective and solve_simplex.
    """

    name: str
    fn: Callable[..., torch.Tensor]
    omega: str
    regulariser: str  # Omega(p) as text, for labels
    needs_prior: bool = False
    needs_alpha: bool = False

    def __call__(self, scores, tau=1.0, *, prior=None, alpha=1.5):
        if self.needs_prior:
            return self.fn(scores, prior, tau=tau)
        if self.needs_alpha:
            return self.fn(scores, alpha=alpha, tau=tau)
        return self.fn(scores, tau=tau)

    def objective(self, p, scores, tau=1.0, *, prior=None, alpha=1.5):
        return regularized_objective(p, scores, self.omega, tau, prior=prior, alpha=alpha)

    def solve(self, scores, tau=1.0, *, prior=None, alpha=1.5, **kw):
        return solve_simplex(scores, self.omega, tau, prior=prior, alpha=alpha, **kw)


MECHANISMS: dict[str, Mechanism] = {
    m.name: m for m in (
        Mechanism("softmax", softmax, "shannon", "sum_j p_j log p_j"),
        Mechanism("sparsemax", sparsemax, "l2", "1/2 ||p||^2"),
        Mechanism("entmax", entmax, "tsallis", "(sum_j p_j^alpha - 1) / (alpha (alpha - 1))", needs_alpha=True),
        Mechanism("prior-softmax", prior_softmax, "kl", "KL(p || pi)", needs_prior=True),
    )
}
