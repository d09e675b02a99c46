"""Over-relaxed scaling updates, u <- u^(1 - omega) (a / K v)^omega, with the factor omega in [1, 2) adapted per
problem from the observed convergence rate (Thibault, Chizat, Dossal & Papadakis 2021; Lehmann, von Renesse, Sambale
& Uschmajew 2022: the optimal omega from Young's SOR theory; Hageman & Young's adaptive SOR).

Sinkhorn alternates row and column updates, a 2-cyclic iteration, so near the solution Young's theory applies: if
plain Sinkhorn shrinks the error by r per iteration, over-relaxation by omega shrinks it by lambda with
(lambda + omega - 1)^2 = lambda omega^2 r, smallest (omega - 1) at omega* = 2 / (1 + sqrt(1 - r)). quadratic_ot's
alternating block maximisation is 2-cyclic too and uses the same rule.
"""
from __future__ import annotations

import math

import numpy as np
import torch

_OMEGA_MAX = 1.99
_OMEGA_START = 1.3   # first omega before any rate is known: never slower than omega = 1 when r >= 0.3
# the over-relaxation part of an update, clamp(t / u)^(omega - 1), clamps t / u to [RELAX_LO, RELAX_HI] (see
# relaxed())
RELAX_LO, RELAX_HI = math.exp(-1.0), math.exp(1.0)
_WINDOW = 4          # iterations over which a convergence rate is measured


def check_omega(omega):
    """omega=None (adapt) or a fixed over-relaxation factor in [1, 2), where the 2-cyclic iteration converges."""
    if omega is not None and not (1.0 <= float(omega) < 2.0):
        raise ValueError(f"omega must be in [1, 2), got {omega}")


def optimal_omega(r):
    """Young's optimal over-relaxation for a 2-cyclic iteration whose plain (omega = 1) rate is r per iteration."""
    return 2.0 / (1.0 + np.sqrt(np.maximum(np.minimum(1.0 - r, 1.0), 0.0)))


class OverRelaxation:
    """Adaptive over-relaxation, one factor omega per problem of the batch (numpy, on the host).

    A steady rate (the error's factor per iteration, Young's lambda) > omega - 1 observed at omega reveals the plain
    rate r, by Young's relation (rate + omega - 1)^2 = rate omega^2 r, and with it omega*. Across epsilon-scaling
    stages 1 - r is proportional to gamma, so kappa = (1 - r) / gamma predicts omega* for the next, smaller gamma.

    fixed: a factor given by the caller (then never adapted), or None.
    rho: the weight of the semi-relaxed problem's column penalty, or None: its plain rate is at most
    phi = rho / (rho + gamma) (wviz.ot.semirelaxed), so no stage starts above that rate's omega*.
    omega: (B,) the current factors; rate: (B,) the last measured rates per iteration (None while unknown).
    """

    trace: list[tuple[int, np.ndarray]]   # (iteration, errors) of the stage's recent checks

    def __init__(self, B: int, fixed: float | None, rho: float | None = None):
        self.fixed, self.rho = fixed, rho
        self.kappa = np.full(B, np.nan)
        self.omega = np.ones(B)

    def start_stage(self, gamma: float) -> np.ndarray:
        """The factors for a new gamma: omega* predicted by kappa where known, else _OMEGA_START."""
        if self.fixed is not None:
            self.omega[:] = self.fixed
        else:
            known = np.isfinite(self.kappa)
            self.omega = np.where(known, np.minimum(optimal_omega(1.0 - self.kappa * gamma), _OMEGA_MAX),
                                  _OMEGA_START)
            if self.rho is not None:   # a fast semi-relaxed iteration is not slowed by a large omega
                self.omega = np.minimum(self.omega, optimal_omega(self.rho / (self.rho + gamma)))
        self.gamma, self.trace, self.rate = gamma, [], None
        return self.omega

    def update(self, err: np.ndarray, it: int) -> bool:
        """Record the errors at iteration it; returns True when omega changed.

        Rates are measured over windows of _WINDOW iterations: over-relaxed errors oscillate from one iteration
        to the next (complex eigenvalues once omega >= omega*), their envelope does not.
        """
        self.trace.append((it, err))
        horizon = 5 * _WINDOW     # of the safeguard
        while self.trace[0][0] < it - horizon - 2 * _WINDOW:
            del self.trace[0]
        past = [t for t in self.trace if t[0] <= it - _WINDOW]
        if not past:
            return False
        i0, e0 = past[-1]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            rate = (err / e0) ** (1.0 / (it - i0))
        changed = self.fixed is None and (self._from_rate(rate, err) or self._safeguard(it, horizon))
        # a new omega is a new iteration: its rate is measured afresh
        self.rate = None if changed else rate
        if changed:
            self.trace = [(it, err)]
        return changed

    def _from_rate(self, rate: np.ndarray, err: np.ndarray) -> bool:
        """Raise omega to omega* where the measured rate is steady (it agrees with the previous window's); True if it
        did. Young's relation inverted: r = (rate + omega - 1)^2 / (rate omega^2)."""
        if self.rate is None:
            return False
        omega = self.omega
        steady = (rate < 1) & (rate > omega - 1 + 0.02) & (np.abs(rate - self.rate) <= 0.1 * (1 - rate)) & (err > 0)
        if not steady.any():
            return False
        with np.errstate(divide="ignore", invalid="ignore"):
            r = (rate + omega - 1) ** 2 / (rate * omega ** 2)
        omega_new = np.minimum(optimal_omega(r), _OMEGA_MAX)
        better = steady & (omega_new > omega + 0.01)
        if not better.any():
            return False
        self.omega = np.where(better, omega_new, omega)
        self.kappa = np.where(better, (1 - r) / self.gamma, self.kappa)
        return True

    def _safeguard(self, it: int, horizon: int) -> bool:
        """Halve omega - 1 where the envelope of the error (its maximum over a window) has not fallen over the
        horizon (five windows); True if it did.

        Near omega = 2 this also fires while the error merely oscillates, and omega then alternates between omega*
        and 1 + (omega* - 1) / 2: on the hard problems (tiny gamma, few points) that converges in fewer iterations
        than a more patient safeguard.
        """
        older = [e for i, e in self.trace if it - horizon - _WINDOW < i <= it - horizon]
        if not older:
            return False
        recent = np.maximum.reduce([e for i, e in self.trace if i > it - _WINDOW])
        bad = (recent >= np.maximum.reduce(older)) & (self.omega > 1)
        if not bad.any():
            return False
        self.omega = np.where(bad, 1 + (self.omega - 1) / 2, self.omega)
        self.kappa = np.where(bad, np.nan, self.kappa)
        return True

    def keep(self, idx: np.ndarray):
        """Only the problems idx of the batch go on (the others have converged)."""
        self.kappa, self.omega = self.kappa[idx], self.omega[idx]
        self.trace = [(i, e[idx]) for i, e in self.trace]
        if self.rate is not None:
            self.rate = self.rate[idx]


def relaxed(u, a, Ku, omega_minus_1, masked, pos):
    """The over-relaxed scaling update u <- u (a / (u K v))^omega, with the over-relaxation part of the factor
    t = a / (u K v) clamped to [e^-1, e]: u <- u t clamp(t)^(omega - 1).

    Near the solution t is close to 1 and this is exactly over-relaxed Sinkhorn; far from it (a cold start, a new
    gamma) a row whose mass is off by a factor t would otherwise be pushed to a mass off by t^(omega - 1) the
    other way, which is how over-relaxation diverges. masked: some masses are 0 (pos False), whose scalings stay 0.
    """
    return relaxed_from(a / Ku, u, omega_minus_1, masked, pos)   # a / K v: the plain Sinkhorn update


def relaxed_from(t, u, omega_minus_1, masked, pos):
    """The over-relaxed step from the plain update t of the scalings u: t clamp(t / u)^(omega - 1), as in
    :func:`relaxed` (whose t is a / K v; the semi-relaxed column update has its own t, wviz.ot.semirelaxed)."""
    u = t * (t / u).clamp_(RELAX_LO, RELAX_HI).pow_(omega_minus_1)
    return torch.where(pos, u, 0) if masked else u


def relaxed_into(u, t, omega_minus_1: float, s, zero=None):
    """:func:`relaxed_from` in numpy, in place, for wviz.ot.lean's buffers: u <- t clamp(t / u)^(omega - 1), each
    operation written into u or the scratch vector s (u, t, s of one shape); zero: the indices of the points
    without mass, whose scalings are set to 0.

    >>> import numpy as np, torch
    >>> from wviz.ot.relaxation import relaxed_from, relaxed_into
    >>> u, t = np.array([1.0, 0.5, 2.0]), np.array([1.2, 4.0, 0.1])   # t / u: 1.2, 8 and 0.05 (the last two clamped)
    >>> expected = relaxed_from(torch.tensor(t), torch.tensor(u), 0.5, False, None)
    >>> relaxed_into(u, t, 0.5, np.empty(3))
    >>> bool(np.allclose(u, expected.numpy(), rtol=1e-15, atol=0))
    True
    """
    np.divide(t, u, out=s)
    np.power(np.maximum(np.minimum(s, RELAX_HI, out=s), RELAX_LO, out=s), omega_minus_1, out=s)
    np.multiply(t, s, out=u)
    if zero is not None:
        u[zero] = 0.0
