"""wviz.ot.loop: the contract of the scaling loop. Both implementations (wviz.ot.scaling.Scalings,
wviz.ot.lean.LeanScalings) have exactly its methods with its signatures, and behave alike: the same iterates, the
textbook iteration at omega = 1, plans and errors that agree with each other, save / restore / recover."""
from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

from tests.ot_problems import F64, random_problem
from wviz import ot
from wviz.ot import entropic
from wviz.ot.lean import LeanScalings
from wviz.ot.loop import BatchLoop, ScalingLoop
from wviz.ot.problem import prepare
from wviz.ot.scaling import Scalings

IMPLEMENTATIONS = {"Scalings": Scalings, "LeanScalings": LeanScalings}


def _contract(protocol) -> dict:
    """The methods a Protocol of wviz.ot.loop declares (BatchLoop: its own and ScalingLoop's), name -> signature."""
    declared = [klass for klass in protocol.__mro__ if klass in (ScalingLoop, BatchLoop)]
    names = {n for klass in declared for n, f in vars(klass).items() if inspect.isfunction(f) and not n.startswith("_")}
    return {n: inspect.signature(getattr(protocol, n)) for n in names}


def _params(sig: inspect.Signature):
    """Parameter names, kinds and defaults (annotations aside)."""
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


@pytest.mark.parametrize("name", IMPLEMENTATIONS)
def test_both_loops_have_exactly_the_contracts_methods_and_signatures(name):
    cls = IMPLEMENTATIONS[name]
    protocol = BatchLoop if cls is Scalings else ScalingLoop
    contract = _contract(protocol)
    public = {n for n, f in vars(cls).items() if inspect.isfunction(f) and not n.startswith("_")}
    assert public == set(contract), (public ^ set(contract))   # nothing mirrored outside the contract
    for method, sig in contract.items():
        assert _params(inspect.signature(getattr(cls, method))) == _params(sig), (name, method)
    assert "clamp" in cls.__slots__


def _loops(zeros=False, rho=None):
    """A Scalings and a LeanScalings on the same 12 x 9 problem (B = 1), each with its own copy of the same
    potentials, as sinkhorn builds them (semi-relaxed with rho); and the problem (a, b, C) as batches of one."""
    a, b, C = random_problem(12, 9, seed=2)
    if zeros:
        a[3], b[0] = 0, 0
        a, b = a / a.sum(), b / b.sum()
    a, b, C, _, facts = prepare(a, b, C)
    loops = [cls(a, b, C, facts.row_min.clone(), torch.zeros_like(b), facts.zero_a, facts.zero_b, rho=rho)
             for cls in (Scalings, LeanScalings)]
    return *loops, (a, b, C)


def test_both_loops_satisfy_the_protocol_at_run_time():
    general, lean, _ = _loops()
    assert isinstance(general, ScalingLoop) and isinstance(general, BatchLoop)
    assert isinstance(lean, ScalingLoop) and not isinstance(lean, BatchLoop)   # one problem never leaves a batch


@pytest.mark.parametrize("zeros", [False, True])
@pytest.mark.parametrize("omega", [1.0, 1.5])
def test_both_loops_take_the_same_steps(zeros, omega):
    """The same calls on both loops give the same iterates: plans, errors, ranges, and the final parts."""
    general, lean, (a, b, C) = _loops(zeros=zeros)
    for loop in (general, lean):
        loop.cold_start(0.05, False)
        loop.set_omega(np.array([omega]))
        loop.start()
        loop.iterate(3)
    torch.testing.assert_close(lean.plan(), general.plan(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(lean.errors(), general.errors(), rtol=1e-10)
    assert lean.log_range() == pytest.approx(general.log_range(), rel=1e-10)
    # errors() is the marginal error of plan(), computed here from the plan's sums
    P = general.plan()
    want = torch.maximum((P.sum(-1) - a).abs().sum(-1), (P.sum(-2) - b).abs().sum(-1))
    np.testing.assert_allclose(general.errors(), want.numpy(), rtol=1e-10)
    for loop in (general, lean):
        loop.absorb(0.05)
        loop.rebuild(0.01)
        loop.start()
        loop.iterate(2)
    g_parts, l_parts = general.plan_parts(0.01), lean.plan_parts(0.01)
    for field in ("plan", "marginal_error", "cost", "reg_cost"):
        torch.testing.assert_close(getattr(l_parts, field), getattr(g_parts, field), rtol=1e-10, atol=1e-15)


@pytest.mark.parametrize("zeros", [False, True])
@pytest.mark.parametrize("omega", [1.0, 1.5])
def test_both_loops_take_the_same_semi_relaxed_steps(zeros, omega):
    """Semi-relaxed (rho), the same calls give the same iterates on both loops, the translations of the dual point
    between iterate calls included; errors() measures the rows against a and the columns against the column
    condition's target, which at omega = 1 is the rows' L1 error of plan()."""
    general, lean, (a, b, C) = _loops(zeros=zeros, rho=0.7)
    for loop in (general, lean):
        loop.cold_start(0.05, False)
        loop.set_omega(np.array([omega]))
        loop.start()
        loop.iterate(3)
    np.testing.assert_allclose(lean.errors(), general.errors(), rtol=1e-10)
    for loop in (general, lean):
        loop.iterate(2)   # starts with a translation of the dual point
    torch.testing.assert_close(lean.plan(), general.plan(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(lean.errors(), general.errors(), rtol=1e-10)
    assert lean.log_range() == pytest.approx(general.log_range(), rel=1e-10)
    if omega == 1.0:
        P = general.plan()
        np.testing.assert_allclose(general.errors(), (P.sum(-1) - a).abs().sum(-1).numpy(), rtol=1e-10)
    for loop in (general, lean):
        loop.absorb(0.05)
        loop.rebuild(0.01)
        loop.start()
        loop.iterate(2)
        loop.iterate(2)
    g_parts, l_parts = general.plan_parts(0.01), lean.plan_parts(0.01)
    for field in ("plan", "marginal_error", "cost", "reg_cost", "f", "g"):
        torch.testing.assert_close(getattr(l_parts, field), getattr(g_parts, field), rtol=1e-10, atol=1e-15)


@pytest.mark.parametrize("rho", [None, 0.7])
@pytest.mark.parametrize("name", IMPLEMENTATIONS)
def test_rebuild_restore_and_recover_keep_the_plan(name, rho):
    """absorb + rebuild moves the scalings into the potentials without changing the plan; restore goes back to the
    saved scalings as they are; recover to the same plan on a rebuilt kernel, ready to iterate."""
    general, lean, _ = _loops(zeros=True, rho=rho)
    loop = general if name == "Scalings" else lean
    loop.cold_start(0.05, False)
    loop.set_omega(np.array([1.3]))
    loop.start()
    loop.iterate(4)
    P0 = loop.plan()
    loop.absorb(0.05)
    loop.rebuild(0.05)
    torch.testing.assert_close(loop.plan(), P0, rtol=1e-10, atol=1e-300)
    saved = loop.save()
    loop.start()
    loop.iterate(3)
    assert not torch.allclose(loop.plan(), P0, rtol=1e-6, atol=0)
    loop.restore(saved)
    torch.testing.assert_close(loop.plan(), P0, rtol=1e-10, atol=1e-300)
    loop.iterate(3)
    loop.recover(saved, 0.05)
    torch.testing.assert_close(loop.plan(), P0, rtol=1e-10, atol=1e-300)
    loop.iterate(1)   # recover left K v of the scalings: the next row update reads it
    assert np.isfinite(loop.errors()).all()


def test_recorded_plans_are_the_loops_plans():
    """record_plans keeps diag(u) K diag(v) (ScalingLoop.plan): every one is diag(x) exp(-C / gamma) diag(y), the
    first (iteration 0) and the last (the returned plan) included."""
    a, b, C = random_problem(10, 8, seed=4)
    res = ot.sinkhorn(a, b, C, 0.05, record_plans=3)
    its = [it for it, _ in res.plans]
    assert its[0] == 0 and its[-1] == res.n_iter and len(its) >= 3
    torch.testing.assert_close(res.plans[-1][1], res.plan)
    for _, P in res.plans:
        M = P.log() + C / 0.05   # log x_i + log y_j: rank one in the additive sense
        torch.testing.assert_close(M - M[:, :1] - M[:1, :] + M[0, 0], torch.zeros_like(M), rtol=0, atol=1e-9)


@pytest.mark.parametrize("lean", [True, False])
@pytest.mark.parametrize("iters", [1, 2, 5])
def test_plain_iterations_with_a_zero_mass_are_the_textbook_iterations_on_the_support(iters, lean,
                                                                                      monkeypatch):
    """omega = 1 without epsilon scaling is Sinkhorn's iteration, step for step, also when a point has no mass:
    that point's row and column stay 0 (no 0 / 0), and exactly max_iter iterations are taken."""
    a, b, C = random_problem(5, 4, seed=3)
    a = torch.cat([a[:4], a.new_zeros(1)])
    a = a / a.sum()
    if not lean:
        monkeypatch.setattr(entropic, "use_lean", lambda C, record: False)
    res = ot.sinkhorn(a, b, C, 0.5, tol=1e-14, max_iter=iters, eps_scaling=False, omega=1.0)
    K = torch.exp(-C[:4] / 0.5)
    u, v = torch.ones(4, dtype=F64), torch.ones(4, dtype=F64)
    for _ in range(iters):
        u = a[:4] / (K @ v)
        v = b / (K.T @ u)
    assert res.n_iter == iters
    torch.testing.assert_close(res.plan[:4], u[:, None] * K * v[None], rtol=1e-12, atol=1e-15)
    assert torch.equal(res.plan[4], torch.zeros(4, dtype=F64))
