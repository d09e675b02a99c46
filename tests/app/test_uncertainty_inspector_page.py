"""The "Uncertainty inspector" page with the bundled checkpoints, checked against the models run directly: its views,
the guided links and the figures at their defaults (the dataset panel: test_uncertainty_inspector_panel.py;
uploads: test_uncertainty_inspector_uploads.py; every kind of checkpoint: test_uncertainty_inspector_checkpoints.py)."""
import io
import json
import re

import numpy as np
import pytest
from PIL import Image

from tests.app.conftest import check_views, figure_titled, link_params, no_exception, settle, shown_text
from tests.app.inspector import DIGITS, PAGE, bundled_models
from wviz.views import uncertainty_inspector as views
from wviz.vit import data
from wviz.vit.model import mc_predict


def test_bundled_demo_matches_the_models(open_page):
    at = open_page(PAGE, **DIGITS, view="Heads and rollout")
    models = bundled_models()
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


def test_the_page_opens_on_the_mnist_pair_and_the_digits_pair_is_one_choice_away(open_page):
    """At its defaults the page shows the MNIST pair on MNIST's test split (its first digit, 7 x 7 patches), the panel
    on its 1,000 test digits with MNIST's OOD sets and corruptions, the corruption curves from the records; 'digits'
    under Demo data shows the 8 x 8 digits pair."""
    at = open_page(PAGE, panel="Corruptions")   # the default pair: MNIST's
    models = bundled_models("mnist")
    x, _ = data.load_dataset("mnist", "test")
    bars = {t["name"]: np.asarray(t["y"], dtype=float) for t in figure_titled(at, "Class probabilities")["data"]}
    assert set(bars) == {"stochastic", "deterministic"}
    for kind, (model, _) in models.items():
        np.testing.assert_allclose(bars[kind], mc_predict(model, x[:1], samples=32, seed=0).mean[0].numpy(), atol=1e-6)
    out = models["stochastic"][0](x[:1])
    trace = [t for t in figure_titled(at, "tr Σ per patch")["data"] if t["type"] == "heatmap"][1]
    np.testing.assert_allclose(np.asarray(trace["z"], dtype=float),
                               out.covariances[1][0, 1:].sum(-1).reshape(7, 7).detach().numpy(), rtol=1e-5)
    assert any(h.value == "On the whole MNIST test split" for h in at.subheader)
    curves = figure_titled(at, "Test error under corruption")
    for t in curves["data"]:
        kind, corruption = t["name"].split(": ")
        np.testing.assert_allclose(np.asarray(t["y"], dtype=float),
                                   models[kind][1]["metrics"]["corruption_error"][corruption])
    assert {t["name"].split(": ")[1] for t in curves["data"]} == set(views.SHIPPED["mnist"].corruptions)
    assert any("rotation, shear, translate" in c.value for c in at.caption)
    at.segmented_control(key="panel").set_value("OOD scores").run()
    assert at.selectbox(key=views.Keys.OOD).options == list(views.SHIPPED["mnist"].ood_names)
    at.sidebar.radio(key=views.Keys.DEMO).set_value("digits").run()
    no_exception(at)
    digits, _ = data.load_dataset("digits", "test")
    bars = {t["name"]: np.asarray(t["y"], dtype=float) for t in figure_titled(at, "Class probabilities")["data"]}
    for kind, (model, _) in bundled_models("digits").items():
        np.testing.assert_allclose(bars[kind], mc_predict(model, digits[:1], samples=32, seed=0).mean[0].numpy(),
                                   atol=1e-6)


def test_widgets_move_the_views(open_page):
    at = open_page(PAGE, **DIGITS, view="Heads and rollout")
    at.sidebar.number_input(key="index").set_value(8).run()  # the 8th test image: x[7], counted from 1
    at.selectbox(key="query").set_value(6).run()
    at.slider(key="layer").set_value(0).run()
    no_exception(at)
    x, _ = data.load_dataset("digits", "test")
    model = bundled_models()["stochastic"][0]
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
    at = open_page(PAGE, **DIGITS)
    x, _ = data.load_dataset("digits", "test")
    model = bundled_models()["stochastic"][0]
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
    for kind, (model, _) in bundled_models().items():
        np.testing.assert_allclose(bars[kind], mc_predict(model, noisy[None], samples=32, seed=0).mean[0].numpy(),
                                   atol=1e-6)
    assert not np.allclose(np.asarray(drawn["z"], dtype=float), x[0, 0].numpy())


def test_uploaded_png_is_preprocessed(open_page):
    at = open_page(PAGE, **DIGITS)
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
    assert any("not an image" in shown_text(e) and "A valid image is a PNG or JPG" in shown_text(e) for e in at.error)


def test_head_selector_draws_that_head_over_the_image(open_page):
    at = open_page(PAGE, **DIGITS)
    at.selectbox(key="head").set_value(3).run()  # head 3 counted from 1: attentions[..., 2, ...]
    at.selectbox(key="query").set_value(11).run()
    no_exception(at)
    x, _ = data.load_dataset("digits", "test")
    out = bundled_models()["stochastic"][0](x[:1])
    fig = figure_titled(at, "Attention of the query (red) in block 1, head 3")
    z = np.asarray([t for t in fig["data"] if t["type"] == "heatmap"][1]["z"], dtype=float)
    np.testing.assert_allclose(z.ravel(), out.attentions[0][0, 2, 11, 1:].detach().numpy(), atol=1e-6)
    (rect_img, rect_map) = fig["layout"]["shapes"]
    assert (rect_map["x0"], rect_map["y0"]) == (2 - 0.5, 2 - 0.5)  # token 11: row 3, col 3 of 4 x 4 (x = 2 from 0)
    assert (rect_img["x0"], rect_img["y0"]) == (2 * 4 - 0.5, 2 * 4 - 0.5)  # 4 x 4 pixels per patch


def test_attention_views_one_at_a_time_and_the_twin_by_hand(open_page):
    """The query's attention maps are views (one drawn per layer move, all in the lecture bundle); the twin's are
    its dot-product weights of the same query (the class token, block 1)."""
    at = open_page(PAGE, **DIGITS)
    check_views(at, "view", {"Over the image": ["vit_trace", "vit_attention_head"],
                             "Heads and rollout": ["vit_trace", "vit_attention"],
                             "Deterministic twin": ["vit_trace", "vit_attention_twin"]})
    x, _ = data.load_dataset("digits", "test")
    twin = bundled_models()["deterministic"][0]
    out = twin(x[:1])
    heads = figure_titled(at, "deterministic twin: dot-product attention")["data"]
    for h in range(twin.config.heads):
        np.testing.assert_allclose(np.asarray(heads[h]["z"], dtype=float).ravel(),
                                   out.attentions[0][0, h, 0, 1:].detach().numpy(), atol=1e-6)


@pytest.mark.parametrize("item", views.TRY_THIS, ids=lambda t: t.label)
def test_try_this_links_open_the_page_in_their_state(open_page, item):
    """Each guided link, opened as the browser would (its query string), sets its widgets, and what its sentence
    asks to watch is on the page."""
    at = open_page(PAGE, **link_params(item))
    assert not at.error, [shown_text(e) for e in at.error]
    for key, value in item.params.items():
        assert at.session_state[key] == value, key
    dataset = views.DEMO_LABELS.get(item.params.get(views.Keys.DEMO), views.DEFAULT_DEMO)
    x, _ = data.load_dataset(dataset, "test")
    model = bundled_models(dataset)["stochastic"][0]
    if "region" in item.params:                     # the digits' middle 2 x 2 patches, noisy
        trace = [t for t in figure_titled(at, "tr Σ per patch")["data"] if t["type"] == "heatmap"][1]
        z = np.asarray(trace["z"], dtype=float)
        clean = model(x[:1]).covariances[0][0, 1:].sum(-1).reshape(4, 4).detach().numpy()
        probs = next(t for t in figure_titled(at, "Class probabilities")["data"] if t["name"] == "stochastic")
        y = np.asarray(probs["y"], dtype=float)
        low = y - np.asarray(probs["error_y"]["arrayminus"], dtype=float)
        high = y + np.asarray(probs["error_y"]["array"], dtype=float)
        assert 0.9 < clean[1:3, 1:3].min() and clean.max() < 4.7 and item.params["region"] == "noise"
        assert z[1:3, 1:3].min() > 9.5 and z[1:3, 1:3].max() < 23.5   # flagged: above every clean patch
        assert y.argmax() == 6 and 0.5 < y[6] < 0.58 and low[6] < 0.1 and high[6] > 0.9   # 6 at 54 %, wide whisker
    if "index" in item.params:                      # the twin wrong, the stochastic model right
        bars = {t["name"]: np.asarray(t["y"], dtype=float) for t in figure_titled(at, "Class probabilities")["data"]}
        assert bars["deterministic"].argmax() == 5 and 0.98 < bars["deterministic"].max() < 0.99
        assert bars["stochastic"].argmax() == 8 and 0.84 < bars["stochastic"][8] < 0.85
    said = " ".join(shown_text(m) for m in at.markdown if m.value.startswith("True class"))
    for model, label, share in re.findall(r"(stochastic|deterministic): \*\*(\d)\*\* \(([\d.]+%)\)", said):
        quoted = {"An 8 the twin is sure is a 5": {"stochastic": f"says {label} at {share}",
                                                   "deterministic": f"a {label} at {share}"},
                  "8 x 8 digits: noise on the middle of the digit": {"stochastic": f"a {label}, but at {share}"}}
        if model in quoted.get(item.label, {}):     # the sentence quotes the line above the bars
            assert quoted[item.label][model] in item.watch, (quoted[item.label][model], item.watch)
    if "score" in item.params:                      # the panel title's AUROC, and the MI-occlusion caption's
        ood_name = item.params.get("ood", views.shipped_split(dataset).ood_names[0])
        ood = figure_titled(at, f"OOD score '{item.params['score']}': digits vs {ood_name}")
        titles = [a["text"] for a in ood["layout"]["annotations"]]
        if len(titles) == 1:                        # a score of the stochastic model alone
            auroc = titles[0].split(": ")[1]
            assert f"{auroc} in the panel's title" in item.watch, (auroc, item.watch)
        else:                                       # both models' titles, quoted as they read
            assert titles[0].startswith("stochastic") and ", ".join(titles).replace(":", "") in item.watch, titles
        if "MI-occlusion score does" in item.watch:   # a digits link: its caption quotes the record
            caption = next(shown_text(c) for c in at.caption if c.value.startswith("MI-occlusion score ("))
            mi = re.search(rf"{ood_name} \*\*([\d.]+)\*\*", caption)[1]
            assert f"{ood_name} {mi})" in item.watch and float(mi) > 0.8 > float(auroc.split()[1])


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

    at = settle(open_page(PAGE, **DIGITS))
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


def test_a_missing_image_leaves_the_dataset_panel_drawn(open_page):
    """The image upload chosen but no file yet: its message, nothing that needs the image (no prediction, no layer
    slider), and the dataset panel, which needs the models only."""
    at = open_page(PAGE, **DIGITS, img_src="upload")
    assert [shown_text(e) for e in at.error] == ["upload a PNG or JPG in the sidebar (or pick a test image)"]
    settle(at)  # the panel is computed in the background (ui.background)
    assert [k for k, _ in _keys_and_titles(at)] == ["vit_ood"]
    assert not at.get("slider") and "samples" not in at.session_state and "region" not in at.session_state
