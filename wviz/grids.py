"""The value grids of the pages' sliders, and how a slider writes a value: shared by wviz.views (the rho sliders'
grids) and wviz.ui (the log sliders). Formatting for widgets lives here, not in the math layer (wviz.ot and the
rest take plain numbers).
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["log_values", "rho_grid", "rho_text"]


def log_values(lo: float, hi: float, per_decade: int = 12) -> list[float]:
    """A log grid from lo to hi (both powers of ten), per_decade steps a decade, each value rounded to three
    significant digits (what the slider shows and the URL holds).

    >>> from wviz.grids import log_values
    >>> log_values(0.1, 10, per_decade=4)
    [0.1, 0.178, 0.316, 0.562, 1.0, 1.78, 3.16, 5.62, 10.0]
    """
    decades = round(math.log10(hi) - math.log10(lo))
    return [float(f"{v:.3g}") for v in np.logspace(math.log10(lo), math.log10(hi), decades * per_decade + 1)]


def rho_grid(lo: float = 1e-3, hi: float = 1e4, per_decade: int = 12, infinity: bool = True) -> list[float]:
    """The values of rho a slider offers (wviz.ot.semirelaxed's weight of the column penalty): :func:`log_values`
    from lo to hi, then infinity (the balanced problem); :func:`rho_text` writes each as the slider (and the URL)
    shows it.

    >>> from wviz.grids import rho_grid, rho_text
    >>> grid = rho_grid(0.01, 100, per_decade=2)
    >>> [rho_text(r) for r in grid]
    ['0.01', '0.0316', '0.1', '0.316', '1', '3.16', '10', '31.6', '100', '∞']
    """
    grid = log_values(lo, hi, per_decade)
    return grid + [math.inf] if infinity else grid


def rho_text(rho: float) -> str:
    """rho as a slider shows it: '∞' for the balanced problem, else as a guided link's URL writes a number
    ('1000', '0.0316').

    >>> from wviz.grids import rho_text
    >>> rho_text(float("inf")), rho_text(1000.0), rho_text(0.0316)
    ('∞', '1000', '0.0316')
    """
    return "∞" if math.isinf(rho) else f"{rho:g}"
