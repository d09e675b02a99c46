"""The "Gaussian W2 attention" page, driven through AppTest; its weights checked against scipy's sqrtm."""
import numpy as np
from scipy.linalg import sqrtm

from tests.app.conftest import figures, no_exception

PAGE = "gaussian_w2.py"
# the page's default tokens: mean, (sigma_x, sigma_y, rho)
MEANS = np.array([[0.0, 0.0], [1.0, 0.2], [-0.8, 0.9], [0.2, -1.0], [1.5, 1.2]])
SIG = np.array([[0.5, 0.5, 0.0], [0.3, 0.8, 0.5], [0.6, 0.2, -0.3], [0.2, 0.2, 0.0], [1.0, 0.4, 0.7]])


def covariances(sig, diagonal=False):
    out = []
    for sx, sy, rho in sig:
        rho = 0.0 if diagonal else rho
        out.append(np.array([[sx * sx, rho * sx * sy], [rho * sx * sy, sy * sy]]))
    return out


def w2_squared(m1, S1, m2, S2):
    r2 = sqrtm(S2)
    cross = sqrtm(r2 @ S1 @ r2)
    return float(((m1 - m2) ** 2).sum() + np.trace(S1 + S2 - 2 * cross.real))


def reference_attention(means, covs, tau):
    W = np.array([[w2_squared(mi, Si, mj, Sj) for mj, Sj in zip(means, covs)] for mi, Si in zip(means, covs)])
    E = np.exp(-(W - W.min(axis=1, keepdims=True)) / tau)
    return E / E.sum(axis=1, keepdims=True)


def heatmaps(at):
    fig = [f for f in figures(at) if len([t for t in f["data"] if t["type"] == "heatmap"]) == 2][0]
    w2, dot = [np.asarray(t["z"], dtype=float) for t in fig["data"] if t["type"] == "heatmap"]
    return w2, dot


def test_default_w2_attention_matches_scipy(open_page):
    at = open_page(PAGE)
    w2, dot = heatmaps(at)
    np.testing.assert_allclose(w2, reference_attention(MEANS, covariances(SIG), 1.0), atol=1e-9)
    E = np.exp(MEANS @ MEANS.T - (MEANS @ MEANS.T).max(axis=1, keepdims=True))
    np.testing.assert_allclose(dot, E / E.sum(axis=1, keepdims=True), atol=1e-12)


def test_diagonal_mode_and_tau(open_page):
    at = open_page(PAGE)
    at.sidebar.radio(key="cov_kind").set_value("diagonal").run()
    at.sidebar.select_slider(key="tau").set_value(0.1).run()
    no_exception(at)
    tau = at.sidebar.select_slider(key="tau").value
    np.testing.assert_allclose(heatmaps(at)[0], reference_attention(MEANS, covariances(SIG, True), tau), atol=1e-9)


def test_query_sliders_move_the_query(open_page):
    at = open_page(PAGE)
    at.sidebar.slider(key="sx_0").set_value(1.5).run()
    at.sidebar.slider(key="mx_0").set_value(1.0).run()
    no_exception(at)
    sig, means = SIG.copy(), MEANS.copy()
    sig[0, 0], means[0, 0] = 1.5, 1.0
    np.testing.assert_allclose(heatmaps(at)[0], reference_attention(means, covariances(sig), 1.0), atol=1e-9)
    parts = [f for f in figures(at) if f["layout"].get("barmode") == "stack"][0]
    mean_part, cov_part = (np.asarray(t["y"], dtype=float) for t in parts["data"])
    covs = covariances(sig)
    for j in range(5):
        assert abs(mean_part[j] - ((means[0] - means[j]) ** 2).sum()) < 1e-12
        assert abs(mean_part[j] + cov_part[j] - w2_squared(means[0], covs[0], means[j], covs[j])) < 1e-9


def test_sweep_has_a_row_per_scale_summing_to_one(open_page):
    at = open_page(PAGE)
    sweep = [f for f in figures(at) if f["layout"].get("title", {}).get("text", "").startswith("How the query")][0]
    W = np.array([np.asarray(t["y"], dtype=float) for t in sweep["data"]])  # keys x scales
    np.testing.assert_allclose(W.sum(axis=0), 1.0, atol=1e-12)
