"""wviz.fenchel against independent references: autograd and scipy for the dual (9), strong duality with the primal
(4) computed by hand, the Gaussian closed form of Sec. 5, the approximation orders of (15)/(18), T5's masked biased
softmax (20) built by loops, and for the OT part Sinkhorn potentials (wviz.ot, POT) as the optimality certificate of
(40) and (38); bad input."""
import math

import numpy as np
import ot as pot
import pytest
import scipy.optimize
import torch

from wviz import fenchel as F
from wviz.ot import cost_matrix

F64 = torch.float64
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def gen(seed):
    return torch.Generator().manual_seed(seed)


def instance(n, d, seed, batch=(), zscale=2.0, sparse=False):
    """Random templates (n, d), preference u (n,) (some zeros when sparse) and evidence z (*batch, d)."""
    g = gen(seed)
    t = torch.randn(n, d, generator=g, dtype=F64)
    u = torch.rand(n, generator=g, dtype=F64) + 0.05
    if sparse:
        u[::3] = 0
    u = u / u.sum()
    z = zscale * torch.randn(*batch, d, generator=g, dtype=F64)
    return t, u, z


def primal(p, t, u, z, alpha):
    """Problem (4) by hand: alpha/2 ||mu + z - sum p_i t_i||^2 + KL(p || u) (0 log 0 = 0)."""
    p, t, u, z = (x.numpy() for x in (p, t, u, z))
    mu = u @ t
    keep = p > 0
    return alpha / 2 * np.sum((mu + z - p @ t) ** 2) + np.sum(p[keep] * np.log(p[keep] / u[keep]))


# ---- the dual (9) ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n,d", [(6, 2), (5, 3), (4, 9)])   # d <= n: d x d Newton system; n < d: Woodbury form
@pytest.mark.parametrize("alpha", [0.1, 1.0, 5.0])
def test_lambda_star_is_the_dual_optimum(n, d, alpha):
    t, u, z = instance(n, d, seed=n * d, batch=(3,), sparse=True)
    sol = F.solve_dual(t, u, z, alpha)
    assert bool(sol.converged.all()) and float(sol.grad_norm.max()) < 1e-10
    for b in range(3):
        lam = sol.lam[b].clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(F.dual_objective(lam, t, u, z[b], alpha), lam)   # independent gradient
        assert float(grad.norm()) < 1e-9
        # scipy's BFGS on -(9), written out in numpy
        tn, un, zn = t.numpy(), u.numpy(), z[b].numpy()

        def neg(lam_):
            s = tn @ lam_
            keep = un > 0
            m = s[keep].max()
            w = un[keep] * np.exp(s[keep] - m)
            value = lam_ @ (un @ tn + zn) - lam_ @ lam_ / (2 * alpha) - m - np.log(w.sum())
            grad = un @ tn + zn - lam_ / alpha - w @ tn[keep] / w.sum()
            return -value, -grad
        ref = scipy.optimize.minimize(neg, np.zeros(d), jac=True, method="BFGS", options=dict(gtol=1e-11)).x
        np.testing.assert_allclose(sol.lam[b].numpy(), ref, rtol=1e-7, atol=1e-7)
        # strong duality: (4) at p~ of (11) equals (9) at lambda*; p~ beats perturbed feasible p
        p = F.tilted_weights(t, u, sol.lam[b])
        dual = float(F.dual_objective(sol.lam[b], t, u, z[b], alpha))
        assert primal(p, t, u, z[b], alpha) == pytest.approx(dual, abs=1e-10)
        for k in range(5):
            q = p * torch.exp(0.1 * torch.randn(n, generator=gen(k), dtype=F64))
            assert primal(q / q.sum(), t, u, z[b], alpha) >= dual - 1e-12
        # lambda* = alpha (mu + z - h): the stationarity of (9) ties it to h of (12)
        h = F.h_exact(t, u, z[b], alpha)
        torch.testing.assert_close(sol.lam[b], alpha * (u @ t + z[b] - h), atol=1e-9, rtol=0)


def test_nearly_one_hot_weights_at_large_alpha_converge():
    """mu + z outside the templates' hull and alpha = 1000: the tilted weights are nearly one-hot and lambda*
    sits on the kink between two templates, where Newton with backtracking zig-zags."""
    t, u, z = instance(6, 2, seed=3, batch=(40,), zscale=10.0)
    t = 10 * t    # on this batch, Newton with Armijo backtracking was still at gradient norm 4.7 after 100 steps
    sol = F.solve_dual(t, u, z, 1000.0)
    assert bool(sol.converged.all()) and sol.n_iter <= 30
    for b in range(0, 40, 13):
        p = F.tilted_weights(t, u, sol.lam[b])
        assert primal(p, t, u, z[b], 1000.0) == pytest.approx(float(F.dual_objective(sol.lam[b], t, u, z[b], 1000.0)),
                                                               rel=1e-10)


def test_batched_alpha_and_broadcasting_match_single_solves():
    t, u, z = instance(5, 3, seed=1, batch=(4,))
    alphas = torch.tensor([0.1, 0.5, 2.0, 10.0], dtype=F64)
    batched = F.solve_dual(t, u, z, alphas).lam
    for b in range(4):
        torch.testing.assert_close(batched[b], F.solve_dual(t, u, z[b], float(alphas[b])).lam, atol=1e-12, rtol=0)
    # templates batched too (one sequence per row), z broadcast
    T = torch.stack([t, t + 1])
    both = F.solve_dual(T, u, z[0], 1.0).lam
    torch.testing.assert_close(both[1], F.solve_dual(t + 1, u, z[0], 1.0).lam, atol=1e-12, rtol=0)


def test_shared_gaussian_with_a_square_batch_of_z():
    """d evidence vectors in d dimensions: a shared Sigma must not be mistaken for a matrix right-hand side."""
    g = gen(14)
    A = torch.randn(3, 3, generator=g, dtype=F64)
    u = F.Gaussian(torch.randn(3, generator=g, dtype=F64), A @ A.T + 0.1 * torch.eye(3, dtype=F64))
    z = torch.randn(3, 3, generator=g, dtype=F64)
    batched = F.solve_dual(None, u, z, 0.5).lam
    for b in range(3):
        torch.testing.assert_close(batched[b], F.solve_dual(None, u, z[b], 0.5).lam, atol=1e-12, rtol=0)


def test_float32_in_float32_out():
    t, u, z = instance(5, 2, seed=2)
    sol = F.solve_dual(t.float(), u.float(), z.float(), 1.0)
    assert sol.lam.dtype == torch.float32
    assert F.h_approx(t.float(), u.float(), z.float(), 1.0).dtype == torch.float32
    torch.testing.assert_close(sol.lam.double(), F.solve_dual(t, u, z, 1.0).lam, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_runs_on_device(device):
    t, u, z = (x.to(device) for x in instance(6, 4, seed=3, batch=(2,)))
    sol = F.solve_dual(t, u, z, 1.0)
    assert sol.lam.device.type == device and float(sol.grad_norm.max()) < 1e-10


# ---- Sec. 5: the Gaussian preference ----------------------------------------------------------------------------

@pytest.mark.parametrize("alpha", [0.01, 0.3, 1.0, 7.0])
def test_gaussian_preference_closed_form(alpha):
    g = gen(4)
    mu, z = torch.randn(3, generator=g, dtype=F64), 3 * torch.randn(3, generator=g, dtype=F64)
    u = F.Gaussian(mu)                                        # N(mu, I)
    b = mu + z
    expected = mu / (1 + alpha) + alpha * b / (1 + alpha)     # Sec. 5
    torch.testing.assert_close(F.gaussian_estimate(mu, z, alpha), expected)
    sol = F.solve_dual(None, u, z, alpha)
    torch.testing.assert_close(sol.lam, alpha / (alpha + 1) * (b - mu), atol=1e-12, rtol=0)
    torch.testing.assert_close(F.h_exact(None, u, z, alpha), expected, atol=1e-12, rtol=0)
    # general Sigma: (14) is exact, so (15) is lambda* (footnote 7 for Sigma = I)
    A = torch.randn(3, 3, generator=g, dtype=F64)
    u2 = F.Gaussian(mu, A @ A.T + 0.1 * torch.eye(3, dtype=F64))
    ref = alpha * np.linalg.solve(np.eye(3) + alpha * u2.sigma.numpy(), z.numpy())
    np.testing.assert_allclose(F.solve_dual(None, u2, z, alpha).lam.numpy(), ref, atol=1e-12)
    np.testing.assert_allclose(F.lambda_approx(None, u2, z, alpha, order=2).numpy(), ref, atol=1e-12)


@pytest.mark.parametrize("alpha", [0.01, 0.3, 1.0, 7.0])
def test_newton_from_zero_or_alpha_z_reaches_the_gaussian_closed_form(alpha):
    """The default start (15) is exact for a Gaussian (n_iter = 0), so start elsewhere and let Newton do the work."""
    g = gen(4)
    mu, z = torch.randn(3, generator=g, dtype=F64), 3 * torch.randn(3, generator=g, dtype=F64)
    u = F.Gaussian(mu)
    b = mu + z
    expected = mu / (1 + alpha) + alpha * b / (1 + alpha)                  # Sec. 5
    assert F.solve_dual(None, u, z, alpha).n_iter == 0
    for lam0 in (torch.zeros(3, dtype=F64), alpha * z):
        sol = F.solve_dual(None, u, z, alpha, lam0=lam0)
        assert sol.n_iter > 0 and bool(sol.converged) and float(sol.grad_norm) < 1e-10
        torch.testing.assert_close(u.grad(sol.lam), expected, atol=1e-12, rtol=0)   # h = mu + Sigma lambda*
    # general Sigma from 0, batched over z: lambda* = alpha (I + alpha Sigma)^-1 z by numpy
    A = torch.randn(3, 3, generator=g, dtype=F64)
    S = A @ A.T + 0.1 * torch.eye(3, dtype=F64)
    zs = torch.randn(4, 3, generator=g, dtype=F64)
    sol = F.solve_dual(None, F.Gaussian(mu, S), zs, alpha, lam0=torch.zeros(3, dtype=F64))
    assert sol.n_iter > 0 and float(sol.grad_norm.max()) < 1e-10
    ref = alpha * np.linalg.solve(np.eye(3) + alpha * S.numpy(), zs.numpy().T).T
    np.testing.assert_allclose(sol.lam.numpy(), ref, atol=1e-12)


def test_gaussian_log_mgf_and_dual_against_quadrature_and_autograd():
    """log E exp<lam, t> for t ~ N(b, Sigma) is <lam, b> + lam' Sigma lam / 2: checked against Gauss-Hermite
    quadrature of E exp<lam, t> (numpy), and (9) built on it against that closed form, its gradient by autograd."""
    g = gen(15)
    b = torch.randn(2, generator=g, dtype=F64)
    A = torch.randn(2, 2, generator=g, dtype=F64)
    S = A @ A.T + 0.2 * torch.eye(2, dtype=F64)
    u = F.Gaussian(b, S)
    lam = torch.randn(6, 2, generator=g, dtype=F64)
    closed = lam @ b + 0.5 * ((lam @ S) * lam).sum(-1)
    xi, w = np.polynomial.hermite_e.hermegauss(40)                  # nodes and weights for exp(-x^2 / 2)
    w = w / np.sqrt(2 * np.pi)
    X = np.stack(np.meshgrid(xi, xi, indexing="ij"), -1).reshape(-1, 2)
    W = np.outer(w, w).reshape(-1)
    t = b.numpy() + X @ np.linalg.cholesky(S.numpy()).T            # t ~ N(b, Sigma)
    quad = np.log(np.exp(lam.numpy() @ t.T) @ W)
    np.testing.assert_allclose(quad, closed.numpy(), atol=1e-11)
    np.testing.assert_allclose(F.log_mgf(lam, None, u).numpy(), quad, atol=1e-11)
    z, alpha = torch.randn(2, generator=g, dtype=F64), 0.7
    dual = F.dual_objective(lam, None, u, z, alpha)
    torch.testing.assert_close(dual, lam @ (b + z) - (lam * lam).sum(-1) / (2 * alpha) - closed, atol=1e-13, rtol=0)
    lam_ = lam.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(F.dual_objective(lam_, None, u, z, alpha).sum(), lam_)
    torch.testing.assert_close(grad, z - lam / alpha - lam @ S, atol=1e-13, rtol=0)   # b + z - lam/alpha - (b + S lam)
    (grad_mgf,) = torch.autograd.grad(F.log_mgf(lam_, None, u).sum(), lam_)
    torch.testing.assert_close(u.grad(lam), grad_mgf, atol=1e-13, rtol=0)


class IndependentCoordinates(F.Preference):
    """A user-written preference: the coordinates of t are independent, t_k ~ sum_j w[k, j] delta_{v[k, j]}, so
    log M(lam) = sum_k log sum_j w[k, j] exp(lam_k v[k, j]). Only log_mgf, grad and hessian are written."""

    def __init__(self, values, weights):
        self.v, self.log_w = values, weights.log()
        self.d = values.shape[0]

    def _tilted(self, lam):                                # (..., d, m): the tilted law of each coordinate
        return torch.softmax(self.log_w + lam[..., :, None] * self.v, dim=-1)

    def log_mgf(self, lam):
        return torch.logsumexp(self.log_w + lam[..., :, None] * self.v, dim=-1).sum(-1)

    def grad(self, lam):
        return (self._tilted(lam) * self.v).sum(-1)

    def hessian(self, lam):
        p = self._tilted(lam)
        m = (p * self.v).sum(-1)
        return torch.diag_embed((p * self.v ** 2).sum(-1) - m ** 2)


def test_a_user_defined_preference_plugs_into_the_dual():
    """The product of two 1-D discrete laws, as a Preference, against the same u written out as a discrete
    preference over the grid of all (v_1j, v_2k) (templates (12, 2)): same log-MGF, same lambda*, same h, and
    lambda* is stationary for (9) (autograd) with strong duality against the primal (4) on the grid."""
    g = gen(16)
    v = torch.randn(2, 4, generator=g, dtype=F64) * 1.5
    v[1, 3] = v[1, 2]                                      # a repeated value is fine (weights add up)
    w = torch.rand(2, 4, generator=g, dtype=F64) + 0.1
    w[0, 3] = 0.0                                          # and a zero weight (log 0 = -inf: never drawn)
    w = w / w.sum(-1, keepdim=True)
    pref = IndependentCoordinates(v, w)
    grid = torch.stack(torch.meshgrid(v[0], v[1], indexing="ij"), -1).reshape(-1, 2)
    u_grid = torch.outer(w[0], w[1]).reshape(-1)
    z = 2 * torch.randn(5, 2, generator=g, dtype=F64)
    for alpha in (0.2, 1.0, 6.0):
        lam = torch.randn(5, 2, generator=g, dtype=F64)
        torch.testing.assert_close(F.log_mgf(lam, None, pref), F.log_mgf(lam, grid, u_grid), atol=1e-12, rtol=0)
        sol = F.solve_dual(None, pref, z, alpha)
        assert bool(sol.converged.all()) and float(sol.grad_norm.max()) < 1e-10
        torch.testing.assert_close(sol.lam, F.solve_dual(grid, u_grid, z, alpha).lam, atol=1e-10, rtol=0)
        torch.testing.assert_close(F.h_exact(None, pref, z, alpha), F.h_exact(grid, u_grid, z, alpha),
                                   atol=1e-10, rtol=0)
        for k in range(5):
            lam_ = sol.lam[k].clone().requires_grad_(True)
            (grad,) = torch.autograd.grad(F.dual_objective(lam_, None, pref, z[k], alpha), lam_)
            assert float(grad.norm()) < 1e-9
            p = F.tilted_weights(grid, u_grid, sol.lam[k])
            dual = float(F.dual_objective(sol.lam[k], None, pref, z[k], alpha))
            assert primal(p, grid, u_grid, z[k], alpha) == pytest.approx(dual, abs=1e-9)
    moments = F.mean_and_covariance(None, pref)
    torch.testing.assert_close(moments.mu, u_grid @ grid)
    c = grid - u_grid @ grid
    torch.testing.assert_close(moments.sigma, c.T @ (u_grid[:, None] * c))


# ---- the approximations (15), (16)/(18) and the relative deviation of Sec. 8 -------------------------------------

def test_first_order_error_shrinks_like_alpha_squared():
    alphas = [0.3, 0.1, 0.03, 0.01, 0.003]
    for seed in range(6):
        t, u, z = instance(7, 3, seed=10 + seed)
        errs = [float((F.h_exact(t, u, z, a) - F.h_approx(t, u, z, a, order=1)).norm()) for a in alphas]
        assert all(e2 < e1 for e1, e2 in zip(errs, errs[1:])), errs
        # lambda* - alpha z = O(alpha^2): the error over alpha^2 settles to a constant
        ratios = [e / a ** 2 for e, a in zip(errs, alphas)]
        assert ratios[-1] == pytest.approx(ratios[-2], rel=0.1)
        # the relative deviation of Sec. 8 is O(alpha)
        devs = [float(F.relative_deviation(F.solve_dual(t, u, z, a).lam, z, a)) for a in alphas]
        assert all(d2 < d1 for d1, d2 in zip(devs, devs[1:])) and devs[-1] < 0.05 * devs[0], devs


def test_second_order_at_least_as_accurate_for_small_alpha():
    for seed in range(10):
        t, u, z = instance(6, 2, seed=30 + seed)
        for a in (0.01, 0.03, 0.1):
            h = F.h_exact(t, u, z, a)
            e1 = float((h - F.h_approx(t, u, z, a, order=1)).norm())
            e2 = float((h - F.h_approx(t, u, z, a, order=2)).norm())
            assert e2 <= e1, (seed, a, e1, e2)
            lam = F.solve_dual(t, u, z, a).lam
            assert float((lam - F.lambda_approx(t, u, z, a, 2)).norm()) <= float((lam - a * z).norm())


def test_approximation_formulas_by_hand():
    t, u, z = instance(5, 2, seed=5)
    a = 0.7
    w = u * torch.exp(a * (t @ z))
    w = w / w.sum()                                           # the weights of (18)
    torch.testing.assert_close(F.attention_weights(t, u, z, a), w)
    torch.testing.assert_close(F.h_approx(t, u, z, a, 1), w @ t)
    mu = u @ t
    S = (t - mu).T @ torch.diag(u) @ (t - mu)
    lam2 = a * torch.linalg.solve(torch.eye(2, dtype=F64) + a * S, z)
    torch.testing.assert_close(F.lambda_approx(t, u, z, a, 2), lam2)
    moments = F.mean_and_covariance(t, u)
    torch.testing.assert_close(moments.mu, mu)
    torch.testing.assert_close(moments.sigma, S)
    # uniform u, alpha = 1: dot-product attention (Sec. 7)
    uni = torch.full((5,), 0.2, dtype=F64)
    torch.testing.assert_close(F.attention_weights(t, uni, z, 1.0), torch.softmax(t @ z, 0))


def test_relative_deviation():
    lam = torch.tensor([[1.0, 0.0], [0.0, 0.0], [3.0, 4.0]], dtype=F64)
    z = torch.tensor([[2.0, 0.0], [0.0, 0.0], [0.0, 0.0]], dtype=F64)
    np.testing.assert_allclose(F.relative_deviation(lam, z, 0.5).numpy(), [0.0, 0.0, 1.0])
    np.testing.assert_allclose(F.relative_deviation(lam, z, torch.tensor([1.0, 1.0, 1.0])).numpy(), [1.0, 0.0, 1.0])


# ---- T5: (19) and (20) ----------------------------------------------------------------------------------------------

def test_t5_preference_and_attention_match_a_masked_biased_softmax():
    g = gen(6)
    n, d, R = 7, 4, 3
    t = torch.randn(n, d, generator=g, dtype=F64)
    z = torch.randn(n, d, generator=g, dtype=F64)            # one evidence per target position j
    bias = torch.randn(2 * R + 1, generator=g, dtype=F64)
    mask = torch.tensor([False, True, False, False, True, False, False])
    j = torch.arange(n)
    u = F.t5_preference(bias, mask, j)                        # (n targets, n words)
    for jj in range(n):
        # by hand, the way T5 adds its position bias and mask to the scores
        b = np.array([bias[min(max(jj - i, -R), R) + R].item() for i in range(n)])
        ref_u = np.where(mask.numpy(), 0.0, np.exp(b))
        np.testing.assert_allclose(u[jj].numpy(), ref_u / ref_u.sum(), atol=1e-15)
        logits = t.numpy() @ z[jj].numpy() + b + np.where(mask.numpy(), -np.inf, 0.0)
        ref = np.exp(logits - logits.max())
        ref /= ref.sum()
        # (20) == (18) with alpha = 1 and u of (19) == T5's softmax(scores + bias + mask)
        np.testing.assert_allclose(F.attention_weights(t, u[jj], z[jj], 1.0).numpy(), ref, atol=1e-14)
        np.testing.assert_allclose(F.t5_attention(t @ z[jj], bias, mask, jj).numpy(), ref, atol=1e-14)
    torch.testing.assert_close(F.t5_attention((z @ t.T), bias, mask, j), F.attention_weights(t, u, z, 1.0))


# ---- Sec. 9 / Appendix D: OT-based attention -----------------------------------------------------------------------

def ot_instance(seed, N=9, n=3, d=2):
    """A universe A of N templates whose first n form T (u > 0 there), M = squared Euclidean cost."""
    g = gen(seed)
    A = torch.randn(N, d, generator=g, dtype=F64)
    u = torch.zeros(N, dtype=F64)
    u[:n] = torch.rand(n, generator=g, dtype=F64) + 0.1
    u /= u.sum()
    z = torch.randn(d, generator=g, dtype=F64)
    return A, u, z, cost_matrix(A, A)


@pytest.mark.parametrize("gamma", [0.05, 0.5, 3.0])
def test_true_preference_minimises_w_gamma(gamma):
    A, u, z, M = ot_instance(7)
    ut = F.true_preference(u, M, gamma)
    assert float(ut.min()) > 0 and float(ut.sum()) == pytest.approx(1.0, abs=1e-14)
    # optimality certificate of min_p W_gamma(p, u; M): the Sinkhorn potential f = dW/dp is constant on A
    keep = (u > 0).numpy()   # templates outside T carry no mass of u
    res = pot.sinkhorn(ut.numpy(), u.numpy()[keep], M.numpy()[:, keep], gamma, method="sinkhorn_log",
                       stopThr=1e-13, numItermax=100000, log=True)
    f = res[1]["log_u"] * gamma
    assert np.ptp(f) < 1e-8
    # and the plan is the closed form behind (40): X[t, t'] = u(t') exp(-M(t, t')/gamma) / Z(t')
    X = torch.softmax(-M / gamma, dim=0) * u
    np.testing.assert_allclose(res[0], X.numpy()[:, keep], atol=1e-12)


def test_true_preference_tends_to_u():
    A, u, z, M = ot_instance(8)
    gaps = [float((F.true_preference(u, M, g) - u).abs().sum()) for g in (1.0, 0.1, 0.01, 0.001)]
    assert all(b < a for a, b in zip(gaps, gaps[1:])) and gaps[-1] < 1e-6


@pytest.mark.parametrize("alpha,gamma", [(0.5, 0.2), (2.0, 1.0), (0.1, 0.01)])
def test_ot_attention_is_a_distribution_and_spreads_beyond_T(alpha, gamma):
    A, u, z, M = ot_instance(9)
    p = F.ot_attention(A, u, z, alpha, gamma, M)
    assert float(p.min()) >= 0 and float(p.sum()) == pytest.approx(1.0, abs=1e-14)
    assert float(p[3:].sum()) > 0                          # templates outside T get weight
    # (25) written with Z_i, by loops
    s = alpha * (A @ z)
    ref = np.zeros(9)
    for i in range(3):
        e = np.exp(((s - M[:, i]) / gamma).numpy())
        ref += u[i].item() * e / e.sum()
    np.testing.assert_allclose(p.numpy(), ref, atol=1e-13)


def test_exact_ot_solution_is_optimal_for_34():
    A, u, z, M = ot_instance(10)
    alpha, gamma = 1.5, 0.4
    sol = F.solve_ot_dual(A, u, z, alpha, gamma, M)
    assert float(sol.grad_norm) < 1e-10
    p = F.ot_exact(A, u, z, alpha, gamma, M)
    mu_t = F.true_preference(u, M, gamma) @ A
    h = p @ A
    torch.testing.assert_close(sol.lam, alpha * (mu_t + z - h), atol=1e-9, rtol=0)
    # first-order optimality of (34) over the simplex: dW_gamma/dp(t) - <t, lambda*> constant, with dW/dp the
    # Sinkhorn potential f of W_gamma(p, u; M) (zeros of u are dropped: they carry no mass)
    keep = (u > 0).numpy()
    res = pot.sinkhorn(p.numpy(), u.numpy()[keep], M.numpy()[:, keep], gamma, method="sinkhorn_log", stopThr=1e-13,
                       numItermax=100000, log=True)
    f = res[1]["log_u"] * gamma
    assert np.ptp(f - (A @ sol.lam).numpy()) < 1e-7
    # autograd gradient of (39) vanishes
    lam = sol.lam.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(F.ot_dual_objective(lam, A, u, z, alpha, gamma, M), lam)
    assert float(grad.norm()) < 1e-9


def test_exact_and_approximate_ot_agree_as_alpha_and_alpha_over_gamma_shrink():
    A, u, z, M = ot_instance(11)
    gamma = 0.5
    gaps = [float((F.ot_exact(A, u, z, a, gamma, M) - F.ot_attention(A, u, z, a, gamma, M)).abs().sum())
            for a in (1.0, 0.3, 0.1, 0.03, 0.01)]
    assert all(b < a for a, b in zip(gaps, gaps[1:])) and gaps[-1] < 1e-3 * gaps[0]


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_exact_and_approximate_ot_agree_as_alpha_over_gamma_shrinks_at_fixed_alpha(seed):
    """alpha = 0.05 fixed, gamma growing: alpha / gamma from 1e-2 to 6e-4. The gap ||p*(38) - p*(25)||_1 falls
    like (alpha / gamma)^2. (At small gamma the squared-Euclidean cost pins p to u whatever lambda, so the gap is
    also small there; the sweep starts where alpha / gamma is already small.)"""
    A, u, z, M = ot_instance(seed)
    alpha, gammas = 0.05, (5.0, 10.0, 20.0, 40.0, 80.0)
    gaps = [float((F.ot_exact(A, u, z, alpha, g, M) - F.ot_attention(A, u, z, alpha, g, M)).abs().sum())
            for g in gammas]
    assert all(b < a for a, b in zip(gaps, gaps[1:])) and gaps[-1] < 0.02 * gaps[0], gaps
    scaled = [gap / (alpha / g) ** 2 for gap, g in zip(gaps, gammas)]
    assert scaled[-1] == pytest.approx(scaled[-2], rel=0.1), scaled


def test_group_cost_shares_weight_within_a_group():
    """Sec. 9's extreme case: M = 0 inside a group, inf across; templates of a group have equal <t, z>."""
    A = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]], dtype=F64)
    group = torch.tensor([0, 0, 0, 1, 1])
    M = torch.where(group[:, None] == group[None, :], 0.0, math.inf).to(F64)
    u = torch.tensor([0.6, 0.0, 0.0, 0.4, 0.0], dtype=F64)
    p = F.ot_attention(A, u, torch.tensor([0.3, -0.2], dtype=F64), 1.0, 0.5, M)
    np.testing.assert_allclose(p.numpy(), [0.2, 0.2, 0.2, 0.2, 0.2], atol=1e-15)


# ---- bad input --------------------------------------------------------------------------------------------------

def test_bad_input_raises_plain_errors():
    t, u, z = instance(4, 2, seed=12)
    with pytest.raises(ValueError, match="sum to 1.5"):
        F.solve_dual(t, u * 1.5, z, 1.0)
    with pytest.raises(ValueError, match="negative weight"):
        F.solve_dual(t, torch.tensor([1.2, -0.2, 0.0, 0.0]), z, 1.0)
    with pytest.raises(ValueError, match="alpha must be a positive"):
        F.solve_dual(t, u, z, 0.0)
    with pytest.raises(ValueError, match="alpha must be a positive"):
        F.h_approx(t, u, z, -1.0)
    with pytest.raises(ValueError, match="one weight per template"):
        F.solve_dual(t, u[:3] / u[:3].sum(), z, 1.0)
    with pytest.raises(ValueError, match="dimension d = 2"):
        F.solve_dual(t, u, torch.zeros(3), 1.0)
    with pytest.raises(ValueError, match="NaN or inf"):
        F.solve_dual(t, u, torch.tensor([math.nan, 0.0]), 1.0)
    with pytest.raises(ValueError, match="order must be"):
        F.h_approx(t, u, z, 1.0, order=3)
    with pytest.raises(ValueError, match="positive semi-definite"):
        F.solve_dual(None, F.Gaussian(torch.zeros(2), -torch.eye(2)), z, 1.0)
    with pytest.raises(ValueError, match="pass templates=None"):
        F.solve_dual(t, F.Gaussian(torch.zeros(2)), z, 1.0)
    with pytest.raises(ValueError, match="lam0 of shape"):
        F.solve_dual(t, u, torch.zeros(3, 2), 1.0, lam0=torch.zeros(2, 2))
    with pytest.raises(ValueError, match="lam0 must be a vector of dimension d = 2"):
        F.solve_dual(t, u, z, 1.0, lam0=torch.zeros(3))
    with pytest.raises(ValueError, match="every word is masked"):
        F.t5_preference(torch.zeros(3), torch.tensor([True, True]), 0)
    with pytest.raises(ValueError, match="odd length"):
        F.t5_preference(torch.zeros(4), torch.tensor([False, True]), 0)
    with pytest.raises(ValueError, match="target position"):
        F.t5_preference(torch.zeros(3), torch.tensor([False, True]), 5)
    A, uu, zz, M = ot_instance(13)
    with pytest.raises(ValueError, match="gamma must be a positive"):
        F.ot_attention(A, uu, zz, 1.0, 0.0, M)
    with pytest.raises(ValueError, match="non-negative"):
        F.true_preference(uu, M - 1.0, 0.5)
    Ms = M.clone()
    Ms[0, 1] += 1.0
    with pytest.raises(ValueError, match=r"symmetric, but M\[0, 1\]"):
        F.ot_attention(A, uu, zz, 1.0, 0.5, Ms)
    with pytest.raises(ValueError, match="N x N"):
        F.ot_exact(A, uu, zz, 1.0, 0.5, M[:3, :3])
