"""The pages of the app, in the order of its navigation: the one list that app.py, the browser tests, the benchmarks
and tests/test_house.py read. A new page is one entry here plus the files of its stem (docs/ARCHITECTURE.md).

Each page's stem names its files in every layer: pages/<stem>.py, wviz/views/<stem>.py, wviz/figures/<stem>.py,
tests/views/test_<stem>.py, tests/app/test_<stem>_page.py; its URL path is the stem. Its main slider is the one
parameter a lecture moves (drawn by ``ui.live``); its main figure is the first figure that slider redraws, built by
``wviz.figures.<stem>.main_figure`` from the result the page computes, and ``wviz.views.<stem>.at_defaults`` gives
that result at the page's default inputs as a function of the slider (bench_latency's reference app draws it).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Page:
    """One page: its stem, its title in the navigation, the section it is listed under, its icon (a Material
    Symbol, ":material/<name>:"), the widget key of its main slider (also its URL parameter) and the key of its
    main figure."""

    stem: str
    title: str
    section: str
    icon: str
    slider: str
    figure: str


PAGES = (
    Page("attention_transport", "Attention as transport", "Attention as optimisation", ":material/scatter_plot:",
         "tau", "bars"),
    Page("transport_plans", "Transport plans", "Attention as optimisation", ":material/swap_horiz:", "gamma_rel",
         "plan"),
    Page("fenchel_dual", "Attention solves a dual problem", "Attention as optimisation", ":material/functions:",
         "alpha", "estimates"),
    Page("gaussian_w2", "Gaussian W2 attention", "Distributions as tokens", ":material/blur_circular:", "tau", "pair"),
    Page("wasserstein_self_attention", "Wasserstein self-attention", "Distributions as tokens",
         ":material/stacked_line_chart:", "tau", "matrices"),
    Page("uncertainty_inspector", "Uncertainty inspector", "Distributions as tokens", ":material/blur_on:", "layer",
         "vit_trace"),
    Page("particles", "Particles and contraction", "Attention as particles", ":material/bubble_chart:", "tau",
         "animation"),
    Page("real_transformer", "Real transformer", "Real models", ":material/psychology:", "tau", "maps"),
    Page("heads_dual", "Heads solve the dual", "Real models", ":material/query_stats:", "dual_alpha", "heads"),
)
BY_STEM = {page.stem: page for page in PAGES}


def sections() -> dict[str, list[Page]]:
    """The pages by section, sections and pages in navigation order."""
    out: dict[str, list[Page]] = {}
    for page in PAGES:
        out.setdefault(page.section, []).append(page)
    return out
