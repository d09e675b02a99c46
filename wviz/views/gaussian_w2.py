"""What the "Gaussian W2 attention" page computes, built on :mod:`wviz.gaussian`.

Tokens are 2-D Gaussians N(m_i, S_i); every token is a query and a key (self-attention), and the attention of
004 is softmax(-W2^2(q_i, k_j) / tau) (see shared/seeds/INDEX.md for the closed form of W2^2).
"""
from __future__ import annotations

import torch

from wviz import attention, gaussian


def dot_attention(means: torch.Tensor, tau: float) -> torch.Tensor:
    """softmax(<m_i, m_j> / tau): the usual dot-product attention of the means, for comparison."""
    return attention.softmax(means @ means.transpose(-1, -2), tau=tau)


def w2_split(means: torch.Tensor, covs: torch.Tensor, query: int) -> tuple[torch.Tensor, torch.Tensor]:
    """W2^2 from token ``query`` to every token, as (mean part ||m_q - m_k||^2, covariance (Bures) part)."""
    parts = gaussian.pairwise_w2_parts(means[query:query + 1], covs[query:query + 1], means, covs)
    return parts.mean[0], parts.covariance[0]


def covariance_sweep(means: torch.Tensor, covs: torch.Tensor, query: int, token: int, scales: torch.Tensor,
                     tau: float) -> torch.Tensor:
    """The W2 weights of ``query`` (S, n) as the covariance of ``token`` is multiplied by each scale."""
    factor = torch.ones(len(scales), len(means), dtype=covs.dtype)
    factor[:, token] = scales.to(covs.dtype)
    swept = covs.unsqueeze(0) * factor.reshape(len(scales), len(means), *([1] * (covs.dim() - 1)))
    m = means.unsqueeze(0).expand(len(scales), -1, -1)
    return gaussian.w2_attention(m[:, query:query + 1], swept[:, query:query + 1], m, swept, tau)[:, 0]
