"""bench_latency's reference for one page: that page's main figure alone, under its main slider, nothing else.

The page is named in the URL (``?page=<stem>``), so that one server holds every page's reference. The main figure
is the first figure the page's main slider (tests/e2e/harness.py SLIDERS) redraws, built by the page's own
wviz.figures.<stem> function from its wviz.views.<stem> result at the page's default inputs. The slider has the
page's key and option grid: a ui.log_slider's arguments are read from pages/<stem>.py, so they follow the page.
Each slider value's views result is cached: a move here costs Streamlit's rerun, building and sending the figure
and the browser's drawing of it, not the page's computation. The figure is drawn full width, as the pages draw it
(a column on fenchel_dual).

    streamlit run bench/main_figure_app.py, then open /?page=particles
"""
from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import streamlit as st

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `streamlit run` puts bench/ on the path, not the repository
    sys.path.insert(0, str(ROOT))

from tests.e2e.harness import SLIDERS
from wviz import ui
from wviz.device import get_device

PAGES = ROOT / "pages"
DEVICE = str(get_device())


class Reference(NamedTuple):
    compute: Callable[[Any], Any]      # slider value -> the views result the page computes from it
    figure: Callable[[Any], Any]       # that result -> the page's main figure
    slider: Callable[[], Any] | None = None   # draws the slider, when it is not the page's ui.log_slider


BUILDERS: dict[str, tuple[str, Callable]] = {}   # page stem -> (the main figure's key on the page, its builder)


def main_figure(key: str):
    """Registers the decorated function, named after a page's stem, as the builder of that page's main figure,
    drawn under ``key`` on the page. A builder takes the page's views and figures modules."""
    def register(build):
        BUILDERS[build.__name__] = (key, build)
        return build
    return register


def figure_key(stem: str) -> str:
    return BUILDERS[stem][0]


# ---- each page's main figure at its default inputs (v: wviz.views.<stem>, f: wviz.figures.<stem>) ----------------

@main_figure("bars")
def attention_transport(v, f):
    inputs = v.Inputs(v.scores_from_points((1.0, 0.3), v.DEFAULT_KEYS), None, ("softmax", "sparsemax", "entmax"), 1.5)
    return Reference(lambda tau: v.weights(inputs, tau), lambda w: f.weights_bars(w.p, w.inputs.labels))


@main_figure("plan")
def transport_plans(v, f):
    problem = v.clouds_from_table(v.points_table(v.PRESETS[0], 40, 30, 0), v.COST_KINDS[0])
    return Reference(lambda gamma: v.transport(problem, v.SOLVERS[0], gamma, DEVICE),
                     lambda t: f.plan_with_marginals(t.plan, t.problem.a, t.problem.b, f"{t.solver} plan P"))


@main_figure("estimates")
def fenchel_dual(v, f):
    templates = v.templates_from_table(next(iter(v.PRESETS.values())), True)
    return Reference(lambda alpha: v.solve(templates, (1.5, -1.0), alpha), f.estimates)


@main_figure("pair")
def gaussian_w2(v, f):
    scene = v.scene(v.tokens_from_table(v.DEFAULT, False), 0)
    titles = ("W2: softmax(−W2²/τ)", "dot: softmax(⟨m_i, m_j⟩/τ)")
    return Reference(lambda tau: v.attend(scene, tau),
                     lambda a: f.attention_pair(a.w2, a.dot, a.scene.tokens.names, titles))


@main_figure("matrices")
def wasserstein_self_attention(v, f):
    inputs = v.Inputs(v.sequence(v.PRESETS[0], 24, 8, 0, None), None, v.REPRESENTATIONS[0], v.WEIGHT_MAPS[0],
                      1.0, 0.5, True, 2, 1)
    return Reference(lambda tau: v.attend(inputs, tau), lambda a: f.attention_matrices(a.ours, a.dot))


@main_figure("animation")
def particles(v, f):
    inputs = v.inputs(v.PRESETS[0], 40, None, 0, 10, v.POTENTIALS[1], True, True, 1.0, False, False, v.GROUNDS[0])
    return Reference(lambda tau: v.flow(inputs, tau), lambda fl: f.particles_animation(
        fl.trajectory, f"Particles over {inputs.layers} layers ({inputs.potential} potential, tau = {fl.tau:g})"))


@main_figure("vit_trace")
def uncertainty_inspector(v, f):
    models = v.model_set(v.load_bundled("stochastic", DEVICE), v.load_bundled("deterministic", DEVICE))
    image, depth = v.test_image(models.config, 0).image, models.config.depth
    runs = v.inspect_all(models, image, 32, 0)
    return Reference(lambda layer: v.inside(models, runs, layer, 0, 0),
                     lambda i: f.map_over_image(image, i.trace, f"Per-patch uncertainty tr(Sigma) at layer {i.layer}",
                                                "tr(Sigma) per patch", i.mark),
                     lambda: st.columns(3)[0].slider("Layer", 0, depth, min(1, depth), key="layer",
                                                     bind="query-params", help="The page's layer slider."))


@main_figure("maps")
def real_transformer(v, f):
    settings = v.Settings(("sparsemax", "entmax", "sinkhorn"), 1.5, 1.0, 5)
    return Reference(lambda tau: v.comparison(settings, tau, lambda name, params: v.forward(
                         v.DEFAULT_SENTENCE, name, params, DEVICE)),
                     lambda c: f.attention_maps(v.one_head(c, 0, 0).maps, c.tokens, 0, 0))


# ---- the reference app ------------------------------------------------------------------------------------------

def page_log_slider(stem: str, key: str):
    """The page's ``ui.log_slider(label, lo, hi, value, key=key, ...)``, drawn here with the same grid."""
    for node in ast.walk(ast.parse((PAGES / f"{stem}.py").read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "log_slider":
            kw = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg in ("key", "per_decade")}
            if kw.pop("key", None) == key:
                label, lo, hi, value = (ast.literal_eval(a) for a in node.args[:4])
                return ui.log_slider(label, lo, hi, value, key=key, help="The page's main slider.", **kw)
    raise LookupError(f"pages/{stem}.py has no ui.log_slider with key={key!r}")


@st.cache_resource(max_entries=8, show_spinner=False)
def reference(stem: str) -> Reference:
    views, figures = (importlib.import_module(f"wviz.{layer}.{stem}") for layer in ("views", "figures"))
    return BUILDERS[stem][1](views, figures)


@st.cache_resource(max_entries=128, show_spinner=False)
def result(stem: str, value):
    return reference(stem).compute(value)


def app() -> None:
    st.set_page_config(page_title="bench: main figure alone", layout="wide")  # the app's layout: figures as wide
    ui.freeze_imports()  # as app.py does: the libraries' objects out of Streamlit's gc.collect() after each run
    stem = st.query_params.get("page", "")
    if stem not in SLIDERS:
        st.error(f"Name a page: ?page=<one of {', '.join(SLIDERS)}>")
        st.stop()
    ref = reference(stem)
    value = ref.slider() if ref.slider else page_log_slider(stem, SLIDERS[stem])
    st.plotly_chart(ref.figure(result(stem, value)), key=figure_key(stem), width="stretch")


if __name__ == "__main__":  # as `streamlit run` runs it; bench_latency imports figure_key
    app()
