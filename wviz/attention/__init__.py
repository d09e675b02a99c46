"""Regularised attention maps: attention weights as the argmin of a one-sided optimal transport problem.

Source: the 001 note, "Scaled-Dot-Product Attention as One-Sided Entropic Optimal Transport" (MTandHJ, 2025,
arXiv 2508.08369; see the References page). Eq. (4)-(5) of the note: softmax(s / tau) is the minimiser over the
simplex of sum_j C_j p_j - tau H(p) with cost C_j = -<q, k_j>; eq. (13) and the table under it generalise this to
J(p) = -<s, p> + Omega(p) (the note prints -sum_j C_j p_j in (13); with its own C_j = -<q, k_j> the consistent
form is sum_j C_j p_j + Omega(p) = -<s, p> + Omega(p), which is what is used here).

One convention for every map in this package. For scores s (the note's s_j = <q, k_j>), a temperature tau > 0
and the probability simplex Delta = {p : p_j >= 0, sum_j p_j = 1}:

    p*(s) = argmin_{p in Delta}  -<s, p> + tau * Omega(p)

    softmax        Omega(p) = sum_j p_j log p_j                        ("shannon")
    sparsemax      Omega(p) = 1/2 ||p||^2                              ("l2")
    entmax         Omega(p) = (sum_j p_j^alpha - 1) / (alpha (alpha - 1)), alpha in [1, 2]   ("tsallis")
    prior_softmax  Omega(p) = KL(p || pi) = sum_j p_j log(p_j / pi_j)  ("kl")

tau is a temperature everywhere, also for sparsemax (the note's table uses the letter tau for sparsemax's
threshold instead). Every map works on torch tensors of any shape, along the last dimension, on CPU or CUDA,
in float32 or float64. A score of -inf masks its key (weight exactly 0); a row whose keys are all masked, NaN
or +inf scores, and a tau that is not a positive finite number raise ValueError.

The package along its jobs: dense (softmax, prior-softmax), sparse (sparsemax, entmax and their threshold
algorithms), simplex (the objective on the simplex, the generic solver the maps are tested against, support size,
entropy), mechanisms (the table under eq. (13)), _inputs (the checks every map shares).
"""
from __future__ import annotations

from ._inputs import OMEGAS
from .dense import prior_softmax, softmax
from .mechanisms import MECHANISMS, Mechanism
from .simplex import entropy, regularized_objective, solve_simplex, support_size
from .sparse import entmax, sparsemax

__all__ = [
    "softmax", "sparsemax", "entmax", "prior_softmax", "regularized_objective", "solve_simplex",
    "support_size", "entropy", "Mechanism", "MECHANISMS", "OMEGAS",
]
