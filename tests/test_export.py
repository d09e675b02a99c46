"""wviz.export: files that open in the programs a lecturer uses, carrying exactly the plotted values."""
import asyncio
import io
import json
import xml.etree.ElementTree as ET
import zipfile

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
from PIL import Image

from tests.file_checks import check, check_pdf
from wviz import export

Z = np.array([[0.1, 0.9], [0.5, 0.5], [1.0, 0.0]])


def figure():
    fig = go.Figure()
    fig.add_scatter(x=[0.0, 1.0, 2.0], y=[3.0, 1.0, 2.0], mode="lines", name="curve")
    fig.add_bar(x=["a", "b"], y=[0.25, 0.75], name="bars")
    fig.update_layout(title="A test figure", width=400, height=300)
    return fig


def heatmap():
    fig = go.Figure(go.Heatmap(z=Z, x=["k1", "k2"], y=["q1", "q2", "q3"], name="A"))
    fig.update_layout(title="weights")
    return fig


def test_png_svg_pdf_are_valid_files():
    png = export.to_image(figure(), "png", scale=2)
    img = check("png", png)
    assert img.format == "PNG" and img.size == (800, 600)  # scale 2 doubles the 400 x 300 layout
    svg = export.to_image(figure(), "svg")
    root = check("svg", svg)
    assert root.tag.endswith("svg") and b"A test figure" in svg
    assert "A test figure" in "".join(root.itertext())  # the title is drawn as text, not just present in bytes
    pdf = export.to_image(figure(), "pdf")
    assert pdf.startswith(b"%PDF-") and pdf.rstrip().endswith(b"%%EOF")
    check("pdf", pdf)


def test_the_file_checks_catch_broken_files():
    """The checks the browser tests rely on must reject what only looks right at its start."""
    png, svg, pdf = (export.to_image(figure(), fmt) for fmt in ("png", "svg", "pdf"))
    html, csv = export.to_html(figure()).encode(), export.to_csv(figure()).encode()
    broken = {"png": png[:len(png) // 2], "svg": svg[:-10], "html": html.replace(b'class="plotly-graph-div"', b""),
              "csv": csv.splitlines()[0], "json": b'{"traces": []}'}
    for fmt, data in broken.items():
        with pytest.raises((AssertionError, SyntaxError, OSError, ValueError)):
            check(fmt, data)
    at = pdf.rfind(b"startxref")
    shifted = pdf[:at] + pdf[at:].replace(pdf[at + 10:].split()[0], str(int(pdf[at + 10:].split()[0]) + 7).encode())
    for bad in (pdf[:-len(b"%%EOF\n")], shifted, pdf.replace(b" 0 obj", b" 0 obx", 1)):
        with pytest.raises(AssertionError):
            check_pdf(bad)


def test_unknown_image_format_is_a_value_error():
    with pytest.raises(ValueError, match="png, svg, pdf"):
        export.to_image(figure(), "gif")


def test_missing_browser_gives_a_plain_message(monkeypatch):
    monkeypatch.setenv("BROWSER_PATH", "/nonexistent/chromium")
    export.browser_path.cache_clear()
    try:
        assert export.browser_path() is None
        with pytest.raises(export.ExportError, match="apt-get install chromium"):
            export.to_image(figure(), "png")
    finally:
        export.browser_path.cache_clear()


def test_html_is_standalone_and_carries_the_data():
    html = export.to_html(figure())
    check("html", html.encode())
    assert html.lstrip().lower().startswith("<!doctype html>") and html.rstrip().endswith("</html>")
    assert len(html) > 1_000_000 and "Plotly.newPlot" in html  # plotly.js itself is inside
    assert 'src="https://cdn.plot.ly' not in html  # no script from the network: opens offline
    assert "A test figure" in html


def test_csv_has_every_plotted_value():
    table = check("csv", export.to_csv(figure()).encode())
    curve = table[table.trace == "curve"]
    np.testing.assert_array_equal(curve.x.astype(float), [0, 1, 2])
    np.testing.assert_array_equal(curve.y, [3, 1, 2])
    bars = table[table.trace == "bars"]
    assert list(bars.x) == ["a", "b"] and list(bars.y) == [0.25, 0.75]


def test_a_heatmap_csv_is_its_grid_and_among_other_traces_one_row_per_cell():
    grid = pd.read_csv(io.StringIO(export.to_csv(heatmap())))
    assert list(grid.columns) == ["trace", "y", "k1", "k2"] and list(grid.y) == ["q1", "q2", "q3"]
    np.testing.assert_array_equal(grid[["k1", "k2"]].to_numpy(), Z)
    mixed = heatmap().add_bar(x=["k1", "k2"], y=[0.6, 0.4], name="marginal")
    table = pd.read_csv(io.StringIO(export.to_csv(mixed)))
    cells = table[table.type == "heatmap"]
    assert len(cells) == Z.size
    for _, row in cells.iterrows():
        assert row.z == Z[int(row.y[1]) - 1, int(row.x[1]) - 1]
    assert [float(v) for v in table[table.trace == "marginal"].y] == [0.6, 0.4]  # y also holds labels q1...


def test_csv_of_a_ternary_figure_has_its_points_and_big_grids_stay_compact():
    simplex = go.Figure(go.Scatterternary(a=[0.2, 0.5], b=[0.3, 0.1], c=[0.5, 0.4], mode="markers", name="p*"))
    table = pd.read_csv(io.StringIO(export.to_csv(simplex)))
    assert list(table.a) == [0.2, 0.5] and list(table.c) == [0.5, 0.4]
    big = go.Figure(go.Heatmap(z=np.random.default_rng(0).random((256, 256))))
    assert len(export.to_csv(big)) < 256 * 256 * 10  # at most 6 significant digits a cell, no repeated labels


def test_animation_frames_are_exported():
    fig = go.Figure(data=[go.Scatter(x=[0], y=[0])],
                    frames=[go.Frame(data=[go.Scatter(x=[i], y=[i * i])], name=f"layer {i}") for i in range(3)])
    table = pd.read_csv(io.StringIO(export.to_csv(fig)))
    frames = table[table.frame.notna()]
    assert list(frames.frame) == ["layer 0", "layer 1", "layer 2"] and list(frames.y) == [0, 1, 4]
    data = json.loads(export.to_json(fig))
    assert [f["traces"][0]["y"] for f in data["frames"]] == [[0], [1], [4]]


def test_a_diagram_without_traces_exports_its_annotations_and_an_empty_figure_a_header():
    fig = go.Figure()
    fig.add_annotation(x=0.1, y=0.5, text="X<br>(n x d)", showarrow=False)
    fig.add_annotation(x=0.9, y=0.5, text="Y = A V", showarrow=False)
    table = check("csv", export.to_csv(fig).encode())
    assert list(table.text) == ["X<br>(n x d)", "Y = A V"] and list(table.x) == [0.1, 0.9]
    assert check("json", export.to_json(fig).encode())["annotations"][1] == {"x": 0.9, "y": 0.5, "text": "Y = A V"}
    empty = pd.read_csv(io.StringIO(export.to_csv(go.Figure())))
    assert len(empty) == 0 and list(empty.columns) == ["trace", "type", "x", "y"]
    with_data = json.loads(export.to_json(figure()))
    assert "annotations" not in with_data  # a figure with traces: the traces are its data


def test_json_round_trips_the_arrays():
    data = check("json", export.to_json(heatmap()).encode())
    assert data["title"] == "weights"
    (trace,) = data["traces"]
    np.testing.assert_array_equal(trace["z"], Z)
    assert trace["x"] == ["k1", "k2"] and trace["type"] == "heatmap"


def test_presentation_style_is_larger_and_colour_blind_safe_and_leaves_the_original():
    fig = heatmap().update_xaxes(tickfont_size=9).add_annotation(text="note", font_size=8)
    styled = export.presentation_style(fig)
    assert styled.layout.font.size >= 18 and list(styled.layout.colorway) == export.PALETTE
    assert styled.layout.xaxis.tickfont.size >= 18 and styled.layout.annotations[0].font.size >= 18
    assert styled.data[0].colorbar.tickfont.size >= 18
    assert styled.data[0].colorscale == go.Heatmap(colorscale="Cividis").colorscale
    assert fig.layout.font.size is None and fig.data[0].colorscale is None and fig.layout.xaxis.tickfont.size == 9
    lines = export.presentation_style(figure())
    assert lines.data[0].line.width >= 3 and lines.data[1].type == "bar"
    titled = export.presentation_style(figure().update_layout(title="a title", margin_t=100))
    assert titled.layout.margin.t == 140   # room for the title at 24 px above the subplots' titles


def test_presentation_style_gives_its_larger_text_room_and_keeps_the_plot_height():
    """Margins for 18 px labels, legends and colour bars (1.3 times the figure's own; a side the figure leaves to
    Plotly stays unset), the title's 1.4 times; the figure grows by what its top and bottom grew."""
    fig = figure().update_layout(title="a title", height=500, margin=dict(t=50, b=100, l=60))
    styled = export.presentation_style(fig)
    m = styled.layout.margin
    assert (m.t, m.b, m.l, m.r) == (70, 130, 78, None)

    def plot(f):
        return f.layout.height - f.layout.margin.t - f.layout.margin.b

    assert styled.layout.height == 550 and plot(styled) == plot(fig) == 350
    untitled = export.presentation_style(go.Figure(figure().data).update_layout(height=400, margin=dict(t=40, b=40)))
    assert untitled.layout.margin.t == 40 and untitled.layout.height == 412
    assert export.presentation_style(go.Figure(figure().data)).layout.height is None   # none given, none set


def test_lecture_bundle_contents():
    lecture = export.Lecture("Gaussian W2 attention", "Tokens as Gaussians.", {"plan": figure(), "A": heatmap()},
                             [r"A_{ij} = \operatorname{softmax}_j(-W_2^2/\tau)"], {"tau": 0.5, "cov_kind": "full"})
    zf = zipfile.ZipFile(io.BytesIO(export.lecture_bundle(lecture)))
    names = set(zf.namelist())
    assert names == {"README.md", "params.json", "plan.svg", "plan.png", "plan.csv", "A.svg", "A.png", "A.csv"}
    readme = zf.read("README.md").decode()
    assert "# Gaussian W2 attention" in readme and r"\operatorname{softmax}_j(-W_2^2/\tau)" in readme
    assert "`tau` = 0.5" in readme and "`A`: weights" in readme and "`plan`: A test figure" in readme
    untitled = figure().update_layout(title=None, xaxis_title="key j", yaxis_title="weight p_j")
    readme = zipfile.ZipFile(io.BytesIO(export.lecture_bundle(export.Lecture("T", "", {"bars": untitled})))).read(
        "README.md").decode()
    assert "- `bars`: weight p_j over key j: curve, bars" in readme   # an untitled figure said in its own words
    assert json.loads(zf.read("params.json")) == {"tau": 0.5, "cov_kind": "full"}
    assert Image.open(io.BytesIO(zf.read("A.png"))).format == "PNG"
    ET.fromstring(zf.read("plan.svg"))
    np.testing.assert_array_equal(pd.read_csv(io.BytesIO(zf.read("A.csv")))[["k1", "k2"]].to_numpy(), Z)
    for key in ("plan", "A"):
        for fmt in ("svg", "png", "csv"):
            check(fmt, zf.read(f"{key}.{fmt}"))


def test_the_bundle_readme_cites_in_full_instead_of_linking_to_the_app():
    """Outside the app a link to its References page goes nowhere: the README keeps the link's text and lists the
    full citation of every work the page cited."""
    from wviz.references import REFERENCES, link_text

    intro = f"As in the {link_text('004')} and {link_text('abnar2020', 'rollout')}; again the {link_text('004')}."
    readme = export._readme(export.Lecture("Inspector", intro), {})
    assert "references#" not in readme and "As in the Stochastic" in readme and "and rollout;" in readme
    cited = readme.split("## References")[1]
    assert cited.count(REFERENCES["004"].citation) == 1 and REFERENCES["abnar2020"].citation in cited
    assert "## References" not in export._readme(export.Lecture("Plain", "No citation."), {})


def test_an_image_past_its_timeout_is_stopped_and_the_browser_restarted():
    export.to_image(figure(), "svg")  # the browser is open
    first = export._browser
    with pytest.raises(export.ExportError, match="took over 0 s twice"):
        export.to_image(figure(), "png", timeout=1e-4)
    img = check("png", export.to_image(figure(), "png", scale=1))  # drawn by a new browser
    assert export._browser is not first and img.size == (400, 300)


def test_a_browser_that_stops_answering_once_costs_the_image_nothing():
    """The image is drawn again in a new browser (the lecture bundle's figures after it too)."""
    class Hung:
        closed = False

        async def calc_fig(self, fig, opts):
            await asyncio.sleep(3600)

        async def close(self):
            Hung.closed = True

    export._close()
    export._browser = Hung()
    img = check("png", export.to_image(figure(), "png", scale=1, timeout=6))
    assert Hung.closed and not isinstance(export._browser, Hung) and img.size == (400, 300)


def test_a_bundle_past_its_budget_keeps_every_figure_as_csv_and_says_why():
    zf = zipfile.ZipFile(io.BytesIO(export.lecture_bundle(export.Lecture("T", "", {"plan": figure()}), budget_s=0)))
    assert set(zf.namelist()) == {"README.md", "params.json", "plan.csv"}
    assert "- `plan`: the bundle's 0 s for images ran out" in zf.read("README.md").decode()


def test_a_bundle_keeps_the_csv_of_a_figure_it_cannot_draw_and_says_why(monkeypatch):
    draw = export.to_image

    def to_image(fig, fmt, **kwargs):
        if fig.layout.title.text == "weights":
            raise export.ExportError("Drawing the figure as SVG took over 60 s and was stopped")
        return draw(fig, fmt, **kwargs)

    monkeypatch.setattr(export, "to_image", to_image)
    zf = zipfile.ZipFile(io.BytesIO(export.lecture_bundle(export.Lecture("T", "", {"plan": figure(), "A": heatmap()}))))
    assert set(zf.namelist()) == {"README.md", "params.json", "plan.svg", "plan.png", "plan.csv", "A.csv"}
    assert "- `A`: Drawing the figure as SVG took over 60 s and was stopped" in zf.read("README.md").decode()
    np.testing.assert_array_equal(pd.read_csv(io.BytesIO(zf.read("A.csv")))[["k1", "k2"]].to_numpy(), Z)
