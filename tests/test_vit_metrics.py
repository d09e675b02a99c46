"""wviz.vit.metrics against hand-computed cases and scikit-learn."""
import math

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from wviz.vit import metrics


def test_accuracy_and_nll_by_hand():
    p = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3], [0.25, 0.25, 0.5], [0.4, 0.35, 0.25]])
    y = torch.tensor([0, 2, 2, 1])
    assert metrics.accuracy(p, y) == 0.5
    assert abs(metrics.nll(p, y) - -(math.log(0.7) + math.log(0.3) + math.log(0.5) + math.log(0.35)) / 4) < 1e-6


def test_ece_by_hand_with_confidence_one_in_the_last_bin():
    # confidences 1.0 (correct), 0.95 (wrong), 0.5 (correct), 0.52 (wrong); 15 bins of width 1/15
    p = torch.tensor([[1.0, 0.0], [0.95, 0.05], [0.5, 0.5], [0.48, 0.52]])
    y = torch.tensor([0, 1, 0, 0])
    rel = metrics.reliability(p, y)
    # bin 14 = [14/15, 1]: conf 1.0 and 0.95, acc 1/2; bin 7 = [7/15, 8/15): conf 0.5 and 0.52, acc 1/2
    assert rel.count[14] == 2 and rel.count[7] == 2 and rel.count.sum() == 4
    ref = 2 / 4 * abs(0.5 - 0.975) + 2 / 4 * abs(0.5 - 0.51)
    assert abs(rel.ece - ref) < 1e-6 and abs(metrics.ece(p, y) - ref) < 1e-6
    assert abs(float(rel.confidence[14]) - 0.975) < 1e-6 and float(rel.accuracy[7]) == 0.5
    assert torch.isnan(rel.accuracy[0]) and len(rel.edges) == 16


def test_ece_against_a_loop_reference():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(3 * torch.randn(500, 10, generator=g), -1)
    y = torch.randint(0, 10, (500,), generator=g)
    conf, pred = p.max(-1)
    ref = 0.0
    for k in range(15):
        lo, hi = k / 15, (k + 1) / 15
        sel = (conf >= lo) & ((conf < hi) if k < 14 else (conf <= 1))
        if sel.any():
            ref += sel.sum().item() / 500 * abs((pred[sel] == y[sel]).float().mean().item() - conf[sel].mean().item())
    assert abs(metrics.ece(p, y) - ref) < 1e-6


def test_auroc_against_sklearn_with_ties():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 5, 200).astype(float)
    b = rng.integers(2, 8, 150).astype(float)
    ref = roc_auc_score(np.r_[np.zeros(200), np.ones(150)], np.r_[a, b])
    assert abs(metrics.auroc(torch.tensor(a), torch.tensor(b)) - ref) < 1e-12
    assert metrics.auroc(torch.tensor([0.0, 1.0]), torch.tensor([2.0, 3.0])) == 1.0
    assert metrics.auroc(torch.tensor([1.0]), torch.tensor([1.0])) == 0.5
    with pytest.raises(ValueError, match="at least one"):
        metrics.auroc(torch.tensor([]), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="NaN or inf"):
        metrics.auroc(torch.tensor([float("nan")]), torch.tensor([1.0]))


def test_ood_scores():
    p = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    s = metrics.ood_scores(p, torch.tensor([1.0, 2.0]))
    torch.testing.assert_close(s["max-softmax"], torch.tensor([0.0, 0.5]))
    torch.testing.assert_close(s["predictive entropy"], torch.tensor([0.0, math.log(2)]))
    assert set(s) == set(metrics.SCORES)
    assert "covariance trace" not in metrics.ood_scores(p)


def test_bad_shapes():
    with pytest.raises(ValueError, match=r"must be \(N, C\)"):
        metrics.accuracy(torch.rand(3), torch.tensor([0, 1, 2]))
