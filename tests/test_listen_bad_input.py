"""``edgessm listen`` on bad and odd input, with the shipped ``kws35`` model: one-line errors and exit
status 1 for unusable input, results for odd but valid recordings, and ``--record`` written atomically
(a failure leaves no file and no temporary file, and never touches the input or an older recording).
A recording is read a block at a time: the same detections as a whole-file read, and constant memory.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr
from fixtures import BAD_FILES as _BAD_FILES
from fixtures import DEMOS, make_bad, noise, wav_bytes

from edgessm.cli import main

DEMO = DEMOS / "keywords.wav"
DEMO_WORDS = ["yes", "left", "stop", "no", "up", "right", "go", "off"]  # demos/README.md: kws35 (v13) by default
FAST = ["listen", "--model", "kws35", "--fast", "--json"]


def leftovers(folder: Path) -> list[str]:
    """Temporary files a writer left behind."""
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def refused(args: list[str], capsys) -> str:
    """The message of a command that must stop with an error (SystemExit with a message: exit status 1)."""
    with pytest.raises(SystemExit) as e:
        main(args)
    message = e.value.code
    assert isinstance(message, str) and message.startswith("edgessm listen: ") and "\n" not in message, message
    assert "summary" not in capsys.readouterr().err  # no summary after an error
    return message


def listened(args: list[str], capsys) -> tuple[list[dict], str]:
    """``(detections, stderr)`` of a command that must succeed."""
    assert main(args) == 0
    out, err = capsys.readouterr()
    return [json.loads(line) for line in out.splitlines()], err


def stdin_bytes(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


def whole_file_detections(path: Path) -> list[dict]:
    """What listen detected before it streamed files: the whole recording read at once (mono), then fed
    to kws35's stream 100 ms at a time, with the decisions at the model's defaults."""
    from edgessm.data.audio import load_audio
    from edgessm.runtime.kws import KeywordDecider, graph_decision
    from edgessm.runtime.registry import resolve_graph
    from edgessm.runtime.session import StepModel

    model = StepModel(resolve_graph("kws35"))
    info = model.info
    decider = KeywordDecider(info.labels, info.stride / info.sample_rate, graph_decision(info.extra))
    audio, rate = load_audio(path, sr=None)
    stream, found = model.create_stream(), []
    for pos in range(0, len(audio), rate // 10):
        stream.accept_waveform(rate, audio[pos : pos + rate // 10])
        found += [d for out, heard in stream.chunks() for d in decider.process(out, heard)]
    stream.flush()
    found += [d for out, heard in stream.chunks() for d in decider.process(out, heard)]
    found += decider.flush()  # a keyword the speech-after gate still holds
    return [{"keyword": d.label, "time": round(d.time_s, 3), "score": round(d.score, 3)} for d in found]


# --- unusable files: one line, exit 1, no --record -------------------------------------------------------------


BAD_FILES = {**_BAD_FILES, "folder": r"folder\.wav is a folder, not an audio file"}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_unusable_files_are_refused_in_one_line_and_leave_no_recording(case, tmp_path, capsys) -> None:
    src = make_bad(tmp_path, case)
    before = src.read_bytes() if src.is_file() else None
    rec = tmp_path / "heard.wav"
    message = refused([*FAST, "--input", str(src), "--record", str(rec)], capsys)
    assert re.search(BAD_FILES[case], message), message
    assert not rec.exists() and leftovers(tmp_path) == []
    if before is not None:
        assert src.read_bytes() == before


def test_a_failure_keeps_an_older_recording_untouched(tmp_path, capsys) -> None:
    src = make_bad(tmp_path, "nan")
    rec = tmp_path / "heard.wav"
    sf.write(rec, noise(0.5, seed=1), 16000)
    old = rec.read_bytes()
    refused([*FAST, "--input", str(src), "--record", str(rec)], capsys)
    assert rec.read_bytes() == old and leftovers(tmp_path) == []


def test_the_shell_sees_exit_status_1_and_one_line_on_stderr(tmp_path) -> None:
    src = make_bad(tmp_path, "nan")
    done = subprocess.run([sys.executable, "-m", "edgessm", *FAST, "--input", str(src)], capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("edgessm listen: ") and "NaN" in done.stderr


# --- odd but valid files: heard whole, the same detections as a whole-file read -------------------------------


def make_odd(folder: Path, case: str) -> Path:
    x, _ = sf.read(DEMO, dtype="float32")
    if case == "stereo-44k1-24bit":  # both channels hold the words (one at half level): the mix is the demo
        y = soxr.resample(x, 16000, 44100, quality="HQ")
        path = folder / "stereo.wav"
        sf.write(path, np.stack([y, 0.5 * y], axis=1), 44100, subtype="PCM_24")
    elif case == "8k-flac":
        path = folder / "low.flac"
        sf.write(path, soxr.resample(x, 16000, 8000, quality="HQ"), 8000)
    else:  # "100-samples"
        path = folder / "tiny.wav"
        sf.write(path, x[16000:16100], 16000)
    return path


@pytest.mark.parametrize("case", ["stereo-44k1-24bit", "8k-flac", "100-samples"])
def test_odd_but_valid_files_are_heard_whole(case, tmp_path, capsys) -> None:
    src = make_odd(tmp_path, case)
    rec = tmp_path / "heard.wav"
    events, err = listened([*FAST, "--input", str(src), "--record", str(rec)], capsys)
    info = sf.info(src)
    assert events == whole_file_detections(src)
    heard, rate = sf.read(rec)
    assert rate == 16000 and abs(len(heard) - info.frames * 16000 / info.samplerate) <= 2
    assert f"recorded {len(heard) / 16000:.2f} s to {rec}" in err and leftovers(tmp_path) == []
    if case == "stereo-44k1-24bit":  # channels averaged, 44.1 kHz resampled: the demo's words, at its times
        x, _ = sf.read(DEMO, dtype="float32")  # the reference at the mix's level, (1 + 0.5) / 2 of the demo's:
        sf.write(tmp_path / "level.wav", 0.75 * x, 16000)  # a word near the threshold may cross a frame later
        demo, _ = listened([*FAST, "--input", str(tmp_path / "level.wav")], capsys)
        assert [e["keyword"] for e in events] == [e["keyword"] for e in demo] == DEMO_WORDS
        # within five 20 ms frames (times are whole frames: the float tolerance is round-off, not slack)
        assert all(abs(a["time"] - b["time"]) <= 0.1 + 1e-9 for a, b in zip(events, demo, strict=True))
    if case == "100-samples":
        assert events == [] and len(heard) == 100


# --- stdin: raw PCM or a 16-bit wav stream; garbage and cut-off streams ----------------------------------------


def stdin_case(case: str) -> bytes:
    x = noise(1.0, seed=2)
    pcm = (x * 32767).astype("<i2").tobytes()
    return {
        "empty": b"",
        "text": b"no audio here, just words\n" * 200,
        "flac": wav_bytes(x, 16000, fmt="FLAC"),
        "wav-24bit": wav_bytes(x, 16000, subtype="PCM_24"),
        "odd-byte": pcm + b"\x01",  # raw PCM that ends inside a sample
        "cut-wav": wav_bytes(x, 16000)[:10000],  # the header promises 1 s
        "cut-header": wav_bytes(x, 16000)[:30],
    }[case]


BAD_STDIN = {
    "empty": r"stdin is empty: pipe raw 16-bit little-endian mono PCM at --rate Hz, or a 16-bit wav stream",
    "text": r"stdin holds text, not audio: pipe raw 16-bit .* or give --input FILE",
    "flac": r"stdin holds a FLAC stream, which listen cannot decode from a pipe: pipe raw 16-bit",
    "wav-24bit": r"stdin: a wav stream of 24-bit 1-channel samples \(format tag 1\); listen reads 16-bit PCM",
    "odd-byte": r"stdin ended inside a sample \(1 bytes of a 2-byte frame\): it was cut off",
    "cut-wav": r"stdin ends early: its wav header promises 1\.00 s, it sent 0\.31 s; send the whole stream",
    "cut-header": r"stdin ended inside its wav header: send the whole stream",
}


@pytest.mark.parametrize("case", sorted(BAD_STDIN))
def test_bad_stdin_is_refused_in_one_line_and_leaves_no_recording(case, tmp_path, monkeypatch, capsys) -> None:
    stdin_bytes(monkeypatch, stdin_case(case))
    rec = tmp_path / "heard.wav"
    message = refused([*FAST, "--input", "-", "--record", str(rec)], capsys)
    assert re.search(BAD_STDIN[case], message), message
    assert not rec.exists() and leftovers(tmp_path) == []


def test_a_wav_stream_on_stdin_is_read_as_its_header_says(tmp_path, monkeypatch, capsys) -> None:
    """Stereo 44.1 kHz 16-bit wav piped in (``sox demo.wav -c 2 -r 44100 -t wav - | edgessm listen --input -``):
    the same detections as the file."""
    x, _ = sf.read(DEMO, dtype="float32")
    y = soxr.resample(x, 16000, 44100, quality="HQ")
    stereo = np.stack([y, y], axis=1)
    sf.write(tmp_path / "same.wav", stereo, 44100, subtype="PCM_16")
    stdin_bytes(monkeypatch, (tmp_path / "same.wav").read_bytes())
    piped, err = listened([*FAST, "--input", "-"], capsys)
    assert [e["keyword"] for e in piped] == DEMO_WORDS
    assert piped == whole_file_detections(tmp_path / "same.wav")
    assert "summary: 13.78 s of audio heard" in err


# --- --record and options: refused before listening ------------------------------------------------------------


def test_record_never_replaces_the_input_and_needs_a_file_name(tmp_path, capsys) -> None:
    src = tmp_path / "in.wav"
    sf.write(src, noise(0.5), 16000, subtype="FLOAT")
    before = src.read_bytes()
    cases = {
        str(src): "--record .*in.wav is the input file; give another name",
        str(tmp_path): "is a folder; give a file name",
        "-": "--record - would mix audio into the detections on stdout",
        str(tmp_path / "heard.txt"): r"cannot write \.txt files; name it \.wav or \.flac",
    }
    for record, advice in cases.items():
        message = refused([*FAST, "--input", str(src), "--record", record], capsys)
        assert re.search(advice, message), message
    assert (
        src.read_bytes() == before
        and leftovers(tmp_path) == []
        and sorted(p.name for p in tmp_path.iterdir()) == ["in.wav"]
    )
    assert "--rate is the sample rate" in refused([*FAST, "--input", "-", "--rate", "0"], capsys)


def test_record_as_flac_and_a_failed_write_leaves_nothing(tmp_path, monkeypatch, capsys) -> None:
    from edgessm.runtime import denoise

    src = tmp_path / "in.wav"
    sf.write(src, noise(2.0, 22050), 22050)
    rec = tmp_path / "heard.flac"
    listened([*FAST, "--input", str(src), "--record", str(rec)], capsys)
    assert sf.info(rec).format == "FLAC" and sf.info(rec).frames == 32000
    rec.unlink()
    write, calls = denoise.Writer.write, []

    def disk_full(self, block):
        calls.append(block.shape)
        if len(calls) == 5:
            raise OSError(28, "No space left on device")
        return write(self, block)

    monkeypatch.setattr(denoise.Writer, "write", disk_full)
    message = refused([*FAST, "--input", str(src), "--record", str(rec)], capsys)
    assert message == f"edgessm listen: cannot write {rec}: [Errno 28] No space left on device"
    assert not rec.exists() and leftovers(tmp_path) == []


def test_sigterm_leaves_no_recording_and_exits_143(tmp_path, monkeypatch, capsys) -> None:
    from edgessm.runtime import listen

    src = tmp_path / "in.wav"
    sf.write(src, noise(2.0), 16000)
    feed, calls = listen.Listener.feed, []

    def terminated(self, rate, samples):
        calls.append(len(samples))
        if len(calls) == 4:
            raise listen.Terminated  # what the SIGTERM handler raises
        return feed(self, rate, samples)

    monkeypatch.setattr(listen.Listener, "feed", terminated)
    rec = tmp_path / "heard.wav"
    assert main([*FAST, "--input", str(src), "--record", str(rec)]) == 143
    assert f"edgessm listen: terminated; {rec} was not written" in capsys.readouterr().err
    assert not rec.exists() and leftovers(tmp_path) == []


# --- streaming: a block at a time, the same detections ---------------------------------------------------------


def test_the_demo_streamed_gives_the_whole_file_detections(capsys) -> None:
    events, err = listened([*FAST, "--input", str(DEMO)], capsys)
    assert events == whole_file_detections(DEMO)
    assert [e["keyword"] for e in events] == DEMO_WORDS  # each once, as demos/README.md says
    assert f"summary: 13.78 s of audio heard, {len(DEMO_WORDS)} detections" in err


def test_a_long_recording_is_read_a_block_at_a_time(tmp_path, monkeypatch, capsys) -> None:
    """Ten minutes at 8 kHz stereo: no read returns more than 100 ms, nothing reads the whole file, and
    every sample reaches the listener (whose work is stubbed out here: only the reading is under test)."""
    from edgessm.data import audio
    from edgessm.runtime import listen

    rate, minutes = 8000, 10
    path = tmp_path / "long.wav"
    with sf.SoundFile(path, "w", rate, 2, "PCM_16") as f:
        for i in range(minutes * 6):
            f.write(noise(10.0, rate, channels=2, seed=i))
    reads, fed = [], []
    read = sf.SoundFile.read

    def spy(self, frames=-1, *args, **kwargs):
        out = read(self, frames, *args, **kwargs)
        reads.append(len(out))
        return out

    def whole(*args, **kwargs):
        raise AssertionError("the whole file was read")

    monkeypatch.setattr(sf.SoundFile, "read", spy)
    monkeypatch.setattr(sf, "read", whole)
    monkeypatch.setattr(audio, "load_audio", whole)
    monkeypatch.setattr(listen.Listener, "feed", lambda self, r, samples: fed.append((r, samples.shape)))
    listened(["listen", "--model", "kws35", "--fast", "--input", str(path)], capsys)
    assert max(reads) == rate // 10 and len(reads) >= minutes * 600
    assert {r for r, _ in fed} == {rate} and all(len(s) == 1 for _, s in fed)  # mono blocks
    assert sum(s[0] for _, s in fed) == minutes * 60 * rate
