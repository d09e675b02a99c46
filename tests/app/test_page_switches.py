"""Each page's settings are its own (wviz.ui.state.own_page): one session walks from every page to every other, and
each page opens at its defaults, with a URL of its own parameters only, although the page before it was moved off its
defaults. Streamlit keeps one session_state for every page, and view, tau, samples, seed... are keys of several
pages."""
import importlib
import json

import pytest
from streamlit.testing.v1 import AppTest

from tests.app.conftest import ROOT, no_exception
from wviz import ui
from wviz.registry import BY_STEM
from wviz.views import gaussian_w2 as gv, heads_dual as hv

PAGES = tuple(BY_STEM)


def every_pair(stems: tuple[str, ...]) -> list[str]:
    """The pages in an order in which every page follows every other exactly once: an Eulerian circuit of the
    complete directed graph on them (Hierholzer's algorithm), 1 + n (n - 1) visits. A leak was once seen only after
    a given pair (Uncertainty inspector -> Real transformer, then Particles)."""
    to = {a: [b for b in stems if b != a] for a in stems}
    stack, circuit = [stems[0]], []
    while stack:
        if to[stack[-1]]:
            stack.append(to[stack[-1]].pop())
        else:
            circuit.append(stack.pop())
    return circuit[::-1]


WALK = every_pair(PAGES)


@pytest.fixture
def app(monkeypatch):
    """The app (its navigation) in one session, on the CPU. Background jobs (the inspector's dataset panel, Figure
    4's corpus: a minute of a core) stay pending: these tests are about settings."""
    monkeypatch.setenv("WVIZ_DEVICE", "cpu")
    monkeypatch.setattr(ui, "background", lambda key, compute, max_entries=8: (None, 0.0))
    monkeypatch.setattr(ui, "wait_for", lambda key, text, every=1.0: None)
    return AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()


def settings(at: AppTest) -> dict:
    """The page's settings: every widget value under a plain key (wviz.ui.state.settings)."""
    return {k: v for k, v in at.session_state.items() if not k.startswith("_")}


def widget(at: AppTest, key: str):
    """The slider or view selector keyed ``key``, in the sidebar or the main column."""
    return next(w for kind in ("select_slider", "slider", "segmented_control") for w in at.get(kind) if w.key == key)


def move_off_defaults(at: AppTest, stem: str) -> dict:
    """Move the page's main slider one step and choose its last view, as a user would; the URL the browser then
    shows (the parameters of both)."""
    slider = widget(at, BY_STEM[stem].slider)
    if slider.type == "select_slider":
        i = int(slider.proto.default[0])   # the default's index among the options
        slider.set_value(type(slider.value)(slider.options[i + 1 if i + 1 < len(slider.options) else i - 1]))
    else:
        slider.set_value(slider.value + slider.step if slider.value + slider.step <= slider.max else slider.min)
    url = {slider.key: str(slider.value)}
    view = [w for w in at.get("segmented_control") if w.key == "view"]
    if view:
        view[0].set_value(view[0].options[-1])
        url["view"] = view[0].options[-1]
    at.run()
    no_exception(at)
    return url


def test_the_walk_passes_every_ordered_pair_of_pages_once():
    pairs = list(zip(WALK, WALK[1:]))
    assert sorted(pairs) == sorted((a, b) for a in PAGES for b in PAGES if a != b)


def test_every_page_opens_at_its_defaults_after_any_other_page_was_moved(app):
    fresh = {}
    for stem in PAGES:   # each page as a new session opens it: what the walk must find
        at = AppTest.from_file(str(ROOT / "pages" / f"{stem}.py"), default_timeout=120).run()
        no_exception(at)
        fresh[stem] = settings(at), at.query_params
        # A guided link's setting at its default is dropped from the URL by Streamlit as the page opens, and the
        # page then no longer finds the link's settings there to show what to watch (WSA's p = 1 did)
        for item in importlib.import_module(f"wviz.views.{stem}").TRY_THIS:
            at_default = [k for k, v in item.params.items() if k in fresh[stem][0] and fresh[stem][0][k] == v]
            assert not at_default, f"{stem}: {item.label} sets {at_default} to the default"
    before, url = None, {}
    for stem in WALK:
        # the last page's settings in the URL as well: AppTest sends its URL along with a switch (the browser's
        # navigation sends none), and a page must read none of another page's parameters from it
        app.query_params = url
        app.switch_page(f"pages/{stem}.py").run()
        no_exception(app)
        assert (settings(app), app.query_params) == fresh[stem], f"{before} -> {stem}"
        before, url = stem, move_off_defaults(app, stem)
        assert settings(app) != fresh[stem][0]


def test_a_page_keeps_the_parameters_of_its_own_that_the_url_brings_and_drops_the_others(app):
    """st.switch_page(page, query_params=...) hands a page its own parameters (an old link to the Real transformer's
    Figure 4 view opens Heads solve the dual so); a parameter the last page left in the URL (Gaussian W2's token
    table, which the page writes itself, unbound to a widget) does not travel."""
    app.switch_page("pages/gaussian_w2.py").run()
    sentence = "Bees make honey."
    app.query_params = {gv.Keys.TOKENS: json.dumps([["t1", 0, 0, 1, 1, 0]]), hv.Keys.SENTENCE: sentence}
    app.switch_page("pages/heads_dual.py").run()
    no_exception(app)
    assert app.query_params == {hv.Keys.SENTENCE: sentence}
    assert app.text_input(key=hv.Keys.SENTENCE).value == sentence
