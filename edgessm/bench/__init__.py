"""Benchmarks: speed and memory goals are measured here (ratios within one run), never in unit tests.

``python -m edgessm.bench NAME [options]`` or ``edgessm bench NAME [options]``:

    fftconv   forward+backward of a bottleneck SSM block: chosen contraction order vs naive vs scan
    rtf       forward+backward of an RTF layer vs a Centaurus depthwise layer of equal size, by length and order
    models    exported graphs: params, FLOPs/s, real-time factor, chunk latency, peak memory (no torch)
    distill   SpectraLDS distillation of the ES-SSM Hankel filters: states per budget, coefficient sizes, errors
    trainstep training-step time of a recipe and its variants (params, MFLOP/s, seconds per step, ratios)
    roofline  a recipe's training step by block: operations, FLOPs, bytes; eager and fused time on a target GPU
    loader    data-loader throughput of a recipe: one core's examples/s and the trainer's loader by worker count
    train     end-to-end training speed of a recipe as `edgessm train` runs it: examples/s, time to first step,
              data wait, one row per variant (processes, threads, workers, batch, front)
    soak      an hour of speech + noise piped through listen, denoise and transcribe: real-time factor,
              memory over time, samples in = out, the same output for a repeated segment, state drift
"""

from __future__ import annotations

import importlib

BENCHMARKS = {
    "fftconv": "edgessm.bench.fftconv",
    "rtf": "edgessm.bench.rtf",
    "models": "edgessm.bench.models",
    "distill": "edgessm.bench.distill",
    "trainstep": "edgessm.bench.trainstep",
    "roofline": "edgessm.bench.roofline",
    "loader": "edgessm.bench.loader",
    "train": "edgessm.bench.train",
    "soak": "edgessm.bench.soak",
}


def run(name: str, argv: list[str]) -> int:
    """Run benchmark ``name`` with its own command-line arguments."""
    if name not in BENCHMARKS:
        raise SystemExit(f"unknown benchmark {name!r}; available: {', '.join(BENCHMARKS)}")
    try:
        module = importlib.import_module(BENCHMARKS[name])
    except ModuleNotFoundError as e:
        if e.name == "torch":
            raise SystemExit(
                f"the {name} benchmark needs PyTorch: install the training extra (pip install 'edgessm[train]')"
            ) from e
        raise
    return module.main(argv)
