"""Exact optimal transport: eq. (23) of 002 at gamma = 0, by POT's network simplex."""
from __future__ import annotations

import warnings

import numpy as np
import torch

from .problem import OTResult, dot, finish, marginal_error, prepare


@torch.no_grad()
def emd(a, b, C, *, max_iter: int | None = None) -> OTResult:
    """Exact optimal transport min_{P in U(a, b)} <C, P> (eq. (23) of 002 with gamma -> 0), by POT's network simplex
    (ot.emd, Bonneel et al. 2011) in float64 on the CPU, one problem of the batch at a time.

    max_iter: the simplex's numItermax, by default generous (max(10^6, 100 n m)). POT returns a feasible but
    possibly suboptimal plan, with only a warning, when it runs out of iterations: this is reported as
    converged=False. f, g are POT's dual potentials (f_i + g_j <= C_ij, with equality on the support of P).

    On the line with a convex cost the optimal plan is the monotone map, sorted points to sorted points:

    >>> import torch
    >>> from wviz.ot import cost_matrix, emd
    >>> x = torch.tensor([[0.0], [1.0], [2.0]], dtype=torch.float64)
    >>> y = torch.tensor([[2.5], [0.5], [1.5]], dtype=torch.float64)
    >>> a = torch.full((3,), 1 / 3, dtype=torch.float64)
    >>> res = emd(a, a, cost_matrix(x, y))
    >>> (3 * res.plan).round().int().tolist()
    [[0, 1, 0], [0, 0, 1], [1, 0, 0]]
    >>> round(float(res.cost), 4), bool(res.converged)
    (0.25, True)
    """
    import ot as pot

    a, b, C, shape, _ = prepare(a, b, C)
    B, n, m = C.shape
    numitermax = int(max_iter) if max_iter is not None else max(10 ** 6, 100 * n * m)
    a64, b64, C64 = (t.detach().to("cpu", torch.float64).numpy() for t in (a, b, C))
    plans, fs, gs, ok = [], [], [], []
    for k in range(B):
        ak, bk = a64[k], b64[k] * (a64[k].sum() / b64[k].sum())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # a non-optimal return is reported through converged instead
            P, log = pot.emd(ak, bk, C64[k], numItermax=numitermax, log=True)
        plans.append(P)
        fs.append(np.where(ak > 0, log["u"], -np.inf))
        gs.append(np.where(bk > 0, log["v"], -np.inf))
        ok.append(log["result_code"] == 1)
    as_t = lambda x, dt=C.dtype: torch.as_tensor(np.stack(x), dtype=dt, device=C.device)  # noqa: E731
    P = as_t(plans)
    cost = dot(C, P)
    err = marginal_error(a, b, P.sum(-1), P.sum(-2))
    return finish(shape, P, cost, cost.clone(), 0, err, as_t(ok, torch.bool), [], as_t(fs), as_t(gs), 0.0,
                  solved_on="cpu")   # POT's network simplex runs on the host
