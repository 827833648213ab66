"""``edgessm transcribe -`` and ``edgessm denoise - OUT`` stream a 16-bit PCM wav stream from stdin a block
at a time (its length in the header, or left open as streaming writers leave it): the same output as the
same file given by path, reads of at most 100 ms of audio, and never the whole of stdin at once. Other
containers on stdin are still read whole (tests/test_transcribe_bad_input.py, tests/test_denoise_cli.py).
"""

from __future__ import annotations

import io
import json
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr
from fixtures import DEMOS

from edgessm.cli import main
from edgessm.runtime.sources import wav_chunks

SPEECH = DEMOS / "noisy_speech.wav"
KEYWORDS = DEMOS / "keywords.wav"
OPEN = {"known": None, "ffffffff": 0xFFFFFFFF, "zero": 0, "7ffff000": 0x7FFFF000}  # data sizes streams carry


def wav_stream(x: np.ndarray, rate: int, data_size: int | None = None, pad_header: int = 0) -> bytes:
    """``x`` as 16-bit wav bytes; ``data_size``: the RIFF and data sizes a streaming writer leaves (the
    "unknown length" placeholders); ``pad_header``: a chunk of that many bytes before the samples."""
    buf = io.BytesIO()
    sf.write(buf, x, rate, subtype="PCM_16", format="WAV")
    data = buf.getvalue()
    if pad_header:
        at = 12 + sum(8 + size for cid, _, size in wav_chunks(data) if cid != b"data")
        data = data[:at] + b"LIST" + struct.pack("<I", pad_header) + b"\0" * pad_header + data[at:]
        data = data[:4] + struct.pack("<I", len(data) - 8) + data[8:]
    if data_size is not None:
        at = next(offset for cid, offset, _ in wav_chunks(data) if cid == b"data")
        data = data[:4] + struct.pack("<I", data_size) + data[8 : at - 4] + struct.pack("<I", data_size) + data[at:]
    return data


class SpyPipe(io.BytesIO):
    """stdin that records the size of every read and refuses a read of everything."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.reads: list[int] = []

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            raise AssertionError("the whole of stdin was read at once")
        self.reads.append(size)
        return super().read(size)


def pipe_in(monkeypatch, data: bytes) -> SpyPipe:
    spy = SpyPipe(data)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(spy))
    return spy


def stereo_44k1(x: np.ndarray) -> np.ndarray:
    y = soxr.resample(x, 16000, 44100, quality="HQ")
    return np.stack([0.9 * y, 0.6 * y], axis=1)


# --- the same output as the file -------------------------------------------------------------------------------


@pytest.mark.parametrize("size", sorted(OPEN))
def test_denoise_of_a_wav_stream_equals_denoise_of_the_file(size, tmp_path, monkeypatch, capsys) -> None:
    x, rate = sf.read(SPEECH, dtype="float32")
    src = tmp_path / "in.wav"
    sf.write(src, x, rate, subtype="PCM_16")
    assert main(["denoise", str(src), str(tmp_path / "by-path.wav")]) == 0
    spy = pipe_in(monkeypatch, wav_stream(x, rate, OPEN[size]))
    assert main(["denoise", "-", str(tmp_path / "piped.wav")]) == 0
    assert "9.25 s processed (1 channel at 16000 Hz)" in capsys.readouterr().err
    by_path, _ = sf.read(tmp_path / "by-path.wav", dtype="int16")
    piped, _ = sf.read(tmp_path / "piped.wav", dtype="int16")
    assert sf.info(tmp_path / "piped.wav").subtype == "PCM_16" and len(piped) == len(x)
    assert np.array_equal(piped, by_path)
    assert max(spy.reads) <= 3200  # 100 ms at 16 kHz mono


def test_denoise_of_a_stereo_44k1_stream_to_stdout_equals_the_file(tmp_path) -> None:
    """``sox IN -c 2 -r 44100 -t wav - | edgessm denoise - - > OUT``: each channel its own stream, as for the file."""
    x = stereo_44k1(sf.read(SPEECH, dtype="float32")[0][: 5 * 16000])
    src = tmp_path / "in.wav"
    sf.write(src, x, 44100, subtype="PCM_16")
    assert main(["denoise", str(src), str(tmp_path / "by-path.wav")]) == 0
    done = subprocess.run([sys.executable, "-m", "edgessm", "denoise", "-", "-"], capture_output=True, check=True,
                          input=wav_stream(x, 44100, OPEN["ffffffff"]))  # fmt: skip
    piped, rate = sf.read(io.BytesIO(done.stdout), dtype="int16")
    by_path, _ = sf.read(tmp_path / "by-path.wav", dtype="int16")
    assert rate == 44100 and piped.shape == by_path.shape == x.shape
    assert np.array_equal(piped, by_path)


@pytest.mark.parametrize(("case", "size"), [("mono", "known"), ("mono", "zero"), ("stereo-44k1", "ffffffff")])
def test_transcribe_of_a_wav_stream_gives_the_text_of_the_file(case, size, tmp_path, monkeypatch, capsys) -> None:
    x, rate = sf.read(SPEECH, dtype="float32")
    if case == "stereo-44k1":
        x, rate = stereo_44k1(x), 44100
    src = tmp_path / "in.wav"
    sf.write(src, x, rate, subtype="PCM_16")
    assert main(["transcribe", str(src), "--json"]) == 0
    by_path = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    pipe_in(monkeypatch, wav_stream(x, rate, OPEN[size]))
    assert main(["transcribe", "-", "--json"]) == 0
    out, err = capsys.readouterr()
    piped = [json.loads(line) for line in out.splitlines()]
    assert [s.pop("file") for s in by_path] == [str(src)] * len(by_path) and by_path  # some speech was heard
    assert [s.pop("file") for s in piped] == ["stdin"] * len(piped)
    assert piped == by_path  # the same text, word by word, at the same times
    assert "transcribed 9.2 s of audio" in err


def test_listen_reads_a_wav_stream_whose_header_outgrows_the_first_read(tmp_path, monkeypatch, capsys) -> None:
    """A metadata chunk before the samples longer than the first 100 ms read: the samples still all arrive."""
    x, rate = sf.read(KEYWORDS, dtype="float32")
    assert main(["listen", "--model", "kws35", "--fast", "--json", "--input", str(KEYWORDS)]) == 0
    by_path = capsys.readouterr().out
    for command in (["listen", "--model", "kws35", "--fast", "--json", "--input", "-"], ["transcribe", "-"]):
        pipe_in(monkeypatch, wav_stream(x, rate, pad_header=5000))
        assert main(command) == 0
        out, err = capsys.readouterr()
        if command[0] == "listen":
            assert out == by_path and "summary: 13.78 s of audio heard, 8 detections" in err  # demos/README.md
        else:
            assert "transcribed 13.8 s of audio" in err


# --- a block at a time -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["denoise", "transcribe"])
def test_a_long_stream_is_read_a_block_at_a_time(command, tmp_path, monkeypatch, capsys) -> None:
    """Three minutes at 8 kHz stereo: no read of stdin asks for more than 100 ms of audio (or the 3200
    bytes first looked at), nothing reads all of it, and exactly the samples sent arrive, in 1 s blocks
    (the models' work is stubbed out: only the reading is under test)."""
    from edgessm.runtime import denoise, transcriber

    rate, seconds = 8000, 180
    x = (0.05 * np.random.default_rng(0).standard_normal((rate * seconds + 123, 2))).astype(np.float32)
    sent = wav_stream(x, rate, OPEN["ffffffff"])
    fed: list[np.ndarray] = []
    if command == "denoise":

        def feed(self, block):
            fed.append(block)
            self.frames_in += block.shape[1]
            self.frames_out += block.shape[1]
            return block

        monkeypatch.setattr(denoise.Denoiser, "feed", feed)
        args = ["denoise", "-", str(tmp_path / "out.wav")]
    else:
        monkeypatch.setattr(transcriber.Transcriber, "accept_waveform", lambda self, r, s: fed.append(s) or [])
        args = ["transcribe", "-"]
    spy = pipe_in(monkeypatch, sent)
    assert main(args) == 0
    assert max(spy.reads) <= max(3200, rate // 10 * 4) and len(spy.reads) >= seconds * 10
    assert [b.shape[-1] for b in fed] == [rate] * seconds + [123]
    heard = np.concatenate(fed, axis=-1)
    expected = sf.read(io.BytesIO(sent), dtype="float32")[0].T
    assert np.array_equal(heard, expected if command == "denoise" else expected.mean(axis=0))
    if command == "denoise":
        assert np.array_equal(sf.read(tmp_path / "out.wav", dtype="float32")[0].T, expected)


# --- cut off, empty, ragged ----------------------------------------------------------------------------------------


def test_a_stream_cut_off_after_many_blocks_fails_at_its_end_and_leaves_nothing(tmp_path, monkeypatch) -> None:
    x = (0.05 * np.random.default_rng(1).standard_normal(16000 * 6)).astype(np.float32)
    pipe_in(monkeypatch, wav_stream(x, 16000)[: 44 + 2 * 16000 * 4 + 1001])  # the header promises 6 s, 4.03 s came
    out = tmp_path / "out.wav"
    with pytest.raises(SystemExit) as e:
        main(["denoise", "-", str(out)])
    assert re.fullmatch(
        r"edgessm denoise: stdin ends early: its header promises 6\.00 s of audio but it holds 4\.03 s "
        r"\(cut off while being copied, downloaded or piped\); send the whole stream",
        e.value.code,
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("size", ["known", "ffffffff"])
def test_a_header_without_samples_is_refused_as_before(size, monkeypatch, capsys) -> None:
    pipe_in(monkeypatch, wav_stream(np.zeros(16000, np.float32), 16000, OPEN[size])[:44])
    assert main(["transcribe", "-"]) == 1
    message = "edgessm transcribe: stdin: the file holds no samples; record or export it again\n"
    assert capsys.readouterr().err == message


def test_a_partial_last_frame_of_an_open_stream_is_dropped_as_libsndfile_does(tmp_path, monkeypatch) -> None:
    x = (0.05 * np.random.default_rng(2).standard_normal((16000, 2))).astype(np.float32)
    sent = wav_stream(x, 16000, OPEN["ffffffff"]) + b"\x01\x02\x03"
    pipe_in(monkeypatch, sent)
    assert main(["denoise", "-", str(tmp_path / "out.wav"), "--model", "denoise"]) == 0
    assert sf.info(tmp_path / "out.wav").frames == sf.info(io.BytesIO(sent)).frames == 16000


def test_other_containers_on_stdin_are_still_read_whole(tmp_path, monkeypatch, capsys) -> None:
    """FLAC (and 24-bit wav) need libsndfile, which seeks: read whole, the same transcript as the file."""
    x, rate = sf.read(SPEECH, dtype="float32")
    src = tmp_path / "in.flac"
    sf.write(src, x, rate)
    assert main(["transcribe", str(src)]) == 0
    by_path = capsys.readouterr().out
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(Path(src).read_bytes())))
    assert main(["transcribe", "-"]) == 0
    assert capsys.readouterr().out == by_path
