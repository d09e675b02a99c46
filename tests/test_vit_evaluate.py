"""wviz.vit.evaluate: the report's epistemic scores and its corruption AUROCs against scikit-learn on the same
predictions, for a tiny untrained stochastic model."""
import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from wviz.vit import data, evaluate, metrics
from wviz.vit.model import PROTOTYPE_FLOOR, StochasticViT, ViTConfig, build_model, fit_prototypes


def test_report_scores_and_corruption_aurocs_against_sklearn():
    torch.manual_seed(0)
    model = StochasticViT(ViTConfig(dim=8, depth=1, heads=2)).eval()
    x, y = data.load_dataset("digits", "test")
    x, y = x[:60], y[:60]
    noise = data.ood_set("uniform noise", 60)
    report = evaluate.evaluate(model, x, y, ood_sets={"uniform noise": noise}, samples=4)
    clean = evaluate.predict(model, x, 4)
    assert clean.draws.shape == (4, 60, 10)
    torch.testing.assert_close(clean.draws.mean(0), clean.probs)
    out = evaluate.predict(model, noise, 4)
    for score, (s_in, s_out, auc) in report.ood["uniform noise"].items():
        labels = np.r_[np.zeros(60), np.ones(60)]
        assert abs(auc - roc_auc_score(labels, np.r_[s_in.numpy(), s_out.numpy()])) < 1e-12, score
    torch.testing.assert_close(report.ood["uniform noise"]["mutual information"][1],
                               metrics.mutual_information(out.draws))
    assert set(report.corruption_auroc) == set(data.CORRUPTIONS)
    for kind in data.CORRUPTIONS:
        # no prototypes, no reference: no prototype distance, no Fisher combination
        assert set(report.corruption_auroc[kind]) == set(metrics.SCORES) - {"prototype distance", metrics.FISHER}
        for sev in (1, 5):
            bad = evaluate.predict(model, data.corrupt(x, kind, sev, seed=sev), 4).scores()
            for score, s_in in clean.scores().items():
                labels = np.r_[np.zeros(60), np.ones(60)]
                want = roc_auc_score(labels, np.r_[s_in.numpy(), bad[score].numpy()])
                assert abs(float(report.corruption_auroc[kind][score][sev - 1]) - want) < 1e-6, (kind, sev, score)
    summary = evaluate.summary(report)
    assert summary["corruption_auroc"]["blur"]["class spread"] == [
        round(float(a), 4) for a in report.corruption_auroc["blur"]["class spread"]]


def test_a_multi_seed_summary_is_the_mean_of_its_seeds_and_keeps_each():
    torch.manual_seed(1)
    model = StochasticViT(ViTConfig(dim=8, depth=1, heads=2)).eval()
    x, y = data.load_dataset("digits", "test")
    x, y = x[:40], y[:40]
    sets = {"uniform noise": data.ood_set("uniform noise", 40)}
    reports = evaluate.evaluate_seeds(model, x, y, sets, samples=4, seeds=3, corruptions=())
    assert len(reports) == 3
    one = [evaluate.summary(evaluate.evaluate(model, x, y, sets, 4, (), seed=1000 * k)) for k in range(3)]
    out = evaluate.summary_seeds(reports)
    assert out["mc"]["seeds"] == 3 and out["mc"]["accuracy"] == [s["accuracy"] for s in one]
    assert out["ece"] == round(sum(s["ece"] for s in one) / 3, 4)
    assert out["mc"]["auroc"]["uniform noise"]["mutual information"] == [
        s["auroc"]["uniform noise"]["mutual information"] for s in one]
    assert len(set(out["mc"]["ece"])) > 1                                   # the draws differ
    twin = build_model(ViTConfig(kind="deterministic", dim=8, depth=1, heads=2)).eval()
    assert len(evaluate.evaluate_seeds(twin, x, y, sets, samples=4, seeds=3, corruptions=())) == 1
    d = evaluate.twin_intervals(reports, evaluate.evaluate(twin, x, y, sets, 4, ()), y)
    assert d["best_score"]["uniform noise"] in metrics.SCORES and len(d["ece"]) == 3
    low, high = d["best_auroc"]["uniform noise"][1:]
    assert low <= d["best_auroc"]["uniform noise"][0] <= high


def test_covariate_shift_against_sklearn_and_its_null_case():
    """Its accuracy is the share named right, its AUROC scikit-learn's on the same draws (the test split's scores
    as a report holds them); the test split against itself is no shift at all (every AUROC 0.5, the test
    accuracy)."""
    torch.manual_seed(0)
    model = StochasticViT(ViTConfig(dim=8, depth=1, heads=2)).eval()
    x, y = data.load_dataset("digits", "test")
    x, y, other = x[:50], y[:50], torch.flip(x[50:100], dims=[-1])   # mirrored digits: another hand
    p = evaluate.predict(model, x, 4, seed=3)
    report = evaluate.evaluate(model, x, y, {"mirrored": other}, samples=4, corruptions=(), seed=3)
    assert all(torch.equal(report.test_scores()[s], v) for s, v in p.scores().items())   # what training passes
    same = evaluate.covariate_shift(model, p.scores(), x, y, samples=4, seed=3)
    assert same["accuracy"] == round(metrics.accuracy(p.probs, y), 4)
    assert all(a == 0.5 for a in same["auroc"].values()), same
    shifted = evaluate.covariate_shift(model, p.scores(), other, y, samples=4, seed=3)
    q = evaluate.predict(model, other, 4, seed=3)
    for score, auc in shifted["auroc"].items():
        reference = roc_auc_score(np.r_[np.zeros(50), np.ones(50)], np.r_[p.scores()[score], q.scores()[score]])
        assert auc == round(reference, 4), score


def test_the_embedding_covariance_score_is_eq5_s_variances_summed_and_averaged_over_tokens():
    """Layer 0's tr(Sigma) of every token (the class token's and the patches'), eq. (5) of 004 from the weights,
    averaged over the image's tokens; only the stochastic model has it."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = StochasticViT(ViTConfig(dim=8, depth=1, heads=2)).eval()
    x = data.load_dataset("digits", "test")[0][:20]
    patches = model.patches(x)
    raw = torch.cat([model.cls_cov.expand(20, -1, -1), model.embed_cov(patches)], 1) + model.pos_cov
    want = (F.elu(raw) + 1).sum(-1).mean(-1)
    got = evaluate.predict(model, x, 2).scores()["embedding covariance"]
    torch.testing.assert_close(got, want.detach(), rtol=1e-5, atol=1e-6)
    twin = build_model(ViTConfig(kind="deterministic", dim=8, depth=1, heads=2)).eval()
    assert "embedding covariance" not in evaluate.predict(twin, x, 2).scores()


def test_the_prototype_distance_is_the_mean_log_of_layer0s_distance_variance():
    """Per image, the mean over its patches of log(floor + proto_scale d^2), d^2 the squared distance of the patch's
    pixels to the nearest prototype, here by scipy's cdist on F.unfold's patches; a patch of noise raises it; the
    twin and a model whose layer 0 is eq. (5) alone have no such score."""
    import pytest
    import torch.nn.functional as F
    from scipy.spatial.distance import cdist

    torch.manual_seed(0)
    cfg = ViTConfig(dim=8, depth=1, heads=2, layer0="prototypes", prototypes=5)
    model = StochasticViT(cfg).eval()
    fit_prototypes(model, data.load_dataset("digits", "train")[0][:100], kappa=0.02)
    x = data.load_dataset("digits", "test")[0][:20]
    patches = F.unfold(x, cfg.patch_size, stride=cfg.patch_size).transpose(1, 2).reshape(-1, cfg.patch_size ** 2)
    d2 = cdist(patches.double().numpy(), model.proto.double().numpy(), "sqeuclidean").min(1).reshape(20, -1)
    want = np.log(PROTOTYPE_FLOOR + float(model.proto_scale) * d2).mean(1)
    got = evaluate.predict(model, x, 2).scores()["prototype distance"]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
    noisy = x.clone()
    noisy[:, :, :4, :4] = torch.rand(20, 1, 4, 4)
    assert bool((model.prototype_distance(noisy) > got).all())
    eq5 = StochasticViT(ViTConfig(dim=8, depth=1, heads=2)).eval()
    twin = build_model(ViTConfig(kind="deterministic", dim=8, depth=1, heads=2)).eval()
    assert all("prototype distance" not in evaluate.predict(m, x, 2).scores() for m in (eq5, twin))
    with pytest.raises(ValueError, match="needs layer0 'prototypes'"):
        eq5.prototype_distance(x)


def test_the_report_ranks_the_fisher_combination_against_the_reference_images():
    """With reference images, a model with prototypes reports the Fisher combination of the scores of every set
    against the reference's (the same draws, seed 0), on the OOD sets and under corruption; without them, or
    without prototypes, it has none."""
    torch.manual_seed(0)
    model = StochasticViT(ViTConfig(dim=8, depth=1, heads=2, layer0="prototypes", prototypes=5)).eval()
    train = data.load_dataset("digits", "train")[0]
    fit_prototypes(model, train[:100], kappa=0.02)
    x, y = data.load_dataset("digits", "test")
    x, y, ref = x[:40], y[:40], train[-50:]
    noise = data.ood_set("uniform noise", 40)
    report = evaluate.evaluate(model, x, y, {"noise": noise}, samples=2, corruptions=("blur",), reference=ref)
    r = evaluate.predict(model, ref, 2).scores()
    want_in = metrics.fisher_combination(evaluate.predict(model, x, 2).scores(), r)
    want_out = metrics.fisher_combination(evaluate.predict(model, noise, 2).scores(), r)
    got_in, got_out, auc = report.ood["noise"][metrics.FISHER]
    torch.testing.assert_close(got_in, want_in)
    torch.testing.assert_close(got_out, want_out)
    labels = np.r_[np.zeros(40), np.ones(40)]
    assert abs(auc - roc_auc_score(labels, np.r_[want_in.numpy(), want_out.numpy()])) < 1e-12
    assert metrics.FISHER in report.corruption_auroc["blur"]
    plain = StochasticViT(ViTConfig(dim=8, depth=1, heads=2)).eval()
    for m, reference in ((model, None), (plain, ref)):
        r = evaluate.evaluate(m, x, y, {"noise": noise}, samples=2, corruptions=(), reference=reference)
        assert metrics.FISHER not in r.ood["noise"]
