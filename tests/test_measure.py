"""wviz.measure against independent references: torch's scaled_dot_product_attention and numpy (Prop. 9), brute
force over permutations and scipy's 1-D W1, finite differences, scipy's SLSQP (Thm. 14), and the bounds of
Thm. 23 and Cor. 30 on instances where their assumptions hold (plus the instance where Cor. 30 fails)."""
import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.optimize import minimize
from scipy.stats import wasserstein_distance

from wviz import measure as M

torch.set_num_threads(1)


def rng(seed):
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=rng(seed), dtype=torch.float64)


def np_attention(q, k, v, potential, tau, w=None):
    """softmax_j(a(q_i, k_j) + log w_j) v with numpy (Def. 1 with a prior over the keys)."""
    q, k, v = (np.asarray(t, dtype=float) for t in (q, k, v))
    a = q @ k.T / tau if potential == "dot" else -((q[:, None] - k[None]) ** 2).sum(-1) / tau
    if w is not None:
        a = a + np.log(np.asarray(w, dtype=float))
    e = np.exp(a - a.max(1, keepdims=True))
    return (e / e.sum(1, keepdims=True)) @ v


# ---------------------------------------------------------------------------------------------- Prop. 9

@pytest.mark.parametrize("tau", [0.3, 1.0, math.sqrt(8)])
def test_prop9_dot_attention_kernel_is_scaled_dot_product_attention(tau):
    q, k, v = randn(5, 8, seed=1), randn(7, 8, seed=2), randn(7, 3, seed=3)
    W_Q, W_K = randn(8, 4, seed=4), randn(8, 4, seed=5)
    ours = M.attention_kernel(q, M.empirical(k), "dot", tau, W_Q, W_K, values=v)
    ref = F.scaled_dot_product_attention((q @ W_Q)[None], (k @ W_K)[None], v[None], scale=1 / tau)[0]
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-12)


def test_prop9_gaussian_kernel_and_weighted_measures_match_numpy():
    q, k, v = randn(4, 2, seed=6), randn(6, 2, seed=7), randn(6, 2, seed=8)
    ours = M.attention_kernel(q, M.empirical(k), "gaussian", 0.7, values=v)
    np.testing.assert_allclose(ours.numpy(), np_attention(q, k, v, "gaussian", 0.7), atol=1e-12)
    w = torch.tensor([1.0, 2, 3, 1, 1, 5])
    ours = M.attention_kernel(q, M.empirical(k, w), "dot", 1.3, values=v)
    np.testing.assert_allclose(ours.numpy(), np_attention(q, k, v, "dot", 1.3, w / w.sum()), atol=1e-12)


def test_softmatch_rows_are_boltzmann_gibbs_and_weights_act_like_copies():
    x, y = randn(3, 2, seed=9), randn(5, 2, seed=10)
    nu = M.empirical(y, torch.tensor([1.0, 2, 1, 1, 3]))
    P = M.softmatch(x, nu, "gaussian", 0.5)
    G = torch.exp(M.log_potential(x, y, "gaussian", 0.5))
    psi = M.boltzmann_gibbs(nu, G)                         # Def. 3 with g = G(x_i, .), batched over i
    torch.testing.assert_close(P, psi.weights, rtol=0, atol=1e-15)
    Gw = (G * nu.weights).numpy()
    np.testing.assert_allclose(psi.weights.numpy(), Gw / Gw.sum(1, keepdims=True), atol=1e-15)
    copies = torch.cat([y[:1], y[1:2], y[1:2], y[2:4], y[4:], y[4:], y[4:]])   # the weights as repeated atoms
    out_w = M.attention_kernel(x, nu, "gaussian", 0.5)
    out_c = M.attention_kernel(x, M.empirical(copies), "gaussian", 0.5)
    torch.testing.assert_close(out_w, out_c, rtol=0, atol=1e-14)


# ---------------------------------------------------------------------------------------------- the flow

def test_flow_layers_are_self_attention_with_residual_and_norm():
    x0 = randn(9, 2, seed=11)
    W = tuple(randn(2, 2, seed=s) / 2 ** 0.5 for s in (12, 13, 14))
    traj = M.self_attention_flow(x0, 4, "dot", 0.8, W, residual=True, norm=True)
    assert traj.shape == (5, 9, 2)
    for h in range(4):
        x = traj[h].numpy()
        y = x + np_attention(x @ W[0].numpy(), x @ W[1].numpy(), x @ W[2].numpy(), "dot", 0.8)
        np.testing.assert_allclose(traj[h + 1].numpy(), y / np.linalg.norm(y, axis=1, keepdims=True), atol=1e-12)
    plain = M.self_attention_flow(x0, 2, "gaussian", 1.0)
    np.testing.assert_allclose(plain[1].numpy(), np_attention(x0, x0, x0, "gaussian", 1.0), atol=1e-12)


def test_unshared_projections_use_one_triple_per_layer():
    x0 = randn(6, 2, seed=15)
    Ws = [tuple(randn(2, 2, seed=10 * h + s) for s in range(3)) for h in range(3)]
    traj = M.self_attention_flow(x0, 3, "gaussian", 2.0, Ws, shared=False)
    for h, W in enumerate(Ws):
        x = traj[h].numpy()
        ref = np_attention(x @ W[0].numpy(), x @ W[1].numpy(), x @ W[2].numpy(), "gaussian", 2.0)
        np.testing.assert_allclose(traj[h + 1].numpy(), ref, atol=1e-12)
    shared = M.self_attention_flow(x0, 3, "gaussian", 2.0, Ws[0], shared=True)
    torch.testing.assert_close(shared, M.self_attention_flow(x0, 3, "gaussian", 2.0, [Ws[0]] * 3, shared=False))


# ---------------------------------------------------------------------------------------------- W1

@pytest.mark.parametrize("ground,p", [("l1", 1), ("l2", 2)])
def test_w1_is_the_best_permutation_for_equal_sizes(ground, p):
    for seed in range(4):
        x, y = randn(6, 3, seed=seed), randn(6, 3, seed=seed + 50) + 0.5
        D = torch.cdist(x, y, p=p).numpy()
        brute = min(D[range(6), list(s)].mean() for s in itertools.permutations(range(6)))   # Sec. 6.1 formula
        assert abs(M.w1(x, y, ground).item() - brute) < 1e-12


def test_w1_unequal_weighted_in_one_dimension_matches_scipy():
    x, y = randn(7, 1, seed=20), randn(4, 1, seed=21)
    a, b = torch.rand(7, generator=rng(1), dtype=torch.float64), torch.rand(4, generator=rng(2), dtype=torch.float64)
    ours = M.w1(M.empirical(x, a), M.empirical(y, b))
    assert abs(ours.item() - wasserstein_distance(x[:, 0], y[:, 0], a, b)) < 1e-12


# ---------------------------------------------------------------------------------------------- bounds

def _instances():
    """Random instances where Thm. 23's assumptions hold: tokens in a bounded box, both potentials, identity or
    random projections, several temperatures."""
    out = []
    for seed, potential, tau, random_w in itertools.product(range(2), M.POTENTIALS, (0.5, 2.0), (False, True)):
        x = torch.rand(8, 2, generator=rng(seed), dtype=torch.float64) - 0.5
        W = tuple(randn(2, 2, seed=100 + 3 * seed + s) / 2 ** 0.5 for s in range(3)) if random_w else None
        out.append((x, potential, tau, W))
    return out


@pytest.mark.parametrize("x,potential,tau,W", _instances())
def test_thm23_constants_hold_on_the_box(x, potential, tau, W):
    lo, hi = x.amin(0) - 0.1, x.amax(0) + 0.1
    c = M.thm23_constants(lo, hi, potential, tau, W)
    W_Q, W_K, W_V = W if W is not None else (None, None, torch.eye(2, dtype=torch.float64))
    g = rng(7)
    corners = torch.tensor(list(itertools.product(*zip(lo.tolist(), hi.tolist()))), dtype=torch.float64)
    pts = torch.cat([corners, lo + (hi - lo) * torch.rand(400, 2, generator=g, dtype=torch.float64)])
    G = torch.exp(M.log_potential(pts, pts, potential, tau, W_Q, W_K))
    assert G.min() >= c.eps * (1 - 1e-12) and G.max() <= c.sup * (1 + 1e-12)
    assert abs(c.diam - (hi - lo).sum().item()) < 1e-12
    # Lipschitz in l1: |G(x, y) - G(x', y)| <= lip_first ||x - x'||_1 for random pairs, and likewise in y
    a, b, y = pts[:200], pts[200:400], pts[torch.randperm(len(pts), generator=g)[:200]]
    da = (a - b).abs().sum(-1)
    Ga = torch.exp(M.log_potential(a, y, potential, tau, W_Q, W_K)).diagonal()
    Gb = torch.exp(M.log_potential(b, y, potential, tau, W_Q, W_K)).diagonal()
    assert ((Ga - Gb).abs() <= c.lip_first * da + 1e-12).all()
    Ga = torch.exp(M.log_potential(y, a, potential, tau, W_Q, W_K)).diagonal()
    Gb = torch.exp(M.log_potential(y, b, potential, tau, W_Q, W_K)).diagonal()
    assert ((Ga - Gb).abs() <= c.lip_second * da + 1e-12).all()
    assert abs(c.k_l - W_V.abs().sum(1).max().item()) < 1e-12
    assert c.printed == pytest.approx(2 * 2 * (c.lip_first + c.lip_second) * c.diam / c.eps * c.k_l)
    assert c.bound == pytest.approx(2 * (2 * (c.lip_first + c.lip_second) * c.diam + c.sup) / c.eps * c.k_l)
    args = (c.diam, c.lip_first, c.lip_second, c.eps, 2, c.k_l)
    assert M.thm23_bound(*args, c.sup) == c.bound and M.thm23_bound(*args, printed=True) == c.printed


@pytest.mark.parametrize("x,potential,tau,W", _instances())
def test_contraction_ratios_stay_below_thm23(x, potential, tau, W):
    worst = M.local_contraction(x, potential, tau, W)                       # the worst infinitesimal move
    c = M.thm23_constants(x.amin(0), x.amax(0), potential, tau, W)
    assert 0 < worst <= c.bound
    for perturbation in M.PERTURBATIONS:
        res = M.contraction_ratio(x, perturbation, 6, potential, tau, W, sigma=0.05, k=4, seed=1)
        box = M.thm23_constants(res.lo, res.hi, potential, tau, W)
        assert (res.ratio <= box.bound).all(), (perturbation, res.ratio.max().item(), box.bound)


def test_printed_thm23_fails_for_a_translation():
    """Prop. 19's second inequality as printed drops ||G||_inf / eps(G): with the Gaussian potential and the
    identity lookup, a translated measure has a translated output (ratio 1), below which the printed bound falls."""
    x = torch.rand(6, 2, generator=rng(8), dtype=torch.float64) * 0.2
    y = x + torch.tensor([0.03, -0.02], dtype=torch.float64)
    assert M.contraction(x, y, "gaussian", 10.0).ratio.item() == pytest.approx(1.0, abs=1e-12)
    c = M.thm23_constants(torch.cat([x, y]).amin(0), torch.cat([x, y]).amax(0), "gaussian", 10.0)
    assert c.printed < 0.2 < 1 <= c.bound


def test_local_contraction_is_the_ratio_of_a_tiny_worst_move():
    x = torch.rand(7, 2, generator=rng(3), dtype=torch.float64) * 2
    worst = M.local_contraction(x, "gaussian", 0.5)
    N, d = x.shape
    f = lambda z: M.attention_step(z.reshape(N, d), "gaussian", 0.5).points.reshape(-1)  # noqa: E731
    J = torch.autograd.functional.jacobian(f, x.reshape(-1))
    col = int(J.abs().sum(0).argmax())
    y = x.clone().reshape(-1)
    y[col] += 1e-7
    assert M.contraction(x, y.reshape(N, d), "gaussian", 0.5).ratio.item() == pytest.approx(worst, rel=1e-5)


@pytest.mark.parametrize("seed", range(3))
def test_gaussian_ratios_stay_below_cor30_and_thm29(seed):
    N, d = 10, 2
    tau = [0.2, 1.0, 5.0][seed]
    x = randn(N, d, seed=seed) * [0.5, 1.0, 3.0][seed]
    W_V = randn(d, d, seed=seed + 30) / d ** 0.5
    W = (torch.eye(d, dtype=torch.float64), torch.eye(d, dtype=torch.float64), W_V)
    k_l = W_V.abs().sum(1).max().item()
    assert M.local_contraction(x, "gaussian", tau, W) <= M.cor30_bound(N, d, k_l=k_l)
    for perturbation in M.PERTURBATIONS:
        res = M.contraction_ratio(x, perturbation, 6, "gaussian", tau, W, sigma=0.3, k=5, seed=seed)
        n_in = {"noise": (N, N), "drop": (N, N - 1), "swap": (5, 5)}[perturbation]
        assert (res.ratio <= M.cor30_bound(*n_in[:1], d, k_l=k_l, m=n_in[1])).all()


def three_clusters(m, q=0.85, jitter=None):
    """A token at 0 between two clusters of m tokens at -R and R, with R^2 = ln(2m) - ln(q / (1 - q)) so that the
    clusters hold the share q of the token's Boltzmann-Gibbs measure; the clusters as weighted atoms, or as m
    real tokens each spread uniformly over ``jitter``."""
    R = math.sqrt(math.log(2 * m) - math.log(q / (1 - q)))
    if jitter is None:
        return M.empirical(torch.tensor([[0.0], [-R], [R]], dtype=torch.float64),
                           torch.tensor([1.0, m, m], dtype=torch.float64)), R
    spread = jitter * torch.rand(2 * m, 1, generator=rng(0), dtype=torch.float64)
    return M.empirical(torch.cat([torch.zeros(1, 1, dtype=torch.float64), spread[:m] - R, spread[m:] + R])), R


def test_cor30_fails_for_a_token_between_two_large_clusters():
    """Prop. 28's proof applies Kantorovich-Rubinstein to sum_i delta_{x_i} (mass N) as if it were a probability
    measure; the ratio then grows like 2 q ln N, the bound like sqrt(ln N). d = 1, tau = 1, identity projections."""
    q, delta = 0.85, 1e-6
    mu, R = three_clusters(10 ** 6, q)
    nu = M.empirical(mu.points + torch.tensor([[delta], [0.0], [0.0]], dtype=torch.float64), mu.weights)
    ratio = M.contraction(mu, nu, "gaussian", 1.0).ratio.item()
    assert ratio == pytest.approx((1 - q) + 2 * q * R * R, rel=1e-3)     # d Attention(x_0) / d x_0 by hand
    assert ratio > 1.4 * M.cor30_bound(2 * 10 ** 6 + 1, 1)
    # the weighted atoms are exactly the uniform measure of the repeated tokens
    small, _ = three_clusters(40, q)
    copies = torch.cat([small.points[:1], small.points[1:2].expand(40, 1), small.points[2:].expand(40, 1)])
    ws, wc = M.attention_step(small, "gaussian", 1.0), M.attention_step(copies, "gaussian", 1.0)
    torch.testing.assert_close(ws.points, wc.points[[0, 1, 41]], rtol=0, atol=1e-14)
    jittered, _ = three_clusters(200, q, jitter=1e-3)
    moved = jittered.points.clone()
    moved[0] += delta
    sm, _ = three_clusters(200, q)
    atoms = M.contraction(sm, M.empirical(sm.points + torch.tensor([[delta], [0.0], [0.0]]), sm.weights), "gaussian")
    assert M.contraction(jittered, moved, "gaussian", 1.0).ratio.item() == pytest.approx(atoms.ratio.item(), rel=1e-2)


def test_cor30_failure_is_the_closed_form_and_crosses_the_bound():
    """cor30_failure against the closed form (1 - q) + 2 q R^2 of the ratio (the clusters follow the token by
    O(N^-1/2), so from N = 10^5 on) and Cor. 30's formula; the ratio starts below the bound and ends above it,
    crossing between N = 10^4 and 10^5 (near 3 10^4)."""
    q = 0.85
    res = M.cor30_failure(range(1, 13), q)
    n = np.asarray(res.n)
    np.testing.assert_array_equal(n, 10.0 ** np.arange(1, 13))
    R2 = np.log(n - 1) - np.log(q / (1 - q))
    big = n >= 1e5
    np.testing.assert_allclose(np.asarray(res.ratio)[big], ((1 - q) + 2 * q * R2)[big], rtol=1e-3)
    cor30 = 2 * (np.sqrt(np.log(n) + 1 / (2 * np.e)) * np.sqrt(2 / np.e) + 1 + 1 + 2)   # d = 1, K_l = 1
    np.testing.assert_allclose(np.asarray(res.bound), cor30, rtol=1e-12)
    below = np.asarray(res.ratio) < np.asarray(res.bound)
    np.testing.assert_array_equal(below, n < 3e4)
    # one entry: the same as moving the token among the weighted atoms by hand (three_clusters)
    mu, _ = three_clusters((10 ** 3 - 1) / 2, q)
    nu = M.empirical(mu.points + torch.tensor([[1e-6], [0.0], [0.0]], dtype=torch.float64), mu.weights)
    assert res.ratio[2].item() == pytest.approx(M.contraction(mu, nu, "gaussian", 1.0).ratio.item(), rel=1e-12)
    with pytest.raises(ValueError, match="too few"):
        M.cor30_failure([0])


def test_cor30_is_within_a_factor_2_of_a_real_instance():
    """The three-cluster configuration before Cor. 30 breaks: N = 1001 distinct tokens in d = 1 (clusters of 500
    spread over 1e-3), tau = 1, identity projections. The token at 0 moved by 1e-6 gives the ratio ~8.9 (about
    (1 - q) + 2 q R^2), under the bound ~12.6 but above half of it: the bound is not vacuous here."""
    q = 0.85
    mu, R = three_clusters(500, q, jitter=1e-3)
    moved = mu.points.clone()
    moved[0] += 1e-6
    ratio = M.contraction(mu, moved, "gaussian", 1.0).ratio.item()
    bound = M.cor30_bound(1001, 1)
    assert ratio == pytest.approx((1 - q) + 2 * q * R * R, rel=0.02)
    assert 0.5 * bound < ratio <= bound, (ratio, bound)


def test_corrected_thm23_is_attained_within_one_percent_in_one_dimension():
    """In d = 1 (tau(Pi) = 1) a translation with the Gaussian potential at large tau: the ratio is exactly 1 and
    the corrected bound (2 (Lip + Lip) diam + sup) / eps -> sup / eps -> 1; at tau = 100 it is 1.003."""
    x = torch.rand(8, 1, generator=rng(8), dtype=torch.float64) * 0.2
    y = x + 0.03
    ratio = M.contraction(x, y, "gaussian", 100.0).ratio.item()
    both = torch.cat([x, y])
    c = M.thm23_constants(both.amin(0), both.amax(0), "gaussian", 100.0)
    assert ratio == pytest.approx(1.0, abs=1e-12)
    assert 0.99 * c.bound <= ratio <= c.bound, (ratio, c.bound)
    assert c.printed < 0.01                                  # the printed bound is off by a factor > 100


# ---------------------------------------------------------------------------------------------- fixed point

def test_fixed_point_of_a_provable_contraction_meets_banach():
    """W_V = 0.2 I maps the box E = [-r, r]^2 into itself and makes the corrected Thm. 23 bound < 1: Prop. 26's
    Banach argument then gives one fixed point (here every token at 0) approached geometrically."""
    x0 = torch.rand(12, 2, generator=rng(4), dtype=torch.float64) * 0.2 - 0.1
    eye = torch.eye(2, dtype=torch.float64)
    W = (eye, eye, 0.2 * eye)
    r = x0.abs().max().item()
    c = M.thm23_constants([-r, -r], [r, r], "gaussian", 10.0, W)
    assert c.bound < 1
    fp = M.fixed_point(x0, "gaussian", 10.0, W, max_iter=200, tol=1e-12)
    assert fp.converged and fp.points.abs().max() < 1e-11
    levels = torch.arange(len(fp.to_last), dtype=torch.float64)
    assert (fp.to_last <= c.bound ** levels / (1 - c.bound) * fp.steps[0] + 1e-13).all()
    assert (fp.steps[1:] <= c.bound * fp.steps[:-1] + 1e-15).all()


def test_fixed_point_without_convergence_reports_it():
    x0 = randn(6, 2, seed=40)
    fp = M.fixed_point(x0, "dot", 1.0, residual=True, max_iter=5)
    assert not fp.converged and fp.n_iter == 5 and fp.steps.shape == (5,) and fp.to_last.shape == (6,)
    assert fp.to_last[-1] == 0


# ---------------------------------------------------------------------------------------------- Thm. 14

@pytest.mark.parametrize("potential", M.POTENTIALS)
def test_thm14_gibbs_measure_maximises_relative_entropy(potential):
    y = randn(9, 2, seed=50)
    nu = M.empirical(y, torch.rand(9, generator=rng(5), dtype=torch.float64) + 0.2)
    x = y[2] + 0.3
    chk = M.max_entropy_check(nu, x, potential, 0.7, n_directions=6, n_steps=21)
    # every competitor encodes the same moment, stays a probability vector and has no larger H_nu
    comp = chk.gibbs + chk.t[..., None] * chk.directions[:, None, :]
    torch.testing.assert_close(comp @ chk.features, chk.moment.expand(6, 22, -1), rtol=0, atol=1e-12)
    assert (comp >= -1e-15).all() and torch.allclose(comp.sum(-1), torch.ones(6, 22, dtype=torch.float64))
    assert (chk.entropies <= chk.entropy + 1e-12).all()
    assert ((chk.t == 0) | (chk.entropies < chk.entropy)).all()
    # Gibbs form: log(dmu*/dnu) is affine in the features with slope lam
    logr = (chk.gibbs / nu.weights).log() - chk.features @ chk.lam
    assert logr.std() < 1e-12
    # an independent solver of max H_nu(p) s.t. sum p = 1, p k = f finds the same measure
    w, K, f = nu.weights.numpy(), chk.features.numpy(), chk.moment.numpy()
    res = minimize(lambda p: float(np.sum(p * np.log(np.maximum(p, 1e-300) / w))), w, method="SLSQP",
                   bounds=[(0, 1)] * 9, constraints=[{"type": "eq", "fun": lambda p: p.sum() - 1},
                                                     {"type": "eq", "fun": lambda p: p @ K - f}],
                   options=dict(ftol=1e-14, maxiter=500))
    np.testing.assert_allclose(res.x, chk.gibbs.numpy(), atol=1e-5)
    assert abs(-res.fun - chk.entropy.item()) < 1e-8


# ---------------------------------------------------------------------------------------------- old keyword

def test_the_old_weights_keyword_still_works_with_a_deprecation_warning():
    """``weights=`` was the keyword of the triple (W_Q, W_K, W_V) before it became ``projections=`` (the masses of
    a measure keep ``weights``): old scripts still run, warned, with the same numbers."""
    x = randn(6, 2, seed=70)
    W = tuple(randn(2, 2, seed=71 + s) / 2 for s in range(3))
    with pytest.warns(DeprecationWarning, match=r"self_attention_flow\(weights=...\) is now .*projections"):
        old = M.self_attention_flow(x, 2, "gaussian", 0.5, weights=W)
    torch.testing.assert_close(old, M.self_attention_flow(x, 2, "gaussian", 0.5, projections=W), rtol=0, atol=0)
    torch.testing.assert_close(old, M.self_attention_flow(x, 2, "gaussian", 0.5, W), rtol=0, atol=0)   # positional


# ---------------------------------------------------------------------------------------------- bad input

def test_bad_input_is_refused_with_a_plain_message():
    x = randn(5, 2, seed=60)
    with pytest.raises(ValueError, match="empty"):
        M.empirical(torch.zeros(0, 2))
    with pytest.raises(ValueError, match="empty"):
        M.w1(x, torch.zeros(0, 2))
    bad = x.clone()
    bad[3, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN or inf: point 3"):
        M.self_attention_flow(bad, 2)
    for tau in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="tau must be a positive"):
            M.self_attention_flow(x, 2, tau=tau)
        with pytest.raises(ValueError, match="tau must be a positive"):
            M.thm23_constants([0, 0], [1, 1], tau=tau)
    with pytest.raises(ValueError, match="unknown potential"):
        M.softmatch(x, M.empirical(x), "cosine")
    with pytest.raises(ValueError, match="non-negative"):
        M.empirical(x, [1, -1, 1, 1, 1])
    with pytest.raises(ValueError, match="one weight per point"):
        M.empirical(x, [1, 1])
    with pytest.raises(ValueError, match="different dimensions"):
        M.w1(x, randn(5, 3))
    with pytest.raises(ValueError, match="one \\(W_Q, W_K, W_V\\) per layer"):
        M.self_attention_flow(x, 3, projections=[(torch.eye(2),) * 3] * 2, shared=False)
    with pytest.raises(ValueError, match="W_V must be d x d"):
        M.self_attention_flow(x, 1, projections=(torch.eye(2), torch.eye(2), torch.ones(2, 3)))
    with pytest.raises(ValueError, match="floating-point range"):
        M.self_attention_flow(x * 100, 1200, residual=True)
    with pytest.raises(ValueError, match="eps\\(G\\) must be positive"):
        M.thm23_bound(1.0, 1.0, 1.0, 0.0, 2)
    with pytest.raises(ValueError, match="corrected Thm. 23 bound needs sup"):
        M.thm23_bound(1.0, 1.0, 1.0, 0.5, 2)
    with pytest.raises(ValueError, match="neighbourhood size"):
        M.contraction_ratio(x, "swap", k=5)
    with pytest.raises(ValueError, match="unknown ground"):
        M.w1(x, x, "linf")
    with pytest.raises(ValueError, match="at least 4 atoms"):
        M.max_entropy_check(M.empirical(x[:3]), x[0], "dot")
