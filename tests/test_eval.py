"""Evaluation of exported keyword spotters: clip protocol, stream scoring, backgrounds (no torch inside)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import randomize

from edgessm.data.noise import music_like
from edgessm.deploy.onnx_export import export_onnx
from edgessm.eval import kws
from edgessm.eval.backgrounds import keyword_free, sounds_like_keywords
from edgessm.eval.report import kws_markdown
from edgessm.eval.streams import Placement
from edgessm.nets import build_network
from edgessm.runtime import StepModel
from edgessm.runtime.kws import DecisionConfig

LABELS = ["yes", "no", "_unknown_", "_silence_"]


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    torch.manual_seed(0)
    net = build_network("kws", channels=[4, 8, 16], states=[4, 8, 16], kinds=["full", "bottleneck", "pointwise"],
                        pools=[4, 4, 4], window=40, dropout=0.0, num_classes=4)  # fmt: skip
    net = randomize(net, seed=2, dynamics=False).eval()
    path = tmp_path_factory.mktemp("g") / "kws.onnx"
    export_onnx(net, path, 256, {"task": "kws", "labels": LABELS})
    return net, path


def test_clip_logits_are_the_clip_training_forward(graph) -> None:
    """The graph, fed a centred one-second clip chunk by chunk, gives the logits training optimises."""
    net, path = graph
    model = StepModel(path)
    word = (0.2 * np.random.default_rng(0).normal(size=11000)).astype(np.float32)
    got = kws.clip_logits(model, word)
    x = torch.from_numpy(kws.centred(word)).view(1, 1, -1)
    with torch.no_grad():
        ref = net(x)[0].numpy()
    assert got.shape == (4,)
    assert np.abs(got - ref).max() < 1e-4
    long = (0.2 * np.random.default_rng(1).normal(size=20000)).astype(np.float32)
    assert np.array_equal(kws.centred(long), long[2000:18000])


def test_twelve_class_protocol_and_per_word_accuracy() -> None:
    res = kws.ClipResult(
        "t", LABELS,
        refs=["yes", "_unknown_", "_silence_", "_unknown_", "no"],
        words=["yes", "bed", "_silence_", "on", "no"],
        preds=["yes", "_unknown_", "_silence_", "off", "_unknown_"],
    )  # fmt: skip
    sc12 = res.sc12()
    assert sc12["accuracy"] == pytest.approx(3 / 5)  # 'on' heard as 'off' is still wrong in SC12
    assert sc12["per_class"]["_unknown_"] == 1.0 and sc12["per_class"]["on"] == 0.0 and sc12["per_class"]["no"] == 0.0
    assert sum(map(sum, sc12["confusion"])) == 5
    words = res.per_word()
    assert words["bed"]["accuracy"] == 0.0  # the exact word is required per word
    assert words["yes"] == {"accuracy": 1.0, "clips": 1}
    assert res.accuracy() == pytest.approx(3 / 5)
    md = kws_markdown({"clips": {"sc-test": {"accuracy": 0.6, "clips": 5, "sc12": sc12, "per_word": words}}})
    assert "| 60.0% |" in md and "| bed | 1 | 0.0% |" in md


def test_trim_finds_the_spoken_part() -> None:
    x = np.zeros(16000, np.float32)
    x[5000:9000] = 0.3 * np.sin(np.arange(4000) * 0.2)
    y = kws.trim(x)
    assert 3900 <= len(y) <= 4200 and np.abs(y).max() > 0.29


def test_keyword_free_speech_filter_knows_homophones() -> None:
    banned = sounds_like_keywords()
    assert not keyword_free("LET'S GO TO THE RESTROOM", banned)
    assert not keyword_free("I want to eat", banned)  # 'to' sounds like 'two'
    assert not keyword_free("the dogs barked", banned)
    assert keyword_free("then mike walks home", banned)


def test_music_like_is_deterministic_and_at_level() -> None:
    a = music_like(16000 * 3, np.random.default_rng(5), level_dbfs=-30)
    b = music_like(16000 * 3, np.random.default_rng(5), level_dbfs=-30)
    assert a.shape == (48000,) and a.dtype == np.float32 and np.array_equal(a, b)
    assert 10 * np.log10(np.mean(a.astype(np.float64) ** 2)) == pytest.approx(-30, abs=0.01)
    spec = np.abs(np.fft.rfft(a))
    assert spec[: len(spec) // 4].sum() > spec[len(spec) // 4 :].sum()  # tonal energy sits low, not white


class EnergyModel:
    """A stand-in graph: 'yes' when a 64-sample frame is loud, silence otherwise."""

    info = SimpleNamespace(stride=64, chunk=256, sample_rate=16000, labels=LABELS, extra={})

    def initial_state(self):
        return []

    process = StepModel.process  # the real chunk loop over this stand-in's run()
    stepper = StepModel.stepper

    def run(self, chunk, state):
        e = np.sqrt(np.mean(chunk.reshape(-1, 64) ** 2, axis=1))
        loud = e > 0.05
        logits = np.full((4, len(e)), -10.0)
        logits[0, loud] = 10.0
        logits[3, ~loud] = 10.0
        return logits, state


def _three_loud_yeses(sr: int = 16000) -> tuple[np.ndarray, list[Placement]]:
    """20 s of silence with three 0.5 s loud 'yes' bursts (at 2, 8 and 14 s) for :class:`EnergyModel`."""
    audio = np.zeros(sr * 20, np.float32)
    places = []
    for start in (2.0, 8.0, 14.0):
        audio[int(start * sr) : int((start + 0.5) * sr)] = 0.3
        places.append(Placement("yes", start, start + 0.5))
    return audio, places


def test_stream_metrics_count_hits_time_errors_and_false_accepts() -> None:
    sr = 16000
    audio, places = _three_loud_yeses(sr)
    noisy_free = np.zeros(sr * 36, np.float32)
    noisy_free[sr * 10 : sr * 10 + 12000] = 0.3  # one false accept in keyword-free audio
    streams = [kws.StreamSet("noise", audio, places)]
    free = [kws.StreamSet("noise", noisy_free, [])]
    out = kws.stream_metrics(EnergyModel(), streams, free, [0.4, 0.99], DecisionConfig(0.4, 2, 1.0))
    row = out["sweep"][0]
    assert row["detection_rate"] == 1.0 and row["keywords"] == 3
    assert row["false_accepts"] == 1 and row["false_accepts_per_hour"] == pytest.approx(100.0)
    assert -0.5 < row["time_error_median_s"] < -0.4  # fires ~2 frames after the onset, before the end
    assert out["sweep"][1]["detection_rate"] == 1.0  # smoothed posterior reaches 1.0 on a steady tone


def test_eval_command_refuses_unknown_sets_and_runs_without_torch(graph) -> None:
    _, path = graph
    bad = subprocess.run([sys.executable, "-m", "edgessm", "eval", str(path), "--sets", "nope"],
                         capture_output=True, text=True)  # fmt: skip
    assert bad.returncode != 0 and "unknown sets" in bad.stderr
    code = (
        "import sys, numpy as np\n"
        "from edgessm.eval import kws\n"
        "from edgessm.runtime import StepModel\n"
        f"m = StepModel({str(path)!r})\n"
        "kws.clip_logits(m, np.zeros(16000, np.float32))\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_pick_threshold_takes_the_lowest_within_the_false_accept_budget() -> None:
    sweep = [{"threshold": t, "false_accepts_per_hour": fa} for t, fa in ((0.5, 3.0), (0.7, 0.4), (0.9, 0.0))]
    assert kws.pick_threshold(sweep, 0.5) == 0.7
    assert kws.pick_threshold(sweep, 0.0) == 0.9
    assert kws.pick_threshold(sweep[:1], 1.0) is None


def test_choose_threshold_reports_validation_streams_and_writes_its_evidence(monkeypatch, tmp_path) -> None:
    """--choose-threshold picks the lowest threshold within --max-fa on validation streams, says so in
    its table's heading, and with --out keeps the table and the choice beside the evaluation."""
    import json

    from edgessm.eval.cli import _choose_threshold

    sr = 16000
    audio, places = _three_loud_yeses(sr)
    free = np.zeros(sr * 36, np.float32)
    free[sr * 10 : sr * 10 + 3 * 64] = 0.3  # 3 loud frames: a smoothed posterior of 3/4 at most
    sources = []
    monkeypatch.setattr(kws, "keyword_streams", lambda n, seed, source: sources.append(source) or
                        [kws.StreamSet("noise", audio, places)])  # fmt: skip
    monkeypatch.setattr(kws, "keyword_free_hour", lambda s, seed, src: [kws.StreamSet("noise", free, [])])
    args = SimpleNamespace(thresholds="0.5,0.7,0.8,0.9", keywords_per_background=3, seed=0, keyword_free_hours=0.01,
                           smooth=4, refractory=1.0, max_fa=0.5, out=str(tmp_path / "ev"), contrast=None,
                           speech_after=None, hold=None, margin=None)  # fmt: skip
    assert _choose_threshold(EnergyModel(), args, lambda it, _: it) == 0
    assert sources == ["synth-validation"]
    md = (tmp_path / "ev" / "threshold-validation.md").read_text()
    assert "synthetic validation voices" in md and "SC test" not in md
    assert "chosen threshold: 0.8" in md  # 0.5 and 0.7 fire on the 3 loud frames of keyword-free audio
    saved = json.loads((tmp_path / "ev" / "threshold-validation.json").read_text())
    assert saved["chosen"] == 0.8 and saved["max_fa_per_hour"] == 0.5
    args.thresholds, args.out = "0.5,0.6", None
    assert _choose_threshold(EnergyModel(), args, lambda it, _: it) == 1  # nothing qualifies: exit status 1


def test_choose_threshold_decides_with_the_graphs_gates_or_the_options(monkeypatch) -> None:
    """The threshold is chosen for the decision the graph ships with: its contrast and speech-after gates
    (the options replace them; 0 turns one off)."""
    from edgessm.eval.cli import _choose_threshold

    seen = []
    monkeypatch.setattr(kws, "keyword_streams", lambda n, seed, source: [])
    monkeypatch.setattr(kws, "keyword_free_hour", lambda s, seed, src: [])
    monkeypatch.setattr(kws, "stream_metrics", lambda m, st, fr, th, cfg, p: seen.append(cfg) or
                        {"sweep": [{"threshold": 0.8, "false_accepts_per_hour": 0.0}]})  # fmt: skip
    monkeypatch.setattr("edgessm.eval.report.kws_markdown", lambda report: "")
    model = EnergyModel()
    model.info = SimpleNamespace(**{**vars(EnergyModel.info), "extra": {"contrast_db": "6", "speech_after": "0.5"}})
    args = SimpleNamespace(thresholds="0.8", keywords_per_background=3, seed=0, keyword_free_hours=0.01, smooth=4,
                           refractory=1.0, max_fa=0.5, out=None, contrast=None, speech_after=None,
                           hold=None, margin=None)  # fmt: skip
    assert _choose_threshold(model, args, lambda it, _: it) == 0
    args.contrast, args.speech_after, args.hold, args.margin = 0.0, 0.3, 0.4, 0.2
    assert _choose_threshold(model, args, lambda it, _: it) == 0
    assert [(c.contrast_db, c.speech_after, c.hold_s, c.margin) for c in seen] == [(6.0, 0.5, 0.0, None),
                                                                                 (None, 0.3, 0.4, 0.2)]  # fmt: skip


def test_eval_refuses_gates_out_of_range_before_reading_the_graph() -> None:
    for option, value, says in (("--speech-after", "1.5", "posterior in [0, 1]"), ("--contrast", "-3", "0 (off)"),
                                ("--hold", "2", "--hold is in seconds"),
                                ("--margin", "1", "--margin is a")):  # fmt: skip
        bad = subprocess.run([sys.executable, "-m", "edgessm", "eval", "kws35", option, value], capture_output=True,
                             text=True, timeout=120)  # fmt: skip
        assert bad.returncode != 0 and says in bad.stderr and bad.stderr.count("\n") == 1, bad.stderr


def test_real_speech_background_is_the_half_of_speakers_training_leaves_out(monkeypatch) -> None:
    """The streaming evaluation's speech background holds only stream_background_speaker clips (the
    half of the real read-speech speakers the keyword spotter never trains on), keyword-free ones."""
    from edgessm.data.manifest import Clip
    from edgessm.eval import backgrounds

    clips = [Clip(f"s{i}.wav", speaker=f"reader{i}", text=text, source="real_read_speech")
             for i in range(12) for text in ("the seal is sleeping", "say yes to the dress")]  # fmt: skip
    monkeypatch.setattr(backgrounds, "shared_read_speech", lambda: clips)
    held = {c.speaker for c in clips if backgrounds.stream_background_speaker(c)}
    assert 0 < len(held) < 12
    chosen = backgrounds._sentences("real", ["yes", "no"])
    assert {c.speaker for c in chosen} == held
    assert all(c.text == "the seal is sleeping" for c in chosen)


def test_calibration_speech_is_real_speakers_held_out_of_training(monkeypatch) -> None:
    """The keyword-free speech that per-keyword thresholds are calibrated on: validation-split real
    sentences (not the test background's speakers), keyword-free, and no synthetic voice at all."""
    from edgessm.data import corpora
    from edgessm.data.manifest import Clip, assign_split
    from edgessm.eval import backgrounds

    read = [Clip(f"r{i}.wav", speaker=f"reader{i}", text="the seal is sleeping", source="real_read_speech")
            for i in range(60)]  # fmt: skip
    pseudo = [Clip(f"p{i}.wav", speaker=f"talker{i}", text=t, source="real_sentences_pseudolabeled")
              for i in range(60) for t in ("a quiet harbour", "say yes")]  # fmt: skip
    monkeypatch.setattr(backgrounds, "shared_read_speech", lambda: read)
    monkeypatch.setattr(corpora, "shared_pseudolabeled_sentences", lambda: pseudo)
    monkeypatch.setattr(corpora, "synth_manifest", lambda name: pytest.fail("synthetic voices were read"))
    chosen = backgrounds._sentences("validation", ["yes", "no"])
    assert chosen and all(assign_split(c) == "validation" for c in chosen)
    assert not any(backgrounds.stream_background_speaker(c) for c in chosen)
    assert all(c.text in ("the seal is sleeping", "a quiet harbour") for c in chosen)


def test_speech_pool_says_how_little_distinct_speech_a_background_loops(monkeypatch, tmp_path) -> None:
    """A false-accept rate on an hour of speech built from minutes of recordings counts few distinct moments:
    the pool's distinct minutes, speakers and sources, and how often the background hears each recording."""
    import soundfile as sf

    from edgessm.data.manifest import Clip
    from edgessm.eval import backgrounds

    clips = []
    for i, (seconds, speaker, source) in enumerate([(12, "a", "real_read_speech"), (6, "b", "real_read_speech"),
                                                     (6, "a", "real_sentences_pseudolabeled")]):  # fmt: skip
        path = tmp_path / f"{i}.wav"
        sf.write(path, np.zeros(16000 * seconds, np.float32), 16000)
        clips.append(Clip(str(path), speaker=speaker, source=source))
    monkeypatch.setattr(backgrounds, "_sentences", lambda source, words: clips)
    pool = backgrounds.speech_pool("validation")
    assert pool["clips"] == 3 and pool["speakers"] == 3  # speaker ids are per source
    assert pool["minutes"] == pytest.approx(0.4)
    assert pool["minutes_by_source"] == pytest.approx({"real_read_speech": 0.3, "real_sentences_pseudolabeled": 0.1})
    line = backgrounds.describe_pool(pool, 0.1)
    assert line == ("keyword-free speech: 0.4 min of 3 speakers (real_read_speech 0.3, real_sentences_pseudolabeled "
                    "0.1 min), each recording heard ~15.0 times in 0.1 h")  # fmt: skip


def test_sc_validation_set_holds_only_speakers_no_recipe_trains_on() -> None:
    from fixtures import skip_without_shared

    from edgessm.data.corpora import shared_sc_test, shared_sc_train
    from edgessm.data.manifest import assign_split
    from edgessm.eval.kws import clip_set

    skip_without_shared("speech_commands_train_subset", "speech_commands_test_v0.02")
    pairs = clip_set("sc-validation")
    speakers = {c.speaker for c, _ in pairs}
    trained = {c.speaker for c in shared_sc_train() if assign_split(c) == "train"}
    assert len(pairs) > 1000 and not speakers & trained
    assert not speakers & {c.speaker for c in shared_sc_test()}  # and none of the test half's
    assert all(word == c.text and word for c, word in pairs)


def test_calibrate_writes_per_keyword_thresholds_a_det_table_and_plot(monkeypatch, tmp_path) -> None:
    """--calibrate: per-keyword thresholds within the budget on validation streams (checked with the live
    decider), the single-threshold sweep beside them, calibration.json for export, and the DET plot."""
    import json

    from edgessm.eval import calibrate
    from edgessm.eval.cli import _calibrate

    sr = 16000
    audio, places = _three_loud_yeses(sr)
    free = np.zeros(sr * 36, np.float32)
    free[sr * 10 : sr * 10 + 3 * 64] = 0.3  # 3 loud frames: 'yes' reaches 3/4 once in keyword-free audio
    monkeypatch.setattr(calibrate, "validation_keywords", lambda seed: [("yes", np.zeros(8))] * 3)
    session = kws.StreamSet("validation-session", audio, places)
    monkeypatch.setattr(calibrate, "validation_streams", lambda words, seed: [session])
    monkeypatch.setattr(calibrate, "validation_free", lambda hours, seed: [kws.StreamSet("noise", free, [])])
    pool = {"clips": 3, "speakers": 2, "minutes": 1.5, "minutes_by_source": {"real_read_speech": 1.5}}
    monkeypatch.setattr(calibrate, "validation_speech_pool", lambda: pool)
    args = SimpleNamespace(thresholds="0.5,0.9", seed=0, smooth=4, refractory=1.0, max_fa=1.0, calibration_hours=0.01,
                           contrast=None, speech_after=None, hold=None, margin=None,
                           out=str(tmp_path / "cal"))  # fmt: skip
    assert _calibrate(EnergyModel(), args, lambda it, _: it) == 0
    report = json.loads((tmp_path / "cal" / "calibration.json").read_text())
    assert 0.75 < report["chosen"]["yes"] <= 1.0  # above the 3/4 the keyword-free audio reaches: no false accept
    row = next(r for r in report["calibrated"] if r["budget"] == 1.0)
    assert row["detection_rate"] == 1.0 and row["false_accepts"] == 0
    loose = next(r for r in report["calibrated"] if r["budget"] == 64.0)  # 1 FA in 36 s = 100/h: over budget
    assert loose["false_accepts"] == 0
    md = (tmp_path / "cal" / "calibration.md").read_text()
    assert "per-keyword, budget 1 FA/h" in md
    assert "keyword-free speech: 1.5 min of 2 speakers (real_read_speech 1.5 min)" in md  # what the rates rest on
    assert (tmp_path / "cal" / "det-validation.png").stat().st_size > 1000


def test_session_report_has_wrong_word_rates_and_per_word_hits_at_the_headline_threshold() -> None:
    from edgessm.eval.streams import score_stream

    places = [Placement("yes", 1.0, 1.6), Placement("no", 5.0, 5.5), Placement("yes", 9.0, 9.7)]
    by = {"session-commands": score_stream([("yes", 1.7), ("go", 5.6)], places, 12.0).summary()}
    sweep = [{"threshold": t, "by_background": by, "per_word": {"yes": {"hits": 1, "keywords": 2},
                                                                "no": {"hits": 0, "keywords": 1}},
              "named_instead": {"no": {"go": 1}} if t == 0.9 else {"yes": {"up": 5}}}
             for t in (0.5, 0.9)]  # fmt: skip
    md = kws_markdown({"threshold": 0.9, "sessions": {"sweep": sweep}})
    assert "| **0.90** | 33.3% | - | 33.3% / - |" in md  # 1 of 3 hit; 'go' while 'no' was said
    assert "Sessions per word at 0.90" in md and "| no | 1 | 0.0% | yes | 2 | 50.0% |" in md
    assert "Wrong words (said → detected instead, times): no → go 1." in md and "up 5" not in md
    # the quiet and the close-microphone sessions: one line each, from their own stream
    quiet = {
        "gain_db": -15.0,
        "sweep": [{"threshold": 0.9, "by_background": {"session-quiet": by["session-commands"]}}],
    }
    loud = {"gain_db": 12.0, "sweep": [{"threshold": 0.9, "by_background": {"session-loud": by["session-commands"]}}]}
    md = kws_markdown({"threshold": 0.9, "sessions": {"sweep": sweep}, "quiet_sessions": quiet, "loud_sessions": loud})
    assert "A quiet microphone (the ten-command session -15 dB quieter" in md
    assert (
        "A close microphone (the ten-command session 12 dB louder: words at -18..-3 dBFS) at threshold 0.9: 33.3%" in md
    )


def test_loud_session_is_the_ten_command_session_louder_and_clipped() -> None:
    places = [("yes", 1.0, 1.5)]
    audio = np.full(16000, 0.2, np.float32)
    sessions = [kws.StreamSet("session-35", audio * 0, []), kws.StreamSet("session-commands", audio, places)]
    (loud,) = kws.loud_sessions(sessions)
    assert loud.kind == "session-loud" and loud.placements == places
    assert np.allclose(loud.audio, min(1.0, 0.2 * 10 ** (kws.LOUD_DB / 20)))  # 0.8: within full scale
    (clipped,) = kws.loud_sessions([kws.StreamSet("session-commands", audio * 4, places)])
    assert np.abs(clipped.audio).max() == 1.0


def test_validation_keywords_are_real_for_words_with_enough_real_clips_and_say_which(monkeypatch, tmp_path) -> None:
    """A word with at least 30 real validation clips is all real speakers (and listed by real_validation_words);
    one with fewer is filled up with the synthetic validation voices of the corpora on the machine."""
    import soundfile as sf

    from edgessm.data.corpora import CorpusError
    from edgessm.data.manifest import Clip
    from edgessm.eval import calibrate

    wav = tmp_path / "w.wav"
    sf.write(wav, np.full(1600, 0.1, np.float32), 16000)
    real = [(Clip(str(wav), speaker="s1", label="yes", split="validation"), "yes")] * 30
    real.append((Clip(str(wav), speaker="s2", label="dog", split="validation"), "dog"))
    monkeypatch.setattr(calibrate, "clip_set", lambda name: real)
    synth = [Clip(str(wav), speaker="v1", label=w, split="validation") for w in ("dog", "yes")]

    def manifest(corpus):
        if corpus != "default":
            raise CorpusError(f"{corpus} not built")
        return corpus

    monkeypatch.setattr(calibrate, "synth_manifest", manifest)
    monkeypatch.setattr(calibrate, "read_manifest", lambda path: synth)
    assert calibrate.real_validation_words() == {"yes"}
    words = [w for w, _ in calibrate.validation_keywords(per_word=100)]
    assert words.count("yes") == 30 and words.count("dog") == 2  # dog: one real clip and one synthetic voice


class QuietEnergyModel(EnergyModel):
    """:class:`EnergyModel` for speech at everyday levels (-35..-20 dBFS): 'yes' above -40 dBFS."""

    def run(self, chunk, state):
        loud = np.sqrt(np.mean(chunk.reshape(-1, 64) ** 2, axis=1)) > 0.01
        logits = np.full((4, len(loud)), -10.0)
        logits[0, loud] = 10.0
        logits[3, ~loud] = 10.0
        return logits, state


def test_read_speech_counts_keywords_the_transcript_does_not_say(tmp_path) -> None:
    """Running read speech: a detection of a word the utterance's transcript says (or a homophone of it) is not a
    false accept; one in an utterance that never says it is."""
    from edgessm.data.audio import write_audio
    from edgessm.data.manifest import Clip

    sr = 16000
    clips = []
    for i, text in enumerate(["yes we can", "the weather is fine", "i said know"]):
        x = np.zeros(sr * 3, np.float32)
        x[sr : sr + 8000] = 0.3  # one loud burst: the stand-in graph hears 'yes'
        write_audio(tmp_path / f"u{i}.wav", x, sr)
        clips.append(Clip(str(tmp_path / f"u{i}.wav"), speaker=f"s{i}", text=text, source="t"))
    speech = kws.read_speech(clips, seed=0)
    assert len(speech.spans) == 3 and speech.spans[0][0] == 0 and speech.spans[-1][1] == len(speech.audio)
    out = kws.read_speech_false_accepts(QuietEnergyModel(), speech, [0.4], DecisionConfig(0.4, 2, 1.0))
    row = out["sweep"][0]
    assert row["said_detections"] == 1  # "yes we can"
    assert row["false_accepts"] == 2 and row["by_word"] == {"yes": 2}
    assert row["false_accepts_per_hour"] == pytest.approx(2 / out["hours"])
    md = kws_markdown({"read_speech": out})
    assert "Running read speech" in md and "| 0.4 | 2 |" in md


def test_loud_read_speech_is_the_same_hour_twelve_db_louder(tmp_path) -> None:
    """The close-microphone row streams the same utterances, order and pauses, only louder; both rows reach the
    report with their levels."""
    from edgessm.data.audio import write_audio
    from edgessm.data.augment import level_dbfs
    from edgessm.data.manifest import Clip

    sr, rng, clips = 16000, np.random.default_rng(0), []
    for i in range(4):
        write_audio(tmp_path / f"u{i}.wav", (0.05 * rng.standard_normal(sr)).astype(np.float32), sr)
        clips.append(Clip(str(tmp_path / f"u{i}.wav"), speaker=f"s{i}", text="the weather is fine", source="t"))
    everyday = kws.read_speech(clips, seed=3, level_dbfs=kws.READ_LEVELS["everyday"])
    loud = kws.read_speech(clips, seed=3, level_dbfs=kws.READ_LEVELS["loud"])
    assert everyday.spans == loud.spans
    for start, _, _ in everyday.spans:
        a, b = everyday.audio[start : start + sr], loud.audio[start : start + sr]
        assert level_dbfs(b) - level_dbfs(a) == pytest.approx(12.0, abs=0.05)
        assert -35.05 <= level_dbfs(a) <= -19.95
    out = kws.read_speech_false_accepts(QuietEnergyModel(), loud, [0.4], DecisionConfig(0.4, 2, 1.0))
    md = kws_markdown(
        {"read_speech": {**out, "level_dbfs": [-35, -20]}, "read_speech_loud": {**out, "level_dbfs": [-23, -8]}}
    )
    assert "at everyday levels, -35..-20 dBFS" in md and "at a close microphone, -23..-8 dBFS" in md
