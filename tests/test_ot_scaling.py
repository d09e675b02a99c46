"""wviz.ot.scaling: the kernel of the scaling form (clamped, normalised with exact shifts), the batched
matrix-vector product, and compaction of a batch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.ot_problems import F64, random_problem
from wviz.ot.problem import prepare
from wviz.ot.scaling import CLAMP, Scalings, kernel, mv


def test_kernel_is_the_exponential_of_the_potentials():
    """K_ij = exp((f_i + g_j - C_ij) / gamma), exponents clamped to [-CLAMP, CLAMP / 2]; f=None stands for 0."""
    g = torch.Generator().manual_seed(0)
    C = torch.rand(2, 5, 4, generator=g, dtype=F64)
    f, gg = torch.rand(2, 5, generator=g, dtype=F64), torch.rand(2, 4, generator=g, dtype=F64)
    K = torch.empty_like(C)
    assert kernel(C, f, gg, 0.1, K, CLAMP[F64]) is None
    torch.testing.assert_close(K, torch.exp((f[:, :, None] + gg[:, None, :] - C) / 0.1), rtol=1e-14, atol=0)
    kernel(C, None, gg, 0.1, K, None)
    torch.testing.assert_close(K, torch.exp((gg[:, None, :] - C) / 0.1), rtol=1e-14, atol=0)
    kernel(C, f, gg, 1e-4, K, 60.0)   # exponents down to -10^4: clamped at -60
    torch.testing.assert_close(K.min(), torch.tensor(np.exp(-60.0), dtype=F64), rtol=1e-14, atol=0)


def test_a_normalised_kernel_keeps_every_row_and_column_and_its_shifts_are_exact():
    """normalize=True: every row and column of the kernel has largest entry 1 (none is lost to the clamp at a tiny
    gamma), and exp(r_i) K_ij exp(c_j) is the unnormalised kernel; a row of zero mass (f = -inf) sits at the clamp
    (its scaling, 0, keeps the plan's row empty) and is left out of the column shifts."""
    a, b, C = random_problem(6, 5, seed=1)
    C, f, gg = C[None], torch.zeros(1, 6, dtype=F64), torch.zeros(1, 5, dtype=F64)
    f[0, 2] = -torch.inf
    K = torch.empty_like(C)
    r, c = kernel(C, f, gg, 1e-3, K, CLAMP[F64], normalize=True)
    keep = torch.ones(6, dtype=torch.bool)
    keep[2] = False
    torch.testing.assert_close(K[0, keep].amax(-1), torch.ones(5, dtype=F64))
    torch.testing.assert_close(K[0, keep].amax(0), torch.ones(5, dtype=F64))
    assert bool((K[0, 2] == np.exp(-CLAMP[F64])).all()) and float(r[0, 2, 0]) == 0
    log_plain = (f[:, :, None] + gg[:, None, :] - C) / 1e-3
    exact = K > np.exp(-CLAMP[F64])   # the entries above the clamp
    assert int(exact[0, keep].sum()) >= 10
    torch.testing.assert_close((K.log() + r + c.mT)[exact], log_plain[exact], rtol=1e-12, atol=1e-9)


def test_mv_is_the_batched_matrix_vector_product():
    g = torch.Generator().manual_seed(2)
    for B in (1, 3):
        K, v = torch.rand(B, 7, 4, generator=g, dtype=F64), torch.rand(B, 4, 1, generator=g, dtype=F64)
        torch.testing.assert_close(mv(K, v), torch.bmm(K, v), rtol=1e-14, atol=0)
        torch.testing.assert_close(mv(K.mT, torch.rand(B, 7, 1, dtype=F64)).shape, torch.Size([B, 4, 1]))


def test_keep_compacts_every_batched_tensor():
    """Scalings.keep(idx): every tensor with one row per problem (Scalings.BATCHED) keeps the rows idx, and the
    loop goes on with the problems as they were."""
    probs = [random_problem(6, 5, seed=s) for s in range(3)]
    a, b, C = (torch.stack([p[i] for p in probs]) for i in range(3))
    a, b, C, _, facts = prepare(a, b, C)
    loop = Scalings(a, b, C, facts.row_min.clone(), torch.zeros_like(b), False, False)
    loop.cold_start(0.1, False)
    loop.set_omega(np.ones(3))
    loop.start()
    loop.iterate(2)
    before = {name: getattr(loop, name).clone() for name in Scalings.BATCHED}
    P = loop.plan()
    loop.keep(torch.tensor([2, 0]))
    for name in Scalings.BATCHED:
        torch.testing.assert_close(getattr(loop, name), before[name][[2, 0]], rtol=0, atol=0)
    torch.testing.assert_close(loop.plan(), P[[2, 0]], rtol=0, atol=0)
    assert loop.KT.data_ptr() == loop.K.data_ptr()


def test_graphed_iterations_give_the_eager_loops_results_bit_for_bit(monkeypatch):
    """wviz.ot.graphs' bookkeeping, on the CPU: with the CUDA capture replaced by a stand-in whose replay runs the
    captured iterations again on the same buffers, a batch solved through graphs (buffers copied in after each
    rebuild and absorption, the over-relaxation written in place, save() a copy, fresh graphs after a compaction)
    equals the eager loop's result bit for bit; the graphs were replayed, over plain and over-relaxed steps."""
    from functools import partial

    from wviz import ot
    from wviz.ot import entropic, graphs

    captured = []

    class Replay:
        def __init__(self, body):
            self.body, self.replays = body, 0

        def replay(self):
            self.replays += 1
            self.body()

    def capture(body):
        body()                                  # the warm-up does the call's iterations, as on CUDA
        captured.append(Replay(body))
        return captured[-1]

    probs = [random_problem(12, 9, seed=s) for s in range(6)]
    a, b = torch.stack([p[0] for p in probs]), torch.stack([p[1] for p in probs])
    C = torch.stack([p[2] * k for p, k in zip(probs, [1, 1, 40, 1, 1, 1])])   # one slow problem: compaction
    b[3, 4] = 0                                                               # a zero mass: the masked updates
    b[3] /= b[3].sum()
    for gamma, omega in ((0.02, None), (1e-3, None), (0.05, 1.0)):   # over-relaxed steps; plain ones (omega 1)
        eager = ot.sinkhorn(a, b, C, gamma, tol=1e-10, max_iter=100000, omega=omega)
        monkeypatch.setattr(graphs, "capture", capture)
        monkeypatch.setattr(entropic, "Scalings", partial(entropic.Scalings, use_graphs=True))
        graphed = ot.sinkhorn(a, b, C, gamma, tol=1e-10, max_iter=100000, omega=omega)
        monkeypatch.undo()
        for field in ("plan", "f", "g", "cost", "reg_cost", "marginal_error", "converged"):
            assert torch.equal(getattr(graphed, field), getattr(eager, field)), (gamma, field)
        assert graphed.n_iter == eager.n_iter and torch.equal(graphed.history, eager.history)
    assert sum(r.replays for r in captured) > len(captured) >= 2


def test_failed_captures_give_the_eager_loops_results_bit_for_bit(monkeypatch):
    """A capture that fails (wviz.ot.graphs.capture gives None after its warm-up did the work) leaves that number
    of steps to eager iterations on the same buffers: the batch's result is the eager loop's, bit for bit."""
    from functools import partial

    from wviz import ot
    from wviz.ot import entropic, graphs

    failed = []

    def capture(body):
        body()
        failed.append(body)
        return None

    probs = [random_problem(12, 9, seed=s) for s in range(3)]   # a batch: the single problem's lean path has no graphs
    a, b, C = (torch.stack([p[i] for p in probs]) for i in range(3))
    eager = ot.sinkhorn(a, b, C, 1e-3, tol=1e-10, max_iter=100000)
    bodies, body = [], graphs.Graphs._body
    monkeypatch.setattr(graphs, "capture", capture)
    monkeypatch.setattr(graphs.Graphs, "_body", lambda *args: bodies.append(1) or body(*args))
    monkeypatch.setattr(entropic, "Scalings", partial(entropic.Scalings, use_graphs=True))
    graphed = ot.sinkhorn(a, b, C, 1e-3, tol=1e-10, max_iter=100000)
    for field in ("plan", "f", "g", "marginal_error", "converged"):
        assert torch.equal(getattr(graphed, field), getattr(eager, field)), field
    assert graphed.n_iter == eager.n_iter
    assert len(bodies) > len(failed) >= 1   # a failed key is not captured again: its later steps run eagerly


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_cuda_capture_that_fails_gives_none_and_the_device_goes_on():
    """A body that synchronises with the host cannot be captured: capture() gives None instead of raising, the
    warm-up ran the body once, and the device takes the next work as usual."""
    from wviz.ot import graphs

    x = torch.zeros(4, device="cuda")

    def body():
        x.add_(1)
        torch.cuda.synchronize()   # forbidden while capturing

    assert graphs.capture(body) is None
    torch.cuda.synchronize()
    assert x.tolist() == [1.0] * 4
    assert (x * 2).sum().item() == 8.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
@pytest.mark.parametrize("omega", [None, 1.0])
def test_cuda_graphs_give_the_eager_iterations(monkeypatch, omega):
    """On CUDA the balanced iterations run as captured graphs (wviz.ot.graphs): a batch with a slow problem (a
    compaction, new graphs) gives the eager loop's plans, and graphs were captured and replayed."""
    from functools import partial

    from wviz import ot
    from wviz.ot import entropic, graphs

    probs = [random_problem(40, 30, seed=s) for s in range(6)]
    a, b = (torch.stack([p[i] for p in probs]).cuda() for i in range(2))
    C = torch.stack([p[2] * k for p, k in zip(probs, [1, 1, 40, 1, 1, 1])]).cuda()
    monkeypatch.setattr(entropic, "Scalings", partial(entropic.Scalings, use_graphs=False))
    eager = ot.sinkhorn(a, b, C, 0.02, tol=1e-10, max_iter=100000, omega=omega, route=False)
    monkeypatch.undo()
    made, real = [], graphs.capture
    monkeypatch.setattr(graphs, "capture", lambda body: made.append(body) or real(body))
    graphed = ot.sinkhorn(a, b, C, 0.02, tol=1e-10, max_iter=100000, omega=omega, route=False)
    assert graphed.solved_on == "cuda" and len(made) >= 2 and bool(graphed.converged.all())
    torch.testing.assert_close(graphed.plan, eager.plan, atol=1e-12, rtol=0)
    assert graphed.n_iter == eager.n_iter
