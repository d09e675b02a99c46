"""Measure-theoretic attention: "A Mathematical Theory of Attention" (Vuckovic, Baratin & Tachet des Combes 2020,
arXiv 2007.02876: 003 on the References page, "the paper" below). Tokens are particles, a set of tokens is the
empirical measure m(X) = (1/N) sum_t delta_{x_t}, and self-attention is the nonlinear Markov transport
mu -> mu A_mu.

The pieces, in the paper's notation (E a subset of R^d, G an interaction potential, tau its temperature):

    Def. 3   Boltzmann-Gibbs transformation   Psi_g(nu)(dx) = g(x) nu(dx) / nu(g)
    Def. 4   softmatch kernel                  x -> Psi_{G(x, .)}(mu)
    Def. 5   lookup kernel                     L(k, dv) = delta_{l(k)}(dv), here l(k) = k W_V (or a value table)
    eq. (2)  moment projection onto Diracs     Pi(mu) = delta_{mu(F)}, F(x) = x: the mean
    Def. 8   attention kernel                  A_mu(x, dz) = Pi[Psi_{G(x, .)}(mu) L](dz)
    Prop. 9  delta_q A_{m(K)} = delta_{Attention(q, K, V)}: the usual softmax(a(q, K)) V

Interaction potentials G(x, y) = exp(a(x, y)) (row vectors, q = x W_Q, k = y W_K; identities when not given):
the keyword ``projections`` is the triple (W_Q, W_K, W_V), while ``weights`` are always the masses of a measure.

    "dot"       G(x, y) = exp(<x W_Q, y W_K> / tau)          (scaled dot product: tau = sqrt(d) in a Transformer)
    "gaussian"  G(x, y) = exp(-||x W_Q - y W_K||^2 / tau)    (the potential of Sec. 6.3, there with tau = 1)

W1 is the 1-Wasserstein distance with the paper's l1 ground metric ||x - y||_1 (Sec. 4), by exact OT (POT).

kappa(A) below is the contraction coefficient of Def. 22, sup W1(mu A_mu, nu A_nu) / W1(mu, nu), which the paper
writes tau(A) (likewise kappa(Pi), kappa(Psi_G), kappa(L), kappa(T)); here tau is only the temperature of G. The
contraction estimates: Thm. 23 (compact E), Cor. 30 / Thm. 29 (Gaussian potential on R^d), the fixed point of the
weight-shared recurrence (Prop. 26, Sec. 6.2) and the maximum-entropy property of Psi_G (Thm. 14).

What checking the constants against the text found (tests/test_measure.py shows each):

- Thm. 23 as printed is false: the second inequality of Prop. 19 misses a term ||G||_inf / eps(G) (see
  :func:`thm23_bound`); the corrected bound is the default here, the printed one (printed=True) is kept for comparison.
- Cor. 30 (with Prop. 28 and Thm. 29) is false for large N: Prop. 28's proof rescales m(X) to sum_i delta_{x_i}
  (mass N) and then applies the Kantorovich-Rubinstein bound |mu(h) - nu(h)| <= Lip(h) W1(mu, nu), which holds
  for probability measures only. A token between two clusters of (N - 1) / 2 tokens has a ratio ~ 2 ln N, above
  the bound's O(sqrt(ln N)) from N ~ 3 10^4 on in d = 1 (see :func:`cor30_bound` and :func:`cor30_failure`).
- Misprints: KL(mu || nu) is int log(dmu/dnu) dmu (Sec. 4 writes dnu, under which Thm. 14 would have no
  maximiser); the bracket in Thm. 29's proof reads sqrt(ln N + 1/(2e)) as in Prop. 28 and Cor. 30.

The package along its jobs: measures (measures, Boltzmann-Gibbs, the option lists), flow (the attention kernel
and the particle flow), wasserstein (W1), lipschitz (contraction coefficients and estimates), bounds (Thm. 23,
Cor. 30), recurrence (the fixed point of Prop. 26), max_entropy (Thm. 14).
"""
from __future__ import annotations

from .bounds import cor30_bound, cor30_failure, Cor30Failure, thm23_bound, thm23_constants, Thm23Constants
from .flow import attention_kernel, attention_step, log_potential, moment_projection, self_attention_flow, softmatch
from .lipschitz import Contraction, contraction, contraction_ratio, local_contraction, PairContraction
from .max_entropy import max_entropy_check, MaxEntropyCheck, relative_entropy
from .measures import boltzmann_gibbs, empirical, GROUNDS, Measure, PERTURBATIONS, POTENTIALS
from .recurrence import fixed_point, FixedPoint
from .wasserstein import w1

__all__ = [
    "Measure", "POTENTIALS", "GROUNDS", "PERTURBATIONS", "empirical", "boltzmann_gibbs", "log_potential",
    "softmatch", "moment_projection", "attention_kernel", "attention_step", "self_attention_flow", "w1",
    "PairContraction", "Contraction", "contraction", "contraction_ratio", "local_contraction", "Thm23Constants",
    "thm23_constants", "thm23_bound", "cor30_bound", "Cor30Failure", "cor30_failure", "FixedPoint", "fixed_point",
    "relative_entropy", "MaxEntropyCheck", "max_entropy_check"
]
