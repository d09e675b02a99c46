"""Your model under the lens: run a loaded model on text or pictures with every head's normaliser swapped, and get
each layer's attention maps, hidden states and the model's own outputs. No Streamlit: this is the notebook API.

A model comes from wviz.models.hub (:func:`wviz.models.hub.load`: the bundled MiniLM, a ``save_pretrained`` folder
or an uploaded .zip); :func:`forward` runs it with every head's softmax replaced by one of wviz.models.normalisers
(softmax / tau, sparsemax, entmax, Sinkhorn; in a decoder every one of them honours the causal mask, and Sinkhorn
balances each prefix); wviz.models.tasks reads the head's predictions (masked tokens, the next token, perplexity,
image classes, the class token's attention over the patches, rollout) and wviz.models.sinks the attention sinks.

Example: load a folder (here the bundled MiniLM), run a sentence under sparsemax, read the maps.

>>> from wviz.models import hub, lens
>>> model = hub.load(device="cpu")                  # or hub.load("/path/to/a/save_pretrained/folder")
>>> f = lens.forward(model, "Attention is transport.", "sparsemax")
>>> f.tokens[0]
('[CLS]', 'attention', 'is', 'transport', '.', '[SEP]')
>>> tuple(f.attention.shape)                        # (sentences, layers, heads, tokens, tokens)
(1, 6, 12, 6, 6)
>>> bool((f.attention.sum(-1) - 1).abs().max() < 1e-5), bool((f.attention == 0).any())
(True, True)
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from wviz.models.families import LONGEST, token_limit
from wviz.models.normalisers import Normaliser, make_normaliser
from wviz.models.swap import check_layers, swapped

__all__ = ["Forward", "forward", "sparsity", "check_sentences", "patch_grid"]


@dataclass(frozen=True)
class Forward:
    """One forward of a batch of B inputs (T tokens after padding, L layers, H heads, head size d', width d).

    tokens      per input, its tokens without padding: word pieces ([CLS] ... [SEP]) or BPE pieces of a text;
                '[CLS]' (and DeiT's '[DIST]') then 'patch r,c' (row, column of the grid) of a picture
    mask        (B, T) bool: real tokens
    queries, keys, values   (B, L, H, T, d') per layer and head (with the projections' biases; keys and values
                repeated per query head under grouped-query attention); None when run with details=False
    scores      (B, L, H, T, T) S = Q K^T / sqrt(d'), -inf on masked keys (padding, future tokens); None likewise
    attention   (B, L, H, T, T) the normalised weights the forward used
    hidden      (B, L + 1, T, d) hidden states as the model returns them: the embeddings' output, then each layer's
    embedding   (B, d) mean of the last hidden states over real tokens, L2-normalised (MiniLM's sentence embedding)
    normaliser  the Normaliser used by every head
    ids         (B, T) token ids (text; None for pictures)
    special     (B, T) bool: special tokens ([CLS], [SEP], <s>, <|endoftext|>, ...; a picture's class tokens)
    logits      the head's output: (B, T, vocabulary) for a language-model head, (B, classes) for a classifier;
                None for a model without a head
    family      'encoder', 'decoder' or 'image'
    """

    tokens: tuple
    mask: torch.Tensor
    queries: torch.Tensor | None
    keys: torch.Tensor | None
    values: torch.Tensor | None
    scores: torch.Tensor | None
    attention: torch.Tensor
    hidden: torch.Tensor
    embedding: torch.Tensor
    normaliser: Normaliser
    ids: torch.Tensor | None = None
    special: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    family: str = "encoder"

    @cached_property
    def sparsity(self) -> torch.Tensor:
        """(B, L, H) the fraction of exact zeros among the weights each head may give (:func:`sparsity`; in a
        decoder on and below the diagonal), counted once per forward: a page reads it on every move."""
        return sparsity(self.attention, self.mask, causal=self.family == "decoder")


def sparsity(attention: torch.Tensor, mask: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """Fraction of exact zeros among the weights a head may give, per layer and head: between real tokens and,
    under a causal mask, on and below the diagonal only (the mask's zeros above it are no normaliser's doing).
    attention (B, L, H, T, T), mask (B, T) -> (B, L, H).

    Example: one head over two tokens whose one zero lies above the diagonal: a quarter of its weights, but under
    the causal mask none of the three it may give.

    >>> import torch
    >>> from wviz.models.lens import sparsity
    >>> A = torch.tensor([[1.0, 0.0], [0.5, 0.5]]).reshape(1, 1, 1, 2, 2)
    >>> mask = torch.ones(1, 2, dtype=torch.bool)
    >>> sparsity(A, mask).item(), sparsity(A, mask, causal=True).item()
    (0.25, 0.0)
    """
    pair = mask[:, :, None] & mask[:, None, :]
    if causal:
        pair = pair.tril()
    kept = (attention != 0) & pair[:, None, None]
    if kept.device.type == "cpu":   # numpy counts Trues faster than torch sums bools (BENCHMARKS, design choices)
        nonzero = torch.from_numpy(np.count_nonzero(kept.numpy(), axis=(-2, -1)))
    else:
        nonzero = kept.sum(dim=(-2, -1))
    allowed = pair.sum(dim=(-2, -1))[:, None, None]
    return (allowed - nonzero).to(torch.float64) / allowed


def check_sentences(sentences) -> list[str]:
    """One sentence or a list of them as a list of stripped, non-empty strings; ValueError otherwise.

    >>> from wviz.models.lens import check_sentences
    >>> check_sentences("  The cat sat. ")
    ['The cat sat.']
    >>> check_sentences(["One.", " "])
    Traceback (most recent call last):
        ...
    ValueError: sentence 2 is empty
    """
    if isinstance(sentences, str):
        sentences = [sentences]
    sentences = list(sentences)
    if not sentences:
        raise ValueError("give at least one sentence")
    out = []
    for i, s in enumerate(sentences, 1):
        if not isinstance(s, str):
            raise ValueError(f"sentence {i} must be text, got {type(s).__name__}")
        if not s.strip():
            raise ValueError("the sentence is empty: type a few words" if len(sentences) == 1
                             else f"sentence {i} is empty")
        out.append(s.strip())
    return out


def _limit(lens, max_tokens: int | None) -> int:
    """The longest input allowed: ``max_tokens``, or the model's maximum up to families.LONGEST; never more than the
    model reads."""
    most = token_limit(lens.model.config, lens.tokenizer)
    if max_tokens is None:
        return min(most, LONGEST)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= most:
        raise ValueError(f"max_tokens must be a whole number from 1 to {most} (the model's maximum), got "
                         f"{max_tokens!r}")
    return max_tokens


def _encode_text(lens, inputs, max_tokens: int | None):
    """Token ids (B, T), padded on the right, the mask of real tokens, and the tokens; ValueError for an empty text
    or one longer than the limit."""
    tok = lens.tokenizer
    texts = check_sentences(inputs)
    limit = _limit(lens, max_tokens)
    ids = [tok(t)["input_ids"] for t in texts]
    longest = max(range(len(ids)), key=lambda i: len(ids[i]))
    if len(ids[longest]) > limit:
        which = "the sentence" if len(texts) == 1 else f"sentence {longest + 1}"
        # the tokens the tokenizer puts around every text ([CLS] [SEP], <s>), the ones it adds to what was typed;
        # not <unk>, a special token too, which stands for a piece of the text it has no token for
        added = set(tok("", verbose=False)["input_ids"]) & set(tok.all_special_ids)
        specials = list(dict.fromkeys(tok.convert_ids_to_tokens(i) for i in ids[longest] if i in added))
        extra = f" (with {' and '.join(specials)})" if specials else ""
        raise ValueError(f"{which} is {len(ids[longest])} tokens long{extra}; at most {limit} are allowed, shorten it")
    T = len(ids[longest])
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    padded = torch.tensor([row + [pad] * (T - len(row)) for row in ids])
    mask = torch.tensor([[True] * len(row) + [False] * (T - len(row)) for row in ids])
    tokens = tuple(tuple(tok.convert_ids_to_tokens(row)) for row in ids)
    # the special tokens wviz marks (attention sinks' "special tokens"): those the tokenizer adds, [MASK] and the like;
    # not <unk>, which stands for a piece of the text
    special = [i for i in tok.all_special_ids if i != tok.unk_token_id]
    return padded, mask, tokens, torch.isin(padded, torch.tensor(special, dtype=padded.dtype)) & mask


def patch_grid(config) -> tuple[int, int]:
    """(rows, columns) of an image model's patch grid: image_size // patch_size along each side.

    >>> from transformers import ViTConfig
    >>> from wviz.models.lens import patch_grid
    >>> patch_grid(ViTConfig(image_size=224, patch_size=16))
    (14, 14)
    """
    size, patch = config.image_size, config.patch_size
    size = (size, size) if isinstance(size, int) else tuple(size)
    patch = (patch, patch) if isinstance(patch, int) else tuple(patch)
    return size[0] // patch[0], size[1] // patch[1]


def _pictures(inputs) -> list:
    """PIL images from one picture or a list: PIL images, or the bytes of PNG/JPEG/BMP files (checked by
    wviz.models.safety.read_picture)."""
    from PIL import Image

    from wviz.models.safety import read_picture

    items = inputs if isinstance(inputs, (list, tuple)) else [inputs]
    if not items:
        raise ValueError("give at least one picture")
    out = []
    for i, x in enumerate(items, 1):
        if isinstance(x, (bytes, bytearray)):
            x = read_picture(bytes(x))
        if not isinstance(x, Image.Image):
            raise ValueError(f"picture {i} must be a PIL image or the bytes of a PNG/JPEG file, got "
                             f"{type(x).__name__}")
        out.append(x.convert("RGB"))
    return out


def _picture_tokens(config, T: int) -> tuple[str, ...]:
    rows, cols = patch_grid(config)
    prefix = T - rows * cols
    return tuple(["[CLS]", "[DIST]"][:prefix]) + tuple(f"patch {r},{c}" for r in range(rows) for c in range(cols))


def _run(lens, inputs: dict, norm: Normaliser, details: bool):
    """The model's forward under ``norm``, with every layer checked to have gone through wviz's function."""
    with torch.inference_mode(), swapped(norm, details) as record:
        out = lens.model(**inputs, output_hidden_states=True)
    check_layers(record, lens.model.config.num_hidden_layers)
    return out, record


def _run_pictures(lens, inputs, norm: Normaliser, details: bool):
    """The forward of pictures: (output, record, ids None, mask, tokens, special: the class tokens before the
    patches)."""
    dev = next(lens.model.parameters()).device
    pixels = lens.processor(images=_pictures(inputs), return_tensors="pt")["pixel_values"].to(dev)
    out, record = _run(lens, {"pixel_values": pixels}, norm, details)
    B, T = out.hidden_states[0].shape[:2]
    rows, cols = patch_grid(lens.model.config)
    mask = torch.ones(B, T, dtype=torch.bool, device=dev)
    special = torch.arange(T, device=dev).expand(B, T) < T - rows * cols
    return out, record, None, mask, (_picture_tokens(lens.model.config, T),) * B, special


def _run_text(lens, inputs, norm: Normaliser, details: bool, max_tokens: int | None):
    """The forward of texts: (output, record, ids, mask, tokens, special)."""
    dev = next(lens.model.parameters()).device
    ids, mask, tokens, special = _encode_text(lens, inputs, max_tokens)
    ids, mask, special = ids.to(dev), mask.to(dev), special.to(dev)
    extra = {"use_cache": False} if lens.family == "decoder" else {}
    out, record = _run(lens, {"input_ids": ids, "attention_mask": mask.long(), **extra}, norm, details)
    return out, record, ids, mask, tokens, special


def forward(lens, inputs, normaliser: str | Normaliser = "softmax", *, max_tokens: int | None = None,
            details: bool = True, **params) -> Forward:
    """Run ``lens`` (wviz.models.hub.Lens) on ``inputs``, every head normalised by ``normaliser``
    (wviz.models.normalisers.make_normaliser: params tau, alpha, gamma, n_iter, rho), and collect each layer's
    attention (and, with ``details``, its queries, keys, values and scores), the hidden states and the head's
    logits in a :class:`Forward`. ``inputs``: a text or a list of texts (text families; padded on the right and
    masked for every normaliser, so a text gives the same maps alone or in a batch), or a picture or a list of them
    (PIL images or PNG/JPEG bytes). A text longer than ``max_tokens`` (default: the model's maximum, at most
    wviz.models.families.LONGEST) raises ValueError.

    Example: MiniLM's own attention is softmax of its scores, and padding gets no weight (tests/test_models_*.py
    run the other families: a decoder's weights stop at the diagonal under every normaliser).

    >>> import torch
    >>> from wviz.models import hub, lens
    >>> f = lens.forward(hub.load(device="cpu"), ["The cat sat on the mat.", "Bees make honey."])
    >>> tuple(f.attention.shape), f.mask.sum(-1).tolist()
    ((2, 6, 12, 9, 9), [9, 6])
    >>> torch.allclose(f.attention, torch.softmax(f.scores, -1)), float(f.attention[1, ..., 6:].max())
    (True, 0.0)
    """
    norm = make_normaliser(normaliser, **params)
    if lens.family == "image":
        out, record, ids, mask, tokens, special = _run_pictures(lens, inputs, norm, details)
    else:
        out, record, ids, mask, tokens, special = _run_text(lens, inputs, norm, details, max_tokens)
    stack = (lambda xs: torch.stack(xs, dim=1)) if details else (lambda xs: None)
    hidden = torch.stack(out.hidden_states, dim=1)
    m = mask[:, :, None].to(hidden.dtype)
    pooled = (hidden[:, -1] * m).sum(dim=1) / m.sum(dim=1)
    return Forward(tokens=tokens, mask=mask, queries=stack(record.queries), keys=stack(record.keys),
                   values=stack(record.values), scores=stack(record.scores),
                   attention=torch.stack(record.weights, dim=1), hidden=hidden,
                   embedding=torch.nn.functional.normalize(pooled, dim=-1), normaliser=norm, ids=ids,
                   special=special, logits=getattr(out, "logits", None) if lens.head else None, family=lens.family)
