"""wviz.ot.lean: the lean path (one problem on the CPU, numpy on fixed buffers, a float32 start) solves the same
problem as the general one, hands its float32 start over to float64, is taken exactly when it should be, and runs
numpy's BLAS on one thread."""
from __future__ import annotations

import pytest
import torch

from tests.ot_problems import F64, l1_errors, random_problem
from wviz import ot
from wviz.ot import entropic


def _general(monkeypatch, *args, **kw):
    """sinkhorn through the general path (wviz.ot.scaling.Scalings), the lean one switched off."""
    with monkeypatch.context() as m:
        m.setattr(entropic, "use_lean", lambda C, record: False)
        return ot.sinkhorn(*args, **kw)


LEAN_CASES = [(60, 50, 0.05, False), (120, 100, 0.01, False),
              (80, 90, 1e-3, False),                          # a normalised kernel (cost range / gamma > CLAMP)
              (40, 30, 0.02, True), (64, 64, 2e-4, True),     # zero masses; 2e-4: two stages of epsilon scaling
              (520, 512, 0.01, False), (512, 600, 2e-3, True)]   # float32 start


@pytest.mark.parametrize("n,m,gamma,zeros", LEAN_CASES)
def test_lean_path_equals_the_general_path(n, m, gamma, zeros, monkeypatch):
    """The lean path solves the same problem: at a tight tolerance its plan, costs and potentials (up to the
    constant that f + c, g - c leaves free) equal the general path's, and its marginals are within tol."""
    a, b, C = random_problem(n, m, seed=n)
    if zeros:
        a[[1, n // 2]] = 0
        b[[0]] = 0
        a, b = a / a.sum(), b / b.sum()
    lean = ot.sinkhorn(a, b, C, gamma, tol=1e-12, max_iter=50000)
    gen = _general(monkeypatch, a, b, C, gamma, tol=1e-12, max_iter=50000)
    assert bool(lean.converged) and bool(gen.converged)
    assert lean.plan.dtype == F64 and lean.f.dtype == F64 and lean.marginal_error.dtype == F64
    torch.testing.assert_close(lean.plan, gen.plan, rtol=0, atol=1e-9 * float(gen.plan.max()))
    for field in ("cost", "reg_cost"):
        torch.testing.assert_close(getattr(lean, field), getattr(gen, field), rtol=1e-9, atol=1e-12)
    keep_a, keep_b = a > 0, b > 0

    def fg(r):
        return r.f[keep_a][:, None] + r.g[keep_b][None]

    torch.testing.assert_close(fg(lean), fg(gen), rtol=0, atol=1e-9)
    assert max(l1_errors(lean.plan, a, b)) <= 1e-12
    assert float(lean.marginal_error) == pytest.approx(max(l1_errors(lean.plan, a, b)), abs=1e-14)
    # zero masses: empty rows and columns, potentials -inf there and finite elsewhere
    assert float(lean.plan[~keep_a].abs().sum()) == 0 and float(lean.plan[:, ~keep_b].abs().sum()) == 0
    assert bool(torch.isinf(lean.f[~keep_a]).all()) and bool(torch.isfinite(lean.f[keep_a]).all())
    # the potentials give the plan: P_ij = exp((f_i + g_j - C_ij) / gamma), up to the entries whose kernel sat at
    # the clamp (at most exp(-CLAMP + 2 ABSORB) = e^-500 each, wviz.ot.scaling), as on the general path
    torch.testing.assert_close(lean.plan, torch.exp((lean.f[:, None] + lean.g[None, :] - C) / gamma),
                               rtol=1e-9, atol=1e-200)


@pytest.mark.parametrize("gamma", [0.05, 0.01, 1e-3])
def test_lean_path_at_the_default_tolerance(gamma, monkeypatch):
    """At the default tol the lean path (float32 start, float64 finish) meets tol with float64 marginals, and its
    plan is the general path's up to that tolerance."""
    a, b, C = random_problem(520, 512, seed=4, uniform=True)
    lean = ot.sinkhorn(a, b, C, gamma)
    gen = _general(monkeypatch, a, b, C, gamma)
    assert bool(lean.converged) and max(l1_errors(lean.plan, a, b)) <= 1e-6
    assert float(lean.marginal_error) == pytest.approx(max(l1_errors(lean.plan, a, b)), rel=1e-9, abs=1e-15)
    assert float((lean.plan - gen.plan).abs().sum()) <= 4e-6
    torch.testing.assert_close(lean.plan, torch.exp((lean.f[:, None] + lean.g[None, :] - C) / gamma),
                               rtol=1e-9, atol=1e-200)
    # warm-starting from the potentials: already converged, nothing to do in float32
    again = ot.sinkhorn(a, b, C, gamma, init=lean, check_every=1)
    assert again.n_iter <= 2 and bool(again.converged)


def test_lean_float32_start_hands_over_to_float64(monkeypatch):
    """A float64 problem of at least 512 x 512 starts its stages on the float32 copy of the kernel and finishes in
    float64; a fixed omega (exact iterations asked for), a float32 problem and a smaller one never switch."""
    from wviz.ot import lean
    seen = []
    real = lean.LeanScalings.iterate
    monkeypatch.setattr(lean.LeanScalings, "iterate", lambda self, steps: seen.append(self.low) or real(self, steps))
    assert lean._LOW_SIZE == 512 * 512
    a, b, C = random_problem(512, 512, seed=2, uniform=True)
    res = ot.sinkhorn(a, b, C, 0.01)
    assert bool(res.converged) and seen[0] and not seen[-1] and seen == sorted(seen, reverse=True)
    a, b, C = a[:511], b[:511], C[:511, :511]   # below _LOW_SIZE entries
    a, b = a / a.sum(), b / b.sum()
    for kw, args in ((dict(omega=1.5), (a, b, C)), ({}, (a.float(), b.float(), C.float())), ({}, (a, b, C))):
        seen.clear()
        assert bool(ot.sinkhorn(*args, 0.01, **kw).converged) and not any(seen)


def test_lean_dispatch_rule(monkeypatch):
    """use_lean: a single problem (B = 1) on the CPU without record_plans; sinkhorn builds LeanScalings exactly
    then, Scalings for batches and recorded runs."""
    from wviz.ot import lean, scaling
    C = torch.zeros(1, 3, 4, dtype=F64)
    assert lean.use_lean(C, 0)
    assert not lean.use_lean(torch.zeros(2, 3, 4, dtype=F64), 0)
    assert not lean.use_lean(C, 1)
    assert not lean.use_lean(torch.zeros(1, 3, 4, dtype=F64, device="meta"), 0)
    built = []
    for cls in (lean.LeanScalings, scaling.Scalings):
        real = cls.__init__
        monkeypatch.setattr(cls, "__init__", lambda self, *a, real=real, cls=cls, **k: built.append(cls.__name__)
                            or real(self, *a, **k))
    a, b, C = random_problem(12, 10, seed=1)
    for args, kw, path in [((a, b, C), {}, "LeanScalings"), ((a[None], b[None], C[None]), {}, "LeanScalings"),
                           ((a, b, C.T.contiguous().T), {}, "LeanScalings"),
                           ((torch.stack([a, a]), b, C), {}, "Scalings"),
                           ((a, b, C), dict(record_plans=2), "Scalings")]:
        built.clear()
        res = ot.sinkhorn(*args, 0.05, **kw)
        assert built == [path] and bool(res.converged.all()), (path, built)
    # a cost that requires grad, a non-contiguous cost: the same plan
    Cg = C.clone().requires_grad_()
    torch.testing.assert_close(ot.sinkhorn(a, b, Cg, 0.05).plan, ot.sinkhorn(a, b, C, 0.05).plan)
    torch.testing.assert_close(ot.sinkhorn(a, b, C.T.contiguous().T, 0.05).plan, ot.sinkhorn(a, b, C, 0.05).plan)


def test_lean_path_runs_numpy_blas_on_one_thread_and_restores_it(monkeypatch):
    """While lean solves run (nested or concurrent ones too), numpy's BLAS has one thread; the caller's setting
    comes back when the last one ends."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from wviz.ot import lean

    def blas_threads():
        return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]

    before = blas_threads()
    seen = []
    real = lean.LeanScalings.iterate
    monkeypatch.setattr(lean.LeanScalings, "iterate", lambda self, steps: seen.append(blas_threads())
                        or real(self, steps))
    a, b, C = random_problem(30, 20, seed=3)
    assert bool(ot.sinkhorn(a, b, C, 0.05).converged)
    assert seen and all(set(s) <= {1} for s in seen) and blas_threads() == before
    with lean.one_blas_thread():
        with lean.one_blas_thread():
            assert set(blas_threads()) <= {1}
        assert set(blas_threads()) <= {1}
    assert blas_threads() == before
