"""The "Heads solve the dual" computations against independent references, on MiniLM: the deviation
||lambda* - alpha z|| / ||lambda*|| of one sentence against the corpus experiment run on that sentence alone
(wviz.models.figure4.fenchel_deviation) and against numpy from the dual's solution, Theorem 2's monotone decrease,
the Figure 4 summary's means by numpy, the disk cache, any encoder, and what every guided link's sentence says."""
import numpy as np
import pytest
import torch

from wviz.figures import heads_dual as figs
from wviz.models import figure4, hub, minilm
from wviz.views import heads_dual as hd

SENTENCE = "Bees make honey in summer."
CPU = "cpu"


@pytest.fixture(scope="module")
def minilm_lens():
    return hub.load(None, CPU)


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    """Tiny random models saved as save_pretrained does: kind -> Lens."""
    from wviz.models import tiny

    root = tmp_path_factory.mktemp("models")
    for kind in ("bert", "gpt2"):
        tiny.save(kind, root / f"tiny-{kind}")
    return {m.name.removeprefix("tiny-"): hub.load(m, CPU) for m in hub.find_models([root]).models[1:]}


def test_one_sentence_is_the_corpus_experiment_on_that_sentence_and_numpy(minilm_lens):
    """sentence_duals (one forward, every layer's duals) against fenchel_deviation run on a one-sentence corpus
    (batched, its own forward) and against ||lambda* - alpha z|| / ||lambda*|| by numpy; every lambda* optimal."""
    s = hd.sentence_duals(hd.sentence_forward(minilm_lens, SENTENCE), minilm_lens, 0.5)
    corpus = figure4.fenchel_deviation([SENTENCE], alpha=0.5, device=CPU)
    assert s.alpha == 0.5 and s.tokens == ("[CLS]", "bees", "make", "honey", "in", "summer", ".", "[SEP]")
    np.testing.assert_allclose(s.deviation.numpy(), corpus.per_head.numpy(), rtol=1e-9)
    np.testing.assert_allclose(s.per_token.numpy(), corpus.per_layer.numpy(), rtol=1e-9)
    np.testing.assert_allclose(s.per_head.numpy(), s.deviation.numpy().mean(axis=-1), rtol=1e-12)
    d = figure4.fenchel_duals(minilm.forward(SENTENCE, device=CPU), 3, alpha=0.5)
    lam, z = d.lam[0].numpy(), d.z[0].numpy()
    np.testing.assert_allclose(s.deviation[3].numpy(),
                               np.linalg.norm(lam - 0.5 * z, axis=-1) / np.linalg.norm(lam, axis=-1), rtol=1e-9)
    assert float(s.grad_norm.max()) < 1e-8


def test_theorem_2_the_deviation_shrinks_with_alpha(minilm_lens):
    """Theorem 2 of 002: alpha z -> lambda* as alpha -> 0; along the slider's grid every head's mean deviation falls
    with alpha, and from 0.1 to 0.01 by more than five times in every head (the deviation is O(alpha) for small
    alpha)."""
    at = hd.at_defaults(SENTENCE)
    heads = np.stack([at(a).per_head.numpy() for a in (0.01, 0.1, 1.0, 10.0)])
    assert (np.diff(heads, axis=0) > 0).all()
    assert (heads[0] < heads[1] / 5).all()


def test_bad_sentences_and_models_are_refused_in_words(minilm_lens, tiny_models):
    with pytest.raises(ValueError, match="type a sentence"):
        hd.sentence_forward(minilm_lens, "   ")
    with pytest.raises(ValueError, match="at most 512"):
        hd.sentence_forward(minilm_lens, "word " * 600)
    with pytest.raises(ValueError, match="tiny-gpt2 is a model of the decoder family; this page opens encoder"):
        hd.sentence_forward(tiny_models["gpt2"], SENTENCE)
    s = hd.sentence_duals(hd.sentence_forward(tiny_models["bert"], SENTENCE), tiny_models["bert"], 1.0)
    assert tuple(s.per_head.shape) == (2, 4) and float(s.grad_norm.max()) < 1e-8


def test_the_live_figures_draw_the_numbers_on_a_scale_fixed_from_0(minilm_lens):
    """The main figure is each head's mean, the tokens' figure each token's mean over the heads; their colour scales,
    and the corpus's per-head figure's, run from 0 to at least SCALE_MAX whatever alpha, so the colours move with it
    and mean the same in every figure of the page."""
    at = hd.at_defaults(SENTENCE)
    for alpha in (0.01, 10.0):
        s = at(alpha)
        heads, tokens = figs.main_figure(s).data[0], figs.tokens_figure(s).data[0]
        np.testing.assert_array_equal(heads.z, s.per_head.numpy())
        np.testing.assert_array_equal(tokens.z, s.per_token.numpy())
        assert list(tokens.x) == [f"{i} {t}" for i, t in enumerate(s.tokens, 1)]
        corpus = figs.deviation_per_head(s.deviation).data[0]         # Appendix C's figure, on the same scale
        np.testing.assert_allclose(corpus.z, s.per_head.numpy(), rtol=1e-12)
        for trace in (heads, tokens, corpus):
            assert trace.zmin == 0 and trace.zmax == max(figs.SCALE_MAX, float(trace.z.max()))
            assert trace.colorbar.title.text


def test_figure4_deviation_by_its_formula_and_summary(monkeypatch):
    """On a one-sentence corpus at alpha = 0.5: the deviation of every head and token equals
    ||lambda* - alpha z|| / ||lambda*|| computed by numpy from the dual's solution; the summary's means by numpy."""
    monkeypatch.setattr("wviz.models.corpus.CORPUS", (SENTENCE,))
    seen = []
    dev = hd.deviation(0.5, CPU, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 1)] and dev.alpha == 0.5
    fwd = minilm.forward(SENTENCE, device=CPU)
    for layer in (0, 4):
        d = figure4.fenchel_duals(fwd, layer, alpha=0.5)
        lam, z = d.lam[0].numpy(), d.z[0].numpy()                    # (H, T, d)
        want = np.linalg.norm(lam - 0.5 * z, axis=-1) / np.linalg.norm(lam, axis=-1)
        np.testing.assert_allclose(dev.per_head[layer].numpy(), want, rtol=1e-9)
    s = hd.figure4_summary(dev)
    per_layer = dev.per_head.numpy().mean(axis=1)                    # (L, N): the heads averaged
    assert s.n_tokens == 8 and s.n_problems == 6 * 12 * 8
    assert abs(s.mean - per_layer.mean()) < 1e-12 and abs(s.largest - dev.per_head.numpy().max()) < 1e-12
    assert abs(s.cls_mean - per_layer[:, 0].mean()) < 1e-12
    assert abs(s.others_mean - per_layer[:, 1:].mean()) < 1e-12
    assert s.max_grad_norm < 1e-8 and s.close == (s.mean < 0.1)


def test_figure4_is_computed_once_for_every_server_process(monkeypatch, tmp_path):
    """The second call (another replica of make serve) loads the first one's result from the disk cache: the
    same numbers, no progress reported, the computation not run; another alpha or corpus is computed."""
    monkeypatch.setenv("WVIZ_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("wviz.models.corpus.CORPUS", (SENTENCE,))
    first = hd.deviation(0.5, CPU)

    def not_again(*args, **kwargs):
        raise AssertionError("Figure 4 computed again")

    monkeypatch.setattr(figure4, "fenchel_deviation", not_again)
    seen = []
    second = hd.deviation(0.5, CPU, progress=lambda done, total: seen.append(done))
    assert type(second) is figure4.FenchelDeviation and second.alpha == first.alpha == 0.5 and seen == []
    for name in ("per_layer", "per_head", "sentence", "position", "grad_norm"):
        a, b = getattr(first, name), getattr(second, name)
        assert a.dtype == b.dtype and torch.equal(a, b), name
    with pytest.raises(AssertionError, match="computed again"):
        hd.deviation(0.25, CPU)
    monkeypatch.setattr("wviz.models.corpus.CORPUS", ("Two words.",))
    with pytest.raises(AssertionError, match="computed again"):
        hd.deviation(0.5, CPU)


def test_figure4_histograms_leave_headroom():
    dev = torch.rand(6, 500, generator=torch.Generator().manual_seed(0)) ** 4 * 0.2
    fig = figs.deviation_histograms(dev, 1.0)
    bars = [t for t in fig.data if t.type == "bar"]
    assert len(bars) == 6
    for b in bars:
        assert int(np.sum(b.y)) == 500
        top = fig.layout[b.yaxis.replace("y", "yaxis")].range[1]
        assert top >= 1.1 * max(b.y)                                    # the tallest bar is not cut


def test_figure4_for_any_encoder_keyed_by_the_model(tiny_models, monkeypatch, tmp_path):
    """Figure 4 on a tiny BERT is its own result on disk (the model's key in the cache key), not MiniLM's; a decoder
    is refused in words."""
    monkeypatch.setenv("WVIZ_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("wviz.models.corpus.CORPUS", (SENTENCE,))
    models = tiny_models
    tiny = hd.deviation(1.0, CPU, lens=models["bert"])
    assert tuple(tiny.per_head.shape[:2]) == (2, 4)
    assert tuple(hd.deviation(1.0, CPU).per_head.shape[:2]) == (6, 12)            # MiniLM's, not the tiny one's
    assert torch.equal(hd.deviation(1.0, CPU, lens=models["bert"]).per_head, tiny.per_head)
    with pytest.raises(ValueError, match="tiny-gpt2 is a model of the decoder family; this page opens encoder"):
        hd.deviation(1.0, CPU, lens=models["gpt2"])


# ---- guided experiments: what each sentence says, on the numbers the captions print -------------------------------

def watch_small_alpha(params):
    sentence = hd.at_defaults()
    small, paper = sentence(params[hd.Keys.ALPHA]), sentence(1.0)
    assert (f"{float(small.deviation.mean()):.4f}", f"{float(small.per_head.max()):.4f}") == ("0.0087", "0.0169")
    assert float(small.deviation.mean()) < float(paper.deviation.mean()) / 5              # the heatmaps go dark
    corpus = [hd.figure4_summary(hd.deviation(a, CPU)) for a in (params[hd.Keys.ALPHA], 1.0)]
    assert corpus[0].close and corpus[0].mean < corpus[1].mean / 5                        # Figure 4 agrees


def watch_large_alpha(params):
    s = hd.at_defaults()(params[hd.Keys.ALPHA])
    H = s.per_head.shape[1]
    worst = int(s.per_head.argmax())
    assert (worst // H + 1, worst % H + 1) == (5, 3)
    assert (f"{float(s.deviation.mean()):.4f}", f"{float(s.per_head.max()):.4f}") == ("0.1269", "0.2206")
    corpus = hd.figure4_summary(hd.deviation(params[hd.Keys.ALPHA], CPU))
    assert not corpus.close                                               # "a rough approximation"


def watch_cls(params):
    s = hd.at_defaults(params[hd.Keys.SENTENCE])(1.0)
    first = s.per_token[:, 0].mean()
    assert s.tokens[0] == "[CLS]" and int(s.per_token.mean(dim=0).argmax()) == 0    # its column the brightest
    assert (f"{float(first):.4f}", f"{float(s.per_token[:, 1:].mean()):.4f}") == ("0.1232", "0.0626")
    corpus = hd.figure4_summary(hd.deviation(1.0, CPU))
    assert (f"{corpus.cls_mean:.4f}", f"{corpus.others_mean:.4f}") == ("0.1232", "0.0654")


WATCH = {"Theorem 2: alpha = 0.1": watch_small_alpha, "alpha = 10: a rough approximation": watch_large_alpha,
         "[CLS] stands apart": watch_cls}


@pytest.mark.parametrize("item", hd.TRY_THIS, ids=lambda t: t.label)
def test_each_guided_experiment_shows_what_its_sentence_says(item):
    """Every Try link's sentence, checked on the numbers of the state the link opens; a new link needs its check."""
    assert item.label in WATCH, f"Try {item.label!r} has no check of what its sentence says"
    WATCH[item.label](item.params)


def test_try_this_items_are_valid_settings():
    grid = {float(f"{v:.3g}") for v in np.logspace(-2, 1, 37)}          # ui.log_slider(0.01, 10), 12 per decade
    assert 3 <= len(hd.TRY_THIS) <= 5
    for t in hd.TRY_THIS:
        assert set(t.params) <= {hd.Keys.ALPHA, hd.Keys.SENTENCE} and t.watch.endswith(".")
        assert t.params.get(hd.Keys.ALPHA, 1.0) in grid
