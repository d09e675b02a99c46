"""Figures of the "Uncertainty inspector" page (stochastic ViT of 004 and its deterministic twin).

Model names (an uploaded checkpoint's file name) and class names (a checkpoint record's, a test zip's folders) come
from outside wviz: each is drawn as written (plotly_text), and looked up (MODEL_COLORS) as it is."""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from wviz.figures.common import BOTTOM_LEGEND, DIVERGING_SCALE, PALETTE, PICTURE_SCALE, plotly_text, to_numpy

MODEL_COLORS = {"stochastic": PALETTE[0], "deterministic": PALETTE[1]}
SCORE_AXIS = {"max-softmax": "1 - max softmax probability", "predictive entropy": "predictive entropy (nats)",
              "mutual information": "mutual information H[E p] - E H[p] (nats)",
              "class spread": "class spread (share of draws off the modal class)",
              "covariance trace": "mean tr(Sigma) of the last layer's tokens",
              "embedding covariance": "mean tr(Sigma) of the embedding layer's tokens",
              "prototype distance": "mean over patches of log(0.001 + kappa d^2 / mean d^2)",
              "Fisher combination": "-log p(entropy) - log p(prototype distance)"}


# images: 0 black to 1 white (kept grey in presentation mode)
# OTHER_VIEWS: the margins of the figures of the page's other views (the attention maps, the dataset panel's views):
# given, not pushed by Plotly (wviz.figures.common, "Margins").
PIXELS: dict = dict(colorscale=PICTURE_SCALE, cmin=0, cmax=1, colorbar=dict(title="pixel"))
# short lines: three panels share the width of a narrow page
RULE_TITLES = {"004": "004's rule<br>(A∘A)Σ_v", "mixture": "mixture rule<br>AΣ_v + spread"}


def main_figure(maps) -> go.Figure:
    """The page's main figure: tr(Sigma) per patch at the layer of a wviz.views.uncertainty_inspector.LayerMaps
    under the model's own covariance rule, beside the image the models saw and the same map under the other rule
    applied post hoc to the same weights, each map on its own colour scale (the query's patch outlined, the
    corrupted region dashed, on every panel). A stochastic main model's only: a deterministic one has no
    covariances (``maps.trace`` None)."""
    if maps.trace is None:
        raise ValueError("a deterministic model has no covariances: there is no tr(Sigma) per patch to draw")
    traces = {maps.rule: maps.trace, **maps.post_hoc}
    titles = ["input"] + [RULE_TITLES.get(r, r) + ("<br>(trained)" if r == maps.rule else "<br>(post hoc)")
                          for r in traces]
    n = 1 + len(traces)
    fig = make_subplots(rows=1, cols=n, subplot_titles=titles, horizontal_spacing=0.16)
    fig.add_trace(_image_trace(maps.image), row=1, col=1)
    # each colour bar just right of its panel (inside the gap to the next one), thin enough for a narrow page
    bar = dict(xanchor="left", len=0.8, thickness=12)
    axes = {}
    for i, (r, t) in enumerate(traces.items(), 2):
        fig.add_trace(go.Heatmap(z=to_numpy(t), coloraxis=f"coloraxis{i}",
                                 hovertemplate="patch row %{y}, col %{x}: tr Σ %{z:.4g}<extra>" + r + "</extra>"),
                      row=1, col=i)
        axes[f"coloraxis{i}"] = dict(colorscale="Viridis",
                                     colorbar=dict(bar, title="tr Σ", x=fig.layout[f"xaxis{i}"].domain[1] + 0.01))
    _outline(fig, maps.image, to_numpy(maps.trace).shape[0], maps.mark, maps.box, n)
    _square_axes(fig, n)
    fig.update_annotations(font_size=12)
    pixels = PIXELS | dict(colorbar=dict(PIXELS["colorbar"], x=fig.layout.xaxis.domain[1] + 0.01, **bar))
    fig.update_layout(title=f"tr Σ per patch at layer {maps.layer}, under both rules",
                      coloraxis=pixels, height=360, margin=dict(t=120, b=20, l=20, r=100), **axes)
    return fig


def _image_trace(img, coloraxis: str = "coloraxis"):
    """A (C, H, W) image in [0, 1]: an RGB one in its colours (go.Image), a grey one as a heatmap on ``coloraxis``
    (its colour bar the pixel scale)."""
    a = to_numpy(img)
    if a.ndim == 3 and a.shape[0] == 3:
        return go.Image(z=np.round(a.transpose(1, 2, 0) * 255), hovertemplate="row %{y}, col %{x}: %{z}<extra></extra>")
    a = a.mean(0) if a.ndim == 3 else a
    return go.Heatmap(z=a, coloraxis=coloraxis, hovertemplate="row %{y}, col %{x}: %{z:.2f}<extra></extra>")


def _square_axes(fig, n_cols: int) -> None:
    for c in range(1, n_cols + 1):
        fig.update_yaxes(autorange="reversed", scaleanchor=f"x{c if c > 1 else ''}", showticklabels=False,
                         row=1, col=c)
        fig.update_xaxes(showticklabels=False, row=1, col=c)


def preprocessing(steps: list) -> go.Figure:
    """The upload's way to the model: one panel per (caption, image) step, on one grey scale (one colour bar)."""
    fig = make_subplots(rows=1, cols=len(steps), subplot_titles=[c for c, _ in steps], horizontal_spacing=0.05)
    for i, (_, img) in enumerate(steps, 1):
        fig.add_trace(_image_trace(img), row=1, col=i)
    _square_axes(fig, len(steps))
    fig.update_layout(title="Preprocessing of the uploaded image", coloraxis=PIXELS, height=300,
                      margin=dict(t=80, b=10))
    return fig


def class_probabilities(preds: dict, names: list[str], samples: int) -> go.Figure:
    """Predictive probability of each class per model (bars) with the 5 %-95 % range of the S Monte-Carlo draws
    (error bars); ``preds`` maps model name -> MCPrediction of one image."""
    fig = go.Figure()
    classes = [plotly_text(n) for n in names]
    for name, p in preds.items():
        mean, lo, hi = (to_numpy(t[0]) for t in (p.mean, p.low, p.high))
        shown = plotly_text(name)
        fig.add_bar(x=classes, y=mean, name=shown, marker_color=MODEL_COLORS.get(name, PALETTE[2]),
                    error_y=dict(type="data", symmetric=False, array=np.maximum(hi - mean, 0),
                                 arrayminus=np.maximum(mean - lo, 0)),
                    hovertemplate="class %{x}: %{y:.3f}<extra>" + shown + "</extra>")
    fig.update_layout(title=f"Class probabilities (mean of {samples} draws)", barmode="group", yaxis_range=[0, 1.05],
                      xaxis_title="class", yaxis_title="probability", height=380, margin=dict(t=80, b=60, l=60),
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, x=1, xanchor="right"))
    return fig


def map_over_image(image, values, title: str, label: str, mark: tuple[int, int] | None = None,
                   box: tuple[int, int, int, int] | None = None) -> go.Figure:
    """The image beside a per-patch map (grid x grid), each with its colour bar; ``mark`` (row, col) outlines one
    patch on both, ``box`` (top, left, bottom, right in patches, bottom and right excluded) a corrupted region
    (dashed)."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("input", label), horizontal_spacing=0.2)
    fig.add_trace(_image_trace(image), row=1, col=1)
    v = to_numpy(values)
    fig.add_trace(go.Heatmap(z=v, coloraxis="coloraxis2",
                             hovertemplate="patch row %{y}, col %{x}: %{z:.4g}<extra></extra>"), row=1, col=2)
    _outline(fig, image, v.shape[0], mark, box, 2)
    _square_axes(fig, 2)
    image_bar = dict(PIXELS, colorbar=dict(title="pixel", x=fig.layout.xaxis.domain[1] + 0.02, xanchor="left"))
    fig.update_layout(title=title, coloraxis=image_bar,
                      coloraxis2=dict(colorscale="Viridis", colorbar=dict(title=label.split(" ")[0])),
                      height=340, margin=dict(t=70, b=20, l=20, r=130))
    return fig


def _outline(fig, image, g: int, mark: tuple[int, int] | None, box: tuple[int, int, int, int] | None,
             n_cols: int) -> None:
    """``mark`` (row, col) outlines one patch, ``box`` (top, left, bottom, right in patches, bottom and right
    excluded) a corrupted region (dashed), on the image (panel 1, in pixels) and on each of the maps of g x g
    patches beside it (panels 2 to n_cols)."""
    p = to_numpy(image).shape[-1] / g    # pixels per patch
    scales = [(1, p)] + [(col, 1) for col in range(2, n_cols + 1)]
    if mark is not None:
        r, c = mark
        for col, scale in scales:
            fig.add_shape(type="rect", x0=c * scale - 0.5, y0=r * scale - 0.5, x1=(c + 1) * scale - 0.5,
                          y1=(r + 1) * scale - 0.5, line=dict(color="red", width=2), row=1, col=col)
    if box is not None:
        top, left, bottom, right = box
        for col, scale in scales:
            fig.add_shape(type="rect", x0=left * scale - 0.5, y0=top * scale - 0.5, x1=right * scale - 0.5,
                          y1=bottom * scale - 0.5, line=dict(color=PALETTE[1], width=3, dash="dash"), row=1, col=col)


def attention_heads(maps: list, rollout_map, title: str) -> go.Figure:
    """The query's attention over the patches for each head, and the attention rollout, on one colour scale (one
    shared colour bar); ``title`` is plain text (it may name an uploaded model), drawn as written."""
    n = len(maps) + 1
    names = [f"head {h + 1}" for h in range(len(maps))] + ["rollout<br>(class token)"]
    fig = make_subplots(rows=1, cols=n, subplot_titles=names, horizontal_spacing=0.03)
    zmax = max(float(to_numpy(m).max()) for m in [*maps, rollout_map])
    for i, m in enumerate([*maps, rollout_map], 1):
        fig.add_trace(go.Heatmap(z=to_numpy(m), coloraxis="coloraxis",
                                 hovertemplate="patch row %{y}, col %{x}: %{z:.3f}<extra></extra>"), row=1, col=i)
    _square_axes(fig, n)
    fig.update_layout(title=plotly_text(title), coloraxis=dict(colorscale="Viridis", cmin=0, cmax=zmax,
                                                  colorbar=dict(title="weight")),
                      # t: the rollout's two-line name clear of the title at 800 px; l, r: OTHER_VIEWS
                      height=315, margin=dict(t=105, b=16, l=16, r=118))
    return fig


def _bin_bars(fig, centres, values, width, i, n, name, color, row, **kw) -> None:
    """Bars of model i (of n) at the bin centres, side by side within each bin of width ``width``."""
    w = width / n
    fig.add_bar(x=centres, y=values, width=w, offset=-width / 2 + i * w, name=name, marker_color=color,
                row=row, col=1, **kw)


def reliability(rels: dict, split: str = "digits test split") -> go.Figure:
    """Reliability diagram: above, accuracy per confidence bin for each model as bars against the diagonal (ECE in
    the legend); below, how many test images fell in each bin (log scale, the counts written on the bars). Empty
    bins are left out: an accuracy over no images is undefined, and joining the few filled bins by lines made a
    well calibrated model look erratic. ``split`` names the test split in the title."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.62, 0.38], vertical_spacing=0.08)
    fig.add_scatter(x=[0, 1], y=[0, 1], mode="lines", line=dict(color="grey", dash="dot"),
                    name="perfect calibration", row=1, col=1)
    empty, top = [], 1.0
    for i, (name, r) in enumerate(rels.items()):
        edges = to_numpy(r.edges)
        centres = (edges[:-1] + edges[1:]) / 2
        acc, count, conf = to_numpy(r.accuracy), to_numpy(r.count), to_numpy(r.confidence)
        keep = count > 0
        shown = plotly_text(name)
        empty.append(f"{shown}, {int((~keep).sum())} of {len(count)}")
        top = max(top, float(count.max()))
        color = MODEL_COLORS.get(name, PALETTE[2])
        _bin_bars(fig, centres[keep], acc[keep], edges[1] - edges[0], i, len(rels), f"{shown} (ECE {r.ece:.3f})",
                  color, 1, customdata=np.stack([count[keep], conf[keep]], -1), legendgroup=shown,
                  hovertemplate="bin %{x:.2f}: accuracy %{y:.3f}, mean confidence %{customdata[1]:.3f}, "
                                "%{customdata[0]} images<extra></extra>")
        _bin_bars(fig, centres[keep], count[keep], edges[1] - edges[0], i, len(rels), f"{shown}: images per bin",
                  color, 2, text=[f"{int(c)}" for c in count[keep]], textposition="outside", cliponaxis=False,
                  legendgroup=shown, showlegend=False, hovertemplate="bin %{x:.2f}: %{y} images<extra></extra>")
    n_bins = len(to_numpy(next(iter(rels.values())).count)) if rels else 0
    fig.update_xaxes(range=[0, 1], dtick=0.1, row=1, col=1)
    fig.update_xaxes(range=[0, 1], dtick=0.1, title_text="confidence (max probability)", row=2, col=1)
    fig.update_yaxes(range=[0, 1.05], title_text="accuracy", row=1, col=1)
    # log scale, ticks 1, 10, 100 written out; the range runs a factor 4 above the largest count (room for its text)
    ticks = [10 ** k for k in range(int(np.ceil(np.log10(4 * top))) + 1)]
    fig.update_yaxes(type="log", range=[np.log10(0.7), np.log10(4 * top)], title_text="images", tickvals=ticks,
                     ticktext=[str(t) for t in ticks], row=2, col=1)
    fig.add_annotation(text="empty bins left out:<br>" + "<br>".join(empty), x=0.01, y=0.99, xref="x domain",
                       yref="y domain", xanchor="left", yanchor="top", showarrow=False, align="left")
    fig.update_layout(title=f"Reliability diagram on the {split} ({n_bins} bins)", barmode="overlay",
                      height=560, margin=dict(t=110, b=56, l=68),   # OTHER_VIEWS
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0))
    return fig


def ood_histograms(scores: dict, score: str, ood_name: str, bins: int = 30, noun: str = "digits") -> go.Figure:
    """Histograms of one OOD score on the test images (``noun``: the digits) and on an OOD set, per model (side by
    side, over the same bins for both sets); AUROC in the panel titles. ``scores`` maps model name -> (in scores,
    out scores, auroc). Each panel's y range runs 15 % above its tallest bar, so no bar is cut at the top."""
    names = list(scores)
    fig = make_subplots(rows=1, cols=len(names), horizontal_spacing=0.1,
                        subplot_titles=[f"{plotly_text(n)}: AUROC {scores[n][2]:.3f}" for n in names])
    for i, n in enumerate(names, 1):
        a, b = to_numpy(scores[n][0]), to_numpy(scores[n][1])
        both = np.concatenate([a, b])
        lo, hi = float(both.min()), float(both.max())
        edges = np.linspace(lo, hi if hi > lo else lo + 1e-9, bins + 1)
        centres, width = (edges[:-1] + edges[1:]) / 2, edges[1] - edges[0]
        tallest = 1
        for vals, label, color in ((a, f"{noun} (test)", PALETTE[2]), (b, ood_name, PALETTE[5])):
            counts, _ = np.histogram(vals, bins=edges)
            tallest = max(tallest, int(counts.max()))
            fig.add_bar(x=centres, y=counts, width=width, name=label, marker_color=color, opacity=0.6,
                        legendgroup=label, showlegend=i == 1, row=1, col=i,
                        hovertemplate="%{x:.3g}: %{y} images<extra>" + label + "</extra>")
        fig.update_xaxes(title_text=SCORE_AXIS.get(score, score), row=1, col=i)
        fig.update_yaxes(range=[0, 1.15 * tallest], title_text="images" if i == 1 else None, row=1, col=i)
    fig.update_layout(title=f"OOD score '{score}': {noun} vs {ood_name}", barmode="overlay", bargap=0, height=380,
                      margin=dict(t=110, b=70, l=75, r=15), legend=dict(orientation="h", yanchor="bottom", y=1.12, x=0))
    return fig


# A corruption's line and marker, the same for every model (its colour): MNIST's seven corruptions each their own
CORRUPTION_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
CORRUPTION_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "cross", "star")


def _corruption_style(model: str, j: int) -> dict:
    """The line of corruption j for a model: the model's colour, the corruption's dash and marker."""
    colour, dash = MODEL_COLORS.get(model, PALETTE[2]), CORRUPTION_DASHES[j % len(CORRUPTION_DASHES)]
    return dict(marker_symbol=CORRUPTION_SYMBOLS[j % len(CORRUPTION_SYMBOLS)], line=dict(color=colour, dash=dash))


def _legend_below(fig: go.Figure, plot: int, b: int, lines: int, line: int = 20) -> None:
    """Height and bottom margin for a plot ``plot`` px high above a legend of ``lines`` lines: the margin ``b``
    holds the axis and three lines, each line more ``line`` px (presentation mode scales the margin with the text)."""
    b += line * max(0, lines - 3)
    fig.update_layout(height=plot + b + fig.layout.margin.t, margin_b=b)


# A legend under the chart laid out as at 800 px (OTHER_VIEWS) at every width, the space _legend_below keeps for
# it filled: wider, more entries to a line left that space blank above them
ONE_A_LINE = dict(BOTTOM_LEGEND, entrywidth=1, entrywidthmode="fraction")
TWO_A_LINE = dict(BOTTOM_LEGEND, entrywidth=0.5, entrywidthmode="fraction")


def corruption_curves(curves: dict, severities) -> go.Figure:
    """Test error against corruption severity: ``curves`` maps model name -> {corruption: (5,) errors}."""
    fig = go.Figure()
    for name, per in curves.items():
        for j, (kind, err) in enumerate(per.items()):
            fig.add_scatter(x=list(severities), y=to_numpy(err), mode="lines+markers",
                            name=f"{plotly_text(name)}: {kind}", **_corruption_style(name, j))
    fig.update_layout(title="Test error under corruption, by severity", xaxis=dict(title="severity", dtick=1),
                      yaxis_title="error", yaxis_range=[0, 1], margin=dict(t=50, l=60), legend=TWO_A_LINE)
    # the legend two to a line (OTHER_VIEWS): 3 lines for the digits' 3 corruptions, 7 for MNIST's 7; the
    # plot 330 px high, the AUROC's axis title along it at presentation size
    _legend_below(fig, 330, 130, math.ceil(len(fig.data) / 2))
    return fig


def corruption_aurocs(curves: dict, severities, score: str, noun: str = "digits") -> go.Figure:
    """AUROC of one score for corrupted against clean test images (``noun``), by severity: ``curves`` maps model
    name -> {corruption: (5,) AUROC}; 0.5 (dotted) is chance, below it the score falls as the image degrades."""
    fig = go.Figure()
    for name, per in curves.items():
        for j, (kind, auc) in enumerate(per.items()):
            shown = f"{plotly_text(name)}: {kind}"
            fig.add_scatter(x=list(severities), y=to_numpy(auc), mode="lines+markers", name=shown,
                            **_corruption_style(name, j),
                            hovertemplate="severity %{x}: AUROC %{y:.3f}<extra>" + shown + "</extra>")
    fig.add_hline(y=0.5, line=dict(color="grey", dash="dot"), annotation_text="chance",
                  annotation_position="bottom right")
    fig.update_layout(title=f"Does '{score}' see the corruption?", xaxis=dict(title="severity", dtick=1),
                      yaxis_title=f"AUROC, corrupted vs clean {noun}", yaxis_range=[0, 1.02],
                      margin=dict(t=50, l=60), legend=TWO_A_LINE)
    _legend_below(fig, 330, 130, math.ceil(len(fig.data) / 2))   # as corruption_curves
    return fig


def confusion(matrices: dict, names: list[str], split: str = "digits test split") -> go.Figure:
    """The confusion matrix of each model (``matrices``: model name -> (C, C) counts, rows the true class, columns
    the predicted one) side by side on one colour scale, the counts written in the cells up to 12 classes; the
    right answers lie on the diagonal."""
    shown = [plotly_text(m) for m in matrices]
    fig = make_subplots(rows=1, cols=len(shown), subplot_titles=shown, horizontal_spacing=0.12)
    labels = [plotly_text(n) for n in names]
    for i, (matrix, name) in enumerate(zip(matrices.values(), shown), 1):
        fig.add_trace(go.Heatmap(z=to_numpy(matrix), x=labels, y=labels, coloraxis="coloraxis", name=name,
                                 texttemplate="%{z}" if len(labels) <= 12 else None,
                                 textfont=dict(size=10),   # the same in both: fitted, a count of 100 shrank its own
                                 hovertemplate="true %{y}, predicted %{x}: %{z} images<extra>" + name + "</extra>"),
                      row=1, col=i)
        every = dict(dtick=1) if len(labels) <= 12 else {}  # each class named, not every other one on a narrow page
        fig.update_xaxes(title_text="predicted class", type="category", row=1, col=i, **every)
        fig.update_yaxes(title_text="true class" if i == 1 else None, type="category", autorange="reversed",
                         row=1, col=i, **every)
    # the colour bar under the matrices: at their right it took 120 px of an 800 px page's 460, and the cells left
    # were too narrow for a count of 100 at a legible size (OTHER_VIEWS)
    fig.update_layout(title=f"Confusion matrix on the {split}", height=555, margin=dict(t=90, b=175, l=70, r=20),
                      coloraxis=dict(colorscale="Blues", cmin=0, colorbar=dict(
                          title=dict(text="images", side="top"), orientation="h", x=0.5, xanchor="center",
                          y=-0.3, yanchor="top", len=0.6, thickness=14)))
    return fig


def occlusion_map(image, change, score: float, mark=None) -> go.Figure:
    """dMI per patch (the MI with the patch occluded minus the image's MI) over the image, on a diverging scale
    centred at 0: red, the draws disagree more without that patch; blue, less."""
    fig = map_over_image(image, change, f"Occlusion of the mutual information (image score {score:.3f} nats)",
                         "ΔMI per patch (nats)", mark)
    top = max(float(np.abs(to_numpy(change)).max()), 1e-9)
    fig.update_layout(coloraxis2=dict(colorscale=DIVERGING_SCALE, cmin=-top, cmax=top, colorbar=dict(title="ΔMI")))
    return fig


def calibrated_reliability(models: dict, noun: str = "images") -> go.Figure:
    """Reliability before and after temperature scaling, one row per model (``models``: name -> (before, after,
    bands, tau)): accuracy per confidence bin (markers) with its bootstrap 95 % band (shaded), against the
    diagonal; ECE in the titles."""
    titles = [f"{plotly_text(name)}, {part}" for name, (before, after, _, tau) in models.items()   # narrow: 2 lines
              for part in (f"before<br>τ = 1: ECE {before.ece:.4f}", f"after<br>τ = {tau:.2f}: ECE {after.ece:.4f}")]
    fig = make_subplots(rows=len(models), cols=2, shared_yaxes=True, horizontal_spacing=0.06, vertical_spacing=0.16,
                        subplot_titles=titles)
    for row, (before, after, bands, _) in enumerate(models.values(), 1):
        for col, (rel, (low, high)) in enumerate(((before, bands["before"]), (after, bands["after"])), 1):
            _reliability_panel(fig, rel, low, high, noun, row, col, legend=row == col == 1)
        fig.update_yaxes(range=[0, 1.05], title_text="accuracy", row=row, col=1)
    fig.update_xaxes(range=[0, 1])
    fig.update_xaxes(title_text="confidence (max probability)", row=len(models))
    fig.update_layout(title="Temperature scaling: reliability before and after", height=300 * len(models) + 160,
                      margin=dict(t=100, b=125, l=70, r=20), legend=BOTTOM_LEGEND)
    return fig


def _reliability_panel(fig, rel, low, high, noun: str, row: int, col: int, legend: bool):
    """One reliability panel: the diagonal, the bootstrap band and the accuracy per non-empty bin."""
    edges = to_numpy(rel.edges)
    centres = (edges[:-1] + edges[1:]) / 2
    keep = to_numpy(rel.count) > 0
    lo, hi = to_numpy(low)[keep], to_numpy(high)[keep]
    fig.add_scatter(x=[0, 1], y=[0, 1], mode="lines", line=dict(color="grey", dash="dot"), showlegend=legend,
                    name="perfect calibration", row=row, col=col)
    fig.add_scatter(x=np.concatenate([centres[keep], centres[keep][::-1]]), y=np.concatenate([hi, lo[::-1]]),
                    mode="lines", fill="toself", fillcolor="rgba(31,119,180,0.2)", line=dict(width=0),
                    hoverinfo="skip", name="bootstrap 95 % band", showlegend=legend, row=row, col=col)
    fig.add_scatter(x=centres[keep], y=to_numpy(rel.accuracy)[keep], mode="markers+lines",
                    marker=dict(color=PALETTE[0], size=8), name="accuracy per bin", showlegend=legend,
                    customdata=to_numpy(rel.count)[keep],
                    hovertemplate="bin %{x:.2f}: accuracy %{y:.3f}, %{customdata} " + noun + "<extra></extra>",
                    row=row, col=col)


DASHES = ("solid", "dash", "dot")   # one per model where the models share a figure (lines)
PATTERNS = ("", "/", ".")            # ... (bars)


def risk_coverage(curves: dict, noun: str = "images", perfect: dict | None = None) -> go.Figure:
    """Selective classification: the error among the most certain fraction of the test images, one curve per model
    and score (``curves``: model -> score -> RiskCoverage; a colour per score, a dash per model), and in grey each
    model's perfect score (``perfect``: model -> RiskCoverage), the floor of its curves; AURC in the legend (lower
    is better)."""
    fig = go.Figure()
    for m, (model, by_score) in enumerate(curves.items()):
        lines = [(score, rc, PALETTE[i % len(PALETTE)]) for i, (score, rc) in enumerate(by_score.items())]
        if perfect is not None and model in perfect:
            lines.append(("a perfect score", perfect[model], "grey"))
        for score, rc, color in lines:
            shown = f"{plotly_text(model)}: {score}"
            fig.add_scatter(x=to_numpy(rc.coverage), y=to_numpy(rc.risk), mode="lines",
                            name=f"{shown} (AURC {rc.aurc:.4f})", line=dict(color=color, dash=DASHES[m % len(DASHES)]),
                            hovertemplate="coverage %{x:.2f}: error %{y:.3f}<extra>" + shown + "</extra>")
    # the title in two lines: in one it ran past the chart at 800 px; below the plot (280 px high) the axis and the
    # legend, an entry a line (the stochastic model's eight scores, the twin's two and a perfect score each: twelve)
    fig.update_layout(title="Risk against coverage:<br>keep the test " + noun + " each score calls most certain",
                      xaxis_title="coverage (share of test " + noun + " kept)", yaxis_title="error among them",
                      margin=dict(t=80, l=70), legend=ONE_A_LINE)
    _legend_below(fig, 280, 220 - 5 * 22, len(fig.data), line=22)   # as conformal_sizes
    return fig


def conformal_sizes(models: dict, n_classes: int) -> go.Figure:
    """Split-conformal prediction sets: how many classes the sets hold, clean and corrupted test images side by
    side, for each model (``models``: name -> wviz.vit.calibration.ConformalSets; a colour per set, a pattern per
    model); the coverage of each in the legend, each model's threshold q in the title."""
    fig = go.Figure()
    sizes = np.arange(0, n_classes + 1)
    largest = max(int(to_numpy(s).max(initial=0)) for sets in models.values() for s in sets.sizes.values())
    for m, (model, sets) in enumerate(models.items()):
        for i, (name, s) in enumerate(sets.sizes.items()):
            counts = np.bincount(to_numpy(s).astype(int), minlength=n_classes + 1)
            shown = f"{plotly_text(model)}, {name}"
            fig.add_bar(x=sizes, y=counts / max(1, counts.sum()), name=f"{shown}: coverage "
                        f"{sets.coverage[name]:.3f}, mean size {float(to_numpy(s).mean()):.2f}",
                        marker=dict(color=PALETTE[i % len(PALETTE)], pattern_shape=PATTERNS[m % len(PATTERNS)]),
                        hovertemplate="%{x} classes: %{y:.1%}<extra>" + shown + "</extra>")
    first = next(iter(models.values()))
    qs = ", ".join(f"{plotly_text(model)} {sets.q:.3f}" for model, sets in models.items())
    # the title in two lines: in one it ran past the chart at 800 px; the legend one set to a line (OTHER_VIEWS): 8
    # for the digits (clean and 3 corruptions, 2 models), 16 for MNIST's 7; the plot 255 px high;
    # the sizes up to the largest drawn (MNIST's sets hold 0 or 1 class: on 0-10 the bars were slivers)
    fig.update_layout(title=f"Split-conformal sets at {1 - first.alpha:.0%}<br>threshold q: {qs}",
                      barmode="group", xaxis=dict(title="classes in the set", dtick=1,
                                                  range=[-0.5, max(largest, 1) + 0.5]),
                      yaxis=dict(title="share of test images", tickformat=".0%"),
                      margin=dict(t=80, l=72), legend=ONE_A_LINE)
    _legend_below(fig, 255, 225 - 5 * 22, len(fig.data), line=22)   # 20 px left MNIST's 1 px short in presentation
    return fig
