"""Measure-theoretic attention: "A Mathematical Theory of Attention" (Vuckovic, Baratin & Tachet des Combes 2020,
arXiv 2007.02876: 003 on the References page, "the paper" below). Tokens are particles, a set of tokens is the
empirical measure m(X) = (1/N) sum_t delta_{x_t}, and self-attention is the nonlinear Markov transport
mu -> mu A_mu.

The pieces, in the paper's notation (E a subset of R^d, G an interaction potential, tau its temperature):

    Def. 3   Boltzmann-Gibbs transformation   Psi_g(nu)(dx) = g(x) nu(dx) / nu(g)
    Def. 4   softmatch kernel                  x -> Psi_{G(x, .)}(mu)
    Def. 5   lookup kernel                     L(k, dv) = delta_{l(k)}(dv), here l(k) = k W_V (or a value table)
    eq. (2)  moment projection onto Diracs     Pi(mu) = delta_{mu(F)}, F(x) = x: the mean
    Def. 8   attention kernel                  A_mu(x, dz) = Pi[Psi_{G(x, .)}(mu) L](dz)
    Prop. 9  delta_q A_{m(K)} = delta_{Attention(q, K, V)}: the usual softmax(a(q, K)) V

Interaction potentials G(x, y) = exp(a(x, y)) (row vectors, q = x W_Q, k = y W_K; identities when not given):
the keyword ``projections`` is the triple (W_Q, W_K, W_V), while ``weights`` are always the masses of a measure.

    "dot"       G(x, y) = exp(<x W_Q, y W_K> / tau)          (scaled dot product: tau = sqrt(d) in a Transformer)
    "gaussian"  G(x, y) = exp(-||x W_Q - y W_K||^2 / tau)    (the potential of Sec. 6.3, there with tau = 1)

W1 is the 1-Wasserstein distance with the paper's l1 ground metric ||x - y||_1 (Sec. 4), by exact OT (POT).

kappa(A) below is the contraction coefficient of Def. 22, sup W1(mu A_mu, nu A_nu) / W1(mu, nu), which the paper
writes tau(A) (likewise kappa(Pi), kappa(Psi_G), kappa(L), kappa(T)); here tau is only the temperature of G. The
contraction estimates: Thm. 23 (compact E), Cor. 30 / Thm. 29 (Gaussian potential on R^d), the fixed point of the
weight-shared recurrence (Prop. 26, Sec. 6.2) and the maximum-entropy property of Psi_G (Thm. 14).

What checking the constants against the text found (tests/test_measure.py shows each):

- Thm. 23 as printed is false: the second inequality of Prop. 19 misses a term ||G||_inf / eps(G) (see
  :func:`thm23_bound`); the corrected bound is the default here, the printed one (printed=True) is kept for comparison.
- Cor. 30 (with Prop. 28 and Thm. 29) is false for large N: Prop. 28's proof rescales m(X) to sum_i delta_{x_i}
  (mass N) and then applies the Kantorovich-Rubinstein bound |mu(h) - nu(h)| <= Lip(h) W1(mu, nu), which holds
  for probability measures only. A token between two clusters of (N - 1) / 2 tokens has a ratio ~ 2 ln N, above
  the bound's O(sqrt(ln N)) from N ~ 3 10^4 on in d = 1 (see :func:`cor30_bound` and :func:`cor30_failure`).
- Misprints: KL(mu || nu) is int log(dmu/dnu) dmu (Sec. 4 writes dnu, under which Thm. 14 would have no
  maximiser); the bracket in Thm. 29's proof reads sqrt(ln N + 1/(2e)) as in Prop. 28 and Cor. 30.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from wviz import ot
from wviz._checks import positive, renamed

__all__ = ["Measure", "POTENTIALS", "GROUNDS", "PERTURBATIONS", "empirical", "boltzmann_gibbs", "log_potential",
           "softmatch", "moment_projection", "attention_kernel", "attention_step", "self_attention_flow", "w1",
           "PairContraction", "Contraction", "contraction", "contraction_ratio", "local_contraction",
           "Thm23Constants", "thm23_constants", "thm23_bound", "cor30_bound", "Cor30Failure", "cor30_failure",
           "FixedPoint", "fixed_point", "relative_entropy", "MaxEntropyCheck", "max_entropy_check"]

POTENTIALS = ("dot", "gaussian")
GROUNDS = ("l1", "l2")
PERTURBATIONS = ("noise", "drop", "swap")


# ----------------------------------------------------------------------------------------------- measures

@dataclass(frozen=True, eq=False)
class Measure:
    """A discrete probability measure sum_j w_j delta_{x_j}: points (..., N, d), weights (..., N) summing to 1."""

    points: torch.Tensor
    weights: torch.Tensor

    @property
    def n(self) -> int:
        return self.points.shape[-2]

    @property
    def d(self) -> int:
        return self.points.shape[-1]


def _points(x, name: str = "the points") -> torch.Tensor:
    """x as a floating tensor (..., N, d) with N, d >= 1 and finite entries."""
    x = torch.as_tensor(x)
    if not x.dtype.is_floating_point:
        x = x.to(torch.float64)
    if x.ndim < 2:
        raise ValueError(f"{name} must be an array of shape (N, d), got shape {tuple(x.shape)}")
    if x.shape[-2] == 0:
        raise ValueError(f"{name} form an empty measure: give at least one point")
    if x.shape[-1] == 0:
        raise ValueError(f"{name} have no coordinates (d = 0)")
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        i = bad.nonzero()[0].tolist()
        raise ValueError(f"{name} contain NaN or inf: point {i[-2]}, coordinate {i[-1]}")
    return x


def empirical(points, weights=None) -> Measure:
    """The empirical measure m(X) = (1/N) sum_t delta_{x_t} (Sec. 3.1), or sum_t w_t delta_{x_t} with the given
    non-negative weights (normalised to total 1).

    Example: m(X) puts mass 1/N on each token; given weights are normalised.

    >>> from wviz.measure import empirical
    >>> empirical([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]).weights.tolist()
    [0.25, 0.25, 0.25, 0.25]
    >>> empirical([[0.0], [1.0]], weights=[1.0, 3.0]).weights.tolist()
    [0.25, 0.75]
    """
    x = _points(points)
    if weights is None:
        w = torch.full(x.shape[:-1], 1.0 / x.shape[-2], dtype=x.dtype, device=x.device)
        return Measure(x, w)
    w = torch.as_tensor(weights, dtype=x.dtype, device=x.device)
    if w.shape != x.shape[:-1]:
        raise ValueError(f"give one weight per point: {x.shape[-2]} points but weights of shape {tuple(w.shape)}")
    if not bool(torch.isfinite(w).all()):
        raise ValueError("the weights contain NaN or inf")
    if bool((w < 0).any()):
        raise ValueError(f"weights must be non-negative, got {w.min().item():.4g}")
    total = w.sum(-1, keepdim=True)
    if bool((total <= 0).any()):
        raise ValueError("the weights sum to zero: give at least one point a positive weight")
    return Measure(x, w / total)


def _measure(m) -> Measure:
    return m if isinstance(m, Measure) else empirical(m)


def _potential(potential: str) -> str:
    if potential not in POTENTIALS:
        raise ValueError(f"unknown potential {potential!r}; choose from {', '.join(POTENTIALS)}")
    return potential


def boltzmann_gibbs(nu: Measure, g) -> Measure:
    """Def. 3: Psi_g(nu)(dx) = g(x) nu(dx) / nu(g) for a positive function g, given by its values g(x_j) (..., N)
    at the atoms of nu (a leading batch of g gives a batch of measures on the same atoms).

    Example: reweighting two equal atoms by g = (1, 3) gives masses 1/4 and 3/4 on the same atoms.

    >>> from wviz.measure import boltzmann_gibbs, empirical
    >>> nu = empirical([[0.0], [1.0]])
    >>> boltzmann_gibbs(nu, [1.0, 3.0]).weights.tolist()
    [0.25, 0.75]
    """
    g = torch.as_tensor(g, dtype=nu.weights.dtype, device=nu.weights.device)
    if g.shape[-1:] != nu.weights.shape[-1:]:
        raise ValueError(f"g needs one value per atom of nu ({nu.n}), got shape {tuple(g.shape)}")
    if not bool((torch.isfinite(g) & (g > 0)).all()):
        raise ValueError("g must be positive and finite at every atom (Def. 3 asks for g: E -> R_>0 bounded)")
    gw = g * nu.weights
    return Measure(nu.points.expand(*gw.shape, nu.d), gw / gw.sum(-1, keepdim=True))


def _projections(projections, d: int, dtype, device):
    """(W_Q, W_K, W_V) as tensors; None means identities."""
    if projections is None:
        eye = torch.eye(d, dtype=dtype, device=device)
        return eye, eye, eye
    try:
        W_Q, W_K, W_V = projections
    except (TypeError, ValueError):
        raise ValueError("projections must be a triple (W_Q, W_K, W_V) of matrices, or None for identities") from None
    out = []
    for name, W in (("W_Q", W_Q), ("W_K", W_K), ("W_V", W_V)):
        W = torch.as_tensor(W, dtype=dtype, device=device)
        if W.ndim != 2 or W.shape[0] != d:
            raise ValueError(f"{name} must be a matrix with d = {d} rows (x {name} maps a token), got shape "
                             f"{tuple(W.shape)}")
        if not bool(torch.isfinite(W).all()):
            raise ValueError(f"{name} contains NaN or inf")
        out.append(W)
    if out[0].shape[1] != out[1].shape[1]:
        raise ValueError(f"W_Q and W_K must map to the same dimension, got {out[0].shape[1]} and {out[1].shape[1]}")
    return tuple(out)


# ----------------------------------------------------------------------------------------------- attention kernel

def _scores(q, k, potential, tau):
    """a(q_i, k_j) without input checks (differentiable, vmap-safe)."""
    if potential == "dot":
        return q @ k.transpose(-1, -2) / tau
    # ||q||^2 + ||k||^2 - 2 <q, k>: one matrix product and differentiable (ot.cost_matrix takes no gradients)
    sq = (q * q).sum(-1).unsqueeze(-1) + (k * k).sum(-1).unsqueeze(-2) - 2 * q @ k.transpose(-1, -2)
    return -sq.clamp_min(0) / tau


def log_potential(x, y, potential: str = "dot", tau: float = 1.0, W_Q=None, W_K=None) -> torch.Tensor:
    """a(x_i, y_j) = log G(x_i, y_j) (..., M, N) for queries x (..., M, d) and keys y (..., N, d): <q, k> / tau
    ("dot") or -||q - k||^2 / tau ("gaussian") with q = x W_Q, k = y W_K.

    Example: the dot-product score <x, y> and the Gaussian score -||x - y||^2 of one query against two keys.

    >>> from wviz.measure import log_potential
    >>> x, y = [[1.0, 0.0]], [[2.0, 1.0], [0.0, 3.0]]
    >>> log_potential(x, y).tolist(), log_potential(x, y, "gaussian").tolist()
    ([[2.0, 0.0]], [[-2.0, -10.0]])
    """
    x, y = _points(x, "the queries"), _points(y, "the keys")
    potential, tau = _potential(potential), positive(tau, "tau")
    return _scores(x if W_Q is None else x @ W_Q, y if W_K is None else y @ W_K, potential, tau)


def softmatch(x, mu: Measure, potential: str = "dot", tau: float = 1.0, W_Q=None, W_K=None) -> torch.Tensor:
    """Def. 4: row i is the Boltzmann-Gibbs measure Psi_{G(x_i, .)}(mu) as weights (..., M, N) on the atoms of mu,
    w_j G(x_i, y_j) / sum_k w_k G(x_i, y_k), computed in the log domain (no overflow of exp(a)).

    Example: on the uniform measure m(K) the softmatch weights are softmax(<x, k_j> / tau).

    >>> import torch
    >>> from wviz.measure import empirical, softmatch
    >>> g = torch.Generator().manual_seed(0)
    >>> x, K = torch.randn(3, 4, generator=g), torch.randn(5, 4, generator=g)
    >>> P = softmatch(x, empirical(K), tau=2.0)
    >>> tuple(P.shape), torch.allclose(P, torch.softmax(x @ K.T / 2.0, dim=-1))
    ((3, 5), True)
    """
    a = log_potential(x, mu.points, potential, tau, W_Q, W_K)
    return torch.softmax(a + mu.weights.log().unsqueeze(-2), dim=-1)


def moment_projection(P: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """eq. (2) with F(x) = x onto the Diracs: Pi(sum_j P_ij delta_{v_j}) = delta_{sum_j P_ij v_j}; returns the
    Dirac locations (..., M, d_v).

    Example: the mean of the measure 1/2 delta_(0, 0) + 1/2 delta_(2, 4) is the Dirac at (1, 2).

    >>> import torch
    >>> from wviz.measure import moment_projection
    >>> moment_projection(torch.tensor([[0.5, 0.5]]), torch.tensor([[0.0, 0.0], [2.0, 4.0]])).tolist()
    [[1.0, 2.0]]
    """
    return P @ values


def attention_kernel(x, mu: Measure, potential: str = "dot", tau: float = 1.0, W_Q=None, W_K=None,
                     values=None) -> torch.Tensor:
    """Def. 8: delta_{x_i} A_mu = Pi[Psi_{G(x_i, .)}(mu) L] for each query x_i; returns the Dirac locations
    (..., M, d_v). The lookup L maps atom j of mu to ``values[j]`` (default: the atom itself, l = identity);
    Prop. 9: this is Attention(x_i, K, V) = sum_j softmax_j(a(x_i, K)) v_j when mu = m(K).

    Example: Prop. 9, the kernel on m(K) with a value lookup is scaled dot-product attention (tau = sqrt(d)).

    >>> import torch
    >>> from wviz.measure import attention_kernel, empirical
    >>> g = torch.Generator().manual_seed(0)
    >>> q, K, V = torch.randn(3, 4, generator=g), torch.randn(5, 4, generator=g), torch.randn(5, 2, generator=g)
    >>> out = attention_kernel(q, empirical(K), tau=2.0, values=V)
    >>> torch.allclose(out, torch.nn.functional.scaled_dot_product_attention(q, K, V), atol=1e-6)
    True
    """
    P = softmatch(x, mu, potential, tau, W_Q, W_K)
    V = mu.points if values is None else torch.as_tensor(values, dtype=P.dtype, device=P.device)
    if V.shape[-2] != mu.n:
        raise ValueError(f"the lookup needs one value per atom of mu ({mu.n}), got {V.shape[-2]}")
    return moment_projection(P, V)


def _self_attention(x, log_w, potential, tau, W_Q, W_K, W_V):
    """Attention(x_i W_Q, X W_K, X W_V) for every atom, without input checks (differentiable, vmap-safe)."""
    P = torch.softmax(_scores(x @ W_Q, x @ W_K, potential, tau) + log_w.unsqueeze(-2), dim=-1)
    return moment_projection(P, x @ W_V)


@renamed(weights="projections")
def attention_step(mu, potential: str = "dot", tau: float = 1.0, projections=None) -> Measure:
    """Self-attention as nonlinear Markov transport mu -> mu A_mu (Sec. 3.1): every atom x_i moves to
    Attention(x_i W_Q, K, V) with K = X W_K, V = X W_V (lookup l(x) = x W_V) and keeps its mass.

    Example: the corners of a unit square move towards each other (Gaussian potential) and keep their masses.

    >>> import torch
    >>> from wviz.measure import attention_step
    >>> x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=torch.float64)   # a unit square
    >>> out = attention_step(x, "gaussian")
    >>> [[round(v, 4) for v in p] for p in out.points.tolist()]
    [[0.2689, 0.2689], [0.7311, 0.2689], [0.2689, 0.7311], [0.7311, 0.7311]]
    >>> out.weights.tolist()
    [0.25, 0.25, 0.25, 0.25]
    """
    mu = _measure(mu)
    potential, tau = _potential(potential), positive(tau, "tau")
    W = _projections(projections, mu.d, mu.points.dtype, mu.points.device)
    return Measure(_self_attention(mu.points, mu.weights.log(), potential, tau, *W), mu.weights)


def _layer(x, potential, tau, projections, residual, norm, layer):
    y = attention_step(empirical(x), potential, tau, projections).points
    if residual:
        y = x + y
    if norm:
        r = y.norm(dim=-1, keepdim=True)
        if bool((r == 0).any()):
            raise ValueError(f"token {int((r == 0).nonzero()[0, -2])} reached the origin at layer {layer}; it cannot "
                             "be normalised onto the unit sphere")
        y = y / r
    if not bool(torch.isfinite(y).all()):
        raise ValueError(f"the particles left the floating-point range at layer {layer} (residual connections "
                         "without normalisation grow exponentially); use fewer layers or turn normalisation on")
    return y


@renamed(weights="projections")
def self_attention_flow(x0, layers: int, potential: str = "dot", tau: float = 1.0, projections=None,
                        shared: bool = True, residual: bool = False, norm: bool = False) -> torch.Tensor:
    """The particle system delta_{x_i^{h+1}} = delta_{x_i^h} A^h_{m(X^h)} over ``layers`` layers (Sec. 3.1,
    "Attention as a System of Interacting Particles"); returns the trajectory (L + 1, ..., N, d), x0 first.

    projections: None (W_Q = W_K = W_V = I); with shared=True one triple (W_Q, W_K, W_V) used by every layer (the
    Universal Transformer of Sec. 6.2); with shared=False a sequence of L triples, one per layer. W_V must be
    d x d so that layers compose. residual: x^{h+1} = x^h + Attention(x^h) (Remark 10); norm: then each token is
    projected onto the unit sphere, x / ||x||_2 (a LayerNorm without centring or gain).

    Example: through three layers the particles cluster: the l1 diameter of the square shrinks to nearly 0.

    >>> import torch
    >>> from wviz.measure import self_attention_flow
    >>> x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=torch.float64)   # a unit square
    >>> X = self_attention_flow(x, layers=3, potential="gaussian")
    >>> tuple(X.shape)
    (4, 4, 2)
    >>> [round(float(torch.cdist(p, p, p=1.0).max()), 4) for p in X]
    [2.0, 0.9242, 0.0983, 0.0001]
    """
    x = _points(x0, "the initial particles")
    if not (isinstance(layers, int) and layers >= 0):
        raise ValueError(f"layers must be a non-negative integer, got {layers!r}")
    if projections is None:
        per_layer = [None] * layers
    elif shared:
        if len(projections) != 3 or any(torch.as_tensor(W).ndim != 2 for W in projections):
            raise ValueError("shared=True takes one triple (W_Q, W_K, W_V) of matrices for every layer")
        per_layer = [projections] * layers
    else:
        per_layer = list(projections)
        if len(per_layer) != layers:
            raise ValueError(f"shared=False needs one (W_Q, W_K, W_V) per layer: {layers} layers but "
                             f"{len(per_layer)} triples")
    d = x.shape[-1]
    for W in per_layer:
        if W is not None and torch.as_tensor(W[2]).shape != (d, d):
            raise ValueError(f"W_V must be d x d ({d} x {d}) so that the layers compose, got "
                             f"{tuple(torch.as_tensor(W[2]).shape)}")
    out = [x]
    for h, W in enumerate(per_layer, 1):
        out.append(_layer(out[-1], potential, tau, W, residual, norm, h))
    return torch.stack(out)


# ----------------------------------------------------------------------------------------------- W1

def _ground(ground: str) -> str:
    if ground not in GROUNDS:
        raise ValueError(f"unknown ground metric {ground!r}; choose from {', '.join(GROUNDS)}")
    return "l1" if ground == "l1" else "euclidean"


def w1(mu, nu, ground: str = "l1") -> torch.Tensor:
    """W1(mu, nu) = min over couplings pi of int ||x - y|| dpi (Sec. 4, the paper's ground metric is l1; "l2" uses
    ||x - y||_2), exactly by POT's network simplex. mu, nu: Measures or point arrays (read as m(X)).

    Example: the W1 distance of two Diracs is the distance of their points (l1 by default, or l2).

    >>> from wviz.measure import w1
    >>> float(w1([[0.0, 0.0]], [[3.0, 4.0]])), float(w1([[0.0, 0.0]], [[3.0, 4.0]], ground="l2"))
    (7.0, 5.0)
    """
    mu, nu = _measure(mu), _measure(nu)
    if mu.d != nu.d:
        raise ValueError(f"the two measures live in different dimensions ({mu.d} and {nu.d})")
    C = ot.cost_matrix(mu.points, nu.points, _ground(ground))
    res = ot.emd(mu.weights, nu.weights.to(C.device), C)
    if not bool(res.converged.all()):
        raise ValueError("exact OT did not reach an optimal plan; use fewer points")
    return res.cost.clamp_min(0)


# ----------------------------------------------------------------------------------------------- contraction

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


# ----------------------------------------------------------------------------------------------- bounds

def thm23_bound(diam: float, lip_first: float, lip_second: float, eps: float, d: int, k_l: float = 1.0,
                sup: float | None = None, *, printed: bool = False) -> float:
    """Thm. 23: kappa(A) <= kappa(Pi) kappa(Psi_G) kappa(L) with kappa(Pi) = d (Prop. 20), kappa(L) = K_l (Prop. 21)
    and

        kappa(Psi_G) = (2 (||G||_{Lip,inf} + ||G||_{inf,Lip}) diam(E) + ||G||_inf) / eps(G)   (corrected, default)
        kappa(Psi_G) =  2 (||G||_{Lip,inf} + ||G||_{inf,Lip}) diam(E) / eps(G)                 (printed=True)

    The printed constant comes from the second inequality of Prop. 19, whose proof bounds
    |int G f d(mu - nu)| by ||f||_inf |int G d(mu - nu)|; a signed measure does not allow that. Bounding it by
    Lip(G f) W1(mu, nu) <= (||G||_inf + ||f||_inf ||G||_{inf,Lip}) W1(mu, nu) adds the ||G||_inf term. Without it
    the bound fails: for the Gaussian potential and l = identity, translating mu by a vector v translates mu A_mu
    by v, a ratio of exactly 1, while the printed bound tends to 0 as tau grows.

    diam      diam(E) in the l1 metric, E compact (and convex) containing every token
    lip_first ||G||_{Lip,inf} = sup_y Lip(G(., y)) on E (l1 metric): how fast the potential changes with the query
    lip_second ||G||_{inf,Lip} = sup_x Lip(G(x, .)) on E: how fast it changes with the key
    eps       eps(G) > 0 with G(x, y) >= eps(G) on E x E
    d         the dimension of E
    k_l       K_l, the l1 Lipschitz constant of the lookup l (||W_V|| for l(x) = x W_V)
    sup       ||G||_inf = sup of G on E x E; needed by the corrected bound, not used when printed=True
    printed   True: the constant as the paper prints it (false in general, kept for comparison)

    Example: the corrected bound adds ||G||_inf / eps(G) times d K_l to the printed one.

    >>> from wviz.measure import thm23_bound
    >>> thm23_bound(diam=2.0, lip_first=1.0, lip_second=1.0, eps=0.5, d=2, sup=1.0)
    36.0
    >>> thm23_bound(diam=2.0, lip_first=1.0, lip_second=1.0, eps=0.5, d=2, printed=True)
    32.0
    """
    for name, v in (("diam", diam), ("lip_first", lip_first), ("lip_second", lip_second), ("k_l", k_l),
                    ("sup", 0.0 if sup is None else sup)):
        if not (math.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a non-negative finite number, got {v:g}")
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"eps(G) must be positive (Thm. 23 assumes G >= eps(G) > 0), got {eps:g}")
    if not (isinstance(d, int) and d >= 1):
        raise ValueError(f"d must be a positive integer, got {d!r}")
    if printed:
        return d * 2 * (lip_first + lip_second) * diam / eps * k_l
    if sup is None:
        raise ValueError("the corrected Thm. 23 bound needs sup = ||G||_inf on E x E; pass printed=True for the "
                         "bound as the paper prints it")
    return d * (2 * (lip_first + lip_second) * diam + sup) / eps * k_l


@dataclass(frozen=True)
class Thm23Constants:
    """The inputs of Thm. 23 for a potential on the box E = [lo, hi] (see :func:`thm23_bound`): bound is the
    corrected bound on kappa(A), printed the constant as the paper prints it."""

    d: int
    diam: float
    lip_first: float
    lip_second: float
    eps: float
    sup: float
    k_l: float
    bound: float
    printed: float


def _interval_product(a_lo, a_hi, b_lo, b_hi):
    """Range of a * b for a in [a_lo, a_hi], b in [b_lo, b_hi] (elementwise, broadcast)."""
    c = torch.stack([a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi])
    return c.amin(0), c.amax(0)


def _linear_range(lo, hi, W):
    """Range of (x W)_k over the box x in [lo, hi] (d,), for each output k: exact."""
    a, b = lo[:, None] * W, hi[:, None] * W
    return torch.minimum(a, b).sum(0), torch.maximum(a, b).sum(0)


@renamed(weights="projections")
def thm23_constants(lo, hi, potential: str = "dot", tau: float = 1.0, projections=None) -> Thm23Constants:
    """Upper bounds of ||G||_{Lip,inf}, ||G||_{inf,Lip}, ||G||_inf, 1 / eps(G) and K_l on the box E = [lo, hi] in
    the l1 metric (Lipschitz constants in l1 are sups of the l-infinity norm of the gradient), and Thm. 23.

    With identity W_Q, W_K the extremes of <x, y> and ||x - y||^2 over E x E are exact (the coordinates decouple);
    otherwise interval arithmetic gives valid, slightly larger constants. Derivatives, with q = x W_Q, k = y W_K:
    dot: grad_x G = W_Q k G / tau, so ||grad_x G||_inf <= max_{y in E} ||y W_K W_Q^T||_inf / tau * max G;
    gaussian: grad_x G = -2 W_Q (q - k) G / tau, ||.||_inf <= (2 / tau) r_Q s e^{-s^2 / tau} with s = ||q - k||_2
    and r_Q the largest l2 norm of a row of W_Q; s e^{-s^2/tau} grows up to s = sqrt(tau / 2). K_l = max_i
    ||W_V[i, :]||_1, the l1 operator norm of x -> x W_V.

    Example: the constants of the Gaussian potential on the unit square E = [0, 1]^2, and Thm. 23's two bounds.

    >>> from wviz.measure import thm23_constants
    >>> c = thm23_constants([0.0, 0.0], [1.0, 1.0], "gaussian")
    >>> c.d, c.diam, round(c.eps, 4), c.sup
    (2, 2.0, 0.1353, 1.0)
    >>> round(c.bound, 4), round(c.printed, 4)
    (116.1872, 101.409)
    """
    lo, hi = (torch.as_tensor(v, dtype=torch.float64).cpu() for v in (lo, hi))
    if lo.ndim != 1 or lo.shape != hi.shape or not bool((lo <= hi).all()):
        raise ValueError("the box E needs lo <= hi, two vectors of length d")
    if not bool(torch.isfinite(lo).all() & torch.isfinite(hi).all()):
        raise ValueError("the box E must be bounded (Thm. 23 needs a compact E)")
    potential, tau = _potential(potential), positive(tau, "tau")
    d = lo.shape[0]
    W_Q, W_K, W_V = _projections(projections, d, torch.float64, "cpu")
    if W_V.shape[1] != d:
        raise ValueError("Thm. 23 needs a lookup l: E -> E (W_V square)")
    q_lo, q_hi = _linear_range(lo, hi, W_Q)
    k_lo, k_hi = _linear_range(lo, hi, W_K)
    if potential == "dot":
        p_lo, p_hi = _interval_product(q_lo, q_hi, k_lo, k_hi)     # each term q_m k_m of <q, k>
        a_min, a_max = p_lo.sum().item() / tau, p_hi.sum().item() / tau
        g_first = torch.stack(_linear_range(lo, hi, W_K @ W_Q.T)).abs().amax().item()   # max ||W_Q k||_inf
        g_second = torch.stack(_linear_range(lo, hi, W_Q @ W_K.T)).abs().amax().item()
        lip_first = g_first / tau * math.exp(a_max)
        lip_second = g_second / tau * math.exp(a_max)
    else:
        u_lo, u_hi = q_lo - k_hi, q_hi - k_lo                       # the range of q - k, coordinate-wise
        s2 = torch.maximum(u_lo ** 2, u_hi ** 2).sum().item()
        near = (torch.clamp_min(u_lo, 0) ** 2 + torch.clamp_max(u_hi, 0) ** 2).sum().item()  # <= min ||q - k||^2
        a_min, a_max = -s2 / tau, -near / tau
        s = min(math.sqrt(s2), math.sqrt(tau / 2))
        peak = 2 / tau * s * math.exp(-s * s / tau)
        lip_first = W_Q.norm(dim=1).max().item() * peak
        lip_second = W_K.norm(dim=1).max().item() * peak
    diam = (hi - lo).sum().item()
    k_l = W_V.abs().sum(1).max().item()
    eps, sup = math.exp(a_min), math.exp(a_max)
    if eps == 0.0:
        raise ValueError("eps(G) underflows to 0 on this E (tokens far apart for this tau): Thm. 23 gives no bound")
    if not math.isfinite(sup * (lip_first + lip_second)):
        return Thm23Constants(d, diam, lip_first, lip_second, eps, sup, k_l, math.inf, math.inf)
    return Thm23Constants(d, diam, lip_first, lip_second, eps, sup, k_l,
                          thm23_bound(diam, lip_first, lip_second, eps, d, k_l, sup),
                          thm23_bound(diam, lip_first, lip_second, eps, d, k_l, printed=True))


# ||G||_Lip (jointly in (x, y), l1 metric) and ||G||_inf of G(x, y) = exp(-||x - y||_2^2): the l-infinity norm of
# the gradient (-2u, 2u) G with u = x - y is 2 ||u||_inf e^{-||u||^2} <= max_t 2 t e^{-t^2} = sqrt(2 / e).
GAUSSIAN_LIP = math.sqrt(2 / math.e)
GAUSSIAN_SUP = 1.0


def cor30_bound(n: int, d: int, lip: float = GAUSSIAN_LIP, sup: float = GAUSSIAN_SUP, k_l: float = 1.0,
                m: int | None = None) -> float:
    """Cor. 30 (Thm. 29 when m is given): for G(x, y) = exp(-||x - y||_2^2) on E = R^d, mu = m(X), nu = m(Y),

        W1(mu A_mu, nu A_nu) <= 2 kappa(Pi) kappa(L) [sqrt(d) sqrt(ln N + 1/(2e)) ||G||_Lip + ||G||_inf + sqrt(d) + 2]
                                * W1(mu, nu),    N = min(n, m)

    n, m      the numbers of tokens of mu and nu (N = n when m is None)
    d         the dimension; kappa(Pi) = d (Prop. 20)
    lip       ||G||_Lip, the l1 Lipschitz constant of G on R^d x R^d: sqrt(2/e) for this G
    sup       ||G||_inf = 1 for this G
    k_l       kappa(L) = K_l, the l1 Lipschitz constant of the lookup (||W_V||)

    The sqrt(d) + 2 is the paper's loose bound on sup 2 (2 + ||t||_1) ||t||_inf e^{-||t||^2} (Prop. 28's proof).
    The bound fails for large N (module docstring): with x_0 = 0 between two clusters of m tokens at -R and R,
    R^2 = ln(2m) - ln(q / (1 - q)), moving x_0 alone gives the ratio (1 - q) + 2 q R^2 ~ 2 q ln N.
    For G = exp(-||x - y||^2 / tau) (identity W_Q, W_K) the same number bounds the ratio: A_tau(X) =
    sqrt(tau) A_1(X / sqrt(tau)) and a W1 ratio does not change when every point is scaled.

    Example: the bound grows like sqrt(ln N): slowly, from 10 tokens to a million.

    >>> from wviz.measure import cor30_bound
    >>> round(cor30_bound(10, d=1), 4), round(cor30_bound(10 ** 6, d=1), 4)
    (10.7052, 14.4188)
    """
    N = n if m is None else min(n, m)
    if not (isinstance(N, int) and N >= 1):
        raise ValueError(f"the numbers of tokens must be positive integers, got {n!r} and {m!r}")
    if not (isinstance(d, int) and d >= 1):
        raise ValueError(f"d must be a positive integer, got {d!r}")
    for name, v in (("lip", lip), ("sup", sup), ("k_l", k_l)):
        if not (math.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a non-negative finite number, got {v:g}")
    bracket = math.sqrt(d) * math.sqrt(math.log(N) + 1 / (2 * math.e)) * lip + sup + math.sqrt(d) + 2
    return 2 * d * k_l * bracket


@dataclass(frozen=True, eq=False)
class Cor30Failure:
    """The counterexample to Cor. 30 for N = 10^k tokens (each (K,)): n the numbers of tokens N, ratio the
    W1 ratio of moving the middle token, bound the Cor. 30 bound for that N."""

    n: torch.Tensor
    ratio: torch.Tensor
    bound: torch.Tensor


def cor30_failure(log10_n=range(1, 13), q: float = 0.85, d: int = 1, delta: float = 1e-6) -> Cor30Failure:
    """The paper's Cor. 30 against a counterexample (module docstring): a token at 0 between two clusters of
    m = (N - 1) / 2 tokens at -R and R along the first axis of R^d, R^2 = ln(2m) - ln(q / (1 - q)), so that the
    clusters hold the share q of the token's Boltzmann-Gibbs measure (Gaussian potential, tau = 1, identity
    projections). Moving that token alone by ``delta`` gives the ratio W1(mu A_mu, nu A_nu) / W1(mu, nu)
    ~ (1 - q) + 2 q R^2 ~ 2 q ln N, while the bound grows like sqrt(ln N), for N = 10^k, k in ``log10_n``.
    The clusters are weighted atoms: exactly the uniform measure of the repeated tokens.

    Example: the counterexample's ratio stays below Cor. 30's bound for 10 tokens and exceeds it for a million.

    >>> from wviz.measure import cor30_failure
    >>> f = cor30_failure(log10_n=[1, 6])
    >>> [round(float(r), 4) for r in f.ratio], [round(float(b), 4) for b in f.bound]
    ([1.3236, 20.6875], [10.7052, 14.4188])
    >>> (f.ratio > f.bound).tolist()
    [False, True]
    """
    if not (0 < q < 1 and isinstance(d, int) and d >= 1 and delta > 0):
        raise ValueError("cor30_failure needs 0 < q < 1, a positive integer d and a positive move delta")
    n, ratios, bounds = [], [], []
    for k in log10_n:
        N = int(round(10 ** k))
        m = (N - 1) / 2
        if 2 * m <= q / (1 - q):   # R^2 > 0
            raise ValueError(f"N = {N} tokens are too few for the share q = {q} of the clusters")
        R = math.sqrt(math.log(2 * m) - math.log(q / (1 - q)))
        pts = torch.zeros(3, d, dtype=torch.float64)
        pts[1, 0], pts[2, 0] = -R, R
        w = torch.tensor([1.0, m, m], dtype=torch.float64)
        moved = pts.clone()
        moved[0, 0] += delta
        n.append(N)
        ratios.append(contraction(empirical(pts, w), empirical(moved, w), "gaussian", 1.0).ratio.item())
        bounds.append(cor30_bound(N, d))
    return Cor30Failure(*(torch.tensor(v, dtype=torch.float64) for v in (n, ratios, bounds)))


# ----------------------------------------------------------------------------------------------- fixed point

@dataclass(frozen=True, eq=False)
class FixedPoint:
    """The recurrence X^{l+1} = T(X^l) with one triple of projections (Sec. 6.2). points (N, d) the last iterate;
    steps (n_iter,) W1(m(X^{l+1}), m(X^l)); to_last (n_iter + 1,) W1(m(X^l), m(X^last)); converged: a step fell
    below tol times the l1 diameter of X^0."""

    points: torch.Tensor
    steps: torch.Tensor
    to_last: torch.Tensor
    n_iter: int
    converged: bool


@renamed(weights="projections")
def fixed_point(x0, potential: str = "dot", tau: float = 1.0, projections=None, residual: bool = False,
                norm: bool = False, max_iter: int = 100, tol: float = 1e-9, ground: str = "l1") -> FixedPoint:
    """Iterate the weight-shared layer T (the Universal Transformer of Sec. 6.2) until W1 between successive
    measures falls below tol * diam(X^0). Prop. 26: if kappa(T) < 1 (Banach) the iterates converge to a
    unique fixed point, geometrically: W1(mu^l, mu*) <= kappa(T)^l / (1 - kappa(T)) W1(mu^1, mu^0).

    Example: the weight-shared Gaussian layer collapses the square onto its centre, a fixed point, in a few steps.

    >>> import torch
    >>> from wviz.measure import fixed_point
    >>> x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=torch.float64)   # a unit square
    >>> fp = fixed_point(x, "gaussian")
    >>> fp.converged, fp.n_iter
    (True, 5)
    >>> [[round(v, 4) for v in p] for p in fp.points.tolist()]
    [[0.5, 0.5], [0.5, 0.5], [0.5, 0.5], [0.5, 0.5]]
    """
    x = _points(x0, "the initial particles")
    if x.ndim != 2:
        raise ValueError(f"fixed_point takes one point cloud (N, d), got shape {tuple(x.shape)}")
    if not (isinstance(max_iter, int) and max_iter >= 1):
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}")
    scale = max(float(torch.cdist(x, x, p=1.0).max()), 1e-300)
    iterates, steps, converged = [x], [], False
    for it in range(1, max_iter + 1):
        iterates.append(_layer(iterates[-1], potential, tau, projections, residual, norm, it))
        steps.append(w1(iterates[-2], iterates[-1], ground))
        if float(steps[-1]) <= tol * scale:
            converged = True
            break
    to_last = torch.stack([w1(X, iterates[-1], ground) for X in iterates])
    return FixedPoint(iterates[-1], torch.stack(steps), to_last, len(steps), converged)


# ----------------------------------------------------------------------------------------------- Thm. 14

def relative_entropy(p: torch.Tensor, nu: torch.Tensor) -> torch.Tensor:
    """H_nu(mu) = -KL(mu || nu) = -sum_j p_j log(p_j / nu_j) for mu = sum p_j delta_{y_j} << nu (Sec. 4), with
    0 log 0 = 0; batched over leading dimensions of p.

    Example: H_nu(nu) = 0, the maximum; a Dirac under the uniform nu on two atoms has -log 2.

    >>> import torch
    >>> from wviz.measure import relative_entropy
    >>> nu = torch.tensor([0.5, 0.5])
    >>> float(relative_entropy(nu, nu)) == 0
    True
    >>> round(float(relative_entropy(torch.tensor([1.0, 0.0]), nu)), 4)
    -0.6931
    """
    ratio = torch.where(p > 0, p / nu, torch.ones_like(p))
    return -(p * ratio.log()).sum(-1)


@dataclass(frozen=True, eq=False)
class MaxEntropyCheck:
    """Thm. 14 at one query x: gibbs (N,) the weights of Psi_{G(x, .)}(nu); features (N, l) k(x, y_j); moment (l,)
    f(x) = Psi_{G(x, .)}(nu)(k(x, .)); lam (l,) with G(x, y) proportional to exp(<lam, k(x, y)>); entropy
    H_nu(gibbs); directions (S, N) unit vectors v with sum v = 0 and sum v_j k_j = 0 (moving along them keeps the
    moment); t (S, T) steps along each direction within the simplex, t = 0 included; entropies (S, T)
    H_nu(gibbs + t v)."""

    gibbs: torch.Tensor
    features: torch.Tensor
    moment: torch.Tensor
    lam: torch.Tensor
    entropy: torch.Tensor
    directions: torch.Tensor
    t: torch.Tensor
    entropies: torch.Tensor


def max_entropy_check(nu, x, potential: str = "dot", tau: float = 1.0, W_Q=None, W_K=None,
                      n_directions: int = 8, n_steps: int = 41, seed: int = 0) -> MaxEntropyCheck:
    """A numerical look at Thm. 14: among the measures mu << nu that encode the same moment f(x) = mu(k(x, .)),
    the Boltzmann-Gibbs measure Psi_{G(x, .)}(nu) with G = exp <lam(x), k(x, .)> has the largest H_nu(mu).

    The potentials are of that form: "dot" with k(x, y) = y W_K, lam = x W_Q / tau; "gaussian" with
    k(x, y) = (y W_K, ||y W_K||^2), lam = (2 x W_Q / tau, -1 / tau) (the factor exp(-||x W_Q||^2 / tau) cancels
    in Psi). The competitors mu = gibbs + t v run along random directions v of the null space of the constraints
    (total mass and moment), for every t that keeps mu >= 0; their entropies peak at t = 0.

    Example: Thm. 14, no competitor that encodes the same moment has a larger entropy than the Gibbs measure.

    >>> import torch
    >>> from wviz.measure import empirical, max_entropy_check
    >>> y = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.5, 2.0]], dtype=torch.float64)
    >>> chk = max_entropy_check(empirical(y), [1.0, 0.5])
    >>> round(float(chk.entropy), 4), bool((chk.entropies <= chk.entropy + 1e-12).all())
    (-0.1325, True)
    """
    nu = _measure(nu)
    if nu.points.ndim != 2:
        raise ValueError("max_entropy_check takes one measure nu (N atoms in R^d)")
    if not (isinstance(n_directions, int) and n_directions >= 1 and isinstance(n_steps, int) and n_steps >= 2):
        raise ValueError("use at least one direction and two steps along it")
    x = _points(torch.as_tensor(x).reshape(1, -1).to(nu.points.dtype), "the query")
    potential, tau = _potential(potential), positive(tau, "tau")
    if x.shape[-1] != nu.d:
        raise ValueError(f"the query has {x.shape[-1]} coordinates but nu lives in R^{nu.d}")
    if not bool((nu.weights > 0).all()):
        raise ValueError("give every atom of nu a positive weight (mu << nu is then any measure on the atoms)")
    k = nu.points if W_K is None else nu.points @ W_K
    q = x[0] if W_Q is None else x[0] @ W_Q
    if potential == "dot":
        features, lam = k, q / tau
    else:
        features = torch.cat([k, (k * k).sum(-1, keepdim=True)], -1)
        lam = torch.cat([2 * q / tau, q.new_tensor([-1 / tau])])
    N, l = features.shape
    if N < l + 2:
        raise ValueError(f"with {l} moment constraints and the total mass, nu needs at least {l + 2} atoms for "
                         f"another measure to encode the same moment; it has {N}")
    gibbs = softmatch(x, nu, potential, tau, W_Q, W_K)[0]
    # null space of the constraints [1; k^T] (l + 1 rows): the directions that keep mass and moment
    A = torch.cat([torch.ones(1, N, dtype=features.dtype), features.T.cpu()])
    _, S, Vh = torch.linalg.svd(A, full_matrices=True)
    rank = int((S > S[0] * 1e-10).sum())
    null = Vh[rank:].to(gibbs.device)
    g = torch.Generator().manual_seed(int(seed))
    coef = torch.randn(n_directions, null.shape[0], generator=g, dtype=gibbs.dtype).to(gibbs.device)
    v = coef @ null
    v = v / v.norm(dim=-1, keepdim=True)
    # the steps that keep gibbs + t v >= 0 form [t_min, t_max], with t_min <= 0 <= t_max
    t_max = torch.where(v < 0, -gibbs / v, torch.full_like(v, math.inf)).amin(-1)
    t_min = torch.where(v > 0, -gibbs / v, torch.full_like(v, -math.inf)).amax(-1)
    frac = torch.linspace(0, 1, n_steps, dtype=gibbs.dtype, device=gibbs.device)
    t = torch.cat([t_min[:, None] + (t_max - t_min)[:, None] * frac, torch.zeros_like(t_min)[:, None]], -1)
    t = t.sort(-1).values
    competitors = (gibbs + t[..., None] * v[:, None, :]).clamp_min(0)
    return MaxEntropyCheck(gibbs, features, gibbs @ features, lam, relative_entropy(gibbs, nu.weights), v, t,
                           relative_entropy(competitors, nu.weights))
