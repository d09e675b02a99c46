"""What a lecture uses besides the figures: guided links, references, animations, and every page offering them."""
import importlib
import re
import tempfile
from pathlib import Path
from urllib.parse import parse_qsl

import imageio.v3 as iio
import imageio_ffmpeg
import plotly.graph_objects as go
import pytest

from wviz import animation
from wviz.guide import Try
from wviz.references import REFERENCES

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(p.stem for p in (ROOT / "pages").glob("*.py"))


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
    with tempfile.NamedTemporaryFile(suffix=".mp4") as f:
        f.write(animation.encode(frames, "mp4", fps=4))
        f.flush()
        reader = imageio_ffmpeg.read_frames(f.name)
        meta = next(reader)
        assert tuple(meta["size"]) == animation.SIZE and sum(1 for _ in reader) == 3
    with pytest.raises(ValueError, match="at least 2 frames"):
        animation.render(figures[:1])
    with pytest.raises(ValueError, match="gif, mp4"):
        animation.encode(frames, "avi", fps=4)
