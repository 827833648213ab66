"""End-to-end training speed of a recipe, as ``edgessm train`` runs it: examples per second with the loader and
the step together, time to the first step, and where the time goes (the share the step waits for data).

    python -m edgessm.bench train kws_v8
    python -m edgessm.bench train kws_v8 --vs "train.processes=1;train.workers=2" --vs model.front=filterbank
    python -m edgessm.bench train kws_v7 --set 'data.sources=["shared:sc_train"]' --steps 80 --json out.json

Each row is a real ``edgessm train RECIPE --stop-after STEPS`` in its own process tree (a fresh run folder, the
recipe's defaults for ``--device`` and the row's ``--set`` overrides: processes, threads, loader workers and
batch as the trainer resolves them), one row after another on the otherwise idle machine. Its run's
``status.json`` and ``log.csv`` give the numbers: ``first step s`` from the command to the end of its first
step (imports, processes, set-up, data, the first batch; the decoded corpus cached by an earlier run or row);
``examples/s`` over the steps after the first log row (warm); ``data wait`` the share of that time the step
waited for examples. ``ratio`` is a row's examples/s over the first row's.
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m edgessm.bench train", description=__doc__.split("\n\n")[0])
    ap.add_argument("recipe", help="a shipped recipe or a TOML config")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every row")
    ap.add_argument("--vs", action="append", default=[], metavar="KEY=VALUE[;KEY=VALUE]",
                    help="another row: the recipe with these overrides (repeatable)")  # fmt: skip
    ap.add_argument("--steps", type=int, default=60, help="training steps per row (default 60)")
    ap.add_argument("--log-every", type=int, default=10, help="steps per log row (the rate is read from them)")
    ap.add_argument("--device", choices=["cpu", "cuda", "auto"], default="cpu")
    ap.add_argument("--pack", metavar="DIR", help="train on a data pack, as `edgessm train --pack`")
    ap.add_argument("--keep", metavar="DIR", help="keep the rows' run folders under DIR (default: a temporary one)")
    ap.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    return ap


def command(recipe: str, out: Path, overrides: list[str], steps: int, log_every: int, device: str,
            pack: str | None) -> list[str]:  # fmt: skip
    """The ``edgessm train`` command line of one row."""
    cmd = [sys.executable, "-m", "edgessm", "train", recipe, "--out", str(out), "--device", device,
           "--stop-after", str(steps), "--no-progress", "--set", f"train.log_every={log_every}"]  # fmt: skip
    if pack:
        cmd += ["--pack", pack]
    for o in overrides:
        cmd += ["--set", o]
    return cmd


def read_row(run: Path, launched_at: float | None = None) -> dict[str, Any]:
    """The numbers of a finished row from its run folder (``status.json``, ``log.csv``); ``launched_at``: when
    its command started (``time.time()``), for the time from the command to the first step."""
    status = json.loads((run / "status.json").read_text())
    with open(run / "log.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("items_per_s")]
    warm = rows[1:] or rows  # the first log row holds the warm-up steps
    if not warm:
        raise RuntimeError(f"{run}: the run logged no training rows")
    rate = sum(float(r["items_per_s"]) for r in warm) / len(warm)
    wait = sum(float(r.get("data_wait") or 0.0) for r in warm) / len(warm)
    at = status.get("first_step_at")
    return {
        "first_step_s": status.get("first_step_s"),
        "command_to_first_step_s": None if at is None or launched_at is None else at - launched_at,
        "examples_per_s": rate,
        "data_wait": wait,
        "processes": status.get("processes", 1),
        "threads": status.get("threads"),
        "workers": status.get("workers"),
        "batch": status.get("batch_size"),
    }


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.steps < 2 * args.log_every:
        raise SystemExit("bench train: --steps must be at least two log rows (2 x --log-every)")
    specs = [("recipe", list(args.set))]
    specs += [(vs, [*args.set, *(o.strip() for o in vs.split(";") if o.strip())]) for vs in args.vs]
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="edgessm-bench-train-"))
    rows = []
    for i, (label, overrides) in enumerate(specs):
        out = root / f"row{i}"
        if (out / "checkpoints").exists():
            raise SystemExit(f"bench train: {out} holds a run already; --keep a new folder")
        cmd = command(args.recipe, out, overrides, args.steps, args.log_every, args.device, args.pack)
        print(f"# {label}: {shlex.join(cmd[2:])}", flush=True)
        t0, launched = time.perf_counter(), time.time()
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode:
            print(done.stdout[-3000:])
            raise SystemExit(f"bench train: row {label!r} failed (exit {done.returncode})")
        rows.append({"label": label, **read_row(out, launched), "wall_s": time.perf_counter() - t0})
    base = rows[0]["examples_per_s"]
    width = max(12, *(len(r["label"]) for r in rows))
    print(f"\n# {args.recipe} on {args.device}: {args.steps} steps per row, rates after the first "
          f"{args.log_every} steps")  # fmt: skip
    print(f"{'row':<{width}} {'procs x thr':>11} {'workers':>7} {'batch':>5} {'first step s':>12} "
          f"{'examples/s':>10} {'data wait':>9} {'ratio':>6}")  # fmt: skip
    for r in rows:
        r["ratio"] = r["examples_per_s"] / base
        first = "" if r["command_to_first_step_s"] is None else f"{r['command_to_first_step_s']:.1f}"
        print(f"{r['label']:<{width}} {str(r['processes']) + ' x ' + str(r['threads']):>11} {r['workers']:>7} "
              f"{r['batch']:>5} {first:>12} {r['examples_per_s']:>10.1f} {r['data_wait']:>9.0%} "
              f"{r['ratio']:>6.2f}")  # fmt: skip
    if args.json:
        from edgessm.atomic import write_text

        write_text(args.json, json.dumps({"recipe": args.recipe, "device": args.device, "rows": rows}, indent=1))
    return 0
