"""The stabilised scaling form of entropic OT (Schmitzer 2019) on a batch: the plan of eq. (23) of 002 written as
P = diag(u) K diag(v) with the kernel K_ij = exp((f_i + g_j - C_ij) / gamma) built from log-domain potentials f, g
and the scalings u, v kept near 1 by absorbing them into f, g (f += gamma log u). Sinkhorn's iterations (Cuturi 2013)
are then cheap matrix-vector products on u, v, and nothing overflows for any gamma.
"""
from __future__ import annotations

import numpy as np
import torch

from . import graphs, semirelaxed
from .loop import PlanParts
from .problem import dot, marginal_error
from .relaxation import relaxed, relaxed_from

# Kernel exponents (f_i + g_j - C_ij) / gamma are clamped to [-CLAMP, CLAMP / 2]: below about -708 (float64) or
# -87 (float32) exp returns subnormal numbers or 0 through a slow path, and matrix-vector products with subnormal
# entries are much slower on the CPU. Clamped entries carry at most exp(-CLAMP + 2 ABSORB) of mass while the
# scalings stay within exp(+-ABSORB); a row or column that leans on clamped entries needs a scaling beyond that
# bound, which triggers an absorption that recomputes the kernel exactly.
CLAMP = {torch.float64: 600.0, torch.float32: 60.0}
ABSORB = {torch.float64: 50.0, torch.float32: 12.0}


def mv(K, v):
    """K v for a batch K (B, n, m), v (B, m, 1). For B > 1 as the row product (v^T K^T)^T, the same numbers as
    torch's batched matrix-vector bmm(K, v) but faster on the CPU (BENCHMARKS.md); for B = 1 the plain product
    saves the views' overhead."""
    return torch.bmm(K, v) if K.shape[0] == 1 else torch.bmm(v.mT, K.mT).mT


def kernel(C, f, g, gamma, out, clamp, normalize=False):
    """K_ij = exp((f_i + g_j - C_ij) / gamma), exponent clamped to [-clamp, clamp / 2], written into out.

    f=None stands for f = 0 and clamp=None skips the clamp (the caller knows the exponents are in range), each
    saving a pass over the n x m buffer. normalize=True shifts the exponent so that every row and column has
    maximum 0 (no row or column of the kernel is lost to the clamp after a change of gamma, a warm start or a
    large absorption) and returns the shifts (r, c) with f_i + g_j = (f_i - gamma r_i) + (g_j - gamma c_j) + ...:
    the caller keeps the plan exact by starting from the scalings u = exp(r), v = exp(c).
    """
    torch.add(g[:, None, :] / gamma, C, alpha=-1.0 / gamma, out=out)
    if f is not None:
        out.add_(f[:, :, None] / gamma)
    shifts = None
    if normalize:
        r = out.amax(-1, keepdim=True)
        r = torch.where(torch.isfinite(r), r, 0)            # rows of zero mass stay at -inf
        out.sub_(r)
        c = out.amax(-2, keepdim=True)
        c = torch.where(torch.isfinite(c), c, 0)
        out.sub_(c)
        shifts = r, c.mT
    if clamp is not None:
        out.clamp_(-clamp, clamp / 2)
    if out.device.type == "cpu":   # numpy's exp is faster than torch's on the CPU (BENCHMARKS.md)
        np.exp(out.numpy(), out=out.numpy())
    else:
        out.exp_()
    return shifts


def _plan_parts(K, u, v, Kv, KTu, f, g, C, a3, b3, pos_a, pos_b, gamma) -> PlanParts:
    """The plan of the scalings, P = diag(u) K diag(v) written over K, and its parts with the scalings absorbed
    into the potentials f, g."""
    row, col = u * Kv, v * KTu
    err = marginal_error(a3, b3, row, col, dim=(1, 2))
    P = K.mul_(u).mul_(v.mT)
    f = f + gamma * u.log()[:, :, 0]
    g = g + gamma * v.log()[:, :, 0]
    cost = dot(C, P)
    # <C, P> - gamma H(P) = sum_ij P_ij (C_ij + gamma log P_ij) = sum_ij P_ij (f_i + g_j) = <f, P 1> + <g, P^T 1>
    reg = (torch.where(pos_a, f, 0) * row[:, :, 0]).sum(-1) + (torch.where(pos_b, g, 0) * col[:, :, 0]).sum(-1)
    return PlanParts(P, err, f, g, cost, reg)


class Scalings:
    """A batch of problems in scaling form and its iterates, P = diag(u) K diag(v), K = exp((f + g - C) / gamma):
    the :class:`wviz.ot.loop.BatchLoop` in torch, on any device.

    C (B, n, m) cost; K its kernel, the only n x m buffer (finally the plan), KT = K^T a view; f (B, n), g (B, m)
    potentials; u (B, n, 1), v (B, m, 1) scalings, Kv = K v and KTu = K^T u; a3, b3 the masses as columns, pa3, pb3
    (pos_a, pos_b) where they are positive, ma, mb the same as 0/1; omega_minus_1 (B, 1, 1) the over-relaxation
    exponent, plain when omega = 1 everywhere.

    rho: the semi-relaxed problem (wviz.ot.semirelaxed), its column update exp(c - phi log K^T u) with phi = p and
    c (B, m, 1) from log_b and g for the current gamma; t (B, m, 1) the plain column update of the current K^T u
    (None until an iteration or a refresh computes it); total (B, 1, 1) = sum a; floor the smallest column scaling;
    shift (B, 1, 1) the translations of the dual point not yet moved into f and g (None: none), see :meth:`_settle`.

    graphs: the balanced iterations on CUDA run as CUDA graphs (wviz.ot.graphs; None: eagerly, on the CPU and for
    the semi-relaxed problem). use_graphs=None chooses so; True or False forces it.
    """

    __slots__ = ("C", "K", "KT", "f", "g", "u", "v", "Kv", "KTu", "a3", "b3", "pa3", "pb3", "ma", "mb", "pos_a",
                 "pos_b", "zero_a", "zero_b", "omega_minus_1", "plain", "clamp", "rho", "p", "gamma", "log_b", "total",
                 "c", "t", "floor", "shift", "graphs")
    # every tensor with one row per problem: what a compaction of the batch selects
    BATCHED = ("K", "u", "v", "Kv", "KTu", "f", "g", "C", "a3", "b3", "pa3", "pb3", "ma", "mb", "pos_a", "pos_b",
               "omega_minus_1")
    SEMI = ("log_b", "total", "c", "t")   # ... and those of the semi-relaxed problem
    # None until set: u, v by the first cold_start or rebuild, Kv by start, KTu by refresh or iterate, omega_minus_1
    # by set_omega; p, gamma, c and t only in the semi-relaxed problem (_targets; t then by refresh or iterate);
    # shift None while no translation waits (see _settle)
    u: torch.Tensor | None
    v: torch.Tensor | None
    Kv: torch.Tensor | None
    KTu: torch.Tensor | None
    omega_minus_1: torch.Tensor | None
    p: float | None
    gamma: float | None
    c: torch.Tensor | None
    t: torch.Tensor | None
    shift: torch.Tensor | None

    def __init__(self, a, b, C, f, g, zero_a: bool, zero_b: bool, rho: float | None = None,
                 use_graphs: bool | None = None):
        pos_a, pos_b = a > 0, b > 0
        self.C, self.f, self.g = C, f.masked_fill_(~pos_a, -torch.inf), g.masked_fill_(~pos_b, -torch.inf)
        self.K = torch.empty_like(C)
        self.KT = self.K.mT
        self.pos_a, self.pos_b, self.zero_a, self.zero_b = pos_a, pos_b, zero_a, zero_b
        self.ma, self.mb = pos_a.to(C.dtype)[:, :, None], pos_b.to(C.dtype)[:, :, None]
        self.a3, self.b3, self.pa3, self.pb3 = a[:, :, None], b[:, :, None], pos_a[:, :, None], pos_b[:, :, None]
        self.clamp = CLAMP[C.dtype]
        self.u = self.v = self.Kv = self.KTu = self.omega_minus_1 = None
        self.plain = True
        self.rho, self.p, self.gamma, self.c, self.t, self.shift = rho, None, None, None, None, None
        if rho is not None:
            self.log_b, self.total, self.floor = self.b3.log(), a.sum(-1)[:, None, None], semirelaxed.FLOOR[C.dtype]
        if use_graphs is None:
            use_graphs = C.is_cuda and rho is None
        self.graphs = graphs.Graphs() if use_graphs else None

    def cold_start(self, gamma: float, f_is_zero: bool):
        """The first kernel without the clamp (ScalingLoop.cold_start); u = v = 1 on the points with mass."""
        kernel(self.C, None if f_is_zero else self.f, self.g, gamma, self.K, None)
        self.u, self.v = self.ma.clone(), self.mb.clone()
        self._targets(gamma)

    def _targets(self, gamma: float):
        """Semi-relaxed: the column update's c = log b - g / (rho + gamma) and phi for the potentials g and gamma."""
        if self.rho is not None:
            self.gamma, self.p, self.t = gamma, semirelaxed.phi(self.rho, gamma), None
            self.c = semirelaxed.log_targets(self.log_b, self.g[:, :, None], self.rho, gamma, self.pb3)

    def _settle(self):
        """The semi-relaxed translations of the dual point so far into the potentials: f - shift, g + shift (the
        kernel and the plan do not change)."""
        if self.shift is not None:
            self.f, self.g, self.shift = self.f - self.shift[:, :, 0], self.g + self.shift[:, :, 0], None

    def _absorb(self, u, v, gamma: float):
        """f += gamma log u, g += gamma log v (u = 0, a zero mass, gives -inf: that row stays empty)."""
        self._settle()
        self.f = self.f + gamma * u.log()[:, :, 0]
        self.g = self.g + gamma * v.log()[:, :, 0]

    def absorb(self, gamma: float):
        """The current scalings into the potentials (ScalingLoop.absorb)."""
        self._absorb(self.u, self.v, gamma)

    def rebuild(self, gamma: float):
        """The normalised kernel for gamma (ScalingLoop.rebuild): its shifts move from the potentials into the
        scalings u = exp(row_shift), v = exp(col_shift), so the plan stays the potentials' (up to entries that sat at
        the clamp, which now take their exact values)."""
        self._settle()
        row_shift, col_shift = kernel(self.C, self.f, self.g, gamma, self.K, self.clamp, normalize=True)
        self.f = self.f - gamma * row_shift[:, :, 0]
        self.g = self.g - gamma * col_shift[:, :, 0]
        if self.rho is None:
            self.u, self.v = row_shift.exp() * self.ma, col_shift.exp() * self.mb
        else:   # a column without mass worth a float keeps the floor (module semirelaxed): no -inf potential
            self.u, self.v = row_shift.exp() * self.ma, col_shift.exp().clamp_(min=self.floor) * self.mb
            self._targets(gamma)

    def set_omega(self, omega: np.ndarray):
        """The over-relaxation factors (B,) for the updates of :meth:`iterate`."""
        self.plain = all(w == 1 for w in omega.tolist())
        omega = torch.as_tensor(omega, dtype=self.C.dtype, device=self.C.device).view(-1, 1, 1)
        if self.omega_minus_1 is not None and self.omega_minus_1.shape == omega.shape:
            self.omega_minus_1.copy_(omega - 1)   # in place: a captured graph reads this buffer
        else:
            self.omega_minus_1 = omega - 1

    def start(self):
        """Kv = K v: what the first row update reads."""
        self.Kv = mv(self.K, self.v)

    def refresh(self):
        """Kv and KTu of the current scalings (semi-relaxed: and the plain column update t of that KTu)."""
        self.Kv, self.KTu = mv(self.K, self.v), mv(self.KT, self.u)
        if self.rho is not None:
            self.t = self._column_update(self.KTu)

    def save(self):
        """The current scalings (eager iterations replace them; a graph's replay writes its buffers in place)."""
        return (self.u, self.v) if self.graphs is None else (self.u.clone(), self.v.clone())

    def restore(self, saved):
        """The scalings saved, with their Kv and KTu."""
        self.u, self.v = saved
        self.refresh()

    def recover(self, saved: tuple[torch.Tensor, torch.Tensor], gamma: float):
        """The scalings saved, absorbed and rebuilt for gamma, with their Kv."""
        self._absorb(*saved, gamma)
        self.rebuild(gamma)
        self.start()

    def iterate(self, steps: int):
        """steps Sinkhorn iterations: u <- u^(1 - omega) (a / K v)^omega, then the same for v (Cuturi 2013's
        u <- a / K v, v <- b / K^T u at omega = 1; Thibault et al. 2021 above). Starts from the current Kv.
        Semi-relaxed: :meth:`_iterate_semi`."""
        if self.rho is not None:
            return self._iterate_semi(steps)
        state = (self.u, self.v, self.Kv)
        if self.graphs is None:
            self.u, self.v, self.Kv, self.KTu = self._steps(*state, steps)
        else:
            self.u, self.v, self.Kv, self.KTu = self.graphs.run(steps, self.plain, state, self._steps)

    def _steps(self, u, v, Kv, steps: int):
        """(u, v, Kv, KTu) after steps balanced iterations from u, v and Kv = K v."""
        K, KT, a3, b3 = self.K, self.KT, self.a3, self.b3
        pa3, pb3, zero_a, zero_b, plain, omega_minus_1 = (self.pa3, self.pb3, self.zero_a, self.zero_b, self.plain,
                                                          self.omega_minus_1)
        for _ in range(steps):
            if plain:   # a zero mass with an empty kernel row would give 0 / 0: that row stays at 0
                u = torch.where(pa3, a3 / Kv, 0) if zero_a else a3 / Kv
            else:
                u = relaxed(u, a3, Kv, omega_minus_1, zero_a, pa3)
            KTu = mv(KT, u)
            if plain:
                v = torch.where(pb3, b3 / KTu, 0) if zero_b else b3 / KTu
            else:
                v = relaxed(v, b3, KTu, omega_minus_1, zero_b, pb3)
            Kv = mv(K, v)
        return u, v, Kv, KTu

    def _column_update(self, KTu, c=None):
        """The plain semi-relaxed column update t = exp(c - phi log K^T u) (wviz.ot.semirelaxed), 0 without mass."""
        t = semirelaxed.column_scalings(self.c if c is None else c, KTu, self.p, self.floor)
        return torch.where(self.pb3, t, 0) if self.zero_b else t

    def _iterate_semi(self, steps: int):
        """steps iterations of the semi-relaxed problem: the row update of :meth:`iterate`, then the column update
        t = exp(c - phi log K^T u) (over-relaxed like the rows'); before each row update (which does not read c), once
        a column update has given t, the translation of the dual point that solves the mass mode (module
        semirelaxed), kept in shift until the potentials are read."""
        assert self.rho is not None and self.gamma is not None   # semi-relaxed: _targets has set gamma
        K, KT, u, v, Kv, KTu, t, c, shift = (self.K, self.KT, self.u, self.v, self.Kv, self.KTu, self.t, self.c,
                                             self.shift)
        a3, pa3, pb3, zero_a, zero_b, plain, omega_minus_1 = (self.a3, self.pa3, self.pb3, self.zero_a, self.zero_b,
                                                              self.plain, self.omega_minus_1)
        scale = 1.0 / (self.rho + self.gamma)
        for _ in range(steps):
            if t is not None:
                lam = semirelaxed.translation(t, KTu, self.total, self.rho)
                c = c - lam * scale
                shift = lam if shift is None else shift + lam
            if plain:
                u = torch.where(pa3, a3 / Kv, 0) if zero_a else a3 / Kv
            else:
                u = relaxed(u, a3, Kv, omega_minus_1, zero_a, pa3)
            KTu = mv(KT, u)
            t = self._column_update(KTu, c)
            v = t if plain else relaxed_from(t, v, omega_minus_1, zero_b, pb3)
            Kv = mv(K, v)
        self.u, self.v, self.Kv, self.KTu, self.t, self.c, self.shift = u, v, Kv, KTu, t, c, shift

    def errors(self) -> np.ndarray:
        """The marginal errors: the plan diag(u) K diag(v) has marginals u * Kv and v * KTu (semi-relaxed: the
        columns' target is t * KTu, the column sums of the column condition, wviz.ot.semirelaxed)."""
        if self.rho is None:
            target = self.b3
        else:
            assert self.t is not None and self.KTu is not None   # set by the iteration this check follows
            target = self.t * self.KTu
        err = marginal_error(self.a3, target, self.Kv, self.KTu, scalings=(self.u, self.v), dim=(1, 2))
        return np.array(err.tolist())

    def log_range(self) -> float:
        """max |log u|, |log v| over the points with mass (inf or NaN after an overflow); semi-relaxed, of the
        columns only the large scalings (a small one cannot overflow; module semirelaxed)."""
        v = torch.where(self.pb3, self.v, 1)
        if self.rho is not None:
            v = v.clamp(min=1)
        ext = torch.cat([torch.where(self.pa3, self.u, 1).reshape(-1), v.reshape(-1)])
        return ext.log_().abs_().amax().item()

    def plan(self) -> torch.Tensor:
        """diag(u) K diag(v) as a new tensor."""
        assert self.u is not None and self.v is not None   # set by cold_start or rebuild
        return self.u * self.K * self.v.mT

    def plan_parts(self, gamma: float, idx: torch.Tensor | None = None) -> PlanParts:
        """P and its parts of the problems idx (all by default; then P is written over K). Semi-relaxed: the plan
        after a last plain row update (module semirelaxed, "The returned plan"), the error against the column
        condition's target and the objective of wviz.ot.semirelaxed."""
        self._settle()
        parts = [self.K, self.u, self.v, self.Kv, self.KTu, self.f, self.g, self.C, self.a3, self.b3, self.pos_a,
                 self.pos_b]
        semi = [] if self.rho is None else [self.c, self.pa3, self.pb3]
        if idx is not None:   # the loop goes on with the others: select, never write into the loop's tensors
            parts, semi = [t.index_select(0, idx) for t in parts], [t.index_select(0, idx) for t in semi]
        K, u, v, Kv, KTu, f, g, C, a3, b3, pos_a, pos_b = parts
        if self.rho is None:
            return _plan_parts(K, u, v, Kv, KTu, f, g, C, a3, b3, pos_a, pos_b, gamma)
        c, pa3, pb3 = semi
        assert self.p is not None   # semi-relaxed: set by _targets
        # the iterations end on a column update, whose rows hold a only to the tolerance: one more row update
        # holds them to rounding, as the problem asks; the columns are then measured against its column condition
        u = torch.where(pa3, a3 / Kv, 0) if self.zero_a else a3 / Kv
        KTu = mv(K.mT, u)
        t = semirelaxed.column_scalings(c, KTu, self.p, self.floor)
        t = torch.where(pb3, t, 0) if self.zero_b else t
        out = _plan_parts(K, u, v, Kv, KTu, f, g, C, a3, t * KTu, pos_a, pos_b, gamma)
        reg = semirelaxed.objective(out.f, out.g, (u * Kv)[:, :, 0], (v * KTu)[:, :, 0], a3[:, :, 0], b3[:, :, 0],
                                    pos_a, pos_b, gamma, self.rho)
        return out._replace(reg_cost=reg)

    def keep(self, idx: torch.Tensor):
        """Only the problems idx go on: every batched tensor is compacted into buffers of their own."""
        self._settle()
        for name in self.BATCHED + (self.SEMI if self.rho is not None else ()):
            if getattr(self, name) is not None:
                setattr(self, name, getattr(self, name).index_select(0, idx))
        self.KT = self.K.mT
        if self.graphs is not None:   # new buffers: graphs captured on the old ones would read those
            self.graphs = graphs.Graphs()
