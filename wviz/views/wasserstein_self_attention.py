"""What the "Wasserstein self-attention" page computes, built on :mod:`wviz.wsa` (source: the 000 note, INDEX.md).

X is a preset sequence or an upload; Q = X W_Q, K = X W_K, V = X W_V; W_ij = W(q_i, k_j) a Wasserstein distance
between the distributions q_i and k_j stand for, A_ij = f(W_ij) and Y = A V, next to scaled dot-product attention
softmax(Q K^T / sqrt(d)) V on the same X and projections.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from wviz import io, samples, wsa

PRESETS = samples.SEQUENCES
UPLOAD = "uploaded CSV"
MAX_ROWS, MAX_MB = io.MAX_POINTS, io.MAX_UPLOAD_BYTES // 2**20   # what an uploaded sequence may hold
REPRESENTATIONS, WEIGHT_MAPS = wsa.REPRESENTATIONS, wsa.WEIGHT_MAPS


def sequence(preset: str, n: int | None, d: int | None, seed: int, upload: bytes | None) -> torch.Tensor:
    """The input X (n, d): a preset sequence of n tokens of width d from ``seed``, or, for preset UPLOAD, the
    uploaded CSV (one token per row)."""
    if preset != UPLOAD:
        return samples.sequence(preset, n, d, seed)
    if upload is None:
        raise ValueError("upload a CSV sequence (n rows of d numbers), or choose a preset")
    return io.read_matrix_csv(upload, "sequence")


@dataclass(frozen=True)
class Inputs:
    """What the controls set apart from tau: the sequence X (n, d); the seed of W_Q, W_K, W_V (None: identities);
    how a vector is read as a distribution (representation, with k points per cloud and the order p of the
    empirical W_p); the weight map f, with the sigmoid's offset b, scale s and row normalisation."""

    X: torch.Tensor
    seed: int | None
    representation: str
    weight_map: str
    b: float
    s: float
    normalize: bool
    k: int
    p: int

    @property
    def projections(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(W_Q, W_K, W_V), each d x d: identities, or i.i.d. N(0, 1/d) entries from the seed."""
        return samples.projections(self.X.shape[-1], self.seed)


@dataclass(frozen=True)
class Attention:
    """Wasserstein self-attention of the 000 note (ours) and scaled dot-product attention (dot) at temperature
    tau, each a wsa.WSAResult (Y, A, W)."""

    inputs: Inputs
    tau: float
    ours: wsa.WSAResult
    dot: wsa.WSAResult


def attend(i: Inputs, tau: float) -> Attention:
    """A_ij = f(W(q_i, k_j)) and Y = A V for the chosen reading and weight map, and softmax(Q K^T / sqrt(d)) V."""
    W_Q, W_K, W_V = i.projections
    ours = wsa.wasserstein_self_attention(i.X, W_Q, W_K, W_V, representation=i.representation,
                                          weight_map=i.weight_map, tau=tau, b=i.b, s=i.s, normalize=i.normalize,
                                          k=int(i.k), p=int(i.p))
    return Attention(i, tau, ours, wsa.dot_product_attention(i.X, W_Q, W_K, W_V))
