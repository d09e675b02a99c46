"""The "Uncertainty inspector" computations against independent references: the bundled ViTs on 2 test digits,
rollout by an explicit numpy product, tr(Sigma) summed by numpy, attention rows summing to 1 with the class
token, the panel's choices and curves from the training record."""
import io

import numpy as np
import pytest
import torch
from PIL import Image

from wviz.views import uncertainty_inspector as uv
from wviz.vit.model import ViTConfig, build_model


@pytest.fixture(scope="module")
def models():
    return uv.model_set(uv.load_bundled("stochastic", "cpu"), uv.load_bundled("deterministic", "cpu"))


@pytest.fixture(scope="module")
def images():
    x, y = uv.test_split()
    return x[:2], y[:2]


@pytest.fixture(scope="module")
def runs(models, images):
    return uv.inspect_all(models, images[0][1], samples=8, seed=3)


def test_bundled_models_and_their_set(models):
    assert list(models.by_name) == ["stochastic", "deterministic"]
    assert models.main.name == "stochastic" and models.stochastic and models.reads_digits
    assert models.main.bundled and models.main.key == "bundled:stochastic"
    assert models.class_names == [str(i) for i in range(10)]
    assert set(uv.record_summary(models.main.record)) <= set(uv.RECORD_SHOWN)
    # a model reading other images leaves the twin out, and the panel with it
    other = build_model(ViTConfig(kind="deterministic", image_size=32, patch_size=8, channels=3, dim=8, depth=1,
                                  heads=2))
    alone = uv.model_set(uv.Loaded("uploaded (deterministic)", other, {}, "upload:x"), models.twin)
    assert list(alone.by_name) == ["uploaded (deterministic)"] and not alone.reads_digits and not alone.stochastic
    with pytest.raises(ValueError, match="upload a checkpoint"):
        uv.load_upload(None, "", "cpu")


def test_upload_key_is_the_sha256_of_the_file():
    import hashlib

    raw = uv.BUNDLED["deterministic"].read_bytes()
    up = uv.load_upload(raw, "twin.safetensors", "cpu")
    assert up.name == "uploaded (deterministic)" and not up.bundled
    assert up.key == "upload:" + hashlib.sha256(raw).hexdigest()


def test_test_image_and_the_upload(models, images):
    picked = uv.test_image(models.config, 1)
    torch.testing.assert_close(picked.image, images[0][1])
    assert picked.label == int(images[1][1]) and picked.pre is None
    rgb = ViTConfig(image_size=32, patch_size=8, channels=3)
    with pytest.raises(ValueError, match="upload an image instead"):
        uv.test_image(rgb, 0)
    with pytest.raises(ValueError, match="upload a PNG or JPG"):
        uv.uploaded_image(None, models.config)
    a = np.zeros((20, 20), dtype=np.uint8)
    a[5:15, 9:11] = 255
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "PNG")
    up = uv.uploaded_image(buf.getvalue(), models.config, "no")
    assert up.image.shape == (1, 16, 16) and float(up.image.min()) == 0 and float(up.image.max()) == 1
    assert up.label is None and not up.pre.inverted and up.pre.steps[-1][1] is up.image


def test_inspection_predictions_and_entropy(models, runs, images):
    image = images[0][1]
    for name, r in runs.items():
        model = models.by_name[name].model
        torch.testing.assert_close(r.out.logits, model(image[None]).logits)
        p = r.mc.mean[0].double().numpy()
        assert abs(p.sum() - 1) < 1e-5
        cls, prob = uv.predictions(runs)[name]
        assert cls == int(np.argmax(p)) and abs(prob - p.max()) < 1e-7
        assert abs(uv.entropies(runs)[name] - -(p[p > 0] * np.log(p[p > 0])).sum()) < 1e-5


@pytest.mark.parametrize("layer", [0, 1, 3])
def test_patch_map_is_the_covariance_trace(runs, layer):
    out = runs["stochastic"].out
    cov = out.covariances[layer][0].detach().numpy()          # (1 + P, D) diagonal covariances
    want = cov[1:].sum(axis=-1).reshape(4, 4)
    np.testing.assert_allclose(uv.patch_map(out, layer, 4).numpy(), want, rtol=1e-6)
    assert uv.patch_map(runs["deterministic"].out, layer, 4) is None
    with pytest.raises(ValueError, match="layer must be"):
        uv.patch_map(out, 9, 4)


def test_query_attention_rows_sum_to_one_with_the_class_token(runs):
    out = runs["stochastic"].out
    for block in range(len(out.attentions)):
        for head in range(out.attentions[block].shape[1]):
            for query in (0, 6, 16):
                patches, cls = uv.query_attention(out, block, head, query, 4)
                assert patches.shape == (4, 4)
                assert abs(float(patches.sum()) + cls - 1) < 1e-5
                A = out.attentions[block][0, head, query].detach().numpy()
                np.testing.assert_allclose(patches.numpy().ravel(), A[1:], atol=0)


def test_rollout_is_the_product_of_averaged_attention_plus_identity(runs):
    for r in runs.values():
        attn = [A[0].detach().double().numpy() for A in r.out.attentions]
        n = attn[0].shape[-1]
        R = np.eye(n)
        for A in attn:
            R = 0.5 * (A.mean(axis=0) + np.eye(n)) @ R
        got = uv.rollout(r.out.attentions, 4).double().numpy()
        np.testing.assert_allclose(got.ravel(), R[0, 1:], atol=1e-6)
        assert abs(got.sum() + R[0, 0] - 1) < 1e-5                # rows of the product still sum to one


def test_token_labels_and_blocks():
    assert uv.token_label(0, 4) == "class token" and uv.patch_of(0, 4) is None
    assert uv.token_label(11, 4) == "patch 11 (row 2, col 2)" and uv.patch_of(11, 4) == (2, 2)
    assert uv.patch_of(16, 4) == (3, 3)
    assert [uv.block_of(layer) for layer in range(4)] == [0, 0, 1, 2]


def test_inside_gathers_the_maps_of_both_models(models, runs):
    v = uv.inside(models, runs, layer=2, head=1, query=6)
    out = runs["stochastic"].out
    assert v.heads.block == 1 and v.mark == (1, 1)
    torch.testing.assert_close(v.trace, uv.patch_map(out, 2, 4))
    torch.testing.assert_close(v.one, out.attentions[1][0, 1, 6, 1:].reshape(4, 4))
    assert abs(v.class_weight - float(out.attentions[1][0, 1, 6, 0])) < 1e-7
    assert len(v.heads.per_head) == models.config.heads
    for h, m in enumerate(v.heads.per_head):
        torch.testing.assert_close(m, out.attentions[1][0, h, 6, 1:].reshape(4, 4))
    twin_out = runs["deterministic"].out
    twin_block = min(1, models.twin.model.config.depth - 1)
    torch.testing.assert_close(v.twin.per_head[0], twin_out.attentions[twin_block][0, 0, 6, 1:].reshape(4, 4))
    assert v.twin_grid is None


def test_inside_a_model_with_another_grid_draws_no_twin(models, images):
    torch.manual_seed(0)
    small = build_model(ViTConfig(kind="stochastic", patch_size=2, dim=8, depth=1, heads=2))
    ms = uv.model_set(uv.Loaded("uploaded (stochastic)", small, {}, "upload:y"), models.twin)
    runs = uv.inspect_all(ms, images[0][0], samples=2, seed=0)
    v = uv.inside(ms, runs, layer=1, head=0, query=40)
    assert v.twin is None and v.twin_grid == 4 and v.mark == (4, 7) and v.one.shape == (8, 8)


def test_panel_jobs_cap_samples_and_read_curves_from_the_record(models):
    jobs = uv.panel_jobs(models)
    assert [j.name for j in jobs] == ["stochastic", "deterministic"]
    for j in jobs:
        asked = j.loaded.record.get("eval_samples", 16)
        assert j.samples == min(asked, uv.MAX_PANEL_SAMPLES) and j.from_record and j.key[2] is False
    greedy = uv.Loaded("uploaded (deterministic)", models.twin.model,
                       {"eval_samples": 4096, "metrics": {"corruption_error": {"blur": [0.0] * 5}}}, "upload:z")
    (job,) = uv.panel_jobs(uv.Models({greedy.name: greedy}, models.twin))
    assert job.capped and job.samples == 64 and job.asked == 4096
    assert not job.from_record                                   # an upload's record is only a claim
    assert uv.score_choices(True) == ["max-softmax", "predictive entropy", "covariance trace"]
    assert uv.score_choices(False) == ["max-softmax", "predictive entropy"]


def test_panel_curves_and_scores():
    """evaluate_panel on a tiny untrained model: the measured error under each corruption equals the error counted
    by numpy on the corrupted digits; a bundled record's curves are read, not measured."""
    from wviz.vit import data

    torch.manual_seed(0)
    tiny = build_model(ViTConfig(kind="deterministic", dim=8, depth=1, heads=2))
    up = uv.Loaded("uploaded (deterministic)", tiny, {"eval_samples": 1}, "upload:tiny")
    rec = {"eval_samples": 1, "metrics": {"corruption_error": {k: [0.5] * 5 for k in data.CORRUPTIONS}}}
    bund = uv.Loaded("deterministic", tiny, rec, "bundled:deterministic")
    jobs = uv.panel_jobs(uv.Models({up.name: up, bund.name: bund}, bund))
    seen = []
    measured = uv.evaluate_panel(jobs[0], lambda done, total: seen.append(done / total))
    assert seen == [i / 18 for i in range(18)] + [1.0]          # 1 test split + 2 OOD sets + 3 x 5 corruptions
    reports = {up.name: measured, bund.name: uv.evaluate_panel(jobs[1])}
    assert reports[bund.name].corruption == {}                  # read from the record: not re-measured
    x, y = uv.test_split()
    curves = uv.corruption_curves(jobs, reports)
    with torch.no_grad():
        for kind in data.CORRUPTIONS:
            want = [float((tiny(data.corrupt(x, kind, sev, seed=sev)).logits.argmax(-1) != y).double().mean())
                    for sev in data.SEVERITIES]
            np.testing.assert_allclose(curves[up.name][kind].numpy(), want, atol=1e-6)
    np.testing.assert_allclose(curves[bund.name]["blur"].numpy(), [0.5] * 5)
    scores = uv.ood_scores(reports, "uniform noise", "max-softmax")
    assert set(scores) == {up.name, bund.name}
    with torch.no_grad():
        p = tiny(x).logits.softmax(-1).double().numpy()
    np.testing.assert_allclose(scores[up.name][0].numpy(), 1 - p.max(-1), atol=1e-6)
    assert uv.ood_scores(reports, "uniform noise", "covariance trace") == {}
