"""The attention kernel of 003 (Defs. 4-8, Prop. 9) and the flow it drives: one self-attention step mu -> mu A_mu
and its layers (residual, normalisation)."""
from __future__ import annotations


import torch

from wviz._checks import positive, renamed

from .measures import _measure, _points, _potential, _projections, empirical, Measure


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
