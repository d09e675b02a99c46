"""How much attention contracts or expands W1 (003 Def. 22): the coefficient on a pair of measures, its estimate
over perturbations of a token set, and the local ratio."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from wviz._checks import positive, renamed

from .flow import _self_attention, attention_step
from .measures import _measure, _points, _potential, _projections, PERTURBATIONS
from .wasserstein import w1


@dataclass(frozen=True, eq=False)
class PairContraction:
    """One pair (mu, nu) through one attention layer: w1_in = W1(mu, nu), w1_out = W1(mu A_mu, nu A_nu) (0-d)."""

    w1_in: torch.Tensor
    w1_out: torch.Tensor

    @property
    def ratio(self) -> torch.Tensor:
        """w1_out / w1_in, the quantity whose supremum is kappa(A) (Def. 22)."""
        return self.w1_out / self.w1_in


@dataclass(frozen=True, eq=False)
class Contraction:
    """Sampled pairs (mu_s, nu_s) through one attention layer: w1_in = W1(mu, nu), w1_out = W1(mu A_mu, nu A_nu),
    ratio = w1_out / w1_in (S,); lo, hi (d,) a box E containing every input point (for the bounds)."""

    w1_in: torch.Tensor
    w1_out: torch.Tensor
    ratio: torch.Tensor
    lo: torch.Tensor
    hi: torch.Tensor


@renamed(weights="projections")
def contraction(mu, nu, potential: str = "dot", tau: float = 1.0, projections=None,
                ground: str = "l1") -> PairContraction:
    """W1(mu, nu) and W1(mu A_mu, nu A_nu) for one attention layer (Def. 22 without the supremum).

    Example: translating the tokens translates their attention outputs (ratio 1); spreading them by 10 % spreads
    the outputs by more (ratio > 1: this layer does not contract).

    >>> import torch
    >>> from wviz.measure import contraction
    >>> x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=torch.float64)   # a unit square
    >>> round(float(contraction(x, x + torch.tensor([0.1, 0.0], dtype=torch.float64), "gaussian").ratio), 4)
    1.0
    >>> pair = contraction(x, 1.1 * x, "gaussian")
    >>> round(float(pair.w1_in), 4), round(float(pair.w1_out), 4), round(float(pair.ratio), 4)
    (0.1, 0.1325, 1.3254)
    """
    mu, nu = _measure(mu), _measure(nu)
    out_mu = attention_step(mu, potential, tau, projections)
    out_nu = attention_step(nu, potential, tau, projections)
    return PairContraction(w1(mu, nu, ground), w1(out_mu, out_nu, ground))


def _perturbed_pairs(x, perturbation, n_samples, sigma, k, g):
    """S pairs of point sets (X_s, Y_s): noise (Y = X + sigma N(0, I)), drop (Y = X without one token) or swap
    (Prop. 25's neighbourhoods: X_s the k nearest neighbours of a token t, Y_s t and k - 1 tokens sampled at
    random). The loop runs over samples; each pair is built with index tensors."""
    N = x.shape[0]
    pairs = []
    for _ in range(n_samples):
        if perturbation == "noise":
            pairs.append((x, x + sigma * torch.randn(x.shape, generator=g, dtype=x.dtype).to(x.device)))
        elif perturbation == "drop":
            t = int(torch.randint(N, (1,), generator=g))
            pairs.append((x, torch.cat([x[:t], x[t + 1:]])))
        else:
            t = int(torch.randint(N, (1,), generator=g))
            near = torch.cdist(x[t:t + 1], x, p=1.0)[0].argsort()[:k]          # t itself first (distance 0)
            pick = torch.randperm(N - 1, generator=g)[:k - 1]                    # k - 1 of the N - 1 other tokens:
            sampled = (pick + (pick >= t)).to(x.device)                          # index j >= t stands for j + 1
            pairs.append((x[near], torch.cat([x[t:t + 1], x[sampled]])))
    return pairs


@renamed(weights="projections")
def contraction_ratio(x, perturbation: str = "noise", n_samples: int = 16, potential: str = "dot",
                      tau: float = 1.0, projections=None, ground: str = "l1", sigma: float = 0.1,
                      k: int | None = None, seed: int = 0) -> Contraction:
    """The empirical ratio W1(mu A_mu, nu A_nu) / W1(mu, nu) of Def. 22 over sampled pairs around mu = m(X):

    "noise"  nu = m(X + sigma Z), Z standard normal
    "drop"   nu = m(X without one token) (N - 1 atoms: W1 handles unequal sizes, as Thm. 29 does)
    "swap"   Prop. 25's neighbourhoods: mu = m(X_{N(t)}) with N(t) the k nearest tokens of t (l1), nu =
             m(X_{N^(t)}) with N^(t) t and k - 1 tokens sampled at random (default k = ceil(N / 2)). The ratio is
             still the whole-measure one, W1(mu A_mu, nu A_nu) / W1(mu, nu) over all k tokens, not Prop. 25's
             single-query quantity ||Attention(x_t, X_N(t)) - Attention(x_t, X_N^(t))|| / W1(mu, nu), whose bound
             (Thm. 23's constant with ||G(x_t, .)||_Lip) is not computed here.

    Pairs with W1(mu, nu) = 0 (a swap that happened to pick the neighbourhood itself) are left out.

    Example: four noisy copies of the square, one ratio each (seeded, so the same every time).

    >>> import torch
    >>> from wviz.measure import contraction_ratio
    >>> x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=torch.float64)   # a unit square
    >>> c = contraction_ratio(x, "noise", n_samples=4, potential="gaussian", seed=0)
    >>> [round(float(r), 4) for r in c.ratio]
    [0.6789, 0.9677, 0.9387, 0.7722]
    """
    x = _points(x, "the particles")
    if x.ndim != 2:
        raise ValueError(f"contraction_ratio takes one point cloud (N, d), got shape {tuple(x.shape)}")
    if perturbation not in PERTURBATIONS:
        raise ValueError(f"unknown perturbation {perturbation!r}; choose from {', '.join(PERTURBATIONS)}")
    if not (isinstance(n_samples, int) and n_samples >= 1):
        raise ValueError(f"n_samples must be a positive integer, got {n_samples!r}")
    N = x.shape[0]
    if perturbation in ("drop", "swap") and N < 3:
        raise ValueError(f"the {perturbation} perturbation needs at least 3 tokens, got {N}")
    if perturbation == "noise" and not (math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be a positive number, got {sigma:g}")
    k = math.ceil(N / 2) if k is None else int(k)
    if perturbation == "swap" and not 2 <= k < N:
        raise ValueError(f"the neighbourhood size k must be between 2 and N - 1 = {N - 1}, got {k}")
    g = torch.Generator().manual_seed(int(seed))
    rows = []
    pts = [x]
    for X, Y in _perturbed_pairs(x, perturbation, n_samples, sigma, k, g):
        pair = contraction(X, Y, potential, tau, projections, ground)
        if float(pair.w1_in) > 0:
            rows.append((pair.w1_in, pair.w1_out))
            pts.append(Y)
    if not rows:
        raise ValueError("every sampled perturbation left the measure unchanged; use more samples")
    w_in, w_out = (torch.stack(c) for c in zip(*rows))
    allpts = torch.cat(pts)
    return Contraction(w_in, w_out, w_out / w_in, allpts.amin(0), allpts.amax(0))


@renamed(weights="projections")
def local_contraction(x, potential: str = "dot", tau: float = 1.0, projections=None) -> float:
    """The ratio W1(mu A_mu, nu A_nu) / W1(mu, nu) (l1 ground) for the worst infinitesimal move of the atoms of
    mu = m(X): ||J||_{1 -> 1}, the largest l1 norm of a column of the Jacobian J of X -> (Attention(x_i))_i
    (N d x N d). For small moves both optimal couplings keep the token order, so W1 is (1/N) times the l1 norm
    of the moves; the supremum of this number over X is the contraction coefficient kappa(A) of Def. 22 restricted
    to N-point empirical measures, which Thm. 23 and Cor. 30 bound from above.

    Example: a lone token moves exactly as it is moved (1); on the square the worst small move is amplified.

    >>> import torch
    >>> from wviz.measure import local_contraction
    >>> x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=torch.float64)   # a unit square
    >>> local_contraction(x[:1], "gaussian")
    1.0
    >>> round(local_contraction(x, "gaussian"), 4)
    1.4601
    """
    x = _points(x, "the particles")
    if x.ndim != 2:
        raise ValueError(f"local_contraction takes one point cloud (N, d), got shape {tuple(x.shape)}")
    N, d = x.shape
    potential, tau = _potential(potential), positive(tau, "tau")
    W = _projections(projections, d, x.dtype, x.device)
    log_w = torch.full((N,), -math.log(N), dtype=x.dtype, device=x.device)

    def f(flat):
        return _self_attention(flat.reshape(N, d), log_w, potential, tau, *W).reshape(-1)

    J = torch.func.jacrev(f)(x.detach().reshape(-1))
    return float(J.abs().sum(0).max())
