"""Budget sweep of an elastic (ES-SSM) keyword spotter: accuracy and speed of one trained model at
every compute budget ``K`` it was exported at (torch-free).

Each budget graph (``NAME.kK.onnx``, ``NAME.onnx`` at ``K̄``) is evaluated with the clip protocol of
:mod:`.kws` (Speech Commands test: exact class and the 12-class protocol) and benchmarked on one
thread (:func:`edgessm.bench.models.measure_all`: real-time factor, chunk latency). Other models (the
ablations: no gate, no budget dropout) can be swept alongside on the same clips.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from edgessm.plotting import pyplot
from edgessm.runtime.session import StepModel

from . import kws
from .report import SET_NAMES

SHORT_SETS = {"sc-test": "SC test", "synth-test": "synth test", "fsdd": "FSDD"}


def sweep(models: list[tuple[str, dict[int, Path]]], sets: list[str], rtf_seconds: float = 20.0, threads: int = 1,
          progress: kws.Progress = kws._no_progress, log=None, rtf_rounds: int = 3) -> dict:  # fmt: skip
    """``models``: ``(label, {K: graph})`` each. Returns ``{"sets", "rtf_seconds", "rows"}``, one row per
    model and budget (``accuracy``/``sc12`` per set, ``rtf`` and latencies from a single-thread benchmark).

    The speed of the graphs is measured after all accuracies by :func:`edgessm.bench.models.measure_all`:
    every graph in turn over ``rtf_rounds`` rounds of ``rtf_seconds / rtf_rounds`` of audio; a row's ``rtf``
    is the median of its rounds (``rtf_rounds`` keeps them all), so a busy spell of the machine slows one
    round of every graph alike instead of one graph."""
    from edgessm.bench.models import measure_all

    rows = []
    skipped: dict[str, str] = {}
    for label, graphs in models:
        for k, path in sorted(graphs.items()):
            model = StepModel(path, threads=threads)
            meta = model.info.extra
            row = {"model": label, "budget": k, "k_max": int(meta.get("k_max", k)), "graph": str(path),
                   "params": int(meta["params"]) if "params" in meta else None,
                   "mflops_per_s": int(meta["flops_per_second"]) / 1e6 if "flops_per_second" in meta else None,
                   "state_floats": sum(int(_prod(s)) for _, s in model.info.states), "clips": {}}  # fmt: skip
            for name in sets:
                if name in skipped:
                    continue
                try:
                    res = kws.evaluate_clips(model, name, progress)
                except (FileNotFoundError, ValueError) as e:
                    skipped[name] = str(e)
                    if log:
                        log(f"skipping {name}: {e}")
                    continue
                row["clips"][name] = {
                    "accuracy": res.accuracy(),
                    "sc12": res.sc12()["accuracy"],
                    "clips": len(res.refs),
                }
            if log:
                acc = ", ".join(f"{n} {100 * c['sc12']:.1f}% (12-class)" for n, c in row["clips"].items())
                log(f"{label} K={k}: {acc or 'no clips'}")
            rows.append(row)
    if rtf_seconds > 0 and rows:
        speeds = measure_all([row["graph"] for row in rows], rtf_seconds, threads=1, rounds=max(1, rtf_rounds))
        for row, bench in zip(rows, speeds, strict=True):
            row["rtf_rounds"] = bench["rtf_rounds"]
            row["rtf"] = statistics.median(bench["rtf_rounds"])
            row["latency_ms_median"] = bench["latency_ms_median"]
            row["chunk"] = bench["chunk"]
        if log:
            log("speed: " + ", ".join(f"{row['model']} K={row['budget']} {row['rtf']:.4f}" for row in rows))
    return {"sets": [s for s in sets if s not in skipped], "rtf_seconds": rtf_seconds, "rows": rows}


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def sweep_markdown(report: dict) -> str:
    """The sweep as a Markdown table: one row per model and budget."""
    sets = report["sets"]
    several = len({r["model"] for r in report["rows"]}) > 1
    timed = any("rtf" in r for r in report["rows"])  # no speed column when the sweep did not measure it
    head = (["model"] if several else []) + ["K", "params", "MFLOP/s", "state (floats)"]
    head += ["RTF (1 thread)"] if timed else []
    for name in sets:
        head += [f"{SHORT_SETS.get(name, name)} 12-class", f"{SHORT_SETS.get(name, name)} exact"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * several + ["---:"] * (len(head) - several)) + "|"]
    for r in report["rows"]:
        cells = [r["model"]] if several else []
        params = "-" if r["params"] is None else f"{r['params']:,}"
        mflops = "-" if r["mflops_per_s"] is None else f"{r['mflops_per_s']:.1f}"
        cells += [str(r["budget"]), params, mflops, f"{r['state_floats']:,}"]
        cells += [f"{r['rtf']:.4f}" if "rtf" in r else "-"] if timed else []
        for name in sets:
            c = r["clips"].get(name)
            cells += [_pct(c and c["sc12"]), _pct(c and c["accuracy"])]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"{SHORT_SETS.get(n, n)}: {SET_NAMES.get(n, n)}" for n in sets]
    chunks = sorted({r["chunk"] for r in report["rows"] if "chunk" in r})
    if chunks:
        rounds = max((len(r.get("rtf_rounds", [])) for r in report["rows"]), default=1)
        notes.append(f"RTF: processing time / audio time, onnxruntime on one thread, {report['rtf_seconds']:g} s "
                     f"of audio in {'/'.join(map(str, chunks))}-sample chunks per graph, in {rounds} rounds "
                     "that visit every graph in turn (the median round)")  # fmt: skip
    return "\n".join(lines + [""] + [f"- {n}" for n in notes] + [""])


def sweep_plot(report: dict, out: Path) -> Path | None:
    """``out/budget_sweep.png``: accuracy (12-class and exact, per set) and RTF against the budget ``K``."""
    plt = pyplot()
    if plt is None:
        return None
    rows = report["rows"]
    models = list(dict.fromkeys(r["model"] for r in rows))
    budgets = sorted({r["budget"] for r in rows})
    timed = any("rtf" in r for r in rows)  # the speed panel only when the sweep measured speed
    if timed:
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4))
    else:
        fig, ax = plt.subplots(figsize=(6, 4))
        bx = None
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    several = len(models) > 1
    markers = "osD^v"
    for i, m in enumerate(models):
        mine = sorted((r for r in rows if r["model"] == m), key=lambda r: r["budget"])
        ks = [r["budget"] for r in mine]
        for j, name in enumerate(report["sets"]):
            # one model: a colour per set; several: a colour per model and a marker per set
            c = colors[(i if several else j) % len(colors)]
            mk = markers[j % len(markers)] if several else "o"
            short = SHORT_SETS.get(name, name)
            prefix = f"{m}: " if several else ""
            sc12 = [100 * r["clips"][name]["sc12"] if name in r["clips"] else float("nan") for r in mine]
            exact = [100 * r["clips"][name]["accuracy"] if name in r["clips"] else float("nan") for r in mine]
            ax.plot(ks, sc12, mk + "-", color=c, label=f"{prefix}{short} 12-class")
            ax.plot(ks, exact, mk + "--", color=c, alpha=0.5, mfc="none", label=f"{prefix}{short} exact")
        if bx is not None and all("rtf" in r for r in mine):
            c = colors[i % len(colors)]
            bx.plot(ks, [r["rtf"] for r in mine], "o-", color=c, label=m)
            if any(len(r.get("rtf_rounds", [])) > 1 for r in mine):  # every round, faint: the spread
                for rk, r in zip(ks, mine, strict=True):
                    bx.plot([rk] * len(r["rtf_rounds"]), r["rtf_rounds"], ".", color=c, alpha=0.35)
    for a in (ax, bx) if bx is not None else (ax,):
        a.set_xscale("log", base=2)
        a.set_xticks(budgets, [str(k) for k in budgets])
        a.minorticks_off()
        a.set_xlabel("budget K (active spectral channels)")
        a.grid(alpha=0.3)
    ax.set_ylabel("clip accuracy (%)")
    ax.set_title("Accuracy vs budget")
    ax.legend(fontsize=7)
    if bx is not None:
        bx.set_ylabel("real-time factor (1 thread)")
        bx.set_title("Speed vs budget")
        bx.set_ylim(bottom=0)
        if len(models) > 1:
            bx.legend(fontsize=7)
    fig.tight_layout()
    path = out / "budget_sweep.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
