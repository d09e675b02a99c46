"""What the "Particles and contraction" page computes, built on :mod:`wviz.measure` (source: 003, INDEX.md).

Tokens are 2-D particles, X^0 a preset cloud or an upload; every layer moves each particle to its attention
output (the measure flow mu -> mu A_mu). The bounds are those of Thm. 23 (compact E, with the corrected
constant of wviz.measure) and Cor. 30 (Gaussian potential on R^d, as printed).
"""
from __future__ import annotations

import math

import torch

from wviz import measure, samples

PRESETS = ("clusters", "ring", "random")


def particles(preset: str, n: int, seed: int = 0) -> torch.Tensor:
    """n particles (n, 2): two Gaussian clusters, a noisy ring of radius 1, or uniform in [-1, 1]^2."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
    if n < 2:
        raise ValueError("use at least two particles")
    if preset == "clusters":
        x, y = samples.point_clouds("gaussians", n // 2, n - n // 2, seed)
        return torch.cat([x, y])
    if preset == "ring":
        return 2 * samples.point_clouds("rings", n, 1, seed)[0]
    return 2 * samples.point_clouds("random", n, 1, seed)[0] - 1


def layer_weights(d: int, layers: int, identity: bool, shared: bool, seed: int, value_scale: float = 1.0):
    """The weights argument of measure.self_attention_flow: None (identities), one triple (W_Q, W_K, s W_V) from
    ``seed`` (shared), or one triple per layer from seeds seed, seed + 1, ... (s = value_scale)."""
    if identity and value_scale == 1.0:
        return None

    def triple(h):
        W_Q, W_K, W_V = samples.projections(d, None if identity else seed + h)
        return W_Q, W_K, value_scale * W_V

    return triple(0) if shared or identity else [triple(h) for h in range(layers)]


def first_layer(weights):
    """The (W_Q, W_K, W_V) of layer 1 (None: identities)."""
    return weights if weights is None or isinstance(weights, tuple) else weights[0]


def flow(x, layers, potential, tau, weights, residual, norm, ground):
    """The trajectory (L + 1, N, 2) and W1 between consecutive layers (L,); a list of weights is one per layer."""
    traj = measure.self_attention_flow(x, layers, potential, tau, weights, not isinstance(weights, list),
                                       residual, norm)
    steps = torch.stack([measure.w1(traj[h], traj[h + 1], ground) for h in range(layers)]) if layers else \
        torch.zeros(0, dtype=traj.dtype)
    return traj, steps


def _identity_qk(W) -> bool:
    if W is None:
        return True
    eye = torch.eye(W[0].shape[0], dtype=W[0].dtype)
    return bool(torch.equal(W[0], eye) and torch.equal(W[1], eye))


def contraction(x, perturbation, n_samples, sigma, potential, tau, W, ground, y=None, seed=0):
    """Sampled pairs through one attention layer (measure.contraction_ratio), (W1 in, W1 out) of the uploaded pair
    (x, y) if y is given,
    the worst infinitesimal move, and the slopes of the bounds that apply (l1 ground metric only):
    Thm. 23 (corrected and as printed) on a box containing every input, Cor. 30 / Thm. 29 for the Gaussian
    potential with W_Q = W_K = I."""
    res = measure.contraction_ratio(x, perturbation, n_samples, potential, tau, W, ground, sigma=sigma, seed=seed)
    lo, hi = res.lo, res.hi
    pair = None
    if y is not None:
        both = measure.contraction(x, y, potential, tau, W, ground)
        pair = (both.w1_in, both.w1_out)
        lo, hi = torch.minimum(lo, y.amin(0)), torch.maximum(hi, y.amax(0))
    out = dict(res=res, pair=pair, local=None, thm23=None, cor30=None)
    if ground != "l1":
        return out
    out["local"] = measure.local_contraction(x, potential, tau, W)
    try:
        out["thm23"] = measure.thm23_constants(lo, hi, potential, tau, W)
    except ValueError:   # eps(G) underflows: Thm. 23 says nothing on this E
        pass
    if potential == "gaussian" and _identity_qk(W):
        N, d = x.shape
        m = {"noise": N, "drop": N - 1, "swap": math.ceil(N / 2)}[perturbation]
        if y is not None:
            m = min(m, y.shape[0])
        k_l = 1.0 if W is None else W[2].abs().sum(1).max().item()
        out["cor30"] = measure.cor30_bound(min(N, m), d, k_l=k_l)
    return out


def banach(x, potential, tau, W, residual, norm):
    """The corrected Thm. 23 bound on E = [-r, r]^d, r = max |x|, when Prop. 26 applies: no residual or norm and
    x -> x W_V maps E into itself (largest column l1 norm of W_V <= 1, so the outputs, averages of the x_j W_V,
    stay in E). None otherwise."""
    if residual or norm:
        return None
    d = x.shape[-1]
    W_V = torch.eye(d, dtype=x.dtype) if W is None else W[2]
    if W_V.abs().sum(0).max().item() > 1:
        return None
    r = x.abs().max().item()
    try:
        return measure.thm23_constants([-r] * d, [r] * d, potential, tau, W)
    except ValueError:
        return None


def cor30_failure(log10_n, q: float = 0.85, d: int = 1, delta: float = 1e-6):
    """The ratio for moving a token at 0 that sits between two clusters of m = (N - 1) / 2 tokens at -R and R,
    R^2 = ln(2m) - ln(q / (1 - q)) (Gaussian potential, tau = 1, identity weights, in R^d along the first axis),
    and the Cor. 30 bound, for N = 10^k. Clusters are weighted atoms: the uniform measure of the repeated
    tokens, exactly."""
    ratios, bounds = [], []
    for k in log10_n:
        m = (10 ** k - 1) / 2
        R = math.sqrt(math.log(2 * m) - math.log(q / (1 - q)))
        pts = torch.zeros(3, d, dtype=torch.float64)
        pts[1, 0], pts[2, 0] = -R, R
        w = torch.tensor([1.0, m, m], dtype=torch.float64)
        moved = pts.clone()
        moved[0, 0] += delta
        ratios.append(measure.contraction(measure.empirical(pts, w), measure.empirical(moved, w), "gaussian",
                                          1.0).ratio.item())
        bounds.append(measure.cor30_bound(int(round(10 ** k)), d))
    return torch.tensor(ratios, dtype=torch.float64), torch.tensor(bounds, dtype=torch.float64)
