"""Inference benchmark of exported graphs (torch-free): size, analytic compute, real-time factor,
per-chunk latency and peak memory, fp32 and int8 side by side, measured in one run.

    python -m edgessm.bench models models/kws35/kws35.onnx models/kws35/kws35.int8.onnx
    edgessm bench models kws35            # every graph of a shipped model
    edgessm bench kws35-es --budget 4     # an elastic (ES-SSM) model's graphs at budget 4 (or 2,4,8 or all)

Each graph runs in its own child process (so peak memory is its own), single-threaded, on
``--seconds`` of audio streamed chunk by chunk after a short warm-up; the graphs take turns over
``--rounds`` rounds, so that a machine whose speed drifts during the run slows them all alike.
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


def _worker(path: str, seconds: float, threads: int, conn) -> None:
    """One graph's process: open the session, then stream the next ``n`` chunks of the audio each time the
    parent sends ``n`` (state carried over) and send back their latencies; ``None`` ends it with the numbers."""
    import resource

    import numpy as np

    from edgessm.runtime.session import StepModel

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    model = StepModel(path, threads=threads)  # the runtime's session options and its way of calling the graph
    sess = model.session
    meta = sess.get_modelmeta().custom_metadata_map
    inputs = sess.get_inputs()
    chunk, rate = int(meta["chunk"]), int(meta.get("sample_rate", 16000))
    rng = np.random.default_rng(0)
    x = (0.1 * rng.normal(size=int(seconds * rate) // chunk * chunk)).astype(np.float32)
    step = model.stepper([np.zeros(i.shape, np.float32) for i in inputs[1:]])
    conn.send(len(x) // chunk)
    pos = 0
    while (n := conn.recv()) is not None:
        lat = []
        for k in range(ROUND_WARMUP + n):  # each turn re-warms the caches the other graphs' turns took over
            if pos + chunk > len(x):
                pos = 0  # warm-up chunks come on top of the audio: wrap around
            t0 = time.perf_counter()
            step(x[pos : pos + chunk])
            if k >= ROUND_WARMUP:
                lat.append(time.perf_counter() - t0)
            pos += chunk
        conn.send(lat)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    conn.send({
        "graph": path,
        "task": meta.get("task", ""),
        "chunk": chunk,
        "rate": rate,
        "params": int(meta["params"]) if "params" in meta else None,
        "mflops_per_s": int(meta["flops_per_second"]) / 1e6 if "flops_per_second" in meta else None,
        "peak_mb": peak / 1024,
        "session_mb": (peak - base) / 1024,
        "int8": "quantization" in meta,
        "budget": int(meta["budget"]) if "budget" in meta else None,
        "states": sum(int(np.prod(i.shape)) for i in inputs[1:]),
    })  # fmt: skip


WARMUP_CHUNKS = 10
# untimed calls at the start of every turn: right after another graph's turn a graph's first calls run from cold
# caches (measured on the recognizer's 20 ms graph: ~0.47 ms per call taking turns every 100 calls against
# ~0.35 ms in one run), which hides differences between graphs
ROUND_WARMUP = 5


def measure_all(paths: list[str | Path], seconds: float = 30.0, threads: int = 1, rounds: int = 10) -> list[dict]:
    """Benchmark graphs side by side: each in its own process (its own peak memory), all of them taking
    turns over ``rounds`` rounds of ``seconds / rounds`` of audio each, so that a machine that speeds up or
    slows down during the run affects every graph alike (their ratios are what a run can tell). Each result
    has the graph's RTF over the whole run (``rtf``) and per round (``rtf_rounds``)."""
    ctx = mp.get_context("spawn")
    procs, conns = [], []
    for path in paths:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(str(path), seconds, threads, child))
        proc.start()
        procs.append(proc)
        conns.append(parent)
    try:
        totals = [c.recv() for c in conns]  # every session is open
        for c in conns:
            c.send(WARMUP_CHUNKS)
            c.recv()
        turns: list[list[list[float]]] = [[] for _ in paths]  # per graph, per round: call latencies
        rounds = max(1, min(rounds, min(totals)))
        for r in range(rounds):
            for i, c in enumerate(conns):
                c.send(totals[i] * (r + 1) // rounds - totals[i] * r // rounds)
                turns[i].append(c.recv())
        results = []
        for c, graph_turns in zip(conns, turns, strict=True):
            c.send(None)
            info = c.recv()
            per_s = info["chunk"] / info.pop("rate")  # audio seconds per call
            lat = [x for turn in graph_turns for x in turn]
            p99 = sorted(lat)[int(0.99 * (len(lat) - 1))]
            results.append({**info, "rtf": sum(lat) / (len(lat) * per_s), "rounds": rounds,
                            "rtf_rounds": [sum(t) / (len(t) * per_s) for t in graph_turns],
                            "latency_ms_median": 1e3 * statistics.median(lat),
                            "latency_ms_p99": 1e3 * p99})  # fmt: skip
        return results
    finally:
        for proc in procs:
            proc.join(timeout=60)
            if proc.is_alive():
                proc.kill()


def measure(path: str | Path, seconds: float = 30.0, threads: int = 1) -> dict:
    """Benchmark one graph in a fresh process; returns its numbers."""
    return measure_all([path], seconds, threads, rounds=1)[0]


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


def _labels(paths: list[str]) -> dict[str, str]:
    """Each graph's shortest name among its path's last parts that no other graph of the run shares."""
    out = {}
    for p in paths:
        parts = Path(p).parts
        for n in range(1, len(parts) + 1):
            label = "/".join(parts[-n:])
            if all(q == p or not ("/" + q).endswith("/" + label) for q in paths):
                break
        out[p] = label
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m edgessm.bench models", description=__doc__.split("\n\n")[0])
    ap.add_argument("graphs", nargs="*", help=".onnx files or shipped model names (default: every shipped model)")
    ap.add_argument("--seconds", type=float, default=30.0, help="audio streamed per graph")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--budget", metavar="K", help="elastic (ES-SSM) models: their graphs at budget K (K1,K2,... or all)"
    )
    ap.add_argument("--rounds", type=int, default=10,
                    help="the graphs take turns over this many rounds (1: one after the other)")  # fmt: skip
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
    print(f"  measuring {len(graphs)} graph(s) in {args.rounds} interleaved round(s)", file=sys.stderr, flush=True)
    results = measure_all(graphs, args.seconds, args.threads, args.rounds)
    elastic = any(r["budget"] is not None for r in results)
    labels = _labels([r["graph"] for r in results])
    w = max(34, 1 + max(len(v) for v in labels.values()))
    head = (
        f"{'graph':<{w}}{' K' if elastic else ''} {'params':>8} {'MFLOP/s':>8} {'chunk':>6} {'RTF':>8}"
        f" {'lat med ms':>10} {'lat p99 ms':>10} {'peak MB':>8}"
    )
    rounds = results[0]["rounds"]
    print(f"# {args.threads} thread(s), {args.seconds:.0f} s of audio per graph, in {rounds} interleaved rounds")
    print(head)
    print("-" * len(head))
    for r in results:
        params = "-" if r["params"] is None else f"{r['params']:,}"
        mflops = "-" if r["mflops_per_s"] is None else f"{r['mflops_per_s']:.1f}"
        k = (f"{r['budget']:>2}" if r["budget"] is not None else " -") if elastic else ""
        print(f"{labels[r['graph']]:<{w}}{k} {params:>8} {mflops:>8} {r['chunk']:>6} {r['rtf']:>8.4f} "
              f"{r['latency_ms_median']:>10.3f} {r['latency_ms_p99']:>10.3f} {r['peak_mb']:>8.0f}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0
