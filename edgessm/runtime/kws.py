"""Keyword decisions on a stream of frame logits (torch-free).

Per frame: softmax posteriors, a moving average over ``smooth_frames`` frames, then a keyword
fires when its smoothed posterior crosses its threshold (``class_thresholds`` per keyword,
calibrated on validation streams by :mod:`edgessm.eval.calibrate`, else ``threshold``; when two
cross at once, the one furthest above its own wins) and no keyword fired within the last
``refractory_s`` seconds. After a detection the decider re-arms only once every keyword's smoothed
posterior has fallen back below the threshold: a word stays in the head's one-second window, so
its posterior can stay high for longer than the refractory period, and one word would fire twice.
Background classes (``_silence_``, ``_unknown_``) never fire. The
reported time is the end of the frame at which the smoothed posterior crossed the threshold (the
model's head averages about a second of features, so this is shortly after the word ends).

**Contrast gate** (``contrast_db``, optional): a command is said to the device, after a pause or above
the room, while a word inside running speech is as loud as the speech around it. With the gate a
keyword fires only if its loudest 200 ms (within the last second) stand ``contrast_db`` above the level
of the audio before it (the 75th percentile of the 20 ms frame levels from 1.6 to 0.6 s before that
peak); too little audio before it (the stream's first second) passes. It needs the audio beside the
logits (:meth:`KeywordDecider.process`). On kws35's validation streams, at threshold 0.9, 6 dB took
the false accepts on keyword-free speech from 39 to 23 per hour and kept the keywords said in a quiet
room, over music and over noise within 0.2 points (over running speech: -2.2).

**Speech-after gate** (``speech_after``, optional): a command is followed by a pause (or by the room's
music or noise), a keyword-like word inside a sentence by more speech. With the gate a keyword that
crosses its threshold is held for ``AFTER_S[1]`` seconds and fires only if the model's own ``_unknown_``
posterior (its "other speech" class), averaged over the frames from ``AFTER_S[0]`` to ``AFTER_S[1]``
seconds after the crossing, stays at or below ``speech_after``. The detection keeps the crossing's time;
it is *reported* ``AFTER_S[1]`` seconds later (the decision's added latency). A keyword still held when
the stream ends is decided on the frames heard after it (none: it fires), by :meth:`KeywordDecider.flush`.
The model's posterior, not the level, so keywords over music and noise keep firing (a level test after
the word cut them).

**Strongest word in a hold** (``hold_s``, optional): the start of a word can sound like another keyword
("le-" of *left* like *yes*), whose posterior then crosses first. With a hold a keyword that crosses its
threshold is held for ``hold_s`` seconds (at least the speech-after gate's span when that gate is on), and
the keyword standing furthest above its own threshold at any frame of the hold is the one that fires, at the
time it took the lead. The detection is *reported* when the hold ends (the added latency).

**Margin over the runner-up** (``margin``, optional): a doubtful word is better left silent than named wrong.
With a margin a keyword fires only at a frame where its smoothed posterior stands ``margin`` above every other
keyword's (of all the model's keywords, listened for or not; the background classes do not count); until then it
stays armed, so a word that becomes clear a few frames later still fires. No latency is added.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field

import numpy as np

BACKGROUND = ("_silence_", "_unknown_")


@dataclass(frozen=True)
class Detection:
    label: str
    time_s: float  # stream time of the frame that fired (end of the frame)
    score: float  # smoothed posterior


@dataclass
class DecisionConfig:
    threshold: float = 0.7
    smooth_frames: int = 4
    refractory_s: float = 1.0
    keywords: tuple[str, ...] = ()  # empty: every non-background label
    class_thresholds: dict[str, float] = field(default_factory=dict)  # per keyword; the others: threshold
    contrast_db: float | None = None  # the contrast gate (module docstring); None: off
    speech_after: float | None = None  # the speech-after gate's highest mean _unknown_ posterior; None: off
    hold_s: float = 0.0  # hold a crossing keyword this long; the strongest keyword of the hold fires (0: off)
    margin: float | None = None  # how far a keyword must stand above the runner-up keyword (module docstring)


# the contrast gate's spans, in seconds
PEAK_SPAN_S = 1.0  # where the keyword's loudest moment is looked for, back from the decision
LEVEL_S = 0.2  # the keyword's level: the loudest mean power over this long
BEFORE_S = (1.6, 0.6)  # the level before it: frames from this long to this long before that peak
MIN_BEFORE_S = 0.2  # less audio than this before the peak: the gate passes
# the speech-after gate's span: the frames from this long to this long after the crossing
AFTER_S = (0.1, 0.4)
MAX_HOLD_S = 1.0  # the longest hold (a longer one would reach into the next command)


def check_gates(contrast_db: float | None, speech_after: float | None, contrast_option: str = "--contrast",
                hold_s: float | None = None, margin: float | None = None) -> None:  # fmt: skip
    """A ``ValueError`` naming the option when a gate's value is out of range (``None``: not given)."""
    if margin is not None and not 0 <= margin < 1:
        raise ValueError(f"--margin is a difference of posteriors, 0 (off) to below 1, got {margin:g}")
    if hold_s is not None and not 0 <= hold_s <= MAX_HOLD_S:
        raise ValueError(f"--hold is in seconds, 0 (off) to {MAX_HOLD_S:g}, got {hold_s:g}")
    if contrast_db is not None and not contrast_db >= 0:
        raise ValueError(f"{contrast_option} must be 0 (off) or more dB, got {contrast_db:g}")
    if speech_after is not None and not 0 <= speech_after <= 1:
        raise ValueError(f"--speech-after is a posterior in [0, 1] (0: off), got {speech_after:g}")


def graph_decision(meta: dict[str, str], threshold: float | None = None, smooth_frames: int = 4,
                   refractory_s: float = 1.0, keywords: tuple[str, ...] = (),
                   contrast_db: float | None = None, speech_after: float | None = None,
                   hold_s: float | None = None, margin: float | None = None) -> DecisionConfig:  # fmt: skip
    """The decision a graph ships with (its metadata ``threshold``, calibrated ``class_thresholds``,
    ``contrast_db``, ``speech_after``, ``hold_s`` and ``margin``), or one global ``threshold`` when the caller
    gives one (which then replaces the per-keyword ones). ``contrast_db``, ``speech_after``, ``hold_s`` and
    ``margin`` replace the graph's (0: off)."""
    if contrast_db is None:
        contrast_db = float(meta["contrast_db"]) if "contrast_db" in meta else None
    if speech_after is None:
        speech_after = float(meta["speech_after"]) if "speech_after" in meta else None
    if hold_s is None:
        hold_s = float(meta.get("hold_s", 0.0))
    if margin is None:
        margin = float(meta["margin"]) if "margin" in meta else None
    gates = {
        "contrast_db": contrast_db or None,
        "speech_after": speech_after or None,
        "hold_s": hold_s,
        "margin": margin or None,
    }
    if threshold is not None:
        return DecisionConfig(threshold, smooth_frames, refractory_s, keywords, **gates)
    per_class = json.loads(meta["class_thresholds"]) if "class_thresholds" in meta else {}
    return DecisionConfig(float(meta.get("threshold", 0.7)), smooth_frames, refractory_s, keywords, per_class, **gates)


class KeywordDecider:
    """Turns frame logits ``(classes, frames)`` into :class:`Detection` events, chunk after chunk.

    Args:
        labels: class names in logit order.
        frame_s: seconds per frame (stride / sample rate).
        config: threshold, smoothing and refractory period.
    """

    def __init__(self, labels: list[str], frame_s: float, config: DecisionConfig | None = None) -> None:
        self.labels = list(labels)
        self.frame_s = frame_s
        self.config = config or DecisionConfig()
        wanted = set(self.config.keywords) or {lab for lab in self.labels if lab not in BACKGROUND}
        unknown = wanted - set(self.labels)
        if unknown:
            raise ValueError(f"keywords {sorted(unknown)} are not labels of this model")
        self.active = np.array([lab in wanted and lab not in BACKGROUND for lab in self.labels])
        self._keyword = np.array([lab not in BACKGROUND for lab in self.labels])  # the runner-up's candidates
        strange = set(self.config.class_thresholds) - set(self.labels)
        if strange:
            raise ValueError(f"class thresholds for {sorted(strange)}, which are not labels of this model")
        per_class = self.config.class_thresholds
        self.thresholds = np.array([per_class.get(lab, self.config.threshold) for lab in self.labels])
        if self.config.speech_after is not None and "_unknown_" not in self.labels:
            raise ValueError("the speech-after gate reads the model's _unknown_ posterior; this model has no "
                             "_unknown_ class (turn the gate off: --speech-after 0)")  # fmt: skip
        self._unknown = self.labels.index("_unknown_") if "_unknown_" in self.labels else -1
        self._after = (round(AFTER_S[0] / frame_s), max(1, round(AFTER_S[1] / frame_s)))  # frames after the crossing
        check_gates(
            self.config.contrast_db, self.config.speech_after, hold_s=self.config.hold_s, margin=self.config.margin
        )
        hold = round(self.config.hold_s / frame_s)
        if self.config.speech_after is not None:
            hold = max(hold, self._after[1])
        self._hold = hold  # frames a crossing keyword is held (0: it fires at once)
        self.reset()

    def reset(self) -> None:
        self._window: deque[np.ndarray] = deque(maxlen=max(1, self.config.smooth_frames))
        self._frames = 0
        self._last_fire = -np.inf
        self._armed = True
        self._power = np.zeros(0)  # mean power of the latest frames, oldest first (contrast gate)
        self._span = round((PEAK_SPAN_S + BEFORE_S[0] + LEVEL_S) / self.frame_s) + 1  # frames the gate reads
        self._held: Detection | None = None  # a keyword waiting for its hold or the speech-after gate to end
        self._held_frame = 0  # the frame count at its crossing
        self._speech: list[float] = []  # _unknown_ posteriors of the frames after it, within the gate's span
        self._lead = -np.inf  # how far the held keyword stands above its threshold (the hold's best)

    def process(self, logits: np.ndarray, audio: np.ndarray | None = None) -> list[Detection]:
        """Consume frame logits ``(classes, frames)``; returns the detections they trigger. ``audio (frames *
        stride,)``: the graph-rate samples the frames were computed from (needed by the contrast gate)."""
        logits = np.asarray(logits, np.float64)
        if logits.ndim != 2 or logits.shape[0] != len(self.labels):
            raise ValueError(f"expected logits of shape ({len(self.labels)}, frames), got {logits.shape}")
        frames = logits.shape[1]
        if self.config.contrast_db is not None:
            if audio is None or (frames and len(audio) % frames) or (not frames and len(audio)):
                got = "no audio" if audio is None else f"{len(audio)} samples"
                raise ValueError(f"the contrast gate needs the audio of the {frames} frames (a whole number of "
                                 f"samples per frame), got {got}")  # fmt: skip
        power, past = self._power, len(self._power)
        if self.config.contrast_db is not None and frames:
            x = np.asarray(audio, np.float64).reshape(frames, -1)
            power = np.concatenate([self._power, np.mean(x * x, axis=1)])
            self._power = power[-self._span :]
        probs = np.exp(logits - logits.max(axis=0))
        probs /= probs.sum(axis=0)
        events = []
        for f in range(frames):
            self._window.append(probs[:, f])
            self._frames += 1
            if self._held is not None:  # one more frame after the held keyword
                if self._after[0] < self._frames - self._held_frame <= self._after[1]:  # the speech-after span
                    self._speech.append(float(probs[self._unknown, f]))
                if self._frames - self._held_frame >= self._hold:
                    events += self.flush()
            smooth = np.mean(self._window, axis=0)
            t = self._frames * self.frame_s
            above = np.where(self.active, smooth - self.thresholds, -np.inf)
            best = int(np.argmax(above))
            if self._held is not None and self.config.hold_s and above[best] > self._lead:
                held = self._held  # the hold's strongest keyword so far: it fires when the hold ends
                keep = held.label == self.labels[best]
                self._held = Detection(self.labels[best], held.time_s if keep else t, float(smooth[best]))
                self._lead = float(above[best])
            if smooth[best] < self.thresholds[best]:
                self._armed = True  # the last detection's word has left the window
            elif (self._armed and t - self._last_fire >= self.config.refractory_s and self._leads(smooth, best)
                  and self._stands_out(power, past + f)):  # fmt: skip
                detection = Detection(self.labels[best], t, float(smooth[best]))
                if not self._hold:
                    events.append(detection)
                else:  # held until the hold (and the speech-after gate's span) has passed
                    events += self.flush()  # one held before it (a refractory period shorter than the hold)
                    self._held, self._held_frame, self._speech = detection, self._frames, []
                    self._lead = float(above[best])
                self._last_fire, self._armed = t, False
        return events

    def flush(self) -> list[Detection]:
        """The held keyword (hold, speech-after gate), decided on the frames heard after it: call at the end
        of a stream (a keyword right at its end has no frames after it, and fires)."""
        held, self._held = self._held, None
        gate = self.config.speech_after
        if held is None or (gate is not None and self._speech and np.mean(self._speech) > gate):
            return []
        return [held]

    def _leads(self, smooth: np.ndarray, best: int) -> bool:
        """The runner-up gate: keyword ``best`` stands ``margin`` above every other keyword (True without it)."""
        if self.config.margin is None:
            return True
        others = self._keyword.copy()
        others[best] = False
        runner_up = float(smooth[others].max()) if others.any() else 0.0
        return float(smooth[best]) - runner_up >= self.config.margin

    def _stands_out(self, power: np.ndarray, frame: int) -> bool:
        """The contrast gate at ``frame`` of the frame powers ``power`` (True without a gate)."""
        if self.config.contrast_db is None:
            return True
        return contrast_db(power[max(0, frame + 1 - self._span) : frame + 1], self.frame_s) >= self.config.contrast_db


def contrast_db(power: np.ndarray, frame_s: float) -> float:
    """How far (dB) the loudest ``LEVEL_S`` of the last ``PEAK_SPAN_S`` stand above the level before them
    (the 75th percentile of the frame levels from ``BEFORE_S[0]`` to ``BEFORE_S[1]`` before that peak);
    ``inf`` with less than ``MIN_BEFORE_S`` of audio before it. ``power (frames,)``: mean power per frame,
    oldest first, the decision's frame last."""
    n = len(power)
    level = max(1, round(LEVEL_S / frame_s))
    if n == 0:
        return np.inf
    sums = np.cumsum(np.concatenate([[0.0], power]))
    start = np.maximum(np.arange(n) - level + 1, 0)
    mean = (sums[1:] - sums[start]) / (np.arange(n) - start + 1)  # causal mean over LEVEL_S (fewer at the start)
    lo = max(0, n - 1 - round(PEAK_SPAN_S / frame_s))
    peak = lo + int(np.argmax(mean[lo:]))
    before = power[max(0, peak - round(BEFORE_S[0] / frame_s)) : max(0, peak - round(BEFORE_S[1] / frame_s))]
    if len(before) < max(1, round(MIN_BEFORE_S / frame_s)):
        return np.inf
    return float(10 * np.log10(mean[peak] + 1e-12) - np.percentile(10 * np.log10(before + 1e-12), 75))
