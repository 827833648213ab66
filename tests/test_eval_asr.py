"""Recognizer evaluation on the hand-built spelling graph (exact transcripts, exact timings)."""

from __future__ import annotations

import numpy as np
import pytest
from test_transcribe import pause, spelling_graph, spoken

from edgessm.eval import asr
from edgessm.eval.report import asr_markdown
from edgessm.runtime.session import StepModel


@pytest.fixture
def model(tmp_path):
    return StepModel(spelling_graph(tmp_path / "spell.onnx"))


def test_wer_cer_and_utterance_errors_are_counted_per_system(model) -> None:
    utts = [
        asr.Utterance("a", np.concatenate([pause(0.3), spoken("go up"), pause(0.3)]), "go up"),
        asr.Utterance("b", np.concatenate([spoken("no"), pause(0.2)]), "yes"),
    ]
    systems = {"ours": asr.GraphRecognizer(model), "silent": lambda x: ""}
    res = asr.evaluate(systems, utts, "toy")
    ours, silent = res["ours"], res["silent"]
    assert (ours.word_errors, ours.words, ours.sentences_wrong) == (1, 3, 1)  # "no" for "yes": one substitution
    assert ours.char_errors == 3 and ours.chars == len("go up") + len("yes")
    assert silent.wer == 1.0 and silent.utterances == 2
    assert ours.audio_s == pytest.approx((len(utts[0].audio) + len(utts[1].audio)) / 16000)
    report = {"model": "ours", "sets": {"toy": {n: r.summary() for n, r in res.items()}}}
    md = asr_markdown(report)
    assert "| ours | 33.3% |" in md and "| silent | 100.0% |" in md


def test_one_word_sets_report_each_words_share_heard_exactly(model) -> None:
    words = [asr.Utterance(str(i), np.concatenate([spoken(w), pause(0.2)]), ref)
             for i, (w, ref) in enumerate([("go", "go"), ("no", "go"), ("up", "up")])]  # fmt: skip
    res = asr.evaluate({"ours": asr.GraphRecognizer(model), "silent": lambda x: ""}, words, "toy")
    assert res["ours"].per_word == {"go": [1, 2], "up": [1, 1]}
    md = asr_markdown({"model": "ours", "sets": {"toy": {n: r.summary() for n, r in res.items()}}})
    assert res["ours"].heard_instead == {"go": {"no": 1}}
    assert res["silent"].heard_instead == {"go": {"": 2}, "up": {"": 1}}
    assert "| word | clips | ours | silent | silent heard instead |" in md
    assert "| go | 2 | 50% | 0% | (nothing) ×2 |" in md and "| up | 1 | 100% | 0% | (nothing) |" in md
    sentences = [asr.Utterance("a", spoken("go up"), "go up")]  # not a set of words: no table
    res = asr.evaluate({"ours": asr.GraphRecognizer(model)}, sentences, "toy")
    assert res["ours"].per_word == {}
    assert "Per word" not in asr_markdown({"model": "ours", "sets": {"toy": {"ours": res["ours"].summary()}}})


def test_latencies_measure_onset_to_first_token_and_end_of_speech_to_final(model) -> None:
    utt = asr.Utterance("a", np.concatenate([pause(0.5), spoken("go"), pause(0.2)]), "go")
    lat = asr.latencies(model, [utt], tail_s=2.0)
    assert lat["finalized"] == 1
    assert lat["first_token_s"]["median"] == pytest.approx(0.02, abs=1e-6)  # the first 20 ms frame decodes it
    # the segment ends after the endpointer's 0.8 s pause (counted from the last character's frame)
    assert lat["final_s"]["median"] == pytest.approx(0.8, abs=1e-6)
    assert lat["chunk_ms"] == 20.0


def test_digit_vocabulary_and_unknown_sets() -> None:
    assert asr.vocabulary("fsdd-strings", []) == list(asr.DIGITS)
    utts = [asr.Utterance("x", np.zeros(10, np.float32), "stop go"), asr.Utterance("y", np.zeros(1), "go")]
    assert asr.vocabulary("other", utts) == ["go", "stop"]
    assert len(asr.vocabulary("sc-test", utts)) == 35 and "marvin" in asr.vocabulary("sc-test")
    with pytest.raises(ValueError, match="unknown test set 'librispeech'"):
        asr.test_set("librispeech")


def test_joined_streams_keep_order_pauses_and_a_scored_whole(model) -> None:
    utts = [asr.Utterance(t, spoken(t), t) for t in ("go", "up", "no", "yes", "stop")]
    streams = asr.joined_streams(utts, per_stream=2, pause_s=1.0)
    assert [s.text for s in streams] == ["go up", "no yes", "stop"]
    assert len(streams[0].audio) == len(utts[0].audio) + 16000 + len(utts[1].audio)
    assert np.array_equal(streams[2].audio, utts[4].audio)
    res = asr.evaluate({"ours": asr.GraphRecognizer(model)}, streams, "toy-stream")["ours"]
    assert res.utterances == 3 and res.word_errors == 0  # one state across each stream, every word found


def test_one_word_systems_say_at_most_one_word(model) -> None:
    """On single-word sets both constrained systems are told a clip is one word."""
    two = np.concatenate([pause(0.3), spoken("go up"), pause(0.3)])
    loop = asr.GraphRecognizer(model, vocabulary=["go", "up", "no"])
    one = asr.GraphRecognizer(model, vocabulary=["go", "up", "no"], one_word=True)
    assert loop(two) == "go up"
    assert len(one(two).split()) == 1  # which word depends on the toy graph's logits
    assert one(np.concatenate([pause(0.3), spoken("up"), pause(0.3)])) == "up"
    pytest.importorskip("pocketsphinx")
    noise = np.random.default_rng(0).normal(0, 0.05, 32000).astype(np.float32)
    assert len(asr.PocketSphinx(["yes", "no", "stop"], one_word=True)(noise).split()) <= 1


def test_whisper_peer_hears_speech_and_writes_our_alphabet(tmp_path) -> None:
    import shutil
    import subprocess

    from edgessm.data.audio import load_audio

    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (make setup installs it)")
    try:
        whisper = asr.WhisperTiny()
    except RuntimeError as e:
        pytest.skip(f"the teacher is not installed: {e}")
    wav = tmp_path / "s.wav"
    subprocess.run(["espeak-ng", "-w", str(wav), "the kitchen is in room forty two"], check=True, capture_output=True)
    text = whisper(load_audio(wav, 16000)[0])
    assert "kitchen" in text and "forty two" in text and not any(ch.isdigit() for ch in text)
