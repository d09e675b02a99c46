"""Every family wviz opens, on tiny random models built from their config classes (wviz.models.tiny), saved with
save_pretrained and loaded the way a user's folder is (wviz.models.hub.load): the swapped softmax at tau = 1
against transformers' own eager attention, the sparse normalisers' rows and zeros, the causal mask under every
normaliser, the causal Sinkhorn against its equation, sink shares by hand, each family's predictions against the
eager model's, Figure 4 of 002 on other encoders, and a model that bypasses the registry refused."""
import math

import numpy as np
import pytest
import torch
from PIL import Image

from wviz.models import figure4, hub, lens, sinks, tasks, tiny
from wviz.models.families import FAMILIES, supported
from wviz.models.normalisers import sinkhorn_attention

TEXT = "the cat sat on the mat and the dog ran in the park"
TEXTS = [TEXT, "a dog ran"]                                  # unequal lengths: padding in the batch
ENCODERS = ("bert", "roberta", "xlm-roberta", "distilbert", "electra")
DECODERS = ("gpt2", "llama", "qwen2", "qwen3", "mistral")
IMAGES = ("vit", "deit")


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {kind: tiny.save(kind, root / f"tiny-{kind}") for kind in tiny.KINDS}


@pytest.fixture(scope="module")
def loaded(folders):
    return {kind: hub.load(folder, "cpu") for kind, folder in folders.items()}


def picture():
    return Image.radial_gradient("L").resize((40, 30))


def inputs(kind):
    return picture() if FAMILIES[kind] == "image" else TEXTS


def eager_run(model_lens, folder, fwd):
    """The same weights loaded independently with transformers' eager attention, run on the same inputs."""
    eager = type(model_lens.model).from_pretrained(folder, attn_implementation="eager").eval()
    assert eager.config._attn_implementation == "eager"
    with torch.no_grad():
        if fwd.ids is None:
            px = model_lens.processor(images=[picture().convert("RGB")], return_tensors="pt")["pixel_values"]
            return eager(pixel_values=px, output_hidden_states=True, output_attentions=True)
        return eager(input_ids=fwd.ids, attention_mask=fwd.mask.long(), output_hidden_states=True,
                     output_attentions=True)


def test_every_supported_type_is_tested_here():
    assert set(ENCODERS + DECODERS + IMAGES) == set(FAMILIES) == set(tiny.KINDS)


@pytest.mark.parametrize("kind", tiny.KINDS)
def test_softmax_at_tau_one_is_the_models_own_eager_forward(kind, loaded, folders):
    model = loaded[kind]
    assert model.model.config._attn_implementation == "wviz" and model.head is not None
    fwd = lens.forward(model, inputs(kind))
    ref = eager_run(model, folders[kind], fwd)
    m = fwd.mask[:, :, None]
    logits = fwd.logits * m if fwd.logits.dim() == 3 else fwd.logits
    want = ref.logits * m if ref.logits.dim() == 3 else ref.logits
    np.testing.assert_allclose(logits.numpy(), want.numpy(), atol=1e-5)
    hidden = torch.stack(ref.hidden_states, dim=1) * m[:, None]
    np.testing.assert_allclose((fwd.hidden * m[:, None]).numpy(), hidden.numpy(), atol=1e-5)
    real = fwd.mask[:, None, None, :, None] & fwd.mask[:, None, None, None, :]
    want_maps = torch.stack(ref.attentions, dim=1) * real
    np.testing.assert_allclose((fwd.attention * real).numpy(), want_maps.numpy(), atol=1e-6)


@pytest.mark.parametrize("name, params", [("sparsemax", {}), ("entmax", {"alpha": 1.5}), ("softmax", {"tau": 0.5}),
                                          ("sinkhorn", {"n_iter": 3})])
@pytest.mark.parametrize("kind", tiny.KINDS)
def test_rows_sum_to_one_with_no_weight_on_padding_or_a_future_token(kind, name, params, loaded):
    fwd = lens.forward(loaded[kind], inputs(kind), name, **params)
    A, mask = fwd.attention, fwd.mask
    real_rows = mask[:, None, None, :]                                # (B, 1, 1, T)
    np.testing.assert_allclose(A.sum(-1)[real_rows.expand_as(A[..., 0])].numpy(), 1.0, atol=1e-5)
    assert float((A * ~mask[:, None, None, None, :]).abs().max()) == 0.0          # padding keys
    if FAMILIES[kind] == "decoder":
        assert float(A.triu(1).abs().max()) == 0.0
    if name in ("sparsemax", "entmax"):
        pair = (mask[:, :, None] & mask[:, None, :])[:, None, None].expand_as(A)
        assert float((A[pair] == 0).double().mean()) > 0.1            # exact zeros between real tokens


@pytest.mark.parametrize("kind", DECODERS)
@pytest.mark.parametrize("rho", [math.inf, 0.5])
def test_causal_sinkhorn_rows_are_their_prefix_problems(kind, rho, loaded):
    """Row i of each head is row i of the Sinkhorn attention of the prefix 0..i alone (wviz.ot on the raw scores
    Q K^T / sqrt(d'), future scores included): the equation of the causal Sinkhorn."""
    fwd = lens.forward(loaded[kind], TEXT, "sinkhorn", gamma=0.7, n_iter=6, rho=rho)
    for layer, head in ((0, 1), (1, 3)):
        q, k = fwd.queries[0, layer, head].double(), fwd.keys[0, layer, head].double()
        raw = q @ k.T / math.sqrt(q.shape[-1])
        A = fwd.attention[0, layer, head].double()
        for i in range(A.shape[0]):
            want = sinkhorn_attention(raw[:i + 1, :i + 1], 0.7, 6, rho)[i]
            np.testing.assert_allclose(A[i, :i + 1].numpy(), want.numpy(), atol=2e-6)


@pytest.mark.parametrize("kind", ["bert", "gpt2", "vit"])
def test_sink_share_by_hand(kind, loaded):
    fwd = lens.forward(loaded[kind], inputs(kind), "sparsemax")
    shares = sinks.sink_shares(fwd)
    A, n = fwd.attention[0, 1, 2], int(fwd.mask[0].sum())
    special = [j for j in range(n) if bool(fwd.special[0, j])]
    first = sum(float(A[i, 0]) for i in range(1, n)) / (n - 1)
    on_special = sum(float(A[i, j]) for i in range(1, n) for j in special) / (n - 1)
    assert shares.queries == n - 1 and shares.first.shape == shares.special.shape == (2, 4)
    assert abs(float(shares.first[1, 2]) - first) < 1e-6 and abs(float(shares.special[1, 2]) - on_special) < 1e-6
    assert special == ({"bert": [0, n - 1], "gpt2": [], "vit": [0]}[kind])


def test_encoder_predicts_each_mask_as_the_eager_model(loaded, folders):
    model = loaded["roberta"]
    fwd = lens.forward(model, "the cat [MASK] on the [MASK]")
    preds = tasks.masked_tokens(model, fwd)
    ref = eager_run(model, folders["roberta"], fwd).logits[0]
    assert [p.position for p in preds] == [3, 6]
    for p in preds:
        probs = torch.softmax(ref[p.position].double(), -1)
        top = probs.topk(5)
        assert list(p.labels) == model.tokenizer.convert_ids_to_tokens(top.indices.tolist())
        np.testing.assert_allclose(p.probabilities, top.values.numpy(), atol=1e-5)
    assert tasks.masked_tokens(model, lens.forward(model, TEXT)) == ()


def test_decoder_next_tokens_and_perplexity_as_the_eager_model(loaded, folders):
    model = loaded["llama"]
    fwd = lens.forward(model, TEXT)
    ref = eager_run(model, folders["llama"], fwd).logits[0].double()
    top = tasks.next_tokens(model, fwd)
    assert top.position == fwd.ids.shape[1] - 1 and len(top.labels) == 10
    np.testing.assert_allclose(top.probabilities, torch.softmax(ref[-1], -1).topk(10).values.numpy(), atol=1e-5)
    nll = torch.nn.functional.cross_entropy(ref[:-1], fwd.ids[0, 1:])
    assert abs(tasks.perplexity(model, TEXT) - float(nll.exp())) < 1e-3 * float(nll.exp())
    ppl = {name: tasks.perplexity(model, TEXT, name) for name in ("softmax", "sparsemax", "entmax", "sinkhorn")}
    assert all(math.isfinite(v) and v > 1 for v in ppl.values()) and len(set(ppl.values())) == 4


def test_the_paragraphs_perplexity_reads_the_words_a_short_decoder_holds(loaded):
    """tasks.perplexity with no text takes the bundled paragraph cut to the model's positions (64 for the tiny
    decoders), as the page does: the longest run of first words that fits, one more word would not."""
    from wviz.models.catalogue import token_limit
    from wviz.models.corpus import PARAGRAPH

    model = loaded["llama"]
    text, cut = tasks.fitted(model, PARAGRAPH)
    limit = token_limit(model)
    assert limit == model.model.config.max_position_embeddings == 64
    assert cut and PARAGRAPH.startswith(text) and tasks.length(model, text) <= limit
    assert tasks.length(model, " ".join(PARAGRAPH.split(" ")[:len(text.split(" ")) + 1])) > limit
    assert tasks.perplexity(model, None) == tasks.perplexity(model, text)
    assert tasks.fitted(model, TEXT) == (TEXT, False)


def test_image_classes_patch_attention_and_rollout(loaded, folders):
    from wviz.vit.rollout import rollout

    model = loaded["deit"]                                           # [CLS], [DIST], then 16 patches
    fwd = lens.forward(model, picture(), "entmax")
    assert fwd.tokens[0][:3] == ("[CLS]", "[DIST]", "patch 0,0") and fwd.special[0].tolist()[:3] == [True, True, False]
    soft = lens.forward(model, picture())
    ref = eager_run(model, folders["deit"], soft).logits[0]
    top = tasks.image_classes(model, soft)
    names = model.model.config.id2label
    assert list(top.labels) == [names[i] for i in torch.softmax(ref, -1).topk(5).indices.tolist()]
    A = tasks.class_attention(model, fwd)
    assert A.shape == (2, 4, 4, 4)
    np.testing.assert_allclose(A[1, 3].flatten().numpy(), fwd.attention[0, 1, 3, 0, 2:].numpy())
    R = rollout([fwd.attention[0, layer] for layer in range(2)])
    np.testing.assert_allclose(tasks.rollout_map(model, fwd).flatten().numpy(), R[0, 2:].numpy(), atol=1e-7)


def test_a_head_the_model_lacks_is_refused_in_words(loaded, tmp_path):
    with pytest.raises(ValueError, match="tiny-bert has no causal language-model head, so it cannot predict"):
        tasks.next_tokens(loaded["bert"], lens.forward(loaded["bert"], TEXT))
    bare = hub.load(tiny.save("bert", tmp_path / "bare-bert", head=False), "cpu")
    assert bare.head is None and lens.forward(bare, TEXT).logits is None
    with pytest.raises(ValueError, match="masked-language-model head"):
        tasks.masked_tokens(bare, lens.forward(bare, "the [MASK] sat"))


@pytest.mark.parametrize("kind", ["bert", "roberta", "distilbert"])
def test_figure4_generalised_attention_18_is_the_head_of_any_encoder(kind, loaded):
    """With alpha = 1, t_i = x_i / sqrt(d'), z = K^T q_k and u uniform, (18) of 002 gives the captured weights."""
    model = loaded[kind]
    fwd = lens.forward(model, TEXTS)
    for layer in (0, 1):
        d = figure4.fenchel_duals(fwd, layer, lens=model)
        logits = torch.einsum("btd,bhkd->bhkt", d.t, d.z) + d.u.log()[:, None, None]
        for b in range(2):
            m = fwd.mask[b]
            got = torch.softmax(logits[b][:, m][:, :, m], -1)
            np.testing.assert_allclose(got.numpy(), fwd.attention[b, layer][:, m][:, :, m].double().numpy(), atol=1e-5)
    dev = figure4.fenchel_deviation([TEXT], lens=model)
    assert dev.per_head.shape == (2, 4, len(fwd.tokens[0])) and float(dev.grad_norm.max()) < 1e-8
    with pytest.raises(ValueError, match="encoder"):
        figure4.fenchel_deviation([TEXT], lens=loaded["gpt2"])


def test_a_model_whose_attention_bypasses_the_registry_is_refused(loaded, folders):
    """Nothing silently falls back to the model's own softmax: the same model run with another attention
    implementation records no map through wviz, and the forward says so, naming the families wviz opens."""
    eager = type(loaded["gpt2"].model).from_pretrained(folders["gpt2"], attn_implementation="sdpa").eval()
    bypass = hub.Lens(loaded["gpt2"].info, eager, tokenizer=loaded["gpt2"].tokenizer, head="causal-lm")
    with pytest.raises(ValueError, match="0 of its 2 layers") as refused:
        lens.forward(bypass, TEXT, "sparsemax")
    assert str(refused.value).endswith(f"Supported: {supported()}")
    assert "encoders (BERT" in str(refused.value) and "decoders (GPT-2" in str(refused.value)


def test_long_inputs_up_to_the_models_maximum(loaded):
    model = loaded["bert"]                                            # 66 positions: 64 tokens and two spare
    words = " ".join(["cat"] * 62)
    assert lens.forward(model, words).attention.shape[-1] == 64
    with pytest.raises(ValueError, match="at most 64 are allowed"):
        lens.forward(model, words + " cat", max_tokens=64)
    with pytest.raises(ValueError, match="at most 66 are allowed"):
        lens.forward(model, words + " cat cat cat cat cat")
    with pytest.raises(ValueError, match="max_tokens must be a whole number from 1 to 66"):
        lens.forward(model, TEXT, max_tokens=1000)
    roberta = loaded["roberta"]                                       # RoBERTa's positions start after padding
    assert lens.forward(roberta, " ".join(["cat"] * 62)).attention.shape[-1] == 64


def test_minilm_reads_512_word_pieces():
    from wviz.models import minilm

    words = " ".join(["cat"] * 510)
    fwd = minilm.forward(words, max_tokens=None, details=False, device="cpu")
    assert fwd.attention.shape == (1, 6, 12, 512, 512) and fwd.scores is None
    with pytest.raises(ValueError, match="at most 512"):
        minilm.forward(words + " cat", max_tokens=None, device="cpu")
    with pytest.raises(ValueError, match="at most 128"):
        minilm.forward(words, device="cpu")


@pytest.mark.parametrize("kind, added", [("bert", " (with [CLS] and [SEP])"), ("roberta", " (with [CLS] and [SEP])"),
                                         ("llama", " (with <s>)"), ("gpt2", "")])
def test_a_text_too_long_names_the_tokens_the_tokenizer_adds_around_it_not_unk(loaded, kind, added):
    """The unknown token is one of each tokenizer's special tokens, but it stands for a piece of the text (a word
    of no vocabulary, or the unknown token typed), not for a token added around it: an over-long text full of them
    is counted with [CLS] and [SEP], or <s>, or nothing, as its tokenizer adds."""
    tokenizer = loaded[kind].tokenizer
    text = " ".join([f"zqxv {tokenizer.unk_token} wq"] * 30)   # zqxv: [UNK] in BERT's words; typed: in every one
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.unk_token in tokenizer.all_special_tokens and tokenizer.unk_token_id in ids
    with pytest.raises(ValueError) as refused:
        lens.forward(loaded[kind], text, max_tokens=8)
    assert str(refused.value) == f"the sentence is {len(ids)} tokens long{added}; at most 8 are allowed, shorten it"


@pytest.mark.parametrize("kind", ["bert", "llama"])
def test_the_unknown_token_is_a_piece_of_the_text_not_a_special_token(loaded, kind):
    """An unknown word ([UNK], <unk>) is marked as text in the forward's special mask, the tokens the tokenizer adds
    around it ([CLS] [SEP], <s>) as special: the attention sinks' "special tokens" are those."""
    tokenizer = loaded[kind].tokenizer
    fwd = lens.forward(loaded[kind], f"a {tokenizer.unk_token} b")
    ids = fwd.ids[0].tolist()
    added = set(tokenizer("", verbose=False)["input_ids"])
    assert tokenizer.unk_token_id in ids
    assert fwd.special[0].tolist() == [i in added for i in ids]
