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
