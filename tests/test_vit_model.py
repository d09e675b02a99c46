"""wviz.vit.model: W2 attention inside the model is wviz.gaussian's, the covariance rule, MC prediction, loss."""
import math

import pytest
import torch
import torch.nn.functional as F

from wviz import gaussian
from wviz.vit import data
from wviz.vit.model import (DRAW_BATCH, DeterministicViT, StochasticViT, ViTConfig, build_model, covariance_kl, entropy,
                            fit_prototypes, gaussian_nll, likelihood_regulariser, loss_fn, mask_patches, mc_predict,
                            pretrain_loss, w2_regulariser)

CFG = ViTConfig(dim=16, depth=2, heads=2)


def _images(n=4, seed=0):
    return torch.rand(n, 1, 16, 16, generator=torch.Generator().manual_seed(seed))


def test_attention_is_wviz_gaussian_w2_attention():
    torch.manual_seed(0)
    model = StochasticViT(CFG).eval()
    x = _images()
    out = model(x)
    for layer, block in enumerate(model.blocks):
        mu, cov = out.means[layer], out.covariances[layer]
        q, k, _, qs, ks, _ = block.attn.gaussians(block.norm1(mu), cov)
        ref = gaussian.w2_attention(q, qs, k, ks, tau=math.sqrt(CFG.dim // CFG.heads))
        torch.testing.assert_close(out.attentions[layer], ref, rtol=0, atol=1e-6)
        # and against the closed form by broadcasting: ||m_q - m_k||^2 + ||s_q - s_k||^2
        W = ((q[..., :, None, :] - k[..., None, :, :]) ** 2).sum(-1) + \
            ((qs.sqrt()[..., :, None, :] - ks.sqrt()[..., None, :, :]) ** 2).sum(-1)
        torch.testing.assert_close(out.attentions[layer], torch.softmax(-W / math.sqrt(8), -1), rtol=0, atol=1e-5)


def test_embedding_is_eq5_and_covariance_rule():
    torch.manual_seed(1)
    model = StochasticViT(CFG).eval()
    x = _images(2)
    out = model(x)
    patches = F.unfold(x, 4, stride=4).transpose(1, 2)
    raw = model.embed_cov(patches) + model.pos_cov[:, 1:]
    torch.testing.assert_close(out.covariances[0][:, 1:], F.elu(raw) + 1)
    torch.testing.assert_close(out.means[0][:, 1:], model.embed(patches) + model.pos[:, 1:])
    assert (out.covariances[0] > 0).all()
    # block 0's covariance update: Sigma + (A*A) v_Sigma (W_o*W_o)^T, per head
    blk = model.blocks[0]
    _, _, _, _, _, vs = blk.attn.gaussians(blk.norm1(out.means[0]), out.covariances[0])
    A = out.attentions[0]
    var = torch.einsum("bhij,bhjd->bihd", A * A, vs).reshape(2, 17, 16)
    ref = out.covariances[0] + var @ (blk.attn.proj.weight ** 2).T
    torch.testing.assert_close(out.covariances[1], ref)


def test_deterministic_twin_is_dot_product_attention():
    torch.manual_seed(2)
    model = DeterministicViT(ViTConfig(kind="deterministic", dim=16, depth=2, heads=2)).eval()
    out = model(_images())
    blk = model.blocks[0]
    q, k, _ = blk.attn._split(blk.attn.qkv(blk.norm1(out.means[0])))
    torch.testing.assert_close(out.attentions[0], torch.softmax(q @ k.mT / math.sqrt(8), -1))
    assert out.covariances is None


def test_mc_predict_matches_a_loop_of_single_draws():
    torch.manual_seed(3)
    model = StochasticViT(CFG).eval()
    x = _images(3)
    p = mc_predict(model, x, samples=8, seed=5)
    g = torch.Generator().manual_seed(5)
    draws = model(x.repeat(8, 1, 1, 1), sample=True, generator=g).logits.softmax(-1).reshape(8, 3, -1)
    torch.testing.assert_close(p.mean, draws.mean(0))
    torch.testing.assert_close(p.std, draws.std(0, correction=0))
    ref_h = -(draws.mean(0) * draws.mean(0).log()).sum(-1)
    torch.testing.assert_close(p.entropy, ref_h)
    assert (p.low <= p.mean + 1e-6).all() and (p.high >= p.mean - 1e-6).all()
    assert p.std.max() > 0  # the draws differ
    det = build_model(ViTConfig(kind="deterministic", dim=16, depth=2, heads=2)).eval()
    q = mc_predict(det, x, samples=4)
    assert q.std.abs().max() == 0 and q.probs.shape == (4, 3, 10)
    with pytest.raises(ValueError, match="Monte-Carlo samples"):
        mc_predict(model, x, samples=0)


def test_mc_predict_in_passes_draws_what_one_pass_draws():
    """S = 200 draws of 3 images, in passes of DRAW_BATCH // 3 = 85 draws (three passes, the last short): on the
    CPU the same numbers as all 600 image-draws in one pass from the same seed."""
    torch.manual_seed(4)
    model = StochasticViT(CFG).eval()
    x = _images(3)
    assert DRAW_BATCH["cpu"] // 3 < 200
    g = torch.Generator().manual_seed(7)
    one = model(x.repeat(200, 1, 1, 1), sample=True, generator=g).logits.reshape(200, 3, -1)
    torch.testing.assert_close(mc_predict(model, x, samples=200, seed=7).logits, one, rtol=0, atol=1e-6)


def test_entropy_hand_case():
    p = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    torch.testing.assert_close(entropy(p), torch.tensor([math.log(2), 0.0]))


def test_regulariser_by_hand():
    mu = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    cov = torch.tensor([[1.0, 1.0], [4.0, 1.0], [1.0, 9.0]])
    labels = torch.tensor([0, 1, 0])
    mu_pos, cov_pos = mu + 0.5, cov
    D = 2
    # W2^2 between diagonal Gaussians: ||m1 - m2||^2 + ||sqrt(v1) - sqrt(v2)||^2

    def w2(i, j):
        return float(((mu[i] - mu[j]) ** 2).sum() + ((cov[i].sqrt() - cov[j].sqrt()) ** 2).sum())

    def ls(t):
        return math.log(1 / (1 + math.exp(-t)))

    pull = [-ls(-0.5 / D)] * 3  # ||(0.5, 0.5)||^2 = 0.5
    push = [-ls(w2(0, 1) / D), -(ls(w2(1, 0) / D) + ls(w2(1, 2) / D)) / 2, -ls(w2(2, 1) / D)]
    ref = sum(a + b for a, b in zip(pull, push)) / 3
    assert abs(float(w2_regulariser(mu, cov, mu_pos, cov_pos, labels)) - ref) < 1e-5


def test_loss_has_gradients_for_every_parameter():
    torch.manual_seed(4)
    model = StochasticViT(CFG)
    x = _images(8)
    y = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])
    loss, parts = loss_fn(model, x, y, data.augment(x), lam=0.5)
    loss.backward()
    assert set(parts) == {"ce", "w2"}
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_mask_patches_zeroes_whole_patches_and_nothing_else():
    x = _images(5) + 0.01  # no pixel is 0 before masking
    out, masked = mask_patches(x, 4, 0.25, torch.Generator().manual_seed(3))
    assert masked.shape == (5, 16) and masked.sum(1).tolist() == [4] * 5  # round(0.25 x 16) per image
    for b in range(5):
        for p in range(16):
            r, c = divmod(p, 4)
            block, orig = out[b, :, 4 * r:4 * r + 4, 4 * c:4 * c + 4], x[b, :, 4 * r:4 * r + 4, 4 * c:4 * c + 4]
            assert torch.equal(block, torch.zeros_like(block) if masked[b, p] else orig)


def test_pretrain_loss_pulls_each_masked_patch_to_its_unmasked_self():
    """The masked-patch term equals w2_regulariser on the last layer's patch Gaussians, gathered here by a loop:
    anchor = the masked image's token at a masked patch, positive = the unmasked image's token there, every other
    masked patch of the batch a negative. The same seeds give the same mask and the same embedding draws."""
    model = StochasticViT(CFG)
    x = _images(3)
    torch.manual_seed(7)
    loss, parts = pretrain_loss(model, x, 0.5, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(7)
    xm, masked = mask_patches(x, 4, 0.5, torch.Generator().manual_seed(1))
    out = model(torch.cat([xm, x]), sample=True)
    mu, cov = out.means[-1], out.covariances[-1]
    cells = [(b, p) for b in range(3) for p in range(16) if masked[b, p]]
    anchor = [torch.stack([t[b, 1 + p] for b, p in cells]) for t in (mu, cov)]
    positive = [torch.stack([t[3 + b, 1 + p] for b, p in cells]) for t in (mu, cov)]
    ref = w2_regulariser(anchor[0], anchor[1], positive[0], positive[1], torch.arange(len(cells)))
    torch.testing.assert_close(loss, ref)
    assert set(parts) == {"pre"}
    loss.backward()  # it trains the embeddings and every block, not the classifier (no labels)
    assert model.embed_cov.weight.grad.abs().sum() > 0 and model.blocks[0].attn.qkv_cov.weight.grad.abs().sum() > 0
    assert model.head.weight.grad is None


def test_covariance_kl_is_the_kl_to_a_standard_normal():
    cov = torch.rand(2, 5, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 3 + 0.01
    ref = torch.distributions.kl_divergence(torch.distributions.Normal(0.0, cov.sqrt()),
                                            torch.distributions.Normal(0.0, torch.ones_like(cov))).sum(-1).mean()
    torch.testing.assert_close(covariance_kl(cov), ref)
    assert float(covariance_kl(torch.ones(4, 3))) == 0.0  # the prior itself
    model = StochasticViT(CFG)
    x, y = _images(4), torch.tensor([0, 1, 2, 3])
    torch.manual_seed(0)
    with_kl, parts = loss_fn(model, x, y, kl=0.5)
    torch.manual_seed(0)
    plain, _ = loss_fn(model, x, y)
    torch.testing.assert_close(with_kl, plain + 0.5 * covariance_kl(model.embed_gaussians(x)[1]))
    assert set(parts) == {"ce", "kl"}


def test_bad_config_and_bad_images():
    with pytest.raises(ValueError, match="patch_size 5 does not divide"):
        ViTConfig(patch_size=5)
    with pytest.raises(ValueError, match="dim must be an integer from"):
        ViTConfig(dim=10 ** 6)
    with pytest.raises(ValueError, match="heads 5 does not divide dim"):
        ViTConfig(heads=5)
    with pytest.raises(ValueError, match="unknown entries: evil"):
        ViTConfig.from_dict({**CFG.to_dict(), "evil": 1})
    with pytest.raises(ValueError, match=r"expects images of shape \(B, 1, 16, 16\)"):
        StochasticViT(CFG)(torch.rand(2, 3, 16, 16))


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_every_device_matches_float64_cpu(device):
    """The forward pass and the MC predictive on each available device agree with a float64 CPU run."""
    torch.manual_seed(5)
    model = StochasticViT(CFG).eval()
    x = _images()
    ref = model.double()(x.double()).logits
    out = model.float().to(device)(x.to(device))
    assert out.logits.device.type == device
    torch.testing.assert_close(out.logits.cpu().double(), ref, rtol=1e-4, atol=1e-4)
    p = mc_predict(model, x.to(device), samples=4)
    assert p.mean.device.type == device
    torch.testing.assert_close(p.mean.sum(-1).cpu(), torch.ones(4))


# ---- the mixture rule, the likelihood terms, the prototype variances ------------------------------------------

def test_the_mixture_rule_is_the_variance_of_the_mixture_through_w_o():
    """Each head's output is one value drawn with probability A_ij from N(v_j, Sigma_vj) (independently per head),
    then W_o: the rule's variance equals a Monte-Carlo estimate of that mixture's variance (400,000 draws)."""
    torch.manual_seed(6)
    cfg = ViTConfig(dim=8, depth=1, heads=2, rule="mixture")
    model = StochasticViT(cfg).double().eval()
    x = _images(1).double()
    mu, cov = model.embed_gaussians(x)
    attn = model.blocks[0].attn
    q, k, v, qs, ks, vs = attn.gaussians(model.blocks[0].norm1(mu), cov)
    A = attn.weights(q, k, qs, ks)
    rule = attn.variance(A, v, vs, "mixture")[0]                           # (N, D)
    g = torch.Generator().manual_seed(0)
    n, i = 400_000, 3                                                       # query token 3
    heads = []
    for h in range(cfg.heads):
        j = torch.multinomial(A[0, h, i], n, replacement=True, generator=g)  # the value each draw takes
        eps = torch.randn(n, v.shape[-1], generator=g, dtype=torch.float64)
        heads.append(v[0, h, j] + vs[0, h, j].sqrt() * eps)
    z = torch.cat(heads, -1) @ attn.proj.weight.T                           # (n, D) through W_o
    mc = z.var(0)
    torch.testing.assert_close(rule[i], mc, rtol=0.02, atol=1e-4)
    # the 004 rule is the variance of sum_j A_ij v_j for independent values: smaller, and blind to the spread
    old = attn.variance(A, v, vs, "004")[0, i]
    assert bool((old < rule[i]).all())


def test_the_mixture_rule_adds_the_spread_of_the_values_and_nothing_when_attention_picks_one():
    torch.manual_seed(7)
    attn = StochasticViT(ViTConfig(dim=8, depth=1, heads=2, rule="mixture")).blocks[0].attn
    v, vs = torch.randn(1, 2, 5, 4), torch.rand(1, 2, 5, 4) + 0.1
    one = torch.zeros(1, 2, 5, 5)
    one[..., 2] = 1.0                                                       # every query takes value 2
    W2 = attn.proj.weight ** 2
    picked = vs[:, :, 2].reshape(1, 8)                                      # heads concatenated
    torch.testing.assert_close(attn.variance(one, v, vs, "mixture"), (picked @ W2.T).expand(1, 5, 8))
    torch.testing.assert_close(attn.variance(one, v, vs, "004"), (picked @ W2.T).expand(1, 5, 8))
    same = torch.full((1, 2, 5, 5), 0.2)
    flat_v = v[:, :, :1].expand(-1, -1, 5, -1)                              # values that agree: no spread
    torch.testing.assert_close(attn.variance(same, flat_v, vs, "mixture"),
                               (same @ vs).transpose(1, 2).reshape(1, 5, 8) @ W2.T)


def test_the_gaussian_nll_is_torch_distributions_log_prob():
    g = torch.Generator().manual_seed(0)
    y, mu = torch.randn(6, 5, generator=g, dtype=torch.float64), torch.randn(6, 5, generator=g, dtype=torch.float64)
    var = torch.rand(6, 5, generator=g, dtype=torch.float64) * 2 + 0.05
    ref = -torch.distributions.Normal(mu, var.sqrt()).log_prob(y).mean(-1)
    torch.testing.assert_close(gaussian_nll(y, mu, var), ref)
    # as a function of var it is smallest at var = (y - mu)^2: the variance pays to cover the error
    err2 = (y - mu) ** 2
    for f in (0.5, 2.0):
        assert bool((gaussian_nll(y, mu, err2 * f) >= gaussian_nll(y, mu, err2)).all())


def test_the_likelihood_term_is_the_nll_pull_and_the_w2_push():
    g = torch.Generator().manual_seed(1)
    mu, mu_pos = torch.randn(4, 6, generator=g), torch.randn(4, 6, generator=g)
    cov = torch.rand(4, 6, generator=g) + 0.1
    labels = torch.tensor([0, 1, 0, 2])
    full = likelihood_regulariser(mu, cov, mu_pos, labels)
    push = w2_regulariser(mu, cov, mu_pos, cov, labels) - (-F.logsigmoid(
        -gaussian.w2_squared(mu, cov, mu_pos, cov) / 6)).mean()
    pull = -torch.distributions.Normal(mu, cov.sqrt()).log_prob(mu_pos).mean(-1).mean()
    torch.testing.assert_close(full, pull + push)


def test_likelihood_pretraining_trains_the_blocks_covariances_and_leaves_the_embeddings_variances_alone():
    """The likelihood form runs on the means with the embeddings' variances fixed and without the prior: it trains
    the blocks' covariance stream, and no gradient reaches the embeddings' variances (docs/TRAINING.md: through
    the draws, the stream or the prior they were inflated)."""
    torch.manual_seed(8)
    model = StochasticViT(ViTConfig(dim=16, depth=2, heads=2, rule="mixture"))
    x = _images(3)
    loss, parts = pretrain_loss(model, x, 0.5, kl=0.1, generator=torch.Generator().manual_seed(1), term="likelihood")
    assert set(parts) == {"pre"}
    loss.backward()
    attn = model.blocks[0].attn
    assert attn.qkv_cov.weight.grad.abs().sum() > 0 and attn.qkv.weight.grad.abs().sum() > 0
    assert model.embed_cov.weight.grad is None and model.cls_cov.grad is None
    # the same pass with the W2 form does train them
    model.zero_grad()
    pretrain_loss(model, x, 0.5, generator=torch.Generator().manual_seed(1))[0].backward()
    assert model.embed_cov.weight.grad.abs().sum() > 0


def test_prototype_variances_are_eq5_plus_the_scaled_distance():
    torch.manual_seed(9)
    cfg = ViTConfig(dim=16, depth=1, heads=2, layer0="prototypes", prototypes=5)
    model = build_model(cfg).eval()
    train_x = data.load_dataset("digits", "train")[0][:100]
    fit_prototypes(model, train_x, kappa=0.02)
    x = _images(2)
    _, cov = model.embed_gaussians(x)
    patches = F.unfold(x, 4, stride=4).transpose(1, 2)
    eq5 = F.elu(torch.cat([model.cls_cov.expand(2, -1, -1), model.embed_cov(patches)], 1) + model.pos_cov) + 1
    d2 = torch.tensor([[min(float(((p - c) ** 2).sum()) for c in model.proto) for p in img] for img in patches])
    torch.testing.assert_close(cov[:, 1:], eq5[:, 1:] + model.proto_scale * d2[..., None], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(cov[:, 0], eq5[:, 0])                       # the class token has no patch
    d2_train = model.distance(model.patches(train_x))
    assert float(model.proto_scale * d2_train.mean()) == pytest.approx(0.02, rel=1e-4)
    assert float(model.distance(torch.rand(1, 16, 16)).mean()) > 3 * float(d2_train.mean())  # noise is far


def test_new_config_fields_are_checked_and_default_to_what_the_seed_wrote():
    old = {k: v for k, v in CFG.to_dict().items() if k not in ("rule", "layer0", "prototypes")}
    cfg = ViTConfig.from_dict(old)
    assert (cfg.rule, cfg.layer0, cfg.prototypes) == ("004", "eq5", 0)
    for bad, match in (({"rule": "mix"}, "rule must be one of"), ({"rule": 4}, "rule must be one of"),
                       ({"layer0": "mlp"}, "layer0 must be one of"), ({"prototypes": 3}, "prototypes must be"),
                       ({"layer0": "prototypes", "prototypes": 0}, "prototypes must be"),
                       ({"layer0": "prototypes", "prototypes": 5000}, "prototypes must be"),
                       ({"layer0": "prototypes", "prototypes": True}, "prototypes must be"),
                       ({"layer0": "prototypes", "prototypes": 2.0}, "prototypes must be")):
        with pytest.raises(ValueError, match=match):
            ViTConfig.from_dict({**CFG.to_dict(), **bad})


def test_every_model_sees_the_augmented_views():
    """The fair ablation: with views, the cross-entropy covers images and views for the twin too; the W2 term
    only for the stochastic model with lam > 0."""
    torch.manual_seed(10)
    twin = build_model(ViTConfig(kind="deterministic", dim=16, depth=1, heads=2))
    x, y = _images(4), torch.tensor([0, 1, 2, 3])
    views = data.augment(x, torch.Generator().manual_seed(0))
    loss, parts = loss_fn(twin, x, y, views, lam=0.5)
    both = F.cross_entropy(twin(torch.cat([x, views])).logits, y.repeat(2))
    torch.testing.assert_close(loss, both)
    assert set(parts) == {"ce"}


def test_patches_are_unfolds_layout():
    """The patches (B, P, C p p), row-major over the grid, each channel-major then row-major inside: F.unfold's."""
    cfg = ViTConfig(image_size=32, patch_size=8, channels=3, dim=8, depth=1, heads=2)
    x = torch.rand(5, 3, 32, 32)
    torch.testing.assert_close(StochasticViT(cfg).patches(x), F.unfold(x, 8, stride=8).transpose(1, 2),
                               rtol=0, atol=0)
