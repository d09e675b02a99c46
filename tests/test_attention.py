"""wviz.attention against independent references: optimality (KKT) conditions, the generic solver, scipy's SLSQP,
the entmax package and torch.softmax; property tests (hypothesis) for validity on awkward inputs; gradients;
bad input."""
import math
import warnings

import entmax as peer
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from wviz import attention as A

INF = math.inf
F64 = torch.float64
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def scores(*shape, seed=0, scale=1.0, dtype=F64, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g, dtype=dtype) * scale).to(device)


def random_prior(*shape, seed=1, zeros=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    pi = torch.rand(*shape, generator=g, dtype=dtype) + 0.05
    pi[..., :zeros] = 0
    return pi / pi.sum(-1, keepdim=True)


def apply(name, s, tau, alpha=1.5, prior=None):
    return A.MECHANISMS[name](s, tau, prior=prior, alpha=alpha)


# ------------------------------------------------------------------------------------------ optimality (KKT)

@pytest.mark.parametrize("tau", [0.05, 0.7, 3.0])
def test_sparsemax_kkt(tau):
    # grad of tau/2 ||p||^2 is tau p: s_j / tau - p_j equals the threshold on the support, is <= it elsewhere
    s = scores(40, 9, scale=2.0)
    p = A.sparsemax(s, tau)
    z = s / tau
    supp = p > 0
    theta = ((z - p) * supp).sum(-1, keepdim=True) / supp.sum(-1, keepdim=True)
    assert torch.allclose(torch.where(supp, z - p, theta), theta.expand_as(z), atol=1e-12)
    assert bool((torch.where(supp, theta, z) <= theta + 1e-12).all())
    assert torch.allclose(p.sum(-1), torch.ones(40, dtype=F64), atol=1e-14)


@pytest.mark.parametrize("alpha", [1.5, 1.25, 1.75, 1.01])
def test_entmax_kkt(alpha):
    # grad of the Tsallis term is p^(alpha-1) / (alpha-1), which is 0 at p = 0
    tau = 0.6
    s = scores(40, 9, seed=3, scale=2.0)
    p = A.entmax(s, alpha, tau)
    z = s / tau
    supp = p > 0
    lhs = z - p.pow(alpha - 1) / (alpha - 1)
    theta = (lhs * supp).sum(-1, keepdim=True) / supp.sum(-1, keepdim=True)
    assert torch.allclose(torch.where(supp, lhs, theta), theta.expand_as(z), atol=1e-9)
    assert bool((torch.where(supp, theta, z) <= theta + 1e-9).all())


def test_softmax_and_prior_softmax_kkt():
    tau = 0.8
    s = scores(20, 6, seed=5)
    p = A.softmax(s, tau)
    lhs = s / tau - p.log()  # grad of sum p log p is 1 + log p; the 1 goes into the common constant
    assert torch.allclose(lhs, lhs[..., :1].expand_as(lhs), atol=1e-12)
    pi = random_prior(20, 6, zeros=2)
    q = A.prior_softmax(s, pi, tau)
    assert bool((q[..., :2] == 0).all())
    lhs = (s / tau - (q / pi).log())[..., 2:]
    assert torch.allclose(lhs, lhs[..., :1].expand_as(lhs), atol=1e-12)


# ----------------------------------------------------------------------------- closed forms vs references

@pytest.mark.parametrize("tau", [0.1, 1.0, 10.0])
def test_agrees_with_entmax_package_and_torch(tau):
    for dtype, atol in [(F64, 1e-12), (torch.float32, 2e-6)]:
        s = scores(64, 33, seed=7, scale=3.0, dtype=dtype)
        assert torch.allclose(A.sparsemax(s, tau), peer.sparsemax(s / tau, dim=-1), atol=atol)
        assert torch.allclose(A.entmax(s, 1.5, tau), peer.entmax15(s / tau, dim=-1), atol=atol)
        assert torch.allclose(A.softmax(s, tau), torch.softmax(s / tau, dim=-1), atol=atol)
    s = scores(64, 33, seed=8, scale=3.0)
    for alpha in (1.1, 1.3, 1.7, 1.9):
        ref = peer.entmax_bisect(s / tau, alpha=alpha, dim=-1, n_iter=100)
        assert torch.allclose(A.entmax(s, alpha, tau), ref, atol=1e-10)


def test_float64_closed_forms_by_hand():
    s = torch.tensor([3.0, 1.0, 0.2, -1.0], dtype=F64)
    # sparsemax of (3, 1, ...) at tau = 1: only the top key (3 - 1 >= 1) -> one-hot
    assert torch.equal(A.sparsemax(s), torch.tensor([1.0, 0, 0, 0], dtype=F64))
    # tau = 4: z = (0.75, 0.25, 0.05, -0.25); support {1, 2, 3}: theta = (1.05 - 1) / 3
    theta = (0.75 + 0.25 + 0.05 - 1) / 3
    expect = torch.tensor([0.75 - theta, 0.25 - theta, 0.05 - theta, 0.0], dtype=F64)
    assert torch.allclose(A.sparsemax(s, 4.0), expect, atol=1e-15)
    # 1.5-entmax of z = (0, 0): p = (1/2, 1/2); of (1, 0) with tau 1: v = z/2 = (0.5, 0): (0.5-t)^2 + (0-t)^2 = 1
    t = (0.5 - math.sqrt(2 - 0.25)) / 2
    expect = torch.tensor([(0.5 - t) ** 2, t ** 2], dtype=F64)
    assert torch.allclose(A.entmax(torch.tensor([1.0, 0.0], dtype=F64)), expect, atol=1e-15)
    # prior-softmax: pi_j e^{s_j} / Z
    pi = torch.tensor([0.5, 0.25, 0.25, 0.0], dtype=F64)
    w = pi * s.exp()
    assert torch.allclose(A.prior_softmax(s, pi), w / w.sum(), atol=1e-15)


def test_alpha_endpoints_dispatch_exactly_and_are_continuous():
    s = scores(30, 8, seed=11, scale=2.0)
    for tau in (0.3, 2.0):
        assert torch.equal(A.entmax(s, 1.0, tau), A.softmax(s, tau))
        assert torch.equal(A.entmax(s, 2.0, tau), A.sparsemax(s, tau))
        assert torch.allclose(A.entmax(s, 1 + 1e-7, tau), A.softmax(s, tau), atol=1e-6)
        assert torch.allclose(A.entmax(s, 2 - 1e-7, tau), A.sparsemax(s, tau), atol=1e-6)


def test_prior_softmax_uniform_is_softmax_and_zeros_mask():
    s = scores(10, 7, seed=12)
    uniform = torch.full((7,), 1 / 7, dtype=F64)
    assert torch.allclose(A.prior_softmax(s, uniform, 0.5), A.softmax(s, 0.5), atol=1e-14)
    pi = torch.tensor([0.0, 1, 0.0, 1, 1, 0.0, 0.0], dtype=F64) / 3
    p = A.prior_softmax(s, pi, 0.5)
    assert bool((p[..., pi == 0] == 0).all())
    masked = s.masked_fill(pi == 0, -INF)
    assert torch.allclose(p, A.prior_softmax(masked, torch.full((7,), 1 / 7, dtype=F64), 0.5), atol=1e-14)


@pytest.mark.parametrize("name,omega", [("softmax", "shannon"), ("sparsemax", "l2"), ("entmax", "tsallis"),
                                        ("prior-softmax", "kl")])
@pytest.mark.parametrize("tau", [0.05, 1.0, 20.0])
def test_generic_solver_agrees_with_closed_forms(name, omega, tau):
    s = scores(60, 6, seed=13, scale=2.0)
    s[3, 2] = s[7, 0] = -INF  # masked keys
    s[5] = 0.25  # a row of ties
    prior = random_prior(60, 6, zeros=1)
    for alpha in ((1.5, 1.2, 1.8) if name == "entmax" else (1.5,)):
        closed = apply(name, s, tau, alpha, prior)
        numeric = A.solve_simplex(s, omega, tau, prior=prior, alpha=alpha, tol=1e-13)
        assert torch.allclose(numeric, closed, atol=1e-8), (alpha, (numeric - closed).abs().max())
        assert bool((numeric[closed == 0] < 1e-8).all())
    default = A.solve_simplex(s, omega, tau, prior=prior, alpha=alpha)  # default tol
    assert torch.allclose(default, closed, atol=1e-5)


def _slsqp(z, omega, prior=None, alpha=1.5):
    """Independent reference: scipy SLSQP on -<z, p> + Omega(p) over the simplex (tau folded into z)."""
    m = len(z)
    lo = 1e-12 if omega in ("shannon", "kl") else 0.0

    def f(p):
        if omega == "shannon":
            return -z @ p + np.sum(p * np.log(p))
        if omega == "kl":
            return -z @ p + np.sum(p * np.log(p / prior))
        if omega == "l2":
            return -z @ p + 0.5 * p @ p
        return -z @ p + (np.sum(p ** alpha) - 1) / (alpha * (alpha - 1))

    def grad(p):
        if omega == "shannon":
            return -z + 1 + np.log(p)
        if omega == "kl":
            return -z + 1 + np.log(p / prior)
        if omega == "l2":
            return -z + p
        return -z + p ** (alpha - 1) / (alpha - 1)

    res = minimize(f, np.full(m, 1 / m), jac=grad, method="SLSQP", bounds=[(lo, 1)] * m,
                   constraints=[{"type": "eq", "fun": lambda p: p.sum() - 1, "jac": lambda p: np.ones(m)}],
                   options={"ftol": 1e-15, "maxiter": 500})
    return res.x


@pytest.mark.parametrize("name,omega", [("softmax", "shannon"), ("sparsemax", "l2"), ("entmax", "tsallis"),
                                        ("prior-softmax", "kl")])
def test_closed_forms_match_scipy_slsqp(name, omega):
    rng = np.random.default_rng(0)
    for _ in range(4):
        z = rng.normal(size=5) * 1.5
        tau = float(rng.uniform(0.3, 2.0))
        prior = rng.dirichlet(np.ones(5))
        ref = _slsqp(z / tau, omega, prior)
        p = apply(name, torch.tensor(z), tau, prior=torch.tensor(prior))
        assert np.allclose(p.numpy(), ref, atol=2e-5), (p, ref)


@pytest.mark.parametrize("name", list(A.MECHANISMS))
def test_closed_form_objective_is_below_random_simplex_points(name):
    mech = A.MECHANISMS[name]
    s = scores(8, 5, seed=17, scale=2.0)
    prior = random_prior(8, 5, seed=4)
    for alpha in (1.5, 1.3):
        p = mech(s, 0.7, prior=prior, alpha=alpha)
        best = mech.objective(p, s, 0.7, prior=prior, alpha=alpha)
        g = torch.Generator().manual_seed(0)
        pts = torch.distributions.Dirichlet(torch.full((5,), 0.3, dtype=F64)).sample((500, 8))
        pts = torch.cat([pts, torch.eye(5, dtype=F64)[torch.randint(5, (20, 8), generator=g)]])  # vertices too
        vals = mech.objective(pts, s.expand_as(pts), 0.7, prior=prior, alpha=alpha)
        assert bool((best <= vals + 1e-12).all())


def test_regularized_objective_values():
    p = torch.tensor([0.5, 0.5, 0.0], dtype=F64)
    s = torch.tensor([1.0, 0.0, -INF], dtype=F64)
    lin = -0.5
    assert math.isclose(float(A.regularized_objective(p, s, "shannon", 2.0)), lin + 2 * math.log(0.5))
    assert math.isclose(float(A.regularized_objective(p, s, "l2", 2.0)), lin + 2 * 0.25)
    ts = (2 * 0.5 ** 1.5 - 1) / (1.5 * 0.5)
    assert math.isclose(float(A.regularized_objective(p, s, "tsallis", 2.0)), lin + 2 * ts)
    # Tsallis at alpha = 1 is Shannon; at alpha = 2 it is 1/2 ||p||^2 - 1/2
    assert math.isclose(float(A.regularized_objective(p, s, "tsallis", 2.0, alpha=1.0)),
                        float(A.regularized_objective(p, s, "shannon", 2.0)))
    assert math.isclose(float(A.regularized_objective(p, s, "tsallis", 2.0, alpha=2.0)),
                        float(A.regularized_objective(p, s, "l2", 2.0)) - 2 * 0.5)
    pi = torch.tensor([0.25, 0.75, 0.0], dtype=F64)
    kl = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    assert math.isclose(float(A.regularized_objective(p, s, "kl", 2.0, prior=pi)), lin + 2 * kl)
    # weight on a key with prior 0, or with score -inf, costs +inf
    assert float(A.regularized_objective(torch.tensor([0.0, 0.5, 0.5], dtype=F64), s, "l2", 1.0)) == INF
    q = torch.tensor([0.5, 0.0, 0.5], dtype=F64)
    assert float(A.regularized_objective(q, torch.zeros(3, dtype=F64), "kl", 1.0, prior=pi)) == INF
    batch = A.regularized_objective(torch.full((4, 2, 3), 1 / 3, dtype=F64), torch.zeros(4, 2, 3, dtype=F64),
                                    "shannon", 1.0)
    assert batch.shape == (4, 2) and torch.allclose(batch, torch.full((4, 2), -math.log(3), dtype=F64))


def test_helpers():
    p = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]], dtype=F64)
    assert support_list(A.support_size(p)) == [2, 1]
    assert torch.allclose(A.entropy(p), torch.tensor([math.log(2), 0.0], dtype=F64))
    assert set(A.MECHANISMS) == {"softmax", "sparsemax", "entmax", "prior-softmax"}
    assert {m.omega for m in A.MECHANISMS.values()} == set(A.OMEGAS)


def support_list(t):
    return [int(v) for v in t]


# ------------------------------------------------------------------------------------- partial sort (top-k)

@pytest.mark.parametrize("alpha", [2.0, 1.5])
def test_topk_doubling_is_exact_when_supports_differ(alpha):
    # The first k is guessed from 32 evenly spaced sample rows (0, 9, 19, ...); rows 1-3, 151, 152 lie between
    # them, so their large supports show up only in the main round, which must redo them with k doubled.
    s = scores(300, 400, seed=21, scale=4.0, dtype=torch.float32)
    s[[1, 151]] *= 1e-3  # nearly flat rows: (almost) full support
    s[[2, 152], :250] = 5.0  # 250-way ties
    s[3, 60:] = -INF
    fn, ref = (A.sparsemax, peer.sparsemax) if alpha == 2.0 else (A.entmax, peer.entmax15)
    p = fn(s) if alpha == 2.0 else fn(s, 1.5)
    assert torch.allclose(p, ref(s.masked_fill(s == -INF, -1e30), dim=-1), atol=2e-6)
    assert int(A.support_size(p).max()) > 200 and int(A.support_size(p).min()) <= 4


@pytest.mark.parametrize("m", [7, 255, 256, 300, 512, 1023])
def test_newton_threshold_agrees_with_the_entmax_package(m):
    # CPU rows go through Newton's method on the threshold; rows of 256 keys or more start it from the threshold of
    # group maxima (contiguous groups when 8 divides m, max pooling otherwise). Attention-like rows (a few large
    # scores), flat rows, exact ties and rows with one key must give the sort-based peer's weights and supports.
    g = torch.Generator().manual_seed(m)
    for dtype, atol in [(F64, 1e-12), (torch.float32, 2e-6)]:
        s = torch.randn(64, m, generator=g, dtype=F64) * torch.tensor([0.01, 1.0, 4.0, 30.0]).repeat(16)[:, None]
        s[5, : m // 2] = 3.0                  # a tie across half the row
        s[6] = 1.0                            # all equal
        s[7, 1:] = -INF                       # one key left
        s = s.to(dtype)
        masked = s.double().masked_fill(s == -INF, -1e30)  # the peer in float64: its float32 is off by 1e-5
        for tau in (0.05, 1.0):
            for p, ref in ((A.sparsemax(s, tau), peer.sparsemax(masked / tau, dim=-1)),
                           (A.entmax(s, 1.5, tau), peer.entmax15(masked / tau, dim=-1))):
                assert p.dtype == dtype and torch.allclose(p.double(), ref, atol=atol)
                assert torch.allclose(p.sum(-1), torch.ones(64, dtype=dtype), atol=atol)


def test_newton_scratch_memory_serves_inference_mode_and_autograd_alike():
    # The scratch buffers a thread keeps between calls must be normal tensors: a call in inference mode (the Real
    # transformer's forward) followed by one that records gradients must work and agree.
    s = scores(6, 300, seed=4, dtype=torch.float32)
    with torch.inference_mode():
        first = A.entmax(s, 1.5)
    x = s.clone().requires_grad_(True)
    second = A.entmax(x, 1.5)
    second[:, 0].sum().backward()
    assert torch.equal(first, second.detach()) and x.grad is not None and bool(torch.isfinite(x.grad).all())


# ------------------------------------------------------------------------------- properties (hypothesis)

@st.composite
def awkward_scores(draw):
    dtype = draw(st.sampled_from([torch.float32, F64]))
    lead = draw(st.lists(st.integers(1, 3), max_size=2))
    m = draw(st.integers(1, 9))
    n = math.prod(lead) * m
    value = st.one_of(st.sampled_from([0.0, 1.0, -1.0, 2.5, -INF]),  # ties and masks
                      st.floats(-100, 100, allow_nan=False, width=32))
    x = torch.tensor(draw(st.lists(value, min_size=n, max_size=n)), dtype=dtype).reshape(*lead, m)
    dead = (x == -INF).all(-1, keepdim=True)
    x[..., :1] = torch.where(dead, torch.zeros_like(x[..., :1]), x[..., :1])  # keep one key per row
    x = x * draw(st.sampled_from([1.0, 1e4, 1e6]))
    tau = draw(st.one_of(st.sampled_from([1e-8, 1e-3, 1.0, 1e2, 1e8]), st.floats(1e-8, 1e8)))
    return x, tau


def _check_valid(p, s, dtype):
    tol = 2e-5 if dtype == torch.float32 else 1e-12
    assert p.dtype == dtype and p.shape == s.shape
    assert not bool(torch.isnan(p).any())
    assert bool((p >= 0).all()) and bool((p <= 1 + tol).all())
    assert torch.allclose(p.sum(-1), torch.ones(s.shape[:-1], dtype=dtype), atol=tol)
    assert bool((p[s == -INF] == 0).all())
    # a larger score never gets a smaller weight
    i = s.argmax(-1, keepdim=True)
    assert bool((p.gather(-1, i) >= p.amax(-1, keepdim=True) - tol).all())


@settings(max_examples=60, deadline=None)
@given(awkward_scores(), st.sampled_from(["softmax", "sparsemax", "entmax", "entmax-1.3", "prior-softmax"]))
def test_maps_give_simplex_points_on_awkward_inputs(case, name):
    s, tau = case
    if name == "entmax-1.3":
        p = A.entmax(s, 1.3, tau)
    elif name == "prior-softmax":
        p = A.prior_softmax(s, torch.full(s.shape[-1:], 1 / s.shape[-1], dtype=s.dtype), tau)
    else:
        p = apply(name, s, tau)
    _check_valid(p, s, s.dtype)


@settings(max_examples=25, deadline=None)
@given(awkward_scores())
def test_solver_gives_simplex_points_on_awkward_inputs(case):
    s, tau = case
    for omega in ("shannon", "l2"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # not converging within max_iter would warn
            p = A.solve_simplex(s, omega, tau)
        _check_valid(p, s, s.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_huge_scores_and_extreme_tau(dtype):
    base = torch.tensor([[1e8, 1e8, 1e8 - 64, -1e8, -INF], [3e7, -2e7, 1.0, 0.0, 5.0]], dtype=dtype)
    for tau in (1e-8, 1e-3, 1.0, 1e2, 1e8, 1e-40, 1e40):
        for p in (A.softmax(base, tau), A.sparsemax(base, tau), A.entmax(base, 1.5, tau), A.entmax(base, 1.2, tau)):
            _check_valid(p, base, dtype)
    # ties at a huge common value share the weight exactly (the row max is subtracted before anything else)
    assert torch.allclose(A.sparsemax(base, 1.0)[0], torch.tensor([0.5, 0.5, 0, 0, 0], dtype=dtype))
    assert torch.allclose(A.entmax(base, 1.5, 1.0)[0], torch.tensor([0.5, 0.5, 0, 0, 0], dtype=dtype))


def test_batched_equals_looped():
    s = scores(3, 4, 10, seed=23, scale=2.0)
    prior = random_prior(10, seed=2)
    for name in A.MECHANISMS:
        for alpha in ((1.5, 1.4) if name == "entmax" else (1.5,)):
            whole = apply(name, s, 0.9, alpha, prior)
            for i in range(3):
                for j in range(4):
                    assert torch.allclose(whole[i, j], apply(name, s[i, j], 0.9, alpha, prior), atol=1e-14)
    whole = A.solve_simplex(s, "tsallis", 0.9)
    assert torch.allclose(whole[1, 2], A.solve_simplex(s[1, 2], "tsallis", 0.9), atol=1e-9)


# ----------------------------------------------------------------------------------------------- gradients

@pytest.mark.parametrize("fn", [lambda s: A.sparsemax(s, 0.7), lambda s: A.entmax(s, 1.5, 0.7),
                                lambda s: A.entmax(s, 1.3, 0.7), lambda s: A.softmax(s, 0.7),
                                lambda s: A.prior_softmax(s, random_prior(6), 0.7)],
                         ids=["sparsemax", "entmax15", "entmax13", "softmax", "prior_softmax"])
def test_gradcheck(fn):
    s = scores(4, 6, seed=29, scale=1.5).requires_grad_()
    assert torch.autograd.gradcheck(fn, (s,), eps=1e-6, atol=1e-6)


def test_gradient_matches_entmax_package():
    s = scores(5, 7, seed=31, scale=2.0)
    g = scores(5, 7, seed=32)
    for ours, theirs in [(lambda x: A.sparsemax(x, 2.0), lambda x: peer.sparsemax(x / 2.0, dim=-1)),
                         (lambda x: A.entmax(x, 1.5, 2.0), lambda x: peer.entmax15(x / 2.0, dim=-1))]:
        a = s.clone().requires_grad_()
        b = s.clone().requires_grad_()
        (ours(a) * g).sum().backward()
        (theirs(b) * g).sum().backward()
        assert torch.allclose(a.grad, b.grad, atol=1e-12)


# ---------------------------------------------------------------------------------------------- bad input

def _row3_masked():
    s = torch.zeros(5, 4)
    s[3] = -INF
    return s


def _uniform_prior(s):
    m = s.shape[-1] if isinstance(s, torch.Tensor) and s.dim() else 1
    return torch.full((m,), 1 / max(m, 1))


MAPS = {
    "softmax": lambda s, tau=1.0: A.softmax(s, tau),
    "softmax-tau": lambda s, tau=0.5: A.softmax(s, tau),
    "sparsemax": lambda s, tau=1.0: A.sparsemax(s, tau),
    "entmax": lambda s, tau=1.0: A.entmax(s, 1.5, tau),
    "entmax-1.3": lambda s, tau=1.0: A.entmax(s, 1.3, tau),
    "prior-softmax": lambda s, tau=1.0: A.prior_softmax(s, _uniform_prior(s), tau),
    "solve_simplex": lambda s, tau=1.0: A.solve_simplex(s, "l2", tau),
}


@pytest.mark.parametrize("fn", list(MAPS.values()), ids=list(MAPS))
def test_bad_scores_and_tau_raise(fn):
    ok = torch.zeros(2, 3)
    for tau, match in [(0.0, "tau must be a positive"), (-1.0, "tau"), (math.nan, "tau"), (INF, "tau"),
                       ("x", "tau must be a positive number")]:
        with pytest.raises(ValueError, match=match):
            fn(ok, tau)
    with pytest.raises(ValueError, match="row 1 contain NaN"):
        fn(torch.tensor([[0.0, 1.0], [math.nan, 1.0]]))
    with pytest.raises(ValueError, match=r"row 0 contain \+inf"):
        fn(torch.tensor([[0.0, INF], [0.0, 1.0]]))
    with pytest.raises(ValueError, match=r"every key of row 3 is masked \(-inf\)"):
        fn(_row3_masked())
    s = torch.zeros(2, 3, 4)
    s[1, 2] = -INF
    with pytest.raises(ValueError, match=r"row \(1, 2\)"):
        fn(s)
    with pytest.raises(ValueError, match="float32 or float64"):
        fn(torch.zeros(2, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match="torch tensor"):
        fn([[0.0, 1.0]])
    with pytest.raises(ValueError, match="at least one key"):
        fn(torch.zeros(3, 0))


def test_bad_alpha_prior_omega_and_shapes_raise():
    s = torch.zeros(2, 3)
    for alpha in (0.5, 2.5, math.nan):
        with pytest.raises(ValueError, match="alpha must lie in"):
            A.entmax(s, alpha)
        with pytest.raises(ValueError, match="alpha"):
            A.solve_simplex(s, "tsallis", 1.0, alpha=alpha)
    cases = [(torch.tensor([0.5, 0.7, -0.2]), "negative"), (torch.tensor([0.5, 0.2, 0.2]), "sums to 0.9"),
             (torch.tensor([0.5, 0.5]), "one weight per key"), (torch.full((3, 3), 1 / 3), "broadcast"),
             (torch.zeros(3), "zero on every key"), (torch.tensor([0.5, math.nan, 0.5]), "NaN"),
             (None, "needs a prior"), ([0.2, 0.3, 0.5], "tensor")]
    for prior, match in cases:
        with pytest.raises(ValueError, match=match):
            A.prior_softmax(s, prior)
        with pytest.raises(ValueError, match=match):
            A.solve_simplex(s, "kl", 1.0, prior=prior)
    masked = torch.tensor([[0.0, -INF, -INF], [0.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match="every key of row 0 is masked"):
        A.prior_softmax(masked, torch.tensor([0.0, 0.5, 0.5]))
    with pytest.raises(ValueError, match="every key of row 0 is masked"):
        A.solve_simplex(masked, "kl", 1.0, prior=torch.tensor([0.0, 0.5, 0.5]))
    p = torch.full((2, 3), 1 / 3)
    with pytest.raises(ValueError, match="shape"):
        A.regularized_objective(p, torch.zeros(3, 3), "l2", 1.0)
    with pytest.raises(ValueError, match="unknown omega"):
        A.regularized_objective(p, s, "entropy", 1.0)
    with pytest.raises(ValueError, match="unknown omega"):
        A.solve_simplex(s, "gini", 1.0)
    with pytest.raises(ValueError, match="needs a prior"):
        A.regularized_objective(p, s, "kl", 1.0)
    with pytest.raises(ValueError, match="negative"):
        A.regularized_objective(-p, s, "l2", 1.0)
    with pytest.raises(ValueError, match="NaN"):
        A.regularized_objective(p, s.fill_(math.nan), "l2", 1.0)
    with pytest.raises(ValueError, match="tau"):
        A.regularized_objective(p, torch.zeros(2, 3), "l2", 0.0)


# ---------------------------------------------------------------------------------------------------- CUDA

@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_cuda_matches_cpu(dtype):
    s = scores(300, 257, seed=37, scale=3.0, dtype=dtype)
    s[5, 7:] = -INF
    prior = random_prior(257, dtype=dtype)
    atol = 1e-5 if dtype == torch.float32 else 1e-12
    for name in A.MECHANISMS:
        for alpha in ((1.5, 1.3) if name == "entmax" else (1.5,)):
            cpu = apply(name, s, 0.8, alpha, prior)
            gpu = apply(name, s.cuda(), 0.8, alpha, prior.cuda())
            assert gpu.is_cuda and torch.allclose(gpu.cpu(), cpu, atol=atol), (name, alpha)
    small = s[:50, :8]
    assert torch.allclose(A.solve_simplex(small.cuda(), "tsallis", 0.8).cpu(), A.solve_simplex(small, "tsallis", 0.8),
                          atol=1e-6)
    with pytest.raises(ValueError, match="row 3"):
        A.sparsemax(_row3_masked().cuda())
