"""wviz.vit.model: W2 attention inside the model is wviz.gaussian's, the covariance rule, MC prediction, loss."""
import math

import pytest
import torch
import torch.nn.functional as F

from wviz import gaussian
from wviz.vit import data
from wviz.vit.model import (DeterministicViT, StochasticViT, ViTConfig, build_model, covariance_kl, entropy, loss_fn,
                            mask_patches, mc_predict, pretrain_loss, w2_regulariser)

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
    w2 = lambda i, j: float(((mu[i] - mu[j]) ** 2).sum() + ((cov[i].sqrt() - cov[j].sqrt()) ** 2).sum())
    ls = lambda t: math.log(1 / (1 + math.exp(-t)))
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
