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


def _posteriors(levels: dict[str, list[float]], frames: int) -> np.ndarray:
    """Logits whose softmax gives each keyword the listed posterior per frame (the rest to _unknown_)."""
    p = np.full((len(LABELS), frames), 1e-6)
    for lab, seq in levels.items():
        p[LABELS.index(lab)] = np.maximum(seq, 1e-6)
    p[LABELS.index("_unknown_")] = np.clip(1 - p.sum(0) + p[LABELS.index("_unknown_")], 1e-6, None)
    return np.log(p)


def test_per_keyword_thresholds_fire_each_word_at_its_own_level() -> None:
    """`class_thresholds`: "no" needs 0.9, "yes" only 0.5 (the rest: `threshold`)."""
    seq = {"yes": [0.6] * 10 + [0.0] * 60 + [0.0] * 10, "no": [0.0] * 10 + [0.0] * 60 + [0.8] * 10}
    cfg = DecisionConfig(threshold=0.7, smooth_frames=1, class_thresholds={"no": 0.9, "yes": 0.5})
    assert [e.label for e in KeywordDecider(LABELS, FRAME, cfg).process(_posteriors(seq, 80))] == ["yes"]
    loose = DecisionConfig(threshold=0.7, smooth_frames=1, class_thresholds={"no": 0.75})
    assert [e.label for e in KeywordDecider(LABELS, FRAME, loose).process(_posteriors(seq, 80))] == ["no"]
    # two words above their thresholds at once: the one furthest above its own wins
    both = {"yes": [0.45] * 5, "no": [0.5] * 5}
    cfg = DecisionConfig(threshold=0.7, smooth_frames=1, class_thresholds={"no": 0.49, "yes": 0.3})
    assert [e.label for e in KeywordDecider(LABELS, FRAME, cfg).process(_posteriors(both, 5))] == ["yes"]
    with pytest.raises(ValueError, match="maybe"):
        KeywordDecider(LABELS, FRAME, DecisionConfig(class_thresholds={"maybe": 0.5}))


def test_graph_decision_reads_the_shipped_thresholds_and_a_given_threshold_replaces_them() -> None:
    from edgessm.runtime.kws import graph_decision

    meta = {"threshold": "0.8", "class_thresholds": '{"yes": 0.6, "no": 0.95}'}
    shipped = graph_decision(meta)
    assert shipped.threshold == 0.8 and shipped.class_thresholds == {"yes": 0.6, "no": 0.95}
    mine = graph_decision(meta, threshold=0.5, smooth_frames=3)
    assert mine.threshold == 0.5 and mine.class_thresholds == {} and mine.smooth_frames == 3
    assert graph_decision({}).threshold == 0.7 and graph_decision({}).class_thresholds == {}


def test_calibration_helpers_match_the_live_decider() -> None:
    """Smoothing and one-class crossings as the decider counts them; the allocation spends its budget on
    the keyword that buys the most detections per false accept."""
    from edgessm.eval.calibrate import allocate, crossings, single_index
    from edgessm.eval.streams import smoothed_posteriors

    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, (len(LABELS), 400))
    post = smoothed_posteriors(logits, 4)
    p = np.exp(logits - logits.max(0))
    p /= p.sum(0)
    assert np.allclose(post[:, 10], p[:, 7:11].mean(1)) and np.allclose(post[:, 1], p[:, :2].mean(1))
    grid = [0.9, 0.6, 0.3]
    for g, t in enumerate(grid):
        live = KeywordDecider(LABELS, FRAME, DecisionConfig(t, 4, 0.2, ("yes",))).process(logits)
        assert crossings(post[0], grid, refractory=round(0.2 / FRAME))[g] == len(live), t
    # class 0: 10 more hits for 1 false accept; class 1: 2 more hits for 1; budget 1: class 0 moves
    hits = np.array([[0, 0, 10], [0, 2, 2]])
    fa = np.array([[0, 0, 1], [0, 1, 1]])
    assert allocate(hits, fa, budget=1).tolist() == [2, 0]  # over a flat stretch to the better point
    assert allocate(hits, fa, budget=2).tolist() == [2, 1]
    assert allocate(hits, fa, budget=0).tolist() == [0, 0]
    # a third class no validation keyword scores: without a fallback it could never be heard (the highest
    # threshold); with one it keeps the one threshold that meets the budget, its false accepts spent first
    hits3, fa3 = np.vstack([hits, [0, 0, 0]]), np.vstack([fa, [0, 0, 1]])
    assert allocate(hits3, fa3, budget=2).tolist() == [2, 1, 0]
    assert single_index(fa3, budget=2) == 1 and single_index(fa3, budget=0) == 0
    assert allocate(hits3, fa3, budget=2, fallback=1).tolist() == [2, 1, 1]
    assert allocate(hits3, fa3, budget=2, fallback=2).tolist() == [2, 0, 2]  # its accept leaves one for class 0


def test_stream_metrics_tell_a_posterior_that_never_rose_from_one_the_decision_lost() -> None:
    """``reach_rate``: keywords whose own smoothed posterior reached the threshold around the word. A word
    heard after another keyword fired inside its window reaches it but is lost to the refractory period;
    a word the model is unsure of never reaches it."""
    from types import SimpleNamespace

    from edgessm.eval.kws import StreamSet, stream_metrics
    from edgessm.eval.streams import Placement, peak_posteriors, smoothed_posteriors

    seq = ["_silence_"] * 60 + ["yes"] * 20 + ["_silence_"] * 100 + ["yes"] * 6 + ["no"] * 14
    seq += ["_silence_"] * 100 + ["weak-no"] * 20 + ["_silence_"] * 80
    logits = _logits([lab if lab != "weak-no" else "_unknown_" for lab in seq])
    weak = [f for f, lab in enumerate(seq) if lab == "weak-no"]
    logits[:, weak] = 0.0
    logits[LABELS.index("no"), weak] = 1.0  # p(no) = e / (e + 3) = 0.475
    places = [Placement("yes", 60 * FRAME, 80 * FRAME), Placement("no", 180 * FRAME, 200 * FRAME),
              Placement("no", 300 * FRAME, 320 * FRAME)]  # fmt: skip
    peaks = peak_posteriors(smoothed_posteriors(logits, 4), places, LABELS, FRAME)
    assert peaks[0] > 0.99 and peaks[1] > 0.99 and peaks[2] == pytest.approx(np.e / (np.e + 3))
    assert np.isnan(peak_posteriors(smoothed_posteriors(logits, 4), [Placement("up", 0.0, 0.5)], LABELS, FRAME)[0])
    model = SimpleNamespace(info=SimpleNamespace(labels=LABELS, stride=256, sample_rate=16000))
    stream = StreamSet("session-commands", np.zeros(len(seq) * 256, np.float32), places)
    report = stream_metrics(model, [stream], [], [0.9, 0.4], DecisionConfig(0.9, 4, 1.0),
                            logits={id(stream): logits})  # fmt: skip
    at_09, at_04 = report["sweep"]
    assert at_09["detection_rate"] == pytest.approx(1 / 3) and at_09["reach_rate"] == pytest.approx(2 / 3)
    assert at_09["wrong_word_rate"] == pytest.approx(1 / 3)  # "yes" fired inside the first "no"'s window
    assert at_04["detection_rate"] == pytest.approx(2 / 3) and at_04["reach_rate"] == pytest.approx(1.0)
    assert at_04["by_background"]["session-commands"]["reach_rate"] == pytest.approx(1.0)
    per_class = DecisionConfig(0.9, 4, 1.0, class_thresholds={"no": 0.4})  # the per-keyword thresholds count
    calibrated = stream_metrics(model, [stream], [], [0.9], DecisionConfig(0.9, 4, 1.0), calibrated=per_class,
                                logits={id(stream): logits})["sweep"][-1]  # fmt: skip
    assert calibrated["threshold"] == "calibrated" and calibrated["reach_rate"] == pytest.approx(1.0)


def _gate_case(level_before: float, word_level: float = 0.3, stride: int = 320) -> tuple[np.ndarray, np.ndarray]:
    """2 s of audio at ``level_before`` (RMS), then a 0.5 s "yes" at ``word_level``, then 1 s at the
    first level; the logits say "yes" from the word's start on (20 ms frames)."""
    rng = np.random.default_rng(0)
    levels = [level_before] * 100 + [word_level] * 25 + [level_before] * 50
    audio = np.concatenate([lv * rng.standard_normal(stride) for lv in levels]).astype(np.float32)
    seq = ["_silence_"] * 100 + ["yes"] * 40 + ["_silence_"] * 35
    return _logits(seq), audio


@pytest.mark.parametrize(("before", "fires"), [(0.003, True), (0.1, True), (0.3, False), (0.25, False)])
def test_the_contrast_gate_passes_a_word_that_stands_out_and_stops_one_inside_loud_speech(before, fires) -> None:
    """A word 40 or 10 dB above the two seconds before it fires; one as loud as what precedes it (a word
    inside running speech) does not, nor at 1.6 dB above it; a passed word fires within 0.1 s of the
    ungated decider (the word's level is a 200 ms mean), and chunking does not change it."""
    logits, audio = _gate_case(before)
    cfg = DecisionConfig(threshold=0.7, smooth_frames=4, contrast_db=6.0)
    events = KeywordDecider(LABELS, 0.02, cfg).process(logits, audio)
    assert [e.label for e in events] == (["yes"] if fires else [])
    plain = KeywordDecider(LABELS, 0.02, DecisionConfig(threshold=0.7, smooth_frames=4)).process(logits)
    assert len(plain) == 1 and (not fires or 0 <= events[0].time_s - plain[0].time_s <= 0.1)
    d = KeywordDecider(LABELS, 0.02, cfg)
    chunked = [e for k in range(0, logits.shape[1], 4)
               for e in d.process(logits[:, k : k + 4], audio[k * 320 : (k + 4) * 320])]  # fmt: skip
    assert chunked == events


def test_the_contrast_gate_passes_a_word_at_the_stream_start_and_needs_the_audio() -> None:
    from edgessm.runtime.kws import contrast_db, graph_decision

    assert contrast_db(np.full(5, 0.1), 0.02) == np.inf  # no second before the word yet: it passes
    assert contrast_db(np.full(141, 0.1), 0.02) == pytest.approx(0.0)
    cfg = DecisionConfig(threshold=0.7, contrast_db=6.0)
    with pytest.raises(ValueError, match="contrast gate needs the audio of the 3 frames"):
        KeywordDecider(LABELS, 0.02, cfg).process(_logits(["yes"] * 3))
    with pytest.raises(ValueError, match="got 100 samples"):
        KeywordDecider(LABELS, 0.02, cfg).process(_logits(["yes"] * 3), np.zeros(100))
    assert graph_decision({"contrast_db": "6"}).contrast_db == 6.0
    assert graph_decision({"contrast_db": "6"}, contrast_db=0).contrast_db is None  # listen --contrast 0: off
    assert graph_decision({"contrast_db": "6"}, threshold=0.5).contrast_db == 6.0
    assert graph_decision({}).contrast_db is None


@pytest.mark.parametrize(("after", "fires"), [("_silence_", True), ("_unknown_", False), ("no", True)])
def test_the_speech_after_gate_holds_a_keyword_and_drops_one_followed_by_speech(after, fires) -> None:
    """A keyword followed by a pause (or by another keyword: not "other speech") fires with its crossing's
    time, reported once the 0.4 s after it have been heard; one followed by running speech (``_unknown_``)
    never fires. Chunking does not change it, and nothing fires before the gate has seen its span."""
    from edgessm.runtime.kws import AFTER_S

    frame = 0.02
    seq = ["_silence_"] * 50 + ["yes"] * 15 + [after] * 40
    cfg = DecisionConfig(threshold=0.7, smooth_frames=4, refractory_s=2.0, speech_after=0.5)
    plain = KeywordDecider(LABELS, frame, DecisionConfig(threshold=0.7, smooth_frames=4, refractory_s=2.0))
    crossing = plain.process(_logits(seq))[0]
    d = KeywordDecider(LABELS, frame, cfg)
    reported = {}  # detection -> frames heard when it was reported
    for k in range(len(seq)):
        for e in d.process(_logits(seq[k : k + 1])):
            reported[e] = k + 1
    assert d.flush() == []
    if not fires:
        assert reported == {}
        return
    assert list(reported) == [crossing]  # the crossing's label, time and score
    assert reported[crossing] == round(crossing.time_s / frame) + round(AFTER_S[1] / frame)
    d = KeywordDecider(LABELS, frame, cfg)
    whole = [*d.process(_logits(seq)), *d.flush()]
    assert whole == [crossing]


def test_the_speech_after_gate_decides_a_keyword_at_the_stream_end_on_what_it_heard() -> None:
    from edgessm.runtime.kws import graph_decision

    cfg = DecisionConfig(threshold=0.7, smooth_frames=4, speech_after=0.5)
    d = KeywordDecider(LABELS, 0.02, cfg)
    assert d.process(_logits(["_silence_"] * 20 + ["yes"] * 6)) == []  # held
    assert [e.label for e in d.flush()] == ["yes"]  # nothing heard after it: it fires
    assert d.flush() == []  # once
    d = KeywordDecider(LABELS, 0.02, cfg)
    assert d.process(_logits(["_silence_"] * 20 + ["yes"] * 6 + ["_unknown_"] * 12)) == []
    assert d.flush() == []  # speech after it, within the span heard so far
    with pytest.raises(ValueError, match="no _unknown_ class"):
        KeywordDecider(["yes", "no", "_silence_"], 0.02, cfg)
    assert graph_decision({"speech_after": "0.5"}).speech_after == 0.5
    assert graph_decision({"speech_after": "0.5"}, speech_after=0).speech_after is None  # --speech-after 0: off
    assert graph_decision({"speech_after": "0.5", "contrast_db": "6"}, threshold=0.8).speech_after == 0.5
    assert graph_decision({}).speech_after is None


def _onset_then_word(weak: str = "no", strong: str = "yes") -> np.ndarray:
    """A word whose start sounds like another keyword: ``weak`` crosses 0.7 first (posterior ~0.87),
    then ``strong`` takes over (~1.0)."""
    out = _logits(["_silence_"] * 50 + [weak] * 5 + [strong] * 15 + ["_silence_"] * 60)
    out[LABELS.index(weak), 50:55] = 3.0
    return out


def test_a_hold_fires_the_strongest_keyword_of_the_hold_at_the_time_it_took_the_lead() -> None:
    """Without a hold the onset's keyword fires; with one the word that follows and stands higher replaces
    it, with the time it took the lead, reported when the hold ends; chunking does not change it."""
    from edgessm.runtime.kws import graph_decision

    frame = 0.02
    base = {"threshold": 0.7, "smooth_frames": 4, "refractory_s": 2.0}
    logits = _onset_then_word()
    plain = KeywordDecider(LABELS, frame, DecisionConfig(**base)).process(logits)
    assert [e.label for e in plain] == ["no"]
    cfg = DecisionConfig(**base, hold_s=0.3)
    d = KeywordDecider(LABELS, frame, cfg)
    reported = {}
    for k in range(logits.shape[1]):
        for e in d.process(logits[:, k : k + 1]):
            reported[e] = k + 1
    assert d.flush() == []
    ((event, heard),) = reported.items()
    assert event.label == "yes" and event.score > 0.99
    # "yes" starts at frame 56; its 4-frame mean stands further above 0.7 than no's best (0.87) from frame 59
    assert round(event.time_s / frame) == 59
    assert heard == round(plain[0].time_s / frame) + 15  # reported 0.3 s after the first crossing
    d = KeywordDecider(LABELS, frame, cfg)
    assert [*d.process(logits), *d.flush()] == [event]
    # the same word rising further keeps its first crossing's time
    same = KeywordDecider(LABELS, frame, cfg)
    fired = [*same.process(_onset_then_word("yes", "yes")), *same.flush()]
    assert [(e.label, round(e.time_s / frame)) for e in fired] == [("yes", round(plain[0].time_s / frame))]
    assert graph_decision({"hold_s": "0.3"}).hold_s == 0.3
    assert graph_decision({"hold_s": "0.3"}, hold_s=0).hold_s == 0
    assert graph_decision({}).hold_s == 0


@pytest.mark.parametrize("hold", [-0.1, 1.5])
def test_a_hold_outside_zero_to_one_second_is_refused(hold) -> None:
    with pytest.raises(ValueError, match=r"--hold is in seconds, 0 \(off\) to 1"):
        KeywordDecider(LABELS, 0.02, DecisionConfig(hold_s=hold))


def _two_words(first: tuple[float, float], then: tuple[float, float], frames: int = 10) -> np.ndarray:
    """Logits of ``frames`` frames at posteriors ``first`` (yes, no), then ``frames`` at ``then``, the rest
    _unknown_, between silence."""
    out = []
    for yes, no in [(0.0, 0.0)] * frames + [first] * frames + [then] * frames + [(0.0, 0.0)] * frames:
        rest = 1.0 - yes - no
        p = np.array([yes, no, rest, 0.0]) if yes or no else np.array([0.0, 0.0, 0.0, 1.0])
        out.append(np.log(np.maximum(p, 1e-9)))
    return np.array(out).T


def test_a_margin_keeps_a_doubtful_word_silent_until_it_leads_the_runner_up() -> None:
    """``yes`` at 0.55 with ``no`` at 0.40 crosses 0.5 and fires at once without a margin; with a margin of 0.2 it
    waits for the frames where it leads by that much, and stays silent if it never does. A word the listener
    does not listen for is still the runner-up."""
    from edgessm.runtime.kws import graph_decision

    cfg = {"threshold": 0.5, "smooth_frames": 1, "refractory_s": 1.0}
    logits = _two_words((0.55, 0.40), (0.9, 0.05))
    plain = KeywordDecider(LABELS, FRAME, DecisionConfig(**cfg)).process(logits)
    assert [(e.label, round(e.time_s / FRAME)) for e in plain] == [("yes", 11)]
    held = KeywordDecider(LABELS, FRAME, DecisionConfig(**cfg, margin=0.2)).process(logits)
    assert [(e.label, round(e.time_s / FRAME)) for e in held] == [("yes", 21)]  # when it leads by 0.85
    doubtful = _two_words((0.55, 0.40), (0.55, 0.40))
    assert KeywordDecider(LABELS, FRAME, DecisionConfig(**cfg, margin=0.2)).process(doubtful) == []
    only_yes = DecisionConfig(**cfg, margin=0.2, keywords=("yes",))
    assert KeywordDecider(LABELS, FRAME, only_yes).process(doubtful) == []
    assert graph_decision({"margin": "0.2"}).margin == 0.2
    assert graph_decision({"margin": "0.2"}, margin=0).margin is None
    assert graph_decision({}).margin is None


@pytest.mark.parametrize("margin", [-0.1, 1.0])
def test_a_margin_outside_zero_to_one_is_refused(margin) -> None:
    with pytest.raises(ValueError, match=r"--margin is a difference of posteriors, 0 \(off\) to below 1"):
        KeywordDecider(LABELS, 0.02, DecisionConfig(margin=margin))
