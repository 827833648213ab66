"""``edgessm transcribe`` on bad and odd input, with the shipped ``asr`` model: a one-line message on
stderr and exit status 1 for each unusable input (and no transcript for it), the transcript of a
whole-file read for odd but valid recordings. ``transcribe`` writes only to stdout: there is no
output file to leave half-written.
"""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr
from fixtures import BAD_FILES, DEMOS, make_bad, noise, wav_bytes
from test_transcribe import pause, spelling_graph, spoken

from edgessm.cli import main

SPEECH = DEMOS / "noisy_speech.wav"


def transcribed(args: list[str], capsys) -> tuple[int, str, str]:
    """``(exit status, stdout, stderr)`` of ``edgessm transcribe ARGS``."""
    rc = main(["transcribe", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def whole_file_transcript(path: Path) -> list[str]:
    """The shipped recognizer's segments for the whole recording read in one go (mono), decoded as
    ``transcribe`` decodes files (its own recognizer: file graph, shipped word model)."""
    import argparse

    from edgessm.data.audio import load_audio
    from edgessm.runtime.transcribe import add_arguments, load_recognizer

    audio, rate = load_audio(path, sr=None)
    ap = argparse.ArgumentParser()
    add_arguments(ap)
    rec = load_recognizer(ap.parse_args([str(path), "--model", "asr"]))()
    return [s.text for s in rec.accept_waveform(rate, audio) + rec.finish() if s.text]


# --- unusable files and stdin: one line, exit 1, no transcript -------------------------------------------------


def one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("edgessm transcribe: "), err
    return lines[0]


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_unusable_files_are_refused_in_one_line(case, tmp_path, capsys) -> None:
    src = make_bad(tmp_path, case)
    before = src.read_bytes() if src.exists() else None
    rc, out, err = transcribed([str(src)], capsys)
    assert rc == 1 and out == ""
    assert re.search(BAD_FILES[case], one_line(err)), err
    assert (src.read_bytes() if src.exists() else None) == before


def stdin_case(case: str) -> bytes:
    x = noise(1.0)
    return {
        "empty": b"",
        "text": b"no audio here, just words\n" * 200,
        "garbage": np.random.default_rng(3).integers(0, 256, 5000, dtype=np.uint8).tobytes(),
        "cut-wav": wav_bytes(x, 16000)[:10000],
        "cut-header": wav_bytes(x, 16000)[:30],
        "cut-flac": wav_bytes(x, 16000, fmt="FLAC")[:12000],
    }[case]


BAD_STDIN = {
    "empty": r"stdin is empty: pipe a wav or flac stream in \(or give a file as IN\)",
    "text": r"stdin is not a wav/flac/ogg stream \(it holds text\); pipe wav or flac in, or give IN",
    "garbage": r"stdin is not a wav/flac/ogg stream \(Format not recognised\.\); pipe wav or flac in",
    "cut-wav": r"stdin ends early: its header promises 1\.00 s of audio but it holds 0\.31 s .*send the whole stream",
    "cut-header": r"stdin: a wav stream that cannot be read \(.*\); it is cut off or damaged.*pipe the whole stream",
    "cut-flac": r"stdin: cannot decode past 0\.\d\d s \(.*\); it is cut short or damaged: copy or export it again",
}


@pytest.mark.parametrize("case", sorted(BAD_STDIN))
def test_bad_stdin_is_refused_in_one_line(case, monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin_case(case))))
    rc, out, err = transcribed(["-"], capsys)
    assert rc == 1 and out == ""
    assert re.search(BAD_STDIN[case], one_line(err)), err


def test_a_bad_input_among_good_ones_fails_the_run_but_not_the_others(tmp_path, capsys) -> None:
    good = tmp_path / "good.wav"
    sf.write(good, sf.read(SPEECH, dtype="float32")[0], 16000)
    rc, out, err = transcribed([str(make_bad(tmp_path, "nan")), str(good)], capsys)
    assert rc == 1
    assert out.splitlines() == [f"{good}: {text}" for text in whole_file_transcript(good)]
    assert re.search(BAD_FILES["nan"], err.splitlines()[0]) and "real-time factor" in err.splitlines()[1]


# --- odd but valid recordings: the transcript of a whole-file read -----------------------------------------------


def convert(x: np.ndarray, folder: Path, case: str) -> Path:
    """``x`` (16 kHz mono) as an odd but valid file."""
    if case == "stereo-44k1-24bit":
        y = soxr.resample(x, 16000, 44100, quality="HQ")
        path = folder / "stereo.wav"
        sf.write(path, np.stack([1.2 * y, 0.8 * y], axis=1), 44100, subtype="PCM_24")  # the mix is y
    elif case == "8k-flac":
        path = folder / "low.flac"
        sf.write(path, soxr.resample(x, 16000, 8000, quality="HQ"), 8000)
    else:
        path = folder / "tiny.wav"
        sf.write(path, x[:100], 16000)
    return path


@pytest.mark.parametrize("case", ["stereo-44k1-24bit", "8k-flac", "100-samples"])
def test_odd_but_valid_files_are_transcribed(case, tmp_path, capsys) -> None:
    src = convert(sf.read(SPEECH, dtype="float32")[0], tmp_path, case)
    rc, out, err = transcribed([str(src)], capsys)
    assert rc == 0 and out.splitlines() == whole_file_transcript(src)
    seconds = sf.info(src).duration
    assert f"transcribed {seconds:.1f} s of audio" in err
    if case != "100-samples":
        assert out.strip()  # speech: some text


@pytest.mark.parametrize("case", ["stereo-44k1-24bit", "8k-flac"])
def test_odd_files_give_the_exact_transcript_of_a_graph_that_spells(case, tmp_path, capsys) -> None:
    """A recognizer whose output is known (tests/test_transcribe.py's spelling graph): resampled, 24-bit,
    two-channel or 8 kHz FLAC, the recording still reads exactly as spoken."""
    graph = spelling_graph(tmp_path / "spell.onnx")
    x = np.concatenate([pause(0.2), spoken("go left"), pause(1.0), spoken("stop"), pause(0.3)])
    rc, out, _ = transcribed([str(convert(x, tmp_path, case)), "--model", graph], capsys)
    assert rc == 0 and out.splitlines() == ["go left", "stop"]


def test_a_stereo_44k1_24bit_wav_on_stdin_is_transcribed(tmp_path, monkeypatch, capsys) -> None:
    src = convert(sf.read(SPEECH, dtype="float32")[0], tmp_path, "stereo-44k1-24bit")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(src.read_bytes())))
    rc, out, _ = transcribed(["-"], capsys)
    assert rc == 0 and out.splitlines() == whole_file_transcript(src)
