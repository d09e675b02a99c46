"""Built-in sample data: 2-D point clouds for the transport pages (reproducible from a seed, no downloads)."""
from __future__ import annotations

import math

import torch

PRESETS = ("gaussians", "rings", "moons", "random")


def _ring(n: int, radius: float, center, noise: float, g: torch.Generator, dtype) -> torch.Tensor:
    theta = 2 * math.pi * torch.rand(n, generator=g, dtype=dtype)
    pts = radius * torch.stack([theta.cos(), theta.sin()], -1) + torch.tensor(center, dtype=dtype)
    return pts + noise * torch.randn(n, 2, generator=g, dtype=dtype)


def _moon(n: int, upper: bool, noise: float, g: torch.Generator, dtype) -> torch.Tensor:
    theta = math.pi * torch.rand(n, generator=g, dtype=dtype)
    if upper:
        pts = torch.stack([theta.cos(), theta.sin()], -1)
    else:  # the second half-moon, shifted into the first one's opening (as in scikit-learn's make_moons)
        pts = torch.stack([1 - theta.cos(), 0.5 - theta.sin()], -1)
    return pts + noise * torch.randn(n, 2, generator=g, dtype=dtype)


def point_clouds(preset: str, n: int, m: int, seed: int = 0, dtype=torch.float64):
    """Source points x (n, 2) and target points y (m, 2) of a named preset."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
    if n < 1 or m < 1:
        raise ValueError("each cloud needs at least one point")
    g = torch.Generator().manual_seed(int(seed))
    if preset == "gaussians":
        x = torch.randn(n, 2, generator=g, dtype=dtype) * 0.35 + torch.tensor([-1.0, 0.0], dtype=dtype)
        y = torch.randn(m, 2, generator=g, dtype=dtype) * torch.tensor([0.2, 0.6], dtype=dtype) \
            + torch.tensor([1.0, 0.3], dtype=dtype)
    elif preset == "rings":
        x = _ring(n, 0.5, (0.0, 0.0), 0.04, g, dtype)
        y = _ring(m, 1.2, (0.3, 0.0), 0.04, g, dtype)
    elif preset == "moons":
        x = _moon(n, True, 0.06, g, dtype)
        y = _moon(m, False, 0.06, g, dtype)
    else:
        x = torch.rand(n, 2, generator=g, dtype=dtype)
        y = torch.rand(m, 2, generator=g, dtype=dtype)
    return x, y


SEQUENCES = ("noisy sinusoids", "random")


def sequence(preset: str, n: int, d: int, seed: int = 0, noise: float = 0.1, dtype=torch.float64) -> torch.Tensor:
    """A sequence X (n, d) of n tokens in R^d: channel c of "noisy sinusoids" is sin(w_c t + phi_c) + noise, with
    frequencies and phases drawn from ``seed``; "random" is i.i.d. N(0, 1)."""
    if preset not in SEQUENCES:
        raise ValueError(f"unknown sequence preset {preset!r}; choose from {', '.join(SEQUENCES)}")
    if n < 1 or d < 1:
        raise ValueError("a sequence needs at least one token and one channel")
    g = torch.Generator().manual_seed(int(seed))
    if preset == "random":
        return torch.randn(n, d, generator=g, dtype=dtype)
    t = torch.linspace(0, 2 * math.pi, n, dtype=dtype).unsqueeze(-1)
    w = 1 + 3 * torch.rand(d, generator=g, dtype=dtype)
    phi = 2 * math.pi * torch.rand(d, generator=g, dtype=dtype)
    return torch.sin(w * t + phi) + noise * torch.randn(n, d, generator=g, dtype=dtype)


def projections(d: int, seed: int | None, dtype=torch.float64) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """W_Q, W_K, W_V (d, d): identities when ``seed`` is None, else i.i.d. N(0, 1/d) entries from ``seed``
    (the 1/d variance keeps XW on the scale of X)."""
    if seed is None:
        eye = torch.eye(d, dtype=dtype)
        return eye, eye.clone(), eye.clone()
    g = torch.Generator().manual_seed(int(seed))
    W_Q, W_K, W_V = (torch.randn(d, d, generator=g, dtype=dtype) / d ** 0.5 for _ in range(3))
    return W_Q, W_K, W_V
