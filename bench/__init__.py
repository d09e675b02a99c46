"""Benchmarks against peer libraries; ``python -m bench`` (``make bench``) runs every ``bench_*.py`` module."""
