"""What every benchmark shares: the CPU's name for the tables, and writing one's own section of BENCHMARKS.md."""
from __future__ import annotations

import platform
import re
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "BENCHMARKS.md"


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (platform.processor() is often empty on Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def write_section(section: str, body: str, path: Path = BENCHMARKS) -> None:
    """Add or replace the section headed ``section`` ('## ...') of BENCHMARKS.md, leaving the others alone."""
    text = path.read_text() if path.exists() else "# wviz benchmarks\n"
    block = f"{section}\n\n{body.strip()}\n"
    pattern = re.compile(rf"^{re.escape(section)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: block + "\n", text).rstrip() + "\n"
    else:
        text = text.rstrip() + "\n\n" + block
    path.write_text(text)
