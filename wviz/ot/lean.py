"""The lean path of Sinkhorn: one problem (B = 1) on the CPU, iterated in numpy on buffers allocated once.

The same algorithm as wviz.ot.scaling.Scalings (same kernel, over-relaxed updates, checks, absorption and stages,
driven by the same code of wviz.ot.entropic through the contract wviz.ot.loop.ScalingLoop), with the work of an
iteration done differently: each vector operation is one numpy ufunc writing into a preallocated buffer (cheaper
than a torch operation and its new tensor), the matrix-vector products are numpy's (BLAS) into fixed outputs, and
the kernel's exp is numpy's, which is faster than torch's on the CPU (BENCHMARKS.md). The kernel, the potentials and
the plan stay torch tensors sharing memory with the numpy arrays: the passes over the n x m buffer that torch does
in one operation (scale and shift, clamp, row scaling) stay torch's. Large float64 problems start each stage on a
float32 copy of the kernel and finish in float64 (below).
"""
from __future__ import annotations

import math
import threading
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from . import semirelaxed
from .loop import PlanParts
from .problem import marginal_error
from .relaxation import relaxed_into
from .scaling import CLAMP, kernel

# A float64 problem of at least _LOW_SIZE entries runs each stage's first iterations on a float32 copy of its
# kernel (half the bytes per product; below that size the copy costs about what it saves) and finishes in float64:
# the float32 iterations hand over once the marginal error is below _LOW_SWITCH (well above float32's rounding
# floor), at anything non-finite, or once the scalings stop fitting (_low_fits). Entries of the copy below
# exp(-_LOW_CLAMP) are raised to it, so that neither they nor their products with the scalings (kept within
# exp(+-_LOW_MIN)) are subnormal numbers, which make products slow (wviz.ot.scaling). Every plan, potential and
# error that a solve returns is float64's.
_LOW_SIZE = 1 << 18
_LOW_SWITCH = 1e-4
_LOW_CLAMP = CLAMP[torch.float32]
_LOW_MIN = 25.0
# what a precision holds: masses, scalings, products, scratch vectors, the kernel and its transpose
_VECTORS = ("a", "b", "u", "v", "Kv", "KTu", "tn", "sn", "tm", "sm", "Km", "KTm")


# numpy's BLAS runs the products on one thread while lean solves run (the caller's setting comes back when the last
# concurrent one ends): with its default of a thread per core, its workers keep spinning after each product and
# fight torch's intra-op threads for the same cores, which made small solves ten times slower (BENCHMARKS.md).
_blas: dict[str, Any] = {"lock": threading.Lock(), "users": 0, "libs": None, "saved": ()}


def _blas_libs() -> list:
    """threadpoolctl's controllers of the BLAS libraries loaded (numpy's OpenBLAS), found once; [] without
    threadpoolctl (a dependency of scikit-learn)."""
    if _blas["libs"] is None:
        try:
            from threadpoolctl import ThreadpoolController
            _blas["libs"] = ThreadpoolController().select(user_api="blas").lib_controllers
        except ImportError:
            _blas["libs"] = []
    return _blas["libs"]


@contextmanager
def one_blas_thread():
    """numpy's BLAS limited to one thread for the duration (nested and concurrent uses share one limit)."""
    with _blas["lock"]:
        if _blas["users"] == 0:
            _blas["saved"] = [(lib, lib.num_threads) for lib in _blas_libs()]
            for lib, n in _blas["saved"]:
                if n != 1:
                    lib.set_num_threads(1)
        _blas["users"] += 1
    try:
        yield
    finally:
        with _blas["lock"]:
            _blas["users"] -= 1
            if _blas["users"] == 0:
                for lib, n in _blas["saved"]:
                    if n != 1:
                        lib.set_num_threads(n)


def use_lean(C: torch.Tensor, record: int) -> bool:
    """The lean path is taken for a single problem (B = 1) on the CPU whose plans are not recorded; batches, CUDA
    tensors and record_plans go the general way (wviz.ot.scaling.Scalings)."""
    return C.device.type == "cpu" and C.shape[0] == 1 and not record


class LeanScalings:
    """One problem in scaling form, P = diag(u) K diag(v), K = exp((f + g - C) / gamma): the
    :class:`wviz.ot.loop.ScalingLoop` in numpy. C (1, n, m), K its kernel (1, n, m) and f (1, n), g (1, m) are torch
    tensors; the scalings u, v, the products Kv = K v, KTu = K^T u and the kernel Km they are iterated with are numpy
    arrays of the active precision (the problem's own, or float32 while low), updated in place; spare holds the
    other's. low=False: never the float32 start (a fixed omega asks for exact float64 iterations).

    rho: the semi-relaxed problem (wviz.ot.semirelaxed; no float32 start): the column update exp(c - phi log K^T u)
    with phi = p and c from log_b and g at gamma, written into tt (the plain update, kept for the checks and the next
    translation once t_ok), q the checks' column target t * KTu; the translations of the dual point accumulate in
    shift until the potentials are read (:meth:`_settle`).
    """

    __slots__ = _VECTORS + ("C", "K", "Kn", "Cn", "f", "g", "za", "zb", "ma", "mb", "omega_minus_1", "plain",
                            "clamp", "low", "low_ok", "spare", "total", "stale", "rho", "p", "gamma", "log_b", "c",
                            "tt", "q", "t_ok", "shift", "floor")
    # spare: None until the first float32 start; p, gamma: None until the semi-relaxed problem's _targets
    spare: tuple[np.ndarray, ...] | None
    p: float | None
    gamma: float | None

    def __init__(self, a, b, C, f, g, zero_a: bool, zero_b: bool, low: bool = True, rho: float | None = None):
        n, m = C.shape[1:]
        self.Cn, self.a, self.b = (t.detach().numpy()[0] for t in (C, a, b))
        dtype = self.Cn.dtype
        # the points without mass: potential -inf, scalings set back to 0 after each update (0 / 0 there otherwise)
        self.za = np.flatnonzero(self.a == 0) if zero_a else None
        self.zb = np.flatnonzero(self.b == 0) if zero_b else None
        if zero_a:
            f[:, self.za] = -torch.inf
        if zero_b:
            g[:, self.zb] = -torch.inf
        self.C, self.f, self.g = C, f, g
        # numpy's buffer: it asks the kernel for huge pages (fewer page faults on the first write, BENCHMARKS.md)
        self.Kn = np.empty((n, m), dtype=dtype)
        self.Km, self.KTm, self.K = self.Kn, self.Kn.T, torch.from_numpy(self.Kn)[None]
        self.ma, self.mb = (self.a > 0).astype(dtype), (self.b > 0).astype(dtype)
        self.u, self.v = self.ma.copy(), self.mb.copy()
        self.Kv, self.tn, self.sn = np.empty(n, dtype), np.empty(n, dtype), np.empty(n, dtype)
        self.KTu, self.tm, self.sm = np.empty(m, dtype), np.empty(m, dtype), np.empty(m, dtype)
        self.clamp = CLAMP[C.dtype]
        self.omega_minus_1, self.plain = 0.0, True
        self.low, self.spare, self.stale = False, None, False
        self.low_ok = low and dtype == np.float64 and n * m >= _LOW_SIZE and rho is None
        self.total = float(self.a.sum())
        self.rho, self.p, self.gamma, self.t_ok, self.shift = rho, None, None, False, 0.0
        if rho is not None:
            with np.errstate(divide="ignore"):   # log 0 = -inf at a zero mass
                self.log_b = np.log(self.b)
            self.c, self.tt, self.q = np.empty(m, dtype), np.empty(m, dtype), np.empty(m, dtype)
            self.floor = semirelaxed.FLOOR[C.dtype]

    # ---- precision ----------------------------------------------------------------------------------------------

    def _use(self, low: bool):
        """Make float32 (low) or the problem's own precision the active one, carrying u, v over (and Kv back
        from float32: the next iteration's starting point; KTu is stale until then)."""
        if low == self.low:
            return
        if self.spare is None:   # the float32 buffers, allocated once
            n, m = self.Kn.shape
            K32 = np.empty((n, m), dtype=np.float32)
            self.spare = (self.a.astype(np.float32), self.b.astype(np.float32)) + tuple(
                np.empty(k, np.float32) for k in (n, m, n, m, n, n, m, m)) + (K32, K32.T)
        if low:   # a new float32 copy of the current kernel (torch's copy and clamp: numpy's casting pass is slower)
            torch.from_numpy(self.spare[-2]).copy_(self.K[0]).clamp_(min=math.exp(-_LOW_CLAMP))
        mine = tuple(getattr(self, k) for k in _VECTORS)
        for i in (2, 3) if low else (2, 3, 4):
            np.copyto(self.spare[i], mine[i], casting="same_kind")
        for k, x in zip(_VECTORS, self.spare):
            setattr(self, k, x)
        self.spare, self.low, self.stale = mine, low, True

    # ---- kernel and potentials (rare: once per stage or absorption) --------------------------------------------

    def cold_start(self, gamma: float, f_is_zero: bool):
        """The first kernel without the clamp (ScalingLoop.cold_start), scalings 1 on the points with mass."""
        self._use(False)
        kernel(self.C, None if f_is_zero else self.f, self.g, gamma, self.K, None)
        self.u[:], self.v[:] = self.ma, self.mb
        self._targets(gamma)

    def _settle(self):
        """The semi-relaxed translations of the dual point so far into the potentials: f - shift, g + shift (the
        kernel and the plan do not change)."""
        if self.shift:
            self.f, self.g, self.shift = self.f - self.shift, self.g + self.shift, 0.0

    def _targets(self, gamma: float):
        """Semi-relaxed: c = log b - g / (rho + gamma) and phi for the potentials g at gamma."""
        if self.rho is not None:
            self.gamma, self.p, self.t_ok = gamma, semirelaxed.phi(self.rho, gamma), False
            semirelaxed.log_targets_into(self.c, self.log_b, self.g.numpy()[0], self.rho, gamma, self.zb)

    def _absorb(self, u, v, gamma: float):
        """f += gamma log u, g += gamma log v (u = 0, a zero mass, gives -inf)."""
        self._settle()
        self.f = self.f + gamma * torch.from_numpy(u).log()[None]
        self.g = self.g + gamma * torch.from_numpy(v).log()[None]

    def absorb(self, gamma: float):
        """The current scalings, of the active precision, into the potentials (ScalingLoop.absorb)."""
        self._absorb(self.u, self.v, gamma)

    def rebuild(self, gamma: float):
        """The normalised kernel for gamma (ScalingLoop.rebuild), in the problem's own precision."""
        self._use(False)
        self._settle()
        row_shift, col_shift = kernel(self.C, self.f, self.g, gamma, self.K, self.clamp, normalize=True)
        self.f = self.f - gamma * row_shift[:, :, 0]
        self.g = self.g - gamma * col_shift[:, :, 0]
        np.multiply(np.exp(row_shift.numpy()[0, :, 0]), self.ma, out=self.u)
        if self.rho is None:
            np.multiply(np.exp(col_shift.numpy()[0, :, 0]), self.mb, out=self.v)
        else:   # a column without mass worth a float keeps the floor (module semirelaxed)
            np.multiply(np.maximum(np.exp(col_shift.numpy()[0, :, 0]), self.floor), self.mb, out=self.v)
            self._targets(gamma)

    def set_omega(self, omega: np.ndarray):
        """The over-relaxation factor (an array of one) for the updates of :meth:`iterate`."""
        self.plain = bool(omega[0] == 1)
        self.omega_minus_1 = float(omega[0]) - 1.0

    # ---- iterations and checks ----------------------------------------------------------------------------------

    def start(self):
        """Kv = K v, what the first row update of a stage reads; a large float64 stage starts in float32 unless
        the scalings do not fit it or the rows are already within _LOW_SWITCH (a warm start near the solution)."""
        self._use(self.low_ok and self._low_fits())
        np.dot(self.Km, self.v, out=self.Kv)
        # the rows' error ||u * K v - a||_1 (the columns' needs K^T u, which the first iteration computes)
        if self.low and marginal_error(self.a, None, self.Kv, scalings=(self.u, None),
                                       work=(self.tn, None)) <= _LOW_SWITCH:
            self._use(False)
            np.dot(self.Km, self.v, out=self.Kv)

    def refresh(self):
        """Kv and KTu of the current scalings."""
        np.dot(self.Km, self.v, out=self.Kv)
        np.dot(self.KTm, self.u, out=self.KTu)
        self.stale = False
        if self.rho is not None:
            self._column_update()

    def save(self):
        """A copy of the scalings (they are updated in place)."""
        return self.u.copy(), self.v.copy()

    def restore(self, saved):
        """The scalings saved (copies: iterations update the scalings in place), with their Kv and KTu."""
        self.u, self.v = saved[0].copy(), saved[1].copy()
        self.refresh()

    def recover(self, saved: tuple[np.ndarray, np.ndarray], gamma: float):
        """The scalings saved, absorbed and rebuilt for gamma in float64, which the rest of the solve keeps."""
        self.low_ok = False
        self._use(False)
        self._absorb(*saved, gamma)
        self.rebuild(gamma)
        self.start()

    def iterate(self, steps: int):
        """steps Sinkhorn iterations (ScalingLoop.iterate): u <- t clamp(t / u)^(omega - 1) with t = a / K v (the
        plain update t at omega = 1), then the same for v; every operation writes into a fixed buffer.
        Semi-relaxed: :meth:`_iterate_semi`."""
        if self.rho is not None:
            return self._iterate_semi(steps)
        K, KT, u, v, Kv, KTu = self.Km, self.KTm, self.u, self.v, self.Kv, self.KTu
        rows = (u, self.a, Kv, self.tn, self.sn, self.za)
        cols = (v, self.b, KTu, self.tm, self.sm, self.zb)
        with np.errstate(all="ignore"):   # 0 / 0 at a zero mass (reset below); overflow is caught by the checks
            for _ in range(steps):
                self._update(*rows)
                np.dot(KT, u, out=KTu)
                self._update(*cols)
                np.dot(K, v, out=Kv)
        self.stale = False

    def _update(self, x, mass, prod, t, s, zero):
        """One side's scaling in place: x <- mass / prod (plain), or t clamp(t / x)^(omega - 1) with t = mass / prod;
        0 at the points without mass (``zero``)."""
        if self.plain:
            np.divide(mass, prod, out=x)
            if zero is not None:
                x[zero] = 0.0
        else:
            np.divide(mass, prod, out=t)
            relaxed_into(x, t, self.omega_minus_1, s, zero)

    def _iterate_semi(self, steps: int):
        """steps semi-relaxed iterations: the row update of :meth:`iterate`, then the column update into tt and
        from it v (wviz.ot.semirelaxed); before each row update, once a column update has given tt, the translation
        of the dual point (as wviz.ot.scaling.Scalings._iterate_semi), kept in shift until the potentials are read."""
        assert self.rho is not None and self.gamma is not None   # semi-relaxed: _targets has set gamma
        K, KT, u, v, Kv, KTu, c = self.Km, self.KTm, self.u, self.v, self.Kv, self.KTu, self.c
        rows = (u, self.a, Kv, self.tn, self.sn, self.za)
        scale = 1.0 / (self.rho + self.gamma)
        with np.errstate(all="ignore"):   # as in iterate
            for _ in range(steps):
                if self.t_ok:
                    lam = semirelaxed.translation(self.tt, KTu, self.total, self.rho)
                    self.shift += lam
                    np.subtract(c, lam * scale, out=c)
                self._update(*rows)
                np.dot(KT, u, out=KTu)
                self._column_update()
                if self.plain:
                    np.copyto(v, self.tt)
                else:
                    relaxed_into(v, self.tt, self.omega_minus_1, self.sm, self.zb)
                np.dot(K, v, out=Kv)
        self.stale = False

    def _column_update(self):
        """The plain semi-relaxed column update tt = max(exp(c - phi log K^T u), floor) of the current KTu, 0 at
        the points without mass."""
        semirelaxed.column_scalings_into(self.tt, self.c, self.KTu, self.p, self.floor, self.zb)
        self.t_ok = True

    def errors(self) -> np.ndarray:
        """The marginal error, as an array of one, computed in the scratch buffers tn, tm; the float32 iterations
        hand over to float64 here (module comment), which then measures it. Semi-relaxed, the columns' target is
        the column condition's t * KTu (wviz.ot.semirelaxed)."""
        err = np.empty(1)
        target = self.b if self.rho is None else np.multiply(self.tt, self.KTu, out=self.q)
        with np.errstate(all="ignore"):   # an overflow shows as a non-finite error, which the checks handle
            err[0] = marginal_error(self.a, target, self.Kv, self.KTu, scalings=(self.u, self.v),
                                    work=(self.tn, self.tm))
        if self.low and not (err[0] > _LOW_SWITCH and self._low_fits()):
            self._use(False)
        return err

    def _extremes(self):
        """The smallest and largest scaling over the points with mass (NaN after an overflow); semi-relaxed, the
        smallest of the rows only (a small column scaling cannot overflow; module semirelaxed)."""
        u, v = self.u, self.v
        if self.rho is not None:
            lo = u.min() if self.za is None else u.min(where=self.ma > 0, initial=np.inf)
            return lo, np.maximum(u.max(), v.max())
        if self.za is None and self.zb is None:
            return np.minimum(u.min(), v.min()), np.maximum(u.max(), v.max())
        return (np.minimum(u.min(where=self.ma > 0, initial=np.inf), v.min(where=self.mb > 0, initial=np.inf)),
                np.maximum(u.max(), v.max()))

    def log_range(self) -> float:
        """max |log u|, |log v| over the points with mass (inf after an overflow)."""
        lo, hi = self._extremes()
        if not (lo > 0 and hi < np.inf):   # NaN, 0 or inf: an overflow
            return np.inf
        return float(max(-np.log(lo), np.log(hi)))

    def _low_fits(self) -> bool:
        """Whether the scalings fit the float32 iteration: all within exp(+-_LOW_MIN), and the mass that the
        raised entries of the copy can add, at most exp(-_LOW_CLAMP) sum(u) sum(v), under _LOW_SWITCH / 1000 of
        the total mass."""
        lo, hi = self._extremes()
        added = float(self.u.sum()) * float(self.v.sum()) * math.exp(-_LOW_CLAMP)
        return bool(lo >= math.exp(-_LOW_MIN) and hi <= math.exp(_LOW_MIN)) and \
            added <= 1e-3 * _LOW_SWITCH * self.total

    # ---- the result ---------------------------------------------------------------------------------------------

    def plan(self) -> torch.Tensor:
        """diag(u) K diag(v) as a new (1, n, m) tensor of the problem's precision."""
        return (torch.from_numpy(self.u)[:, None] * self.K[0] * torch.from_numpy(self.v))[None]

    def plan_parts(self, gamma: float) -> PlanParts:
        """P (written over K) and its parts as torch tensors of a batch of one, in the problem's precision."""
        if self.low or self.stale:
            self._use(False)
            self.refresh()
        self._settle()
        u, v = self.u, self.v
        if self.rho is not None:
            # as wviz.ot.scaling.Scalings.plan_parts: a last plain row update holds the rows to rounding, and the
            # columns are measured against the column condition of these rows (tt of the new KTu)
            with np.errstate(invalid="ignore"):   # 0 / 0 at a zero mass (reset below)
                np.divide(self.a, self.Kv, out=u)
            if self.za is not None:
                u[self.za] = 0.0
            np.dot(self.KTm, u, out=self.KTu)
            self._column_update()
        row, col = u * self.Kv, v * self.KTu
        err = marginal_error(self.a, self.b if self.rho is None else self.tt * self.KTu, row, col)
        P = self.K.mul_(torch.from_numpy(u)[:, None]).mul_(torch.from_numpy(v))
        with np.errstate(divide="ignore"):   # log 0 = -inf at a zero mass
            f = self.f.numpy()[0] + gamma * np.log(u)
            g = self.g.numpy()[0] + gamma * np.log(v)
        if self.rho is None:
            # <C, P> - gamma H(P) = <f, P 1> + <g, P^T 1> over the points with mass (module scaling)
            reg = np.dot(f if self.za is None else np.where(self.ma > 0, f, 0), row) + \
                np.dot(g if self.zb is None else np.where(self.mb > 0, g, 0), col)
        else:
            tf, tg, trow, tcol, ta, tb = (torch.from_numpy(x) for x in (f, g, row, col, self.a, self.b))
            reg = float(semirelaxed.objective(tf, tg, trow, tcol, ta, tb, torch.from_numpy(self.ma > 0),
                                              torch.from_numpy(self.mb > 0), gamma, self.rho))
        parts = torch.from_numpy(np.array([err, np.vdot(self.Cn, self.Kn), reg], dtype=self.Cn.dtype))
        return PlanParts(P, parts[0:1], torch.from_numpy(f)[None], torch.from_numpy(g)[None], parts[1:2], parts[2:3])
