"""The lecture hall, in a real browser: every page at a desktop, a projector (1024x768) and half a laptop screen
(800x1000) shows its metrics and display equations whole, every heatmap with a colour scale, every figure's labels
within the margins it gives them; presentation mode stays on for the session however a page is reached. Each page
in presentation mode: test_lecture_hall_presentation.py; its guided links, Reset, example files and animations:
test_lecture_hall_links.py; its other views: test_lecture_hall_views*.py."""
from urllib.parse import parse_qs, urlsplit

import plotly.graph_objects as go
import pytest

from tests.e2e.harness import page_paths
from tests.e2e.lecture import (NO_SCALE, PRESENTATION_LOST, cut_at_every_width, navigate, no_exception,
                               open_page)
from wviz.export import TEXT_PX
from wviz.figures.common import DIVERGING_SCALE, PICTURE_SCALE
from wviz.registry import PAGES


@pytest.mark.parametrize("path", page_paths()[1:])
def test_nothing_is_cut_at_any_width_and_every_heatmap_has_a_colour_scale(server, page, path):
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    open_page(page, f"{server}/{path}")
    page.wait_for_selector(".js-plotly-plot", timeout=60_000)
    no_exception(page)
    assert not errors, errors
    assert page.evaluate(NO_SCALE) == []
    assert cut_at_every_width(page) == {}


# A heatmap's colours in presentation mode: Cividis, or a grey picture's or a signed map's own (as the browser holds
# them: Python's)
CIVIDIS, PICTURE, DIVERGING = ([colour for _, colour in go.Heatmap(colorscale=s).colorscale]
                               for s in ("Cividis", PICTURE_SCALE, DIVERGING_SCALE))


def presentation_lost(page, charts: bool = True) -> tuple[list[str], int]:
    """What of presentation mode the page drawn has lost (PRESENTATION_LOST; a heatmap in another scale than
    Cividis), once its charts have drawn their text; and how many heatmaps it has."""
    if charts:
        page.wait_for_function("() => document.querySelector('.js-plotly-plot .main-svg text')", timeout=60_000,
                               polling=100)
    found = page.evaluate(PRESENTATION_LOST, TEXT_PX)
    lost = found["lost"] + [f"{title}: {scale[0]}..{scale[-1]}" for title, scale in found["scales"]
                            if scale not in (CIVIDIS, PICTURE, DIVERGING)]
    return lost, len(found["scales"])


def test_presentation_mode_stays_on_for_the_session_on_every_page_however_reached(server, page):
    """From /?presentation=true, every page reached by the sidebar's navigation (each from the page before, the first
    from Home) and by Home's page list (whose links carry no query) keeps presentation mode: the URL and the page's
    links (guided experiments, Reset) say so, no chart text is under TEXT_PX and every heatmap is in Cividis (the Real
    transformer's and the inspector's on their colour axes). Home's links used to lose it, and the first navigation
    from a page drew the next page's figures in the plain style; Wasserstein self-attention's guided link
    ?representation=empirical lost it ('presentation=' was read in 'representation=')."""
    from wviz.views.wasserstein_self_attention import TRY_THIS

    (empirical,) = [t for t in TRY_THIS if "representation" in t.params]
    open_page(page, f"{server}/?presentation=true")
    lost, heatmaps, empirical_links = {}, {}, []
    for home_list in (False, True):
        for p in PAGES:
            if home_list:
                navigate(page, "")   # Home, by the sidebar
                lost[("Home", p.stem)] = presentation_lost(page, charts=False)[0]
            navigate(page, p.stem, home_list)
            lost[(p.stem, "Home's list" if home_list else "sidebar")], heatmaps[p.stem] = presentation_lost(page)
            if p.stem == "wasserstein_self_attention":
                empirical_links.append(page.locator("a", has_text=empirical.label).get_attribute("href"))
    assert {k: v for k, v in lost.items() if v} == {}
    assert heatmaps["real_transformer"] and heatmaps["uncertainty_inspector"]   # the colour check saw their maps
    assert [parse_qs(urlsplit(href).query) for href in empirical_links] == 2 * [
        {**parse_qs(urlsplit(empirical.query()).query), "presentation": ["true"]}]
