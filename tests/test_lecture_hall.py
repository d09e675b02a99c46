"""What a lecture uses besides the figures: guided links, references, animations, and every page offering them."""
import importlib
import re
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import parse_qsl

import imageio.v3 as iio
import plotly.graph_objects as go
import pytest

from tests.file_checks import mp4_frames
from wviz import animation
from wviz.guide import Try
from wviz.references import REFERENCES
from wviz.registry import PAGES as REGISTRY

ROOT = Path(__file__).resolve().parents[1]
PAGES = [page.stem for page in REGISTRY]
LECTURE_KEYS = {"presentation"}   # the lecture panel's own parameters, on every page (wviz.ui.lecture)


def test_a_guided_link_writes_values_as_the_widgets_do():
    t = Try("x", {"tau": 100.0, "alpha": 1.5, "mechanisms": ["softmax", "entmax"], "presentation": True,
                  "source": "random"}, "watch")
    assert parse_qsl(t.query()[1:]) == [("tau", "100"), ("alpha", "1.5"), ("mechanisms", "softmax"),
                                        ("mechanisms", "entmax"), ("presentation", "true"), ("source", "random")]


@pytest.mark.parametrize("stem", PAGES)
def test_every_page_offers_three_to_five_guided_experiments(stem):
    views = importlib.import_module(f"wviz.views.{stem}")
    assert 3 <= len(views.TRY_THIS) <= 5 and all(isinstance(t, Try) and t.watch for t in views.TRY_THIS)
    assert len({t.label for t in views.TRY_THIS}) == len(views.TRY_THIS)
    assert "try_this=" in (ROOT / "pages" / f"{stem}.py").read_text()


def constants(cls) -> dict[str, str]:
    """The constants a views module's Keys or Labels class holds, by attribute name."""
    return {name: value for name, value in vars(cls).items() if not name.startswith("_")}


def pattern(value: str) -> str:
    """A key or label as a pattern: a "{}" field, filled in by the page, stands for anything."""
    return re.escape(value).replace(re.escape("{}"), ".+")


def link_problems(views) -> list[str]:
    """What is wrong with a views module's guided links: a parameter that is not one of its Keys (a Side by side key
    SIDE_* names its two sliders, key_left and key_right; the lecture panel's own parameters are every page's),
    and a view selector's value (VIEW, or the inspector's PANEL) that is not one of its Labels."""
    keys = [pattern(v) + ("_(left|right)" if name.startswith("SIDE_") else "")
            for name, v in constants(views.Keys).items()]
    labels = [pattern(v) for v in constants(views.Labels).values()]
    selectors = {v for name, v in constants(views.Keys).items() if name in ("VIEW", "PANEL")}
    problems = []
    for t in views.TRY_THIS:
        problems += [f"Try {t.label!r} sets {k!r}, which is no key of its page" for k in t.params
                     if k not in LECTURE_KEYS and not any(re.fullmatch(p, k) for p in keys)]
        problems += [f"Try {t.label!r} opens {k} {v!r}, which is no view of its page" for k, v in t.params.items()
                     if k in selectors and not any(re.fullmatch(p, v) for p in labels)]
    return problems


@pytest.mark.parametrize("stem", PAGES)
def test_every_guided_link_names_widget_keys_and_views_of_its_page(stem):
    """A renamed widget key or view label breaks a Try link silently (the page opens at its defaults): caught here
    from the constants of wviz/views/<stem>.py that the page and the links both read (tests/test_house.py checks
    that the page uses them)."""
    problems = link_problems(importlib.import_module(f"wviz.views.{stem}"))
    assert not problems, problems


def test_the_link_check_sees_a_renamed_key_and_view():
    from wviz.views import transport_plans as tv

    good = {tv.Keys.GAMMA_REL: 0.001, tv.Keys.A.format(4): "3, 1, 1, 1", tv.Keys.SIDE_GAMMA_REL + "_right": 1,
            tv.Keys.VIEW: tv.Labels.COST_AGAINST_GAMMA, "presentation": True}
    renamed = {"gama": 0.001, tv.Keys.SIDE_GAMMA_REL: 1, tv.Keys.VIEW: "Cost versus gamma"}
    for params, wrong in ((good, 0), (renamed, 3)):
        views = SimpleNamespace(Keys=tv.Keys, Labels=tv.Labels, TRY_THIS=(Try("x", params, "watch"),))
        assert len(link_problems(views)) == wrong, link_problems(views)


def test_every_citation_of_a_page_is_a_link_to_a_full_reference():
    anchors = [r.anchor for r in REFERENCES.values()]
    assert len(set(anchors)) == len(anchors)
    for path in [*(ROOT / "pages").glob("*.py"), *(ROOT / "wviz/views").glob("*.py")]:
        text = path.read_text()
        for key in re.findall(r'cite\("([^"]+)"', text):
            assert key in REFERENCES, (path.name, key)
        if path.parent.name == "pages":  # what a page says names a source by a link, not "the 002 paper"
            assert not re.search(r"\bthe 00\d (note|paper|summary)\b", text), path.name


def test_an_animation_decodes_as_gif_and_mp4_with_every_frame():
    figures = [go.Figure(go.Bar(x=["a", "b"], y=[i, 3 - i]), layout_title_text=f"step {i}") for i in range(3)]
    frames = animation.render(figures)
    assert len(frames) == 3 and frames[0].shape == (animation.SIZE[1], animation.SIZE[0], 3)
    assert (frames[0] != frames[1]).any()  # each frame is its own figure
    gif = iio.imread(animation.encode(frames, "gif", fps=4), extension=".gif", index=None)
    assert gif.shape[0] == 3
    assert mp4_frames(animation.encode(frames, "mp4", fps=4)) == (3, animation.SIZE)
    with pytest.raises(ValueError, match="at least 2 frames"):
        animation.render(figures[:1])
    with pytest.raises(ValueError, match="gif, mp4"):
        animation.encode(frames, "avi", fps=4)


# ---- what every page's tables, metrics and side-by-side views share ------------------------------------------------

@pytest.mark.parametrize("x, text", [
    (1.0, "1"), (6.238642998528377e-244, "6.239e-244"), (0.0, "0"), (-0.0, "0"), (-1.0612345, "-1.061"),
    (0.000123, "0.000123"), (1e-5, "1e-5"), (12345.6, "1.235e4"), (float("nan"), "–"), (3, "3"), (1 / 3, "0.3333"),
])
def test_one_number_format_for_tables_and_metrics(x, text):
    """Significant digits, a power of ten for the tiny and the huge (never "0.000000..." or "-0"), integers whole."""
    from wviz.figures.common import number_text

    assert number_text(x) == text
    assert len(number_text(-1.23456e-5, chars=8)) <= 8 and float(number_text(-1.23456e-5, chars=8)) == -1.23e-5


def test_a_table_shows_its_numbers_in_that_format_and_keeps_them():
    import pandas as pd

    from wviz.figures.common import number_text, table_text

    table = pd.DataFrame({"name": ["a", "b"], "count": [2, 1], "value": [3.4936e-241, -0.0]})
    styled = table_text(table)
    assert styled.data is table                                  # the numbers stay numbers (a column sorts by value)
    html = styled.to_html()
    assert "3.494e-241" in html and ">0<" in html and "-0" not in html and number_text(2) in html
    gap = table_text(table.assign(value=[float("nan"), 0.5]))   # st.dataframe would write "None" in a NaN cell
    assert list(gap.data["value"]) == ["–", "0.5"] and gap.data["count"].dtype.kind == "i"


def test_figures_side_by_side_share_one_scale():
    """Two heatmaps on the larger maximum of the two, axes with set ranges on the span of both; copies, so a
    figure kept as the last good one is not changed."""
    import numpy as np

    from wviz.figures.common import same_scale

    left = go.Figure(go.Heatmap(z=[[0.0, 0.02], [0.01, 0.0]]), layout=dict(xaxis_range=[0, 2], yaxis_range=[3, -1]))
    right = go.Figure(go.Heatmap(z=[[0.004, 0.001], [0.0, 0.002]]), layout=dict(xaxis_range=[-1, 1],
                                                                               yaxis_range=[2, 0]))
    a, b = same_scale([left, right])
    assert (a.data[0].zmin, a.data[0].zmax) == (b.data[0].zmin, b.data[0].zmax) == (0.0, 0.02)
    assert list(a.layout.xaxis.range) == list(b.layout.xaxis.range) == [-1, 2]
    assert list(a.layout.yaxis.range) == list(b.layout.yaxis.range) == [3, -1]   # reversed stays reversed
    assert left.data[0].zmax is None and np.asarray(right.data[0].z).max() == 0.004
    bars = go.Figure(go.Bar(y=[1, 2]), layout=dict(yaxis_range=[0, 1.05]))
    assert [list(f.layout.yaxis.range) for f in same_scale([bars, bars])] == [[0, 1.05]] * 2


@pytest.mark.parametrize("rows", [2, 3])
def test_stacked_rows_keep_their_panels_and_gaps_in_pixels(rows):
    """A figure of stacked_rows' area plus its margins draws every panel ``panel`` px tall and every gap between rows
    ``gap`` px (Plotly counts both in fractions of the plot area, margins left out), in presentation mode too, which
    grows the margins and the height alike. The gap holds an axis's labels and title and the next panel's title."""
    from plotly.subplots import make_subplots

    from wviz.export import presentation_style
    from wviz.figures.common import stacked_rows

    spacing, area = stacked_rows(rows, 225, 120)
    fig = make_subplots(rows=rows, cols=1, vertical_spacing=spacing, subplot_titles=[f"panel {r}" for r in range(rows)])
    fig.update_layout(title="stacked", height=area + 100 + 75, margin=dict(t=100, b=75))
    for f in (fig, presentation_style(fig)):
        plot = f.layout.height - f.layout.margin.t - f.layout.margin.b
        domains = sorted(f.layout[f"yaxis{'' if r == 1 else r}"].domain for r in range(1, rows + 1))
        assert [round((hi - lo) * plot) for lo, hi in domains] == [225] * rows
        assert [round((up[0] - low[1]) * plot) for low, up in zip(domains, domains[1:])] == [120] * (rows - 1)


# ---- presentation mode ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("query, kept", [
    ("?representation=empirical&p=1", "?representation=empirical&p=1&presentation=true"),  # not 'presentation='
    ("?", "?presentation=true"), ("?tau=2&presentation=true", "?tau=2&presentation=true")])
def test_a_link_keeps_presentation_mode_while_it_is_on(monkeypatch, query, kept):
    """A guided link loads its page in a new session, which reads presentation mode from the link's URL."""
    from wviz.ui import style

    monkeypatch.setattr(style, "presenting", lambda: True)
    assert style.keep_presenting(query) == kept
    monkeypatch.setattr(style, "presenting", lambda: False)
    assert style.keep_presenting(query) == query


def test_presentation_style_draws_every_heatmap_in_cividis_but_a_picture_in_its_grey():
    """The heatmaps on shared colour axes (the Real transformer's maps, the inspector's) in Cividis too, as those
    with their own scale; the inspector's grey input picture stays grey."""
    import numpy as np
    import torch

    from wviz.export import presentation_style
    from wviz.figures import real_transformer as rt, uncertainty_inspector as ui
    from wviz.figures.common import PICTURE_SCALE

    cividis, grey = (go.layout.Coloraxis(colorscale=s).colorscale for s in ("Cividis", PICTURE_SCALE))
    maps = rt.attention_maps({"softmax": torch.full((3, 3), 1 / 3)}, ["a", "b", "c"], 1, 1)
    image = ui.map_over_image(np.zeros((1, 8, 8)), np.ones((2, 2)), "tr Σ", "tr Σ per patch")
    own = go.Figure(go.Heatmap(z=[[0, 1]], colorscale="Viridis"))
    assert maps.layout.coloraxis.colorscale != cividis   # the page's own scale, outside presentation mode
    assert presentation_style(maps).layout.coloraxis.colorscale == cividis
    styled = presentation_style(image).layout
    assert (styled.coloraxis.colorscale, styled.coloraxis2.colorscale) == (grey, cividis)
    assert presentation_style(own).data[0].colorscale == go.Heatmap(colorscale="Cividis").colorscale
    signed = ui.occlusion_map(np.zeros((1, 8, 8)), torch.tensor([[0.1, -0.2], [0.0, 0.3]]), 0.5)
    assert presentation_style(signed).layout.coloraxis2.colorscale == signed.layout.coloraxis2.colorscale  # ΔMI
