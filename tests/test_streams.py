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
    around = bg[seg.start - 16000 : seg.stop + 16000]  # the background over the word and 1 s either side
    snr = 20 * np.log10(np.sqrt(np.mean(added**2)) / np.sqrt(np.mean(around**2)))
    assert snr == pytest.approx(10.0, abs=0.01)


def test_keywords_in_pauses_are_scaled_to_the_speech_around_them_and_stay_audible() -> None:
    """A keyword that lands in digital silence between background sentences is measured against the
    background around it (+-1 s), and never placed below the speaking-level floor."""
    rng = np.random.default_rng(1)
    sr = 16000
    bg = np.zeros(sr * 40, np.float32)
    for start in range(0, 40, 4):  # 2 s of "speech" at -26 dBFS, then 2 s of digital silence
        bg[start * sr : (start + 2) * sr] = 0.05 * np.sqrt(2) * np.sin(2 * np.pi * 220 * np.arange(2 * sr) / sr)
    tone = np.sin(2 * np.pi * 1000 * np.arange(sr // 2) / sr).astype(np.float32)
    mix, places = build_stream(bg, [("yes", tone)] * 8, rng, snr_db=(10.0, 10.0))
    assert len(places) >= 4
    for p in places:
        seg = slice(int(p.start_s * sr), int(p.end_s * sr))
        level = 20 * np.log10(np.sqrt(np.mean((mix[seg] - bg[seg]) ** 2)))
        around = slice(max(0, seg.start - sr), seg.stop + sr)
        expected = max(20 * np.log10(np.sqrt(np.mean(bg[around] ** 2))) + 10.0, -35.0)
        assert level == pytest.approx(expected, abs=0.01) and level >= -35.01
    quiet = np.full(sr * 10, 1e-5, np.float32)  # a silent room: the word sits at the floor, not 10 dB above -100
    mix, places = build_stream(quiet, [("no", tone)], rng, snr_db=(10.0, 10.0), min_level_dbfs=-30.0)
    seg = slice(int(places[0].start_s * sr), int(places[0].end_s * sr))
    assert 20 * np.log10(np.sqrt(np.mean((mix[seg] - quiet[seg]) ** 2))) == pytest.approx(-30.0, abs=0.01)


def test_scoring_hits_misses_false_accepts_and_time_error() -> None:
    places = [Placement("yes", 1.0, 1.6), Placement("no", 5.0, 5.5), Placement("yes", 9.0, 9.7)]
    dets = [("yes", 1.7), ("yes", 1.9), ("no", 2.5), ("yes", 9.5)]
    s = score_stream(dets, places, duration_s=3600.0)
    assert (s.hits, s.misses, s.false_accepts) == (2, 1, 2)  # a repeat and a wrong-time 'no' are false
    assert s.time_errors_s == pytest.approx([0.1, -0.2])
    assert s.detection_rate == pytest.approx(2 / 3)
    assert s.false_accepts_per_hour == pytest.approx(2.0)
    assert s.summary()["hits"] == 2
    assert s.wrong_words == 1  # 'no' while 'yes' was said; the repeated 'yes' is a false accept, not a wrong word
    assert s.per_word == {"yes": [2, 2], "no": [0, 1]}
    assert s.named_instead == {"yes": {"no": 1}} and s.summary()["named_instead"] == {"yes": {"no": 1}}


def test_a_wrong_word_counts_against_the_keyword_said_nearest_before_it() -> None:
    places = [Placement("left", 1.0, 1.5), Placement("right", 2.0, 2.5)]  # both windows hold t = 2.4
    s = score_stream([("up", 2.4), ("up", 2.45), ("left", 8.0)], places, duration_s=10.0)
    assert s.wrong_words == 2 and s.false_accepts == 3  # the 'left' at 8 s is far from any word: not wrong
    assert s.named_instead == {"right": {"up": 2}}


def test_user_session_streams_hold_real_words_with_short_pauses_over_a_quiet_room() -> None:
    from fixtures import skip_without_shared

    skip_without_shared("speech_commands_test_v0.02", "speech_commands_background_noise")
    from edgessm.eval import kws

    commands, every = kws.session_streams(per_stream=40, seed=1)
    assert (commands.kind, every.kind) == ("session-commands", "session-35")
    assert {p.label for p in commands.placements} <= set(kws.COMMANDS) and len(commands.placements) == 40
    assert len({p.label for p in every.placements}) > 10
    for s in (commands, every):
        gaps = [b.start_s - a.end_s for a, b in zip(s.placements, s.placements[1:], strict=False)]
        assert min(gaps) >= 1.5 - 1e-6 and max(gaps) <= 2.5 + 1e-6
        room = np.concatenate([s.audio[int(a.end_s * 16000) + 800 : int(b.start_s * 16000) - 800]
                               for a, b in zip(s.placements, s.placements[1:], strict=False)])  # fmt: skip
        assert 20 * np.log10(np.sqrt(np.mean(room.astype(np.float64) ** 2))) < -40  # a quiet room between words
