"""``edgessm transcribe`` end to end, torch-free, on a hand-built recognizer graph whose output is known.

The graph "spells" its input: a 20 ms chunk whose samples are all ``v`` emits label ``round(28 v)``
(``0``: blank), so a recording made of such chunks has an exact transcript and exact timings.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from edgessm.data.audio import write_audio
from edgessm.data.text import CHARS
from edgessm.runtime.session import StepModel
from edgessm.runtime.transcriber import Transcriber, transcribe_audio

FRAME = 320


def spelling_graph(path, task: str = "asr", frames: int = 1, warmup: int = 0) -> str:
    """A graph that 'spells' its input: each frame's mean level picks a character; ``frames`` per call."""
    import onnx
    from onnx import TensorProto, helper

    v = len(CHARS)
    k = np.arange(v, dtype=np.float32).reshape(1, v, 1)
    nodes = [
        helper.make_node("Reshape", ["audio", "per_frame"], ["framed"]),  # (1, F, FRAME)
        helper.make_node("ReduceMean", ["framed"], ["mf"], axes=[2], keepdims=1),  # (1, F, 1)
        helper.make_node("Transpose", ["mf"], ["m"], perm=[0, 2, 1]),  # (1, 1, F)
        helper.make_node("Mul", ["m", "scale"], ["target"]),
        helper.make_node("Sub", ["target", "k"], ["d"]),  # (1, V, 1)
        helper.make_node("Mul", ["d", "d"], ["d2"]),
        helper.make_node("Neg", ["d2"], ["logits"]),
        helper.make_node("Add", ["count", "one"], ["count_out"]),  # a state, as every graph has
    ]
    inits = [
        helper.make_tensor("scale", TensorProto.FLOAT, [1], [float(v - 1)]),
        helper.make_tensor("k", TensorProto.FLOAT, list(k.shape), k.reshape(-1).tolist()),
        helper.make_tensor("one", TensorProto.FLOAT, [1, 1], [1.0]),
        helper.make_tensor("per_frame", TensorProto.INT64, [3], [1, frames, FRAME]),
    ]
    graph = helper.make_graph(
        nodes,
        "spell",
        [helper.make_tensor_value_info("audio", TensorProto.FLOAT, [1, 1, FRAME * frames]),
         helper.make_tensor_value_info("count", TensorProto.FLOAT, [1, 1])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, v, frames]),
         helper.make_tensor_value_info("count_out", TensorProto.FLOAT, [1, 1])],
        inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    meta = {"task": task, "chunk": str(FRAME * frames), "stride": str(FRAME), "states": json.dumps([["count", [1]]]),
            "labels": json.dumps(list(CHARS)), "sample_rate": "16000"}  # fmt: skip
    if warmup:
        meta["warmup_samples"] = str(warmup)
    for key, value in meta.items():
        model.metadata_props.add(key=key, value=value)
    onnx.save(model, str(path))
    return str(path)


def spoken(text: str, frames_per_char: int = 3, gap: int = 1) -> np.ndarray:
    """Audio the spelling graph reads as ``text``: each character held for some frames, blanks between."""
    out = []
    for ch in text:
        level = CHARS.index(ch) / (len(CHARS) - 1)
        out += [np.full(FRAME * frames_per_char, level, np.float32), np.zeros(FRAME * gap, np.float32)]
    return np.concatenate(out)


def pause(seconds: float) -> np.ndarray:
    return np.zeros(int(16000 * seconds), np.float32)


@pytest.fixture
def graph(tmp_path):
    return spelling_graph(tmp_path / "spell.onnx")


def test_transcriber_streams_segments_with_pauses_and_timings(graph) -> None:
    audio = np.concatenate([pause(0.2), spoken("go left"), pause(1.0), spoken("stop")])
    segs = transcribe_audio(StepModel(graph), audio, 16000, block_s=0.37)  # blocks that split graph chunks
    assert [s.text for s in segs] == ["go left", "stop"]
    assert [s.final for s in segs] == [True, True]
    assert [w.text for w in segs[0].words] == ["go", "left"]
    assert segs[0].words[0].start_s == pytest.approx(0.2, abs=0.021)  # the first character's frame
    second_start = 0.2 + len("go left") * 0.08 + 1.0
    assert segs[1].start_s == pytest.approx(second_start, abs=0.021)


def test_transcriber_resamples_and_reports_partials(graph) -> None:
    import soxr

    rec = Transcriber(StepModel(graph))
    audio = spoken("yes", frames_per_char=6)
    rec.accept_waveform(16000, audio[: len(audio) // 2])
    assert rec.partial().text.startswith("y") and not rec.partial().final
    assert rec.first_text_s is not None and rec.first_text_s < 0.2
    rec.finish()
    rec.reset()
    assert rec.heard_s == 0.0
    x = soxr.resample(np.concatenate([audio, pause(0.1)]), 16000, 48000)
    out = rec.accept_waveform(48000, x) + rec.finish()
    assert [s.text for s in out] == ["yes"]  # the stream resamples 48 kHz to the graph's 16 kHz


@pytest.mark.parametrize(("frames", "calls"), [(1, 2), (3, 1)])
def test_streams_start_from_the_state_after_the_graphs_warmup_silence(tmp_path, frames, calls) -> None:
    """``warmup_samples`` (640 here): whole chunks of silence run before a stream; the clock starts after them."""
    model = StepModel(spelling_graph(tmp_path / "spell.onnx", frames=frames, warmup=640))
    assert model.info.warmup_samples == 640
    assert model.initial_state()[0].item() == calls  # the graph's state counts its calls
    rec = Transcriber(model)
    segs = transcribe_audio(model, np.concatenate([pause(0.2), spoken("go"), pause(1.0)]), 16000)
    assert [s.text for s in segs] == ["go"] and abs(segs[0].start_s - 0.2) < 0.03
    rec.accept_waveform(16000, pause(0.5))
    assert rec.stream.state[0].item() == calls + 25 // frames
    rec.reset()
    assert rec.stream.state[0].item() == calls


def test_a_vocabulary_turns_final_segments_into_its_words(graph) -> None:
    audio = np.concatenate([pause(0.3), spoken("stp"), pause(1.0), spoken("g"), pause(0.1)])
    model = StepModel(graph)
    assert [s.text for s in transcribe_audio(model, audio, 16000)] == ["stp", "g"]
    segs = transcribe_audio(model, audio, 16000, vocabulary=["go", "stop", "up"])
    assert [s.text for s in segs] == ["stop", "go"]
    assert segs[0].words[0].start_s == pytest.approx(0.3, abs=0.021)
    assert segs[1].start_s == pytest.approx(0.3 + 3 * 0.08 + 1.0, abs=0.021)
    silent = transcribe_audio(model, pause(3.0), 16000, vocabulary=["go"])
    assert silent == []


def _cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgessm", "transcribe", *args], capture_output=True, input=stdin,
                          timeout=120)  # fmt: skip


def test_cli_prints_the_transcript_and_json_lines(graph, tmp_path) -> None:
    a, b = tmp_path / "a.wav", tmp_path / "b.flac"
    write_audio(a, np.concatenate([spoken("one two"), pause(1.0), spoken("three")]), 16000, subtype="FLOAT")
    write_audio(b, np.concatenate([spoken("up"), pause(0.3)]), 16000, subtype="PCM_24")
    r = _cli(str(a), "--model", graph)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().splitlines() == ["one two", "three"]
    assert b"real-time factor" in r.stderr
    r = _cli(str(a), str(b), "--model", graph, "--json")
    lines = [json.loads(line) for line in r.stdout.decode().splitlines()]
    assert [(x["file"], x["text"]) for x in lines] == [(str(a), "one two"), (str(a), "three"), (str(b), "up")]
    assert [w["word"] for w in lines[0]["words"]] == ["one", "two"]
    assert lines[0]["start"] < lines[0]["words"][1]["start"] < lines[0]["end"] <= lines[1]["start"]


def test_cli_reads_stdin_and_multichannel(graph, tmp_path) -> None:
    import io

    import soundfile as sf

    x = np.concatenate([spoken("no"), pause(0.2)])
    buf = io.BytesIO()
    sf.write(buf, np.stack([x, x], axis=1), 16000, format="WAV", subtype="FLOAT")
    r = _cli("-", "--model", graph, stdin=buf.getvalue())
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().strip() == "no"


def test_cli_errors_say_what_to_do(graph, tmp_path) -> None:
    r = _cli("--model", graph)
    assert r.returncode != 0 and b"nothing to transcribe" in r.stderr
    kws = spelling_graph(tmp_path / "kws.onnx", task="kws")
    r = _cli(str(tmp_path / "x.wav"), "--model", kws)
    assert r.returncode != 0 and b"kws model, not a speech recognizer" in r.stderr
    text = tmp_path / "notes.wav"
    text.write_text("not audio")
    good = tmp_path / "good.wav"
    write_audio(good, np.concatenate([spoken("go"), pause(0.2)]), 16000, subtype="FLOAT")
    r = _cli(str(text), str(good), "--model", graph)
    assert r.returncode == 1  # one input failed; the others are still transcribed
    assert "good.wav: go" in r.stdout.decode()
    assert b"notes.wav" in r.stderr
    r = _cli(str(good), "--model", graph, "--pause", "0")
    assert r.returncode != 0 and b"--pause and --max-segment must be positive" in r.stderr
    r = _cli(str(good), "--model", graph, "--words", "Go!,route9")  # normalised like transcripts: go, route
    assert r.returncode == 0 and r.stdout.decode().strip() == "go"
    r = _cli(str(good), "--model", graph, "--words", "@" + str(tmp_path / "none.txt"))
    assert r.returncode != 0 and b"--words: cannot read" in r.stderr
    r = _cli(str(good), "--model", graph, "--words", "go,stop", "--one-word")
    assert r.returncode == 0 and r.stdout.decode().strip() == "go"
    r = _cli(str(good), "--model", graph, "--words", "go,stop", "--one-word", "--json")  # the word's share
    (word,) = json.loads(r.stdout.decode())["words"]
    assert word["word"] == "go" and 0.5 < word["confidence"] <= 1.0
    r = _cli(str(good), "--model", graph, "--one-word")
    assert r.returncode != 0 and b"--one-word needs --words" in r.stderr
    r = _cli(str(good), "--model", str(tmp_path / "missing.onnx"))
    assert r.returncode != 0 and b"not found" in r.stderr


def test_files_go_through_the_model_folders_file_graph(tmp_path) -> None:
    """A model folder with a graph for files (``export --file-chunk``): files use it, with the same
    transcript; live captioning keeps the streaming graph."""
    import argparse

    from edgessm.runtime.registry import sha256
    from edgessm.runtime.transcribe import add_arguments, load_recognizer

    folder = tmp_path / "speller"
    folder.mkdir()
    spelling_graph(folder / "speller.onnx")
    spelling_graph(folder / "speller.c3200.onnx", frames=10)
    files = {p.name: sha256(p) for p in folder.glob("*.onnx")}
    manifest = {"name": "speller", "files": files, "file_graph": "speller.c3200.onnx", "file_chunk": 3200}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    ap = argparse.ArgumentParser()
    add_arguments(ap)
    assert load_recognizer(ap.parse_args(["x.wav", "--model", str(folder)]))().model.info.chunk == 3200
    assert load_recognizer(ap.parse_args(["--input", "mic", "--model", str(folder)]))().model.info.chunk == FRAME

    audio = tmp_path / "a.wav"
    write_audio(audio, np.concatenate([spoken("one two"), pause(1.0), spoken("three")]), 16000, subtype="FLOAT")
    r = _cli(str(audio), "--model", str(folder))
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().splitlines() == ["one two", "three"]


def test_the_state_starts_over_when_a_segment_ends_in_a_pause(graph) -> None:
    """A pause that ends a segment restarts the network state at the next chunk (as every stream
    starts), even inside one long block; a cut at ``max_segment_s`` in running speech keeps it, and
    ``restart_in_pauses=False`` never restarts."""
    model = StepModel(graph)  # the graph's state counts its calls (one per 20 ms chunk)
    audio = np.concatenate([spoken("go"), pause(1.0), spoken("up"), pause(0.3)])
    chunks = len(audio) // 320
    rec = Transcriber(model)
    segs = rec.accept_waveform(16000, audio)  # one block: the restart still lands in the pause
    assert [s.text for s in segs] == ["go"] and rec.restarts == 1
    silent_for = round(0.8 / 0.02)  # the endpointer's pause, in frames
    restarted_at = 2 * 4 - 1 + silent_for  # "go": 2 characters of 3 frames + a blank; the pause counts from that blank
    assert rec.stream.state[0].item() == chunks - restarted_at
    assert [s.text for s in rec.finish()] == ["up"] and rec.restarts == 1  # the end of input is no pause
    keep = Transcriber(model, restart_in_pauses=False)
    assert [s.text for s in keep.accept_waveform(16000, audio) + keep.finish()] == ["go", "up"]
    assert keep.restarts == 0 and keep.stream.state[0].item() == chunks
    from edgessm.runtime.ctc import EndpointConfig

    cut = Transcriber(model, EndpointConfig(max_segment_s=0.5))
    segs = cut.accept_waveform(16000, spoken("go left stop go left stop")) + cut.finish()
    assert len(segs) > 2 and cut.restarts == 0


def test_files_are_decoded_with_the_word_model_and_settings_the_folder_ships(tmp_path) -> None:
    """A folder that ships a word model (``export --lm``): files are decoded by beam search over its
    vocabulary with the shipped settings; a word it does not know is not spelled out unless asked
    (``--open-vocabulary``), and ``--lm none`` decodes greedily."""
    from edgessm.runtime.ngram import WordLM
    from edgessm.runtime.registry import sha256

    folder = tmp_path / "speller"
    folder.mkdir()
    spelling_graph(folder / "speller.onnx")
    WordLM.build(["one two three", "two three", "three one two"] * 3, order=2, min_count=1).save(folder / "lm.npz")
    files = {p.name: sha256(p) for p in folder.iterdir()}
    manifest = {"name": "speller", "files": files, "lm": "lm.npz", "lm_decoder": {"beam": 8, "word_bonus": 0.5}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    audio = tmp_path / "a.wav"
    write_audio(audio, np.concatenate([spoken("one two"), pause(1.0), spoken("three zed")]), 16000, subtype="FLOAT")

    def run(*flags: str) -> list[str]:
        r = _cli(str(audio), "--model", str(folder), *flags)
        assert r.returncode == 0, r.stderr.decode()
        return r.stdout.decode().splitlines()

    assert run() == ["one two", "three"]  # "zed" is no word of the model: not written
    assert run("--open-vocabulary") == ["one two", "three zed"]
    assert run("--lm", "none") == ["one two", "three zed"]
