"""Keyword decision layer: threshold, smoothing, refractory period, background classes."""

from __future__ import annotations

import numpy as np
import pytest

from edgessm.runtime.kws import DecisionConfig, KeywordDecider

LABELS = ["yes", "no", "_unknown_", "_silence_"]
FRAME = 0.016


def _logits(seq: list[str], strength: float = 8.0) -> np.ndarray:
    """Frame logits that favour the given label at each frame."""
    out = np.zeros((len(LABELS), len(seq)))
    for f, lab in enumerate(seq):
        out[LABELS.index(lab), f] = strength
    return out


def test_fires_once_per_word_at_the_right_time() -> None:
    d = KeywordDecider(LABELS, FRAME, DecisionConfig(threshold=0.7, smooth_frames=4, refractory_s=0.5))
    seq = ["_silence_"] * 50 + ["yes"] * 20 + ["_silence_"] * 50 + ["no"] * 20 + ["_silence_"] * 20
    events = d.process(_logits(seq))
    assert [e.label for e in events] == ["yes", "no"]
    # smoothing over 4 frames: the average passes 0.7 on the 3rd frame of the word
    assert events[0].time_s == pytest.approx((50 + 3) * FRAME)
    assert events[1].time_s == pytest.approx((120 + 3) * FRAME)


def test_refractory_period_suppresses_repeats_and_chunking_does_not_matter() -> None:
    seq = ["yes"] * 10 + ["_silence_"] * 5 + ["yes"] * 10 + ["_silence_"] * 100 + ["yes"] * 10
    cfg = DecisionConfig(threshold=0.7, smooth_frames=2, refractory_s=1.0)
    whole = KeywordDecider(LABELS, FRAME, cfg).process(_logits(seq))
    # the window fills from the stream start (frame 1 fires); the second "yes" is within 1 s
    assert [round(e.time_s / FRAME) for e in whole] == [1, 127]
    d = KeywordDecider(LABELS, FRAME, cfg)
    chunked = [e for k in range(0, len(seq), 7) for e in d.process(_logits(seq[k : k + 7]))]
    assert chunked == whole


def test_a_word_that_stays_above_threshold_past_the_refractory_period_fires_once() -> None:
    """The head keeps a word in its 1 s window: its posterior can stay high for longer than the
    refractory period. The decider re-arms only after the posterior has dropped below threshold."""
    cfg = DecisionConfig(threshold=0.7, smooth_frames=2, refractory_s=0.5)
    seq = ["_silence_"] * 10 + ["yes"] * 100 + ["_silence_"] * 10 + ["yes"] * 10 + ["no"] * 60
    events = KeywordDecider(LABELS, FRAME, cfg).process(_logits(seq))
    # 1.6 s of "yes" fire once (without re-arming: every 32 frames); the next "yes" follows a dip
    # and fires; "no" dips the smoothed posterior as it takes over and fires once the refractory
    # period after the second "yes" is over (frame 122 + 0.5 s)
    assert [(e.label, round(e.time_s / FRAME)) for e in events] == [("yes", 12), ("yes", 122), ("no", 154)]
    d = KeywordDecider(LABELS, FRAME, cfg)
    chunked = [e for k in range(0, len(seq), 9) for e in d.process(_logits(seq[k : k + 9]))]
    assert chunked == events


def test_background_classes_and_low_confidence_never_fire() -> None:
    d = KeywordDecider(LABELS, FRAME)
    assert d.process(_logits(["_unknown_"] * 100 + ["_silence_"] * 100)) == []
    assert d.process(_logits(["yes"] * 100, strength=0.5)) == []  # posterior ~0.4 < threshold


def test_keyword_subset_and_errors() -> None:
    d = KeywordDecider(LABELS, FRAME, DecisionConfig(keywords=("no",)))
    assert d.process(_logits(["yes"] * 30)) == []
    assert [e.label for e in d.process(_logits(["no"] * 30))] == ["no"]
    with pytest.raises(ValueError, match="not labels"):
        KeywordDecider(LABELS, FRAME, DecisionConfig(keywords=("maybe",)))
    with pytest.raises(ValueError, match="expected logits"):
        d.process(np.zeros((3, 5)))
