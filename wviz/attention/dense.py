"""softmax and prior-softmax: the maps of the entropic regularisers (001 eqs. (4)-(5) and (13)), in closed form."""
from __future__ import annotations

import math

import torch

from wviz._checks import first, positive

from ._inputs import check_tensor, log_prior, of_row, row_max, tau_for


def softmax(scores: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
    """Softmax attention p_j = exp(s_j / tau) / sum_l exp(s_l / tau): eq. (12) of the 001 note.

    It is the argmin over the simplex of -<s, p> + tau * sum_j p_j log p_j (the one-sided entropic OT problem,
    eq. (4)-(5) of the 001 note, with C_j = -s_j; KKT conditions (9)-(10)). Scores are shifted by their row max
    before dividing by tau, so tiny or huge tau cannot overflow; -inf scores get weight exactly 0.

    Example: every key gets some weight; as tau -> 0 the weights concentrate on the best key (the argmax).

    >>> import torch
    >>> from wviz.attention import softmax
    >>> s = torch.tensor([1.0, 2.0, 3.0])
    >>> [round(x, 4) for x in softmax(s).tolist()]
    [0.09, 0.2447, 0.6652]
    >>> [round(x, 4) for x in softmax(s, tau=0.01).tolist()]
    [0.0, 0.0, 1.0]
    """
    tau = positive(tau, "tau")
    check_tensor(scores, "scores")
    if tau == 1.0:
        p = torch.softmax(scores, dim=-1)  # torch shifts by the row max itself
        # torch's softmax turns a row with NaN, +inf or only -inf keys into NaN everywhere (its max or its sum
        # is NaN), so one column of the output checks every row without another pass over the scores. Those are
        # exactly the rows whose max is not finite, which row_max rejects (naming the row and the reason); a row
        # with a finite max has exp(s - max) in [0, 1] with one entry 1, hence a sum >= 1 and no NaN.
        if bool(torch.isnan(p[..., 0]).any()):
            row_max(scores)
        return p
    smax = row_max(scores)
    return torch.softmax((scores - smax) / tau_for(scores.dtype, tau), dim=-1)


def prior_softmax(scores: torch.Tensor, prior: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
    """Prior-softmax p_j = pi_j exp(s_j / tau) / sum_l pi_l exp(s_l / tau): the PriorSoftmax row of the table
    under eq. (13) of the 001 note.

    It is the argmin over the simplex of -<s, p> + tau * KL(p || pi). ``prior`` (pi) broadcasts to ``scores``,
    is non-negative and sums to 1 along the last dimension; keys with pi_j = 0 (or s_j = -inf) get weight
    exactly 0. A uniform prior gives softmax.

    Example: a key with prior 0 gets weight exactly 0, and a uniform prior gives softmax.

    >>> import torch
    >>> from wviz.attention import prior_softmax, softmax
    >>> s = torch.tensor([1.0, 2.0, 3.0])
    >>> [round(x, 4) for x in prior_softmax(s, torch.tensor([0.5, 0.5, 0.0])).tolist()]
    [0.2689, 0.7311, 0.0]
    >>> torch.allclose(prior_softmax(s, torch.full((3,), 1 / 3)), softmax(s))
    True
    """
    tau = positive(tau, "tau")
    smax = row_max(scores)
    logits = (scores - smax) / tau_for(scores.dtype, tau) + log_prior(prior, scores)
    dead = logits.detach().amax(dim=-1) == -math.inf
    if bool(dead.any()):
        where = of_row(first(dead), scores.shape[:-1])
        raise ValueError(f"every key{where} is masked: the prior is 0 on every key whose score is finite")
    return torch.softmax(logits, dim=-1)
