"""The "Attention as transport" page, driven through AppTest; its numbers checked against numpy and the entmax
package."""
import json

import numpy as np
import pytest
import torch
from entmax import entmax15, entmax_bisect

from tests.app.conftest import check_views, figure_titled, figures, no_exception

PAGE = "attention_transport.py"
# The page's default: q = (1, 0.3), keys (1, 0.2), (0.2, 1), (-0.8, -0.4), so s_j = <q, k_j>:
S_DEFAULT = np.array([1.0 * 1 + 0.3 * 0.2, 1.0 * 0.2 + 0.3 * 1, -0.8 - 0.3 * 0.4])


def bars(at) -> dict:
    fig = [f for f in figures(at) if f["layout"].get("barmode") == "group"]
    assert len(fig) == 1
    return {trace["name"]: np.array(trace["y"]) for trace in fig[0]["data"]}


def numpy_softmax(s, tau):
    e = np.exp((s - s.max()) / tau)
    return e / e.sum()


def test_default_page_shows_the_closed_forms(open_page):
    at = open_page(PAGE)
    w = bars(at)
    assert set(w) == {"softmax", "sparsemax", "entmax"}
    np.testing.assert_allclose(w["softmax"], numpy_softmax(S_DEFAULT, 1.0), atol=1e-12)
    # sparsemax is the Euclidean projection of s / tau onto the simplex: here threshold (1.06 + 0.5 - 1) / 2
    np.testing.assert_allclose(w["sparsemax"], [0.78, 0.22, 0.0], atol=1e-12)
    assert w["entmax"][2] == 0.0
    # 1.5-entmax of s / tau by the entmax package (sort-based, Peters et al. 2019): same Tsallis objective
    np.testing.assert_allclose(w["entmax"], entmax15(torch.tensor(S_DEFAULT)).numpy(), atol=1e-12)
    # the m = 3 landscape: the generic solver lands on the closed form
    land = figure_titled(at, "softmax: -<s, p>")
    closed, numeric = land["data"][1], land["data"][2]
    for axis in "abc":
        assert abs(closed[axis][0] - numeric[axis][0]) < 1e-5


def test_tau_slider_moves_the_weights(open_page):
    at = open_page(PAGE)
    at.sidebar.select_slider(key="tau").set_value(0.01).run()
    no_exception(at)
    w = bars(at)
    np.testing.assert_allclose(w["softmax"], numpy_softmax(S_DEFAULT, 0.01), atol=1e-12)
    np.testing.assert_array_equal(w["sparsemax"], [1.0, 0.0, 0.0])
    at.sidebar.select_slider(key="tau").set_value(100.0).run()
    assert np.ptp(bars(at)["softmax"]) < 0.02  # close to uniform


def test_switching_mechanisms_and_alpha(open_page):
    at = open_page(PAGE)
    at.sidebar.multiselect(key="mechanisms").set_value(["entmax"]).run()
    at.sidebar.slider(key="alpha").set_value(1.0).run()
    no_exception(at)
    np.testing.assert_allclose(bars(at)["entmax"], numpy_softmax(S_DEFAULT, 1.0), atol=1e-12)
    at.sidebar.slider(key="alpha").set_value(2.0).run()
    np.testing.assert_allclose(bars(at)["entmax"], [0.78, 0.22, 0.0], atol=1e-12)


@pytest.mark.parametrize("alpha, tau", [(1.3, 1.0), (1.5, 0.316), (1.75, 0.316), (1.25, 0.1)])
def test_entmax_weights_match_the_entmax_package(open_page, alpha, tau):
    at = open_page(PAGE, mechanisms="entmax")
    at.sidebar.slider(key="alpha").set_value(alpha)
    at.sidebar.select_slider(key="tau").set_value(tau).run()
    no_exception(at)
    assert at.sidebar.select_slider(key="tau").value == tau and at.sidebar.slider(key="alpha").value == alpha
    ref = entmax_bisect(torch.tensor(S_DEFAULT) / tau, alpha=alpha, n_iter=100).numpy()
    np.testing.assert_allclose(bars(at)["entmax"], ref, atol=1e-10)


def test_bad_scores_show_an_error_and_keep_the_last_good_state(open_page):
    at = open_page(PAGE)
    at.sidebar.radio(key="source").set_value("typed scores").run()
    at.sidebar.text_input(key="scores").set_value("3, 1, 2").run()
    good = bars(at)
    for bad in ("1, nan, 2", "1, abc", "", "inf, 1"):
        at.sidebar.text_input(key="scores").set_value(bad).run()
        no_exception(at)
        assert at.error, f"no error shown for {bad!r}"
        kept = bars(at)  # the last good figure is still on the page
        for name in good:
            np.testing.assert_array_equal(kept[name], good[name])


def test_masked_key_and_random_source(open_page):
    at = open_page(PAGE)
    at.sidebar.radio(key="source").set_value("typed scores").run()
    at.sidebar.text_input(key="scores").set_value("1, -inf, 0.5").run()
    no_exception(at)
    assert not at.error
    for p in bars(at).values():
        assert p[1] == 0.0
    at.sidebar.radio(key="source").set_value("random").run()
    at.sidebar.slider(key="m").set_value(7).run()
    no_exception(at)
    assert all(len(p) == 7 and abs(p.sum() - 1) < 1e-9 for p in bars(at).values())
    assert any("exactly 3 keys" in i.value for i in at.info)


def test_prior_softmax_with_a_uniform_prior_is_softmax(open_page):
    at = open_page(PAGE)
    at.sidebar.multiselect(key="mechanisms").set_value(["softmax", "prior-softmax"]).run()
    no_exception(at)
    w = bars(at)
    np.testing.assert_allclose(w["prior-softmax"], w["softmax"], atol=1e-12)


def test_many_queries_heatmap_rows_are_distributions(open_page):
    at = open_page(PAGE, view="Many queries")
    at.select_slider(key="many_n").set_value(64)
    at.select_slider(key="many_m").set_value(16).run()
    no_exception(at)
    heat = figure_titled(at, "softmax, tau")
    z = np.array(heat["data"][0]["z"])
    assert z.shape == (64, 16)
    np.testing.assert_allclose(z.sum(axis=1), 1.0, atol=1e-5)


def prior_page(open_page, rows):
    """The page with prior-softmax chosen and the prior table (key prior_table_3) as a shared link carries it."""
    return open_page(PAGE, mechanisms=["softmax", "prior-softmax"],
                     prior_table_3=json.dumps([[f"k{j + 1}", v] for j, v in enumerate(rows)]))


def test_an_edited_prior_reweights_softmax(open_page):
    at = prior_page(open_page, [0.5, 0.0, 0.5])
    assert not at.error
    pi = np.array([0.5, 0.0, 0.5])
    want = pi * np.exp(S_DEFAULT - S_DEFAULT.max())
    np.testing.assert_allclose(bars(at)["prior-softmax"], want / want.sum(), atol=1e-12)  # a zero masks k2


@pytest.mark.parametrize("rows, message", [
    ([-0.2, 0.6, 0.6], "prior has a negative weight (-0.2); prior weights must be >= 0"),
    ([0.5, 0.3, 0.5], "prior sums to 1.3, not 1"),
])
def test_a_bad_prior_shows_an_error_not_an_exception(open_page, rows, message):
    at = prior_page(open_page, rows)
    no_exception(at)
    assert at.error and message in at.error[0].value
    assert not figures(at)   # nothing computed yet: the page stops after the error instead of drawing NaN


def test_a_bad_prior_entered_later_keeps_the_last_good_weights(open_page):
    at = open_page(PAGE)
    good = bars(at)
    at.query_params["prior_table_3"] = json.dumps([["k1", 0.7], ["k2", -0.1], ["k3", 0.4]])  # read when it opens
    at.sidebar.multiselect(key="mechanisms").set_value(["softmax", "sparsemax", "entmax", "prior-softmax"]).run()
    no_exception(at)
    assert at.error and "prior has a negative weight (-0.1)" in at.error[0].value
    kept = bars(at)
    assert set(kept) == set(good)
    for name in good:
        np.testing.assert_array_equal(kept[name], good[name])


def test_views_one_at_a_time_from_the_url_and_all_in_the_bundle(open_page):
    at = open_page(PAGE, view="tau sweep")
    assert len(figures(at)) == 2 and figure_titled(at, "softmax: weights against tau")
    check_views(at, "view", {"Objective on the simplex (m = 3)": ["bars", "land"], "tau sweep": ["bars", "sweep"],
                             "Many queries": ["bars", "many"]})
