"""The "Wasserstein self-attention" page, driven through AppTest; its matrices checked by hand."""
import re

import numpy as np
import pytest

from tests.app.conftest import check_views, figures, link_params, no_exception, shown_text
from wviz import sample_data
from wviz.views import wasserstein_self_attention as wv

PAGE = "wasserstein_self_attention.py"


def panels(at):
    fig = [f for f in figures(at) if f["layout"]["title"]["text"].startswith("Distances and weights")][0]
    return [np.asarray(t["z"], dtype=float) for t in fig["data"]]


def test_default_gaussian_reading_by_hand(open_page):
    at = open_page(PAGE)
    W, A, dot = panels(at)
    X = sample_data.sequence("noisy sinusoids", 24, 8, seed=0).numpy()
    mean, sd = X[:, :4], np.exp(X[:, 4:] / 2)  # log-variance halves
    ref = ((mean[:, None] - mean[None]) ** 2).sum(-1) + ((sd[:, None] - sd[None]) ** 2).sum(-1)
    np.testing.assert_allclose(W, ref, atol=1e-9)
    E = np.exp(-(ref - ref.min(axis=1, keepdims=True)))
    np.testing.assert_allclose(A, E / E.sum(axis=1, keepdims=True), atol=1e-9)
    S = X @ X.T / np.sqrt(8)
    E = np.exp(S - S.max(axis=1, keepdims=True))
    np.testing.assert_allclose(dot, E / E.sum(axis=1, keepdims=True), atol=1e-9)


def test_empirical_and_cloud_readings_and_sigmoid(open_page):
    at = open_page(PAGE)
    at.sidebar.radio(key=wv.Keys.REPRESENTATION).set_value("empirical").run()
    no_exception(at)
    W, A, _ = panels(at)
    X = sample_data.sequence("noisy sinusoids", 24, 8, seed=0).numpy()
    srt = np.sort(X, axis=1)
    np.testing.assert_allclose(W, np.abs(srt[:, None] - srt[None]).mean(-1), atol=1e-9)  # W_1 by sorting
    at.sidebar.radio(key=wv.Keys.WEIGHT_MAP).set_value("sigmoid").run()
    no_exception(at)
    W, A, _ = panels(at)
    sig = 1 / (1 + np.exp(-(1.0 - W) / 0.5))
    np.testing.assert_allclose(A, sig / sig.sum(axis=1, keepdims=True), atol=1e-9)
    at.sidebar.radio(key=wv.Keys.REPRESENTATION).set_value("cloud").run()
    no_exception(at)
    W, A, _ = panels(at)
    assert np.allclose(np.diag(W), 0, atol=1e-6) and np.allclose(W, W.T, atol=1e-6)


def test_bad_settings_show_errors_not_crashes(open_page):
    at = open_page(PAGE)
    at.sidebar.radio(key=wv.Keys.REPRESENTATION).set_value("cloud").run()
    at.sidebar.number_input(key=wv.Keys.K).set_value(3).run()  # 8 is not divisible by 3
    no_exception(at)
    assert at.error
    at.sidebar.number_input(key=wv.Keys.K).set_value(2).run()
    at.sidebar.selectbox(key=wv.Keys.SEQUENCE).set_value("uploaded CSV").run()
    no_exception(at)
    assert at.error  # nothing uploaded yet
    at.sidebar.file_uploader(key=wv.Keys.SEQUENCE_CSV).upload("x.csv", b"1,2\n3,oops\n", "text/csv").run()
    no_exception(at)
    assert re.search(r"(row|line) 2, column 2 \('oops'\)", shown_text(at.error[0]))  # wviz.io's wording
    at.sidebar.file_uploader(key=wv.Keys.SEQUENCE_CSV).set_value(("x.csv", b"a,b,c,d\n1,2,3,4\n0,1,0,1\n5,5,5,5\n",
                                                             "text/csv")).run()
    no_exception(at)
    assert not at.error and panels(at)[0].shape == (3, 3)


def softmax_rows(S):
    E = np.exp(S - S.max(axis=1, keepdims=True))
    return E / E.sum(axis=1, keepdims=True)


def test_random_projections_and_random_preset_outputs_by_hand(open_page):
    """Identity off (W_Q, W_K, W_V ~ N(0, 1/d) from the seed) on the "random" sequence: W, A and both outputs
    Y = A V recomputed in numpy from X and the projections."""
    at = open_page(PAGE, view=wv.Labels.OUTPUTS)
    at.sidebar.selectbox(key=wv.Keys.SEQUENCE).set_value("random").run()
    at.sidebar.toggle(key=wv.Keys.IDENTITY).set_value(False).run()
    no_exception(at)
    assert not at.error
    X = sample_data.sequence("random", 24, 8, seed=0).numpy()
    W_Q, W_K, W_V = (w.numpy() for w in sample_data.projections(8, 0))
    assert not np.allclose(W_Q, np.eye(8))
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    mq, sq, mk, sk = Q[:, :4], np.exp(Q[:, 4:] / 2), K[:, :4], np.exp(K[:, 4:] / 2)
    W_ref = ((mq[:, None] - mk[None]) ** 2).sum(-1) + ((sq[:, None] - sk[None]) ** 2).sum(-1)
    A_ref = softmax_rows(-W_ref)
    A_dot = softmax_rows(Q @ K.T / np.sqrt(8))
    W, A, dot = panels(at)
    np.testing.assert_allclose(W, W_ref, atol=1e-9)
    np.testing.assert_allclose(A, A_ref, atol=1e-9)
    np.testing.assert_allclose(dot, A_dot, atol=1e-9)
    fig = [f for f in figures(at) if f["layout"]["title"]["text"] == "Input and outputs along the sequence"][0]
    traces = {}
    for t in fig["data"]:  # one trace per series and channel, in channel order
        traces.setdefault(t["name"], []).append(np.asarray(t["y"], dtype=float))
    np.testing.assert_allclose(np.stack(traces["input X"], 1), X[:, :3], atol=1e-12)
    np.testing.assert_allclose(np.stack(traces["Y (Wasserstein)"], 1), (A_ref @ V)[:, :3], atol=1e-9)
    np.testing.assert_allclose(np.stack(traces["Y (dot product)"], 1), (A_dot @ V)[:, :3], atol=1e-9)


def test_views_one_at_a_time_from_the_url_and_all_in_the_bundle(open_page):
    at = open_page(PAGE)   # the pipeline first: a tau move does not send it again
    assert [f["layout"]["title"]["text"][:9] for f in figures(at)] == ["Distances", "Wasserstei"[:9]]
    check_views(at, wv.Keys.VIEW, {wv.Labels.OUTPUTS: ["matrices", "sequences"],
                                   wv.Labels.PIPELINE: ["matrices", "flow"]})


def test_the_example_file_is_offered_and_uploads_as_it_is(open_page):
    """Under the uploader: a download of wv.example_sequence(); uploaded back, it is the 12-token sequence."""
    at = open_page(PAGE, sequence="uploaded CSV")
    (button,) = [b for b in at.get("download_button") if b.proto.label == "Example sequence (CSV)"]
    assert button.proto.help
    at.sidebar.file_uploader(key=wv.Keys.SEQUENCE_CSV).upload("example_sequence.csv", wv.example_sequence(),
                                                       "text/csv").run()
    no_exception(at)
    assert not at.error
    W, A, _ = panels(at)
    assert W.shape == A.shape == (12, 12)
    np.testing.assert_allclose(A.sum(axis=1), 1.0, atol=1e-12)


def test_matrices_have_titled_colour_bars_and_axis_titles(open_page):
    fig = [f for f in figures(open_page(PAGE)) if f["layout"]["title"]["text"].startswith("Distances and weights")][0]
    assert [t["colorbar"]["title"]["text"] for t in fig["data"]] == ["W<sub>ij</sub>", "A<sub>ij</sub>",
                                                                     "A<sub>ij</sub>"]
    assert all(t.get("showscale", True) for t in fig["data"])
    for c in ("", "2", "3"):
        assert fig["layout"][f"xaxis{c}"]["title"]["text"] == "key j"
        assert fig["layout"][f"yaxis{c}"]["title"]["text"] == "query i"
    assert "one key in 2, one query in 3" in fig["layout"]["title"]["text"]  # 24 positions: thinned, and said so


def test_a_width_the_reading_cannot_take_is_explained(open_page):
    at = open_page(PAGE, sequence="uploaded CSV")
    at.sidebar.file_uploader(key=wv.Keys.SEQUENCE_CSV).upload("odd.csv", b"1,2,3\n4,5,6\n0,1,2\n", "text/csv").run()
    no_exception(at)
    assert shown_text(at.error[0]).startswith("the sequence has d = 3 channels, but the gaussian reading")


@pytest.mark.parametrize("item", wv.TRY_THIS, ids=lambda t: t.label)
def test_try_this_links_open_the_page_in_their_state(open_page, item):
    """Opened through its link's query parameters, the page runs without an error and each widget named holds the
    value; at least one of them differs from the page's default (the link changes something)."""
    default = open_page(PAGE)
    at = open_page(PAGE, **link_params(item))
    assert not at.error
    for k, v in item.params.items():
        assert at.session_state[k] == v, (k, at.session_state[k], v)
    assert any(default.session_state[k] != v for k, v in item.params.items() if k in default.session_state)
    caption = next(shown_text(c) for c in at.caption if "W ranges from" in c.value)
    for pattern in SHOWN[item.label]:
        shown = re.search(pattern, caption)
        assert shown, (pattern, caption)
        assert shown[1] in item.watch, (shown[1], item.watch)   # the sentence quotes the page's own numbers


# What each link's sentence reads off the caption under the matrices (its numbers computed by the page): each
# pattern's group, found in the caption, is quoted by the sentence.
SHOWN = {"Send tau to 0.01": [r"A's entries from (0 to 1);"],
         "Send tau to 100": [r"A's entries from ([\d.]+ to [\d.]+);"],
         "Use random projections": [r"(\d+ of the 24 rows) put their largest weight on the token itself"],
         "Use the note's sigmoid, rows not normalised": [r"the rows of A sum to ([\d.]+ to [\d.]+)\."],
         "Read vectors as empirical distributions": [r"W ranges from 0 to ([\d.]+),"]}
