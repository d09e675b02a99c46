"""The objective -<s, p> + tau Omega(p) of every map on the simplex (001 eq. (13)), a generic solver of it that
uses no closed form (the reference the maps are tested against), and what a map's weights are read for: support
size and entropy."""
from __future__ import annotations

import math
import warnings

import torch

from wviz._checks import first, positive

from ._inputs import check_alpha, check_omega, check_tensor, log_prior, of_row, row_max


def regularized_objective(p: torch.Tensor, scores: torch.Tensor, omega: str, tau: float,
                          prior: torch.Tensor | None = None, alpha: float = 1.5) -> torch.Tensor:
    """J(p) = -<s, p> + tau * Omega(p), the objective of eq. (13) of the 001 note; shape scores.shape[:-1].

    omega: "shannon" (sum p log p), "l2" (1/2 ||p||^2), "tsallis" ((sum p^alpha - 1) / (alpha (alpha - 1)),
    Shannon at alpha = 1, 1/2 ||p||^2 - 1/2 at alpha = 2) or "kl" (KL(p || prior)). Conventions: 0 log 0 = 0,
    a key with p_j = 0 contributes nothing even if s_j = -inf; p_j > 0 on a key with prior 0 (or s_j = -inf)
    gives +inf. p must be non-negative; it is not required to sum to 1.

    Example: softmax attains the minimum of J for Omega = sum p log p, which is -tau logsumexp(s / tau).

    >>> import torch
    >>> from wviz.attention import regularized_objective, softmax
    >>> s = torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64)
    >>> J = regularized_objective(softmax(s), s, "shannon", tau=1.0)
    >>> round(float(J), 4), round(float(-torch.logsumexp(s, 0)), 4)
    (-1.6803, -1.6803)
    >>> uniform = torch.full((3,), 1 / 3, dtype=torch.float64)
    >>> bool(regularized_objective(uniform, s, "shannon", tau=1.0) > J)
    True
    """
    omega = check_omega(omega)
    tau = positive(tau, "tau")
    check_tensor(p, "p")
    check_tensor(scores, "scores")
    if p.shape != scores.shape:
        raise ValueError(f"p has shape {tuple(p.shape)} but scores have shape {tuple(scores.shape)}; they must match")
    if bool((torch.isnan(scores) | (scores == math.inf)).any()):
        raise ValueError("scores contain NaN or +inf")
    if bool((torch.isnan(p) | (p < 0)).any()):
        raise ValueError("p has NaN or negative entries; Omega is defined for non-negative weights")
    dtype = torch.promote_types(p.dtype, scores.dtype)
    p, s = p.to(dtype), scores.to(dtype)
    if omega == "tsallis":
        alpha = check_alpha(alpha)
        if alpha == 1.0:
            omega = "shannon"
    zero = torch.zeros((), dtype=dtype, device=s.device)
    # where() before multiplying: 0 * (-inf) would be NaN, and so would its gradient
    lin = -(torch.where(p > 0, s, zero) * p).sum(dim=-1)
    if omega == "shannon":
        reg = torch.xlogy(p, p).sum(dim=-1)
    elif omega == "l2":
        reg = 0.5 * (p * p).sum(dim=-1)
    elif omega == "tsallis":
        reg = (p.pow(alpha).sum(dim=-1) - 1.0) / (alpha * (alpha - 1.0))
    else:
        logpi = log_prior(prior, s)
        reg = (torch.xlogy(p, p) - torch.where(p > 0, logpi, zero) * p).sum(dim=-1)
    return lin + tau * reg


def solve_simplex(scores: torch.Tensor, omega: str, tau: float, prior: torch.Tensor | None = None,
                  alpha: float = 1.5, tol: float = 1e-10, max_iter: int = 400) -> torch.Tensor:
    """Numerical argmin over the simplex of -<s, p> + tau * Omega(p) (eq. (13) of the 001 note), without any
    closed form: a log-barrier interior-point method with equality-constrained Newton steps (Boyd & Vandenberghe,
    Convex Optimization, secs. 9.6, 10.2 and 11.3), batched, in float64.

    Each step minimises J(p) / tau - mu * sum_j log p_j subject to sum_j p_j = 1 using only the gradient and the
    (diagonal) Hessian of Omega; the barrier weight mu shrinks tenfold whenever a row is centred, down to tol.
    Each centring function is self-concordant, so the damped step 1 / (1 + lambda) keeps p > 0 and converges.
    The result is within about tol of the argmin per key (about sqrt(tol) for a key exactly at the edge of the
    support, where s_j / tau equals the threshold); masked keys (s_j = -inf, prior 0) get exactly 0. Meant for
    small m (the page's m = 3, tests): an independent check of the closed forms, not a fast path.

    Example: the generic solver finds the closed forms, here sparsemax (Omega = 1/2 ||p||^2) and softmax.

    >>> import torch
    >>> from wviz.attention import softmax, solve_simplex, sparsemax
    >>> s = torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64)
    >>> torch.allclose(solve_simplex(s, "l2", tau=1.0), sparsemax(s), atol=1e-6)
    True
    >>> torch.allclose(solve_simplex(s, "shannon", tau=1.0), softmax(s), atol=1e-6)
    True
    """
    omega = check_omega(omega)
    tau = positive(tau, "tau")
    smax = row_max(scores)
    a = 1.0
    if omega == "tsallis":
        a = check_alpha(alpha)
        if a == 1.0:
            omega = "shannon"
    # J / tau up to a per-row constant: the argmin is the same and the scale does not depend on tau
    z = (scores.detach().double() - smax.double()) / tau
    if omega == "kl":
        # -<z, p> + KL(p || pi) = -<z + log pi, p> + sum p log p: Shannon with shifted scores
        z = z + log_prior(prior, scores).detach().double()
        dead = z.amax(dim=-1) == -math.inf
        if bool(dead.any()):
            where = of_row(first(dead), scores.shape[:-1])
            raise ValueError(f"every key{where} is masked: the prior is 0 on every key whose score is finite")
        omega = "shannon"
    free = torch.isfinite(z)
    z = torch.where(free, z, 0.0)
    p = free.double() / free.sum(dim=-1, keepdim=True)
    # start the barrier at the scale of the scores so the uniform start is already near the central path
    zmin = torch.where(free, z, 0.0).amin(dim=-1, keepdim=True)
    mu = torch.clamp(-zmin, min=1.0)
    for _ in range(max_iter):
        q = torch.where(free, p, 1.0)  # keeps log / pow finite on masked keys
        if omega == "shannon":
            g, h = 1.0 + q.log() - z, 1.0 / q
        elif omega == "l2":
            g, h = q - z, torch.ones_like(q)
        else:
            g, h = q.pow(a - 1.0) / (a - 1.0) - z, q.pow(a - 2.0)
        g = torch.where(free, g - mu / q, 0.0)
        hinv = torch.where(free, 1.0 / (h + mu / (q * q)), 0.0)
        nu = (g * hinv).sum(dim=-1, keepdim=True) / hinv.sum(dim=-1, keepdim=True)
        r = g - nu
        lam2 = (r * r * hinv).sum(dim=-1, keepdim=True) / mu  # squared Newton decrement of J/mu + barrier
        done = (mu <= tol) & (lam2 < 1e-12)
        if bool(done.all()):
            break
        step = torch.where(lam2 > 0.0625, 1.0 / (1.0 + lam2.sqrt()), 1.0)  # damped until lambda < 1/4
        p = p - step * r * hinv
        mu = torch.where((lam2 < 1e-2) & (mu > tol), torch.clamp(mu / 10, min=tol), mu)
    else:
        warnings.warn(f"solve_simplex stopped after max_iter={max_iter} Newton steps before reaching tol={tol}",
                      RuntimeWarning, stacklevel=2)
    return p.clamp_(min=0).to(scores.dtype)



def support_size(p: torch.Tensor) -> torch.Tensor:
    """Number of keys with non-zero weight, |{j : p_j > 0}|, along the last dimension (int64).

    Example: softmax uses every key, sparsemax only those above its threshold.

    >>> import torch
    >>> from wviz.attention import softmax, sparsemax, support_size
    >>> s = torch.tensor([0.0, 0.5, 1.0])
    >>> int(support_size(softmax(s))), int(support_size(sparsemax(s)))
    (3, 2)
    """
    check_tensor(p, "p")
    return (p > 0).sum(dim=-1)


def entropy(p: torch.Tensor) -> torch.Tensor:
    """Shannon entropy H(p) = -sum_j p_j log p_j in nats, with 0 log 0 = 0 (the H of eq. (3)-(4) of the 001 note).

    Example: uniform weights over m keys have entropy log m, one-hot weights 0.

    >>> import math
    >>> import torch
    >>> from wviz.attention import entropy
    >>> round(float(entropy(torch.full((4,), 0.25))), 4), round(math.log(4), 4)
    (1.3863, 1.3863)
    >>> float(entropy(torch.tensor([0.0, 1.0, 0.0]))) == 0
    True
    """
    check_tensor(p, "p")
    return -torch.xlogy(p, p).sum(dim=-1)
