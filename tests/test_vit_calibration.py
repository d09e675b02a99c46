"""wviz.vit.calibration and wviz.vit.intervals against independent references: temperature scaling against a
brute-force NLL grid over tau, split conformal's coverage on synthetic data at its nominal level (and crepes' sets
against the closed-form quantile), risk-coverage against a loop, the weighted AUROC and ECE of a bootstrap
resample against the metrics on the resampled data itself."""
import math

import pytest
import torch

from wviz.vit import calibration as cal
from wviz.vit import intervals
from wviz.vit.metrics import auroc, ece


def _synthetic(n: int, c: int = 5, seed: int = 0, sharpen: float = 1.0):
    """Logits whose softmax is the labels' true distribution, times ``sharpen`` (> 1: overconfident)."""
    g = torch.Generator().manual_seed(seed)
    true = 2 * torch.randn(n, c, generator=g, dtype=torch.float64)
    labels = torch.multinomial(torch.softmax(true, -1), 1, generator=g)[:, 0]
    return sharpen * true, labels


def test_temperature_is_the_minimiser_of_a_brute_force_nll_grid():
    logits, labels = _synthetic(3000, sharpen=2.5)
    draws = logits[None] + 0.3 * torch.randn(8, *logits.shape, generator=torch.Generator().manual_seed(1),
                                             dtype=torch.float64)
    def nll(x, t):
        if x.dim() == 3:
            return float(-torch.softmax(x / t, -1).mean(0).gather(1, labels[:, None]).log().mean())
        return float(-torch.log_softmax(x / t, -1).gather(1, labels[:, None]).mean())

    for x in (logits, draws):  # one softmax, and a Monte-Carlo mean of softmaxes
        tau = cal.fit_temperature(x, labels)
        # a grid in log tau, steps 0.0115, then one of steps 0.000115 over the two steps each side of its best
        coarse = torch.linspace(math.log(0.1), math.log(10), 401)
        i = int(torch.tensor([nll(x, t) for t in coarse.exp().tolist()]).argmin())
        grid = torch.linspace(float(coarse[max(i - 2, 0)]), float(coarse[min(i + 2, 400)]), 401).exp()
        nlls = torch.tensor([nll(x, t) for t in grid.tolist()], dtype=torch.float64)
        best = float(grid[nlls.argmin()])
        assert abs(math.log(tau) - math.log(best)) < 2e-3, (tau, best)
        assert cal.tempered_nll(x, labels, tau) <= float(nlls.min()) + 1e-9
    assert 2.2 < cal.fit_temperature(logits, labels) < 2.8  # it undoes the sharpening


def test_tempering_keeps_the_argmax_and_tau_one_is_the_softmax():
    logits, _ = _synthetic(50)
    torch.testing.assert_close(cal.tempered(logits, 1.0), torch.softmax(logits, -1))
    assert torch.equal(cal.tempered(logits, 3.0).argmax(-1), logits.argmax(-1))
    with pytest.raises(ValueError, match="positive"):
        cal.tempered(logits, 0.0)


def test_split_conformal_covers_at_its_nominal_level():
    """Over many exchangeable calibration / test draws the coverage averages within [1 - alpha, 1 - alpha +
    1 / (n + 1)] (Vovk et al. 2005), even for a miscalibrated model; each draw's own coverage scatters around it."""
    alpha, n = 0.1, 200
    covered = []
    for seed in range(200):
        logits, labels = _synthetic(2 * n, seed=seed, sharpen=2.0)
        p = torch.softmax(logits, -1)
        sets = cal.conformal_sets((p[:n], labels[:n]), {"test": (p[n:], labels[n:])}, alpha)
        covered.append(sets.coverage["test"])
    mean = sum(covered) / len(covered)
    se = torch.tensor(covered).std().item() / math.sqrt(len(covered))
    assert 1 - alpha - 3 * se <= mean <= 1 - alpha + 1 / (n + 1) + 3 * se, (mean, se)


def test_crepes_sets_are_the_closed_form_quantile_sets():
    logits, labels = _synthetic(600, seed=3)
    p = torch.softmax(logits, -1)
    for alpha in (0.05, 0.1, 0.3):
        q = cal.conformal_quantile(p[:300], labels[:300], alpha)
        sets = cal.conformal_sets((p[:300], labels[:300]), {"test": (p[300:], labels[300:])}, alpha)
        assert sets.q == q
        torch.testing.assert_close(sets.sizes["test"], cal.prediction_sets(p[300:], q).sum(1))
    # the k-th smallest score, k = ceil((n + 1)(1 - alpha)): by hand on four scores
    probs = torch.tensor([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7], [0.8, 0.2]])
    assert cal.conformal_quantile(probs, torch.tensor([0, 0, 1, 1]), 0.4) == pytest.approx(0.4)
    assert cal.conformal_quantile(probs, torch.tensor([0, 0, 1, 1]), 0.01) == 1.0  # too few images for 99 %


def test_risk_coverage_against_a_loop():
    g = torch.Generator().manual_seed(0)
    scores, correct = torch.rand(40, generator=g), torch.rand(40, generator=g) > 0.3
    rc = cal.risk_coverage(scores, correct)
    order = sorted(range(40), key=lambda i: float(scores[i]))
    for k in range(1, 41):
        kept = order[:k]
        assert float(rc.risk[k - 1]) == pytest.approx(sum(not bool(correct[i]) for i in kept) / k)
    assert rc.aurc == pytest.approx(float(rc.risk.mean()))


def test_the_perfect_curve_is_the_error_first_scores_and_no_score_lies_below_it():
    """perfect(rc) is risk_coverage of the score that is 1 on the errors and 0 elsewhere, and at every coverage no
    ordering of the same predictions (200 random scores) has a lower risk."""
    g = torch.Generator().manual_seed(0)
    correct = torch.rand(50, generator=g) > 0.2
    best = cal.perfect(cal.risk_coverage(torch.rand(50, generator=g), correct))
    error_first = cal.risk_coverage((~correct).double(), correct)
    torch.testing.assert_close(best.risk, error_first.risk)
    assert best.aurc == pytest.approx(error_first.aurc)
    for _ in range(200):
        rc = cal.risk_coverage(torch.rand(50, generator=g), correct)
        assert bool((best.risk <= rc.risk + 1e-12).all()) and best.aurc <= rc.aurc


def test_a_resample_weighted_is_the_resampled_data():
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(30, generator=g), torch.rand(20, generator=g) + 0.2
    a[:5] = b[:5]  # ties count half
    w_in, w_out = intervals.resample_counts(30, 5, seed=1), intervals.resample_counts(20, 5, seed=2)
    fast = intervals.weighted_auroc(a, b, w_in, w_out)
    for r in range(5):
        ra = a.repeat_interleave(w_in[r].long())
        rb = b.repeat_interleave(w_out[r].long())
        assert float(fast[r]) == pytest.approx(auroc(ra, rb))
    probs = torch.softmax(torch.randn(30, 4, generator=g) * 2, -1)
    labels = torch.randint(0, 4, (30,), generator=g)
    fast = intervals.weighted_ece(probs, labels, w_in)
    for r in range(5):
        idx = torch.arange(30).repeat_interleave(w_in[r].long())
        assert float(fast[r]) == pytest.approx(ece(probs[idx], labels[idx]), abs=1e-6)


def test_a_weighted_selective_risk_is_the_risk_of_the_resampled_data():
    """Counts 1: risk_coverage's risk with 27 of 30 images kept; a resample's counts: the risk of the resampled data
    (24 of its 30 kept at 80 %); an image at the boundary kept in part, by hand."""
    g = torch.Generator().manual_seed(0)
    scores, correct = torch.rand(30, generator=g), torch.rand(30, generator=g) > 0.3
    assert float(intervals.weighted_selective_risk(scores, correct, torch.ones(1, 30), 0.9)[0]) == pytest.approx(
        float(cal.risk_coverage(scores, correct).risk[26]))
    w = intervals.resample_counts(30, 5, seed=3)
    fast = intervals.weighted_selective_risk(scores, correct, w, 0.8)
    for r in range(5):
        idx = torch.arange(30).repeat_interleave(w[r].long())
        assert float(fast[r]) == pytest.approx(float(cal.risk_coverage(scores[idx], correct[idx]).risk[23]))
    # the largest score counted twice: 31 in all, 27.9 kept, the 28th image in order for 0.9 of itself
    order = torch.argsort(scores, stable=True)
    counts = torch.ones(1, 30)
    counts[0, order[-1]] = 2
    wrong = (~correct[order]).double()
    by_hand = (wrong[:27].sum() + 0.9 * wrong[27]) / 27.9
    assert float(intervals.weighted_selective_risk(scores, correct, counts, 0.9)[0]) == pytest.approx(float(by_hand))


def test_the_paired_interval_covers_a_null_difference_and_excludes_a_real_one():
    g = torch.Generator().manual_seed(0)
    x_in, x_out = torch.randn(300, generator=g), torch.randn(300, generator=g) + 1
    same = intervals.auroc_difference([(x_in, x_out)], [(x_in, x_out)], boot=300)
    assert same.estimate == 0 and same.low == 0 and same.high == 0
    noisy = [(x_in + 2 * torch.randn(300, generator=g), x_out + 2 * torch.randn(300, generator=g))]
    d = intervals.auroc_difference([(x_in, x_out)], noisy, boot=300)
    assert d.estimate > 0 and d.excludes_zero and d.low < d.estimate < d.high


def test_reliability_bands_hold_the_bins_accuracy():
    logits, labels = _synthetic(2000, seed=5)
    p = torch.softmax(logits, -1)
    low, high = cal.reliability_bands(p, labels, boot=200)
    conf, pred = p.max(-1)
    k = (conf * 15).floor().long().clamp(0, 14)
    for b in range(15):
        inside = k == b
        if inside.sum() >= 30:
            acc = float((pred[inside] == labels[inside]).double().mean())
            assert float(low[b]) <= acc <= float(high[b])
