"""What a user of each family looks at, read off a forward under any normaliser (wviz.models.lens.forward).

Encoders with a masked-language-model head: the top 5 words for each [MASK] (:func:`masked_tokens`). Decoders: the
top 10 next tokens (:func:`next_tokens`) and the perplexity of a paragraph (:func:`perplexity`, by default
wviz.models.corpus.PARAGRAPH), exp of the mean negative log-likelihood of each token given the ones before it;
under a causal normaliser (every one wviz swaps in) token i's prediction reads tokens 1..i only, so the number is a
perplexity, whatever the normaliser. Image classifiers: the top 5 classes (:func:`image_classes`), the class
token's attention over the patch grid per head (:func:`class_attention`) and attention rollout
(:func:`rollout_map`, Abnar and Zuidema 2020: wviz.vit.rollout).

Example: a tiny random GPT-2, saved as a user's folder and loaded as one (wviz.models.tiny), predicts the next token
under sparsemax; its 10 candidates are ranked, their probabilities from the head's softmax over the vocabulary.

>>> import tempfile
>>> from pathlib import Path
>>> from wviz.models import hub, lens, tasks, tiny
>>> with tempfile.TemporaryDirectory() as folder:
...     gpt2 = hub.load(tiny.save("gpt2", Path(folder) / "tiny-gpt2"), device="cpu")
>>> top = tasks.next_tokens(gpt2, lens.forward(gpt2, "the cat sat on the", "sparsemax"))
>>> len(top.labels), list(top.probabilities) == sorted(top.probabilities, reverse=True)
(10, True)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from wviz.models.catalogue import token_limit
from wviz.models.lens import forward, patch_grid
from wviz.vit.rollout import rollout

__all__ = ["Prediction", "masked_tokens", "next_tokens", "perplexity", "image_classes", "class_attention",
           "rollout_map", "token_texts"]


@dataclass(frozen=True)
class Prediction:
    """The head's k best answers at one place, best first: ``position`` (the token predicted at; -1 for a
    picture's class), ``labels`` (words as the tokenizer writes them, or class names) and ``probabilities``."""

    position: int
    labels: tuple
    probabilities: tuple


_WITHOUT = {"masked-lm": "masked-language-model head, so it cannot fill in a [MASK]",
            "causal-lm": "causal language-model head, so it cannot predict the next token",
            "image-classification": "classifier head, so it cannot name classes"}


def _need(lens, head: str) -> None:
    if lens.head != head:
        raise ValueError(f"{lens.info.name} has no {_WITHOUT[head]}")


def _top(logits: torch.Tensor, k: int, names, position: int) -> Prediction:
    p = torch.softmax(logits.double(), dim=-1)
    values, index = p.topk(min(k, p.shape[-1]))
    return Prediction(position, tuple(names(int(i)) for i in index), tuple(round(float(v), 6) for v in values))


def _piece(tokenizer, i: int) -> str:
    """Token ``i`` decoded alone, or, when it is a part of a character (a byte-level BPE piece of a UTF-8
    character decodes to U+FFFD) or decodes to nothing, as the tokenizer writes it ('Ã', '<0xE2>'); an id that the
    tokenizer does not have (a model's vocabulary padded beyond its tokenizer's, as Qwen2's is) as '<id i>'."""
    text = tokenizer.decode([i])
    if text and "\ufffd" not in text:
        return text
    return tokenizer.convert_ids_to_tokens(i) or f"<id {i}>"


def token_texts(lens, fwd, sentence: int = 0) -> tuple:
    """The tokens of input ``sentence`` as text: each id decoded alone (GPT-2's 'Ġcat' is ' cat'; BERT's word
    pieces stay as they are; a piece of a character as the tokenizer writes it), or a picture's token names.

    >>> from wviz.models import hub, lens
    >>> from wviz.models.tasks import token_texts
    >>> model = hub.load(device="cpu")
    >>> token_texts(model, lens.forward(model, "Attention is transport."))
    ('[CLS]', 'attention', 'is', 'transport', '.', '[SEP]')
    """
    if fwd.ids is None:
        return fwd.tokens[sentence]
    n = int(fwd.mask[sentence].sum())
    return tuple(_piece(lens.tokenizer, i) for i in fwd.ids[sentence, :n].tolist())


def masked_tokens(lens, fwd, k: int = 5, sentence: int = 0) -> tuple:
    """One :class:`Prediction` (k words, best first) per [MASK] token of input ``sentence``, from the
    masked-language-model head (ValueError for a model without one); none when the text has no [MASK].

    >>> import tempfile
    >>> from pathlib import Path
    >>> from wviz.models import hub, lens, tiny
    >>> from wviz.models.tasks import masked_tokens
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     bert = hub.load(tiny.save("bert", Path(folder) / "tiny-bert"), device="cpu")
    >>> guesses = masked_tokens(bert, lens.forward(bert, "the cat [MASK] on the mat", "entmax"))
    >>> len(guesses), guesses[0].position, len(guesses[0].labels), bool(sum(guesses[0].probabilities) <= 1)
    (1, 3, 5, True)
    """
    _need(lens, "masked-lm")
    mask_id = lens.tokenizer.mask_token_id
    n = int(fwd.mask[sentence].sum())
    where = (fwd.ids[sentence, :n] == mask_id).nonzero()[:, 0].tolist() if mask_id is not None else []
    name = lambda i: lens.tokenizer.convert_ids_to_tokens(i)  # noqa: E731
    return tuple(_top(fwd.logits[sentence, i], k, name, i) for i in where)


def next_tokens(lens, fwd, k: int = 10, sentence: int = 0) -> Prediction:
    """The k most likely next tokens after the last real token of input ``sentence`` (causal-LM head; ValueError
    for a model without one), as :class:`Prediction` with the tokens decoded as text (GPT-2's 'Ġsat' is ' sat').

    >>> import tempfile
    >>> from pathlib import Path
    >>> from wviz.models import hub, lens, tiny
    >>> from wviz.models.tasks import next_tokens
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     llama = hub.load(tiny.save("llama", Path(folder) / "tiny-llama"), device="cpu")
    >>> top = next_tokens(llama, lens.forward(llama, ["the cat", "the cat sat on the"], "sinkhorn"), sentence=1)
    >>> top.position, len(top.labels), bool(0 < sum(top.probabilities) <= 1)
    (5, 10, True)
    """
    _need(lens, "causal-lm")
    last = int(fwd.mask[sentence].sum()) - 1
    return _top(fwd.logits[sentence, last], k, lambda i: _piece(lens.tokenizer, i), last)


def perplexity(lens, text: str | None = None, normaliser="softmax", *, max_tokens: int | None = None,
               **params) -> float:
    """exp(-(1 / (n - 1)) sum_{i >= 2} log p(x_i | x_1 .. x_{i-1})) of ``text`` (default
    wviz.models.corpus.PARAGRAPH) under ``normaliser`` (params as wviz.models.normalisers.make_normaliser), from the
    causal-LM head: a perplexity of 1 predicts every token with certainty, the vocabulary's size is a uniform guess
    (a random model, as below, does worse).

    >>> import tempfile
    >>> from pathlib import Path
    >>> from wviz.models import hub, tiny
    >>> from wviz.models.tasks import perplexity
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     gpt2 = hub.load(tiny.save("gpt2", Path(folder) / "tiny-gpt2"), device="cpu")
    >>> text = "the cat sat on the mat and the dog ran in the park"
    >>> soft, sparse = perplexity(gpt2, text), perplexity(gpt2, text, "sparsemax")
    >>> soft > 1, sparse > 1, soft != sparse
    (True, True, True)
    """
    from wviz.models.corpus import PARAGRAPH

    _need(lens, "causal-lm")
    text = fitted(lens, PARAGRAPH)[0] if text is None else text
    fwd = forward(lens, text, normaliser, max_tokens=max_tokens, details=False, **params)
    assert fwd.ids is not None and fwd.logits is not None   # a text through a causal-lm head (_need)
    ids, logits = fwd.ids[0], fwd.logits[0].double()
    if ids.shape[0] < 2:
        raise ValueError("a perplexity needs a text of at least two tokens")
    nll = torch.nn.functional.cross_entropy(logits[:-1], ids[1:])
    return float(torch.exp(nll))


def length(lens, text: str) -> int:
    """``text``'s length in the model's tokens (its special tokens included)."""
    return len(lens.tokenizer(text, verbose=False)["input_ids"])


def fitted(lens, text: str) -> tuple[str, bool]:
    """``text``, or its longest run of first words that the model reads (wviz.models.catalogue.token_limit), and
    whether it was cut."""
    limit = token_limit(lens)
    if length(lens, text) <= limit:
        return text, False
    words = text.split(" ")
    lo, hi = 1, len(words) - 1                       # the most words that fit lie in [lo, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if length(lens, " ".join(words[:mid])) <= limit else (lo, mid - 1)
    return " ".join(words[:lo]), True


def image_classes(lens, fwd, k: int = 5, image: int = 0) -> Prediction:
    """The k most likely classes of picture ``image`` (image classifier; ValueError for a model without one), named
    by the model's id2label.

    >>> import tempfile
    >>> from pathlib import Path
    >>> from PIL import Image
    >>> from wviz.models import hub, lens, tiny
    >>> from wviz.models.tasks import image_classes
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     vit = hub.load(tiny.save("vit", Path(folder) / "tiny-vit"), device="cpu")
    >>> top = image_classes(vit, lens.forward(vit, Image.radial_gradient("L"), "sparsemax"))
    >>> len(top.labels), set(top.labels) <= set(vit.model.config.id2label.values())
    (5, True)
    """
    _need(lens, "image-classification")
    names = lens.model.config.id2label
    return _top(fwd.logits[image], k, lambda i: str(names.get(i, i)), -1)


def _grid(lens, A: torch.Tensor) -> torch.Tensor:
    """The last dimension of A (T tokens: the class tokens, then the patches row by row) as the patch grid."""
    rows, cols = patch_grid(lens.model.config)
    return A[..., A.shape[-1] - rows * cols:].reshape(*A.shape[:-1], rows, cols)


def class_attention(lens, fwd, image: int = 0) -> torch.Tensor:
    """(L, H, rows, cols): each head's attention from the class token ([CLS], token 0) to every patch of picture
    ``image``, on the patch grid (the rest of the row is on the class tokens themselves).

    >>> import tempfile
    >>> from pathlib import Path
    >>> from PIL import Image
    >>> from wviz.models import hub, lens, tiny
    >>> from wviz.models.tasks import class_attention
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     vit = hub.load(tiny.save("vit", Path(folder) / "tiny-vit"), device="cpu")
    >>> f = lens.forward(vit, Image.radial_gradient("L"))
    >>> A = class_attention(vit, f)
    >>> import torch
    >>> tuple(A.shape), torch.allclose(A.sum((-2, -1)) + f.attention[0, :, :, 0, 0], torch.ones(2, 4))
    ((2, 4, 4, 4), True)
    """
    if lens.family != "image":
        raise ValueError(f"{lens.info.name} is a {lens.family}: the class token's attention over patches is an "
                         "image model's")
    return _grid(lens, fwd.attention[image, :, :, 0, :])


def rollout_map(lens, fwd, image: int = 0) -> torch.Tensor:
    """(rows, cols): attention rollout (wviz.vit.rollout.rollout, Abnar and Zuidema 2020) of picture ``image``, the
    class token's row over the patch grid: how much of each patch the class token holds after the last layer.

    >>> import tempfile
    >>> from pathlib import Path
    >>> from PIL import Image
    >>> from wviz.models import hub, lens, tiny
    >>> from wviz.models.tasks import rollout_map
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     vit = hub.load(tiny.save("vit", Path(folder) / "tiny-vit"), device="cpu")
    >>> R = rollout_map(vit, lens.forward(vit, Image.radial_gradient("L"), "sinkhorn"))
    >>> tuple(R.shape), bool(0 < R.sum() < 1)
    ((4, 4), True)
    """
    if lens.family != "image":
        raise ValueError(f"{lens.info.name} is a {lens.family}: rollout over patches is an image model's")
    A = fwd.attention[image]
    return _grid(lens, rollout([A[layer] for layer in range(A.shape[0])])[0])
