"""wviz.ot.costs: cost_matrix against scipy's distances."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.spatial.distance import cdist

from tests.ot_problems import F64
from wviz import ot


@pytest.mark.parametrize("kind,metric", [("sqeuclidean", "sqeuclidean"), ("euclidean", "euclidean"),
                                         ("l1", "cityblock"), ("cosine", "cosine")])
def test_cost_matrix_matches_scipy(kind, metric):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(7, 5, generator=g, dtype=F64), torch.randn(9, 5, generator=g, dtype=F64)
    C = ot.cost_matrix(x, y, kind)
    assert C.shape == (7, 9)
    np.testing.assert_allclose(C.numpy(), cdist(x.numpy(), y.numpy(), metric), rtol=1e-10, atol=1e-12)


def test_cost_matrix_dot_and_batches():
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(3, 4, 6, 2, generator=g, dtype=F64), torch.randn(6, 2, generator=g, dtype=F64)
    C = ot.cost_matrix(x, y, "dot")
    assert C.shape == (3, 4, 6, 6)
    torch.testing.assert_close(C, -(x @ y.T))
    Cb = ot.cost_matrix(x, y)
    torch.testing.assert_close(Cb[2, 1], ot.cost_matrix(x[2, 1], y))


def test_cost_matrix_bad_input():
    x = torch.zeros(3, 2)
    with pytest.raises(ValueError, match="unknown cost kind"):
        ot.cost_matrix(x, x, "manhattan")
    with pytest.raises(ValueError, match="same dimension"):
        ot.cost_matrix(x, torch.zeros(3, 4))
    with pytest.raises(ValueError, match="non-zero vectors"):
        ot.cost_matrix(x, x, "cosine")
    with pytest.raises(ValueError, match="NaN or inf"):
        ot.cost_matrix(torch.tensor([[float("nan"), 0.0]]), x)
