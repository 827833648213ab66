"""The teacher's quality gate for synthetic words: a clip the teacher cannot hear as its text is dropped.

Each word clip (kinds ``keywords`` and ``unknown``) is scored by :meth:`WhisperTeacher.score`: the
teacher's forced-decoding probability of the clip's own text (geometric mean over its tokens). Measured
on Kokoro blends: renders of the right word score 0.2--0.9, the same audio scored against another word
0.000--0.06, so the default threshold 0.1 drops renders that say something else (or nothing clear).
Scores are cached in ``gate.csv`` in the corpus folder (by clip file), so reruns only score new clips.
"""

from __future__ import annotations

import csv
import multiprocessing
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from edgessm.atomic import atomic_path

GATED_KINDS = ("keywords", "unknown")
DEFAULT_THRESHOLD = 0.1


@dataclass
class GateReport:
    """Scores of the gated clips and what the threshold rejected.

    Attributes:
        scores: clip relpath -> teacher score.
        rejected: relpaths below the threshold.
        by_voice / by_word: name -> (rejected, scored).
    """

    threshold: float
    scores: dict[str, float] = field(default_factory=dict)
    rejected: set[str] = field(default_factory=set)
    by_voice: dict[str, list[int]] = field(default_factory=dict)
    by_word: dict[str, list[int]] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return len(self.rejected) / max(1, len(self.scores))

    def lines(self, worst: int = 8) -> list[str]:
        out = [f"  teacher gate: {len(self.rejected)} of {len(self.scores)} word clips rejected "
               f"({100 * self.rate:.1f}%, score < {self.threshold})"]  # fmt: skip
        words = sorted(self.by_word.items(), key=lambda kv: -kv[1][0] / max(1, kv[1][1]))[:worst]
        if words and words[0][1][0]:
            out.append("    most rejected words: " + ", ".join(
                f"{w} {100 * r / max(1, n):.0f}%" for w, (r, n) in words if r))  # fmt: skip
        return out


def _score_batch(items: list[tuple[str, str]]) -> list[float]:
    """Score ``(wav path, text)`` pairs in a worker (one teacher per process, one thread)."""
    from edgessm.data.audio import load_audio
    from edgessm.data.teacher import shared_teacher

    teacher = shared_teacher()
    return [teacher.score(load_audio(path, 16000)[0][: 30 * 16000], [text])[0] for path, text in items]


def _read_cache(path: Path) -> dict[str, float]:
    if not path.is_file():
        return {}
    with open(path, newline="") as f:
        return {r["path"]: float(r["score"]) for r in csv.DictReader(f) if r.get("score")}


def _write_cache(path: Path, cache: dict[str, float]) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "score"])
        w.writerows((k, f"{v:.4f}") for k, v in sorted(cache.items()))


def teacher_gate(
    root: Path,
    clips: Sequence[tuple[str, str, str, str]],
    threshold: float = DEFAULT_THRESHOLD,
    jobs: int = 2,
    progress: bool = True,
) -> GateReport:
    """Score ``clips`` — ``(relpath, text, voice id, word)`` of existing files under ``root`` — and reject
    those below ``threshold``; cached in ``root/gate.csv``."""
    from tqdm import tqdm

    cache_path = root / "gate.csv"
    cache = _read_cache(cache_path)
    todo = [(rel, text) for rel, text, _, _ in clips if rel not in cache]
    if todo:
        batches = [todo[i : i + 32] for i in range(0, len(todo), 32)]
        bar = tqdm(total=len(todo), unit="clip", desc="teacher gate", disable=not progress)
        try:
            if jobs <= 1:
                results = (_score_batch([(str(root / r), t) for r, t in b]) for b in batches)
                for i, (b, scores) in enumerate(zip(batches, results, strict=True)):
                    cache.update({r: s for (r, _), s in zip(b, scores, strict=True)})
                    bar.update(len(b))
                    if i % 20 == 19:  # saved as it goes: a killed run resumes from here
                        _write_cache(cache_path, cache)
            else:
                ctx = multiprocessing.get_context("spawn")
                with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
                    results = pool.map(_score_batch, [[(str(root / r), t) for r, t in b] for b in batches])
                    for i, (b, scores) in enumerate(zip(batches, results, strict=True)):
                        cache.update({r: s for (r, _), s in zip(b, scores, strict=True)})
                        bar.update(len(b))
                        if i % 20 == 19:
                            _write_cache(cache_path, cache)
        finally:
            bar.close()
            _write_cache(cache_path, cache)
    report = GateReport(threshold)
    for rel, _, voice, word in clips:
        score = cache[rel]
        report.scores[rel] = score
        bad = score < threshold
        if bad:
            report.rejected.add(rel)
        for table, key in ((report.by_voice, voice), (report.by_word, word)):
            entry = table.setdefault(key, [0, 0])
            entry[0] += int(bad)
            entry[1] += 1
    return report
