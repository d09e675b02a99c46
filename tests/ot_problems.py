"""Problems and references shared by the tests of wviz.ot (tests/test_ot_*.py)."""
from __future__ import annotations

import warnings

import ot as pot
import torch

from wviz import ot

F64 = torch.float64


def random_problem(n, m, seed=0, dtype=F64, uniform=False):
    """Random masses (or uniform ones) and a squared-Euclidean cost between points in [0, 1]^2, max 1."""
    g = torch.Generator().manual_seed(seed)
    x, y = torch.rand(n, 2, generator=g, dtype=dtype), torch.rand(m, 2, generator=g, dtype=dtype)
    C = ot.cost_matrix(x, y)
    C = C / C.max()
    if uniform:
        a, b = torch.full((n,), 1 / n, dtype=dtype), torch.full((m,), 1 / m, dtype=dtype)
    else:
        a, b = torch.rand(n, generator=g, dtype=dtype) + 0.1, torch.rand(m, generator=g, dtype=dtype) + 0.1
        a, b = a / a.sum(), b / b.sum()
    return a, b, C


def separated_clouds(n, dtype=F64):
    """Two clouds 10 apart: min cost / gamma is huge, where POT's kernel solver returns an all-zero plan."""
    g = torch.Generator().manual_seed(1)
    x = torch.rand(n, 2, generator=g, dtype=dtype)
    y = torch.rand(n, 2, generator=g, dtype=dtype) + 10
    C = ot.cost_matrix(x, y)
    a = torch.full((n,), 1 / n, dtype=dtype)
    return a, a.clone(), C


def l1_errors(P, a, b):
    """||P 1 - a||_1 and ||P^T 1 - b||_1 as Python floats, computed here and not by wviz.ot."""
    return float((P.sum(-1) - a).abs().sum()), float((P.sum(-2) - b).abs().sum())


def pot_log(a, b, C, gamma):
    """POT's log-domain Sinkhorn run to (near) machine precision."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pot.bregman.sinkhorn_log(a.numpy(), b.numpy(), C.numpy(), gamma, stopThr=1e-15, numItermax=100000)
