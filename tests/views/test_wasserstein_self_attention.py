"""The "Wasserstein self-attention" page's computations against independent references: the Gaussian reading by the
closed form of W2 between Gaussians (Bures, with scipy's matrix square root), the empirical reading by POT's 1-D
W_p, the cloud reading by POT's exact OT, and A = f(W), Y = A V and dot-product attention by numpy."""
import numpy as np
import ot
import pytest
import torch
from scipy.linalg import sqrtm

from wviz import sample_data
from wviz.views import wasserstein_self_attention as wv

torch.set_num_threads(1)


def make(X, seed=None, representation="gaussian", weight_map="softmax", b=1.0, s=0.5, normalize=True, k=2, p=2):
    return wv.Inputs(X, seed, representation, weight_map, b, s, normalize, k, p)


def softmax_rows(S):
    E = np.exp(S - S.max(axis=1, keepdims=True))
    return E / E.sum(axis=1, keepdims=True)


def bures_w2_squared(m1, S1, m2, S2):
    """W2^2 between N(m1, S1) and N(m2, S2): ||m1 - m2||^2 + tr(S1 + S2 - 2 (S1^1/2 S2 S1^1/2)^1/2)."""
    r1 = sqrtm(S1)
    return float(((m1 - m2) ** 2).sum() + np.trace(S1 + S2 - 2 * np.real(sqrtm(r1 @ S2 @ r1))))


def qkv(i: wv.Inputs):
    X = i.X.numpy()
    W_Q, W_K, W_V = (w.numpy() for w in i.projections)
    return X @ W_Q, X @ W_K, X @ W_V


# ---- inputs ----------------------------------------------------------------------------------------------------

def test_the_sequence_is_a_preset_or_the_upload():
    np.testing.assert_array_equal(wv.sequence("random", 5, 4, 3, None).numpy(),
                                  sample_data.sequence("random", 5, 4, 3).numpy())
    np.testing.assert_array_equal(wv.sequence("noisy sinusoids", 6, 2, 1, b"ignored").numpy(),
                                  sample_data.sequence("noisy sinusoids", 6, 2, 1).numpy())
    up = wv.sequence(wv.UPLOAD, None, None, 0, b"a,b,c,d\n1,2,3,4\n0,1,0,1\n")
    np.testing.assert_array_equal(up.numpy(), [[1, 2, 3, 4], [0, 1, 0, 1]])
    with pytest.raises(ValueError, match="upload a CSV sequence"):
        wv.sequence(wv.UPLOAD, None, None, 0, None)
    with pytest.raises(ValueError, match=r"(row|line) 2, column 2 \('oops'\)"):  # wviz.io's wording
        wv.sequence(wv.UPLOAD, None, None, 0, b"1,2\n3,oops\n")
    assert wv.MAX_ROWS == 4096 and wv.MAX_MB == 2


def test_projections_are_identities_or_drawn_from_the_seed():
    X = sample_data.sequence("random", 4, 6, 0)
    for W in make(X).projections:
        np.testing.assert_array_equal(W.numpy(), np.eye(6))
    for W, ref in zip(make(X, seed=5).projections, sample_data.projections(6, 5)):
        np.testing.assert_array_equal(W.numpy(), ref.numpy())


# ---- the readings ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [None, 2])
def test_gaussian_reading_is_bures_w2_and_outputs_are_av(seed):
    """q = (mean, log-variance): W_ij = W2^2(N(mu_i, diag sigma_i^2), N(mu_j, diag sigma_j^2)) by the general
    Gaussian closed form; A = softmax(-W / tau), Y = A V; dot: softmax(Q K^T / sqrt(d)), Y = A V."""
    X = sample_data.sequence("noisy sinusoids", 7, 4, 1)
    i = make(X, seed)
    a = wv.attend(i, 0.6)
    Q, K, V = qkv(i)
    W = np.array([[bures_w2_squared(q[:2], np.diag(np.exp(q[2:])), k[:2], np.diag(np.exp(k[2:]))) for k in K]
                  for q in Q])
    np.testing.assert_allclose(a.ours.W.numpy(), W, atol=1e-9)
    A = softmax_rows(-W / 0.6)
    np.testing.assert_allclose(a.ours.A.numpy(), A, atol=1e-9)
    np.testing.assert_allclose(a.ours.Y.numpy(), A @ V, atol=1e-9)
    D = softmax_rows(Q @ K.T / np.sqrt(4))
    np.testing.assert_allclose(a.dot.A.numpy(), D, atol=1e-12)
    np.testing.assert_allclose(a.dot.Y.numpy(), D @ V, atol=1e-12)
    assert a.tau == 0.6 and a.inputs is i


@pytest.mark.parametrize("p", [1, 2])
def test_empirical_reading_is_pot_1d_wp_with_the_sigmoid(p):
    X = sample_data.sequence("random", 6, 5, 4)
    for normalize in (True, False):
        i = make(X, 1, "empirical", "sigmoid", b=0.8, s=0.3, normalize=normalize, p=p)
        a = wv.attend(i, 1.0)
        Q, K, V = qkv(i)
        W = np.array([[ot.wasserstein_1d(q, k, p=p) for k in K] for q in Q])      # W_p^p, the OT cost
        np.testing.assert_allclose(a.ours.W.numpy(), W, atol=1e-10)
        A = 1 / (1 + np.exp(-(0.8 - W) / 0.3))
        A = A / A.sum(1, keepdims=True) if normalize else A
        np.testing.assert_allclose(a.ours.A.numpy(), A, atol=1e-10)
        np.testing.assert_allclose(a.ours.Y.numpy(), A @ V, atol=1e-10)


def test_cloud_reading_is_exact_ot_between_point_clouds():
    X = sample_data.sequence("random", 5, 6, 7)
    i = make(X, 3, "cloud", k=3)
    a = wv.attend(i, 0.4)
    Q, K, V = qkv(i)
    u = np.full(3, 1 / 3)
    W = np.array([[ot.emd2(u, u, ot.dist(q.reshape(3, 2), k.reshape(3, 2))) for k in K] for q in Q])
    np.testing.assert_allclose(a.ours.W.numpy(), W, atol=1e-10)
    A = softmax_rows(-W / 0.4)
    np.testing.assert_allclose(a.ours.Y.numpy(), A @ V, atol=1e-10)


def test_settings_the_reading_cannot_take_are_refused_in_the_pages_words():
    X = sample_data.sequence("random", 4, 6, 0)
    with pytest.raises(ValueError, match=r"^the cloud reading cuts each vector of d = 6 numbers into k = 4 points of "
                                         r"equal size, and 6 is not divisible by 4: choose k among 1, 2, 3, 6$"):
        wv.attend(make(X, representation="cloud", k=4), 1.0)
    with pytest.raises(ValueError, match=r"^the sequence has d = 5 channels, but the gaussian reading .* width must be "
                                         r"even: choose an even d"):
        wv.attend(make(sample_data.sequence("random", 4, 5, 0)), 1.0)
    assert wv.problems(make(sample_data.sequence("random", 4, 5, 0), representation="empirical")) == []
    assert wv.problems(make(X, representation="cloud", k=3)) == []
    with pytest.raises(ValueError, match="tau must be a positive"):
        wv.attend(make(X), 0.0)


def test_the_example_upload_goes_through_the_pages_parser():
    """The example file parses with wv.sequence (the page's parser) to the noisy sinusoids it was made from, to
    4 decimals, with its header row skipped; every reading takes it."""
    X = wv.sequence(wv.UPLOAD, None, None, 0, wv.example_sequence())
    preset, n, d, seed = wv.EXAMPLE
    assert X.shape == (12, 4) and (n, d) == (12, 4)
    np.testing.assert_allclose(X.numpy(), sample_data.sequence(preset, n, d, seed).numpy(), atol=5e-5, rtol=0)
    assert wv.example_sequence().decode().splitlines()[0] == "c1,c2,c3,c4"
    for representation in wv.REPRESENTATIONS:
        i = make(X, representation=representation)
        assert wv.problems(i) == []
        assert wv.attend(i, 1.0).ours.A.shape == (12, 12)


# ---- figures ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [10, 24, 64])
def test_matrices_have_colour_bars_axis_titles_and_position_labels(n):
    """Each heatmap has a titled colour bar; keys j across, queries i down; every position labelled when it fits,
    else one in k with the title saying so."""
    from wviz.figures import wasserstein_self_attention as figs

    Z = np.arange(n * n, dtype=float).reshape(n, n)
    fig = figs.matrices({"W": (Z, "W"), "A": (Z / Z.max(), "A"), "dot": (Z / 2, "A dot")}, "Distances and weights")
    assert [t.colorbar.title.text for t in fig.data] == ["W", "A", "A dot"]
    assert all(t.showscale is not False for t in fig.data)
    xs = -(-n // figs.X_TICKS)
    ys = -(-n // figs.Y_TICKS)
    for c in ("", "2", "3"):
        assert fig.layout[f"xaxis{c}"].title.text == "key j" and fig.layout[f"yaxis{c}"].title.text == "query i"
        assert list(fig.layout[f"xaxis{c}"].tickvals) == list(range(1, n + 1, xs))   # positions counted from 1
        assert list(fig.layout[f"yaxis{c}"].tickvals) == list(range(1, n + 1, ys))
    title = fig.layout.title.text
    assert title.startswith("Distances and weights")
    assert (f"one key in {xs}" in title) == (xs > 1) and (f"one query in {ys}" in title) == (ys > 1)
    for t, c in zip(fig.data, ("", "2", "3")):  # each colour bar beside its own panel, as tall as it
        lo, hi = fig.layout[f"yaxis{c}"].domain
        assert t.colorbar.y == pytest.approx((lo + hi) / 2) and t.colorbar.len == pytest.approx(hi - lo)
        assert list(t.x) == list(t.y) == list(range(1, n + 1))   # the cells (and the CSV) count from 1 too


def test_channels_and_positions_count_from_1_as_the_csv_columns_do():
    from wviz.figures import wasserstein_self_attention as figs

    X = np.arange(15, dtype=float).reshape(5, 3)
    fig = figs.sequences(X, {"Y": X}, channels=3)
    assert [a.text for a in fig.layout.annotations] == ["channel 1", "channel 2", "channel 3"]
    assert list(fig.data[0].x) == [1, 2, 3, 4, 5]
    # the legend at the figure's bottom, under "position i" (at a fraction of the plot below it, it lay on the
    # title at 1024 px in presentation mode), with a bottom margin that holds ticks, title and legend
    assert fig.layout.legend.yref == "container" and fig.layout.legend.y == 0 and fig.layout.legend.yanchor == "bottom"
    assert fig.layout.margin.b >= 100
    assert wv.example_sequence().decode().splitlines()[0] == "c1,c2,c3,c4"


# ---- what each guided experiment says to watch, on the numbers of the state its link opens ------------------------

def link_attention(params: dict) -> wv.Attention:
    """What the page computes when a link sets ``params`` (every other widget at its default: the first preset, n =
    24, d = 8, seed 0, identity projections, the Gaussian reading, softmax, b = 1, s = 0.5, rows normalised, k = 2,
    p = 1, tau = 1)."""
    X = wv.sequence(wv.PRESETS[0], 24, 8, 0, None)
    i = wv.Inputs(X, None if params.get(wv.Keys.IDENTITY, True) else 0,
                  params.get(wv.Keys.REPRESENTATION, wv.REPRESENTATIONS[0]),
                  params.get(wv.Keys.WEIGHT_MAP, wv.WEIGHT_MAPS[0]), 1.0, 0.5, params.get(wv.Keys.NORMALIZE, True), 2,
                  params.get(wv.Keys.P, 1))
    return wv.attend(i, params.get(wv.Keys.TAU, 1.0))


def watch_small_tau(params):
    a = link_attention(params)
    W = a.ours.W.numpy()
    assert np.abs(np.diag(W)).max() < 1e-12 and (W + np.diag(np.full(len(W), np.inf))).min() > 0.3
    np.testing.assert_allclose(a.ours.A.numpy(), np.eye(len(W)), atol=1e-12)
    np.testing.assert_allclose(a.ours.Y.numpy(), a.inputs.X.numpy(), atol=1e-12)   # Y copies X


def watch_large_tau(params):
    a = link_attention(params)
    A, Y, X = a.ours.A.numpy(), a.ours.Y.numpy(), a.inputs.X.numpy()
    assert 0.035 < A.min() and A.max() < 0.05 and len(A) == 24
    assert np.abs(Y - X.mean(0)).max() < 0.03 and np.abs(X - X.mean(0)).max() > 1   # a flat line at the average


def watch_random_projections(params):
    a = link_attention(params)
    assert np.abs(np.diag(a.ours.W.numpy())).min() > 1
    assert (a.ours.A.numpy().argmax(1) != np.arange(24)).sum() == 22


def watch_sigmoid_rows(params):
    a = link_attention(params)
    A, W = a.ours.A.numpy(), a.ours.W.numpy()
    sums = A.sum(1)
    assert 1.4 <= sums.min() < 1.45 and 3.25 < sums.max() <= 3.3
    assert (A[W < 1.0] > 0.5).all() and (A[W > 1.0] < 0.5).all()            # b = 1: closer keys above 1/2


def watch_empirical(params):
    a = link_attention(params)
    Q, K, _ = qkv(a.inputs)
    W1 = np.abs(np.sort(Q, 1)[:, None] - np.sort(K, 1)[None]).mean(-1)       # the sorted coordinates, p = 1
    np.testing.assert_allclose(a.ours.W.numpy(), W1, atol=1e-12)
    shuffled = np.random.default_rng(0).permuted(K, axis=1)                 # which channel holds which value
    np.testing.assert_allclose(np.abs(np.sort(Q, 1)[:, None] - np.sort(shuffled, 1)[None]).mean(-1), W1)
    gaussian = link_attention({**params, "representation": "gaussian"}).ours.W.numpy()
    assert 15 < gaussian.max() < 17 and a.ours.W.numpy().max() < 1


WATCH = {"Send tau to 0.01": watch_small_tau, "Send tau to 100": watch_large_tau,
         "Use random projections": watch_random_projections,
         "Use the note's sigmoid, rows not normalised": watch_sigmoid_rows,
         "Read vectors as empirical distributions": watch_empirical}


@pytest.mark.parametrize("item", wv.TRY_THIS, ids=lambda t: t.label)
def test_each_guided_experiment_shows_what_its_sentence_says(item):
    """Every Try link's sentence, checked on the numbers of the state the link opens; a new link needs its check."""
    assert item.label in WATCH, f"Try {item.label!r} has no check of what its sentence says"
    WATCH[item.label](item.params)


@pytest.mark.parametrize("params", [{}, {wv.Keys.IDENTITY: False},
                                    {wv.Keys.WEIGHT_MAP: "sigmoid", wv.Keys.NORMALIZE: False}])
def test_the_caption_numbers_are_read_off_w_and_a(params):
    """summary: the ranges of W and A, A's row sums and the rows whose largest weight is on the token itself."""
    a = link_attention(params)
    W, A = a.ours.W.numpy(), a.ours.A.numpy()
    s = wv.summary(a)
    assert s.w_range == (W.min(), W.max()) and s.a_range == (A.min(), A.max()) and s.n == len(A)
    assert s.row_sums == pytest.approx((A.sum(1).min(), A.sum(1).max()), rel=1e-12)
    assert s.on_self == (A.argmax(1) == np.arange(len(A))).sum()
    assert s.stochastic == params.get(wv.Keys.NORMALIZE, True)
    assert (s.on_self == s.n) == (params.get(wv.Keys.IDENTITY, True))   # identities: each token nearest itself
