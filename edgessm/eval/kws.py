"""Keyword-spotter evaluation on an exported stepwise graph (onnxruntime + numpy only).

Clip accuracy: every clip is centred in one second of silence (the clip length the model was
trained on), streamed through the graph from its start state (zeros, or after its warm-up
silence), and classified by the logits of the
last whole frame -- exactly the clip-training forward pass (the head's causal window over the
clip). Sets:

* ``sc-test`` -- the Speech Commands v0.02 test clips (real speakers never trained on): the
  standard 12-class protocol (10 commands, ``_unknown_`` for the other 25 words, ``_silence_``)
  and per-word accuracy over all 35 words;
* ``synth-test`` -- the synthetic corpus's test voices (speaker-disjoint from training);
* ``fsdd`` -- the Free Spoken Digit Dataset's test split (held-out recordings of its speakers).

Streaming: keywords from the SC test set placed at known times in keyword-free backgrounds
(:mod:`.backgrounds`), run as one long stream through the live decision logic
(:class:`~edgessm.runtime.kws.KeywordDecider`); plus an hour of keyword-free audio for false
accepts per hour. A threshold sweep gives the detection-rate / false-accept trade-off.

Read speech (``read-speech``): an hour of running read speech with human transcripts (Mini LibriSpeech's
validation readers) streamed as is: false accepts per hour of keywords the reader did not say.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from edgessm.data.audio import SAMPLE_RATE, load_audio, speech_span
from edgessm.data.augment import set_level
from edgessm.data.corpora import shared_fsdd, shared_sc_test, shared_sc_train, synth_manifest
from edgessm.data.labels import SC12_LABELS, SILENCE, UNKNOWN, map_word
from edgessm.data.manifest import Clip, assign_split, read_manifest
from edgessm.runtime.kws import DecisionConfig, KeywordDecider
from edgessm.runtime.session import StepModel

from . import backgrounds
from .streams import Placement, build_stream, peak_posteriors, score_stream, smoothed_posteriors

CLIP_SAMPLES = SAMPLE_RATE  # the models are trained on one-second clips

Progress = Callable[[Sequence, str], Sequence]


def _no_progress(items: Sequence, desc: str) -> Sequence:
    return items


# --- clips -------------------------------------------------------------------------------------


def centred(x: np.ndarray, length: int = CLIP_SAMPLES) -> np.ndarray:
    """``x`` centred in ``length`` samples of zeros (or its centre ``length`` samples)."""
    if len(x) >= length:
        s = (len(x) - length) // 2
        return x[s : s + length]
    out = np.zeros(length, np.float32)
    s = (length - len(x)) // 2
    out[s : s + len(x)] = x
    return out


def graph_logits(model: StepModel, audio: np.ndarray) -> np.ndarray:
    """Frame logits ``(classes, frames)`` of ``audio (T,)`` streamed from the graph's start state.

    The tail is zero-padded to whole chunks; frames past ``T // stride`` are dropped.
    """
    return model.process(audio)[:, : len(audio) // model.info.stride]


def clip_logits(model: StepModel, audio: np.ndarray) -> np.ndarray:
    """Logits ``(classes,)`` of one clip: the last whole frame of the centred one-second clip."""
    x = centred(audio)
    x = x[: len(x) - len(x) % model.info.stride]
    return graph_logits(model, x)[:, -1]


@dataclass
class ClipResult:
    """Per-clip references and predictions of one clip set."""

    name: str
    labels: list[str]  # the model's classes
    refs: list[str]  # reference class in the model's label set
    words: list[str]  # the spoken word (or ``_silence_``)
    preds: list[str]

    def accuracy(self) -> float:
        return float(np.mean([r == p for r, p in zip(self.refs, self.preds, strict=True)])) if self.refs else 0.0

    def sc12(self) -> dict:
        """The 12-class protocol: predictions and references mapped to SC12."""
        ref = [_to_sc12(w) for w in self.words]
        hyp = [_to_sc12(p) for p in self.preds]
        per = {c: _acc([h for r, h in zip(ref, hyp, strict=True) if r == c], c) for c in SC12_LABELS}
        confusion = Counter(zip(ref, hyp, strict=True))
        return {
            "accuracy": float(np.mean([r == h for r, h in zip(ref, hyp, strict=True)])),
            "per_class": {c: v for c, v in per.items() if v is not None},
            "confusion": [[confusion[(r, h)] for h in SC12_LABELS] for r in SC12_LABELS],
            "clips": len(ref),
        }

    def per_word(self) -> dict[str, dict[str, float]]:
        """Accuracy and count per spoken word (the model must name the exact word)."""
        by = defaultdict(list)
        for w, p in zip(self.words, self.preds, strict=True):
            by[w].append(p == w)
        return {w: {"accuracy": float(np.mean(v)), "clips": len(v)} for w, v in sorted(by.items())}


def _to_sc12(label: str) -> str:
    if label in (SILENCE, UNKNOWN):
        return label
    return map_word(label, "sc12") or UNKNOWN


def _acc(hyps: list[str], c: str) -> float | None:
    return float(np.mean([h == c for h in hyps])) if hyps else None


def clip_set(name: str) -> list[tuple[Clip, str]]:
    """``(clip, spoken word)`` pairs of a named evaluation set."""
    if name == "sc-test":
        return [(c, c.text) for c in shared_sc_test()]
    if name == "synth-test":
        clips = [c for c in read_manifest(synth_manifest("default")) if c.split == "test" and c.label]
        return [(c, c.label) for c in clips]
    if name == "fsdd":
        return [(c, c.label) for c in shared_fsdd() if c.split == "test"]
    if name == "sc-validation":
        # real speakers outside the shared test half that no recipe trains on: the speaker-hash validation
        # share of the shared training clips (assign_split, the recipes' default 10%)
        return [(c, c.text) for c in shared_sc_train() if assign_split(c) == "validation"]
    raise ValueError(f"unknown clip set {name!r}; choose from {CLIP_SETS}")


CLIP_SETS = ("sc-test", "sc-validation", "synth-test", "fsdd")


def evaluate_clips(model: StepModel, name: str, progress: Progress = _no_progress) -> ClipResult:
    labels = model.info.labels
    refs, words, preds = [], [], []
    for clip, word in progress(clip_set(name), name):
        x = load_audio(clip.path)[0]
        preds.append(labels[int(np.argmax(clip_logits(model, x)))])
        words.append(word)
        refs.append(word if word in labels else UNKNOWN)
    return ClipResult(name, labels, refs, words, preds)


# --- streams ------------------------------------------------------------------------------------


def trim(x: np.ndarray, floor_db: float = -35.0) -> np.ndarray:
    """The part of a keyword clip between the first and last 10 ms frame within ``floor_db`` of the loudest."""
    return speech_span(x, floor_db)


@dataclass
class StreamSet:
    kind: str
    audio: np.ndarray
    placements: list[Placement]


def keyword_clips(source: str = "sc-test") -> list[Clip]:
    """Keyword clips for test streams: ``sc-test`` (real, held out) or ``synth-validation``
    (the synthetic validation voices: for choosing thresholds without looking at the test data)."""
    if source == "sc-test":
        return [c for c in shared_sc_test() if c.text != SILENCE]
    if source == "synth-validation":
        clips = read_manifest(synth_manifest("default"))
        return [replace(c, text=c.label) for c in clips if c.split == "validation" and c.label and c.label != UNKNOWN]
    raise ValueError(f"unknown keyword source {source!r} (sc-test or synth-validation)")


def keyword_streams(per_kind: int, seed: int = 0, kinds: Sequence[str] = backgrounds.KINDS,
                    source: str = "sc-test") -> list[StreamSet]:  # fmt: skip
    """One long stream per background kind with ``per_kind`` keywords at known times.

    Keywords are drawn without replacement, the 10 commands and the 25 other words alike, each
    trimmed to its spoken part and mixed at 5-20 dB SNR against the background around it (and at
    least -35 dBFS: :func:`~edgessm.eval.streams.build_stream`), 2-5 s apart.
    With ``source="synth-validation"`` keywords and speech backgrounds come from validation voices.
    """
    rng = np.random.default_rng(seed)
    pool = keyword_clips(source)
    order = rng.permutation(len(pool))
    speech_source = "real" if source == "sc-test" else "synth-validation"
    out = []
    for k, kind in enumerate(kinds):
        picked = [pool[i] for i in order[k * per_kind : (k + 1) * per_kind]]
        words = [(c.text, trim(load_audio(c.path)[0])) for c in picked]
        seconds = sum(len(w) / SAMPLE_RATE + 3.5 for _, w in words) + 5.0
        bg = backgrounds.background(kind, seconds, rng, speech_source)
        audio, places = build_stream(bg, words, rng, gap_s=(2.0, 5.0), snr_db=(5.0, 20.0))
        out.append(StreamSet(kind, audio, places))
    return out


COMMANDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")


def session_streams(per_stream: int = 200, seed: int = 0) -> list[StreamSet]:
    """Streams like a user's session: held-out real speakers saying keywords with 1.5-2.5 s pauses over a
    quiet real room/noise recording (-50 dBFS), each word at -30..-15 dBFS (20-35 dB above the room).
    Two streams: ``session-commands`` (the ten commands) and ``session-35`` (every keyword alike)."""
    rng = np.random.default_rng([seed, 7])
    pool = keyword_clips("sc-test")
    out = []
    for kind, words in (("session-commands", COMMANDS), ("session-35", None)):
        chosen = [c for c in pool if words is None or c.text in words]
        picked = [chosen[i] for i in rng.permutation(len(chosen))[:per_stream]]
        clips = [(c.text, trim(load_audio(c.path)[0])) for c in picked]
        seconds = sum(len(w) / SAMPLE_RATE + 2.5 for _, w in clips) + 3.0
        bg = set_level(backgrounds.noise(seconds, rng), -50.0)
        audio, places = build_stream(bg, clips, rng, gap_s=(1.5, 2.5), snr_db=(20.0, 35.0), min_level_dbfs=-30.0)
        out.append(StreamSet(kind, audio, places))
    return out


QUIET_DB = -15.0  # the quiet-microphone session: the ten-command session this much quieter


LOUD_DB = 12.0  # the close-microphone session: the ten-command session this much louder


def quiet_sessions(sessions: Sequence[StreamSet]) -> list[StreamSet]:
    """The ten-command session of :func:`session_streams` (``sessions``) played ``QUIET_DB`` quieter
    (``session-quiet``): a quiet microphone or a talker across the room, words at -45..-30 dBFS over a -65 dBFS
    room."""
    s = next(s for s in sessions if s.kind == "session-commands")
    return [StreamSet("session-quiet", (s.audio * 10 ** (QUIET_DB / 20)).astype(np.float32), s.placements)]


def loud_sessions(sessions: Sequence[StreamSet]) -> list[StreamSet]:
    """The ten-command session of :func:`session_streams` (``sessions``) played ``LOUD_DB`` louder
    (``session-loud``): a close microphone, words at -18..-3 dBFS, clipped at full scale as a microphone clips."""
    s = next(s for s in sessions if s.kind == "session-commands")
    loud = np.clip(s.audio * 10 ** (LOUD_DB / 20), -1.0, 1.0).astype(np.float32)
    return [StreamSet("session-loud", loud, s.placements)]


def keyword_free_hour(seconds: float = 3600.0, seed: int = 1, speech_source: str = "real") -> list[StreamSet]:
    """Keyword-free audio split evenly over the background kinds (default one hour in all)."""
    rng = np.random.default_rng(seed)
    share = seconds / len(backgrounds.KINDS)
    return [StreamSet(k, backgrounds.background(k, share, rng, speech_source), []) for k in backgrounds.KINDS]


@dataclass
class ReadSpeech:
    """Running read speech with its transcripts: ``audio (T,)`` and, per utterance, ``(start, end, words)`` in
    samples (``end`` includes the pause after it) with the set of words its transcript says."""

    audio: np.ndarray
    spans: list[tuple[int, int, frozenset[str]]]

    def words_at(self, sample: int) -> frozenset[str]:
        """The words of the utterance (or the pause after it) that ``sample`` falls in."""
        for start, end, words in self.spans:
            if start <= sample < end:
                return words
        return frozenset()


READ_LEVELS = {"everyday": (-35.0, -20.0), "loud": (-23.0, -8.0)}
"""RMS levels (dBFS) of the read-speech utterances: a room microphone, and a close or loud one (12 dB higher:
what a headset or a phone held near the mouth records; running speech there is louder than most commands)."""


def read_speech(clips: Sequence[Clip] | None = None, seed: int = 0,
                level_dbfs: tuple[float, float] = READ_LEVELS["everyday"]) -> ReadSpeech:  # fmt: skip
    """Every utterance of ``clips`` (default: Mini LibriSpeech's validation readers, whom no recipe trains on:
    ~1.1 h, 317 utterances) once, in a seeded order, each at an RMS level uniform in ``level_dbfs`` with
    0.3-1.0 s pauses: running speech in which most keywords are never said and some are (its transcripts say
    which). The same ``seed`` gives the same order, levels (relative to the range) and pauses at any range."""
    if clips is None:
        from edgessm.data.corpora import shared_librispeech_5

        clips = [c for c in shared_librispeech_5() if assign_split(c) == "validation"]
    if not clips:
        raise ValueError("no transcribed read speech to stream")
    rng = np.random.default_rng(seed)
    parts, spans, pos = [], [], 0
    for k in rng.permutation(len(clips)):
        c = clips[int(k)]
        x = set_level(load_audio(c.path, SAMPLE_RATE)[0], float(rng.uniform(*level_dbfs)))
        pause = np.zeros(int(rng.uniform(0.3, 1.0) * SAMPLE_RATE), np.float32)
        words = frozenset(w.strip("'") for w in (c.text or "").lower().split())
        spans.append((pos, pos + len(x) + len(pause), words))
        parts += [x.astype(np.float32), pause]
        pos += len(x) + len(pause)
    return ReadSpeech(np.concatenate(parts), spans)


def read_speech_false_accepts(model: StepModel, speech: ReadSpeech, thresholds: Sequence[float],
                              config: DecisionConfig, progress: Progress = _no_progress) -> dict:  # fmt: skip
    """False accepts per hour of running read speech (:func:`read_speech`): a detection of a keyword whose
    utterance's transcript says neither it nor a word that sounds like it (:func:`backgrounds.sounds_like_keywords`)
    is false. Without word times, a keyword said anywhere in the utterance excuses every detection of it there,
    so this is a lower bound on the false accepts (and counts the utterances' own keywords as ``said``)."""
    info = model.info
    frame_s = info.stride / info.sample_rate
    logits = graph_logits(model, next(iter(progress([speech.audio], "read speech"))))
    hours = len(speech.audio) / info.sample_rate / 3600
    rows = []
    for th in thresholds:
        dets = detect(logits, info.labels, frame_s, replace(config, threshold=th),
                      covered(speech.audio, logits, info.stride))  # fmt: skip
        false, said = Counter(), Counter()
        for word, t in dets:
            heard = speech.words_at(int(t * info.sample_rate))
            (said if heard & backgrounds.sounds_like_keywords([word]) else false)[word] += 1
        fa = sum(false.values())
        rows.append({"threshold": th, "false_accepts": fa, "false_accepts_per_hour": fa / max(hours, 1e-9),
                     "by_word": dict(false.most_common()), "said_detections": sum(said.values())})  # fmt: skip
    return {"hours": hours, "utterances": len(speech.spans), "sweep": rows}


def pick_threshold(sweep: list[dict], max_fa_per_hour: float) -> float | None:
    """The lowest swept threshold whose false accepts per hour stay within ``max_fa_per_hour``."""
    ok = [row["threshold"] for row in sweep if row["false_accepts_per_hour"] <= max_fa_per_hour]
    return min(ok) if ok else None


def detect(logits: np.ndarray, labels: list[str], frame_s: float, config: DecisionConfig,
           audio: np.ndarray | None = None) -> list[tuple[str, float]]:  # fmt: skip
    """The detections of a whole stream; ``audio``: the samples its frames cover (the contrast gate's levels)."""
    decider = KeywordDecider(labels, frame_s, config)
    return [(d.label, d.time_s) for d in [*decider.process(logits, audio), *decider.flush()]]


def covered(audio: np.ndarray, logits: np.ndarray, stride: int) -> np.ndarray:
    """The samples of ``audio`` that the frames of ``logits (classes, frames)`` were computed from."""
    return audio[: logits.shape[1] * stride]


def stream_logits(model: StepModel, streams: Sequence[StreamSet], progress: Progress = _no_progress) -> dict:
    """Frame logits of each stream, by ``id(stream)``."""
    return {id(s): graph_logits(model, s.audio) for s in progress(streams, "streams")}


def stream_metrics(model: StepModel, streams: list[StreamSet], fa_streams: list[StreamSet],
                   thresholds: Sequence[float], config: DecisionConfig,
                   progress: Progress = _no_progress, calibrated: DecisionConfig | None = None,
                   logits: dict[int, np.ndarray] | None = None) -> dict:  # fmt: skip
    """Detection rate, time error and false accepts per hour, per background and overall, per threshold
    (one global threshold each), and with ``calibrated`` per-keyword thresholds (row ``"calibrated"``).
    ``logits``: the streams' frame logits by ``id(stream)`` when already computed (:func:`stream_logits`)."""
    info = model.info
    frame_s = info.stride / info.sample_rate
    if logits is None:
        logits = stream_logits(model, streams + fa_streams, progress)
    decisions: list[tuple[float | str, DecisionConfig]] = [(th, replace(config, threshold=th)) for th in thresholds]
    if calibrated is not None:
        decisions.append(("calibrated", calibrated))
    # the right word's highest smoothed posterior around each keyword: what any decision on it could reach
    peaks = {id(s): peak_posteriors(smoothed_posteriors(logits[id(s)], config.smooth_frames), s.placements,
                                    info.labels, frame_s) for s in streams}  # fmt: skip
    rows = []
    for th, cfg in decisions:
        row: dict = {"threshold": th, "by_background": {}}
        total_hits = total_kw = wrong = reached = 0
        errors: list[float] = []
        per_word: dict[str, list[int]] = {}
        instead: dict[str, dict[str, int]] = {}  # said -> {the other keyword detected: count}
        for s in streams:
            dets = detect(logits[id(s)], info.labels, frame_s, cfg, covered(s.audio, logits[id(s)], info.stride))
            sc = score_stream(dets, s.placements, len(s.audio) / info.sample_rate)
            need = np.array([cfg.class_thresholds.get(p.label, cfg.threshold) for p in s.placements])
            reach = int(np.sum(np.nan_to_num(peaks[id(s)], nan=-1.0) >= need))
            row["by_background"][s.kind] = {**sc.summary(), "reach_rate": reach / max(1, len(s.placements))}
            reached += reach
            total_hits += sc.hits
            total_kw += sc.hits + sc.misses
            wrong += sc.wrong_words
            errors += sc.time_errors_s
            for said, heard in sc.named_instead.items():
                for word, n in heard.items():
                    instead.setdefault(said, {})[word] = instead.get(said, {}).get(word, 0) + n
            for word, (h, n) in sc.per_word.items():
                per_word.setdefault(word, [0, 0])
                per_word[word][0] += h
                per_word[word][1] += n
        fa = 0
        fa_hours = 0.0
        fa_by: dict[str, int] = {}
        for s in fa_streams:
            dets = detect(logits[id(s)], info.labels, frame_s, cfg, covered(s.audio, logits[id(s)], info.stride))
            fa_by[s.kind] = fa_by.get(s.kind, 0) + len(dets)  # several streams of a kind add up
            fa += len(dets)
            fa_hours += len(s.audio) / info.sample_rate / 3600
        row.update(
            detection_rate=total_hits / max(1, total_kw),
            # keywords whose own posterior reached their threshold around the word (detected or not)
            reach_rate=reached / max(1, total_kw),
            keywords=total_kw,
            wrong_word_rate=wrong / max(1, total_kw),  # detections of another keyword while one is said
            per_word={w: {"hits": h, "keywords": n} for w, (h, n) in sorted(per_word.items())},
            named_instead={w: instead[w] for w in sorted(instead)},  # wrong words: said -> {detected: count}
            time_error_median_s=float(np.median(errors)) if errors else None,
            time_error_p90_abs_s=float(np.percentile(np.abs(errors), 90)) if errors else None,
            false_accepts=fa,
            false_accepts_by_background=fa_by,
            keyword_free_hours=fa_hours,
            false_accepts_per_hour=fa / max(1e-9, fa_hours),
        )
        rows.append(row)
    return {"sweep": rows, "smooth_frames": config.smooth_frames, "refractory_s": config.refractory_s}
