"""Inference benchmark of exported graphs (torch-free): size, analytic compute, real-time factor,
per-chunk latency and peak memory, fp32 and int8 side by side, measured in one run.

    python -m edgessm.bench models models/kws35/kws35.onnx models/kws35/kws35.int8.onnx
    edgessm bench models kws35            # every graph of a shipped model
    edgessm bench kws35-es --budget 4     # an elastic (ES-SSM) model's graphs at budget 4 (or 2,4,8 or all)

Each graph runs in its own child process (so peak memory is its own), single-threaded, on
``--seconds`` of audio streamed chunk by chunk after a short warm-up.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

from edgessm.runtime.registry import (
    MODELS_DIR,
    budget_graphs,
    check_budget,
    parse_budget,
    parse_budgets,
    resolve_graph,
    shipped_models,
)


def _measure(path: str, seconds: float, threads: int, queue) -> None:
    import resource

    import numpy as np
    import onnxruntime as ort

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL  # as the runtime's StepModel
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    meta = sess.get_modelmeta().custom_metadata_map
    inputs = sess.get_inputs()
    chunk, rate = int(meta["chunk"]), int(meta.get("sample_rate", 16000))
    rng = np.random.default_rng(0)
    x = (0.1 * rng.normal(size=int(seconds * rate) // chunk * chunk)).astype(np.float32)
    state = [np.zeros(i.shape, np.float32) for i in inputs[1:]]
    names = [i.name for i in inputs]
    lat = []
    for k, pos in enumerate(range(0, len(x), chunk)):
        feed = dict(zip(names, [x[pos : pos + chunk].reshape(1, 1, chunk), *state], strict=True))
        t0 = time.perf_counter()
        out = sess.run(None, feed)
        dt = time.perf_counter() - t0
        state = out[1:]
        if k >= 10:  # warm-up
            lat.append(dt)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    audio_s = len(lat) * chunk / rate
    queue.put({
        "graph": path,
        "task": meta.get("task", ""),
        "chunk": chunk,
        "params": int(meta["params"]) if "params" in meta else None,
        "mflops_per_s": int(meta["flops_per_second"]) / 1e6 if "flops_per_second" in meta else None,
        "rtf": sum(lat) / audio_s,
        "latency_ms_median": 1e3 * statistics.median(lat),
        "latency_ms_p99": 1e3 * sorted(lat)[int(0.99 * (len(lat) - 1))],
        "peak_mb": peak / 1024,
        "session_mb": (peak - base) / 1024,
        "int8": "quantization" in meta,
        "budget": int(meta["budget"]) if "budget" in meta else None,
        "states": sum(int(np.prod(i.shape)) for i in inputs[1:]),
    })  # fmt: skip


def measure(path: str | Path, seconds: float = 30.0, threads: int = 1) -> dict:
    """Benchmark one graph in a fresh process; returns its numbers."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_measure, args=(str(path), seconds, threads, queue))
    proc.start()
    result = queue.get(timeout=600)
    proc.join()
    return result


def resolve(items: list[str], budget: str | None = None) -> list[Path]:
    """Graph paths from paths, model folders or shipped model names (all ``*.onnx`` of a folder).

    ``budget`` (``K``, ``K1,K2,...`` or ``all``): an elastic model's graphs at those budgets (fp32 and,
    when exported, int8); a graph path must be at one of them."""
    out: list[Path] = []
    for item in items:
        p = Path(item)
        folder = p if p.is_dir() else MODELS_DIR / item
        if budget is not None:
            try:
                out += _budget_items(item, p, budget)
            except (FileNotFoundError, ValueError) as e:
                raise SystemExit(f"edgessm bench: {e}") from None
        elif p.is_file():
            out.append(p)
        elif folder.is_dir():
            out += sorted(folder.glob("*.onnx"))
        else:
            raise SystemExit(f"{item!r} is neither an .onnx file nor a shipped model in {MODELS_DIR}")
    return out


def _single(budget: str) -> bool:
    return budget.strip() != "all" and "," not in budget


def _budget_items(item: str, p: Path, budget: str) -> list[Path]:
    if p.is_file():
        if not _single(budget):
            raise ValueError(f"{item} is one graph at one budget; give its model folder or name for budgets {budget}")
        return [resolve_graph(p, budget=parse_budget(budget))]
    fp32 = budget_graphs(item)
    int8 = {}
    folder = next(iter(fp32.values())).parent
    if any(folder.glob("*.int8.onnx")):
        int8 = budget_graphs(item, int8=True)
    wanted = parse_budgets(budget, max(fp32))
    missing = [k for k in wanted if k not in fp32]
    if missing:
        raise ValueError(f"{item} has no graph at budget {missing[0]} (exported: {', '.join(map(str, fp32))})")
    return [g for k in wanted for g in ([fp32[k], int8[k]] if k in int8 else [fp32[k]])]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m edgessm.bench models", description=__doc__.split("\n\n")[0])
    ap.add_argument("graphs", nargs="*", help=".onnx files or shipped model names (default: every shipped model)")
    ap.add_argument("--seconds", type=float, default=30.0, help="audio streamed per graph")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--budget", metavar="K", help="elastic (ES-SSM) models: their graphs at budget K (K1,K2,... or all)"
    )
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = ap.parse_args(argv)
    items = args.graphs or shipped_models()
    graphs = resolve(items, args.budget)
    if not graphs:
        raise SystemExit("no graphs to benchmark: name .onnx files or shipped models")
    if args.budget is not None and _single(args.budget):
        from edgessm.runtime.session import StepModel

        for g in graphs:  # a graph path must be at the budget asked for
            try:
                check_budget(StepModel(g).info.extra, args.budget, g.name)
            except ValueError as e:
                raise SystemExit(f"edgessm bench: {e}") from None
    results = []
    for g in graphs:
        print(f"  measuring {g}", file=sys.stderr, flush=True)
        results.append(measure(g, args.seconds, args.threads))
    elastic = any(r["budget"] is not None for r in results)
    head = (
        f"{'graph':<34}{' K' if elastic else ''} {'params':>8} {'MFLOP/s':>8} {'chunk':>6} {'RTF':>8}"
        f" {'lat med ms':>10} {'lat p99 ms':>10} {'peak MB':>8}"
    )
    print(f"# {args.threads} thread(s), {args.seconds:.0f} s of audio per graph")
    print(head)
    print("-" * len(head))
    for r in results:
        params = "-" if r["params"] is None else f"{r['params']:,}"
        mflops = "-" if r["mflops_per_s"] is None else f"{r['mflops_per_s']:.1f}"
        k = (f"{r['budget']:>2}" if r["budget"] is not None else " -") if elastic else ""
        print(f"{Path(r['graph']).name:<34}{k} {params:>8} {mflops:>8} {r['chunk']:>6} {r['rtf']:>8.4f} "
              f"{r['latency_ms_median']:>10.3f} {r['latency_ms_p99']:>10.3f} {r['peak_mb']:>8.0f}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0
