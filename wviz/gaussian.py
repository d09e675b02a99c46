"""Gaussian embeddings, the Bures-Wasserstein distance W2 between Gaussians, and W2 attention.

Source: 004, a summary of "Stochastic Vision Transformers with Wasserstein Distance-Aware Attention" (Erick et al.,
arXiv 2311.18645, Sec. 4.2; see the References page), and the Bures-Wasserstein closed form for Gaussians
N(m1, S1), N(m2, S2):

    W2^2 = ||m1 - m2||^2 + tr(S1 + S2 - 2 (S2^{1/2} S1 S2^{1/2})^{1/2})            (mean part + covariance part)

(004 prints the trace term as (S_Q^{1/2} S_Q S_K^{1/2})^{1/2}, a typo for the form above.) For diagonal
S = diag(sigma^2) the covariance part is ||sigma1 - sigma2||^2. 004's attention is A = softmax(-W2^2(Q, K) / tau).

How a covariance is given (one rule everywhere): for means m of shape (..., d), a tensor S of the same shape
(..., d) holds diagonal variances sigma^2; a tensor of shape (..., d, d) is a full covariance matrix. Means and
covariances of one side have the same leading shape; the two sides broadcast against each other. A full
covariance must be symmetric positive semi-definite: it is symmetrised and its eigenvalues are clamped at 0 before
square roots (POT returns NaN for a rank-deficient covariance, POT issue 708), so the result is never NaN.

Gradients: the diagonal case is differentiable everywhere except at a zero variance (there d sigma / d sigma^2 is
infinite; it is taken as 0 here; train on sigma or log sigma^2 instead). The full case differentiates through
torch.linalg.eigh, which is finite only when the covariance of the second Gaussian (the key) has distinct
eigenvalues (POT issue 773; an isotropic covariance has repeated ones).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from wviz import attention
from wviz._checks import first, index_of, positive

__all__ = ["W2Parts", "w2_squared", "w2_squared_parts", "pairwise_w2_squared", "pairwise_w2_parts",
           "w2_attention", "gaussian_from_params", "ellipse"]


@dataclass(frozen=True)
class W2Parts:
    """W2^2 split as in the closed form: mean = ||m1 - m2||^2, covariance = tr(S1 + S2 - 2 (S2^{1/2} S1 S2^{1/2})^{1/2})
    (the Bures part); both >= 0, same shape."""

    mean: torch.Tensor
    covariance: torch.Tensor

    @property
    def total(self) -> torch.Tensor:
        return self.mean + self.covariance


# ----------------------------------------------------------------------------------------------- input checks

def _where(lead: torch.Size, flat: int) -> str:
    """'token 3' / 'token (0, 3)' / '' for the flat index of an element of leading shape ``lead``."""
    i = index_of(flat, lead)
    return "" if i is None else f"token {i}"


def _name(what: str, side: str, lead: torch.Size, flat: int) -> str:
    """'covariance of key token 3', 'mean of Gaussian 1 (token 3)', 'covariance of Gaussian 2'."""
    where = _where(lead, flat)
    if side in ("query", "key"):
        return f"{what} of {side} {where}".rstrip()
    if side in ("1", "2"):
        return f"{what} of Gaussian {side}" + (f" ({where})" if where else "")
    return f"{what} of {where}" if where else f"the {what}"


def _side(side: str) -> str:
    """How messages name one side's inputs: 'Gaussian 1', 'query', 'key', or nothing."""
    return f"Gaussian {side}" if side in ("1", "2") else side


def _check_float(x, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch tensor, got {type(x).__name__}")
    if x.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"{name} must be float32 or float64, got {x.dtype}")


def _tol(S: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Rounding tolerance for symmetry and eigenvalue checks, relative to the matrix's largest entry."""
    return 64 * S.shape[-1] * torch.finfo(S.dtype).eps * scale + torch.finfo(S.dtype).tiny


def _check_gaussian(m, S, side: str):
    """Validates one side (means (..., d), covariances (..., d) or (..., d, d)); returns (m, S, diagonal) with full
    covariances symmetrised."""
    of = f" of {_side(side)}" if _side(side) else ""
    _check_float(m, f"the mean{of}")
    _check_float(S, f"the covariance{of}")
    if m.dim() == 0 or m.shape[-1] == 0:
        raise ValueError(f"the mean{of} needs a last dimension d >= 1, got shape {tuple(m.shape)}")
    if m.numel() == 0:
        who = f"{_side(side)} " if _side(side) else ""
        raise ValueError(f"the {who}means hold no tokens (shape {tuple(m.shape)}); give at least one token")
    if m.device != S.device:
        raise ValueError(f"mean and covariance{of} are on different devices ({m.device}, {S.device})")
    d, lead = m.shape[-1], m.shape[:-1]
    if S.shape == m.shape:
        diagonal = True
    elif S.shape == m.shape + (d,):
        diagonal = False
    else:
        raise ValueError(f"the covariance{of} has shape {tuple(S.shape)} but the mean has {tuple(m.shape)}: "
                         f"give variances of shape {tuple(m.shape)} or matrices of shape {tuple(m.shape) + (d,)}")
    # one copy of a strided view (a head of a ViT's fused q, k, v projection) before the reductions below and the
    # products after: torch reduces such a view far slower than contiguous memory (BENCHMARKS.md, as below)
    m, S = m.contiguous(), S.contiguous()
    Sd = S.detach()
    # every forward pass of a ViT comes through here: whole-tensor amin and amax (they carry a NaN or an inf
    # through), the per-token scans below only to name the bad token (BENCHMARKS.md, "The test command")
    ends = torch.stack([m.detach().amin(), m.detach().amax(), Sd.amin(), Sd.amax()])
    good = torch.isfinite(ends).all()
    if diagonal:
        good &= ends[2] >= 0
    if bool(good):
        return (m, S, True) if diagonal else _check_matrices(m, S, side)
    bad = ~torch.isfinite(m.detach()).all(dim=-1)
    if bool(bad.any()):
        i = first(bad)
        raise ValueError(f"{_name('mean', side, lead, i)} contains NaN or inf")
    bad = ~torch.isfinite(Sd.reshape(*lead, -1)).all(dim=-1)
    if bool(bad.any()):
        i = first(bad)
        raise ValueError(f"{_name('covariance', side, lead, i)} contains NaN or inf")
    low = Sd.amin(dim=-1)
    i = first(low < 0)
    raise ValueError(f"{_name('variance', side, lead, i)} is negative ({float(low.reshape(-1)[i]):.3g}); "
                     "variances must be >= 0")


def _check_matrices(m, S, side: str):
    """The symmetry and positive semi-definiteness of finite covariance matrices (..., d, d)."""
    lead, Sd = m.shape[:-1], S.detach()
    scale = Sd.abs().amax(dim=(-2, -1))
    asym = (Sd - Sd.mT).abs().amax(dim=(-2, -1))
    bad = asym > _tol(Sd, scale)
    if bool(bad.any()):
        i = first(bad)
        raise ValueError(f"{_name('covariance', side, lead, i)} is not symmetric (largest |S - S^T| entry "
                         f"{float(asym.reshape(-1)[i]):.3g}); a covariance matrix must equal its transpose")
    S = (S + S.mT) / 2
    low = torch.linalg.eigvalsh(S.detach())[..., 0]
    bad = low < -_tol(Sd, scale)
    if bool(bad.any()):
        i = first(bad)
        raise ValueError(f"{_name('covariance', side, lead, i)} is not positive semi-definite (smallest "
                         f"eigenvalue {float(low.reshape(-1)[i]):.3g})")
    return m, S, False


def _common(*xs: torch.Tensor) -> list[torch.Tensor]:
    """The tensors in one dtype (float64 if any is) on one device."""
    if len({x.device for x in xs}) > 1:
        raise ValueError(f"the inputs are on different devices ({', '.join(sorted({str(x.device) for x in xs}))}); "
                         "move them to one device")
    dtype = torch.float64 if any(x.dtype == torch.float64 for x in xs) else torch.float32
    return [x.to(dtype) for x in xs]


# ---------------------------------------------------------------------------------------------- the closed form

def _sqrt0(x: torch.Tensor) -> torch.Tensor:
    """sqrt(max(x, 0)) with a finite gradient (0) at x <= 0: the where/clamp pair keeps sqrt's infinite derivative
    at 0 out of the backward pass (0 * inf would be NaN)."""
    pos = x > 0
    return torch.where(pos, x.clamp(min=torch.finfo(x.dtype).tiny).sqrt(), torch.zeros_like(x))


def _sqrtm_psd(S: torch.Tensor) -> torch.Tensor:
    """Symmetric square root S^{1/2} = U diag(sqrt(max(lambda, 0))) U^T of a symmetric PSD matrix."""
    lam, U = torch.linalg.eigh(S)
    return (U * _sqrt0(lam).unsqueeze(-2)) @ U.mT


def _sqdist(x: torch.Tensor, y: torch.Tensor, xx: torch.Tensor | None = None,
            yy: torch.Tensor | None = None) -> torch.Tensor:
    """||x_i - y_j||^2 for all pairs, (..., n, d), (..., m, d) -> (..., n, m), as ||x||^2 + ||y||^2 - 2 x.y (one
    matrix product, the rest in place); xx, yy: the squared norms ||x_i||^2, ||y_j||^2 where the caller has them.

    Cancellation: the expansion is off by at most about (d + 2) eps (||x_i||^2 + ||y_j||^2) (the rounding bound of
    three dot products of length d), so an exact 0 can come out as a small number of either sign. The entries at
    or below twice that bound for the largest norms (the only ones that may be 0 exactly; few, unless many rows
    coincide) are recomputed from the differences x_i - y_j: identical rows give exactly 0 and no entry is
    negative. Overflow (norms near the dtype's largest number) leaves inf or NaN for the caller to report."""
    if xx is None or yy is None:
        xx, yy = (x * x).sum(-1), (y * y).sum(-1)
    D = (x @ y.mT).mul_(-2).add_(xx.unsqueeze(-1)).add_(yy.unsqueeze(-2))
    tol = float(2 * (x.shape[-1] + 2) * torch.finfo(D.dtype).eps * (xx.detach().amax() + yy.detach().amax()))
    # the minimum first: a scan of D for the close entries (nonzero) costs more than the matrix product itself,
    # and in a ViT's attention a query rarely coincides with a key
    if math.isfinite(tol) and float(D.detach().amin()) <= tol:
        close = (D.detach() <= tol).nonzero(as_tuple=True)
        if close[0].numel():
            lead = D.shape[:-2]
            xi = x.expand(*lead, *x.shape[-2:])[(*close[:-2], close[-2])]
            yj = y.expand(*lead, *y.shape[-2:])[(*close[:-2], close[-1])]
            D = D.index_put(close, ((xi - yj) ** 2).sum(-1))
    return D


def _sqdist_fits(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """_sqdist, or a ValueError when a squared norm ||x_i||^2 or ||y_j||^2 reaches an eighth of the dtype's largest
    number: below that, every term of the expansion and the result (<= 2 ||x_i||^2 + 2 ||y_j||^2) are finite."""
    xx, yy = (x * x).sum(-1), (y * y).sum(-1)   # computed once: here for the bound, in _sqdist for D
    big = float(torch.maximum(xx.detach().amax(), yy.detach().amax()))
    limit = torch.finfo(x.dtype).max / 8
    if not big < limit:
        raise ValueError(f"W2^2 overflows {str(x.dtype).replace('torch.', '')}: a token's ||m||^2 + ||sigma||^2 "
                         f"reaches {big:.3g}, above {limit:.3g}; scale the means and variances down or use float64")
    return _sqdist(x, y, xx, yy)


def _bures_full(S1: torch.Tensor, S2: torch.Tensor) -> torch.Tensor:
    """tr(S1 + S2 - 2 (S2^{1/2} S1 S2^{1/2})^{1/2}) for symmetric PSD S1, S2 broadcasting over leading dims.

    tr of the square root of the PSD matrix M = S2^{1/2} S1 S2^{1/2} is the sum of the square roots of its
    eigenvalues (clamped at 0): only eigenvalues of M are needed, and eigvalsh's gradient stays finite even where
    they repeat; the root S2^{1/2} needs eigenvectors (eigh), whose gradient needs distinct eigenvalues of S2."""
    r2 = _sqrtm_psd(S2)
    M = r2 @ S1 @ r2
    if not bool(torch.isfinite(M.detach()).all()):  # eigvalsh would fail or give NaN, which _sqrt0 reads as 0
        raise ValueError(f"the covariances are too large for {str(M.dtype).replace('torch.', '')}: "
                         "S_2^{1/2} S_1 S_2^{1/2} overflows (its entries are about the squares of theirs); "
                         "scale the covariances down or use float64")
    lam = torch.linalg.eigvalsh((M + M.mT) / 2)
    tr = torch.diagonal(S1, dim1=-2, dim2=-1).sum(-1) + torch.diagonal(S2, dim1=-2, dim2=-1).sum(-1)
    return (tr - 2 * _sqrt0(lam).sum(-1)).clamp(min=0)


def _finite(W: torch.Tensor) -> torch.Tensor:
    """W itself, or a ValueError if the squares in W2^2 overflowed the dtype (NaN or inf, never passed on)."""
    if not bool(torch.isfinite(W.detach()).all()):
        raise ValueError(f"W2^2 overflows {str(W.dtype).replace('torch.', '')}: the means or standard deviations "
                         "are too large to square; scale them down or use float64")
    return W


def _prepare(m1, S1, m2, S2, sides, batch_dims: int):
    """Validated, broadcast-checked inputs of one dtype; batch_dims = 1 (w2_squared) or 2 (pairwise: tokens)."""
    m1, S1, diag1 = _check_gaussian(m1, S1, sides[0])
    m2, S2, diag2 = _check_gaussian(m2, S2, sides[1])
    if m1.shape[-1] != m2.shape[-1]:
        raise ValueError(f"the Gaussians live in different dimensions: d = {m1.shape[-1]} and d = {m2.shape[-1]}")
    try:
        torch.broadcast_shapes(m1.shape[:-batch_dims], m2.shape[:-batch_dims])
    except RuntimeError:
        a, b = (tuple(x.shape[:-batch_dims]) for x in (m1, m2))
        raise ValueError(f"the leading (batch) shapes {a} of the {_side(sides[0])} means and {b} of the "
                         f"{_side(sides[1])} means do not broadcast") from None
    m1, S1, m2, S2 = _common(m1, S1, m2, S2)
    if diag1 != diag2:  # one side diagonal, the other full: compare as full matrices
        S1 = torch.diag_embed(S1) if diag1 else S1
        S2 = torch.diag_embed(S2) if diag2 else S2
    return m1, S1, m2, S2, diag1 and diag2


def w2_squared_parts(m1, S1, m2, S2) -> W2Parts:
    """W2^2 between N(m1, S1) and N(m2, S2), split into its mean part ||m1 - m2||^2 and its covariance (Bures) part
    tr(S1 + S2 - 2 (S2^{1/2} S1 S2^{1/2})^{1/2}): the Bures-Wasserstein closed form of the module docstring (004,
    Sec. 4.2, typo corrected). Diagonal variances give the covariance part ||sigma1 - sigma2||^2 with
    sigma = sqrt(variances).

    m1, m2: (..., d); S1, S2: variances (..., d) or covariance matrices (..., d, d) (see the module docstring); the
    two Gaussians broadcast over leading dims. Returns W2Parts with tensors of the broadcast leading shape.

    Example: the mean part is the squared distance of the means; equal covariances leave no covariance part.

    >>> import torch
    >>> from wviz.gaussian import w2_squared_parts
    >>> m1, m2 = torch.tensor([0.0, 0.0]), torch.tensor([3.0, 4.0])
    >>> parts = w2_squared_parts(m1, torch.tensor([1.0, 1.0]), m2, torch.tensor([4.0, 9.0]))
    >>> round(float(parts.mean), 4), round(float(parts.covariance), 4), round(float(parts.total), 4)
    (25.0, 5.0, 30.0)
    >>> float(w2_squared_parts(m1, torch.eye(2), m2, torch.eye(2)).covariance)
    0.0
    """
    m1, S1, m2, S2, diagonal = _prepare(m1, S1, m2, S2, ("1", "2"), 1)
    mean = ((m1 - m2) ** 2).sum(-1)
    cov = ((_sqrt0(S1) - _sqrt0(S2)) ** 2).sum(-1) if diagonal else _bures_full(S1, S2)
    mean, cov = torch.broadcast_tensors(_finite(mean), _finite(cov))
    return W2Parts(mean, cov)


def w2_squared(m1, S1, m2, S2) -> torch.Tensor:
    """W2^2(N(m1, S1), N(m2, S2)) = ||m1 - m2||^2 + tr(S1 + S2 - 2 (S2^{1/2} S1 S2^{1/2})^{1/2}), the
    Bures-Wasserstein closed form (004, Sec. 4.2); for variances ||m1 - m2||^2 + ||sigma1 - sigma2||^2.

    m1, m2: (..., d); S1, S2: variances (..., d) or matrices (..., d, d); broadcast over leading dims; returns the
    squared distance (...), never NaN. This is W2 squared: POT's ot.gaussian.bures_wasserstein_distance returns W2.

    Example: for diagonal Gaussians W2^2 = ||m1 - m2||^2 + ||s1 - s2||^2 (s the standard deviations), given as
    variances or as full matrices.

    >>> import torch
    >>> from wviz.gaussian import w2_squared
    >>> m1, s1 = torch.tensor([0.0, 0.0]), torch.tensor([1.0, 1.0])
    >>> m2, s2 = torch.tensor([3.0, 4.0]), torch.tensor([2.0, 3.0])
    >>> round(float(w2_squared(m1, s1 ** 2, m2, s2 ** 2)), 4)
    30.0
    >>> round(float(((m1 - m2) ** 2).sum() + ((s1 - s2) ** 2).sum()), 4)
    30.0
    >>> round(float(w2_squared(m1, torch.diag(s1 ** 2), m2, torch.diag(s2 ** 2))), 4)
    30.0
    """
    return w2_squared_parts(m1, S1, m2, S2).total


def _pairwise(mq, Sq, mk, Sk, diagonal: bool) -> W2Parts:
    """Both parts for every (query i, key j) pair; validated inputs of one dtype."""
    mean = _sqdist_fits(mq, mk)
    if diagonal:  # ||sigma_i - sigma_j||^2 is a squared Euclidean distance between the std vectors
        return W2Parts(mean, _sqdist_fits(_sqrt0(Sq), _sqrt0(Sk)))
    cov = _bures_full(Sq.unsqueeze(-3), Sk.unsqueeze(-4))  # (..., n, 1, d, d) x (..., 1, m, d, d) -> all pairs
    return W2Parts(mean, _finite(cov))


def _check_pairwise(mq, Sq, mk, Sk):
    for x, side in ((mq, "query"), (mk, "key")):
        if isinstance(x, torch.Tensor) and x.dim() < 2:
            raise ValueError(f"the {side} means need shape (..., n, d) (one row per token), got {tuple(x.shape)}")
    return _prepare(mq, Sq, mk, Sk, ("query", "key"), 2)


def pairwise_w2_parts(mq, Sq, mk, Sk) -> W2Parts:
    """Mean part ||m_i - m_j||^2 and covariance part of W2^2 (Bures-Wasserstein closed form, 004) for every query i
    and key j: W2Parts with tensors (..., n, m). Shapes as in pairwise_w2_squared.

    Example: three tokens with one mean and growing spreads differ only in the covariance part.

    >>> import torch
    >>> from wviz.gaussian import pairwise_w2_parts
    >>> m = torch.zeros(3, 2)
    >>> var = torch.tensor([[1.0, 1.0], [4.0, 4.0], [9.0, 9.0]])
    >>> parts = pairwise_w2_parts(m, var, m, var)
    >>> float(parts.mean.abs().max())
    0.0
    >>> [[round(x, 4) for x in row] for row in parts.covariance.tolist()]
    [[0.0, 2.0, 8.0], [2.0, 0.0, 2.0], [8.0, 2.0, 0.0]]
    """
    return _pairwise(*_check_pairwise(mq, Sq, mk, Sk))


def pairwise_w2_squared(mq, Sq, mk, Sk) -> torch.Tensor:
    """W2^2(N(mq_i, Sq_i), N(mk_j, Sk_j)) for every query i and key j: the distances behind 004's attention
    A = softmax(-W2^2(Q, K) / tau), with W2^2 the Bures-Wasserstein closed form (module docstring).

    mq (..., n, d), mk (..., m, d); Sq, Sk variances of the same shapes or matrices (..., n, d, d), (..., m, d, d);
    returns (..., n, m). Variances: ||m_i - m_j||^2 + ||sigma_i - sigma_j||^2, computed as one squared-distance
    matrix of the concatenated vectors [m, sigma] by a matrix product: each entry within (2d + 2) eps
    (||[m_i, sigma_i]||^2 + ||[m_j, sigma_j]||^2) of the exact value (cancellation; the entries that small are
    recomputed from differences, so an identical query and key give exactly 0). Matrices: the symmetric root
    S_j^{1/2} of every key, then the eigenvalues of S_j^{1/2} S_i S_j^{1/2} for all n * m pairs in one batched
    call (memory n m d^2). Inputs too large to square in their dtype raise a ValueError (never inf or NaN).

    Example: with equal covariances W2^2 is the squared distance of the means; a token is at distance 0 from itself.

    >>> import torch
    >>> from wviz.gaussian import pairwise_w2_squared
    >>> m = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    >>> var = torch.ones(3, 2)
    >>> W = pairwise_w2_squared(m, var, m, var)
    >>> tuple(W.shape)
    (3, 3)
    >>> [[round(x, 4) for x in row] for row in W.tolist()]
    [[0.0, 1.0, 4.0], [1.0, 0.0, 5.0], [4.0, 5.0, 0.0]]
    """
    m1, S1, m2, S2, diagonal = _check_pairwise(mq, Sq, mk, Sk)
    if diagonal:  # one matrix product over [m, sigma]: the mean and covariance parts of W2^2 at once
        return _sqdist_fits(torch.cat([m1, _sqrt0(S1)], -1), torch.cat([m2, _sqrt0(S2)], -1))
    return _pairwise(m1, S1, m2, S2, False).total


def w2_attention(mq, Sq, mk, Sk, tau: float = 1.0) -> torch.Tensor:
    """W2 attention of 004 (Sec. 4.2): A_ij = softmax_j(-W2^2(N(mq_i, Sq_i), N(mk_j, Sk_j)) / tau), shape (..., n, m).

    Shapes as in pairwise_w2_squared; tau > 0 is the temperature (wviz.attention.softmax checks it). Close, similar
    Gaussians get large weights: the score is minus a distance, not a dot product.

    Example: keys with the query's mean but a wider spread get less weight: the attention sees uncertainty.

    >>> import torch
    >>> from wviz.gaussian import w2_attention
    >>> query_mean, query_var = torch.zeros(1, 2), torch.ones(1, 2)
    >>> key_means, key_vars = torch.zeros(3, 2), torch.tensor([[1.0, 1.0], [4.0, 4.0], [9.0, 9.0]])
    >>> A = w2_attention(query_mean, query_var, key_means, key_vars)
    >>> [round(x, 4) for x in A[0].tolist()]
    [0.8805, 0.1192, 0.0003]
    >>> round(float(A.sum()), 4)
    1.0
    """
    W = pairwise_w2_squared(mq, Sq, mk, Sk)
    return attention.softmax(-W, tau=tau)


# -------------------------------------------------------------------------------------------- 2-D helpers (page)

def gaussian_from_params(mean_xy, sigma_x, sigma_y, rho) -> torch.Tensor:
    """The 2-D covariance [[sigma_x^2, rho sigma_x sigma_y], [rho sigma_x sigma_y, sigma_y^2]] of each token:
    (..., 2, 2).

    mean_xy (..., 2) fixes the leading shape, dtype and device; sigma_x, sigma_y >= 0 (standard deviations) and
    rho in [-1, 1] (correlation) are numbers or tensors broadcasting to mean_xy.shape[:-1]. |rho| = 1 or a zero
    sigma gives a degenerate (rank-deficient) Gaussian, which is allowed.

    Example: standard deviations 2 and 1 with correlation 0.5 give the covariance [[4, 1], [1, 1]].

    >>> import torch
    >>> from wviz.gaussian import gaussian_from_params
    >>> S = gaussian_from_params(torch.zeros(2), sigma_x=2.0, sigma_y=1.0, rho=0.5)
    >>> S.tolist()
    [[4.0, 1.0], [1.0, 1.0]]
    """
    _check_float(mean_xy, "mean_xy")
    if mean_xy.dim() == 0 or mean_xy.shape[-1] != 2:
        raise ValueError(f"mean_xy must have shape (..., 2), got {tuple(mean_xy.shape)}")
    lead = mean_xy.shape[:-1]
    vals = {}
    for name, v in (("sigma_x", sigma_x), ("sigma_y", sigma_y), ("rho", rho)):
        given = torch.as_tensor(v, dtype=mean_xy.dtype, device=mean_xy.device)
        t: torch.Tensor | None
        try:
            t = given.expand(lead) if given.dim() <= len(lead) else None
        except RuntimeError:
            t = None
        if t is None:
            raise ValueError(f"{name} of shape {tuple(torch.as_tensor(v).shape)} does not match the "
                             f"{tuple(lead)} tokens of mean_xy")
        td = t.detach()
        bad = ~torch.isfinite(td)
        if bool(bad.any()):
            raise ValueError(f"{name} of {_where(lead, first(bad)) or 'the token'} is NaN or inf")
        bad = (td < 0) if name != "rho" else (td.abs() > 1)
        if bool(bad.any()):
            i = first(bad)
            what = "a standard deviation must be >= 0" if name != "rho" else "a correlation must lie in [-1, 1]"
            raise ValueError(f"{name} of {_where(lead, i) or 'the token'} is {float(td.reshape(-1)[i]):.3g}; {what}")
        vals[name] = t
    sx, sy, r = vals["sigma_x"], vals["sigma_y"], vals["rho"]
    off = r * sx * sy
    return torch.stack([torch.stack([sx * sx, off], -1), torch.stack([off, sy * sy], -1)], -2)


def ellipse(mean, cov, n_sigma: float = 1.0, n_points: int = 100) -> torch.Tensor:
    """Points of the n-sigma ellipse {m + n_sigma S^{1/2} u : ||u|| = 1} of N(m, S) in 2-D, for drawing.

    mean (..., 2), cov (..., 2, 2) or variances (..., 2); returns (..., n_points, 2), the first point repeated
    as the last so that a line through them closes. A degenerate covariance gives a segment (or a point).

    Example: the 1-sigma ellipse of N(0, diag(4, 1)) reaches 2 along x and 1 along y, and closes on itself.

    >>> import torch
    >>> from wviz.gaussian import ellipse
    >>> pts = ellipse(torch.zeros(2), torch.tensor([4.0, 1.0]), n_points=5)
    >>> tuple(pts.shape)
    (5, 2)
    >>> [round(float(r), 4) for r in pts.norm(dim=-1)]
    [2.0, 1.0, 2.0, 1.0, 2.0]
    >>> torch.allclose(pts[0], pts[-1], atol=1e-6)
    True
    """
    m, S, diagonal = _check_gaussian(mean, cov, "")
    if m.shape[-1] != 2:
        raise ValueError(f"ellipses are drawn in 2-D; the mean has d = {m.shape[-1]}")
    ns = positive(n_sigma, "n_sigma")
    if not (isinstance(n_points, int) and n_points >= 3):
        raise ValueError(f"n_points must be an integer >= 3, got {n_points!r}")
    root = torch.diag_embed(_sqrt0(S)) if diagonal else _sqrtm_psd(S)
    t = torch.linspace(0, 2 * math.pi, n_points, dtype=m.dtype, device=m.device)
    circle = torch.stack([t.cos(), t.sin()], -1)  # (n_points, 2)
    return m.unsqueeze(-2) + ns * circle @ root.mT
