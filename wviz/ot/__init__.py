"""Optimal transport on torch tensors: cost matrices, entropic OT (Sinkhorn), exact OT, squared-L2-regularised OT.

The notation follows eq. (23) of the Fenchel-dual paper 002 (*Deciphering Attention Mechanisms: Optimization and
Fenchel Dual Solutions*, Sec. 9; "002" on the References page),

    W_gamma(p, u; M) = min_{X in U(p, u)} <M, X> - gamma H(X),   H(X) = -sum_ij X_ij log X_ij,

written here as min_{P in U(a, b)} <C, P> - gamma H(P) with U(a, b) = {P >= 0 : P 1 = a, P^T 1 = b}: a (..., n) and
b (..., m) are the masses, C (..., n, m) the cost, P the plan. Every solver is batched over the leading dimensions
(a, b and C broadcast against each other), runs on CPU and CUDA in float32 or float64, takes no gradients, and
returns an :class:`OTResult`.

Marginal error (all solvers, :func:`marginal_error`): max(||P 1 - a||_1, ||P^T 1 - b||_1), the L1 error of the worse
of the two marginals; a solver has converged when it is <= tol for every problem of the batch.

One module per family, as in POT:

    problem.py      OTResult, input checks, a problem flattened to a batch (ProblemFacts) and its result restored,
                    marginal_error
    costs.py        cost_matrix
    entropic.py     sinkhorn: the stages of epsilon scaling, convergence checks, the stopping rule, warm starts, the
                    one-sided form, small problems on CUDA tensors solved on the CPU (CPU_ROUTE_SIZE)
    loop.py         the contract of the scaling loop (ScalingLoop, BatchLoop) that the two below implement
    scaling.py      the stabilised scaling form P = diag(u) K diag(v): kernel, iterations, absorption, the plan
    lean.py         the same for one problem on the CPU, in numpy on fixed buffers, with a float32 start
    graphs.py       scaling.py's balanced iterations on CUDA captured once and replayed as CUDA graphs
    semirelaxed.py  semi-relaxed OT (sinkhorn(rho=...)): its column update, translation, objective and closed end
    relaxation.py   adaptive over-relaxation (Young's SOR theory)
    batch.py        converged problems leaving a batch early
    exact.py        emd (POT's network simplex)
    quadratic.py    quadratic_ot

Semi-relaxed OT (sinkhorn(rho=...)): the rows held exactly, the columns by rho KL(P^T 1 | b), from the prior-softmax
(rho = 0) to the balanced problem (rho = inf).

References: Cuturi 2013 (Sinkhorn distances); Schmitzer 2019 (stabilised sparse scaling algorithms for entropy
regularised transport problems: absorption of the scalings into log-domain potentials, epsilon scaling);
Thibault, Chizat, Dossal & Papadakis 2021 and Lehmann, von Renesse, Sambale & Uschmajew 2022 (over-relaxed Sinkhorn
and its optimal omega, from Young's SOR theory); Chizat, Peyré, Schmitzer & Vialard 2018 (scaling algorithms for
unbalanced transport: the semi-relaxed column update) and Séjourné, Vialard & Peyré 2022 (translation invariant
Sinkhorn); Blondel, Seguy & Rolet 2018 (smooth and sparse OT); the 001 note
(MTandHJ 2025, *Scaled-Dot-Product Attention as One-Sided Entropic Optimal Transport*, eqs. (4)-(5): attention as
one-sided entropic OT; "001" on the References page).
"""
from .costs import COST_KINDS, cost_matrix
from .entropic import CPU_ROUTE_SIZE, sinkhorn
from .exact import emd
from .problem import OTResult, marginal_error
from .quadratic import quadratic_ot

__all__ = ["OTResult", "COST_KINDS", "cost_matrix", "sinkhorn", "CPU_ROUTE_SIZE", "emd", "quadratic_ot",
           "marginal_error"]
