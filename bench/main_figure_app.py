"""bench_latency's reference for one page: that page's main figure alone, under its main slider, nothing else.

The page is named in the URL (``?page=<stem>``), so that one server holds every page's reference. The main figure
is the first figure the page's main slider redraws (wviz.registry), drawn by the function the page draws it with,
wviz.figures.<stem>.main_figure, from wviz.views.<stem>.at_defaults(), the page's computation at its default
inputs. The slider has the page's key and option grid: a ui.log_slider's arguments are read from pages/<stem>.py,
so they follow the page.
Each slider value's views result is cached: a move here costs Streamlit's rerun, building and sending the figure
and the browser's drawing of it, not the page's computation. The figure is drawn full width, as the pages draw it
(a column on fenchel_dual).

    streamlit run bench/main_figure_app.py, then open /?page=particles
    /?page=real_transformer&sentence=...   a page's own URL parameters that its at_defaults takes
"""
from __future__ import annotations

import ast
import importlib
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import streamlit as st

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `streamlit run` puts bench/ on the path, not the repository
    sys.path.insert(0, str(ROOT))

from wviz import ui  # noqa: E402  (after the path above)
from wviz.registry import BY_STEM  # noqa: E402

PAGES = ROOT / "pages"


def layer_slider():
    """The inspector's layer slider, a plain st.slider over the bundled models' layers, in the first of three
    columns as on the page."""
    from wviz.views.uncertainty_inspector import DEFAULT_DEPTH, DEFAULT_LAYER
    return st.columns(3)[0].slider("Layer", 0, DEFAULT_DEPTH, min(DEFAULT_LAYER, DEFAULT_DEPTH), key="layer",
                                   bind="query-params", help="The page's layer slider.")


# page stem -> its main slider, where that is not a ui.log_slider of the page (page_log_slider reads those)
SLIDERS: dict[str, Callable[[], Any]] = {"uncertainty_inspector": layer_slider}


# ---- the reference app ------------------------------------------------------------------------------------------

def page_log_slider(stem: str, key: str):
    """The page's ``ui.log_slider(label, lo, hi, value, key=xv.Keys.NAME, ...)`` whose key (the constant NAME of
    wviz.views.<stem>.Keys) is ``key``, drawn here with the same grid; an argument is a literal or a constant of
    wviz.views.<stem> (``xv.DEFAULT_ALPHA``)."""
    views = importlib.import_module(f"wviz.views.{stem}")
    keys = vars(views.Keys)

    def value(arg: ast.expr):
        return getattr(views, arg.attr) if isinstance(arg, ast.Attribute) else ast.literal_eval(arg)

    for node in ast.walk(ast.parse((PAGES / f"{stem}.py").read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "log_slider":
            kw = {k.arg: k.value for k in node.keywords if k.arg in ("key", "per_decade")}
            named = kw.pop("key", None)
            if isinstance(named, ast.Attribute) and keys.get(named.attr) == key:
                label, lo, hi, start = (value(a) for a in node.args[:4])
                return ui.log_slider(label, lo, hi, start, key=key, help="The page's main slider.",
                                     **{k: value(v) for k, v in kw.items()})
    raise LookupError(f"pages/{stem}.py has no ui.log_slider with key {key!r}")


@st.cache_resource(max_entries=8, show_spinner=False)
def compute(stem: str, inputs: tuple) -> Callable[[Any], Any]:
    """The page's wviz.views.<stem>.at_defaults(**inputs): slider value -> what its main figure draws."""
    return importlib.import_module(f"wviz.views.{stem}").at_defaults(**dict(inputs))


@st.cache_resource(max_entries=128, show_spinner=False)
def result(stem: str, inputs: tuple, value):
    return compute(stem, inputs)(value)


def page_inputs(stem: str) -> tuple:
    """The URL's parameters that the page's at_defaults takes (the Real transformer's sentence), as (name, value)
    pairs: bench_latency opens the reference with the page's own parameters."""
    accepted = inspect.signature(importlib.import_module(f"wviz.views.{stem}").at_defaults).parameters
    return tuple((k, v) for k, v in st.query_params.items() if k in accepted)


def app() -> None:
    st.set_page_config(page_title="bench: main figure alone", layout="wide")  # the app's layout: figures as wide
    ui.freeze_imports()  # as app.py does: the libraries' objects out of Streamlit's gc.collect() after each run
    stem = st.query_params.get("page", "")
    if stem not in BY_STEM:
        st.error(f"Name a page: ?page=<one of {', '.join(BY_STEM)}>")
        st.stop()
    page = BY_STEM[stem]
    value = SLIDERS[stem]() if stem in SLIDERS else page_log_slider(stem, page.slider)
    figure = importlib.import_module(f"wviz.figures.{stem}").main_figure(result(stem, page_inputs(stem), value))
    st.plotly_chart(figure, key=page.figure, width="stretch")


if __name__ == "__main__":  # as `streamlit run` runs it
    app()
