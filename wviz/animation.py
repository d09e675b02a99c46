"""Animations for slides: a sequence of figures (the page's own figures at successive values of a parameter)
rendered to PNG frames by kaleido and assembled as a GIF (Pillow, through imageio) or an MP4 (H.264, through the
ffmpeg binary that imageio-ffmpeg ships)."""
from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Callable, Sequence

import imageio.v3 as iio
import numpy as np
import plotly.graph_objects as go

from wviz import export

# Every frame is drawn at one size (an animation needs equal frames); both sides are multiples of 16, the block
# size of H.264, so ffmpeg takes the frames as they are.
SIZE = (960, 640)
FORMATS = ("gif", "mp4")


def render(figures: Sequence[go.Figure], progress: Callable[[float], object] | None = None) -> list[np.ndarray]:
    """Each figure as an RGB frame (SIZE); ``progress(fraction)`` after each one. Needs a browser (kaleido)."""
    if len(figures) < 2:
        raise ValueError(f"an animation needs at least 2 frames, got {len(figures)}")
    frames = []
    for i, fig in enumerate(figures):
        fig = go.Figure(fig).update_layout(width=SIZE[0], height=SIZE[1])
        frames.append(iio.imread(export.to_image(fig, "png", scale=1.0), extension=".png")[..., :3])
        if progress is not None:
            progress((i + 1) / len(figures))
    return frames


def gif(frames: Sequence[np.ndarray], fps: float) -> bytes:
    """A looping GIF, ``fps`` frames per second."""
    buf = io.BytesIO()
    iio.imwrite(buf, np.stack(frames), extension=".gif", duration=1000.0 / fps, loop=0)
    return buf.getvalue()


def mp4(frames: Sequence[np.ndarray], fps: float) -> bytes:
    """An H.264 MP4 (yuv420p, which every slide program and browser plays), ``fps`` frames per second."""
    import imageio_ffmpeg

    height, width = frames[0].shape[:2]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "animation.mp4")
        writer = imageio_ffmpeg.write_frames(path, (width, height), fps=fps, codec="libx264", pix_fmt_in="rgb24",
                                             pix_fmt_out="yuv420p", macro_block_size=16, ffmpeg_log_level="error")
        writer.send(None)  # start ffmpeg
        for frame in frames:
            writer.send(np.ascontiguousarray(frame, dtype=np.uint8))
        writer.close()
        with open(path, "rb") as f:
            return f.read()


def encode(frames: Sequence[np.ndarray], fmt: str, fps: float) -> bytes:
    if fmt not in FORMATS:
        raise ValueError(f"animation format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    return gif(frames, fps) if fmt == "gif" else mp4(frames, fps)
