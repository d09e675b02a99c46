"""Attention sinks: how much of each head's attention goes to the first token (and to the special tokens).

Many heads of trained transformers send most of every row to the first token ([CLS], <s>, or simply the first word
of a GPT-2 text) or to [SEP]: a "no-op" that parks the mass a softmax row must place somewhere (Xiao et al. 2024,
attention sinks; Clark et al. 2019 for BERT's [SEP]). :func:`sink_shares` measures it per layer and head: the mean,
over the real query tokens but the first (whose row, in a decoder, can only hold the first token), of the weight
on the first key, and of the weight on the special keys.

What the normalisers do to a sink (SINKS, the sentence a page shows): softmax, sparsemax and entmax constrain only
the rows (each sums to 1), so a sink stays, and sparsemax may even give it the whole row, with exactly 0 elsewhere;
Sinkhorn also holds every key's column to the same total, 1 spread over the n queries, so the first token can take
on average 1 / n of a row: the column constraint dissolves the sink (softened as rho falls to 0, where it is
softmax again; in a decoder each prefix's columns are held, so the first token's mass is shared among the queries
of each prefix).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["SINKS", "SinkShares", "sink_shares"]

SINKS = ("Softmax, sparsemax and entmax only make each row sum to 1, so a head may park a whole row on the first "
         "token (sparsemax with exact zeros everywhere else); Sinkhorn also holds every key's column to the same "
         "total, so the first token can take on average 1/n of a row and the sink dissolves.")


@dataclass(frozen=True)
class SinkShares:
    """Sink shares of one input's forward: ``first`` (L, H), the mean weight on the first token, ``special`` (L, H),
    the mean weight on the special tokens ([CLS], [SEP], <s>, ...; a picture's class tokens), each averaged over the
    ``queries`` real query tokens after the first."""

    first: torch.Tensor
    special: torch.Tensor
    queries: int


def sink_shares(fwd, sentence: int = 0) -> SinkShares:
    """The :class:`SinkShares` of input ``sentence`` of ``fwd`` (wviz.models.lens.Forward): for layer l and head h,
    first[l, h] = mean over real queries i > 0 of A[l, h, i, 0], special[l, h] = mean of sum_{j special} A[l, h, i, j].

    Example: MiniLM's heads put on average 45 % of a row on [CLS], where a uniform row would put 1 / 13 (8 %);
    Sinkhorn's column constraint takes the sink away.

    >>> from wviz.models import hub, lens
    >>> from wviz.models.sinks import sink_shares
    >>> model = hub.load(device="cpu")
    >>> soft = sink_shares(lens.forward(model, "The cat sat on the mat and watched the rain."))
    >>> tuple(soft.first.shape), soft.queries, round(float(soft.first.mean()), 2), round(float(soft.special.mean()), 2)
    ((6, 12), 12, 0.45, 0.49)
    >>> sinkhorn = sink_shares(lens.forward(model, "The cat sat on the mat and watched the rain.", "sinkhorn"))
    >>> round(float(sinkhorn.first.mean()), 2)
    0.06
    """
    A, mask = fwd.attention[sentence], fwd.mask[sentence]
    queries = mask.clone()
    queries[0] = False
    n = int(queries.sum())
    if n == 0:
        raise ValueError("the input has one token: a sink share needs at least one query after the first")
    rows = A[:, :, queries]                                           # (L, H, n, T)
    special = fwd.special[sentence].to(A.dtype)
    return SinkShares(first=rows[..., 0].mean(dim=-1), special=(rows * special).sum(dim=-1).mean(dim=-1), queries=n)
