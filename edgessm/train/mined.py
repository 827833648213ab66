"""Mined hard negatives as data: where a keyword graph fired in keyword-free speech, one CSV row per detection
(``path,time_s,word,score``). ``edgessm mine`` (:mod:`.mine`) writes them; a keyword recipe's ``[data]
mined_negatives`` (:mod:`.kws_task`; one CSV or several, e.g. of two models) and ``edgessm pack`` read them."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FIELDS = ("path", "time_s", "word", "score")


@dataclass(frozen=True)
class Mined:
    """One detection in keyword-free speech: ``word`` fired ``time_s`` seconds into ``path``."""

    path: str
    time_s: float
    word: str
    score: float


def write_mined(path: str | Path, rows: Sequence[Mined]) -> None:
    """The CSV ``path`` (atomically). Relative recording paths are read as relative to its folder."""
    from edgessm.atomic import write_text

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(FIELDS)
    w.writerows((r.path, f"{r.time_s:.3f}", r.word, f"{r.score:.4f}") for r in rows)
    write_text(path, buf.getvalue())


def read_mined(path: str | Path) -> list[Mined]:
    """The rows of a CSV written by :func:`write_mined`; a clear error for anything else."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"mined negatives {path}: no such file (make it with `edgessm mine`)")
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != FIELDS:
            raise ValueError(f"mined negatives {path}: columns {reader.fieldnames}, expected {list(FIELDS)} "
                             "(a CSV written by `edgessm mine`)")  # fmt: skip
        root = path.parent.resolve()  # a relative path is the CSV folder's (a data pack's mined.csv)
        try:
            rows = [Mined(str(root / r["path"]), float(r["time_s"]), r["word"], float(r["score"])) for r in reader]
        except ValueError as e:
            raise ValueError(f"mined negatives {path}, line {reader.line_num}: {e}") from None
    if any(not np.isfinite(r.time_s) or r.time_s < 0 for r in rows):
        raise ValueError(f"mined negatives {path}: a negative or non-finite time")
    return rows


def read_mined_lists(paths: str | Sequence[str], apart_s: float = 0.5) -> list[Mined]:
    """The detections of one CSV or of several (e.g. two models mined on the same speech), in order, without a
    later list's detection within ``apart_s`` seconds of a kept one in the same recording (the same moment)."""
    kept: list[Mined] = []
    at: dict[str, list[float]] = {}
    for path in [paths] if isinstance(paths, (str, Path)) else paths:
        new = [m for m in read_mined(path) if all(abs(m.time_s - t) >= apart_s for t in at.get(m.path, ()))]
        for m in new:
            at.setdefault(m.path, []).append(m.time_s)
        kept += new
    return kept
