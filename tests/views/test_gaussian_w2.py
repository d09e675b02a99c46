"""The "Gaussian W2 attention" page's computations (004) against independent references: POT's
bures_wasserstein_distance and scipy's sqrtm for W2^2, the diagonal closed form ||m1 - m2||^2 + ||s1 - s2||^2,
numpy softmaxes, and the covariance sweep against one call per scale."""
import numpy as np
import ot as pot
import pytest
import torch
from scipy.linalg import sqrtm
from scipy.special import softmax

from wviz.views import gaussian_w2 as gv

F64 = torch.float64
MEANS = gv.DEFAULT[["x", "y"]].to_numpy()
SIG = gv.DEFAULT[["sigma_x", "sigma_y", "rho"]].to_numpy()


def covariance(sx, sy, rho):
    return np.array([[sx * sx, rho * sx * sy], [rho * sx * sy, sy * sy]])


COVS = np.array([covariance(*row) for row in SIG])


def w2_squared_scipy(m1, S1, m2, S2):
    r2 = sqrtm(S2)
    return float(((m1 - m2) ** 2).sum() + np.trace(S1 + S2 - 2 * sqrtm(r2 @ S1 @ r2).real))


def w2_squared_pot(means, covs):
    """(n, n) W2^2 by POT (which returns W2)."""
    return pot.gaussian.bures_wasserstein_distance(means, means, covs, covs) ** 2


@pytest.fixture
def tokens():
    return gv.tokens_from_table(gv.DEFAULT, diagonal=False)


def test_tokens_from_the_table(tokens):
    assert tokens.names == ["t1", "t2", "t3", "t4", "t5"]
    np.testing.assert_array_equal(tokens.means.numpy(), MEANS)
    np.testing.assert_allclose(tokens.covs.numpy(), COVS, atol=1e-15)
    diag = gv.tokens_from_table(gv.DEFAULT, diagonal=True)
    np.testing.assert_allclose(diag.covs.numpy(), SIG[:, :2] ** 2, atol=1e-15)       # rho dropped
    np.testing.assert_allclose(diag.full_covs.numpy(), [np.diag(s[:2] ** 2) for s in SIG], atol=1e-15)
    assert gv.query_row(tokens, 4) == [1.5, 1.2, 1.0, 0.4, 0.7]


def test_errors_name_the_tokens_as_the_table_does():
    bad = gv.DEFAULT.copy()
    bad.loc[2, "sigma_x"] = -0.6
    with pytest.raises(ValueError, match=r"^sigma_x of token t3 is -0.6; a standard deviation must be >= 0$"):
        gv.tokens_from_table(bad, diagonal=True)          # checked in diagonal mode too
    bad.loc[2, "token"] = "cat"
    with pytest.raises(ValueError, match="^sigma_x of token cat is -0.6"):
        gv.tokens_from_table(bad, diagonal=False)
    bad = gv.DEFAULT.copy()
    bad.loc[1, "rho"] = 1.5
    with pytest.raises(ValueError, match=r"rho of token t2 is 1.5; a correlation must lie in \[-1, 1\]"):
        gv.tokens_from_table(bad, diagonal=False)
    bad = gv.DEFAULT.copy()
    bad.loc[3, "x"] = None
    with pytest.raises(ValueError, match="^token t4 has an empty entry$"):
        gv.tokens_from_table(bad, diagonal=False)
    with pytest.raises(ValueError, match="at least two tokens"):
        gv.tokens_from_table(gv.DEFAULT.iloc[:1], diagonal=False)
    unnamed = gv.DEFAULT.copy()
    unnamed.loc[0, "token"], unnamed.loc[3, "token"] = None, "  "
    assert gv.token_names(unnamed) == ["t1", "t2", "t3", "t4", "t5"]


def test_with_query_replaces_and_checks_one_row(tokens):
    moved = gv.with_query(tokens, 0, [1.0, 0.0, 1.5, 0.5, 0.2])
    np.testing.assert_array_equal(moved.means.numpy()[0], [1.0, 0.0])
    np.testing.assert_allclose(moved.covs.numpy()[0], covariance(1.5, 0.5, 0.2), atol=1e-15)
    np.testing.assert_array_equal(moved.covs.numpy()[1:], tokens.covs.numpy()[1:])
    with pytest.raises(ValueError, match="sigma_y of token t2 is -1"):
        gv.with_query(tokens, 1, [0.0, 0.0, 1.0, -1.0, 0.0])


@pytest.mark.parametrize("lo, hi, value, expected", [(-3.0, 3.0, 0.4, (-3.0, 3.0)), (-3.0, 3.0, 4.2, (-3.0, 5.0)),
                                                     (0.0, 2.0, 2.7, (0.0, 3.0)), (-3.0, 3.0, -3.5, (-4.0, 3.0))])
def test_slider_range_widens_to_hold_the_value(lo, hi, value, expected):
    assert gv.slider_range(lo, hi, value) == expected


@pytest.mark.parametrize("query", [0, 3])
def test_w2_split_against_pot_and_scipy(tokens, query):
    s = gv.scene(tokens, query)
    W = w2_squared_pot(MEANS, COVS)
    np.testing.assert_allclose((s.mean_part + s.cov_part).numpy(), W[query], atol=1e-9)
    for k in range(5):
        assert abs(float(s.mean_part[k]) - ((MEANS[query] - MEANS[k]) ** 2).sum()) < 1e-14
        assert abs(float(s.mean_part[k] + s.cov_part[k]) - w2_squared_scipy(MEANS[query], COVS[query], MEANS[k],
                                                                             COVS[k])) < 1e-9
    assert float(s.cov_part[query]) == pytest.approx(0.0, abs=1e-12)


def test_ellipses_are_the_n_sigma_level_sets(tokens):
    s = gv.scene(tokens, 0)
    for k in (1, 2):
        pts = s.ellipses[k].numpy()
        assert pts.shape == (5, 100, 2)
        for i in range(5):
            d = pts[i] - MEANS[i]
            mahalanobis = np.einsum("pi,ij,pj->p", d, np.linalg.inv(COVS[i]), d)
            np.testing.assert_allclose(mahalanobis, k * k, atol=1e-9)


@pytest.mark.parametrize("tau", [0.1, 1.0, 7.0])
def test_attention_against_pot_and_numpy(tokens, tau):
    a = gv.attend(gv.scene(tokens, 0), tau)
    np.testing.assert_allclose(a.w2.numpy(), softmax(-w2_squared_pot(MEANS, COVS) / tau, axis=1), atol=1e-9)
    np.testing.assert_allclose(a.dot.numpy(), softmax(MEANS @ MEANS.T / tau, axis=1), atol=1e-14)


def test_diagonal_attention_is_the_closed_form(tau=0.5):
    a = gv.attend(gv.scene(gv.tokens_from_table(gv.DEFAULT, diagonal=True), 2), tau)
    sd = SIG[:, :2]
    W = ((MEANS[:, None] - MEANS[None]) ** 2).sum(-1) + ((sd[:, None] - sd[None]) ** 2).sum(-1)
    np.testing.assert_allclose(a.w2.numpy(), softmax(-W / tau, axis=1), atol=1e-12)


@pytest.mark.parametrize("diagonal", [False, True])
def test_covariance_sweep_equals_one_call_per_scale(diagonal):
    t = gv.tokens_from_table(gv.DEFAULT, diagonal=diagonal)
    a = gv.attend(gv.scene(t, 0), 0.8)
    sweep = gv.sweep(a, 1)
    assert sweep.shape == (len(gv.SCALES), 5)
    np.testing.assert_allclose(sweep.sum(-1).numpy(), 1.0, atol=1e-12)
    for k in (0, 40, 60, 80):
        covs = t.covs.clone()
        covs[1] = covs[1] * gv.SCALES[k]
        one = gv.attend(gv.scene(gv.Tokens(t.names, t.params, t.means, covs, diagonal), 0), 0.8)
        np.testing.assert_allclose(sweep[k].numpy(), one.w2[0].numpy(), atol=1e-12)
    covs = COVS.copy() if not diagonal else np.array([np.diag(s[:2] ** 2) for s in SIG])
    covs[1] = 10.0 * covs[1]                                      # SCALES[60] = 10
    assert abs(float(gv.SCALES[60]) - 10.0) < 1e-12
    W = np.array([w2_squared_scipy(MEANS[0], covs[0], MEANS[j], covs[j]) for j in range(5)])
    np.testing.assert_allclose(sweep[60].numpy(), softmax(-W / 0.8), atol=1e-9)


def test_every_problem_of_the_table_is_listed_at_once():
    bad = gv.DEFAULT.copy()
    bad.loc[1, "rho"] = -2.0
    bad.loc[2, "sigma_x"], bad.loc[2, "sigma_y"] = -0.6, -0.1
    bad.loc[4, "y"] = None
    with pytest.raises(ValueError) as err:
        gv.tokens_from_table(bad, diagonal=False)
    assert str(err.value).splitlines() == [
        "the token table has 4 problems:",
        "- rho of token t2 is -2; a correlation must lie in [-1, 1]",
        "- sigma_x of token t3 is -0.6; a standard deviation must be >= 0",
        "- sigma_y of token t3 is -0.1; a standard deviation must be >= 0",
        "- token t5 has an empty entry",
    ]


@pytest.mark.parametrize("query, diagonal", [(0, False), (4, False), (2, True)])
def test_equal_covariances_leave_only_the_means(tokens, query, diagonal, tau=0.7):
    """Every token given the query's covariance: the Bures part vanishes, so W2 attention is
    softmax(-||m_i - m_j||^2 / tau), and the ellipses are the query's shape moved to each mean."""
    t = gv.tokens_from_table(gv.DEFAULT, diagonal=diagonal)
    s = gv.scene(gv.equal_covariances(t, query), query)
    np.testing.assert_allclose(s.cov_part.numpy(), 0.0, atol=1e-7)
    D = ((MEANS[:, None] - MEANS[None]) ** 2).sum(-1)
    np.testing.assert_allclose(gv.attend(s, tau).w2.numpy(), softmax(-D / tau, axis=1), atol=1e-7)
    np.testing.assert_array_equal(s.tokens.params[:, 2:].numpy(), np.tile(t.params[query, 2:].numpy(), (5, 1)))
    np.testing.assert_array_equal(s.tokens.means.numpy(), MEANS)


def test_side_by_side_temperatures_are_log_slider_values():
    grid = [float(f"{v:.3g}") for v in np.logspace(-2, 2, 49)]  # ui.log_slider(1e-2, 1e2): 12 per decade
    assert gv.SIDE_TAUS == (0.1, 10.0) and all(t in grid for t in gv.SIDE_TAUS)


def test_weights_table_holds_both_attentions_for_every_query(tokens):
    a = gv.attend(gv.scene(tokens, 1), 0.5)
    table = gv.weights_table(a)
    assert len(table) == 2 * 25 and set(table["query"]) == set(tokens.names)
    for label, A in (("W2", a.w2), ("dot product", a.dot)):
        part = table[table["attention"] == label]
        W = part.pivot(index="query", columns="key", values="weight").loc[tokens.names, tokens.names]
        np.testing.assert_allclose(W.to_numpy(), A.numpy(), atol=0)
    assert gv.unique_names(["a", "b", "a"]) == ["a (1)", "b", "a (3)"]


def test_linked_chart_picks_a_query_in_the_browser(tokens):
    """The Altair chart: a point selection on the field "query" (by click, starting at the page's query) on the
    heatmap layer, the bar layer filtered by it, and every query's row of both attentions in its data."""
    from wviz.figures import gaussian_w2 as figs

    a = gv.attend(gv.scene(tokens, 3), 1.0)
    spec = figs.linked_weights(gv.weights_table(a), tokens.names, "t4").to_dict()
    (param,) = spec["params"]
    assert param["select"]["type"] == "point" and param["select"]["fields"] == ["query"]
    assert param["select"]["on"] == "click" and param["value"] == [{"query": "t4"}]
    heat, bars = spec["vconcat"]
    assert heat["mark"]["type"] == "rect" and {"filter": "(datum.attention === 'W2')"} in heat["transform"]
    assert heat["encoding"]["y"]["field"] == "query" and heat["encoding"]["y"]["sort"] == tokens.names
    assert bars["mark"]["type"] == "bar" and bars["encoding"]["y"]["field"] == "weight"
    assert bars["transform"] == [{"filter": {"param": param["name"], "empty": False}}]
    rows = next(iter(spec["datasets"].values()))
    assert {(r["attention"], r["query"], r["key"]) for r in rows} == {
        (m, q, k) for m in ("W2", "dot product") for q in tokens.names for k in tokens.names}
    got = {(r["attention"], r["query"], r["key"]): r["weight"] for r in rows}
    assert got[("W2", "t4", "t2")] == pytest.approx(float(a.w2[3, 1]), abs=1e-15)


def heatmap_traces(fig):
    return [t for t in fig.data if t.type == "heatmap"]


@pytest.mark.parametrize("n", [5, 30])
def test_heatmaps_have_colour_bars_axis_titles_and_token_labels(n):
    """Every heatmap has a titled colour bar, axes "query i" / "key j", and every token named on both axes (or one
    in k, said in the title, beyond gv's limit)."""
    from wviz.figures import gaussian_w2 as figs

    names = [f"token{i}" for i in range(n)]
    A = np.full((n, n), 1.0 / n)
    for fig in (figs.attention_pair(A, A, names, ("W2", "dot")), figs.attention_heatmap(A, names, "W2 at 1")):
        traces = heatmap_traces(fig)
        assert traces and all(t.showscale is not False and t.colorbar.title.text == "weight" for t in traces)
        layout = fig.layout
        for axis in ("xaxis", "xaxis2", "yaxis"):
            if axis in layout and layout[axis].domain is not None:
                ax = layout[axis]
                assert ax.title.text == ("key j" if axis.startswith("x") else "query i")
                step = 1 if n <= figs.MAX_TICKS else 2
                assert list(ax.tickvals) == list(range(0, n, step))
                assert list(ax.ticktext) == names[::step]
        assert ("one token in 2" in layout.title.text) == (n > figs.MAX_TICKS)


def test_log_axis_of_the_sweep_is_readable(tokens):
    from wviz.figures import gaussian_w2 as figs

    a = gv.attend(gv.scene(tokens, 0), 1.0)
    fig = figs.covariance_sweep(gv.SCALES, gv.sweep(a, 1), tokens.names, "t2")
    assert fig.layout.xaxis.type == "log"
    assert list(fig.layout.xaxis.ticktext) == ["0.01", "0.1", "1", "10", "100"]
    assert fig.layout.yaxis.range[1] > 1.0


def test_keys_whose_weights_run_together_in_the_sweep_are_both_seen(tokens):
    """At the defaults t2's weight stays within 0.01 of t4's for factors from about 0.3 to 2, and its line was
    hidden under t4's: every line has its own dash (the one on top shows the other's colour in its gaps), and the
    values drawn are the weights themselves."""
    from wviz.figures import gaussian_w2 as figs

    a = gv.attend(gv.scene(tokens, 0), 1.0)
    w = gv.sweep(a, 1).numpy()
    assert (np.abs(w[:, 1] - w[:, 3]) < 0.01).sum() >= 10                 # t2 and t4 together over a stretch
    fig = figs.covariance_sweep(gv.SCALES, gv.sweep(a, 1), tokens.names, "t2")
    lines = [t for t in fig.data if t.mode == "lines"]
    assert len({t.line.dash for t in lines}) == len(lines) == 5
    for j, t in enumerate(lines):
        np.testing.assert_array_equal(t.y, w[:, j])


# ---- what each guided experiment says to watch, on the numbers of the state its link opens ------------------------

def link_scene(params: dict) -> gv.Scene:
    """The scene the page computes when a link sets ``params`` (every other widget at its default: the DEFAULT
    tokens, full covariances, query t1, covariances as drawn unless equal_cov)."""
    t = gv.tokens_from_table(gv.DEFAULT, params.get(gv.Keys.COVARIANCE) == "diagonal")
    return gv.scene(gv.equal_covariances(t, 0) if params.get(gv.Keys.EQUAL_COVARIANCES) else t, 0)


def watch_equal_covariances(params):
    s = link_scene(params)
    assert float(s.cov_part.abs().max()) < 1e-12                            # the covariance part is zero
    D = ((s.tokens.means[:, None] - s.tokens.means[None]) ** 2).sum(-1).numpy()
    np.testing.assert_allclose(gv.attend(s, 1.0).w2.numpy(), softmax(-D, axis=1), atol=1e-12)


def watch_uncertain_key(params):
    s = link_scene(params)
    token = gv.unique_names(s.tokens.names).index(params[gv.Keys.SWEEP_TOKEN])
    w = gv.sweep(gv.attend(s, 1.0), token)[:, token].numpy()
    assert gv.SCALES[int(np.argmax(w))] == pytest.approx(1.0)               # the peak at its drawn size
    assert w[-1] < 1e-4 and (np.diff(w[np.argmax(w):]) < 0).all()           # down to zero as it grows


def watch_small_tau(params):
    a = gv.attend(link_scene(params), params[gv.Keys.TAU])
    assert float(a.w2.diagonal().min()) > 1 - 1e-9                          # one-hot on the token itself
    names, M = a.scene.tokens.names, a.scene.tokens.means
    t2, t5 = names.index("t2"), names.index("t5")
    assert int((M[t2] @ M.T).argmax()) == t5 and float(a.dot[t2, t5]) > 1 - 1e-9
    np.testing.assert_allclose(a.dot[names.index("t1")].numpy(), 0.2, atol=1e-15)   # t1 at the origin: uniform


def watch_side_by_side(params):
    s = link_scene(params)
    sharp = gv.attend(s, params[gv.Keys.SIDE_TAU + "_left"]).w2
    soft = gv.attend(s, params[gv.Keys.SIDE_TAU + "_right"]).w2
    assert float(sharp.diagonal().min()) > 0.999
    row = soft[0].numpy()
    assert abs(row[0] - 0.55) < 0.005 and (0.115 < row[1:4]).all() and (row[1:4] < 0.175).all()
    assert abs(row[4] - 0.01) < 0.005


def watch_click_t1(params):
    a = gv.attend(link_scene(params), 1.0)
    np.testing.assert_allclose(a.dot[0].numpy(), 0.2, atol=1e-15)
    w2 = (a.scene.mean_part + a.scene.cov_part).numpy()
    order = np.argsort(w2[1:]) + 1                                            # the keys by their W2^2 to t1
    assert [a.scene.tokens.names[k] for k in order] == ["t2", "t4", "t3", "t5"]
    np.testing.assert_allclose(a.w2[0, order].numpy(), [0.17, 0.16, 0.12, 0.01], atol=0.005)


WATCH = {"Give every token the query's covariance": watch_equal_covariances,
         "Make one key very uncertain": watch_uncertain_key, "Send tau to 0.01": watch_small_tau,
         "Compare tau = 0.1 and tau = 1": watch_side_by_side, "Click a query row": watch_click_t1}


@pytest.mark.parametrize("item", gv.TRY_THIS, ids=lambda t: t.label)
def test_each_guided_experiment_shows_what_its_sentence_says(item):
    """Every Try link's sentence, checked on the numbers of the state the link opens; a new link needs its check."""
    assert item.label in WATCH, f"Try {item.label!r} has no check of what its sentence says"
    WATCH[item.label](item.params)
