"""``python -m bench`` (``make bench``): run the ``main()`` of every ``bench/bench_*.py`` module, which prints its
tables (and records them in BENCHMARKS.md). ``python -m bench attention`` runs only the modules whose name
contains one of the given words."""
import importlib
import pkgutil
import sys
from pathlib import Path


def main(words=None) -> None:
    words = sys.argv[1:] if words is None else words
    names = sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if m.name.startswith("bench_"))
    for name in names:
        if words and not any(w in name for w in words):
            continue
        print(f"\n=== bench.{name} ===", flush=True)
        importlib.import_module(f"bench.{name}").main()


if __name__ == "__main__":
    main()
