"""The "Uncertainty inspector" page with the bundled checkpoints, checked against the models run directly; and
bad uploads that must end in a plain error (a pickle that would run code must not run)."""
import io
import json
import re

import numpy as np
import pytest
import torch
from PIL import Image

from tests.app.conftest import check_views, figure_titled, figures, link_params, no_exception, settle
from wviz.vit import data
from wviz.views import uncertainty_inspector as views
from wviz.vit import evaluate as vit_evaluate
from wviz.vit.checkpoint import load_checkpoint, save_checkpoint
from wviz.vit.model import ViTConfig, build_model, mc_predict

PAGE = "uncertainty_inspector.py"


def _models():
    return {k: load_checkpoint(p) for k, p in views.BUNDLED.items()}


def test_bundled_demo_matches_the_models(open_page):
    at = open_page(PAGE, view="Heads and rollout")
    models = _models()
    x, y = data.load_dataset("digits", "test")
    probs = figure_titled(at, "Class probabilities")
    bars = {t["name"]: np.asarray(t["y"], dtype=float) for t in probs["data"]}
    assert set(bars) == {"stochastic", "deterministic"}
    for kind, (model, _) in models.items():
        ref = mc_predict(model, x[:1], samples=32, seed=0).mean[0].numpy()
        np.testing.assert_allclose(bars[kind], ref, atol=1e-6)
    shown = {m.label.removeprefix("Predictive entropy, "): m for m in at.metric if m.label.startswith("Predictive")}
    assert set(shown) == set(bars)
    for name, m in shown.items():
        p = bars[name]
        h = -(p[p > 0] * np.log(p[p > 0])).sum()
        assert m.value == f"{h:.3f} nats" and m.delta == f"{h / np.log(10):.0%} of log 10"
    # per-patch covariance trace at layer 1 (the default) and the attention of the class token in block 1
    model = models["stochastic"][0]
    out = model(x[:1])
    trace = [t for t in figure_titled(at, "tr Σ per patch")["data"] if t["type"] == "heatmap"][1]
    np.testing.assert_allclose(np.asarray(trace["z"], dtype=float),
                               out.covariances[1][0, 1:].sum(-1).reshape(4, 4).detach().numpy(), rtol=1e-5)
    att = figure_titled(at, "stochastic: attention")
    heads = [np.asarray(t["z"], dtype=float) for t in att["data"]]
    for h in range(model.config.heads):
        np.testing.assert_allclose(heads[h].ravel(), out.attentions[0][0, h, 0, 1:].detach().numpy(), atol=1e-6)
    # rollout by hand in numpy: R = prod_l (mean_h A_l + I) / 2, class-token row over the patches
    R = np.eye(17)
    for A in out.attentions:
        R = ((A[0].mean(0).detach().numpy() + np.eye(17)) / 2) @ R
    np.testing.assert_allclose(heads[-1].ravel(), R[0, 1:], atol=1e-6)


def test_dataset_panel_agrees_with_the_training_record(open_page):
    """The panel evaluates each model at S = min(its record's S, MAX_PANEL_SAMPLES): the twin's numbers are its
    record's, the stochastic model's (recorded at S = 128) those of a re-evaluation at the panel's S; the corruption
    curves and their AUROCs come from the records."""
    at = open_page(PAGE, panel="Reliability")
    models = _models()
    x, y = data.load_dataset("digits", "test")
    expected = {}
    for kind, (model, rec) in models.items():
        samples = min(rec["eval_samples"], views.MAX_PANEL_SAMPLES)
        expected[kind] = vit_evaluate.summary(vit_evaluate.evaluate(model, x, y, samples=samples, corruptions=False))
        if samples == rec["eval_samples"]:
            assert abs(expected[kind]["ece"] - rec["metrics"]["ece"]) < 1e-3 and \
                expected[kind]["accuracy"] == rec["metrics"]["accuracy"]
    assert {k: min(r["eval_samples"], views.MAX_PANEL_SAMPLES) for k, (_, r) in models.items()} == {
        "stochastic": 32, "deterministic": 16}
    rel = figure_titled(at, "Reliability diagram")
    accuracy = [t for t in rel["data"] if "ECE" in t.get("name", "")]
    counts = {t["name"].split(":")[0]: np.asarray(t["y"], dtype=float) for t in rel["data"] if t["yaxis"] == "y2"}
    assert len(accuracy) == 2 and set(counts) == {"stochastic", "deterministic"}
    for t in accuracy:
        kind = t["name"].split(" ")[0]
        ece_shown = float(t["name"].split("ECE ")[1].rstrip(")"))
        assert abs(ece_shown - expected[kind]["ece"]) < 1e-3
        count, conf = np.asarray(t["customdata"], dtype=float).T
        acc = np.asarray(t["y"], dtype=float)
        assert count.sum() == 360 and count.min() >= 1                   # empty bins left out
        np.testing.assert_array_equal(counts[kind], count)               # the counts drawn below the bars
        assert abs((count / 360 * np.abs(acc - conf)).sum() - expected[kind]["ece"]) < 1e-3
    at.segmented_control(key="panel").set_value("OOD scores").run()
    ood = figure_titled(at, "OOD score 'max-softmax'")
    titles = [a["text"] for a in ood["layout"]["annotations"]]
    for kind in models:
        shown = float(next(s for s in titles if s.startswith(kind)).split("AUROC ")[1])
        assert abs(shown - expected[kind]["auroc"]["sample-image crops"]["max-softmax"]) < 1e-3
    # the confusion matrices: each model's (true, predicted) pairs on the 360 test digits, counted one by one
    at.segmented_control(key="panel").set_value("Confusion").run()
    confusion = {t["name"]: np.asarray(t["z"], dtype=int) for t in figure_titled(at, "Confusion matrix")["data"]}
    assert set(confusion) == {"stochastic", "deterministic"}
    for kind, (model, rec) in models.items():
        samples = min(rec["eval_samples"], views.MAX_PANEL_SAMPLES)
        guesses = vit_evaluate.predict(model, x, samples=samples).probs.argmax(1).tolist()
        counts = np.zeros((10, 10), dtype=int)
        for truth, guess in zip(y.tolist(), guesses):
            counts[truth, guess] += 1
        np.testing.assert_array_equal(confusion[kind], counts)
        assert abs(np.trace(counts) / 360 - expected[kind]["accuracy"]) < 1e-4
    at.segmented_control(key="panel").set_value("Corruptions").run()
    curves = figure_titled(at, "Test error under corruption")
    assert len(curves["data"]) == 6
    seen = figure_titled(at, "Does 'max-softmax' see the corruption?")
    assert len(seen["data"]) == 6
    for t in seen["data"]:
        kind, corruption = t["name"].split(": ")
        np.testing.assert_allclose(np.asarray(t["y"], dtype=float),
                                   models[kind][1]["metrics"]["corruption_auroc"][corruption]["max-softmax"])
    no_exception(at)
    check_views(at, "panel", {"OOD scores": ["vit_ood"], "Corruptions": ["vit_corruption", "vit_corruption_auroc"],
                              "Reliability": ["vit_reliability"], "Confusion": ["vit_confusion"],
                              "Temperature scaling": ["vit_temperature"], "Risk-coverage": ["vit_risk"],
                              "Conformal sets": ["vit_conformal"]})
    at.segmented_control(key="panel").set_value("Temperature scaling").run()
    temperature = figure_titled(at, "Temperature scaling")   # a row per model: before and after, ECE in each title
    titles = [a["text"] for a in temperature["layout"]["annotations"]]
    assert [t.split(", ")[0] for t in titles] == ["stochastic", "stochastic", "deterministic", "deterministic"]
    assert all("ECE 0." in t for t in titles) and titles[2].startswith("deterministic, before<br>τ = 1: ECE")


def test_widgets_move_the_views(open_page):
    at = open_page(PAGE, view="Heads and rollout")
    at.sidebar.number_input(key="index").set_value(8).run()  # the 8th test image: x[7], counted from 1
    at.selectbox(key="query").set_value(6).run()
    at.slider(key="layer").set_value(0).run()
    no_exception(at)
    x, _ = data.load_dataset("digits", "test")
    model = _models()["stochastic"][0]
    out = model(x[7:8])
    trace = [t for t in figure_titled(at, "tr Σ per patch at layer 0")["data"]
             if t["type"] == "heatmap"][1]
    np.testing.assert_allclose(np.asarray(trace["z"], dtype=float).ravel(),
                               out.covariances[0][0, 1:].sum(-1).detach().numpy(), rtol=1e-5)
    heads = figure_titled(at, "stochastic: attention")["data"]
    np.testing.assert_allclose(np.asarray(heads[0]["z"], dtype=float).ravel(),
                               out.attentions[0][0, 0, 6, 1:].detach().numpy(), atol=1e-6)


def test_a_noisy_region_is_what_the_models_see(open_page):
    """The region control (noise, default square of the middle 2 x 2 patches) corrupts the image every view draws
    and every model runs on: the drawn input, the tr(Sigma) map and the class probabilities are those of the
    corrupted image, and the region is outlined."""
    at = open_page(PAGE)
    x, _ = data.load_dataset("digits", "test")
    model = _models()["stochastic"][0]
    clean = model(x[:1]).covariances[1][0, 1:].sum(-1).reshape(4, 4).detach().numpy()
    at.sidebar.selectbox(key="region").set_value("noise").run()
    at.sidebar.slider(key="region_strength").set_value(0.8).run()
    no_exception(at)
    noisy = views.corrupt_region(x[0], "noise", (1, 1, 3, 3), 4, 0.8)
    shown = figure_titled(at, "tr Σ per patch")
    drawn, trace = shown["data"][0], np.asarray(shown["data"][1]["z"], dtype=float)
    np.testing.assert_allclose(np.asarray(drawn["z"], dtype=float), noisy[0].numpy(), atol=1e-6)
    np.testing.assert_allclose(trace, model(noisy[None]).covariances[1][0, 1:].sum(-1).reshape(4, 4).detach().numpy(),
                               rtol=1e-5)
    assert np.abs(trace[1:3, 1:3] - clean[1:3, 1:3]).min() > 1e-3    # every patch of the region moved
    dashed = [s for s in shown["layout"]["shapes"] if s["line"].get("dash") == "dash"]
    corners = [(s["x0"], s["y0"], s["x1"], s["y1"]) for s in dashed]   # on the image, then on both maps
    assert corners == [(3.5, 3.5, 11.5, 11.5)] + [(0.5, 0.5, 2.5, 2.5)] * 2
    bars = {t["name"]: np.asarray(t["y"], dtype=float) for t in figure_titled(at, "Class probabilities")["data"]}
    for kind, (model, _) in _models().items():
        np.testing.assert_allclose(bars[kind], mc_predict(model, noisy[None], samples=32, seed=0).mean[0].numpy(),
                                   atol=1e-6)
    assert not np.allclose(np.asarray(drawn["z"], dtype=float), x[0, 0].numpy())


class Evil:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('pwned')",)


def demo_still_shown(at) -> None:
    """The page goes on with the bundled demo: both bundled models' class probabilities and the panels below."""
    bars = {t["name"] for t in figure_titled(at, "Class probabilities")["data"]}
    assert bars == {"stochastic", "deterministic"}
    figure_titled(at, "Attention of the query (red)")
    assert any("bundled demo" in i.value for i in at.info)


def test_bad_uploads_show_plain_errors(open_page, tmp_path):
    """Every refused file: its name, what is wrong with it and what a valid checkpoint is, while the page goes on
    with the bundled demo (it used to blank the page below the error)."""
    at = open_page(PAGE)
    at.sidebar.radio(key="ckpt").set_value("upload").run()
    assert not at.error and any("Upload a checkpoint" in i.value for i in at.info)
    demo_still_shown(at)
    labels = [b.proto.label for b in at.sidebar.get("download_button")]
    assert "Example checkpoint" in labels
    marker = tmp_path / "pwned"
    buf = io.BytesIO()
    torch.save({"config": {}, "state_dict": {}, "record": Evil(marker)}, buf)
    at.sidebar.file_uploader(key="ckpt_file").upload("evil.pt", buf.getvalue()).run()
    no_exception(at)
    assert any("'evil.pt' was not used" in e.value and "refused" in e.value and views.VALID_CHECKPOINT in e.value
               for e in at.error), [e.value for e in at.error]
    assert not marker.exists()
    demo_still_shown(at)
    at.sidebar.file_uploader(key="ckpt_file").set_value(("notes.txt", b"hello", "text/plain")).run()
    assert any("unsupported file type '.txt'" in e.value for e in at.error)
    good = views.BUNDLED["stochastic"].read_bytes()
    at.sidebar.file_uploader(key="ckpt_file").set_value(("cut.safetensors", good[:len(good) // 2],
                                                          "application/octet-stream")).run()
    no_exception(at)
    assert any("truncated safetensors file" in e.value for e in at.error)
    demo_still_shown(at)


def test_uploaded_png_is_preprocessed(open_page):
    at = open_page(PAGE)
    img = np.full((64, 48), 255, dtype=np.uint8)
    img[16:48, 22:26] = 0  # a dark "1" on white paper
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "PNG")
    at.sidebar.radio(key="img_src").set_value("upload").run()
    at.sidebar.file_uploader(key="img_file").upload("one.png", buf.getvalue(), "image/png").run()
    no_exception(at)
    pre = figure_titled(at, "Preprocessing of the uploaded image")
    last = np.asarray(pre["data"][-1]["z"], dtype=float)
    assert last.shape == (16, 16) and last.min() == 0 and abs(last.max() - 1) < 1e-6
    assert last[:, 7:9].mean() > 0.5 > last[:, :3].mean()  # inverted: a light stroke in the middle on black
    assert "Example image" in [b.proto.label for b in at.sidebar.get("download_button")]
    at.sidebar.file_uploader(key="img_file").set_value(("x.png", b"garbage", "image/png")).run()
    no_exception(at)
    assert any("not an image" in e.value and "A valid image is a PNG or JPG" in e.value for e in at.error)


def test_head_selector_draws_that_head_over_the_image(open_page):
    at = open_page(PAGE)
    at.selectbox(key="head").set_value(3).run()  # head 3 counted from 1: attentions[..., 2, ...]
    at.selectbox(key="query").set_value(11).run()
    no_exception(at)
    x, _ = data.load_dataset("digits", "test")
    out = _models()["stochastic"][0](x[:1])
    fig = figure_titled(at, "Attention of the query (red) in block 1, head 3")
    z = np.asarray([t for t in fig["data"] if t["type"] == "heatmap"][1]["z"], dtype=float)
    np.testing.assert_allclose(z.ravel(), out.attentions[0][0, 2, 11, 1:].detach().numpy(), atol=1e-6)
    (rect_img, rect_map) = fig["layout"]["shapes"]
    assert (rect_map["x0"], rect_map["y0"]) == (2 - 0.5, 2 - 0.5)  # token 11: row 3, col 3 of 4 x 4 (x = 2 from 0)
    assert (rect_img["x0"], rect_img["y0"]) == (2 * 4 - 0.5, 2 * 4 - 0.5)  # 4 x 4 pixels per patch


def test_attention_views_one_at_a_time_and_the_twin_by_hand(open_page):
    """The query's attention maps are views (one drawn per layer move, all in the lecture bundle); the twin's are
    its dot-product weights of the same query (the class token, block 1)."""
    at = open_page(PAGE)
    check_views(at, "view", {"Over the image": ["vit_trace", "vit_attention_head"],
                             "Heads and rollout": ["vit_trace", "vit_attention"],
                             "Deterministic twin": ["vit_trace", "vit_attention_twin"]})
    x, _ = data.load_dataset("digits", "test")
    twin = _models()["deterministic"][0]
    out = twin(x[:1])
    heads = figure_titled(at, "deterministic twin: dot-product attention")["data"]
    for h in range(twin.config.heads):
        np.testing.assert_allclose(np.asarray(heads[h]["z"], dtype=float).ravel(),
                                   out.attentions[0][0, h, 0, 1:].detach().numpy(), atol=1e-6)


def test_uploaded_checkpoints_replace_the_bundled_model(open_page):
    at = open_page(PAGE)
    at.sidebar.radio(key="ckpt").set_value("upload").run()
    raw = views.BUNDLED["stochastic"].read_bytes()
    at.sidebar.file_uploader(key="ckpt_file").upload("mine.safetensors", raw).run()
    no_exception(at)
    assert not at.error
    bars = {t["name"]: np.asarray(t["y"], dtype=float) for t in figure_titled(at, "Class probabilities")["data"]}
    assert set(bars) == {"uploaded (stochastic)", "deterministic"}
    x, _ = data.load_dataset("digits", "test")
    ref = mc_predict(load_checkpoint(raw, name="m.safetensors")[0], x[:1], samples=32, seed=0).mean[0].numpy()
    np.testing.assert_allclose(bars["uploaded (stochastic)"], ref, atol=1e-6)
    # a deterministic upload: no covariance views, no covariance-trace score
    raw = views.BUNDLED["deterministic"].read_bytes()
    at.sidebar.file_uploader(key="ckpt_file").set_value(("twin.safetensors", raw, "application/octet-stream")).run()
    no_exception(at)
    assert any("no covariances" in i.value for i in at.info)
    assert "covariance trace" not in at.selectbox(key="score").options


def _tiny_upload(tmp_path, record: dict, **config) -> bytes:
    """A small untrained checkpoint (seeded) as the bytes of an upload."""
    torch.manual_seed(0)
    model = build_model(ViTConfig(**{"dim": 8, "depth": 1, "heads": 2, **config}))
    return save_checkpoint(model, tmp_path / "tiny.safetensors", record).read_bytes()


def test_upload_with_another_patch_size_high_query_and_measured_panel(open_page, tmp_path, monkeypatch):
    """patch_size 2: 64 patches + the class token, while the twin has 16 + 1. A query patch the twin does not have
    draws no twin attention (it used to raise IndexError); the panel's corruption curves for the upload are
    measured by the page (the file's claim of zero error is ignored), and evaluate moves the progress bar."""
    claimed = {k: [0.0] * 5 for k in data.CORRUPTIONS}
    raw = _tiny_upload(tmp_path, {"eval_samples": 2, "metrics": {"corruption_error": claimed}}, patch_size=2)
    calls = []  # the progress fractions of each evaluation of this upload the page runs
    real = vit_evaluate.evaluate

    def spy(model, *args, progress=None, **kwargs):
        if model.config.patch_size != 2:  # another test's job, still running in the background worker
            return real(model, *args, progress=progress, **kwargs)
        calls.append([])

        def report(f, text):
            calls[-1].append(f)
            progress(f, text)
        return real(model, *args, progress=report, **kwargs)

    monkeypatch.setattr(vit_evaluate, "evaluate", spy)
    at = open_page(PAGE)
    at.sidebar.radio(key="ckpt").set_value("upload").run()
    at.sidebar.file_uploader(key="ckpt_file").upload("p2.safetensors", raw).run()
    at.selectbox(key="query").set_value(40).run()
    no_exception(at)
    settle(at)  # the dataset panel is evaluated in the background (ui.background)
    assert not at.error, [e.value for e in at.error]
    assert any("4 x 4 patches, this model into 8 x 8" in i.value for i in at.info)
    assert not [f for f in figures(at) if f["layout"]["title"]["text"].startswith("deterministic twin")]
    assert "Deterministic twin" not in at.segmented_control(key="view").options
    model = load_checkpoint(raw, name="p2.safetensors")[0]
    x, y = data.load_dataset("digits", "test")
    out = model(x[:1])
    at.segmented_control(key="view").set_value("Heads and rollout").run()
    heads = figure_titled(at, "uploaded (stochastic): attention")["data"]
    for h in range(2):
        np.testing.assert_allclose(np.asarray(heads[h]["z"], dtype=float),
                                   out.attentions[0][0, h, 40, 1:].reshape(8, 8).detach().numpy(), atol=1e-6)
    # the upload's evaluation (the only one with corruptions): 20 passes (test split, 3 OOD sets and the held-out
    # letters, 3 corruptions x 5 severities) reported as they start, then 1.0
    (fractions,) = [c for c in calls if len(c) > 4]
    assert fractions == [i / 20 for i in range(20)] + [1.0]
    report = real(model, x, y, ood_sets={}, samples=2)
    measured = report.corruption
    at.segmented_control(key="panel").set_value("Corruptions").run()
    shown = {t["name"]: np.asarray(t["y"], dtype=float) for t in figure_titled(at, "Test error under corr")["data"]}
    for kind, err in measured.items():
        np.testing.assert_allclose(shown[f"uploaded (stochastic): {kind}"], err.numpy(), atol=1e-6)
    assert any(shown[f"uploaded (stochastic): {k}"].max() > 0 for k in measured)  # not the file's zeros
    # the score's AUROC per corruption: the upload's measured here, the twin's from its record
    seen = {t["name"]: np.asarray(t["y"], dtype=float) for t in figure_titled(at, "Does 'max-softmax' see")["data"]}
    assert len(seen) == 6
    for kind, per in report.corruption_auroc.items():
        np.testing.assert_allclose(seen[f"uploaded (stochastic): {kind}"], per["max-softmax"].numpy(), atol=1e-6)
    assert any("uploaded (stochastic): measured here" in c.value for c in at.caption)


@pytest.mark.parametrize("record, message", [
    ({"metrics": 0.97}, "training record: 'metrics' must be a JSON object"),
    ({"metrics": [0.9, 0.1]}, "training record: 'metrics' must be a JSON object"),
    ({"metrics": {"corruption_error": {"blur": "high"}}}, "metrics 'corruption_error' must be"),
    ({"metrics": {"corruption_error": [[0.1] * 5]}}, "metrics 'corruption_error' must be"),
    ({"eval_samples": 10 ** 7}, "'eval_samples' must be a whole number from 1 to 4096"),
    ({"class_names": "0123456789"}, "'class_names' must be a list of 10 names"),
])
def test_hostile_training_records_show_a_plain_error(open_page, tmp_path, record, message):
    at = open_page(PAGE)
    at.sidebar.radio(key="ckpt").set_value("upload").run()
    at.sidebar.file_uploader(key="ckpt_file").upload("hostile.safetensors", _tiny_upload(tmp_path, record)).run()
    no_exception(at)
    assert any(message in e.value for e in at.error), [e.value for e in at.error]


def test_huge_eval_samples_are_capped_with_a_caption(open_page, tmp_path):
    raw = _tiny_upload(tmp_path, {"eval_samples": 4096}, kind="deterministic")
    at = open_page(PAGE)
    at.sidebar.radio(key="ckpt").set_value("upload").run()
    at.sidebar.file_uploader(key="ckpt_file").upload("many.safetensors", raw).run()
    no_exception(at)
    settle(at)
    assert not at.error
    assert any(f"asks for 4096 Monte-Carlo samples per image; the panel uses {views.MAX_PANEL_SAMPLES}" in c.value
               for c in at.caption)
    figure_titled(at, "OOD score")  # the panel ran


@pytest.mark.parametrize("item", views.TRY_THIS, ids=lambda t: t.label)
def test_try_this_links_open_the_page_in_their_state(open_page, item):
    """Each guided link, opened as the browser would (its query string), sets its widgets, and what its sentence
    asks to watch is on the page."""
    at = open_page(PAGE, **link_params(item))
    assert not at.error, [e.value for e in at.error]
    for key, value in item.params.items():
        assert at.session_state[key] == value, key
    x, _ = data.load_dataset("digits", "test")
    model = _models()["stochastic"][0]
    if "region" in item.params:                     # the middle 2 x 2 patches, noisy or blanked
        trace = [t for t in figure_titled(at, "tr Σ per patch")["data"] if t["type"] == "heatmap"][1]
        z = np.asarray(trace["z"], dtype=float)
        clean = model(x[:1]).covariances[0][0, 1:].sum(-1).reshape(4, 4).detach().numpy()
        probs = next(t for t in figure_titled(at, "Class probabilities")["data"] if t["name"] == "stochastic")
        y = np.asarray(probs["y"], dtype=float)
        low = y - np.asarray(probs["error_y"]["arrayminus"], dtype=float)
        high = y + np.asarray(probs["error_y"]["array"], dtype=float)
        assert 0.9 < clean[1:3, 1:3].min() and clean.max() < 4.7
        if item.params["region"] == "noise":        # flagged: above every clean patch; 6 at 54 %, wide whisker
            assert z[1:3, 1:3].min() > 9.5 and z[1:3, 1:3].max() < 23.5
            assert y.argmax() == 6 and 0.5 < y[6] < 0.58 and low[6] < 0.1 and high[6] > 0.9
        else:                                       # blank: the background's trace; 6 at 55 % against a 2 at 38 %
            assert (abs(z[1:3, 1:3] - 0.8) < 0.05).all()
            assert y.argmax() == 6 and 0.5 < y[6] < 0.6 and 0.35 < y[2] < 0.42 and low[6] < 0.1 and high[6] > 0.9
    if "index" in item.params:                      # the twin wrong, the stochastic model right
        bars = {t["name"]: np.asarray(t["y"], dtype=float) for t in figure_titled(at, "Class probabilities")["data"]}
        assert bars["deterministic"].argmax() == 0 and 0.5 < bars["deterministic"].max() < 0.55
        assert bars["stochastic"].argmax() == 5 and 0.8 < bars["stochastic"][5] < 0.9
    if "ood" in item.params:
        ood = figure_titled(at, f"OOD score '{item.params['score']}': digits vs {item.params['ood']}")
        aurocs = [float(a["text"].split("AUROC ")[1]) for a in ood["layout"]["annotations"]]
        said = float(re.search(r"AUROC (?:about )?([0-9]+\.[0-9]+)", item.watch).group(1))
        assert len(aurocs) == 1 and abs(aurocs[0] - said) < 0.01    # the stochastic model alone has the score
        if "mutual information does" in item.watch:                  # its record's MI, above the twin's best
            mi, twin = (float(n) for n in re.findall(r"about ([0-9.]+[0-9])", item.watch))
            records = {k: r["metrics"]["auroc"][item.params["ood"]] for k, (_, r) in _models().items()}
            assert abs(records["stochastic"]["mutual information"] - mi) < 0.01
            assert abs(max(records["deterministic"].values()) - twin) < 0.01 and mi > twin


def _keys_and_titles(at) -> list[tuple[str, str]]:
    return [(el.proto.id.rsplit("-", 1)[-1], json.loads(el.proto.spec)["layout"]["title"]["text"])
            for el in at.get("plotly_chart")]


def _drawn(at, expected: list[tuple[str, str]]) -> None:
    """The page drew exactly these figures (key, title), in order; a title given as a prefix may go on (the trace
    map's title names the bundled model's rule, the occlusion map's its score)."""
    got = _keys_and_titles(at)
    assert [k for k, _ in got] == [k for k, _ in expected], got
    assert all(t.startswith(e) for (_, t), (_, e) in zip(got, expected)), got


def test_the_figures_at_defaults_after_a_layer_move_and_an_occlusion(open_page):
    """The figures the page draws, by key and title, in order: the layer slider (ui.live) redraws the trace map and
    the chosen attention view; an occlusion changes the numbers, not the figures."""
    panel = [("vit_ood", "OOD score 'max-softmax': digits vs sample-image crops")]  # the panel's default view
    one_image = [("vit_probs", "Class probabilities (mean of 32 draws)")]

    def inside(layer, block):
        return [("vit_trace", f"tr Σ per patch at layer {layer}, under "),
                ("vit_attention_head", f"Attention of the query (red) in block {block}, head 1"),
                ("vit_occlusion", "Occlusion of the mutual information (image score ")]

    at = settle(open_page(PAGE))
    _drawn(at, one_image + inside(1, 1) + panel)
    at.slider(key="layer").set_value(3).run()
    no_exception(at)
    _drawn(at, one_image + inside(3, 3) + panel)
    at.sidebar.selectbox(key="region").set_value("occlude").run()
    at.slider(key="layer").set_value(0).run()
    no_exception(at)
    _drawn(at, one_image + inside(0, 1) + panel)
    dashed = [s for s in figure_titled(at, "tr Σ per patch")["layout"]["shapes"] if s["line"].get("dash")]
    assert len(dashed) == 3                                       # the region, on the image and on both maps


# Each state differs from the defaults in what one or two shared figures are drawn from, and draws the views that
# hold the others (the attention view, the panel's and the calibration's).
SHARED_STATES = [{}, {"layer": "2", "view": "Heads and rollout"}, {"head": "2", "view": "Deterministic twin"},
                 {"query": "patch 5 (row 2, col 1)", "panel": "Corruptions"},
                 {"region": "occlude", "panel": "Reliability"},
                 {"region": "noise", "region_strength": "0.3", "panel": "Risk-coverage"},
                 {"samples": "8", "panel": "Conformal sets"}, {"seed": "3", "panel": "Confusion"}, {"index": "2"},
                 {"score": "mutual information", "panel": "Corruptions"}, {"ood": "uniform noise"}]


def test_shared_figures_are_those_of_their_own_state(open_page):
    """The figures built once per server (ui.shared_figure) are the ones each state draws: every state opened after
    the others (the figures of the defaults already built) draws what it draws with none built before."""
    from wviz.ui.output import _shared

    def specs(at) -> list[str]:   # the figures as the browser gets them
        return [el.proto.spec for el in at.get("plotly_chart")]

    after_others = [specs(settle(open_page(PAGE, **q))) for q in SHARED_STATES]
    assert all(seen != after_others[0] for seen in after_others[1:])   # each state's parameters took effect
    for q, seen in zip(SHARED_STATES, after_others):
        _shared.clear()
        assert specs(settle(open_page(PAGE, **q))) == seen, q


def test_a_missing_image_leaves_the_dataset_panel_drawn(open_page):
    """The image upload chosen but no file yet: its message, nothing that needs the image (no prediction, no layer
    slider), and the dataset panel, which needs the models only."""
    at = open_page(PAGE, img_src="upload")
    assert [e.value for e in at.error] == ["upload a PNG or JPG in the sidebar (or pick a test image)"]
    settle(at)  # the panel is computed in the background (ui.background)
    assert [k for k, _ in _keys_and_titles(at)] == ["vit_ood"]
    assert not at.get("slider") and "samples" not in at.session_state and "region" not in at.session_state


# ---- every checkpoint with every image source: it works, or one sentence says what to change ----------------------

def _cifar_folder(root) -> list[str]:
    """A CIFAR-10 "python version" folder of 4 images per batch and 4 classes (its own names), as the official one is
    laid out (cifar-10-batches-py/data_batch_1..5, test_batch, batches.meta)."""
    import pickle

    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8), b"labels": [0, 1, 2, 3]}
        (folder / name).write_bytes(pickle.dumps(batch))
    names = ["plane", "car", "bird", "cat"]
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": [n.encode() for n in names]}))
    return names


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Tiny checkpoints trained for one epoch of a few images by `python -m wviz.vit.train` itself: on the digits,
    on a folder of shapes (stochastic and deterministic), on a CIFAR-10 folder; and where their data lies."""
    from wviz.vit import shapes, train

    tmp = tmp_path_factory.mktemp("own")
    shapes_root = shapes.write_folder(tmp / "data" / "shapes", train=2, test=2)
    cifar_names = _cifar_folder(tmp / "cifar")
    tiny = ["--epochs", "1", "--dim", "8", "--depth", "1", "--heads", "2", "--no-eval", "--no-progress", "--threads",
            "1", "--batch", "8"]
    runs = {"digits": ["--data", "digits", "--limit", "16"],
            "folder": ["--data", "folder", "--data-root", str(shapes_root), "--patch", "8"],
            "deterministic": ["--data", "folder", "--data-root", str(shapes_root), "--patch", "8", "--kind",
                              "deterministic"],
            "cifar": ["--data", "cifar10", "--data-root", str(tmp / "cifar"), "--patch", "8", "--limit", "8"]}
    files = {}
    for name, args in runs.items():
        out = tmp / f"{name}.safetensors"
        train.main(args + tiny + ["--out", str(out)])
        files[name] = out.read_bytes()
    return {"files": files, "data": tmp / "data", "cifar": tmp / "cifar", "cifar_names": cifar_names,
            "shapes": list(shapes.CLASSES)}


def _picture() -> bytes:
    from wviz.vit import shapes

    buf = io.BytesIO()
    Image.fromarray(shapes.draw("square", 48, np.random.default_rng(5))).save(buf, "PNG")
    return buf.getvalue()


def _open_with(open_page, raw: bytes | None, source: str):
    """The page with checkpoint ``raw`` uploaded (None: the bundled demo) and the image source chosen (an upload:
    a picture of a square)."""
    at = open_page(PAGE, img_src=source)
    if raw is not None:
        at.sidebar.radio(key="ckpt").set_value("upload").run()
        at.sidebar.file_uploader(key="ckpt_file").upload("mine.safetensors", raw).run()
    if source == "upload":
        at.sidebar.file_uploader(key="img_file").upload("square.png", _picture(), "image/png").run()
    no_exception(at)
    return settle(at)


COMBINATIONS = [(ckpt, source) for ckpt in ("bundled", "digits", "folder", "cifar", "deterministic")
                for source in ("test set", "upload")]


@pytest.mark.parametrize("ckpt, source", COMBINATIONS, ids=[f"{c}-{s}" for c, s in COMBINATIONS])
def test_every_checkpoint_with_every_image_source_works_or_says_what_to_change(open_page, monkeypatch, trained,
                                                                              ckpt, source):
    """WVIZ_DATA names the folder that holds the shapes, not CIFAR's: the folder checkpoints show their own test
    split (its class names, the dataset panel), the CIFAR one says in one sentence how to give its data and still
    reads an uploaded picture; no traceback, no error, anywhere."""
    monkeypatch.setenv("WVIZ_DATA", str(trained["data"]))
    at = _open_with(open_page, None if ckpt == "bundled" else trained["files"][ckpt], source)
    assert not at.error, [e.value for e in at.error]
    titles = [f["layout"]["title"]["text"] for f in figures(at)]
    names = {"bundled": [str(i) for i in range(10)], "digits": [str(i) for i in range(10)],
             "cifar": trained["cifar_names"]}.get(ckpt, trained["shapes"])
    if ckpt == "cifar" and source == "test set":                     # nothing to inspect: one sentence says why
        assert titles == [] and [i.value for i in at.info] == [
            "This checkpoint was trained on CIFAR-10: start the app with WVIZ_DATA naming a folder that holds "
            f"cifar-10-batches-py (the official python version) (now WVIZ_DATA={trained['data']}), several folders "
            "separated by ':' as in PATH, or upload a .zip of its test/<class>/ folders in the sidebar."]
        return
    probs = figure_titled(at, "Class probabilities")
    assert [list(t["x"]) for t in probs["data"]][0] == names
    assert len(probs["data"]) == (2 if ckpt in ("bundled", "digits") else 1)  # the twin beside a digits model only
    if source == "test set":
        truth = next(m.value for m in at.markdown if m.value.startswith("True class"))
        assert truth.split("**")[1] == ("6" if ckpt in ("bundled", "digits") else names[0])  # the split's image 0
    else:
        steps = [a["text"] for a in figure_titled(at, "Preprocessing of the uploaded image")["layout"]["annotations"]]
        colour = "grey" if ckpt in ("bundled", "digits") else "RGB"
        assert steps[0] == f"upload, {colour}, square"
        assert any(("stays in colour" in c.value) == (colour == "RGB") for c in at.caption if "What the model" in
                   c.value)
    if ckpt == "cifar":                                              # the upload inspected, the panel needs the data
        assert "Reliability diagram" not in " ".join(titles)
        assert any(i.value.startswith("This checkpoint was trained on CIFAR-10") for i in at.info)
        return
    split = "digits test split" if ckpt in ("bundled", "digits") else "test split"
    figure_titled(at, "OOD score 'max-softmax'")                     # the panel's default view
    at.segmented_control(key="panel").set_value("Confusion").run()
    conf = figure_titled(at, f"Confusion matrix on the {split}")
    assert [list(t["y"]) for t in conf["data"]][0] == names
    assert ("covariance trace" in at.selectbox(key="score").options) == (ckpt != "deterministic")


def test_cifar_found_through_wviz_data_and_a_folder_checkpoint_given_its_zip(open_page, monkeypatch, trained):
    """WVIZ_DATA naming the folder that holds cifar-10-batches-py: the CIFAR checkpoint's test split, with the
    names of batches.meta. Without WVIZ_DATA the folder checkpoint offers the .zip uploader: a hostile zip is refused
    with its message, the example zip (the shapes' test split) gives the test split and the dataset panel."""
    from wviz.vit import shapes

    monkeypatch.setenv("WVIZ_DATA", f"{trained['data']}:{trained['cifar'] / 'cifar-10-batches-py'}")
    at = _open_with(open_page, trained["files"]["cifar"], "test set")
    assert not at.error and not at.info, [e.value for e in at.error]
    assert any("CIFAR-10 found through WVIZ_DATA" in c.value for c in at.sidebar.caption)
    at.segmented_control(key="panel").set_value("Confusion").run()
    assert list(figure_titled(at, "Confusion matrix")["data"][0]["x"]) == trained["cifar_names"]
    assert at.sidebar.number_input(key="index").max == 4                # the 4 images of test_batch

    monkeypatch.delenv("WVIZ_DATA")
    at = _open_with(open_page, trained["files"]["folder"], "test set")
    (note,) = [i.value for i in at.info]
    assert note.startswith("This checkpoint was trained on the folder 'shapes' (its test/<class>/ images): start the "
                           "app with WVIZ_DATA naming the folder that holds 'shapes'")
    assert "Example test images" in [b.proto.label for b in at.sidebar.get("download_button")]
    evil = io.BytesIO()
    with __import__("zipfile").ZipFile(evil, "w") as z:
        z.writestr("../../escape.png", b"x")
    at.sidebar.file_uploader(key="test_zip").upload("evil.zip", evil.getvalue(), "application/zip").run()
    no_exception(at)
    assert any("'../../escape.png' leads outside the zip's folder" in e.value for e in at.error)
    at.sidebar.file_uploader(key="test_zip").set_value(("shapes_test.zip", views.example_test_zip(),
                                                        "application/zip")).run()
    settle(at)
    no_exception(at)
    assert not at.error and not at.info, [e.value for e in at.error]
    assert at.sidebar.number_input(key="index").max == 3 * 20
    at.segmented_control(key="panel").set_value("Confusion").run()
    conf = np.asarray(figure_titled(at, "Confusion matrix on the test split")["data"][0]["z"], dtype=int)
    assert conf.sum(1).tolist() == [20, 20, 20] and list(shapes.CLASSES) == trained["shapes"]
