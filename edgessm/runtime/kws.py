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


def graph_decision(meta: dict[str, str], threshold: float | None = None, smooth_frames: int = 4,
                   refractory_s: float = 1.0, keywords: tuple[str, ...] = ()) -> DecisionConfig:  # fmt: skip
    """The decision a graph ships with (its metadata ``threshold`` and calibrated ``class_thresholds``), or
    one global ``threshold`` when the caller gives one (which then replaces the per-keyword ones)."""
    if threshold is not None:
        return DecisionConfig(threshold, smooth_frames, refractory_s, keywords)
    per_class = json.loads(meta["class_thresholds"]) if "class_thresholds" in meta else {}
    return DecisionConfig(float(meta.get("threshold", 0.7)), smooth_frames, refractory_s, keywords, per_class)


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
        strange = set(self.config.class_thresholds) - set(self.labels)
        if strange:
            raise ValueError(f"class thresholds for {sorted(strange)}, which are not labels of this model")
        per_class = self.config.class_thresholds
        self.thresholds = np.array([per_class.get(lab, self.config.threshold) for lab in self.labels])
        self.reset()

    def reset(self) -> None:
        self._window: deque[np.ndarray] = deque(maxlen=max(1, self.config.smooth_frames))
        self._frames = 0
        self._last_fire = -np.inf
        self._armed = True

    def process(self, logits: np.ndarray) -> list[Detection]:
        """Consume frame logits ``(classes, frames)``; returns the detections they trigger."""
        logits = np.asarray(logits, np.float64)
        if logits.ndim != 2 or logits.shape[0] != len(self.labels):
            raise ValueError(f"expected logits of shape ({len(self.labels)}, frames), got {logits.shape}")
        probs = np.exp(logits - logits.max(axis=0))
        probs /= probs.sum(axis=0)
        events = []
        for f in range(probs.shape[1]):
            self._window.append(probs[:, f])
            self._frames += 1
            smooth = np.mean(self._window, axis=0)
            t = self._frames * self.frame_s
            best = int(np.argmax(np.where(self.active, smooth - self.thresholds, -np.inf)))
            if smooth[best] < self.thresholds[best]:
                self._armed = True  # the last detection's word has left the window
            elif self._armed and t - self._last_fire >= self.config.refractory_s:
                events.append(Detection(self.labels[best], t, float(smooth[best])))
                self._last_fire, self._armed = t, False
        return events
