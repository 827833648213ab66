"""Benchmarks: speed and memory goals are measured here (ratios within one run), never in unit tests.

``python -m edgessm.bench NAME [options]`` or ``edgessm bench NAME [options]``:

    fftconv   forward+backward of a bottleneck SSM block: chosen contraction order vs naive vs scan
"""

from __future__ import annotations

import importlib

BENCHMARKS = {"fftconv": "edgessm.bench.fftconv"}


def run(name: str, argv: list[str]) -> int:
    """Run benchmark ``name`` with its own command-line arguments."""
    if name not in BENCHMARKS:
        raise SystemExit(f"unknown benchmark {name!r}; available: {', '.join(BENCHMARKS)}")
    return importlib.import_module(BENCHMARKS[name]).main(argv)
