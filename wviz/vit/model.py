"""A small stochastic Vision Transformer with W2 attention (004) and its deterministic twin.

Source: 004, a summary of "Stochastic Vision Transformers with Wasserstein Distance-Aware Attention" (Erick et al.,
arXiv 2311.18645; see the References page). Every token is a Gaussian N(mu, diag(Sigma)) with a diagonal covariance:

    mu = W_mu x + p_mu,        Sigma = ELU(W_Sigma x + p_Sigma) + 1                 (eq. (5): positive variances)

with separate position embeddings p_mu, p_Sigma (Sec. 4.1). Attention scores are minus the squared 2-Wasserstein
distance between query and key Gaussians (Sec. 4.2), computed by :func:`wviz.gaussian.pairwise_w2_squared`:

    A = softmax(-W2^2(N(q_mu, q_Sigma), N(k_mu, k_Sigma)) / sqrt(d_head)).

How the covariance travels through a block (``ViTConfig.rule``):

* q, k, v means are linear maps of LayerNorm(mu); q, k, v variances are ELU(W Sigma) + 1 (the eq. (5) map, so they
  stay positive);
* rule '004' (the reference code's choice, the default): attention output mean A v_mu, variance (A * A) v_Sigma
  (elementwise square of A), the variance of sum_j A_ij v_j for independent values v_j; through the output
  projection W_o the variance is (A^2 v_Sigma) (W_o * W_o)^T, the diagonal of W_o diag(s) W_o^T;
* rule 'mixture' (moment matching): query i's output is read as the mixture sum_j A_ij N(v_j, Sigma_vj), one value
  drawn with probability A_ij (independently in each head). Its mean is m_i = sum_j A_ij v_j and, by the law of
  total variance, its covariance is E[Var] + Var[E] = sum_j A_ij Sigma_vj + sum_j A_ij (v_j - m_i)(v_j - m_i)^T:
  the values' own variances plus the spread of the value means the query mixes, which grows when attention mixes
  values that disagree (and is 0 when it picks one). The diagonal after W_o is exact: the first term is diagonal,
  so it maps through W_o * W_o; the spread is mapped first, sum_j A_ij (u_j - sum_k A_ik u_k)^2 with u_j = W_o^h v_j
  the projected values of head h, summed over the heads;
* residual: means add, variances add (independent summands); the MLP acts on the means only and leaves the
  variances as they are (docs/TRAINING.md measures what a linearised MLP would add).

The embedding variances (``ViTConfig.layer0``): 'eq5' as above, or 'prototypes': eq. (5) plus a variance that grows
with the patch's distance from the training patches, kappa d^2(x) / mean_train d^2 with d(x) the distance of the
patch's pixels to the nearest of K prototypes (k-means of the training patches, :func:`fit_prototypes`; kappa the
weight). Eq. (5) is affine in the pixels and learns to shrink with ink, so an image of noise got the smallest
variances; the distance does not depend on what the classifier needs.

The classifier reads LayerNorm of the class token's mean. Training samples the embeddings once per image
(reparameterisation mu + sqrt(Sigma) eps); :func:`mc_predict` samples them S times for a predictive distribution.
The deterministic twin is the same network with points instead of Gaussians and dot-product attention
softmax(q k^T / sqrt(d_head)).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace

import torch
import torch.nn.functional as F
from torch import nn

from wviz import gaussian

__all__ = ["ViTConfig", "ViTOutput", "MCPrediction", "StochasticViT", "DeterministicViT", "build_model",
           "mc_predict", "w2_regulariser", "gaussian_nll", "likelihood_regulariser", "mask_patches", "pretrain_loss",
           "covariance_kl", "loss_fn", "fit_prototypes", "with_rule", "RULES", "LAYER0", "TERMS", "PROTOTYPE_FLOOR",
           "DRAW_BATCH"]

# Bounds for a config read from an untrusted checkpoint: big enough for CIFAR-size models, small enough that
# building the model cannot exhaust memory (dim 1024 x depth 24 is about 300 M parameters at most).
BOUNDS = {"image_size": (4, 256), "patch_size": (1, 64), "channels": (1, 4), "n_classes": (2, 1000),
          "dim": (4, 1024), "depth": (1, 24), "heads": (1, 32), "mlp_ratio": (1, 8)}
KINDS = ("stochastic", "deterministic")
RULES = ("004", "mixture")          # how a block propagates the covariance (module docstring)
LAYER0 = ("eq5", "prototypes")      # the embeddings' variances: eq. (5), or eq. (5) + the prototype distance
TERMS = ("w2", "likelihood")        # the pull of the pre-training / fine-tuning terms: -log sigma(-W2^2), or an NLL
MAX_PROTOTYPES = 1024
# The prototype distance's floor on a patch's variance (kappa = 0.02 on an average training patch): a patch at a
# prototype counts as 1/20 of an average one, not as log 0 (docs/TRAINING.md: the score is flat from 1/1000 to 1/10).
PROTOTYPE_FLOOR = 1e-3
# Entries a checkpoint from before they existed lacks: it loads with these values (its rule and its eq. (5)).
OPTIONAL = {"rule": "004", "layer0": "eq5", "prototypes": 0}
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
    rule: str = "004"
    layer0: str = "eq5"
    prototypes: int = 0

    def __post_init__(self):
        for name, allowed in (("kind", KINDS), ("rule", RULES), ("layer0", LAYER0)):
            if not isinstance(getattr(self, name), str) or getattr(self, name) not in allowed:
                raise ValueError(f"model {name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        lo = 1 if self.layer0 == "prototypes" else 0
        hi = MAX_PROTOTYPES if self.layer0 == "prototypes" else 0
        if isinstance(self.prototypes, bool) or not isinstance(self.prototypes, int) or not lo <= self.prototypes <= hi:
            raise ValueError(f"config prototypes must be an integer from {lo} to {hi} with layer0 "
                             f"{self.layer0!r}, got {self.prototypes!r}")
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
    def has_prototypes(self) -> bool:
        """Whether the model's layer 0 has prototypes (a stochastic model's: the twin's config may carry the entry
        and has no variances), and so the prototype distance score."""
        return self.kind == "stochastic" and self.layer0 == "prototypes"

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
    def from_dict(cls, d) -> ViTConfig:
        """A config from untrusted JSON: a dict with exactly the known keys (ValueError otherwise); a config from
        before the entries of OPTIONAL existed gets their values (rule '004', layer0 'eq5')."""
        if not isinstance(d, dict):
            raise ValueError(f"the model config must be a JSON object, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known, key=str)
        if unknown:
            raise ValueError(f"the model config has unknown entries: {', '.join(map(str, unknown))}")
        d = {**OPTIONAL, **d}
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


def _elu_plus_one(x: torch.Tensor) -> torch.Tensor:
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
        qs, ks, vs = self._split(_elu_plus_one(self.qkv_cov(cov)))
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

    def variance(self, A: torch.Tensor, v: torch.Tensor, vs: torch.Tensor, rule: str) -> torch.Tensor:
        """The attention output's variance after W_o, (B, N, D), under ``rule`` (module docstring): '004'
        (A * A) Sigma_v (W_o * W_o)^T; 'mixture' A Sigma_v (W_o * W_o)^T + the spread of the projected value means
        the query mixes, sum_h [A (u * u) - (A u)^2] with u = W_o^h v per head h."""
        B, H, N, dh = v.shape
        # a difference of second moments: float32 even under autocast (bf16 would cancel it away)
        with torch.autocast(v.device.type, enabled=False):
            W = _wide(self.proj.weight)
            A, v, vs = _wide(A), _wide(v), _wide(vs)
            own = ((A * A if rule == "004" else A) @ vs).transpose(1, 2).reshape(B, N, H * dh) @ (W * W).mT
            if rule == "004":
                return own
            u = v @ W.reshape(-1, H, dh).permute(1, 2, 0)          # (B, H, N, D): head h's values through W_o
            spread = (A @ (u * u) - (A @ u) ** 2).clamp_min(0)       # E[u^2] - E[u]^2 under the weights A_i.
            return own + spread.sum(1)

    def forward(self, mu_n: torch.Tensor, cov: torch.Tensor | None, rule: str = "004"):
        B, N, D = mu_n.shape
        if self.stochastic:
            q, k, v, qs, ks, vs = self.gaussians(mu_n, cov)
            A = self.weights(q, k, qs, ks)
            mean = (A.to(v.dtype) @ v).transpose(1, 2).reshape(B, N, D)
            return self.proj(mean), self.variance(A, v, vs, rule), A
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

    def forward(self, mu, cov, rule: str = "004"):
        dmu, dcov, A = self.attn(self.norm1(mu), cov, rule)
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
        # F.unfold's layout by reshapes and one copy: no OpenMP region, which on a busy machine waited for a thread
        # (BENCHMARKS.md, "Measurements behind design choices")
        p, g = cfg.patch_size, cfg.grid
        x = images.reshape(len(images), cfg.channels, g, p, g, p).permute(0, 2, 4, 1, 3, 5)
        return x.reshape(len(images), g * g, cfg.channels * p * p)

    def _tokens(self, x):
        mu = self.embed(x)
        return torch.cat([self.cls.expand(len(x), -1, -1), mu], 1) + self.pos

    def _run(self, mu, cov, rule: str | None = None) -> ViTOutput:
        """The blocks on tokens (mu, cov); ``rule`` (default: the config's) propagates the covariance."""
        rule = self.config.rule if rule is None else rule
        means, covs, atts = [mu], [cov], []
        for block in self.blocks:
            mu, cov, A = block(mu, cov, rule)
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
        if cfg.layer0 == "prototypes":  # fitted once to the training patches (fit_prototypes), never by a gradient
            self.register_buffer("proto", torch.zeros(cfg.prototypes, self.embed.in_features))
            self.register_buffer("proto_scale", torch.zeros(1))

    def distance(self, x: torch.Tensor) -> torch.Tensor:
        """Squared distance of each patch (B, P, C p p) to its nearest prototype, (B, P), in the patches' dtype. As
        ||x||^2 - 2 x.c + ||c||^2 (one matrix product) in float64: in float32 the difference of those large terms
        loses the small distances of patches close to a prototype."""
        x64, c = x.double(), self.proto.double()
        d2 = (x64 * x64).sum(-1, keepdim=True) - 2 * x64 @ c.mT + (c * c).sum(-1)
        return d2.min(-1).values.clamp_min(0).to(x.dtype)

    def prototype_distance(self, images: torch.Tensor) -> torch.Tensor:
        """(B,): the mean over an image's patches of log(PROTOTYPE_FLOOR + kappa d^2(x) / mean_train d^2), the log of
        the variance layer 0 'prototypes' adds for each patch's distance from the training patches. The log, not the
        variance itself: most patches of a training digit sit at a prototype (MNIST's background: 62 % of them), so
        the variance's mean is carried by an image's few strokes far from every prototype, while the mean of its log
        counts how many of the patches are unlike every training patch.

        Example: a patch at a prototype scores the floor, one further away more.

        >>> import torch
        >>> from wviz.vit.model import PROTOTYPE_FLOOR, ViTConfig, build_model
        >>> model = build_model(ViTConfig(image_size=4, patch_size=4, dim=8, depth=1, heads=2, layer0="prototypes",
        ...                               prototypes=1))
        >>> _ = model.proto_scale.fill_(0.5)
        >>> scores = model.prototype_distance(torch.stack([torch.zeros(1, 4, 4), torch.ones(1, 4, 4)]))
        >>> torch.allclose(scores, torch.tensor([PROTOTYPE_FLOOR, PROTOTYPE_FLOOR + 0.5 * 16]).log())
        True
        """
        if not self.config.has_prototypes:
            raise ValueError(f"the prototype distance needs layer0 'prototypes', not {self.config.layer0!r}")
        x = self.patches(images)
        extra = self.proto_scale.clamp_min(0) * self.distance(_wide(x))
        return (PROTOTYPE_FLOOR + extra).log().mean(-1).to(x.dtype)

    def embed_gaussians(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Eq. (5): means W_mu x + p_mu and variances ELU(W_Sigma x + p_Sigma) + 1, (B, 1 + P, D) each; with layer0
        'prototypes' every patch token's variances also get kappa d^2(x) / mean_train d^2 (module docstring)."""
        x = self.patches(images)
        raw = torch.cat([self.cls_cov.expand(len(x), -1, -1), self.embed_cov(x)], 1) + self.pos_cov
        cov = _elu_plus_one(raw)
        if self.config.layer0 == "prototypes":  # clamp: a scale read from a file must not make a variance negative
            extra = self.proto_scale.clamp_min(0) * self.distance(_wide(x))
            cov = cov + F.pad(extra, (1, 0))[..., None]  # the class token (first) gets none
        return self._tokens(x), cov

    def forward(self, images: torch.Tensor, sample: bool = False, generator: torch.Generator | None = None,
                rule: str | None = None, fixed_embedding_cov: bool = False) -> ViTOutput:
        """``rule`` ('004' or 'mixture') overrides the config's covariance rule for this pass (the page shows both
        rules on the same weights). ``fixed_embedding_cov``: the covariance stream starts from the embeddings'
        variances as constants (no gradient flows back to them through the blocks' covariances; the draws still
        pass theirs): the likelihood terms use it, so that the last layer's Sigma grows in the blocks, which are
        not sampled, rather than by adding noise to the embeddings."""
        mu, cov = self.embed_gaussians(images)
        if sample:  # reparameterised draw mu + sqrt(Sigma) eps; the variances travel on unchanged
            eps = torch.randn(mu.shape, generator=generator, device=mu.device, dtype=mu.dtype)
            mu = mu + cov.sqrt() * eps
        if not fixed_embedding_cov:
            return self._run(mu, cov, rule)
        out = self._run(mu, cov.detach(), rule)
        assert out.covariances is not None   # a pass with variances returns them
        return replace(out, covariances=(cov, *out.covariances[1:]))  # the prior still sees the embeddings' own


class DeterministicViT(_ViT):
    """The same network with vector tokens and dot-product attention: the baseline."""

    def forward(self, images: torch.Tensor, sample: bool = False, generator: torch.Generator | None = None,
                rule: str | None = None, fixed_embedding_cov: bool = False) -> ViTOutput:
        return self._run(self._tokens(self.patches(images)), None)


def with_rule(cfg: ViTConfig, rule: str) -> ViTConfig:
    """The same config with another covariance rule: the weights of one rule run under the other."""
    return ViTConfig.from_dict({**cfg.to_dict(), "rule": rule})


@torch.no_grad()
def fit_prototypes(model: StochasticViT, images: torch.Tensor, kappa: float, iters: int = 30,
                   seed: int = 0) -> None:
    """Fit the K = config.prototypes prototypes of layer0 'prototypes' to the patches of ``images`` (the training
    split) by k-means (Lloyd's iterations from K patches drawn with ``seed``; an emptied cluster keeps its centre),
    and set the scale so that the extra variance (per dimension) of a training patch is kappa on average:
    proto_scale = kappa / mean d^2.

    Example: two clusters of patches, two prototypes: each patch's squared distance to its nearest prototype is
    small, and the scale makes their mean kappa.

    >>> import torch
    >>> from wviz.vit.model import ViTConfig, build_model, fit_prototypes
    >>> _ = torch.manual_seed(0)
    >>> model = build_model(ViTConfig(image_size=8, patch_size=4, dim=8, depth=1, heads=2, layer0="prototypes",
    ...                               prototypes=2))
    >>> images = torch.cat([torch.zeros(4, 1, 8, 8), torch.ones(4, 1, 8, 8)]) + 0.01 * torch.rand(8, 1, 8, 8)
    >>> fit_prototypes(model, images, kappa=0.5)
    >>> sorted(round(float(p.mean()), 1) for p in model.proto)
    [0.0, 1.0]
    >>> d2 = model.distance(model.patches(images))
    >>> round(float(model.proto_scale * d2.mean()), 4)
    0.5
    """
    x = model.patches(images).reshape(-1, model.proto.shape[1]).to(model.proto)
    g = torch.Generator().manual_seed(seed)
    centres = x[torch.randperm(len(x), generator=g)[:model.config.prototypes].to(x.device)].clone()
    for _ in range(iters):
        nearest = torch.cdist(x, centres).argmin(1)
        count = torch.zeros(len(centres), device=x.device).index_add_(0, nearest, torch.ones(len(x), device=x.device))
        total = torch.zeros_like(centres).index_add_(0, nearest, x)
        centres = torch.where(count[:, None] > 0, total / count.clamp_min(1)[:, None], centres)
    model.proto.copy_(centres)
    mean_d2 = float(model.distance(x[None]).mean())
    model.proto_scale.fill_(kappa / max(mean_d2, 1e-12))


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
    quantiles across draws, logits (S, B, C) per draw (what temperature scaling divides)."""

    probs: torch.Tensor
    mean: torch.Tensor
    entropy: torch.Tensor
    std: torch.Tensor
    low: torch.Tensor
    high: torch.Tensor
    logits: torch.Tensor | None = None


def entropy(p: torch.Tensor) -> torch.Tensor:
    """-sum_c p_c log p_c over the last axis (0 log 0 = 0)."""
    return -(p * p.clamp_min(torch.finfo(p.dtype).tiny).log()).sum(-1)


# image-draws per forward pass of mc_predict: on CPU a block's tensors then stay in cache; a GPU wants big batches
DRAW_BATCH = {"cpu": 256, "cuda": 32768}


@torch.no_grad()
def mc_predict(model: _ViT, images: torch.Tensor, samples: int = 32, seed: int = 0) -> MCPrediction:
    """Sample the patch embeddings S = ``samples`` times from their Gaussians (eq. (5)) and average the softmax
    outputs. The draws go through the network in passes of whole draws, about DRAW_BATCH[device] image-draws each
    (on the CPU a pass that stays in cache is faster per draw than all S x B at once), from one generator in the
    same order, so on the CPU they are the numbers one pass would draw. The deterministic model gives S equal draws
    (zero spread). The seeded generator lives on the images' device.

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
    step = max(1, DRAW_BATCH.get(images.device.type, DRAW_BATCH["cpu"]) // B)
    logits = torch.cat([model(images.repeat(min(step, reps - r), 1, 1, 1), sample=stochastic, generator=g).logits
                        for r in range(0, reps, step)]).float().reshape(reps, B, -1).expand(samples, -1, -1)
    probs = logits.softmax(-1)
    mean = probs.mean(0)
    q = torch.quantile(probs, torch.tensor([0.05, 0.95], device=probs.device), dim=0)
    return MCPrediction(probs, mean, entropy(mean), probs.std(0, correction=0), q[0], q[1], logits)


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
    pull = -F.logsigmoid(-pos)
    return (pull + _push(mu, cov, labels)).mean()


def _push(mu: torch.Tensor, cov: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The negatives' part of the contrastive form, per anchor: -mean_{j: y_j != y_i} log sigma(W2^2(z_i, z_j) / D)."""
    with torch.autocast(mu.device.type, enabled=False):
        W = gaussian.pairwise_w2_squared(_wide(mu), _wide(cov), _wide(mu), _wide(cov)) / mu.shape[-1]
    neg = labels[:, None] != labels[None, :]
    return -(F.logsigmoid(W) * neg).sum(1) / neg.sum(1).clamp(min=1)


def gaussian_nll(y: torch.Tensor, mu: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    """-log N(y; mu, diag var) / D, the Gaussian negative log-likelihood per dimension, over the last axis:
    mean_d 1/2 [log(2 pi var_d) + (y_d - mu_d)^2 / var_d]. For a fixed error it is smallest at var_d = (y_d - mu_d)^2:
    the variance is paid to cover the error, which no W2 term does (W2^2 = ||dmu||^2 + ||dsigma||^2 keeps them apart).

    Example: at one standard deviation of error, per dimension 1/2 log(2 pi) + 1/2.

    >>> import math, torch
    >>> from wviz.vit.model import gaussian_nll
    >>> nll = gaussian_nll(torch.ones(3), torch.zeros(3), torch.ones(3))
    >>> round(float(nll), 4), round(0.5 * math.log(2 * math.pi) + 0.5, 4)
    (1.4189, 1.4189)
    """
    with torch.autocast(mu.device.type, enabled=False):
        y, mu, var = _wide(y), _wide(mu), _wide(var)
        return 0.5 * (torch.log(2 * math.pi * var) + (y - mu) ** 2 / var).mean(-1)


def likelihood_regulariser(mu: torch.Tensor, cov: torch.Tensor, mu_pos: torch.Tensor,
                           labels: torch.Tensor) -> torch.Tensor:
    """The likelihood form of the contrastive term: the pull -log sigma(-W2^2(z_i, z_i+)) of :func:`w2_regulariser`
    becomes the Gaussian NLL of the positive's mean under the anchor's Gaussian, :func:`gaussian_nll`(mu_i+; mu_i,
    Sigma_i), so that Sigma_i grows where the anchor cannot predict its positive; the push from the negatives is
    the same. mu, cov, mu_pos: (B, D); labels (B,)."""
    return (gaussian_nll(mu_pos, mu, cov) + _push(mu, cov, labels)).mean()


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


def _term(term: str, z_mu, z_cov, pos_mu, pos_cov, labels) -> torch.Tensor:
    if term not in TERMS:
        raise ValueError(f"the regulariser's term must be one of {', '.join(TERMS)}, got {term!r}")
    if term == "w2":
        return w2_regulariser(z_mu, z_cov, pos_mu, pos_cov, labels)
    return likelihood_regulariser(z_mu, z_cov, pos_mu, labels)


def pretrain_loss(model, images: torch.Tensor, ratio: float = 0.5, kl: float = 0.0,
                  generator: torch.Generator | None = None, term: str = "w2") -> tuple[torch.Tensor, dict]:
    """004's pre-training term (Sec. 4.2: L_p <- L_p - lambda log sigma(-W2^2(z_out, f_z(y+)))), self-supervised:
    the last layer's Gaussian z_out at each masked patch of a masked image is pulled towards z+, the Gaussian at
    the same patch of the unmasked image, and pushed from the other masked patches' z+ of the batch (the contrastive
    form of :func:`w2_regulariser`, each masked patch its own class, so that the pull alone cannot be met by one
    Gaussian for every patch), + kl x :func:`covariance_kl`. ``term`` 'likelihood': the pull is the Gaussian NLL
    of the unmasked patch's mean under the masked patch's Gaussian (:func:`likelihood_regulariser`). Images
    (B, C, H, W); both versions go through the model in one sampled pass. Returns (loss, parts as floats for
    logging)."""
    inner = getattr(model, "module", model)
    masked_images, masked = mask_patches(images, inner.config.patch_size, ratio, generator)
    # the likelihood form runs on the means, the embeddings' variances held fixed: it is to teach the blocks'
    # covariances to cover what cannot be reconstructed, and through the draws or the covariance stream it would
    # instead inflate the noise the classifier is sampled with (docs/TRAINING.md: pilots that way ended at accuracy
    # 0.38-0.85; this form collapses it too, 0.49 at seed 0: the term is an option, not a recipe)
    lik = term == "likelihood"
    out = model(torch.cat([masked_images, images]), sample=not lik, fixed_embedding_cov=lik)
    mu, cov = out.means[-1][:, 1:], out.covariances[-1][:, 1:]  # the patches' tokens (not the class token)
    pick = torch.cat([masked, masked])
    z_mu, z_cov = mu[pick].reshape(2, -1, mu.shape[-1]), cov[pick].reshape(2, -1, cov.shape[-1])
    reg = _term(term, z_mu[0], z_cov[0], z_mu[1], z_cov[1], torch.arange(z_mu.shape[1], device=mu.device))
    parts = {"pre": reg.item()}
    if isinstance(model, nn.parallel.DistributedDataParallel):
        # DDP waits for a gradient of every parameter and the classifier takes no part here: give it a zero one
        # (in one process it has none, so AdamW's weight decay leaves it as it is)
        reg = reg + 0 * out.logits.float().sum()
    # nothing in the likelihood form holds the embeddings' variances: the prior alone would inflate them (under
    # Adam a small steady gradient is a full step), so this stage has none (docs/TRAINING.md)
    return _with_prior(reg, parts, out, 0.0 if lik else kl)


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
            lam: float = 0.0, kl: float = 0.0, term: str = "w2") -> tuple[torch.Tensor, dict]:
    """Cross-entropy of the (sampled, for the stochastic model) prediction on ``images`` and, when given, on
    ``views`` (augmented copies of them: every model sees the same augmentation, the twin included), + lam x the
    regulariser above on the class token, positives the views (stochastic model, ``term`` 'w2' or 'likelihood'),
    + kl x :func:`covariance_kl` of the embeddings. Returns (loss, parts as floats for logging). ``model`` may be
    wrapped (DistributedDataParallel)."""
    use_views = views is not None
    B = len(images)
    # images and their views in one forward pass (one pass per step is also what DistributedDataParallel expects)
    out = model(torch.cat([images, views]) if use_views else images, sample=True,
                fixed_embedding_cov=bool(lam) and term == "likelihood")
    ce = F.cross_entropy(out.logits.float(), labels.repeat(2) if use_views else labels)
    loss, parts = ce, {"ce": ce.item()}
    if use_views and lam != 0 and out.covariances is not None:
        mu, cov = out.means[-1][:, 0], out.covariances[-1][:, 0]
        reg = _term(term, mu[:B], cov[:B], mu[B:], cov[B:], labels)
        loss, parts = ce + lam * reg, {**parts, "w2" if term == "w2" else "nll": reg.item()}
    return _with_prior(loss, parts, out, kl)
