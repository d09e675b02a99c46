"""The "Uncertainty inspector" page with the bundled checkpoints, checked against the models run directly; and
bad uploads that must end in a plain error (a pickle that would run code must not run)."""
import io

import numpy as np
import torch
from PIL import Image

from tests.app.conftest import figure_titled, no_exception
from wviz.vit import data, views
from wviz.vit.checkpoint import load_checkpoint
from wviz.vit.model import mc_predict

PAGE = "uncertainty_inspector.py"


def _models():
    return {k: load_checkpoint(p) for k, p in views.BUNDLED.items()}


def test_bundled_demo_matches_the_models(open_page):
    at = open_page(PAGE)
    models = _models()
    x, y = data.load_dataset("digits", "test")
    probs = figure_titled(at, "Class probabilities")
    bars = {t["name"]: np.asarray(t["y"], dtype=float) for t in probs["data"]}
    assert set(bars) == {"stochastic", "deterministic"}
    for kind, (model, _) in models.items():
        ref = mc_predict(model, x[:1], samples=32, seed=0).mean[0].numpy()
        np.testing.assert_allclose(bars[kind], ref, atol=1e-6)
    ent = figure_titled(at, "Predictive entropy")["data"][0]
    for name, h in zip(ent["x"], np.asarray(ent["y"], dtype=float)):
        p = bars[name]
        assert abs(h - -(p[p > 0] * np.log(p[p > 0])).sum()) < 1e-5
    # per-patch covariance trace at layer 1 (the default) and the attention of the class token in block 1
    model = models["stochastic"][0]
    out = model(x[:1])
    trace = [t for t in figure_titled(at, "Per-patch uncertainty")["data"] if t["type"] == "heatmap"][1]
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
    at = open_page(PAGE)
    models = _models()
    rel = figure_titled(at, "Reliability diagram")
    for t in rel["data"][1:]:
        kind = t["name"].split(" ")[0]
        ece_shown = float(t["name"].split("ECE ")[1].rstrip(")"))
        assert abs(ece_shown - models[kind][1]["metrics"]["ece"]) < 1e-3
        count, conf = np.asarray(t["customdata"], dtype=float).T
        acc = np.asarray(t["y"], dtype=float)
        assert count.sum() == 360
        assert abs((count / 360 * np.abs(acc - conf)).sum() - models[kind][1]["metrics"]["ece"]) < 1e-3
    ood = figure_titled(at, "OOD score 'max-softmax'")
    titles = [a["text"] for a in ood["layout"]["annotations"]]
    for kind, (model, rec) in models.items():
        shown = float(next(s for s in titles if s.startswith(kind)).split("AUROC ")[1])
        assert abs(shown - rec["metrics"]["auroc"]["sample-image crops"]["max-softmax"]) < 1e-3
    curves = figure_titled(at, "Test error under corruption")
    assert len(curves["data"]) == 6
    no_exception(at)


def test_widgets_move_the_views(open_page):
    at = open_page(PAGE)
    at.sidebar.number_input(key="index").set_value(7).run()
    at.selectbox(key="query").set_value(6).run()
    at.slider(key="layer").set_value(0).run()
    no_exception(at)
    x, _ = data.load_dataset("digits", "test")
    model = _models()["stochastic"][0]
    out = model(x[7:8])
    trace = [t for t in figure_titled(at, "Per-patch uncertainty tr(Sigma) at layer 0")["data"]
             if t["type"] == "heatmap"][1]
    np.testing.assert_allclose(np.asarray(trace["z"], dtype=float).ravel(),
                               out.covariances[0][0, 1:].sum(-1).detach().numpy(), rtol=1e-5)
    heads = figure_titled(at, "stochastic: attention")["data"]
    np.testing.assert_allclose(np.asarray(heads[0]["z"], dtype=float).ravel(),
                               out.attentions[0][0, 0, 6, 1:].detach().numpy(), atol=1e-6)


class Evil:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('pwned')",)


def test_bad_uploads_show_plain_errors(open_page, tmp_path):
    at = open_page(PAGE)
    at.sidebar.radio(key="ckpt").set_value("upload").run()
    assert any("upload a checkpoint" in e.value for e in at.error)
    marker = tmp_path / "pwned"
    buf = io.BytesIO()
    torch.save({"config": {}, "state_dict": {}, "record": Evil(marker)}, buf)
    at.sidebar.file_uploader(key="ckpt_file").upload("evil.pt", buf.getvalue()).run()
    no_exception(at)
    assert any("refused" in e.value for e in at.error), [e.value for e in at.error]
    assert not marker.exists()
    at.sidebar.file_uploader(key="ckpt_file").set_value(("notes.txt", b"hello", "text/plain")).run()
    assert any("unsupported file type '.txt'" in e.value for e in at.error)
    good = views.BUNDLED["stochastic"].read_bytes()
    at.sidebar.file_uploader(key="ckpt_file").set_value(("cut.safetensors", good[:len(good) // 2],
                                                          "application/octet-stream")).run()
    no_exception(at)
    assert any("truncated safetensors file" in e.value for e in at.error)


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
    at.sidebar.file_uploader(key="img_file").set_value(("x.png", b"garbage", "image/png")).run()
    no_exception(at)
    assert any("not an image" in e.value for e in at.error)


def test_head_selector_draws_that_head_over_the_image(open_page):
    at = open_page(PAGE)
    at.selectbox(key="head").set_value(2).run()
    at.selectbox(key="query").set_value(11).run()
    no_exception(at)
    x, _ = data.load_dataset("digits", "test")
    out = _models()["stochastic"][0](x[:1])
    fig = figure_titled(at, "Attention of the query (red) in block 1, head 2")
    z = np.asarray([t for t in fig["data"] if t["type"] == "heatmap"][1]["z"], dtype=float)
    np.testing.assert_allclose(z.ravel(), out.attentions[0][0, 2, 11, 1:].detach().numpy(), atol=1e-6)
    (rect_img, rect_map) = fig["layout"]["shapes"]
    assert (rect_map["x0"], rect_map["y0"]) == (2 - 0.5, 2 - 0.5)  # token 11 = patch 10 = row 2, col 2 (4 x 4)
    assert (rect_img["x0"], rect_img["y0"]) == (2 * 4 - 0.5, 2 * 4 - 0.5)  # 4 x 4 pixels per patch


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
