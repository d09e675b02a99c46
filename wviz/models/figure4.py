"""Sec. 8 / Figure 4 of 002 on MiniLM: does each head's softmax solve the dual problem (9)?

002 reads an attention head as the solver of problem (4): a distribution p over templates t_i, close (KL) to a
preference u, whose mean is close to mu + z, where alpha > 0 is the reliability of the evidence z (the weight of
||E_p[t] - mu - z||^2 is 1 / (2 alpha)). Its Fenchel dual (9) has a maximiser lambda*; the approximation
lambda* ~ alpha z (16) turns the exact answer (12) into the generalised attention (18). With alpha = 1,
t_i = x_i / sqrt(d'), z = K^T q_k and u uniform, (18) is exactly a BERT head's softmax (21). Sec. 8 measures how far
alpha z is from lambda*: the relative deviation ||lambda* - alpha z|| / ||lambda*||, per layer (Figure 4) and per
head (Appendix C, Figure 5).

Any encoder wviz opens (wviz.models.families: BERT, RoBERTa, XLM-RoBERTa, DistilBERT, ELECTRA, all post-LayerNorm,
so that hidden state l is the input of layer l's attention) gives the same experiment: pass its Lens
(wviz.models.hub.load) as ``lens``; the default is MiniLM.

In this module alpha is only that reliability of z in problem (4); the entmax index of the normalisers is
:attr:`wviz.models.minilm.Normaliser.alpha`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from wviz import fenchel
from wviz._checks import positive
from wviz.models import hub
from wviz.models.families import key_weight
from wviz.models.lens import Forward, check_sentences, forward

__all__ = ["HeadDuals", "fenchel_duals", "FenchelDeviation", "fenchel_deviation"]


@dataclass(frozen=True)
class HeadDuals:
    """The dual (9) of 002 set up for every head and query of one layer, and its maximiser (B sentences, T tokens,
    H heads, d = 384).

    t         (B, T, d) templates t_i = x_i / sqrt(d'), x_i the layer's input hidden states (0 on padding)
    u         (B, T) the preference, uniform over the real tokens (u_i propto 1)
    z         (B, H, T, d) the evidence z = K_h^T q_k for query k of head h, q_k = Q_h x_k + b_Q (see fenchel_duals)
    lam       (B, H, T, d) lambda*, the maximiser of (9) with alpha
    grad_norm (B, H, T) norm of the gradient of (9) at lambda* (optimality: about 1e-10)
    alpha     the reliability alpha of z in (4)
    """

    t: torch.Tensor
    u: torch.Tensor
    z: torch.Tensor
    lam: torch.Tensor
    grad_norm: torch.Tensor
    alpha: float


def fenchel_duals(fwd: Forward, layer: int, alpha: float = 1.0, lens=None) -> HeadDuals:
    """Sec. 8 of 002 for one layer of MiniLM: with alpha, t_i = x_i / sqrt(d'), z = K^T Q x_k and u_i propto 1,
    the generalised attention (18) sum_i t_i softmax_i(alpha <t_i, z>) is the head's attention (21) (V' = V sqrt(d')
    maps it to the head's output); lambda* maximises the dual (9) of problem (4), solved by wviz.fenchel.solve_dual.

    BERT's projections have biases: the head's score is <K x_i + b_K, q_k> / sqrt(d') with q_k = Q x_k + b_Q.
    With z = K^T q_k, <t_i, z> is that score minus <b_K, q_k> / sqrt(d'), a constant over the keys i that softmax
    ignores, so (18) at alpha = 1 reproduces the head's weights exactly (the paper's z = K^T Q x_k leaves b_Q out,
    which would not).

    The dual is solved in the span of the templates, exactly: with B an orthonormal basis containing span{t_i},
    log M(lambda) depends on B^T lambda only and mu lies in the span, so (9) splits into the n-dimensional dual of
    templates B^T t_i and evidence B^T z (solved by solve_dual) and <lambda_perp, z_perp> - ||lambda_perp||^2 /
    (2 alpha), maximised by lambda_perp = alpha z_perp. Hence lambda* = B lambda~* + alpha (z - B B^T z), and the
    Newton systems are n x n (n tokens) rather than d x d (d = 384 in MiniLM) for each of B H T problems.
    ``lens``: the encoder that ran ``fwd`` (wviz.models.hub.Lens; default the bundled MiniLM).
    """
    model = (lens if lens is not None else hub.load(None, fwd.attention.device)).model
    queries = fwd.queries
    if queries is None:
        raise ValueError("the Fenchel duals need the queries: run the forward with details=True")
    if not 0 <= layer < queries.shape[1]:
        raise ValueError(f"layer must be 0 to {queries.shape[1] - 1}, got {layer}")
    alpha = positive(alpha, "alpha")
    f64 = torch.float64
    mask = fwd.mask
    H, d_head = queries.shape[2], queries.shape[-1]
    t = fwd.hidden[:, layer].to(f64) * mask[..., None] / math.sqrt(d_head)          # (B, T, d)
    u = mask.to(f64) / mask.sum(dim=-1, keepdim=True)                               # (B, T)
    W_K = key_weight(model, layer).detach().to(f64).reshape(H, d_head, -1)          # (H d', d) -> (H, d', d)
    z = torch.einsum("hcd,bhkc->bhkd", W_K, queries[:, layer].to(f64))              # (B, H, T, d)
    basis = torch.linalg.qr(t.mT).Q                                                 # (B, d, T) orthonormal columns
    t_red = t @ basis                                                               # (B, T, T)
    z_red = z @ basis[:, None]                                                      # (B, H, T, T)
    sol = fenchel.solve_dual(t_red[:, None, None], u[:, None, None], z_red, alpha)
    lam = sol.lam.to(f64) @ basis.mT[:, None] + alpha * (z - z_red @ basis.mT[:, None])
    return HeadDuals(t=t, u=u, z=z, lam=lam, grad_norm=sol.grad_norm, alpha=alpha)


@dataclass(frozen=True)
class FenchelDeviation:
    """Relative deviations ||lambda* - alpha z|| / ||lambda*|| (Sec. 8, Figure 4 of 002) over N samples, a sample
    being one real query token k of one sentence.

    per_layer  (L, N) the deviation averaged over the heads: the distribution Figure 4 histograms per layer
    per_head   (L, H, N) each head's deviation (Appendix C, Figure 5 of 002)
    sentence   (N,) index of each sample's sentence;  position (N,) its token position ([CLS] = 0)
    grad_norm  (L, H, N) the dual's gradient norm at each lambda* (optimality check)
    alpha      the reliability alpha of z in (4) used
    """

    per_layer: torch.Tensor
    per_head: torch.Tensor
    sentence: torch.Tensor
    position: torch.Tensor
    grad_norm: torch.Tensor
    alpha: float


def _real_tokens(per_query: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(L, B, H, T) values per layer, sentence, head and query -> (L, H, n_real): the real query tokens only, in
    sentence-then-position order."""
    b, k = mask.nonzero(as_tuple=True)
    return per_query.permute(1, 3, 0, 2)[b, k].permute(1, 2, 0).cpu()


def fenchel_deviation(sentences=None, alpha: float = 1.0, *, device=None, batch_size: int = 4,
                      progress=None, lens=None) -> FenchelDeviation:
    """The Sec. 8 / Figure 4 experiment of 002 on MiniLM: for every layer, head and real query token of every
    sentence (default: the bundled corpus, wviz.models.corpus.CORPUS), lambda* maximising the dual (9) with
    reliability alpha (1 in the paper), t_i = x_i / sqrt(d'), z = K^T Q x_k, u uniform (see fenchel_duals), and the
    relative deviation of its approximation (16), ||lambda* - alpha z|| / ||lambda*||. Sentences run in padded
    batches of ``batch_size``; ``progress(done, total)`` is called after each batch. ``lens``: any encoder
    (wviz.models.hub.Lens; default the bundled MiniLM on ``device``).

    Example: on one short sentence, each lambda* maximises the dual (9) to a gradient norm near 1e-10, and alpha z is
    within about 10 % of it in every layer (Figure 4), closer still for a smaller alpha.

    >>> from wviz.models.figure4 import fenchel_deviation
    >>> dev = fenchel_deviation(["The cat sat."])
    >>> tuple(dev.per_layer.shape), tuple(dev.per_head.shape)
    ((6, 6), (6, 12, 6))
    >>> bool(dev.grad_norm.max() < 1e-8)
    True
    >>> [round(float(x), 2) for x in dev.per_layer.mean(dim=1)]
    [0.06, 0.08, 0.08, 0.08, 0.09, 0.09]
    >>> bool(fenchel_deviation(["The cat sat."], alpha=0.1).per_layer.mean() < dev.per_layer.mean())
    True
    """
    from wviz.models.corpus import CORPUS

    sentences = check_sentences(CORPUS if sentences is None else sentences)
    alpha = positive(alpha, "alpha")
    lens = lens if lens is not None else hub.load(None, device)
    if lens.family != "encoder":
        raise ValueError(f"Figure 4 of 002 reads an encoder's attention; {lens.info.name} is a {lens.family}")
    per_head, grads, sent, pos = [], [], [], []
    # batches of similar lengths pad less (every padded token is another problem per head)
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    for start in range(0, len(sentences), batch_size):
        chunk = order[start:start + batch_size]
        fwd = forward(lens, [sentences[i] for i in chunk])
        duals = [fenchel_duals(fwd, layer, alpha, lens) for layer in range(fwd.hidden.shape[1] - 1)]
        dev = torch.stack([fenchel.relative_deviation(dl.lam, dl.z, alpha) for dl in duals])  # (L, B, H, T)
        per_head.append(_real_tokens(dev, fwd.mask))
        grads.append(_real_tokens(torch.stack([dl.grad_norm for dl in duals]), fwd.mask))
        b, k = fwd.mask.nonzero(as_tuple=True)
        sent.append(torch.tensor(chunk)[b.cpu()])
        pos.append(k.cpu())
        if progress is not None:
            progress(min(start + batch_size, len(sentences)), len(sentences))
    per_head = torch.cat(per_head, dim=-1)
    return FenchelDeviation(per_layer=per_head.mean(dim=1), per_head=per_head, sentence=torch.cat(sent),
                            position=torch.cat(pos), grad_norm=torch.cat(grads, dim=-1), alpha=alpha)
