"""Per-keyword decision thresholds calibrated on validation streams (numpy + onnxruntime only).

One global threshold on the smoothed posterior does not mean one false-accept rate: short words
("no", "go", "up") reach a given posterior on running speech far more often than long ones
("sheila", "visual"). Calibration picks one threshold per keyword so that, together, the keywords
stay within a false-accept budget on keyword-free validation audio while detecting as many
validation keywords as possible.

Data (no test speaker is used):

* keyword streams: real Speech Commands clips of the validation speakers (``sc-validation``) and,
  for words with few real validation clips, the synthetic validation voices, spoken with 1.5-2.5 s
  pauses over a quiet room, over keyword-free speech, music and noise;
* keyword-free audio: validation sentences of real speakers held out of training (no synthetic
  voices: they set off far fewer false accepts than people), the soundtracks' validation tracks
  (procedural music where they are not installed) and noise recordings.

Allocation (:func:`allocate`): for each keyword ``c`` and candidate threshold ``t``, ``hits[c, t]``
counts its validation keywords whose smoothed posterior reaches ``t`` around the word, and
``fa[c, t]`` the detections it alone would make on the keyword-free audio. Starting from the highest
threshold everywhere, the greedy step lowers the keyword whose move buys the most hits per false
accept (over any lower threshold, so a flat stretch does not stop it) while the summed false accepts
stay within ``budget``. A word without validation keywords keeps the one threshold for every word that meets
the budget (its false accepts counted first). The result is then checked with the real :class:`KeywordDecider`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edgessm.data.audio import SAMPLE_RATE, load_audio
from edgessm.data.augment import set_level
from edgessm.data.corpora import CorpusError, synth_manifest
from edgessm.data.labels import SILENCE, UNKNOWN
from edgessm.data.manifest import read_manifest
from edgessm.runtime.kws import BACKGROUND
from edgessm.runtime.session import StepModel

from . import backgrounds
from .kws import StreamSet, clip_set, graph_logits, trim
from .streams import Placement, build_stream, peak_posteriors, smoothed_posteriors

#: candidate thresholds, highest first
GRID = np.round(np.concatenate([[0.999, 0.995, 0.99, 0.98, 0.97, 0.96], np.arange(0.95, 0.29, -0.025)]), 4)


def crossings(trace: np.ndarray, grid: Sequence[float], refractory: int) -> np.ndarray:
    """Detections of one class alone at each threshold, counted as :class:`KeywordDecider` makes them:
    within a run of frames at or above the threshold it fires once, at the run's first frame that is
    ``refractory`` frames after the last detection. Shape ``(len(grid),)``."""
    out = np.zeros(len(grid), int)
    for g, t in enumerate(grid):
        above = np.concatenate([[False], trace >= t, [False]])
        edges = np.flatnonzero(above[1:] != above[:-1])  # run starts and ends, alternating
        last = -(10**9)
        for start, end in zip(edges[::2], edges[1::2], strict=True):
            fire = max(start, last + refractory)
            if fire < end:
                out[g] += 1
                last = fire
    return out


def single_index(fa: np.ndarray, budget: float) -> int:
    """The grid index of the lowest one threshold for every class whose summed false accepts (``fa``:
    ``(C, G)``, thresholds highest first) stay within ``budget`` (0, the highest, when none does)."""
    within = np.flatnonzero(fa.sum(0) <= budget)
    return int(within.max()) if len(within) else 0


def allocate(hits: np.ndarray, fa: np.ndarray, budget: float, fallback: int | None = None) -> np.ndarray:
    """Grid index per class (``hits``, ``fa``: ``(C, G)``, thresholds highest first) maximising the
    summed hits with the summed false accepts within ``budget``.

    A class without a single validation keyword (its ``hits`` all zero) cannot be scored: lowering its
    threshold never buys a hit, so the greedy step would leave it at the highest threshold and the word
    could never be heard. With ``fallback`` (a grid index: :func:`single_index`) it keeps that threshold
    instead, its false accepts spent before the others are allocated."""
    n_classes, n_grid = hits.shape
    scored = hits.max(1) > 0
    pick = np.zeros(n_classes, int)
    if fallback is not None:
        pick[~scored] = fallback
    spent = float(fa[np.arange(n_classes), pick].sum())
    while True:
        best, best_gain = None, 0.0
        for c in np.flatnonzero(scored):
            i = pick[c]
            for j in range(i + 1, n_grid):
                d_fa = fa[c, j] - fa[c, i]
                d_hit = hits[c, j] - hits[c, i]
                if d_hit <= 0 or spent + d_fa > budget:
                    continue
                gain = d_hit / (d_fa + 1e-3)
                if gain > best_gain:
                    best, best_gain = (c, j), gain
        if best is None:
            return pick
        c, j = best
        spent += fa[c, j] - fa[c, pick[c]]
        pick[c] = j


# --- validation data -------------------------------------------------------------------------------


MIN_REAL = 30  # a word with fewer real validation clips than this is filled up with synthetic voices


def _real_validation_paths() -> dict[str, list[str]]:
    by: dict[str, list[str]] = {}
    for clip, word in clip_set("sc-validation"):
        by.setdefault(word, []).append(clip.path)
    return by


def real_validation_words(min_real: int = MIN_REAL) -> set[str]:
    """The words whose validation keywords (:func:`validation_keywords`) are all real speakers: those with at
    least ``min_real`` ``sc-validation`` clips. The others' also come from synthetic voices, so how well a model
    does on them depends on the synthetic corpora it was trained on (and on those on the machine)."""
    return {w for w, paths in _real_validation_paths().items() if len(paths) >= min_real}


def validation_keywords(min_real: int = MIN_REAL, per_word: int = 60, seed: int = 0) -> list[tuple[str, np.ndarray]]:
    """Up to ``per_word`` validation keywords per word, trimmed: real (``sc-validation``) where a word has
    at least ``min_real`` such clips, else the synthetic validation voices (default and Kokoro corpora)."""
    rng = np.random.default_rng([seed, 11])
    by = _real_validation_paths()
    synth: dict[str, list[str]] = {}
    for corpus in ("default", "kokoro-words", "kokoro-kws"):
        try:
            clips = read_manifest(synth_manifest(corpus))
        except CorpusError:  # a corpus that was not built
            continue
        for c in clips:
            if c.split == "validation" and c.label and c.label not in (UNKNOWN, SILENCE):
                synth.setdefault(c.label, []).append(c.path)
    out = []
    for word in sorted(set(by) | set(synth)):
        paths = by.get(word, []) if len(by.get(word, [])) >= min_real else by.get(word, []) + synth.get(word, [])
        for i in rng.permutation(len(paths))[:per_word]:
            out.append((word, trim(load_audio(paths[i])[0])))
    return [out[i] for i in rng.permutation(len(out))]


def validation_streams(words: list[tuple[str, np.ndarray]], seed: int = 0) -> list[StreamSet]:
    """The validation keywords split over four streams: a quiet room with 1.5-2.5 s pauses (a session),
    and over keyword-free validation speech, music and noise (2-5 s apart, 5-20 dB SNR)."""
    rng = np.random.default_rng([seed, 12])
    kinds = ("session", *backgrounds.KINDS)
    out = []
    for k, kind in enumerate(kinds):
        part = words[k :: len(kinds)]
        if kind == "session":
            seconds = sum(len(w) / SAMPLE_RATE + 2.5 for _, w in part) + 3.0
            bg = set_level(backgrounds.noise(seconds, rng), -50.0)
            audio, places = build_stream(bg, part, rng, gap_s=(1.5, 2.5), snr_db=(20.0, 35.0), min_level_dbfs=-30.0)
        else:
            seconds = sum(len(w) / SAMPLE_RATE + 3.5 for _, w in part) + 5.0
            bg = backgrounds.background(kind, seconds, rng, speech_source="validation")
            audio, places = build_stream(bg, part, rng, gap_s=(2.0, 5.0), snr_db=(5.0, 20.0))
        out.append(StreamSet(f"validation-{kind}", audio, places))
    return out


def validation_free(hours: float, seed: int = 0) -> list[StreamSet]:
    """``hours`` of keyword-free validation audio, a third each of speech, music and noise."""
    rng = np.random.default_rng([seed, 13])
    share = hours * 3600 / len(backgrounds.KINDS)
    return [StreamSet(k, backgrounds.background(k, share, rng, "validation"), []) for k in backgrounds.KINDS]


def validation_speech_pool() -> dict | None:
    """The distinct recordings the validation speech background loops (:func:`backgrounds.speech_pool`), or
    ``None`` without the shared data."""
    try:
        return backgrounds.speech_pool("validation")
    except (FileNotFoundError, ValueError):  # CorpusError is a ValueError
        return None


# --- calibration -----------------------------------------------------------------------------------


def keyword_hits(post: np.ndarray, placements: Sequence[Placement], labels: list[str], frame_s: float,
                 grid: np.ndarray) -> np.ndarray:  # fmt: skip
    """``(C, G)``: keywords of each class whose smoothed posterior reaches each threshold within the
    scoring window (0.1 s before the word to 1 s after it)."""
    hits = np.zeros((len(labels), len(grid)), int)
    for p, peak in zip(placements, peak_posteriors(post, placements, labels, frame_s), strict=True):
        if p.label in labels and not np.isnan(peak):
            hits[labels.index(p.label)] += peak >= np.asarray(grid)
    return hits


def calibrate(model: StepModel, streams: list[StreamSet], free: list[StreamSet], budgets: Sequence[float],
              smooth_frames: int = 4, refractory_s: float = 1.0,
              logits: dict[int, np.ndarray] | None = None) -> dict:  # fmt: skip
    """Per-keyword thresholds for each false-accept budget (per hour of ``free`` audio).

    ``logits``: the streams' frame logits by ``id(stream)`` (computed here when not given).
    Returns ``{"budgets": {budget: {label: threshold}}, "hits": ..., "fa": ..., "grid": ...}``.
    """
    info = model.info
    labels = info.labels
    frame_s = info.stride / info.sample_rate
    logits = logits if logits is not None else {id(s): graph_logits(model, s.audio) for s in streams + free}
    posts = {id(s): smoothed_posteriors(logits[id(s)], smooth_frames) for s in streams + free}
    hits = sum(keyword_hits(posts[id(s)], s.placements, labels, frame_s, GRID) for s in streams)
    refractory = max(1, round(refractory_s / frame_s))
    active = [i for i, lab in enumerate(labels) if lab not in BACKGROUND]
    fa = np.zeros((len(labels), len(GRID)), int)
    for s in free:
        for c in active:
            fa[c] += crossings(posts[id(s)][c], GRID, refractory)
    hours = sum(len(s.audio) for s in free) / info.sample_rate / 3600
    sub = np.array(active)
    out: dict = {"grid": GRID.tolist(), "keyword_free_hours": hours, "budgets": {}}
    # words no validation keyword scores keep the one threshold that meets the budget
    out["unscored"] = [labels[c] for c in sub if not hits[c].any()]
    for budget in budgets:
        fallback = single_index(fa[sub], budget * hours)
        pick = allocate(hits[sub], fa[sub], budget * hours, fallback=fallback)
        out["budgets"][float(budget)] = {labels[c]: float(GRID[pick[k]]) for k, c in enumerate(sub)}
    out["hits"] = {labels[c]: hits[c].tolist() for c in sub}
    out["fa"] = {labels[c]: fa[c].tolist() for c in sub}
    return out
