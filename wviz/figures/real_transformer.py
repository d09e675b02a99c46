"""Figures of the "Real transformer" page: one head's attention under several normalisers, sparsity and attention
sinks per head, per-layer output distances, a family's predictions (the top 5 for a mask, the next token, an
image's classes) as a table, the class token over an image's patches and rollout, a decoder's perplexity along tau,
and the histograms of Figure 4 of 002 (relative deviation of lambda* from alpha z)."""
from __future__ import annotations

import math
import textwrap

import altair as alt
import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from wviz.figures.common import SCALE_ZERO, PALETTE, decade_ticks, number_text, plotly_text, stacked_rows, to_numpy

# Margins: given, not pushed by Plotly (wviz.figures.common, "Margins").


def numbered_tokens(tokens) -> list[str]:
    """'1 [CLS]', '2 the', ...: unique labels even when a word piece repeats (positions counted from 1, as layers
    and heads are), as plain text: for a chart that draws text as given (Altair's linked view)."""
    return [f"{i} {t}" for i, t in enumerate(tokens, 1)]


def token_labels(tokens) -> list[str]:
    """numbered_tokens as a Plotly figure's axis and hover labels: each token drawn literally (plotly_text), so
    that RoBERTa's '<s>' is not a strike-through tag nor a vocabulary entry '<a href=...>' a link."""
    return [plotly_text(t) for t in numbered_tokens(tokens)]


def tokens_text(tokens, family: str = "encoder", most: int = 60) -> str:
    """'13 word pieces: [CLS] · the · ...' (an encoder's; 'tokens' of a decoder or a picture), every token while
    there are at most ``most``, else the first most - 10, '...' and the last 10."""
    noun = "word pieces" if family == "encoder" else "tokens"
    shown = list(tokens) if len(tokens) <= most else [*tokens[:most - 10], "…", *tokens[-10:]]
    return f"{len(tokens)} {noun}: " + " · ".join(shown)


def _panel_titles(labels) -> list[str]:
    """'entmax (alpha = 1.5, tau = 1)' -> 'entmax<br>alpha = 1.5, tau = 1': name and parameters on two lines, so
    that panel titles side by side do not run into each other."""
    out = []
    for label in labels:
        name, _, params = label.partition(" (")
        out.append(f"{name}<br>{params.rstrip(')')}" if params else label)
    return out


# The attention maps sit two to a row, a panel about PANEL_PX wide on a wide screen. Every token label must stay
# clear of its neighbours at presentation size (THIN_PX: an 18 px label with its gap) and beside the sidebar at
# 800 px, where a panel is about 130 px wide and a 12 px label needs LABEL_PX: the key labels across a panel get
# KEYS_PX (9 labels at THIN_PX, which also fit those 130 px), the query labels down a panel its height. Beyond that
# every k-th token is labelled and the figure says so.
MAP_COLS, PANEL_PX, LABEL_PX, THIN_PX, KEYS_PX = 2, 330, 14, 22, 200
# A subtitle's line: 18 px text in a presentation column at 1024 px, 13 px beside the sidebar at 800 px
SUBTITLE_CHARS = 60


def label_step(n: int, room_px: float = KEYS_PX) -> int:
    """Label every token when n of them fit in room_px at presentation size, else every k-th (the smallest k that
    fits)."""
    return max(1, math.ceil(n * THIN_PX / room_px))


def _token_axis(labels: list[str], step: int, across: bool) -> dict:
    """An axis that labels every ``step``-th token (every token when step is 1); across (the x axis), long labels
    are rotated upright so that neighbours do not overlap."""
    shown = labels[::step]
    upright = across and max(len(t) for t in labels) > 3
    return dict(tickmode="array", tickvals=shown, ticktext=shown, tickangle=-90 if upright else 0, automargin=True)


def main_figure(one) -> go.Figure:
    """The page's main figure, the one its tau slider redraws: one head (a wviz.views.real_transformer.OneHead)
    under each chosen normaliser that tau enters (softmax / tau, sparsemax, entmax)."""
    return attention_maps(one.moved, one.tokens, one.layer, one.head, "normalisers of S / tau")


def fixed_maps(one) -> go.Figure:
    """The same head, original and under the chosen normalisers that tau does not enter (Sinkhorn): drawn apart from
    the main figure, so that a tau move does not send and redraw them (at 512 tokens each is a 512 x 512 heatmap)."""
    fixed = one.fixed
    what = "original and Sinkhorn" if len(fixed) > 1 else "original"   # short: the title must fit at 800 px
    return attention_maps(fixed, one.tokens, one.layer, one.head, what)


# A sparse map (sparsemax, entmax) of a long input is drawn by its nonzero links, one square marker per weight above
# 0, when a heatmap cell would be under LINK_CELL_PX px in a PANEL_PX-wide panel: downscaled to the panel, a heatmap
# of 512 tokens (0.6 px a cell) loses most of its few nonzero cells, and sends all n^2 weights (1 MB a panel) where
# sparsemax has about 3 per row. A map with more than LINK_DENSITY of its weights nonzero stays a heatmap.
LINK_CELL_PX, LINK_DENSITY = 4, 0.25


def drawn_as_links(A) -> bool:
    """Whether attention_maps draws the (n, n) map A by its nonzero links rather than as a heatmap."""
    A = np.asarray(to_numpy(A))
    return PANEL_PX / len(A) < LINK_CELL_PX and np.count_nonzero(A) <= LINK_DENSITY * A.size


def _map_trace(A, labels: list[str], name: str):
    """One head's (n, n) weights as a heatmap (float32, the model's own precision), or, for a long sparse map, as
    square markers at its nonzero (query, key) pairs, on the same colour axis: at the positions 0..n-1 where a
    category axis puts the heatmaps' tokens (numbers, not thousands of labels), hovered with the tokens' numbers
    from 1."""
    z = np.asarray(to_numpy(A), dtype=np.float32)
    hover = "query %{y}<br>key %{x}<br>weight %{z:.3f}<extra></extra>"
    if not drawn_as_links(z):
        return go.Heatmap(z=z, x=labels, y=labels, coloraxis="coloraxis", name=name, hovertemplate=hover)
    i, j = np.nonzero(z)
    return go.Scattergl(x=j.astype(np.int32), y=i.astype(np.int32), mode="markers", name=name, showlegend=False,
                        customdata=np.stack([i + 1, j + 1], axis=1).astype(np.int32),
                        marker=dict(color=z[i, j], coloraxis="coloraxis", symbol="square",
                                    size=max(3.0, PANEL_PX / len(z))),
                        hovertemplate="query token %{customdata[0]}<br>key token %{customdata[1]}<br>"
                                      "weight %{marker.color:.3f}<extra></extra>")


def _links_axis(labels: list[str], step: int, across: bool) -> dict:
    """The axis of a map drawn by its links: positions 0..n-1, labelled as _token_axis labels the heatmaps'."""
    n = len(labels)
    axis = _token_axis(labels, step, across)
    axis.update(tickvals=list(range(0, n, step)), showgrid=False, zeroline=False,
                range=[-0.5, n - 0.5] if across else [n - 0.5, -0.5])
    return axis


def attention_maps(maps: dict, tokens, layer: int, head: int, what: str = "attention per normaliser") -> go.Figure:
    """The (T, T) weights of one head under each normaliser (``maps``: label -> matrix), two panels to a row (a
    panel the same size whether it has a neighbour or not) on one colour scale from 0 to 1 (one shared colour
    bar); queries down, keys across, every token labelled while the labels fit (else every k-th, said in the
    subtitle). A long sparse map is drawn by its nonzero links (drawn_as_links), on a dark background where the
    heatmaps' 0 is. Zoom (Plotly's box zoom) reads any part. Titled 'Layer l, head h: ``what``'."""
    labels = token_labels(tokens)
    names = list(maps)
    n = len(labels)
    cols = MAP_COLS
    rows = math.ceil(len(names) / cols)
    panel_h = min(560, max(260, THIN_PX * n))
    step_x, step_y = label_step(n), label_step(n, panel_h)
    # between two rows: the upright key labels, the axis title and the next row's two-line panel titles, each at
    # presentation size (18-20 px).
    # Below the last row the labels and the axis title get a margin of their own: in the figure's height, not taken
    # from the panels' (a lone row at presentation size was squeezed to half its height, its labels overlapping)
    labels_px = 0.6 * 20 * max(len(t) for t in labels[::step_x])
    gap, bottom = labels_px + 130, labels_px + 60
    # the query labels and the axis title at the page's 12 px, the colour bar: room given, not pushed by Plotly
    # after a first draw (a second draw of the whole figure)
    left = 0.6 * 12 * max(len(t) for t in labels[::step_y]) + 50
    spacing, area = stacked_rows(rows, panel_h, gap)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=_panel_titles(names), horizontal_spacing=0.1,
                        vertical_spacing=spacing)
    links = []
    for i, name in enumerate(names):
        r, col = i // cols + 1, i % cols + 1
        trace = _map_trace(maps[name], labels, name)
        fig.add_trace(trace, row=r, col=col)
        y_axis, x_axis = _token_axis(labels, step_y, False), _token_axis(labels, step_x, True)
        if trace.type == "scattergl":   # its tokens where the heatmaps' are, on the heatmaps' 0 (dark)
            links.append(name)
            y_axis, x_axis = _links_axis(labels, step_y, False), _links_axis(labels, step_x, True)
            fig.add_shape(type="rect", xref="x domain", yref="y domain", x0=0, x1=1, y0=0, y1=1, layer="below",
                          fillcolor=VIRIDIS_ZERO, line_width=0, name=SCALE_ZERO, row=r, col=col)
        else:
            y_axis["autorange"] = "reversed"
        fig.update_yaxes(**y_axis, showticklabels=col == 1, title_text="query token" if col == 1 else None,
                         row=r, col=col)
        fig.update_xaxes(**x_axis, title_text="key token", row=r, col=col)
    for i in range(len(names), rows * cols):        # a row's empty place: no axes drawn there
        fig.update_xaxes(visible=False, row=i // cols + 1, col=i % cols + 1)
        fig.update_yaxes(visible=False, row=i // cols + 1, col=i % cols + 1)
    thinned = [f"one {axis} token in {k} labelled" for k, axis in ((step_y, "query"), (step_x, "key")) if k > 1]
    thinned += [f"{', '.join(_short(x) for x in links)}: each nonzero weight a square"] if links else []
    # The title at the top of the figure (not in the middle of the top margin, Plotly's default), so that a subtitle
    # stays clear of the panels' two-line titles at presentation size
    title = {"text": f"Layer {layer}, head {head}: {what}", "yref": "container", "y": 1,
             "yanchor": "top", "pad": {"t": 12}}
    # the subtitle in lines of at most SUBTITLE_CHARS: Plotly does not wrap it, and one line ran past the column
    lines = textwrap.wrap("; ".join(thinned) + " (hover for all; drag to zoom)", SUBTITLE_CHARS) if thinned else []
    if lines:
        title["subtitle_text"] = "<br>".join(lines)
    top = 100 + (10 + 22 * len(lines) if lines else 0)
    # a lone map's colour bar beside it, not at the figure's right edge past the empty place (some 400 px away)
    beside = dict(x=fig.layout.xaxis.domain[1] + 0.02, xanchor="left") if len(names) < cols else {}
    fig.update_layout(title=title, coloraxis=dict(colorscale="Viridis", cmin=0, cmax=1,
                                                    colorbar=dict(title="weight", xpad=4, **beside)),
                      height=round(area + top + bottom), margin=dict(t=top, b=round(bottom), l=round(left), r=80))
    return fig


VIRIDIS_ZERO = "#440154"   # Viridis at 0: the background of a map drawn by its links, where its weights are 0


def _short(label: str) -> str:
    """'sparsemax (tau = 0.5)' -> 'sparsemax'."""
    return label.partition(" (")[0]


def _per_head_panels(values: dict, title: str, colorscale: str, bar: str, hover: str) -> go.Figure:
    """One (L, H) heatmap per entry of ``values`` (layers 1..L down, heads 1..H across), three to a row on one
    colour scale from 0 to 1 (one shared colour bar titled ``bar``); ``hover`` formats a cell's z."""
    names = list(values)
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    panel, gap = 240, 150        # px; between rows: tick labels, the axis title, two-line panel titles (at 20 px)
    spacing, area = stacked_rows(rows, panel, gap)
    margin = dict(t=120 + 30 * title.count("<br>"), b=80, l=70, r=115)   # a title's second line above the panels'
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=_panel_titles(names), horizontal_spacing=0.08,
                        vertical_spacing=spacing)
    for i, name in enumerate(names):
        r, col = i // cols + 1, i % cols + 1
        s = to_numpy(values[name])
        L, H = s.shape
        fig.add_trace(go.Heatmap(z=s, x=list(range(1, H + 1)), y=list(range(1, L + 1)), coloraxis="coloraxis",
                                 name=name, hovertemplate=f"layer %{{y}}, head %{{x}}: {hover}<extra></extra>"),
                      row=r, col=col)
        fig.update_yaxes(autorange="reversed", title_text="layer" if col == 1 else None, dtick=1, row=r, col=col)
        fig.update_xaxes(title_text="head", dtick=2, row=r, col=col)
    fig.update_layout(title=title, coloraxis=dict(colorscale=colorscale, cmin=0, cmax=1, colorbar=dict(title=bar)),
                      height=area + margin["t"] + margin["b"], margin=margin)
    return fig


def sparsity_per_head(sparsity: dict) -> go.Figure:
    """Fraction of exact zeros of each head (layers 1..L down, heads 1..H across), one panel per normaliser, three
    to a row on one colour scale (one shared colour bar)."""
    return _per_head_panels(sparsity, "Sparsity per head: fraction of weights exactly 0", "Cividis", "zeros",
                            "%{z:.1%} zeros")


def sink_shares(shares: dict, on: str) -> go.Figure:
    """Attention sinks (a wviz.views.real_transformer.SinkMaps's ``first`` or ``special``): each head's mean weight
    on ``on`` (the first token, or the special tokens: plain text, RoBERTa's '<s>' drawn as written), layers down
    and heads across, one panel per normaliser, on one colour scale from 0 to 1."""
    # two lines: at 800 px one line ran past the chart
    return _per_head_panels(shares, f"Attention sinks:<br>each head's mean weight on {plotly_text(on)}", "Viridis",
                            "weight", "%{z:.2f} of a row")


def layer_distances(distances: dict) -> go.Figure:
    """||h'_l - h_l|| / ||h_l|| of each layer's output (layer l = 1..L), one line per normaliser."""
    fig = go.Figure()
    for i, (name, d) in enumerate(distances.items()):
        d = to_numpy(d)
        fig.add_scatter(x=list(range(1, len(d) + 1)), y=d, mode="lines+markers", name=name,
                        line=dict(color=PALETTE[i % len(PALETTE)]))
    fig.update_layout(title="How far each layer's output moves from the original model",
                      xaxis=dict(title="layer", dtick=1),
                      yaxis=dict(title="||h' - h|| / ||h||", rangemode="tozero"),
                      height=360, margin=dict(t=60, b=116, l=60), legend=dict(orientation="h", y=-0.25))
    return fig


def rho_sweep(sweep, rho_now: float) -> go.Figure:
    """From the model's softmax to Sinkformer attention (a wviz.views.real_transformer.RhoSweep): the sentence
    embedding's cosine to the model's own (top) and each layer's output distance (bottom) against Sinkhorn's rho on
    a log axis, the two ends drawn at its sides (rho = 0: softmax(S / gamma); rho = infinity: doubly stochastic)
    and the sidebar's rho marked."""
    rhos = to_numpy(sweep.rhos)
    lo, hi = rhos[0] / 10 ** 0.8, rhos[-1] * 10 ** 0.8
    (cos0, dist0), (cos_inf, dist_inf) = sweep.ends
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1,
                        subplot_titles=("cosine of the sentence embedding to the model's own",
                                        "each layer's output: ||h' - h|| / ||h||"))
    fig.add_scatter(x=[lo, *rhos, hi], y=[cos0, *to_numpy(sweep.cosines), cos_inf], mode="lines+markers",
                    name="cosine", line=dict(color=PALETTE[0]), row=1, col=1,
                    hovertemplate="cosine %{y:.4f}<extra></extra>")
    distances, d0, d_inf = to_numpy(sweep.distances), to_numpy(dist0), to_numpy(dist_inf)
    for layer in range(distances.shape[1]):   # named from 1, as the page's layer selector counts them
        fig.add_scatter(x=[lo, *rhos, hi], y=[d0[layer], *distances[:, layer], d_inf[layer]], mode="lines",
                        name=f"layer {layer + 1}", line=dict(color=PALETTE[(layer + 1) % len(PALETTE)]), row=2, col=1,
                        hovertemplate=f"layer {layer + 1}: %{{y:.3g}}<extra></extra>")
    ticks = decade_ticks(rhos[0], rhos[-1])
    ticks.update(tickvals=[lo, *ticks["tickvals"], hi], ticktext=["0", *ticks["ticktext"], "∞"])
    for row in (1, 2):
        fig.add_vline(x=hi if np.isinf(rho_now) else rho_now, line_dash="dash", row=row, col=1)
        fig.update_xaxes(ticks, range=[np.log10(lo) - 0.2, np.log10(hi) + 0.2], row=row, col=1)
    fig.update_xaxes(title_text="rho (how firmly every key is held to one unit of attention)", row=2, col=1)
    fig.update_yaxes(rangemode="tozero", row=2, col=1)
    fig.update_layout(title=f"From softmax to Sinkformer (gamma = {sweep.gamma:g}, {sweep.n_iter} iterations)",
                      height=560, margin=dict(t=90, b=120, l=32),
                      legend=dict(orientation="h", y=-0.2))
    return fig


def _token_text(label: str) -> str:
    """A predicted token as a cell shows it: spaces as '␣' (GPT-2's ' cat' and 'cat' are two tokens), a line break
    as '↵', a tab as '⇥', any other invisible character by its escape ('\\x12'), which a cell would draw as
    nothing or as a box."""
    if label.strip() == label and label.isprintable():
        return label
    label = label.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥")
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in label)


def short_names(labels) -> list[str]:
    """'original: softmax (tau = 1)' -> 'original', 'entmax (alpha = 1.5, tau = 1)' -> 'entmax': the names alone,
    for a table's columns or small panels (the maps' panels give the parameters)."""
    return ["original" if label.startswith("original") else _short(label) for label in labels]


def guesses_table(guesses) -> pd.DataFrame:
    """A family's predictions (a wviz.views.real_transformer.Guesses) as a table: one row per rank, one column per
    normaliser (its name: short_names), each cell 'token  probability' (number_text, 3 digits)."""
    columns = {label: [f"{_token_text(t)}  {number_text(p, 3)}" for t, p in zip(pred.labels, pred.probabilities)]
               for label, pred in zip(short_names(guesses.by_normaliser), guesses.by_normaliser.values())}
    k = max(len(v) for v in columns.values())
    table = pd.DataFrame({label: v + [""] * (k - len(v)) for label, v in columns.items()})
    table.index = pd.RangeIndex(1, k + 1, name="rank")
    return table


def patch_maps(maps, rows: int, cols: int) -> go.Figure:
    """An image model's class token over the patch grid (a wviz.views.real_transformer.PatchMaps): top, the chosen
    head's weights from [CLS] to each patch; bottom, attention rollout; one column per normaliser (short_names), each
    row on its own colour scale from 0 (both colour bars drawn), patches in their places (row 1 at the top)."""
    names = list(maps.heads)
    n = len(names)
    fig = make_subplots(rows=2, cols=n, subplot_titles=short_names(names) + [""] * n, horizontal_spacing=0.03,
                        vertical_spacing=0.12)
    bars = (f"layer {maps.layer},<br>head {maps.head}", "rollout")
    for r, (part, axis, middle) in enumerate(((maps.heads, "coloraxis", 0.78), (maps.rollout, "coloraxis2", 0.22)), 1):
        for c, name in enumerate(names, 1):
            fig.add_trace(go.Heatmap(z=to_numpy(part[name]), x=list(range(1, cols + 1)), y=list(range(1, rows + 1)),
                                     coloraxis=axis, name=name,
                                     hovertemplate="patch row %{y}, col %{x}: %{z:.3f}<extra></extra>"), row=r, col=c)
        most = max(float(to_numpy(v).max()) for v in part.values()) or 1.0
        fig.update_layout({axis: dict(colorscale="Viridis", cmin=0, cmax=most,
                                      colorbar=dict(title=bars[r - 1], len=0.42, y=middle))})
    fig.update_xaxes(showticklabels=False, ticks="", constrain="domain")
    fig.update_yaxes(showticklabels=False, ticks="", autorange="reversed", constrain="domain")
    for i in range(1, 2 * n + 1):   # square patches
        fig.update_yaxes(scaleanchor=f"x{'' if i == 1 else i}", row=(i - 1) // n + 1, col=(i - 1) % n + 1)
    fig.update_layout(title=dict(text=f"The class token over the patches: layer {maps.layer}, head {maps.head}, "
                                      "and rollout",
                                 subtitle_text="top: [CLS]'s weight on each patch; bottom: attention rollout"),
                      height=560, margin=dict(t=150, b=20))
    return fig


def perplexity_curves(p, now, tau: float) -> go.Figure:
    """A decoder's perplexity of the bundled paragraph against tau (a wviz.views.real_transformer.Perplexities), one
    line per normaliser (Sinkhorn, which has no tau, flat), the model's own (softmax, tau = 1) dashed, the sidebar's
    tau marked, and ``now`` (the same at tau alone) as markers on it. Both axes logarithmic."""
    taus = list(p.taus)
    fig = go.Figure()
    for i, (name, values) in enumerate(p.curves.items()):
        colour = PALETTE[i % len(PALETTE)]
        fig.add_scatter(x=taus, y=list(values), mode="lines", name=name, line=dict(color=colour),
                        hovertemplate=f"{name}, tau %{{x:.3g}}: %{{y:.4g}}<extra></extra>")
        if now is not None and name in now.curves:
            fig.add_scatter(x=[tau], y=[now.curves[name][0]], mode="markers", marker=dict(color=colour, size=11),
                            showlegend=False, hovertemplate=f"{name}, tau = {tau:g}: %{{y:.4g}}<extra></extra>")
    # The model's own as a dashed line in the legend (an annotation on a log axis would need log10 of its place)
    fig.add_scatter(x=[taus[0], taus[-1]], y=[p.original, p.original], mode="lines", line=dict(color="black",
                    dash="dash"), name=f"the model's own (softmax, tau = 1): {number_text(p.original, 4)}",
                    hovertemplate=f"the model's own: {number_text(p.original, 4)}<extra></extra>")
    fig.add_vline(x=tau, line_dash="dot")
    ticks = decade_ticks(taus[0], taus[-1])
    fig.update_layout(title=dict(text=f"Perplexity of the bundled paragraph ({p.tokens} tokens) along tau",
                                 subtitle_text="dotted: the sidebar's tau" + (" (its first words: the model reads no "
                                                                             "more)" if p.cut else "")),
                      xaxis=dict(ticks, title="tau (temperature)"), yaxis=dict(type="log", title="perplexity"),
                      height=440, margin=dict(t=110, b=40, r=30), legend=dict(orientation="h", y=-0.25))
    return fig


def linked_attention(maps: dict, tokens, layer: int, head: int) -> alt.VConcatChart:
    """An Altair (Vega-Lite) linked view, all in the browser: the heatmap of one head under one normaliser (a
    drop-down under the chart picks which); clicking a cell selects its query (a point selection on the 'query'
    field, the row outlined), and the bars below show that query's weights over the key tokens under every
    normaliser side by side. The selection starts on the first query ([CLS]). Narrow enough for a half screen;
    every token labelled while the labels fit (else Vega hides overlapping ones, and the title says so)."""
    labels = numbered_tokens(tokens)
    names = list(maps)
    n = len(labels)
    table = pd.DataFrame({"normaliser": np.repeat(names, n * n), "query": np.tile(np.repeat(labels, n), len(names)),
                          "key": np.tile(labels, n * len(names)),
                          "weight": np.concatenate([to_numpy(maps[name]).ravel() for name in names])})
    side = min(340, max(180, 22 * n))
    fits = side / n >= LABEL_PX
    upright = max(len(t) for t in labels) > 3
    x_axis = alt.Axis(labelAngle=-90 if upright else 0, labelOverlap="greedy" if not fits else False)
    y_axis = alt.Axis(labelOverlap="greedy" if not fits else False)
    pick = alt.selection_point(name="query_row", fields=["query"], on="click", value=[{"query": labels[0]}],
                               toggle=False, clear=False, empty=False)
    shown = alt.param(name="heatmap_of", value=names[0], bind=alt.binding_select(options=names, name="heatmap: "))
    tip = [alt.Tooltip("normaliser:N"), alt.Tooltip("query:N"), alt.Tooltip("key:N"),
           alt.Tooltip("weight:Q", format=".3f")]
    heat = alt.Chart().transform_filter(alt.datum.normaliser == shown).mark_rect().encode(
        x=alt.X("key:N", sort=labels, title="key token", axis=x_axis),
        y=alt.Y("query:N", sort=labels, title="query token", axis=y_axis),
        color=alt.Color("weight:Q", title="weight", scale=alt.Scale(domain=[0, 1], scheme="viridis"),
                        legend=alt.Legend(orient="right", gradientLength=min(side, 200))),
        stroke=alt.condition(pick, alt.value("#D55E00"), alt.value(None)), strokeWidth=alt.value(2), tooltip=tip,
    ).add_params(pick, shown).properties(width=side, height=side,
                                         title="Click a row to choose its query" + ("" if fits else
                                                                                    " (some labels hidden)"))
    bars = alt.Chart().transform_filter(pick).mark_bar().encode(
        x=alt.X("key:N", sort=labels, title="key token", axis=x_axis),
        xOffset=alt.XOffset("normaliser:N", sort=names),
        y=alt.Y("weight:Q", title="weight", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("normaliser:N", sort=names, scale=alt.Scale(range=PALETTE[:len(names)]),
                        legend=alt.Legend(orient="bottom", columns=1, title=None, labelLimit=400)),
        tooltip=tip,
    ).properties(width=side, height=200, title="The chosen query's weights, every normaliser")
    return alt.vconcat(heat, bars, data=table).properties(
        title=f"Layer {layer}, head {head}").resolve_scale(color="independent")
