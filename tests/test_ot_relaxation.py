"""wviz.ot.relaxation: Young's optimal over-relaxation, the adaptive rule that finds it from observed rates, and the
clamped over-relaxed update."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from wviz.ot.relaxation import RELAX_HI, RELAX_LO, OverRelaxation, check_omega, optimal_omega, relaxed


def test_optimal_omega_is_youngs():
    """omega* = 2 / (1 + sqrt(1 - r)): 1 for a plain rate r = 0, towards 2 as r -> 1; r outside [0, 1] is clipped."""
    r = np.array([0.0, 0.5, 0.9, 0.99, 1.0, 1.5, -1.0])
    np.testing.assert_allclose(optimal_omega(r), [1.0, 2 / (1 + math.sqrt(0.5)), 2 / (1 + math.sqrt(0.1)),
                                                  2 / (1 + 0.1), 2.0, 2.0, 1.0], rtol=1e-15)
    # at omega*, Young's relation (lambda + omega - 1)^2 = lambda omega^2 r has the double root lambda = omega* - 1
    for rate in (0.3, 0.9, 0.999):
        w = float(optimal_omega(rate))
        lam = w - 1
        assert (lam + w - 1) ** 2 == pytest.approx(lam * w ** 2 * rate, rel=1e-12)


def test_adaptive_omega_finds_youngs_from_a_steady_rate():
    """Errors that fall at a steady rate lam under the first omega reveal the plain rate r by Young's relation,
    and omega becomes omega*(r); kappa = (1 - r) / gamma carries it to the next, smaller gamma."""
    relax = OverRelaxation(1, None)
    w0 = float(relax.start_stage(0.1)[0])
    lam = 0.8
    changed_at = next(it for it in range(1, 100) if relax.update(np.array([lam ** it]), it))
    r = (lam + w0 - 1) ** 2 / (lam * w0 ** 2)
    assert changed_at <= 12 and relax.omega[0] == pytest.approx(min(float(optimal_omega(r)), 1.99), rel=1e-12)
    assert relax.kappa[0] == pytest.approx((1 - r) / 0.1, rel=1e-12)
    assert relax.start_stage(0.01)[0] == pytest.approx(min(float(optimal_omega(1 - relax.kappa[0] * 0.01)), 1.99))
    fixed = OverRelaxation(2, 1.5)
    assert fixed.start_stage(0.1).tolist() == [1.5, 1.5]
    assert not any(fixed.update(np.array([lam ** it] * 2), it) for it in range(1, 40))   # a fixed omega stays


def test_the_over_relaxed_update():
    """u <- t clamp(t / u)^(omega - 1), t = a / K v: the plain update at omega = 1, exactly over-relaxed Sinkhorn
    u^(1 - omega) t^omega near the solution, and never more than a factor e^(omega - 1) beyond t far from it."""
    assert (RELAX_LO, RELAX_HI) == (math.exp(-1.0), math.exp(1.0))
    u, a, Kv = (torch.tensor([[[x]] for x in row], dtype=torch.float64).reshape(1, -1, 1)
                for row in ([1.0, 0.9, 1e-3], [0.5, 0.5, 0.5], [0.5, 0.6, 0.5]))
    pos = torch.ones_like(u, dtype=torch.bool)
    one = torch.zeros(1, 1, 1, dtype=torch.float64)
    torch.testing.assert_close(relaxed(u, a, Kv, one, False, pos), a / Kv, rtol=0, atol=0)
    w1 = torch.full((1, 1, 1), 0.6, dtype=torch.float64)
    out = relaxed(u, a, Kv, w1, False, pos)
    t = a / Kv
    torch.testing.assert_close(out[:, :2], (u ** (1 - 1.6) * t ** 1.6)[:, :2], rtol=1e-14, atol=0)
    assert float(out[0, 2, 0]) == pytest.approx(float(t[0, 2, 0]) * math.exp(0.6), rel=1e-14)   # t / u = 1000
    pos[0, 1, 0] = False
    assert float(relaxed(u, a, Kv, w1, True, pos)[0, 1, 0]) == 0.0   # a point without mass keeps scaling 0


def test_check_omega():
    for good in (None, 1, 1.0, 1.5, 1.99):
        check_omega(good)
    for bad in (0.5, 2.0, 2.5, -1.0):
        with pytest.raises(ValueError, match=r"omega must be in \[1, 2\)"):
            check_omega(bad)
