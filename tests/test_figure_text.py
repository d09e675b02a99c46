"""Text from outside wviz (a tokenizer's tokens, a model's or a file's name, a checkpoint's class names, names typed
into a table) is drawn literally in every Plotly figure: Plotly reads a subset of HTML in titles, labels, legends,
hovers and annotations, so each figure gets that text escaped (wviz.figures.common.plotly_text), never as markup
(project issue 49)."""
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from wviz.figures import fenchel_dual as fd
from wviz.figures import gaussian_w2 as gw
from wviz.figures import heads_dual as hd
from wviz.figures import real_transformer as rt
from wviz.figures import uncertainty_inspector as ui
from wviz.figures.common import plotly_text
from wviz.views import fenchel_dual as fv
from wviz.views import gaussian_w2 as gv

# a vocabulary's or a user's worst: bold, RoBERTa's strike-through <s>, a link, an entity's ampersand, a line break,
# a hover template's placeholder (wviz's own templates never read meta)
HOSTILE = ("<b>x</b>", "<s>", '<a href="http://evil">link</a>', "a&b", "one<br>two", "%{meta}")
ESCAPED = ("&lt;b&gt;x&lt;/b&gt;", "&lt;s&gt;", '&lt;a href="http://evil"&gt;link&lt;/a&gt;', "a&amp;b",
           "one&lt;br&gt;two", "%\u2060{meta}")
JOINED = " | ".join(HOSTILE)    # for a figure that takes one outside string: all of them at once


def strings(node):
    """Every string in a figure's JSON (titles, labels, data arrays of categories, hovers, annotations...)."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, (list, tuple)) or (isinstance(node, np.ndarray) and node.dtype.kind in "OU"):
        for value in node:
            yield from strings(value)


def assert_literal(fig) -> None:
    """No outside string raw anywhere in fig (not even where nothing draws it: a legend group), each one escaped
    somewhere."""
    text = list(strings(fig.to_plotly_json()))
    for raw, escaped in zip(HOSTILE, ESCAPED):
        assert not [s for s in text if raw in s], raw
        assert [s for s in text if escaped in s], escaped


def assert_all_literal(figures: dict) -> None:
    for name, fig in figures.items():
        try:
            assert_literal(fig)
        except AssertionError as err:
            raise AssertionError(f"{name}: {err}") from err


# ---- the figures that draw tokens of a model ---------------------------------------------------------------------

def _square(n: int = len(HOSTILE)) -> np.ndarray:
    return np.full((n, n), 1 / n)


def test_attention_maps_label_the_tokens_literally():
    fig = rt.attention_maps({"original: softmax (tau = 1)": _square(), "sparsemax (tau = 1)": _square()}, HOSTILE,
                            1, 2)
    assert_literal(fig)
    labels = [f"{i} {e}" for i, e in enumerate(ESCAPED, 1)]
    assert rt.token_labels(HOSTILE) == labels
    assert list(fig.data[0].x) == labels and list(fig.data[0].y) == labels
    assert list(fig.layout.xaxis.ticktext) == labels and list(fig.layout.yaxis.tickvals) == labels


def test_sink_shares_title_names_the_token_literally():
    fig = rt.sink_shares({"original": np.full((2, 3), 0.5)}, f"the first token ({JOINED})")
    assert_literal(fig)
    assert fig.layout.title.text == f"Attention sinks:<br>each head's mean weight on the first token " \
                                    f"({' | '.join(ESCAPED)})"


def test_the_linked_view_keeps_the_tokens_as_given():
    """Altair (Vega-Lite) reads no markup: its labels are the tokens as written, not escaped."""
    chart = rt.linked_attention({"original": _square()}, HOSTILE, 1, 1)
    assert set(chart.data["query"]) == set(rt.numbered_tokens(HOSTILE)) == {f"{i} {h}" for i, h in
                                                                           enumerate(HOSTILE, 1)}


def test_heads_dual_figures_draw_tokens_and_model_name_literally():
    sentence = SimpleNamespace(tokens=HOSTILE, per_token=np.full((2, len(HOSTILE)), 0.1), alpha=1.0)
    tokens = hd.tokens_figure(sentence)
    assert_literal(tokens)
    assert list(tokens.data[0].x) == rt.token_labels(HOSTILE) == list(tokens.layout.xaxis.ticktext)
    histograms = hd.deviation_histograms(np.linspace(0, 1, 40).reshape(2, 20), 1.0, model=JOINED)
    assert_literal(histograms)
    assert histograms.layout.title.text.startswith(f"Figure 4 of 002 on {' | '.join(ESCAPED)} (alpha")


# ---- model and class names of the uncertainty inspector ----------------------------------------------------------

def _reliability():
    return SimpleNamespace(edges=np.linspace(0, 1, 5), accuracy=np.array([0.2, 0.4, 0.6, 0.8]),
                           count=np.array([3, 0, 5, 9]), confidence=np.array([0.1, 0.3, 0.6, 0.9]), ece=0.05)


def _uncertainty_figures():
    """Each figure of the inspector that names models (HOSTILE as model names) or classes (HOSTILE too)."""
    c = len(HOSTILE)
    p = torch.full((1, c), 1 / c)
    band = (np.zeros(4), np.ones(4))
    rel, per_severity = _reliability(), {"noise": np.linspace(0.1, 0.5, 5)}
    return {
        "class_probabilities": ui.class_probabilities({m: SimpleNamespace(mean=p, low=p, high=p) for m in HOSTILE},
                                                      list(HOSTILE), 8),
        "attention_heads": ui.attention_heads([np.eye(3)] * 2, np.eye(3), f"{JOINED}: attention per head"),
        "reliability": ui.reliability({m: rel for m in HOSTILE}),
        "ood_histograms": ui.ood_histograms({m: (np.arange(5.0), np.arange(5.0) + 1, 0.7) for m in HOSTILE},
                                            "max-softmax", "noise"),
        "corruption_curves": ui.corruption_curves({m: per_severity for m in HOSTILE}, range(1, 6)),
        "corruption_aurocs": ui.corruption_aurocs({m: per_severity for m in HOSTILE}, range(1, 6), "max-softmax"),
        "confusion": ui.confusion({m: np.eye(c) for m in HOSTILE}, list(HOSTILE)),
        "calibrated_reliability": ui.calibrated_reliability(
            {m: (rel, rel, {"before": band, "after": band}, 1.2) for m in HOSTILE}),
        "risk_coverage": ui.risk_coverage({m: {"max-softmax": SimpleNamespace(
            coverage=np.linspace(0, 1, 5), risk=np.linspace(0, 0.2, 5), aurc=0.1)} for m in HOSTILE},
            perfect={m: SimpleNamespace(coverage=np.linspace(0, 1, 5), risk=np.zeros(5), aurc=0.0) for m in HOSTILE}),
        "conformal_sizes": ui.conformal_sizes({m: SimpleNamespace(sizes={"clean": np.array([1, 2, 1])},
                                                                  coverage={"clean": 0.9}, q=0.5, alpha=0.1)
                                               for m in HOSTILE}, c),
    }


def test_uncertainty_figures_draw_model_and_class_names_literally():
    assert_all_literal(_uncertainty_figures())


def test_class_names_and_models_in_their_fields():
    figures = _uncertainty_figures()
    bars = figures["class_probabilities"]
    assert [t.name for t in bars.data] == list(ESCAPED)
    assert all(list(t.x) == list(ESCAPED) for t in bars.data)
    assert all(t.hovertemplate.endswith(f"<extra>{e}</extra>") for t, e in zip(bars.data, ESCAPED))
    confusion = figures["confusion"]
    assert [a.text for a in confusion.layout.annotations] == list(ESCAPED)   # the panels' titles
    assert list(confusion.data[0].x) == list(confusion.data[0].y) == list(ESCAPED)
    empty = next(a.text for a in figures["reliability"].layout.annotations if a.text.startswith("empty"))
    assert empty.split("<br>")[1:] == [f"{e}, 1 of 4" for e in ESCAPED]   # wviz's own line breaks stay
    assert figures["attention_heads"].layout.title.text == f"{' | '.join(ESCAPED)}: attention per head"


# ---- names typed into a table ------------------------------------------------------------------------------------

def _gaussian_figures():
    table = pd.concat([gv.DEFAULT, gv.DEFAULT.iloc[:1].assign(x=-1.5, y=-1.2)], ignore_index=True)  # one per name
    tokens = gv.tokens_from_table(table.assign(token=list(HOSTILE)), False)
    scene = gv.scene(tokens, 0)
    a = gv.attend(scene, 1.0)
    names = tokens.names
    return {"attention_pair": gw.main_figure(a), "attention_heatmap": gw.attention_heatmap(a.w2, names, "W2"),
            "token_ellipses": gw.token_ellipses(tokens.means, scene.ellipses, names, 0),
            "query_weights": gw.query_weights({"W2": a.w2[0], "dot product": a.dot[0]}, names, names[0]),
            "w2_parts": gw.w2_parts(scene.mean_part, scene.cov_part, names, names[0]),
            "covariance_sweep": gw.covariance_sweep(gv.SCALES, gv.sweep(a, 1), names, names[1])}


def test_gaussian_w2_figures_draw_token_names_literally():
    figures = _gaussian_figures()
    assert_all_literal(figures)
    heat = figures["attention_heatmap"]
    assert list(heat.layout.xaxis.ticktext) == list(ESCAPED)
    assert heat.data[0].text[0][1] == f"query {ESCAPED[0]}, key {ESCAPED[1]}"   # the hover's text
    ellipses = figures["token_ellipses"]
    assert [t.text[0] for t in ellipses.data if t.mode == "markers+text"] == list(ESCAPED)
    for name in ("query_weights", "w2_parts"):
        fig = figures[name]
        assert list(fig.data[0].x) == list(fig.layout.xaxis.tickvals) == list(ESCAPED)
        assert ESCAPED[0] in fig.layout.title.text
    sweep = figures["covariance_sweep"]
    assert [t.name for t in sweep.data] == list(ESCAPED) and ESCAPED[1] in sweep.layout.title.text


def _fenchel_figures():
    n = len(HOSTILE)
    angles = torch.linspace(0, 2 * torch.pi, n + 1, dtype=torch.float64)[:-1]
    t = torch.stack([torch.cos(angles), torch.sin(angles)], 1)
    s = fv.solve(fv.Templates(list(HOSTILE), t, torch.full((n,), 1 / n, dtype=torch.float64)), (1.5, -1.0), 1.0)
    w = np.full(n, 1 / n)
    return {"estimates": fd.estimates(s), "estimates_grid": fd.estimates_grid(s, fv.figure3(s)),
            "attention_weights": fd.attention_weights(fv.weights(s), s.templates.names),
            "t5_weights": fd.t5_weights(SimpleNamespace(u=w, w20=w, w18=w, dot=w), list(HOSTILE), JOINED),
            "universe": fd.universe(t, list(HOSTILE), np.arange(n) < 3, w, np.array([1.0, 0.5]), "OT")}


def test_fenchel_dual_figures_draw_template_names_literally():
    figures = _fenchel_figures()
    assert_all_literal(figures)
    bars = figures["attention_weights"]
    assert list(bars.data[0].x) == list(bars.layout.xaxis.tickvals) == list(bars.layout.xaxis.ticktext)
    assert list(bars.data[0].x) == list(ESCAPED)
    assert figures["t5_weights"].layout.title.text.endswith(" | ".join(ESCAPED))
    assert list(figures["estimates"].data[0].text) == [f"{e}: {1 / len(ESCAPED):.2f}" for e in ESCAPED]


# ---- the helper ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("raw, escaped", list(zip(HOSTILE, ESCAPED)))
def test_plotly_text_escapes_what_plotly_reads_as_markup(raw, escaped):
    assert plotly_text(raw) == escaped


def test_a_label_without_markup_is_unchanged():
    for label in ("the cat", "[CLS]", "##s", "Ġcat", "t1", "stochastic", "3.5 × 10", 'say "hi"', "it's"):
        assert plotly_text(label) == label
    assert rt.token_labels(["[CLS]", "the", "[SEP]"]) == ["1 [CLS]", "2 the", "3 [SEP]"]
    fig = ui.confusion({"stochastic": np.eye(2)}, ["cat", "dog"])
    assert list(fig.data[0].x) == ["cat", "dog"] and fig.layout.annotations[0].text == "stochastic"
