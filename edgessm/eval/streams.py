"""Streaming keyword-spotting evaluation: build long test streams with keywords at known times and
score a detector's events on them (numpy only).

A stream is background audio (speech that contains no keyword, music-like or noise recordings)
with keyword clips mixed in at chosen times and SNRs. Scoring matches each detection to the
nearest unmatched keyword of the same label whose window (onset - ``early`` .. end + ``late``)
contains the detection time: matched detections are hits (with the time error measured from the
keyword's end), the others are false accepts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Placement:
    label: str
    start_s: float
    end_s: float


@dataclass
class StreamScore:
    hits: int = 0
    misses: int = 0
    false_accepts: int = 0  # detections matching no placed keyword (wrong words included)
    wrong_words: int = 0  # of those, detections of another keyword inside a placed keyword's window
    time_errors_s: list[float] = field(default_factory=list)  # detection time - keyword end
    duration_s: float = 0.0
    per_word: dict[str, list[int]] = field(default_factory=dict)  # label -> [hits, placed]
    named_instead: dict[str, dict[str, int]] = field(default_factory=dict)  # said -> {wrong word detected: count}

    @property
    def detection_rate(self) -> float:
        return self.hits / max(1, self.hits + self.misses)

    @property
    def false_accepts_per_hour(self) -> float:
        return self.false_accepts / max(1e-9, self.duration_s / 3600)

    def summary(self) -> dict[str, float]:
        errs = np.array(self.time_errors_s) if self.time_errors_s else np.zeros(1)
        return {
            "detection_rate": self.detection_rate,
            "false_accepts_per_hour": self.false_accepts_per_hour,
            "time_error_median_s": float(np.median(errs)),
            "time_error_p90_s": float(np.percentile(np.abs(errs), 90)),
            "hits": self.hits,
            "misses": self.misses,
            "false_accepts": self.false_accepts,
            "wrong_words": self.wrong_words,
            "hours": self.duration_s / 3600,
            "per_word": self.per_word,
            "named_instead": self.named_instead,
        }


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64)) + 1e-12))


def build_stream(background: np.ndarray, keywords: Sequence[tuple[str, np.ndarray]], rng: np.random.Generator,
                 sr: int = 16000, gap_s: tuple[float, float] = (2.0, 5.0),
                 snr_db: tuple[float, float] = (5.0, 20.0), around_s: float = 1.0,
                 min_level_dbfs: float = -35.0) -> tuple[np.ndarray, list[Placement]]:  # fmt: skip
    """Mix ``keywords`` (label, clip) into ``background`` at random non-overlapping times.

    Keywords are placed in order with a gap drawn from ``gap_s`` before each. Each is scaled to an
    SNR drawn from ``snr_db`` against the background around it (its span plus ``around_s`` on each
    side, so a word that falls into a pause of background speech is measured against that speech,
    not against the pause), and never below ``min_level_dbfs`` RMS: a person speaks a keyword at a
    speaking level, however quiet the room, and an SNR against digital silence would make it
    inaudible. Placement stops when the stream is full. Returns the mixture (same length as
    ``background``; scaled down only if it would clip) and the placements made.
    """
    out = np.asarray(background, np.float32).copy()
    placements: list[Placement] = []
    pos, pad = 0, int(around_s * sr)
    floor = 10 ** (min_level_dbfs / 20)
    for label, clip in keywords:
        pos += int(rng.uniform(*gap_s) * sr)
        if pos + len(clip) > len(out):
            break
        local = _rms(out[max(0, pos - pad) : pos + len(clip) + pad])
        level = max(local * 10 ** (rng.uniform(*snr_db) / 20), floor)
        out[pos : pos + len(clip)] += (level / _rms(clip)) * clip
        placements.append(Placement(label, pos / sr, (pos + len(clip)) / sr))
        pos += len(clip)
    peak = float(np.abs(out).max())
    if peak > 1.0:
        out /= peak
    return out, placements


def score_stream(detections: Sequence[tuple[str, float]], placements: Sequence[Placement], duration_s: float,
                 early_s: float = 0.1, late_s: float = 1.0) -> StreamScore:  # fmt: skip
    """Match ``(label, time_s)`` detections to placed keywords."""
    score = StreamScore(duration_s=duration_s)
    used = [False] * len(placements)
    for label, t in detections:
        best, best_d = None, np.inf
        for k, p in enumerate(placements):
            if used[k] or p.label != label or not (p.start_s - early_s <= t <= p.end_s + late_s):
                continue
            d = abs(t - p.end_s)
            if d < best_d:
                best, best_d = k, d
        if best is None:
            score.false_accepts += 1
            said = [p for p in placements if p.label != label and p.start_s - early_s <= t <= p.end_s + late_s]
            if said:  # a wrong word: counted against the keyword said nearest before it
                score.wrong_words += 1
                word = min(said, key=lambda p: abs(t - p.end_s)).label
                heard = score.named_instead.setdefault(word, {})
                heard[label] = heard.get(label, 0) + 1
        else:
            used[best] = True
            score.hits += 1
            score.time_errors_s.append(t - placements[best].end_s)
    score.misses = used.count(False)
    for p, hit in zip(placements, used, strict=True):
        counts = score.per_word.setdefault(p.label, [0, 0])
        counts[0] += hit
        counts[1] += 1
    return score


def smoothed_posteriors(logits: np.ndarray, smooth_frames: int) -> np.ndarray:
    """``(C, F)`` posteriors averaged over the last ``smooth_frames`` frames, as the live decider does."""
    p = np.exp(logits - logits.max(axis=0))
    p /= p.sum(axis=0)
    c = np.cumsum(np.pad(p, ((0, 0), (1, 0))), axis=1)
    k = max(1, smooth_frames)
    counts = np.minimum(np.arange(1, p.shape[1] + 1), k)
    return (c[:, 1:] - c[:, np.maximum(0, np.arange(1, p.shape[1] + 1) - k)]) / counts


def peak_posteriors(post: np.ndarray, placements: Sequence[Placement], labels: Sequence[str], frame_s: float,
                    early_s: float = 0.1, late_s: float = 1.0) -> np.ndarray:  # fmt: skip
    """``(len(placements),)``: the highest smoothed posterior ``post (C, F)`` of each placed keyword's own
    class over its scoring window (``early_s`` before the word to ``late_s`` after it, as :func:`score_stream`
    counts a hit); NaN for a word that is not one of ``labels``. A keyword whose peak stays below the
    threshold cannot be detected by any decision logic on that posterior; one whose peak reaches it and
    is missed was lost to the decision (another word first, the refractory period)."""
    out = np.full(len(placements), np.nan)
    for k, p in enumerate(placements):
        if p.label in labels:
            a, b = int(max(0.0, p.start_s - early_s) / frame_s), int((p.end_s + late_s) / frame_s) + 1
            window = post[list(labels).index(p.label), a:b]
            out[k] = window.max() if window.size else np.nan
    return out
