"""Long-stream keyword evaluation: placement and scoring."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from edgessm.eval.streams import Placement, build_stream, score_stream


def test_build_stream_places_keywords_at_the_requested_snr() -> None:
    rng = np.random.default_rng(0)
    bg = (0.01 * rng.normal(size=16000 * 30)).astype(np.float32)
    tone = np.sin(2 * np.pi * 500 * np.arange(8000) / 16000).astype(np.float32)
    mix, places = build_stream(bg, [("yes", tone), ("no", tone)] * 10, rng, snr_db=(10.0, 10.0))
    assert mix.shape == bg.shape and len(places) >= 4
    assert all(b.start_s >= a.end_s + 2.0 - 1e-9 for a, b in itertools.pairwise(places))
    p = places[0]
    seg = slice(int(p.start_s * 16000), int(p.end_s * 16000))
    added = mix[seg] - bg[seg]
    snr = 20 * np.log10(np.sqrt(np.mean(added**2)) / np.sqrt(np.mean(bg[seg] ** 2)))
    assert snr == pytest.approx(10.0, abs=0.01)


def test_scoring_hits_misses_false_accepts_and_time_error() -> None:
    places = [Placement("yes", 1.0, 1.6), Placement("no", 5.0, 5.5), Placement("yes", 9.0, 9.7)]
    dets = [("yes", 1.7), ("yes", 1.9), ("no", 2.5), ("yes", 9.5)]
    s = score_stream(dets, places, duration_s=3600.0)
    assert (s.hits, s.misses, s.false_accepts) == (2, 1, 2)  # a repeat and a wrong-time 'no' are false
    assert s.time_errors_s == pytest.approx([0.1, -0.2])
    assert s.detection_rate == pytest.approx(2 / 3)
    assert s.false_accepts_per_hour == pytest.approx(2.0)
    assert s.summary()["hits"] == 2
