"""Training curves of runs as one picture: ``edgessm runs RUN ... --plot curves.png``.

Each run's ``log.csv`` (written by the trainer, one row per log step and per validation; a resumed run's rows
continue it) gives the training loss and the validation score against the training examples seen, so runs of
different batch sizes, and the sittings of one run, line up:

* left: the training loss, each log row faint and its running mean over ``smooth`` rows solid;
* right: the validation score (``val_score``: higher is better; a recipe's own measure, e.g. clip accuracy for
  keyword spotting, SI-SDR improvement for denoising), one marker per validation.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

from edgessm.atomic import atomic_path
from edgessm.plotting import pyplot


@dataclass
class Curves:
    """One run's curves: ``(examples, value)`` pairs, examples in training examples seen."""

    name: str
    loss: list[tuple[float, float]] = field(default_factory=list)
    score: list[tuple[float, float]] = field(default_factory=list)


def _batch_size(folder: Path) -> int:
    """The run's examples per step: its ``config.json``'s ``train.batch_size``."""
    try:
        cfg = json.loads((folder / "config.json").read_text())
        return int(cfg["train"]["batch_size"])
    except (FileNotFoundError, KeyError, TypeError, ValueError, json.JSONDecodeError) as e:
        raise ValueError(f"{folder}: no batch size in config.json ({e}); is it a run folder of edgessm train?") from e


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def read_curves(folder: str | Path) -> Curves:
    """The loss and validation curves of the run in ``folder`` (its ``log.csv`` and ``config.json``).

    Raises:
        ValueError: the folder has no ``log.csv`` (the run has not logged yet) or no batch size.
    """
    folder = Path(folder).expanduser()
    log = folder / "log.csv"
    if not log.is_file():
        raise ValueError(f"{folder}: no log.csv yet (a run writes it at its first log row, train.log_every)")
    batch = _batch_size(folder)
    curves = Curves(name=folder.name)
    with open(log, newline="") as f:
        for row in csv.DictReader(f):
            step = _number(row.get("step"))
            if step is None:
                continue
            if (loss := _number(row.get("loss"))) is not None:
                curves.loss.append((step * batch, loss))
            if (score := _number(row.get("val_score"))) is not None:
                curves.score.append((step * batch, score))
    return curves


def running_mean(values: list[float], n: int) -> list[float]:
    """The mean of each value and the ``n - 1`` before it (fewer at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= n:
            total -= values[i - n]
        out.append(total / min(i + 1, n))
    return out


def plot_curves(runs: list[Curves], path: str | Path, smooth: int = 20) -> Path:
    """Draw ``runs`` (loss left, validation score right) to the image ``path``, written atomically.

    Raises:
        ImportError: matplotlib is not installed (``pip install matplotlib``).
        ValueError: no run has a logged row.
    """
    if not any(r.loss or r.score for r in runs):
        raise ValueError("no run has logged a row yet: nothing to plot")
    plt = pyplot("edgessm runs --plot")
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, run in enumerate(runs):
        c = colors[i % len(colors)]
        if run.loss:
            x = [e / 1e6 for e, _ in run.loss]
            y = [v for _, v in run.loss]
            ax.plot(x, y, color=c, alpha=0.2, lw=0.8)
            ax.plot(x, running_mean(y, smooth), color=c, lw=1.6, label=run.name)
        if run.score:
            bx.plot([e / 1e6 for e, _ in run.score], [v for _, v in run.score], "o-", color=c, label=run.name)
    ax.set_title(f"training loss (faint: each log row; solid: mean of {smooth})")
    bx.set_title("validation score (higher is better)")
    for a in (ax, bx):
        a.set_xlabel("training examples seen (millions)")
        a.grid(alpha=0.3)
        if a.lines:
            a.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format=path.suffix.lstrip(".") or "png")
    plt.close(fig)
    return path
