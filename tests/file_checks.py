"""Is an exported file what its name says? Magic bytes, and it parses all the way through (not just its first
bytes): shared by tests/test_export.py and the browser tests."""
import io
import json
import re
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pandas as pd
from PIL import Image


def check_png(data: bytes) -> Image.Image:
    assert data.startswith(b"\x89PNG\r\n\x1a\n"), data[:8]
    Image.open(io.BytesIO(data)).verify()  # every chunk's CRC
    img = Image.open(io.BytesIO(data))
    img.load()  # decompress every pixel: a truncated file fails here
    assert img.format == "PNG" and min(img.size) > 1, (img.format, img.size)
    return img


def check_svg(data: bytes) -> ET.Element:
    root = ET.fromstring(data)
    assert root.tag == "{http://www.w3.org/2000/svg}svg", root.tag
    assert float(root.get("width")) > 0 and float(root.get("height")) > 0, root.attrib
    assert len(root.findall(".//{http://www.w3.org/2000/svg}path")) > 0  # something is drawn
    return root


def check_pdf(data: bytes) -> None:
    """Header, trailer, and a cross-reference table that points at real objects: startxref gives the offset of
    the last 'xref' section, and every object it lists as in use starts with 'N G obj' at its offset."""
    assert data.startswith(b"%PDF-1.") and data.rstrip().endswith(b"%%EOF"), (data[:8], data[-8:])
    at = data.rfind(b"startxref")
    xref = int(data[at + len(b"startxref"):].split()[0])
    section = data[xref:at]
    if not section.startswith(b"xref"):  # a cross-reference stream (PDF 1.5+) instead of a table
        assert re.match(rb"\d+ \d+ obj\s*<<.*?/Type\s*/XRef", section, re.S), section[:80]
        return
    lines = section[len(b"xref"):section.index(b"trailer")].split(b"\n")
    rows = [ln.split() for ln in lines if ln.strip()]
    checked, i = 0, 0
    while i < len(rows):
        start, count = map(int, rows[i])
        for n, (offset, gen, kind) in enumerate(rows[i + 1:i + 1 + count], start):
            if kind == b"n":
                assert data[int(offset):].startswith(b"%d %d obj" % (n, int(gen))), (n, offset)
                checked += 1
        i += 1 + count
    assert checked > 0 and b"/Root" in section and b"/Type /Page" in data


class _PlotlyPage(HTMLParser):
    def __init__(self):
        super().__init__()
        self.doctype, self.closed, self.divs, self.scripts, self._in_script = None, [], [], [], False

    def handle_decl(self, decl):
        self.doctype = decl

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "div" and "plotly-graph-div" in (attrs.get("class") or ""):
            self.divs.append(attrs.get("id"))
        if tag == "script":
            assert "src" not in attrs, attrs  # everything inline: the page opens offline
            self._in_script = True
            self.scripts.append("")

    def handle_endtag(self, tag):
        self.closed.append(tag)
        self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data


def check_html(data: bytes) -> None:
    """A whole page: doctype, closed <html>, plotly.js inline, one graph div and the script that draws into it."""
    page = _PlotlyPage()
    page.feed(data.decode())
    page.close()
    assert page.doctype and page.doctype.lower() == "doctype html", page.doctype
    assert page.closed[-2:] == ["body", "html"], page.closed[-2:]
    assert any("Plotly" in s and len(s) > 1_000_000 for s in page.scripts)  # plotly.js itself
    (div,) = page.divs
    assert any(re.search(r'Plotly\.newPlot\(\s*"' + re.escape(div) + '"', s) for s in page.scripts), div


def check_csv(data: bytes) -> pd.DataFrame:
    """A figure's data: rows of plotted values (trace, type, coordinates) or a heatmap's grid (trace, y, one column
    per x), never the header alone."""
    table = pd.read_csv(io.BytesIO(data))
    assert len(table) > 0 and "trace" in table.columns, table.columns
    grid = "type" not in table.columns
    assert {"y"} <= set(table.columns) if grid else {"x", "y", "z", "a", "text"} & set(table.columns), table.columns
    return table


def check_json(data: bytes) -> dict:
    out = json.loads(data)
    assert all(isinstance(t, dict) and t["type"] for t in out["traces"]), out
    assert out["traces"] or out.get("annotations"), out  # a diagram without traces carries its annotations
    return out


def mp4_frames(data: bytes) -> tuple[int, tuple[int, int]]:
    """The number of frames of an MP4 and their (width, height), every frame decoded by ffmpeg (imageio-ffmpeg's
    binary). By subprocess.run rather than imageio_ffmpeg.read_frames, whose ffmpeg pipes stay open until the
    garbage collector finds them (a ResourceWarning)."""
    import imageio_ffmpeg
    from imageio_ffmpeg._parsing import parse_ffmpeg_header

    with tempfile.NamedTemporaryFile(suffix=".mp4") as f:
        f.write(data)
        f.flush()
        out = subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-i", f.name, "-f", "rawvideo", "-pix_fmt", "rgb24",
                              "-"], capture_output=True, check=True)
    width, height = parse_ffmpeg_header(out.stderr.decode(errors="replace"))["size"]
    frames, rest = divmod(len(out.stdout), width * height * 3)
    assert rest == 0, (len(out.stdout), width, height)
    return frames, (width, height)


CHECKS = {"png": check_png, "svg": check_svg, "pdf": check_pdf, "html": check_html, "csv": check_csv,
          "json": check_json}


def check(fmt: str, data: bytes):
    """The file is a valid ``fmt`` file (raises AssertionError saying what is wrong); returns what it parsed to."""
    return CHECKS[fmt](data)
