"""Manifests: every corpus (real, user-provided or synthetic) is a list of :class:`Clip` rows.

A manifest is a CSV with a header; paths inside it are relative to the CSV's folder, so a corpus
folder can be moved. ``speaker`` drives speaker-disjoint splits.
"""

from __future__ import annotations

import csv
import hashlib
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from edgessm.atomic import atomic_path


@dataclass(frozen=True)
class Clip:
    """One audio file and what is known about it.

    Attributes:
        path: absolute path of the audio file.
        speaker: speaker or synthetic-voice id.
        label: class label (keyword spotting), e.g. ``"yes"``, ``"_unknown_"``, ``"_silence_"``.
        text: transcript (speech recognition), lower-case words.
        split: ``train`` / ``validation`` / ``test`` (or empty when the corpus has none).
        source: corpus name, e.g. ``speech_commands``, ``synth:espeak-ng``.
    """

    path: str
    speaker: str = ""
    label: str = ""
    text: str = ""
    split: str = ""
    source: str = ""


FIELDS = [f.name for f in fields(Clip)]


def write_manifest(path: str | os.PathLike, clips: Iterable[Clip]) -> None:
    """Write clips as CSV (paths stored relative to the CSV's folder), atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    root = path.parent.resolve()
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for clip in clips:
            row = asdict(clip)
            row["path"] = os.path.relpath(clip.path, root)
            w.writerow(row)


def read_manifest(path: str | os.PathLike) -> list[Clip]:
    """Read a manifest written by :func:`write_manifest` (unknown columns are ignored)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"manifest {path} not found")
    root = path.parent.resolve()
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None or "path" not in reader.fieldnames:
            raise ValueError(f"{path}: not a manifest (needs a header with a 'path' column)")
        return [
            Clip(**{k: (row.get(k) or "") for k in FIELDS if k != "path"}, path=str(root / row["path"]))
            for row in reader
        ]


def with_split(clips: Iterable[Clip], split: str) -> list[Clip]:
    return [replace(c, split=split) for c in clips]


def assign_split(clip: Clip, validation_pct: float = 10.0, test_pct: float = 0.0) -> str:
    """``train``/``validation``/``test``: the corpus's own split, else a stable hash of the speaker
    (``validation_pct`` percent of speakers for validation, the next ``test_pct`` percent for test)."""
    if clip.split in ("train", "validation", "test"):
        return clip.split
    key = clip.speaker or Path(clip.path).stem
    h = int.from_bytes(hashlib.sha1(key.encode()).digest()[:8], "big") % 10_000
    if h < validation_pct * 100:
        return "validation"
    return "test" if h < (validation_pct + test_pct) * 100 else "train"
