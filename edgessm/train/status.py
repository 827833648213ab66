"""Where a training run stands: ``RUN/status.json``, kept up to date by the trainer, shown by ``edgessm runs``.

    edgessm runs                     # every run under ./runs
    edgessm runs runs/kws runs/asr   # these runs
    edgessm runs runs/kws --json     # the status as JSON
    edgessm runs runs/kws runs/kws2 --plot curves.png   # their loss and validation curves, one picture

A run writes its status (atomically) at its first step, at every log row, validation and checkpoint, and
when it stops, finishes or fails, so that after a reboot, a killed process or a week away one look says:
what trained, how far (steps, examples, wall time over every resumed part), how fast, the last and best
validation scores, where the checkpoint is, and the command that continues it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from edgessm.atomic import write_text

STATUS = "status.json"
STATES = ("starting", "training", "stopped", "done", "failed")


@dataclass
class RunStatus:
    """What ``status.json`` holds (times in seconds, rates per second)."""

    recipe: str = ""
    task: str = ""
    state: str = "starting"  # one of STATES
    step: int = 0
    total_steps: int = 0
    examples: int = 0  # training examples seen, over every resumed part
    wall_s: float = 0.0  # wall time spent training, over every resumed part
    parts: int = 1  # 1 + the number of times the run was resumed
    first_step_s: float | None = None  # this part's time from the trainer's start to its first step
    first_step_at: float | None = None  # when that was (seconds since the epoch)
    items_per_s: float | None = None  # at the last log row
    data_wait: float | None = None  # the share of the time the step waited for the loader, at the last log row
    loss: float | None = None
    validation: dict[str, float] = field(default_factory=dict)  # the last validation metrics
    best: float | None = None  # the best validation score (checkpoints/best.pt)
    checkpoint: str = ""  # the last checkpoint (resume from here)
    device: str = ""
    processes: int = 1
    threads: int = 0
    workers: int = 0
    batch_size: int = 0
    message: str = ""  # what to do next, or why it failed
    updated: str = ""  # local time of this status

    def save(self, run: Path) -> None:
        self.updated = time.strftime("%Y-%m-%d %H:%M:%S")
        write_text(Path(run) / STATUS, json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, run: str | Path) -> RunStatus:
        """The status of ``run`` (a run folder); a clear error when the folder holds no run."""
        path = Path(run).expanduser() / STATUS
        if not path.is_file():
            raise FileNotFoundError(f"{run}: no {STATUS} here (not a training run folder, or a run started before "
                                    "runs wrote one; its log.csv still says how far it got)")  # fmt: skip
        values = json.loads(path.read_text())
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in values.items() if k in known})


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60}h{minutes % 60:02d}" if minutes >= 60 else f"{minutes} min"


def summary(run: str | Path, st: RunStatus) -> dict[str, str]:
    """One table row of a run's status."""
    score = st.validation.get("score")
    return {
        "run": str(run),
        "recipe": st.recipe,
        "state": st.state,
        "step": f"{st.step}/{st.total_steps}",
        "examples": f"{st.examples:,}",
        "wall": _duration(st.wall_s),
        "ex/s": "" if st.items_per_s is None else f"{st.items_per_s:.0f}",
        "wait": "" if st.data_wait is None else f"{st.data_wait:.0%}",
        "score": "" if score is None else f"{score:.4f}",
        "best": "" if st.best is None else f"{st.best:.4f}",
        "updated": st.updated,
    }


def add_arguments(ap: argparse.ArgumentParser) -> None:
    default = "default: every folder under ./runs that holds a run"
    ap.add_argument("runs", nargs="*", help=f"run folders, or folders of runs ({default})")
    ap.add_argument("--json", action="store_true", help="print the statuses as JSON")
    ap.add_argument("--plot", metavar="PNG", help="also draw the runs' training loss and validation score against "
                    "the examples seen to this image (edgessm.train.curves)")  # fmt: skip
    ap.add_argument("--smooth", type=int, default=20, metavar="ROWS",
                    help="--plot: the running mean of the loss over this many log rows (default 20)")  # fmt: skip


def runs_in(folder: Path) -> list[Path]:
    """``[folder]`` if it is a run folder, else the run folders directly in it (none: ``[]``)."""
    if (folder.expanduser() / STATUS).is_file():
        return [folder]
    return sorted(p.parent for p in folder.expanduser().glob(f"*/{STATUS}"))


def _plot(args: argparse.Namespace, folders: list[Path]) -> int:
    """Draw the curves of ``folders`` to ``args.plot``; the number of failures (runs with no log, no picture).
    What it says goes to stderr under ``--json``, so that stdout stays one JSON document."""
    from .curves import plot_curves, read_curves

    out = sys.stderr if args.json else sys.stdout

    if args.smooth < 1:
        raise SystemExit(f"edgessm runs: --smooth must be at least 1, got {args.smooth}")
    curves, failed = [], 0
    for folder in folders:
        try:
            curves.append(read_curves(folder))
        except ValueError as e:
            print(f"edgessm runs: {e}", file=out)
            failed += 1
    try:
        path = plot_curves(curves, args.plot, smooth=args.smooth)
    except (ImportError, ValueError) as e:
        print(f"edgessm runs: --plot: {e}", file=out)
        return failed + 1
    print(f"curves of {len(curves)} run(s): {path}", file=out)
    return failed


def run(args: argparse.Namespace) -> int:
    # a named folder that holds no run stays in the list: loading it says what is missing
    folders = [f for r in args.runs for f in runs_in(Path(r)) or [Path(r)]]
    if not args.runs:
        folders = runs_in(Path("runs"))
        if not folders:
            print("no runs under ./runs (name run folders: edgessm runs FOLDER ...)")
            return 1
    statuses, failed = [], 0
    for folder in folders:
        try:
            statuses.append((folder, RunStatus.load(folder)))
        except (FileNotFoundError, json.JSONDecodeError, TypeError) as e:
            print(f"edgessm runs: {e}")
            failed += 1
    if args.plot:
        failed += _plot(args, [f for f, _ in statuses])
    if args.json:
        print(json.dumps({str(f): asdict(s) for f, s in statuses}, indent=1))
        return 1 if failed else 0
    rows = [summary(f, s) for f, s in statuses]
    if rows:
        cols = list(rows[0])
        widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols}
        print("  ".join(c.ljust(widths[c]) for c in cols).rstrip())
        for r in rows:
            print("  ".join(r[c].ljust(widths[c]) for c in cols).rstrip())
        for folder, st in statuses:
            if st.message:
                print(f"{folder}: {st.message}")
    return 1 if failed else 0
