"""The input checks and conversions every part of wviz.fenchel shares (float64 work, the output dtype)."""
from __future__ import annotations


import torch


F64 = torch.float64


def _tensor(x, name: str, device=None) -> torch.Tensor:
    try:
        out = torch.as_tensor(x, device=device)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"{name} must be an array of numbers, got {type(x).__name__}") from None
    if not (out.is_floating_point() or out.dtype in (torch.int32, torch.int64, torch.bool)):
        raise ValueError(f"{name} must hold real numbers, got {out.dtype}")
    out = out.to(F64)
    if not bool(torch.isfinite(out).all()):
        raise ValueError(f"{name} contains NaN or inf")
    return out


def _positive(x, name: str, device) -> torch.Tensor:
    """alpha or gamma: a positive finite float or a tensor of them (broadcast over the batch)."""
    try:
        value = torch.as_tensor(x, dtype=F64, device=device)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"{name} must be a positive number, got {x!r}") from None
    if not bool((torch.isfinite(value) & (value > 0)).all()):
        bad = value[~(torch.isfinite(value) & (value > 0))].reshape(-1)[0].item()
        raise ValueError(f"{name} must be a positive finite number, got {bad:g}")
    return value


def _templates(templates, name: str = "templates", device=None) -> torch.Tensor:
    t = _tensor(templates, name, device)
    if t.ndim < 2 or t.shape[-2] == 0 or t.shape[-1] == 0:
        raise ValueError(f"{name} must be an array (n, d) of n >= 1 templates in d >= 1 dimensions, got shape "
                         f"{tuple(t.shape)}")
    return t


def _distribution(u, n: int, device, name: str = "u") -> torch.Tensor:
    """u (..., n): non-negative, summing to 1 along the last axis."""
    u = _tensor(u, name, device)
    if u.ndim < 1 or u.shape[-1] != n:
        raise ValueError(f"{name} must have one weight per template ({n}), got shape {tuple(u.shape)}")
    if bool((u < 0).any()):
        raise ValueError(f"{name} is not a distribution: it has a negative weight ({u.min().item():.4g})")
    total = u.sum(-1)
    if not bool(((total - 1).abs() <= 1e-6).all()):
        bad = total.reshape(-1)[((total - 1).abs() > 1e-6).reshape(-1)][0].item()
        raise ValueError(f"{name} is not a distribution: its weights sum to {bad:.6g}, not 1")
    return u / total[..., None]   # exact normalisation of a sum within rounding of 1


def _vector(z, d: int, name: str, device) -> torch.Tensor:
    z = _tensor(z, name, device)
    if z.ndim < 1 or z.shape[-1] != d:
        raise ValueError(f"{name} must be a vector of dimension d = {d} (the templates' dimension), got shape "
                         f"{tuple(z.shape)}")
    return z


def _batch(*shapes) -> torch.Size:
    try:
        return torch.broadcast_shapes(*shapes)
    except RuntimeError:
        raise ValueError("the batch shapes " + ", ".join(str(tuple(s)) for s in shapes) + " do not match") from None


def _out_dtype(z) -> torch.dtype:
    return z.dtype if isinstance(z, torch.Tensor) and z.dtype in (torch.float32, torch.float64) else F64


def _scores(t, v):
    """<t_i, v> (..., n) for t (..., n, d), v (..., d); written as v^T t^T so that a template matrix shared by a
    batch of v is not copied once per v (t @ v[..., None] would expand it)."""
    return (v[..., None, :] @ t.mT)[..., 0, :]


def _spd_solve(H, b):
    """H^-1 b for symmetric positive definite H (..., d, d) and vectors b (..., d). A single H shared by a batch of
    b is factorised once and solved against all of them as columns (no per-vector copy of H)."""
    L = torch.linalg.cholesky(H)
    d = b.shape[-1]
    if H.ndim == 2:
        return torch.cholesky_solve(b.reshape(-1, d).mT, L).mT.reshape(b.shape)
    shape = _batch(H.shape[:-2], b.shape[:-1])
    return torch.cholesky_solve(b.expand(*shape, d)[..., None], L.expand(*shape, d, d))[..., 0]
