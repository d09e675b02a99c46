"""CUDA graphs of the balanced Sinkhorn iteration (wviz.ot.scaling.Scalings on CUDA tensors).

Between two convergence checks a stage runs the same kernels on the same buffers: a row update, K^T u, a column
update, K v, a few kernels per iteration, each of which takes longer to launch than to run on a small problem
(BENCHMARKS.md "On a GPU", the limits table). Those iterations are captured once per (number of steps, plain or
over-relaxed) as a CUDA graph and replayed: one graph launch in place of every kernel launch between two checks.
A graph reads and writes fixed buffers: the scalings u, v and the product K v it starts from are copied into them
when the loop has replaced them (a rebuild, an absorption, a restore), and the kernel K, the masses and the
over-relaxation exponents are the loop's own tensors, written in place (wviz.ot.scaling).
"""
from __future__ import annotations

from collections.abc import Callable

import torch


def capture(body: Callable[[], None]):
    """A CUDA graph of ``body``, after running it once on a side stream (the warm-up CUDA graphs ask for, which
    here does the call's work: capturing records the kernels without running them). Captured with the graph's own
    begin and end, not torch.cuda.graph's context, which empties torch's memory cache at every capture.

    None when the capture fails (the body's work is done all the same): a solve must not fail for want of a graph
    (an invalidated capture seen on an H200: BENCHMARKS.md "On a GPU")."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph, failed = torch.cuda.CUDAGraph(), False
    with torch.cuda.stream(side):
        body()
        graph.capture_begin()
        try:
            body()
        except RuntimeError:
            failed = True
        finally:
            try:   # ends the capture, also a failed one
                graph.capture_end()
            except RuntimeError:
                failed = True
    torch.cuda.current_stream().wait_stream(side)
    return None if failed else graph


class Graphs:
    """The graphs of one batch's iterations and the buffers they work on: u (B, n, 1), v (B, m, 1), Kv = K v and
    KTu = K^T u, whose shapes stay fixed until the batch is compacted (then the loop makes a new Graphs)."""

    def __init__(self) -> None:
        self.graphs: dict = {}
        self.buffers: tuple | None = None

    def run(self, steps: int, plain: bool, state: tuple, iterate: Callable) -> tuple:
        """``steps`` iterations from state = (u, v, Kv): the buffers (u, v, Kv, KTu) after them. iterate(u, v, Kv,
        steps) -> (u, v, Kv, KTu) is the loop's own iteration, which the graph of (steps, plain) captures."""
        if self.buffers is None:
            u, v, Kv = state
            self.buffers = (torch.empty_like(u), torch.empty_like(v), torch.empty_like(Kv), torch.empty_like(v))
        for buffer, now in zip(self.buffers, state):
            if now is not buffer:
                buffer.copy_(now)
        if (steps, plain) not in self.graphs:
            self.graphs[steps, plain] = capture(lambda: self._body(steps, iterate))
        elif self.graphs[steps, plain] is None:   # its capture failed: eager iterations
            self._body(steps, iterate)
        else:
            self.graphs[steps, plain].replay()
        return self.buffers

    def _body(self, steps: int, iterate: Callable):
        """The iterations from the buffers back into them."""
        assert self.buffers is not None   # run, the only caller, made them
        u, v, Kv, _ = self.buffers
        for buffer, new in zip(self.buffers, iterate(u, v, Kv, steps)):
            buffer.copy_(new)
