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
    draws = torch.stack([p, p])
    s = metrics.ood_scores(p, torch.tensor([1.0, 2.0]), draws, torch.tensor([3.0, 4.0]), torch.tensor([5.0, 6.0]))
    torch.testing.assert_close(s["max-softmax"], torch.tensor([0.0, 0.5]))
    torch.testing.assert_close(s["embedding covariance"], torch.tensor([3.0, 4.0]))
    torch.testing.assert_close(s["prototype distance"], torch.tensor([5.0, 6.0]))
    torch.testing.assert_close(s["predictive entropy"], torch.tensor([0.0, math.log(2)]))
    assert set(s) == set(metrics.SCORES) - {metrics.FISHER}   # which needs reference images (fisher_combination)
    assert set(metrics.ood_scores(p)) == set(metrics.SCORES) - set(metrics.EPISTEMIC)


def test_mutual_information_by_hand_and_against_scipy():
    from scipy.stats import entropy as scipy_entropy

    # two draws, each sure of a different class: the mean is (1/2, 1/2), each draw has entropy 0: I = log 2
    sure = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])
    torch.testing.assert_close(metrics.mutual_information(sure), torch.tensor([math.log(2)]))
    # draws that agree carry no epistemic spread however flat they are: I = 0 (the entropy is all aleatoric)
    flat = torch.full((4, 1, 3), 1 / 3)
    torch.testing.assert_close(metrics.mutual_information(flat), torch.tensor([0.0]))
    # random draws: H(mean) - mean H, each entropy from scipy; 0 <= I <= H(mean) <= log C
    g = torch.Generator().manual_seed(0)
    d = torch.rand(8, 5, 4, generator=g, dtype=torch.float64).softmax(-1)
    ref = [scipy_entropy(d[:, i].mean(0)) - np.mean([scipy_entropy(d[s, i]) for s in range(8)]) for i in range(5)]
    mi = metrics.mutual_information(d)
    np.testing.assert_allclose(mi.numpy(), ref, rtol=1e-12)
    assert (mi.numpy() > 0).all() and (mi.numpy() <= scipy_entropy(d.mean(0).numpy().T)).all()


def test_class_spread_is_the_variation_ratio():
    # four draws of one image voting classes 0, 0, 1, 2: the modal class has 2 of 4 votes, spread 1 - 2/4
    votes = torch.tensor([0, 0, 1, 2])
    draws = torch.nn.functional.one_hot(votes, 3).float()[:, None] * 0.8 + 0.2 / 3
    torch.testing.assert_close(metrics.class_spread(draws), torch.tensor([0.5]))
    agree = torch.tensor([[[0.6, 0.4]], [[0.9, 0.1]]])
    torch.testing.assert_close(metrics.class_spread(agree), torch.tensor([0.0]))
    with pytest.raises(ValueError, match=r"\(S, N, C\)"):
        metrics.class_spread(torch.rand(3, 2))


def test_bad_shapes():
    with pytest.raises(ValueError, match=r"must be \(N, C\)"):
        metrics.accuracy(torch.rand(3), torch.tensor([0, 1, 2]))


def test_the_fisher_combination_is_fishers_statistic_of_the_tail_p_values():
    """tail_p against a count by numpy; the combination is half scipy's Fisher statistic (-2 sum log p) of those
    p-values; an image far out by one score alone scores above 95 % of the reference images (half Fisher's statistic
    of two uniform p-values is Gamma(2, 1), whose 95 % quantile is 4.74)."""
    from scipy.stats import combine_pvalues

    g = torch.Generator().manual_seed(0)
    ref = {k: torch.randn(200, generator=g) for k in metrics.COMBINED}
    new = {k: torch.randn(30, generator=g) for k in metrics.COMBINED}
    for k in metrics.COMBINED:
        want = (1 + (ref[k].numpy()[None, :] >= new[k].numpy()[:, None]).sum(1)) / 201
        np.testing.assert_allclose(metrics.tail_p(new[k], ref[k]).numpy(), want, rtol=1e-6)
    got = metrics.fisher_combination(new, ref)
    for i in range(30):
        p = [float(metrics.tail_p(new[k][i:i + 1], ref[k])) for k in metrics.COMBINED]
        assert float(got[i]) == pytest.approx(combine_pvalues(p, method="fisher").statistic / 2, rel=1e-5)
    far = {"predictive entropy": torch.tensor([0.0]), "prototype distance": torch.tensor([10.0])}
    assert float(metrics.fisher_combination(far, ref)) > float(metrics.fisher_combination(ref, ref).quantile(0.95))
