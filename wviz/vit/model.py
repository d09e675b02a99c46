"""A small stochastic Vision Transformer with W2 attention (004) and its deterministic twin.

Source: 004, a summary of "Stochastic Vision Transformers with Wasserstein Distance-Aware Attention" (Erick et al.,
arXiv 2311.18645; see the References page). Every token is a Gaussian N(mu, diag(Sigma)) with a diagonal covariance:

    mu = W_mu x + p_mu,        Sigma = ELU(W_Sigma x + p_Sigma) + 1                 (eq. (5): positive variances)

with separate position embeddings p_mu, p_Sigma (Sec. 4.1). Attention scores are minus the squared 2-Wasserstein
distance between query and key Gaussians (Sec. 4.2), computed by :func:`wviz.gaussian.pairwise_w2_squared`:

    A = softmax(-W2^2(N(q_mu, q_Sigma), N(k_mu, k_Sigma)) / sqrt(d_head)).

How the covariance travels through a block (our rule, the reference code's choice for the attention step):

* q, k, v means are linear maps of LayerNorm(mu); q, k, v variances are ELU(W Sigma) + 1 (the eq. (5) map, so they
  stay positive);
* attention output: mean A v_mu, variance (A * A) v_Sigma (elementwise square of A): the variance of
  sum_j A_ij v_j for independent values v_j;
* output projection W_o: variance (A^2 v_Sigma) (W_o * W_o)^T, the diagonal of W_o diag(s) W_o^T;
* residual: means add, variances add (independent summands); the MLP acts on the means only and leaves the
  variances as they are.

The classifier reads LayerNorm of the class token's mean. Training samples the embeddings once per image
(reparameterisation mu + sqrt(Sigma) eps); :func:`mc_predict` samples them S times for a predictive distribution.
The deterministic twin is the same network with points instead of Gaussians and dot-product attention
softmax(q k^T / sqrt(d_head)).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

from wviz import gaussian

__all__ = ["ViTConfig", "ViTOutput", "MCPrediction", "StochasticViT", "DeterministicViT", "build_model",
           "mc_predict", "w2_regulariser", "mask_patches", "pretrain_loss", "covariance_kl", "loss_fn"]

# Bounds for a config read from an untrusted checkpoint: big enough for CIFAR-size models, small enough that
# building the model cannot exhaust memory (dim 1024 x depth 24 is about 300 M parameters at most).
BOUNDS = {"image_size": (4, 256), "patch_size": (1, 64), "channels": (1, 4), "n_classes": (2, 1000),
          "dim": (4, 1024), "depth": (1, 24), "heads": (1, 32), "mlp_ratio": (1, 8)}
KINDS = ("stochastic", "deterministic")
INIT_LOG_VAR = -4.0


@dataclass(frozen=True)
class ViTConfig:
    """The shape of a model: what a checkpoint stores as JSON to rebuild it. ``kind``: 'stochastic' (Gaussian
    tokens, W2 attention) or 'deterministic' (vectors, dot-product attention)."""

    kind: str = "stochastic"
    image_size: int = 16
    patch_size: int = 4
    channels: int = 1
    n_classes: int = 10
    dim: int = 48
    depth: int = 3
    heads: int = 3
    mlp_ratio: int = 2

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"model kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        for name, (lo, hi) in BOUNDS.items():
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"config {name} must be an integer from {lo} to {hi}, got {v!r}")
        if self.image_size % self.patch_size:
            raise ValueError(f"patch_size {self.patch_size} does not divide image_size {self.image_size}")
        if self.dim % self.heads:
            raise ValueError(f"heads {self.heads} does not divide dim {self.dim}")
        if self.n_patches > 1024:
            raise ValueError(f"{self.n_patches} patches is too many (at most 1024): use a larger patch_size")

    @property
    def n_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def grid(self) -> int:
        """Patches per side."""
        return self.image_size // self.patch_size

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d) -> "ViTConfig":
        """A config from untrusted JSON: a dict with exactly the known keys (ValueError otherwise)."""
        if not isinstance(d, dict):
            raise ValueError(f"the model config must be a JSON object, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"the model config has unknown entries: {', '.join(map(str, unknown))}")
        missing = sorted(known - set(d))
        if missing:
            raise ValueError(f"the model config lacks: {', '.join(missing)}")
        return cls(**d)


@dataclass(frozen=True)
class ViTOutput:
    """What a forward pass returns. logits (B, C); per layer l = 0..depth the tokens' means (B, 1 + P, D) and, for
    the stochastic model, variances (B, 1 + P, D) (layer 0: the embeddings; token 0 is the class token);
    attentions[l] (B, heads, 1 + P, 1 + P) of block l = 0..depth-1."""

    logits: torch.Tensor
    means: tuple[torch.Tensor, ...]
    covariances: tuple[torch.Tensor, ...] | None
    attentions: tuple[torch.Tensor, ...]


def _wide(x: torch.Tensor) -> torch.Tensor:
    """float16 / bfloat16 (autocast) -> float32; float32 and float64 as they are."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _positive(x: torch.Tensor) -> torch.Tensor:
    """ELU(x) + 1 > 0: eq. (5)'s map to variances; near exp(x) for x < 0, near x + 1 for x > 0. Computed in at
    least float32: in bf16, ELU(-4) + 1 = e^-4 would be off by 6 %."""
    return F.elu(_wide(x)) + 1


class _Attention(nn.Module):
    def __init__(self, cfg: ViTConfig):
        super().__init__()
        self.heads, self.d_head = cfg.heads, cfg.dim // cfg.heads
        self.stochastic = cfg.kind == "stochastic"
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)
        if self.stochastic:
            self.qkv_cov = nn.Linear(cfg.dim, 3 * cfg.dim)

    def _split(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(B, N, 3D) -> three (B, heads, N, d_head)."""
        B, N, _ = x.shape
        return x.reshape(B, N, 3, self.heads, self.d_head).permute(2, 0, 3, 1, 4).unbind(0)

    def gaussians(self, mu_n: torch.Tensor, cov: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """q, k, v means and variances per head from LayerNorm(mu) and Sigma: six (B, heads, N, d_head)."""
        q, k, v = self._split(self.qkv(mu_n))
        qs, ks, vs = self._split(_positive(self.qkv_cov(cov)))
        return q, k, v, qs, ks, vs

    def weights(self, q, k, qs=None, ks=None) -> torch.Tensor:
        """A = softmax(-W2^2(q, k) / sqrt(d_head)) (004, Sec. 4.2) or softmax(q k^T / sqrt(d_head))."""
        tau = math.sqrt(self.d_head)
        if not self.stochastic:
            return torch.softmax(q @ k.mT / tau, dim=-1)
        # W2^2 = ||m_q - m_k||^2 + ||s_q - s_k||^2 is a difference of large terms: keep it in float32 even under
        # autocast (bf16 matrix products would cancel badly), and compute it with wviz.gaussian.
        with torch.autocast(q.device.type, enabled=False):
            return gaussian.w2_attention(_wide(q), _wide(qs), _wide(k), _wide(ks), tau=tau)

    def forward(self, mu_n: torch.Tensor, cov: torch.Tensor | None):
        B, N, D = mu_n.shape
        if self.stochastic:
            q, k, v, qs, ks, vs = self.gaussians(mu_n, cov)
            A = self.weights(q, k, qs, ks)
            mean = (A.to(v.dtype) @ v).transpose(1, 2).reshape(B, N, D)
            var = ((A * A).to(vs.dtype) @ vs).transpose(1, 2).reshape(B, N, D)
            return self.proj(mean), var @ (self.proj.weight ** 2).mT.to(var.dtype), A
        q, k, v = self._split(self.qkv(mu_n))
        A = self.weights(q, k)
        return self.proj((A.to(v.dtype) @ v).transpose(1, 2).reshape(B, N, D)), None, A


class _Block(nn.Module):
    def __init__(self, cfg: ViTConfig):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(cfg.dim), nn.LayerNorm(cfg.dim)
        self.attn = _Attention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, cfg.mlp_ratio * cfg.dim), nn.GELU(),
                                 nn.Linear(cfg.mlp_ratio * cfg.dim, cfg.dim))

    def forward(self, mu, cov):
        dmu, dcov, A = self.attn(self.norm1(mu), cov)
        mu = mu + dmu
        mu = mu + self.mlp(self.norm2(mu))
        return mu, (cov + dcov if cov is not None else None), A


class _ViT(nn.Module):
    """Shared body: patch embedding, class token, blocks, classifier on the class token's mean."""

    def __init__(self, cfg: ViTConfig):
        super().__init__()
        self.config = cfg
        patch_dim = cfg.channels * cfg.patch_size ** 2
        self.embed = nn.Linear(patch_dim, cfg.dim)
        self.cls = nn.Parameter(torch.zeros(1, 1, cfg.dim))
        self.pos = nn.Parameter(torch.randn(1, 1 + cfg.n_patches, cfg.dim) * 0.02)
        self.blocks = nn.ModuleList(_Block(cfg) for _ in range(cfg.depth))
        self.norm = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.n_classes)

    def patches(self, images: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, P, C p p), row-major over the patch grid."""
        cfg = self.config
        if images.dim() != 4 or tuple(images.shape[1:]) != (cfg.channels, cfg.image_size, cfg.image_size):
            raise ValueError(f"the model expects images of shape (B, {cfg.channels}, {cfg.image_size}, "
                             f"{cfg.image_size}), got {tuple(images.shape)}")
        p = cfg.patch_size
        x = F.unfold(images, kernel_size=p, stride=p)  # (B, C p p, P)
        return x.transpose(1, 2)

    def _tokens(self, x):
        mu = self.embed(x)
        return torch.cat([self.cls.expand(len(x), -1, -1), mu], 1) + self.pos

    def _run(self, mu, cov) -> ViTOutput:
        means, covs, atts = [mu], [cov], []
        for block in self.blocks:
            mu, cov, A = block(mu, cov)
            means.append(mu)
            covs.append(cov)
            atts.append(A)
        logits = self.head(self.norm(mu[:, 0]))
        return ViTOutput(logits, tuple(means), tuple(covs) if cov is not None else None, tuple(atts))


class StochasticViT(_ViT):
    """Patches as Gaussians N(mu, diag Sigma) (eq. (5)), W2 attention (Sec. 4.2), covariance propagated as in the
    module docstring. ``forward(images, sample=True)`` draws one embedding per image from its Gaussian."""

    def __init__(self, cfg: ViTConfig):
        super().__init__(cfg)
        self.embed_cov = nn.Linear(self.embed.in_features, cfg.dim)
        # start with small variances (ELU(-4) + 1 = e^-4, sd 0.14): unit noise would drown the patch means at first
        self.cls_cov = nn.Parameter(torch.full((1, 1, cfg.dim), INIT_LOG_VAR))
        self.pos_cov = nn.Parameter(torch.randn(1, 1 + cfg.n_patches, cfg.dim) * 0.02)
        nn.init.constant_(self.embed_cov.bias, INIT_LOG_VAR)

    def embed_gaussians(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Eq. (5): means W_mu x + p_mu and variances ELU(W_Sigma x + p_Sigma) + 1, (B, 1 + P, D) each."""
        x = self.patches(images)
        raw = torch.cat([self.cls_cov.expand(len(x), -1, -1), self.embed_cov(x)], 1) + self.pos_cov
        return self._tokens(x), _positive(raw)

    def forward(self, images: torch.Tensor, sample: bool = False,
                generator: torch.Generator | None = None) -> ViTOutput:
        mu, cov = self.embed_gaussians(images)
        if sample:  # reparameterised draw mu + sqrt(Sigma) eps; the variances travel on unchanged
            eps = torch.randn(mu.shape, generator=generator, device=mu.device, dtype=mu.dtype)
            mu = mu + cov.sqrt() * eps
        return self._run(mu, cov)


class DeterministicViT(_ViT):
    """The same network with vector tokens and dot-product attention: the baseline."""

    def forward(self, images: torch.Tensor, sample: bool = False,
                generator: torch.Generator | None = None) -> ViTOutput:
        return self._run(self._tokens(self.patches(images)), None)


def build_model(cfg: ViTConfig) -> _ViT:
    """The untrained model that ``cfg`` describes: a :class:`StochasticViT` (Gaussian tokens, W2 attention of 004)
    for kind 'stochastic', its :class:`DeterministicViT` twin for 'deterministic'. The weights are drawn from torch's
    global generator (torch.manual_seed makes them reproducible).

    Example: a tiny stochastic ViT on 8 x 8 images (4 patches + the class token): every token carries positive
    variances, and every attention row is a distribution.

    >>> import torch
    >>> from wviz.vit.model import ViTConfig, build_model
    >>> _ = torch.manual_seed(0)
    >>> model = build_model(ViTConfig(image_size=8, patch_size=4, dim=8, depth=1, heads=2))
    >>> type(model).__name__
    'StochasticViT'
    >>> out = model(torch.rand(2, 1, 8, 8))
    >>> tuple(out.logits.shape), tuple(out.attentions[0].shape), bool((out.covariances[0] > 0).all())
    ((2, 10), (2, 2, 5, 5), True)
    >>> torch.allclose(out.attentions[0].sum(-1), torch.ones(2, 2, 5))
    True
    """
    return (StochasticViT if cfg.kind == "stochastic" else DeterministicViT)(cfg)


# --------------------------------------------------------------------------------------------- prediction

@dataclass(frozen=True)
class MCPrediction:
    """Monte-Carlo predictive of S draws: probs (S, B, C) per draw, mean (B, C) the predictive distribution,
    entropy (B,) of the mean, std (B, C) the per-class spread across draws, low/high (B, C) the 5 % / 95 %
    quantiles across draws."""

    probs: torch.Tensor
    mean: torch.Tensor
    entropy: torch.Tensor
    std: torch.Tensor
    low: torch.Tensor
    high: torch.Tensor


def entropy(p: torch.Tensor) -> torch.Tensor:
    """-sum_c p_c log p_c over the last axis (0 log 0 = 0)."""
    return -(p * p.clamp_min(torch.finfo(p.dtype).tiny).log()).sum(-1)


@torch.no_grad()
def mc_predict(model: _ViT, images: torch.Tensor, samples: int = 32, seed: int = 0) -> MCPrediction:
    """Sample the patch embeddings S = ``samples`` times from their Gaussians (eq. (5)) and average the softmax
    outputs; all S draws of all images go through the network as one batch. The deterministic model gives S equal
    draws (zero spread). The seeded generator lives on the images' device.

    Example: the predictive of S = 8 draws is a distribution per image; the stochastic model's draws spread, its
    deterministic twin's do not, and the seed makes the draws reproducible.

    >>> import torch
    >>> from wviz.vit.model import ViTConfig, build_model, mc_predict
    >>> _ = torch.manual_seed(0)
    >>> cfg = ViTConfig(image_size=8, patch_size=4, dim=8, depth=1, heads=2)
    >>> model = build_model(cfg)
    >>> images = torch.rand(2, 1, 8, 8)
    >>> mc = mc_predict(model, images, samples=8, seed=0)
    >>> tuple(mc.probs.shape), torch.allclose(mc.mean.sum(-1), torch.ones(2))
    ((8, 2, 10), True)
    >>> bool(mc.std.max() > 0), torch.equal(mc.mean, mc_predict(model, images, samples=8, seed=0).mean)
    (True, True)
    >>> twin = build_model(ViTConfig(kind="deterministic", image_size=8, patch_size=4, dim=8, depth=1, heads=2))
    >>> float(mc_predict(twin, images, samples=8).std.max())
    0.0
    """
    if not (isinstance(samples, int) and 1 <= samples <= 4096):
        raise ValueError(f"the number of Monte-Carlo samples must be an integer from 1 to 4096, got {samples!r}")
    B = len(images)
    g = torch.Generator(device=images.device).manual_seed(seed)
    stochastic = isinstance(model, StochasticViT)
    reps = samples if stochastic else 1
    out = model(images.repeat(reps, 1, 1, 1), sample=stochastic, generator=g)
    probs = out.logits.float().softmax(-1).reshape(reps, B, -1).expand(samples, -1, -1)
    mean = probs.mean(0)
    q = torch.quantile(probs, torch.tensor([0.05, 0.95], device=probs.device), dim=0)
    return MCPrediction(probs, mean, entropy(mean), probs.std(0, correction=0), q[0], q[1])


# ---------------------------------------------------------------------------------------------------- loss

def w2_regulariser(mu: torch.Tensor, cov: torch.Tensor, mu_pos: torch.Tensor, cov_pos: torch.Tensor,
                   labels: torch.Tensor) -> torch.Tensor:
    """The fine-tuning Wasserstein regulariser of 004 (Sec. 4.2, the contrastive form of its pre-training term
    -log sigma(-W2^2(z, z+))): for each image's class-token Gaussian z = N(mu, Sigma), its positive z+ (the class
    token of an augmented view) and its negatives z- (class tokens of the batch's images of other classes):

        R = mean_i [ -log sigma(-W2^2(z_i, z_i+) / D) - mean_{j: y_j != y_i} log sigma(W2^2(z_i, z_j) / D) ],

    with W2^2 from :func:`wviz.gaussian.pairwise_w2_squared` and D the width (a per-dimension distance). The first
    term pulls views of one image together, the second pushes other classes apart. mu, cov, mu_pos, cov_pos:
    (B, D); labels (B,)."""
    D = mu.shape[-1]
    with torch.autocast(mu.device.type, enabled=False):
        mu, cov, mu_pos, cov_pos = (_wide(t) for t in (mu, cov, mu_pos, cov_pos))
        pos = gaussian.w2_squared(mu, cov, mu_pos, cov_pos) / D
        W = gaussian.pairwise_w2_squared(mu, cov, mu, cov) / D
    neg = labels[:, None] != labels[None, :]
    pull = -F.logsigmoid(-pos)
    push = -(F.logsigmoid(W) * neg).sum(1) / neg.sum(1).clamp(min=1)
    return (pull + push).mean()


def mask_patches(images: torch.Tensor, patch_size: int, ratio: float,
                 generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(masked images, masked (B, P) bool): round(ratio x P) patches of each image, drawn at random, set to zero."""
    B, _, H, W = images.shape
    gh, gw = H // patch_size, W // patch_size
    k = max(1, round(ratio * gh * gw))
    rank = torch.rand(B, gh * gw, generator=generator, device=images.device).argsort(1).argsort(1)
    masked = rank < k
    pixels = masked.reshape(B, 1, gh, 1, gw, 1).expand(-1, -1, -1, patch_size, -1, patch_size)
    return images.masked_fill(pixels.reshape(B, 1, H, W), 0.0), masked


def pretrain_loss(model, images: torch.Tensor, ratio: float = 0.5, kl: float = 0.0,
                  generator: torch.Generator | None = None) -> tuple[torch.Tensor, dict]:
    """004's pre-training term (Sec. 4.2: L_p <- L_p - lambda log sigma(-W2^2(z_out, f_z(y+)))), self-supervised:
    the last layer's Gaussian z_out at each masked patch of a masked image is pulled towards z+, the Gaussian at
    the same patch of the unmasked image, and pushed from the other masked patches' z+ of the batch (the contrastive
    form of :func:`w2_regulariser`, each masked patch its own class, so that the pull alone cannot be met by one
    Gaussian for every patch), + kl x :func:`covariance_kl`. Images (B, C, H, W); both versions go through the
    model in one sampled pass. Returns (loss, parts as floats for logging)."""
    inner = getattr(model, "module", model)
    masked_images, masked = mask_patches(images, inner.config.patch_size, ratio, generator)
    out = model(torch.cat([masked_images, images]), sample=True)
    mu, cov = out.means[-1][:, 1:], out.covariances[-1][:, 1:]  # the patches' tokens (not the class token)
    pick = torch.cat([masked, masked])
    z_mu, z_cov = mu[pick].reshape(2, -1, mu.shape[-1]), cov[pick].reshape(2, -1, cov.shape[-1])
    reg = w2_regulariser(z_mu[0], z_cov[0], z_mu[1], z_cov[1], torch.arange(z_mu.shape[1], device=mu.device))
    parts = {"pre": reg.item()}
    if isinstance(model, nn.parallel.DistributedDataParallel):
        # DDP waits for a gradient of every parameter and the classifier takes no part here: give it a zero one
        # (in one process it has none, so AdamW's weight decay leaves it as it is)
        reg = reg + 0 * out.logits.float().sum()
    return _with_prior(reg, parts, out, kl)


def _with_prior(loss: torch.Tensor, parts: dict, out: ViTOutput, kl: float) -> tuple[torch.Tensor, dict]:
    """loss + kl x covariance_kl of the pass's embeddings (when kl > 0 and the model is stochastic)."""
    if not kl or out.covariances is None:
        return loss, parts
    prior = covariance_kl(out.covariances[0])
    return loss + kl * prior, {**parts, "kl": prior.item()}


def covariance_kl(cov: torch.Tensor) -> torch.Tensor:
    """Mean over tokens of KL(N(0, diag Sigma) || N(0, I)) = 1/2 sum_d (Sigma_d - 1 - log Sigma_d): the standard
    normal prior of the variational information bottleneck (Alemi et al. 2017) on the embeddings' variances. It
    keeps Sigma from collapsing towards zero (or one value) wherever the task does not need it small."""
    cov = _wide(cov)
    return 0.5 * (cov - 1 - cov.log()).sum(-1).mean()


def loss_fn(model, images: torch.Tensor, labels: torch.Tensor, views: torch.Tensor | None = None,
            lam: float = 0.0, kl: float = 0.0) -> tuple[torch.Tensor, dict]:
    """Cross-entropy of the (sampled, for the stochastic model) prediction + lam x the regulariser above, whose
    positives are ``views`` (augmented copies of ``images``; the cross-entropy then covers the views too), + kl x
    :func:`covariance_kl` of the embeddings. Returns (loss, parts as floats for logging). ``model`` may be wrapped
    (DistributedDataParallel)."""
    use_views = lam != 0 and views is not None and isinstance(getattr(model, "module", model), StochasticViT)
    B = len(images)
    # images and their views in one forward pass (one pass per step is also what DistributedDataParallel expects)
    out = model(torch.cat([images, views]) if use_views else images, sample=True)
    ce = F.cross_entropy(out.logits.float(), labels.repeat(2) if use_views else labels)
    loss, parts = ce, {"ce": ce.item()}
    if use_views:
        mu, cov = out.means[-1][:, 0], out.covariances[-1][:, 0]
        reg = w2_regulariser(mu[:B], cov[:B], mu[B:], cov[B:], labels)
        loss, parts = ce + lam * reg, {**parts, "w2": reg.item()}
    return _with_prior(loss, parts, out, kl)
