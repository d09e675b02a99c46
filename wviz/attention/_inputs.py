"""The input checks that every map of wviz.attention shares: scores, alpha, omega, a prior, tau in a dtype."""
from __future__ import annotations

import math

import torch

from wviz._checks import first, index_of


OMEGAS = ("shannon", "l2", "tsallis", "kl")   # the regularisers Omega of the package docstring


def check_tensor(x, name: str, keys: bool = True) -> None:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch tensor, got {type(x).__name__}")
    if x.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"{name} must be float32 or float64, got {x.dtype}")
    if keys and (x.dim() == 0 or x.shape[-1] == 0):
        raise ValueError(f"{name} needs at least one key along its last dimension, got shape {tuple(x.shape)}")


def check_alpha(alpha) -> float:
    try:
        a = float(alpha)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"alpha must be a number, got {alpha!r}") from None
    if not 1.0 <= a <= 2.0:  # also rejects NaN
        raise ValueError(f"alpha must lie in [1, 2] (1 = softmax, 2 = sparsemax), got {a}")
    return a


def check_omega(omega) -> str:
    if omega not in OMEGAS:
        raise ValueError(f"unknown omega {omega!r}; choose one of {', '.join(OMEGAS)}")
    return omega


def of_row(flat: int, lead: torch.Size) -> str:
    """' of row 3' / ' of row (0, 3)' / '' (1-D input): names the first offending row in messages."""
    i = index_of(flat, lead)
    return "" if i is None else f" of row {i}"


def row_max(scores) -> torch.Tensor:
    """Validated row maxima (keepdim, detached). The max propagates NaN and +inf and is -inf exactly when a
    row is all -inf, so a single cheap reduction checks every row (no per-element pass, no python loop)."""
    check_tensor(scores, "scores")
    smax = scores.detach().amax(dim=-1, keepdim=True)
    # 0 * max is 0 for a finite max and NaN for NaN or +-inf, so one sum checks every row: two kernels on a GPU,
    # where torch.isfinite(...).all() launches five
    if float((smax * 0).sum()) != 0:
        i = first(~torch.isfinite(smax))
        v = float(smax.reshape(-1)[i])
        where = of_row(i, scores.shape[:-1])
        if math.isnan(v):
            raise ValueError(f"scores{where} contain NaN")
        if v > 0:
            raise ValueError(f"scores{where} contain +inf; use a large finite score (-inf is allowed and masks a key)")
        raise ValueError(f"every key{where} is masked (-inf): at least one score per row must be finite")
    return smax


def log_prior(prior, scores: torch.Tensor) -> torch.Tensor:
    """log(pi), validated and converted to the dtype and device of ``scores``; -inf where pi is 0."""
    if prior is None:
        raise ValueError("prior-softmax needs a prior: a tensor of weights over the keys that sums to 1")
    if not isinstance(prior, torch.Tensor) or not prior.is_floating_point():
        raise ValueError(f"prior must be a floating-point torch tensor, got {type(prior).__name__}")
    if prior.dim() == 0 or prior.shape[-1] != scores.shape[-1]:
        raise ValueError(f"prior has shape {tuple(prior.shape)} but scores have {scores.shape[-1]} keys "
                         f"(shape {tuple(scores.shape)}); the prior needs one weight per key")
    try:
        shape = torch.broadcast_shapes(prior.shape, scores.shape)
    except RuntimeError:
        shape = None
    if shape != scores.shape:
        raise ValueError(f"prior of shape {tuple(prior.shape)} does not broadcast to scores of shape "
                         f"{tuple(scores.shape)}")
    prior = prior.to(device=scores.device, dtype=scores.dtype)
    pd = prior.detach()
    low, total = pd.amin(dim=-1), pd.sum(dim=-1)
    m = prior.shape[-1]
    tol = max(1e-6, 16 * math.sqrt(m) * torch.finfo(prior.dtype).eps)  # float32 sums of many keys round
    bad = torch.isnan(low) | (low < 0) | ~((total - 1).abs() <= tol)
    if bool(bad.any()):
        i = first(bad)
        where = of_row(i, prior.shape[:-1])
        lo, tot = float(low.reshape(-1)[i]), float(total.reshape(-1)[i])
        if math.isnan(lo):
            raise ValueError(f"prior{where} contains NaN")
        if lo < 0:
            raise ValueError(f"prior{where} has a negative weight ({lo:g}); prior weights must be >= 0")
        if tot == 0:
            raise ValueError(f"prior{where} is zero on every key; it must put weight on at least one key")
        raise ValueError(f"prior{where} sums to {tot:.6g}, not 1; normalise it (prior / prior.sum(-1, keepdim=True))")
    # where() keeps the gradient finite at pi = 0 (the clamped branch is not selected there)
    return torch.where(prior > 0, prior.clamp_min(torch.finfo(prior.dtype).tiny).log(),
                       torch.tensor(-math.inf, dtype=prior.dtype, device=prior.device))


def tau_for(dtype: torch.dtype, tau: float) -> float:
    """tau as the tensor's dtype sees it: a float32 op turns 1e-50 into 0 and 1e50 into inf (0/0 = NaN)."""
    fi = torch.finfo(dtype)
    return min(max(tau, fi.tiny), fi.max)
