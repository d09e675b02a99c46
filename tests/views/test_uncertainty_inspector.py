"""The "Uncertainty inspector" computations against independent references: the bundled ViTs on 2 test digits,
the maps the layer slider drives read from the model's own pass, the panel's choices and curves from the training
record. (The rollout, the per-patch maps and the corrupted region are wviz.vit's: tests/test_vit_rollout.py,
test_vit_inspection.py, test_vit_patches.py.)"""
import io

import numpy as np
import pytest
import torch
from PIL import Image

from wviz.views import uncertainty_inspector as uv
from wviz.vit.metrics import FISHER
from wviz.vit.model import ViTConfig, build_model


@pytest.fixture(scope="module")
def models():
    return uv.bundled_pair("cpu", "digits")


@pytest.fixture(scope="module")
def images():
    split = uv.shipped_split("digits")
    return split.images[:2], split.labels[:2]


@pytest.fixture(scope="module")
def runs(models, images):
    return uv.inspect_all(models, images[0][1], samples=8, seed=3)


def test_bundled_models_and_their_set(models):
    assert list(models.by_name) == ["stochastic", "deterministic"]
    assert models.main.name == "stochastic" and models.stochastic and models.dataset == "digits"
    assert models.main.bundled and models.main.weights_id == "bundled:digits:stochastic"
    assert models.class_names == [str(i) for i in range(10)]
    assert set(uv.record_summary(models.main.record)) == set(uv.RECORD_SHOWN)  # the bundled record has them all
    # a model reading other images leaves the twin out, and the panel with it
    other = build_model(ViTConfig(kind="deterministic", image_size=32, patch_size=8, channels=3, dim=8, depth=1,
                                  heads=2))
    alone = uv.model_set(uv.Loaded("uploaded (deterministic)", other, {}, "upload:x"), models.twin)
    assert list(alone.by_name) == ["uploaded (deterministic)"] and alone.dataset is None and not alone.stochastic
    with pytest.raises(ValueError, match="upload a checkpoint"):
        uv.load_upload(None, "", "cpu")


def test_upload_weights_id_is_the_sha256_of_the_file():
    import hashlib

    raw = uv.BUNDLED["digits"]["deterministic"].read_bytes()
    up = uv.load_upload(raw, "twin.safetensors", "cpu")
    assert up.name == "uploaded (deterministic)" and not up.bundled
    assert up.weights_id == "upload:" + hashlib.sha256(raw).hexdigest()


def test_test_image_and_the_upload(models, images):
    picked = uv.test_image(uv.shipped_split("digits"), 1)
    torch.testing.assert_close(picked.image, images[0][1])
    assert picked.label == int(images[1][1]) and picked.pre is None
    with pytest.raises(ValueError, match="holds 360 images: pick one from 0 to 359"):
        uv.test_image(uv.shipped_split("digits"), 360)
    with pytest.raises(ValueError, match="upload a PNG or JPG"):
        uv.uploaded_image(None, models)
    a = np.zeros((20, 20), dtype=np.uint8)
    a[5:15, 9:11] = 255
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "PNG")
    up = uv.uploaded_image(buf.getvalue(), models, "no")
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


def test_token_labels():
    assert uv.token_label(0, 4) == "class token"
    assert uv.token_label(11, 4) == "patch 11 (row 3, col 3)" and uv.token_label(16, 4) == "patch 16 (row 4, col 4)"


def test_layer_maps_gather_the_maps_of_both_models(models, runs, images):
    image = images[0][1]
    v = uv.layer_maps(models, runs, image, None, layer=2, head=1, query=6)
    out = runs["stochastic"].out
    assert v.heads.block == 1 and v.mark == (1, 1) and v.image is image and v.box is None
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


def test_layer_maps_of_a_model_with_another_grid_draw_no_twin(models, images):
    torch.manual_seed(0)
    small = build_model(ViTConfig(kind="stochastic", patch_size=2, dim=8, depth=1, heads=2))
    ms = uv.model_set(uv.Loaded("uploaded (stochastic)", small, {}, "upload:y"), models.twin)
    runs = uv.inspect_all(ms, images[0][0], samples=2, seed=0)
    v = uv.layer_maps(ms, runs, images[0][0], None, layer=1, head=0, query=40)
    assert v.twin is None and v.twin_grid == 4 and v.mark == (4, 7) and v.one.shape == (8, 8)


def test_main_figure_is_the_trace_map_over_the_image_it_was_computed_on(models):
    """figs.main_figure(maps) draws what the page drew by hand: the image the models saw (its region corrupted),
    beside tr(Sigma) per patch summed by the model's own covariances under its own rule and under the other rule
    (the model's forward with rule= the other), titled with the layer, the query's patch and the region outlined on
    every panel; a deterministic model has no main figure."""
    from wviz.figures import uncertainty_inspector as figs

    x = uv.shipped_split("digits").images
    box = uv.region_box(0, 2, 2, 4)
    noisy = uv.corrupt_region(x[5], "noise", box, 4, 0.4)
    runs = uv.inspect_all(models, noisy, 4, 1)
    v = uv.layer_maps(models, runs, noisy, box, layer=3, head=2, query=11)
    fig = figs.main_figure(v)
    assert fig.layout.title.text.startswith("tr Σ per patch at layer 3, under ")
    drawn, trace, other = fig.data
    np.testing.assert_allclose(np.asarray(drawn.z, dtype=float), noisy[0].numpy(), atol=1e-7)
    (post_hoc,) = {"004", "mixture"} - {v.rule}
    with torch.no_grad():
        want = {rule: models.main.model(noisy[None], rule=rule).covariances[3][0, 1:].sum(-1).reshape(4, 4).numpy()
                for rule in (v.rule, post_hoc)}
    np.testing.assert_allclose(np.asarray(trace.z, dtype=float), want[v.rule], rtol=1e-5)
    np.testing.assert_allclose(np.asarray(other.z, dtype=float), want[post_hoc], rtol=1e-5)
    assert (want["mixture"] >= want["004"]).all() and (want["mixture"] > want["004"]).any()   # A >= A * A
    assert [a.text.split("<br>")[-1] for a in fig.layout.annotations[1:]] == ["(trained)", "(post hoc)"]
    solid = [(s.xref, s.x0, s.y0) for s in fig.layout.shapes if s.line.dash != "dash"]
    dashed = [(s.xref, s.x0, s.y0, s.x1, s.y1) for s in fig.layout.shapes if s.line.dash == "dash"]
    assert solid == [("x", 7.5, 7.5), ("x2", 1.5, 1.5), ("x3", 1.5, 1.5)]  # token 11: the patch in row 2, col 2
    assert dashed == [("x", 7.5, -0.5, 15.5, 7.5), ("x2", 1.5, -0.5, 3.5, 1.5), ("x3", 1.5, -0.5, 3.5, 1.5)]
    twin = uv.layer_maps(uv.Models({"deterministic": models.twin}, models.twin), runs, noisy, box, 1, 0, 0)
    assert twin.trace is None and twin.post_hoc is None                  # no covariances under any rule
    with pytest.raises(ValueError, match="no covariances"):
        figs.main_figure(twin)


def test_at_defaults_is_the_pages_computation_at_its_defaults():
    """at_defaults(device)(layer): the default pair (MNIST's) on its test digit 0, S = 32 draws of seed 0, head 0 and
    query 0 (the page's defaults), as the page computes them; the layer slider runs 0..DEFAULT_DEPTH, its depth."""
    models = uv.bundled_pair("cpu")
    assert uv.DEFAULT_DEMO == "mnist" and uv.DEFAULT_SAMPLES in uv.SAMPLES
    assert uv.DEFAULT_DEPTH == models.config.depth == 4
    at = uv.at_defaults("cpu")
    image = uv.test_image(uv.shipped_split("mnist"), 0).image
    runs = uv.inspect_all(models, image, 32, 0)
    for layer in range(uv.DEFAULT_DEPTH + 1):
        got, want = at(layer), uv.layer_maps(models, runs, image, None, layer, 0, 0)
        assert (got.layer, got.head, got.query, got.mark, got.box) == (layer, 0, 0, None, None)
        torch.testing.assert_close(got.image, image, rtol=0, atol=0)
        torch.testing.assert_close(got.trace, want.trace, rtol=0, atol=0)
        torch.testing.assert_close(got.heads.rollout, want.heads.rollout, rtol=0, atol=0)


def test_panel_jobs_cap_samples_and_read_curves_from_the_record(models):
    jobs = uv.panel_jobs(models, uv.shipped_split("digits"))
    assert [j.name for j in jobs] == ["stochastic", "deterministic"]
    for j in jobs:
        asked = j.loaded.record.get("eval_samples", 16)
        assert j.samples == min(asked, uv.MAX_PANEL_SAMPLES) and j.from_record and j.cache_key[2] is False
    greedy = uv.Loaded("uploaded (deterministic)", models.twin.model,
                       {"eval_samples": 4096, "metrics": {"corruption_error": {"blur": [0.0] * 5}}}, "upload:z")
    (job,) = uv.panel_jobs(uv.Models({greedy.name: greedy}, models.twin), uv.shipped_split("digits"))
    assert job.capped and job.samples == uv.MAX_PANEL_SAMPLES == 32 and job.asked == 4096
    assert not job.from_record                                   # an upload's record is only a claim
    assert uv.score_choices(models.config) == ["max-softmax", "predictive entropy", "mutual information",
                                               "class spread", "covariance trace", "embedding covariance",
                                               "prototype distance"]
    eq5 = ViTConfig.from_dict({**models.config.to_dict(), "layer0": "eq5", "prototypes": 0})
    assert uv.score_choices(eq5) == uv.score_choices(models.config)[:-1]
    assert uv.score_choices(models.twin.model.config) == ["max-softmax", "predictive entropy"]


def test_the_maps_follow_a_corrupted_region(models):
    """The trace map the page draws for a corrupted image is the model's own on that image. On the middle of the
    test 6, noise raises the embeddings' tr(Sigma) above every clean patch's (the prototype distance of layer 0),
    while blanking gives the background's (the prototypes know it); both make the prediction unsure. (What
    corrupt_region does to the pixels: tests/test_vit_patches.py.)"""
    image = uv.shipped_split("digits").images[0]
    box = uv.region_box(1, 1, 2, 4)
    model = models.main.model
    clean = uv.inspect_all(models, image, 8, 0)[models.main.name]
    before = uv.patch_map(clean.out, 0, 4)
    with torch.no_grad():                                         # every patch background: an empty image
        background = model(torch.zeros_like(image)[None]).covariances[0][0, 1:].sum(-1).reshape(4, 4)
    for kind in ("noise", "occlude"):
        corrupted = uv.corrupt_region(image, kind, box, 4)
        hit = uv.inspect_all(models, corrupted, 8, 0)[models.main.name]
        with torch.no_grad():
            direct = model(corrupted[None]).covariances[0][0, 1:].sum(-1).reshape(4, 4)
        after = uv.patch_map(hit.out, 0, 4)
        torch.testing.assert_close(after, direct)
        torch.testing.assert_close(after[0], before[0])           # the embeddings outside depend on their patch
        if kind == "noise":
            assert bool((after[1:3, 1:3] > 2 * before.max()).all())
        else:
            torch.testing.assert_close(after[1:3, 1:3], background[1:3, 1:3])
            assert bool((before[1:3, 1:3] > background[1:3, 1:3] + 0.1).all())
        assert float(hit.mc.entropy) > 4 * float(clean.mc.entropy), kind
    runs = uv.inspect_all(models, corrupted, 8, 0)
    v = uv.layer_maps(models, runs, corrupted, box, layer=0, head=0, query=0)
    assert v.image is corrupted and v.box == (1, 1, 3, 3) and v.mark is None
    torch.testing.assert_close(v.trace, direct)


def test_panel_curves_and_scores():
    """evaluate_panel on a tiny untrained model: the measured error under each corruption equals the error counted
    by numpy on the corrupted digits; a bundled record's curves are read, not measured."""
    from wviz.vit import data

    torch.manual_seed(0)
    tiny = build_model(ViTConfig(kind="deterministic", dim=8, depth=1, heads=2))
    up = uv.Loaded("uploaded (deterministic)", tiny, {"eval_samples": 1}, "upload:tiny")
    rec = {"eval_samples": 1, "metrics": {"corruption_error": {k: [0.5] * 5 for k in data.CORRUPTIONS}}}
    bund = uv.Loaded("deterministic", tiny, rec, "bundled:digits:deterministic")
    jobs = uv.panel_jobs(uv.Models({up.name: up, bund.name: bund}, bund), uv.shipped_split("digits"))
    seen = []
    measured = uv.evaluate_panel(jobs[0], lambda done, total: seen.append(done / total))
    assert seen == [i / 20 for i in range(20)] + [1.0]          # 1 test split + 4 OOD sets + 3 x 5 corruptions
    reports = {up.name: measured, bund.name: uv.evaluate_panel(jobs[1])}
    assert reports[bund.name].corruption == {}                  # read from the record: not re-measured
    x, y = uv.shipped_split("digits").images, uv.shipped_split("digits").labels
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
    # the corruption AUROCs: measured for the upload, None for a record from before they were measured
    aurocs = uv.corruption_aurocs(jobs, reports, "max-softmax")
    assert aurocs[bund.name] is None
    for kind in data.CORRUPTIONS:
        torch.testing.assert_close(aurocs[up.name][kind], measured.corruption_auroc[kind]["max-softmax"])
    assert uv.corruption_aurocs(jobs, reports, "mutual information") == {bund.name: None}  # the twin has none
    rec["metrics"]["corruption_auroc"] = {k: {"max-softmax": [0.5, 0.6, 0.7, 0.8, 0.9]} for k in data.CORRUPTIONS}
    np.testing.assert_allclose(uv.corruption_aurocs(jobs, reports, "max-softmax")[bund.name]["blur"].numpy(),
                               [0.5, 0.6, 0.7, 0.8, 0.9])


def test_the_panel_is_evaluated_once_for_every_server_process(monkeypatch, tmp_path):
    """The second evaluation of the same weights (another replica of make serve) loads the first one's report
    from the disk cache: the same numbers, evaluate not run; other weights are evaluated."""
    monkeypatch.setenv("WVIZ_CACHE_DIR", str(tmp_path))
    torch.manual_seed(0)
    tiny = build_model(ViTConfig(kind="deterministic", dim=8, depth=1, heads=2))
    (job,) = uv.panel_jobs(uv.Models({"t": uv.Loaded("t", tiny, {"eval_samples": 1}, "upload:tiny")}, None),
                            uv.shipped_split("digits"))
    first = uv.evaluate_panel(job)
    calls = []
    monkeypatch.setattr(uv.vit_evaluate, "evaluate", lambda *a, **k: calls.append(1))
    second = uv.evaluate_panel(job)
    assert calls == [] and type(second) is type(first) and type(second.reliability) is type(first.reliability)
    assert (second.accuracy, second.nll, second.reliability.ece) == (first.accuracy, first.nll, first.reliability.ece)
    for name in ("edges", "count", "confidence", "accuracy"):
        torch.testing.assert_close(getattr(second.reliability, name), getattr(first.reliability, name), rtol=0,
                                   atol=0, equal_nan=True)
    torch.testing.assert_close(second.ood, first.ood, rtol=0, atol=0)
    torch.testing.assert_close(second.corruption, first.corruption, rtol=0, atol=0)
    assert list(second.ood) == list(first.ood) and isinstance(next(iter(second.ood.values()))["max-softmax"], tuple)
    with torch.no_grad():
        next(tiny.parameters()).add_(1.0)  # other weights under the same key name
    uv.evaluate_panel(job)
    assert calls == [1]


# ---- example uploads, refused uploads, guided links ------------------------------------------------------------

def test_example_checkpoint_passes_the_page_loader(models):
    """The example checkpoint goes through load_upload (the page's loader, with every check) and is the default
    pair's stochastic model, weight for weight."""
    up = uv.load_upload(*uv.example_checkpoint(), "cpu")
    default = uv.load_bundled("stochastic", "cpu", uv.DEFAULT_DEMO)
    assert up.name == "uploaded (stochastic)" and up.model.config == default.model.config
    mine, theirs = up.model.state_dict(), default.model.state_dict()
    assert mine.keys() == theirs.keys()
    for k in mine:
        torch.testing.assert_close(mine[k], theirs[k], rtol=0, atol=0)


def test_example_image_passes_the_page_loader_and_is_its_digit(models):
    """The example PNG goes through uploaded_image (the page's parser): 'auto' inverts its dark-on-white strokes
    back to the digit, which is test digit EXAMPLE_INDEX up to the resizing, and both models read the true class."""
    raw = uv.example_image()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    picked = uv.uploaded_image(raw, models, "auto")
    assert picked.pre.inverted and picked.image.shape == (1, 16, 16)
    digits = uv.shipped_split("digits")
    digit, label = digits.images[uv.EXAMPLE_INDEX], digits.labels[uv.EXAMPLE_INDEX]
    want = (digit - digit.min()) / (digit.max() - digit.min())
    assert float((picked.image - want).abs().mean()) < 0.05
    assert np.corrcoef(picked.image.ravel(), want.ravel())[0, 1] > 0.97
    for name, r in uv.inspect_all(models, picked.image, samples=8, seed=0).items():
        assert int(r.mc.mean[0].argmax()) == int(label) == 6, name


def test_a_bad_image_says_what_a_valid_one_is(models):
    with pytest.raises(ValueError, match=r"your image was not used: the file is not an image .* A valid image is a "
                                         r"PNG or JPG .* resized to 16 x 16"):
        uv.uploaded_image(b"garbage", models)


def test_a_refused_checkpoint_falls_back_to_the_bundled_demo(models):
    """choose_models: a good upload replaces the demo, beside the twin of its own shipped dataset; a refused one
    leaves the chosen demo pair on, with the file's name, its problem and what a valid checkpoint is; no file yet
    leaves the demo on, waiting."""
    mnist_twin = uv.load_bundled("deterministic", "cpu", "mnist")
    pairs = {("stochastic", "digits"): models.main, ("deterministic", "digits"): models.twin,
             ("deterministic", "mnist"): mnist_twin}
    bundled = lambda kind, dataset: pairs[kind, dataset]  # noqa: E731
    raw, name = uv.example_checkpoint()
    assert name == uv.BUNDLED[uv.DEFAULT_DEMO]["stochastic"].name
    good = uv.load_upload(uv.BUNDLED["digits"]["stochastic"].read_bytes(), "mine.safetensors", "cpu")
    for demo_data in uv.DEMOS:   # the twin is the upload's data's, whichever demo the page showed
        chosen = uv.choose_models("upload", "mine.safetensors", lambda: good, bundled, demo_data)
        assert list(chosen.models.by_name) == ["uploaded (stochastic)", "deterministic"] and not chosen.refused
        assert chosen.models.twin is models.twin
    on_mnist = uv.load_upload(uv.BUNDLED["mnist"]["stochastic"].read_bytes(), "m.safetensors", "cpu")
    chosen = uv.choose_models("upload", "m.safetensors", lambda: on_mnist, bundled, "digits")
    assert chosen.models.twin is mnist_twin and chosen.models.dataset == "mnist" and len(chosen.models.by_name) == 2
    cut = uv.choose_models("upload", "cut.safetensors", lambda: uv.load_upload(raw[:1000], "cut.safetensors", "cpu"),
                           bundled, "digits")
    assert list(cut.models.by_name) == ["stochastic", "deterministic"] and cut.models.main is models.main
    assert cut.refused.startswith("Your checkpoint 'cut.safetensors' was not used: truncated safetensors file")
    assert uv.VALID_CHECKPOINT in cut.refused and not cut.waiting
    waiting = uv.choose_models("upload", "", lambda: pytest.fail("no file to load"), bundled, "digits")
    assert waiting.waiting and not waiting.refused and waiting.models.main is models.main
    demo = uv.choose_models("bundled demo", "mine.safetensors", lambda: pytest.fail("not asked"), bundled, "digits")
    assert demo.models.main is models.main and not demo.refused and not demo.waiting


def test_try_this_items_are_valid_settings():
    """Each guided link's pair (its demo, the default pair when it names none: its sentence quotes that pair's
    numbers) has the settings the link gives."""
    from wviz.guide import Try

    assert 3 <= len(uv.TRY_THIS) <= 5 and all(isinstance(t, Try) for t in uv.TRY_THIS)
    for t in uv.TRY_THIS:
        p = t.params
        dataset = uv.DEMO_LABELS.get(p.get(uv.Keys.DEMO), uv.DEFAULT_DEMO)
        loaded, split = uv.load_bundled("stochastic", "cpu", dataset), uv.shipped_split(dataset)
        config = loaded.model.config
        assert 0 <= p.get("layer", 1) <= config.depth and 1 <= p.get("index", 1) <= len(split)
        assert p.get("score", "max-softmax") in uv.score_choices(config, uv.has_validation(loaded, split))
        assert p.get("ood", split.ood_names[0]) in split.ood_names and t.watch.endswith(".")
        assert p.get("region", "none") in uv.REGION_KINDS
        row, col, size = p.get("region_row", 1), p.get("region_col", 1), p.get("region_size", 1)
        assert min(row, col) >= 1 and max(row, col) - 1 + size <= config.grid  # counted from 1; not cut


def test_the_fisher_link_quotes_the_panels_aurocs():
    """The guided link on the Fisher combination quotes the panel's AUROCs of its two parts and the twin's best
    (its title's own is checked on the page, tests/app)."""
    (item,) = [t for t in uv.TRY_THIS if t.params.get(uv.Keys.SCORE) == FISHER]
    models, split = uv.bundled_pair("cpu", uv.DEFAULT_DEMO), uv.shipped_split(uv.DEFAULT_DEMO)
    reports = {j.name: uv.evaluate_panel(j) for j in uv.panel_jobs(models, split)}
    ood = item.params.get(uv.Keys.OOD, split.ood_names[0])
    mine, twin = reports["stochastic"].ood[ood], reports["deterministic"].ood[ood]
    quoted = {f"the predictive entropy {mine['predictive entropy'][2]:.3f}",
              f"the prototype distance {mine['prototype distance'][2]:.3f}",
              f"the twin's best ({max(v[2] for v in twin.values()):.3f})"}
    assert all(q in item.watch for q in quoted), (quoted, item.watch)
    assert mine[FISHER][2] > max(mine["predictive entropy"][2], mine["prototype distance"][2],
                                 max(v[2] for v in twin.values()))


def test_the_twin_is_wrong_where_the_guided_link_says():
    """The guided test image, MNIST's 715th: an 8 the twin calls a 5 at 98.5 % and the stochastic model an 8 at
    84.5 % (S = 32, seed 0: the page's defaults)."""
    (item,) = [t for t in uv.TRY_THIS if "index" in t.params]
    dataset = uv.DEMO_LABELS.get(item.params.get(uv.Keys.DEMO), uv.DEFAULT_DEMO)
    models = uv.bundled_pair("cpu", dataset)
    picked = uv.test_image(uv.shipped_split(dataset), item.params["index"] - 1)  # the page counts from 1
    pred = uv.predictions(uv.inspect_all(models, picked.image, samples=32, seed=0))
    assert picked.label == 8 and pred["stochastic"][0] == 8 and 0.84 < pred["stochastic"][1] < 0.85
    assert pred["deterministic"][0] == 5 and 0.98 < pred["deterministic"][1] < 0.99


# ---- the figures: colour bars, the reliability diagram, headroom -----------------------------------------------

def colour_bar_titles(fig) -> list[str]:
    """The colour bar title of every heatmap trace (its own, or its colour axis's); fails on one without."""
    titles = []
    for t in fig.data:
        if t.type == "heatmap":
            bar = fig.layout[t.coloraxis].colorbar if t.coloraxis else t.colorbar
            assert t.coloraxis or t.showscale is not False, t.name
            assert bar.title.text, t.name
            titles.append(bar.title.text)
    return titles


def test_every_heatmap_has_a_colour_bar(models, runs, images):
    from wviz.figures import uncertainty_inspector as figs

    image = images[0][1]
    v = uv.layer_maps(models, runs, image, None, layer=2, head=1, query=6)
    fig = figs.map_over_image(image, v.trace, "t", "tr(Sigma) per patch", v.mark)
    assert colour_bar_titles(fig) == ["pixel", "tr(Sigma)"]
    bars = [fig.layout.coloraxis.colorbar, fig.layout.coloraxis2.colorbar]
    assert bars[0].x < fig.layout.xaxis2.domain[0]                       # the image's bar sits beside the image
    heads = figs.attention_heads(list(v.heads.per_head), v.heads.rollout, "t")
    assert colour_bar_titles(heads) == ["weight"] * (models.config.heads + 1)
    zmax = max(float(m.max()) for m in [*v.heads.per_head, v.heads.rollout])
    assert heads.layout.coloraxis.cmin == 0 and abs(heads.layout.coloraxis.cmax - zmax) < 1e-12
    a = np.zeros((20, 20), dtype=np.uint8)
    a[5:15, 9:11] = 255
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "PNG")
    pre = uv.uploaded_image(buf.getvalue(), models, "no").pre
    assert colour_bar_titles(figs.preprocessing(pre.steps)) == ["pixel"] * len(pre.steps)
    counts = torch.tensor([[3, 1], [0, 2]])
    confusion = figs.confusion({"a": counts, "b": counts.T}, ["cat", "dog"], "test split")
    assert colour_bar_titles(confusion) == ["images", "images"] and confusion.layout.coloraxis.cmin == 0
    first = confusion.data[0]
    assert list(first.x) == list(first.y) == ["cat", "dog"] and np.asarray(first.z).tolist() == [[3, 1], [0, 2]]


def test_reliability_bars_leave_empty_bins_out_and_count_the_rest():
    """Bars at the non-empty bins only, their heights the bins' accuracies, the counts drawn below on a log axis
    with plain ticks; the diagonal; the empty bins named."""
    from wviz.figures import uncertainty_inspector as figs
    from wviz.vit.metrics import reliability

    g = torch.Generator().manual_seed(1)
    logits = torch.randn(200, 10, generator=g) * 4
    labels = torch.randint(0, 10, (200,), generator=g)
    rel = reliability(logits.softmax(-1), labels)
    fig = figs.reliability({"stochastic": rel})
    diag, acc, count = fig.data
    assert list(diag.x) == [0, 1] and list(diag.y) == [0, 1]
    keep = rel.count.numpy() > 0
    centres = ((rel.edges[:-1] + rel.edges[1:]) / 2).numpy()
    np.testing.assert_allclose(acc.x, centres[keep])
    np.testing.assert_allclose(acc.y, rel.accuracy.numpy()[keep])
    assert acc.type == count.type == "bar" and f"ECE {rel.ece:.3f}" in acc.name
    np.testing.assert_array_equal(count.y, rel.count.numpy()[keep])
    assert list(count.text) == [str(int(c)) for c in rel.count.numpy()[keep]]
    assert fig.layout.yaxis2.type == "log" and list(fig.layout.yaxis2.ticktext) == ["1", "10", "100", "1000"]
    assert 10 ** fig.layout.yaxis2.range[1] > 2 * rel.count.max().item()      # room for the tallest count's text
    assert f"stochastic, {int((~keep).sum())} of 15" in fig.layout.annotations[0].text


def test_conformal_sizes_count_each_set_and_show_the_sizes_up_to_the_largest():
    """Each bar is the share of one set's images whose prediction set holds k classes, and the axis runs from 0 to
    the largest size any set drew (at least 1), not to the number of classes."""
    from types import SimpleNamespace

    from wviz.figures import uncertainty_inspector as figs

    clean, noisy = torch.tensor([1, 1, 0, 1]), torch.tensor([0, 3, 1, 1, 1])
    sets = SimpleNamespace(sizes={"clean": clean, "noise": noisy}, coverage={"clean": 0.9, "noise": 0.7}, q=0.2,
                           alpha=0.1)
    fig = figs.conformal_sizes({"stochastic": sets}, 10)
    np.testing.assert_allclose(fig.data[0].y[:4], [0.25, 0.75, 0, 0])
    np.testing.assert_allclose(fig.data[1].y[:4], [0.2, 0.6, 0, 0.2])
    assert list(fig.layout.xaxis.range) == [-0.5, 3.5]
    only_ones = SimpleNamespace(sizes={"clean": torch.ones(4)}, coverage={"clean": 0.9}, q=0.2, alpha=0.1)
    assert list(figs.conformal_sizes({"stochastic": only_ones}, 10).layout.xaxis.range) == [-0.5, 1.5]


def test_ood_histograms_share_bins_and_leave_headroom():
    from wviz.figures import uncertainty_inspector as figs

    g = torch.Generator().manual_seed(2)
    a, b = torch.rand(360, generator=g) ** 6, torch.rand(500, generator=g)
    fig = figs.ood_histograms({"stochastic": (a, b, 0.9)}, "max-softmax", "uniform noise")
    digits, ood = fig.data
    assert list(digits.x) == list(ood.x)                                   # the same bins for both sets
    assert int(sum(digits.y)) == 360 and int(sum(ood.y)) == 500
    assert fig.layout.yaxis.range[1] >= 1.1 * max(max(digits.y), max(ood.y))


def test_corruption_auroc_figure_draws_the_reports_numbers():
    """One line per model and corruption over severities 1..5, its points the measured report's AUROCs of the
    chosen score (a stochastic model measures all five), chance drawn at 0.5."""
    from wviz.figures import uncertainty_inspector as figs
    from wviz.vit import data

    torch.manual_seed(0)
    tiny = build_model(ViTConfig(kind="stochastic", dim=8, depth=1, heads=2))
    up = uv.Loaded("uploaded (stochastic)", tiny, {"eval_samples": 2}, "upload:tiny-stochastic")
    (job,) = uv.panel_jobs(uv.Models({up.name: up}, up), uv.shipped_split("digits"))
    report = uv.evaluate_panel(job)
    assert set(report.corruption_auroc) == set(data.CORRUPTIONS)
    for score in ("max-softmax", "mutual information"):
        fig = figs.corruption_aurocs(uv.corruption_aurocs((job,), {up.name: report}, score), uv.SEVERITIES, score)
        drawn = {t.name: t for t in fig.data}
        assert set(drawn) == {f"{up.name}: {k}" for k in data.CORRUPTIONS}
        for kind in data.CORRUPTIONS:
            line = drawn[f"{up.name}: {kind}"]
            assert list(line.x) == list(uv.SEVERITIES)
            np.testing.assert_allclose(np.asarray(line.y, dtype=float),
                                       report.corruption_auroc[kind][score].numpy(), atol=1e-7)
        assert fig.layout.shapes[0].y0 == fig.layout.shapes[0].y1 == 0.5         # the chance line
        assert score in fig.layout.title.text and fig.layout.xaxis.title.text == "severity"


def test_the_region_is_outlined_on_the_image_and_on_the_map(models, runs, images):
    """map_over_image draws the region (top, left, bottom, right in patches) dashed around its pixels on the image
    (4 pixels a patch here) and around its cells on the per-patch map."""
    from wviz.figures import uncertainty_inspector as figs

    v = uv.layer_maps(models, runs, images[0][1], None, layer=0, head=0, query=0)
    fig = figs.map_over_image(images[0][1], v.trace, "t", "tr(Sigma) per patch", None, (1, 2, 3, 4))
    dashed = [(s.xref, s.x0, s.y0, s.x1, s.y1) for s in fig.layout.shapes if s.line.dash == "dash"]
    assert dashed == [("x", 7.5, 3.5, 15.5, 11.5), ("x2", 1.5, 0.5, 3.5, 2.5)]


def test_all_is_what_the_page_uses():
    """__all__ names exactly the view's names that pages/uncertainty_inspector.py reads (uv.<name>)."""
    import ast
    from pathlib import Path

    page = Path(__file__).resolve().parents[2] / "pages" / "uncertainty_inspector.py"
    used = {n.attr for n in ast.walk(ast.parse(page.read_text()))
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "uv"}
    assert sorted(uv.__all__) == sorted(used)
    assert all(hasattr(uv, name) for name in uv.__all__)


# ---- a checkpoint's own test split and pictures in colour --------------------------------------------------------

@pytest.fixture(scope="module")
def rgb_models():
    """An (untrained) RGB model of the shapes, as an upload whose record names its data: the twin not beside it."""
    from wviz.vit import shapes

    torch.manual_seed(0)
    model = build_model(ViTConfig(image_size=32, patch_size=8, channels=3, n_classes=3, dim=8, depth=1, heads=2))
    record = {"data": "folder", "data_folder": "shapes", "class_names": list(shapes.CLASSES)}
    return uv.model_set(uv.Loaded("uploaded (stochastic)", model, record, "upload:rgb"),
                        uv.load_bundled("deterministic", "cpu", "digits"))


def test_the_test_split_is_the_digits_the_found_folder_or_the_upload(models, rgb_models, tmp_path, monkeypatch):
    from wviz.vit import shapes

    assert list(rgb_models.by_name) == ["uploaded (stochastic)"] and rgb_models.dataset is None
    assert uv.test_split_of(models, uv.data_place(models.main)) is uv.shipped_split("digits")
    monkeypatch.delenv("WVIZ_DATA", raising=False)
    place = uv.data_place(rgb_models.main)
    assert place.missing and uv.test_split_of(rgb_models, place) is None
    asked = []
    zipped = uv.test_split_of(rgb_models, place, lambda: asked.append(1) or uv.zip_split(
        rgb_models.main, uv.example_test_zip(), "shapes_test.zip"))
    assert asked == [1] and len(zipped) == 60 and uv.class_names(rgb_models, zipped) == list(shapes.CLASSES)
    root = shapes.write_folder(tmp_path / "shapes", train=1, test=20)
    monkeypatch.setenv("WVIZ_DATA", str(tmp_path))
    place = uv.data_place(rgb_models.main)
    found = uv.test_split_of(rgb_models, place, lambda: pytest.fail("the folder on disk comes first"))
    assert place.root == root and torch.equal(found.images, zipped.images)   # the example zip is that test split
    assert torch.equal(found.labels, zipped.labels)
    picked = uv.test_image(found, 25)
    assert uv.class_names(rgb_models, found)[picked.label] == "square" and picked.image.shape == (3, 32, 32)
    assert uv.class_names(rgb_models, None) == list(shapes.CLASSES) and uv.class_names(models, None)[9] == "9"


def test_a_picture_keeps_its_colours_for_an_rgb_model(rgb_models, models):
    """For a 3-channel model the upload stays RGB: its input is the picture resized, colours as they are (no
    stretch, which only the digits' strokes call for); 'auto' inverts a light picture only when the model's test
    images are dark; a one-channel model reads the same picture in grey."""
    from wviz.vit import shapes

    a = np.zeros((40, 40, 3), dtype=np.uint8)
    a[10:30, 10:30] = (200, 40, 20)                                   # a red square on black
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "PNG")
    up = uv.uploaded_image(buf.getvalue(), rgb_models, "auto")
    assert up.pre.steps[0][0] == "upload, RGB, square" and up.image.shape == (3, 32, 32) and not up.pre.inverted
    red = torch.tensor([200, 40, 20]) / 255                              # the square's inside keeps its colour
    torch.testing.assert_close(up.image[:, 11:21, 11:21], red[:, None, None].expand(3, 10, 10), atol=1e-3, rtol=0)
    assert float(up.image[:, :4, :4].abs().max()) < 1e-3 and float(up.image.max()) < 0.8   # black stays, no stretch
    grey = uv.uploaded_image(buf.getvalue(), models, "no")
    assert grey.pre.steps[0][0] == "upload, grey, square" and grey.image.shape == (1, 16, 16)
    light = np.full((40, 40, 3), 255, dtype=np.uint8)
    light[10:30, 10:30] = (20, 40, 200)
    buf = io.BytesIO()
    Image.fromarray(light).save(buf, "PNG")
    assert not uv.uploaded_image(buf.getvalue(), rgb_models, "auto").pre.inverted      # no split: never
    dark = uv.zip_split(rgb_models.main, shapes.test_zip(per_class=2), "t.zip")      # shapes: dark grounds
    assert uv.uploaded_image(buf.getvalue(), rgb_models, "auto", dark).pre.inverted
    assert not uv.uploaded_image(buf.getvalue(), rgb_models, "no", dark).pre.inverted


# ---- what the maps mean, the calibration panel ------------------------------------------------------------------

def test_both_rules_run_on_the_same_weights_and_the_main_map_is_the_trained_rule(models, runs, images):
    """The main map is the model's own rule (the page's runs), the post-hoc map the other rule's forward on the same
    weights; at layer 0 (the embeddings, before any block) the two agree."""
    image = images[0][1]
    own = models.config.rule
    other = "004" if own == "mixture" else "mixture"
    for layer in (0, 1, 3):
        v = uv.layer_maps(models, runs, image, None, layer, 0, 0)
        for rule, got in ((own, v.trace), (other, v.post_hoc[other])):
            out = models.main.model(image[None], rule=rule)
            torch.testing.assert_close(got, out.covariances[layer][0, 1:].sum(-1).reshape(4, 4))
        assert list(v.post_hoc) == [other]
    v = uv.layer_maps(models, runs, image, None, 0, 0, 0)
    torch.testing.assert_close(v.post_hoc[other], v.trace)


def test_the_map_aurocs_are_the_auroc_of_each_layers_token_mean(models):
    """map_aurocs against a loop: the AUROC of the tokens' mean tr(Sigma) at each layer, test digits vs each set."""
    from wviz.vit import data
    from wviz.vit.metrics import auroc

    split = uv.shipped_split("digits")
    table = uv.map_aurocs(models.main.model, split)
    assert set(table) == {"004", "mixture"} and set(table["004"]) == set(data.OOD_SETS + data.HELD_OUT)
    noise = data.ood_set("uniform noise", 360)
    for rule in ("004", "mixture"):
        clean = [models.main.model(split.images, rule=rule).covariances[k].sum(-1).mean(-1) for k in range(4)]
        bad = [models.main.model(noise, rule=rule).covariances[k].sum(-1).mean(-1) for k in range(4)]
        for k in range(4):
            assert float(table[rule]["uniform noise"][k]) == pytest.approx(auroc(clean[k], bad[k]), abs=1e-6)
        assert uv.at_layer(table, rule, 3)["uniform noise"] == pytest.approx(float(table[rule]["uniform noise"][3]))


def test_the_verdict_says_where_a_map_does_not_track_uncertainty():
    assert uv.verdict({"a": 0.9, "b": 0.75}).startswith("This map tracks uncertainty on every OOD set here")
    low = uv.verdict({"a": 0.9, "b": 0.3, "c": 0.6}, "The trace")
    assert low.startswith("The trace does not track uncertainty on b, c") and "0.30, 0.60" in low
    assert "*less*" in uv.verdict({"b": 0.3})
    assert uv.TRACKS == 0.7


def test_the_occlusion_map_is_the_mi_change_of_each_occluded_patch(models, images):
    """Each cell against the MI of the image with that patch zeroed, drawn with the same seed (common draws)."""
    from wviz.vit.metrics import mutual_information
    from wviz.vit.model import mc_predict

    image = images[0][1]
    change, score = uv.occlusion(models, image, 16, 5)
    model = models.main.model
    base = float(mutual_information(mc_predict(model, image[None], 16, 5).probs)[0])
    cells = []
    for p in range(16):
        x = image.clone()
        r, c = divmod(p, 4)
        x[:, 4 * r:4 * r + 4, 4 * c:4 * c + 4] = 0
        cells.append(float(mutual_information(mc_predict(model, x[None], 16, 5).probs)[0]))
    torch.testing.assert_close(change, (torch.tensor(cells) - base).reshape(4, 4), rtol=1e-5, atol=1e-6)
    assert score == pytest.approx(sum(cells) / 16, rel=1e-5)
    twin_only = uv.model_set(models.twin, models.twin)
    assert uv.occlusion(twin_only, image, 4, 0) is None


@pytest.mark.parametrize("dataset", uv.DEMOS)
def test_the_shipped_occlusion_is_the_first_images_and_no_other_is_written(dataset, monkeypatch, tmp_path):
    """Each bundled pair's first test image at the page's defaults is read from assets/cache and equals the map
    computed now; another image is computed and not written to the shared disk cache."""
    from wviz import disk_cache
    from wviz.vit.maps import occlusion_map

    monkeypatch.setenv("WVIZ_CACHE_DIR", str(tmp_path))
    models = uv.bundled_pair("cpu", dataset)
    split = uv.shipped_split(dataset)
    first = uv.test_image(split, 0).image
    change, score = uv.occlusion(models, first, uv.DEFAULT_SAMPLES, 0)
    fresh, _, fresh_score = occlusion_map(models.main.model, first, uv.DEFAULT_SAMPLES, 0)
    torch.testing.assert_close(change, fresh, rtol=1e-4, atol=1e-6)
    assert score == pytest.approx(fresh_score, rel=1e-4)
    uv.occlusion(models, uv.test_image(split, 1).image, 2, 0)
    assert not list(tmp_path.iterdir()) and disk_cache.folder() == tmp_path


def test_the_calibration_panel_fits_tau_and_covers_at_90_percent(models, monkeypatch, tmp_path):
    """The bundled stochastic model's calibration panel on a 120-image split: tau is the NLL minimiser on the
    calibration half, the conformal sets cover the evaluated clean half at about 90 %, and less of the corrupted
    images."""
    from wviz.vit import calibration
    from wviz.vit import evaluate as vit_evaluate

    monkeypatch.setenv("WVIZ_CACHE_DIR", str(tmp_path))
    full = uv.shipped_split("digits")
    split = uv.TestSplit(full.images[:120], full.labels[:120], full.class_names, "the first 120 digits", False)
    job = uv.panel_jobs(models, split)[0]
    cal = uv.calibrate_panel(job)
    xc, yc = split.images[:60], split.labels[:60]
    assert cal.source.startswith("the first half of the test split")
    logits = vit_evaluate.predict(models.main.model, xc, job.samples).logits
    assert cal.tau == pytest.approx(calibration.fit_temperature(logits, yc), rel=1e-6)
    assert 0.8 <= cal.conformal.coverage["clean"] <= 1.0
    # the risk by every score, the Fisher combination's ranked among the calibration half's
    assert set(cal.risk) == set(uv.score_choices(models.config, True)) and set(cal.conformal.sizes) == {
        "clean", *(f"{k}, severity {uv.CONFORMAL_SEVERITY}" for k in ("gaussian noise", "blur", "contrast"))}
    # the perfect score's curve: that of a score that is 1 on the model's errors, under every score's
    pred = vit_evaluate.predict(models.main.model, split.images[60:], job.samples)
    correct = pred.probs.argmax(-1) == split.labels[60:]
    best = uv.perfect_curve(cal.risk)
    torch.testing.assert_close(best.risk, calibration.risk_coverage((~correct).double(), correct).risk)
    assert all(bool((best.risk <= rc.risk + 1e-12).all()) for rc in cal.risk.values())
    # corrupted images are not exchangeable with the calibration half: the coverage falls
    assert cal.conformal.coverage["contrast, severity 3"] < cal.conformal.coverage["clean"]
    assert set(cal.occlusion) == set(split.ood_names) and all(0 <= a <= 1 for a in cal.occlusion.values())
