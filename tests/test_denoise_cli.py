"""``edgessm denoise``: files of any rate/channels/format end to end, alignment, safety, stdin/stdout, live."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr
import torch
from conftest import randomize

from edgessm.cli import main
from edgessm.deploy.onnx_export import export_onnx
from edgessm.nets import build_network

TINY = {"channels": [4, 8], "states": [4, 4], "kinds": ["full", "pointwise"], "pools": [4, 4],
        "bottleneck_states": 8, "n_bottleneck": 1}  # fmt: skip
CHUNK = 256
SUMMARY = re.compile(
    r"summary: (?P<seconds>[\d.]+) s processed \((?P<channels>\d+) channels? at (?P<rate>\d+) Hz\) into (?P<out>\S+), "
    r"real-time factor (?P<rtf>[\d.]+)"
)
LIVE_SUMMARY = re.compile(
    r"summary: (?P<seconds>[\d.]+) s processed \(1 channel at (?P<rate>\d+) Hz\) to (?P<target>.+), "
    r"(?P<over>\d+) input overflows?, (?P<under>\d+) output underflows?, real-time factor (?P<rtf>[\d.]+)"
)


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    """A small random denoiser (projections random, dynamics as initialised) and its stepwise graph."""
    torch.manual_seed(0)
    net = randomize(build_network("denoise", **TINY), seed=3, dynamics=False).eval()
    path = tmp_path_factory.mktemp("g") / "dn.onnx"
    export_onnx(net, path, CHUNK, {"task": "denoise"})
    return net, path


@pytest.fixture(scope="module")
def identity_graph(tmp_path_factory):
    """The same network made an exact identity: the level-0 decoder and output blocks (one channel, no
    norm) add zero SSM output to their skip and have no SiLU, and the upsampler from level 1 outputs 0."""
    torch.manual_seed(0)
    net = build_network("denoise", **TINY).eval()
    with torch.no_grad():
        for block in (net.dec[0], net.out[0], net.out[1]):
            block.ssm.E.zero_()
            block.activation = False
        net.up[0].conv.weight.zero_()
        net.up[0].conv.bias.zero_()
        x = torch.randn(1, 1, 4 * CHUNK)
        assert torch.equal(net(x), x)
    path = tmp_path_factory.mktemp("g") / "identity.onnx"
    export_onnx(net, path, CHUNK, {"task": "denoise"})
    return path


def forward(net, x16: np.ndarray) -> np.ndarray:
    """The PyTorch parallel forward on ``x16`` (16 kHz), zero-padded to whole chunks and cut back."""
    xp = np.concatenate([x16, np.zeros(-len(x16) % CHUNK, np.float32)]).astype(np.float32)
    with torch.no_grad():
        return net(torch.from_numpy(xp).view(1, 1, -1))[0, 0].numpy()[: len(x16)]


def reference(net, x: np.ndarray, rate: int) -> np.ndarray:
    """What the command must write for channel ``x`` at ``rate``: to 16 kHz, the network, back."""
    if rate == 16000:
        return forward(net, x)
    y = soxr.resample(forward(net, soxr.resample(x, rate, 16000, quality="HQ")), 16000, rate, quality="HQ")
    return np.pad(y, (0, max(0, len(x) - len(y))))[: len(x)]


def noise(seconds: float, rate: int, channels: int = 1, seed: int = 0, level: float = 0.2) -> np.ndarray:
    x = level * np.random.default_rng(seed).standard_normal((round(seconds * rate), channels))
    return x.astype(np.float32).squeeze(1) if channels == 1 else x.astype(np.float32)


def denoise(*args) -> int:
    return main(["denoise", *map(str, args)])


def summary_of(stderr: str) -> re.Match:
    found = [m for line in stderr.splitlines() if (m := SUMMARY.fullmatch(line.strip()))]
    assert len(found) == 1, f"expected one summary line on stderr, got {stderr!r}"
    return found[0]


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# --- files: formats, rates, channels, exactness ---------------------------------------------------------------


def test_wav_int16_mono_16k_matches_the_pytorch_forward(graph, tmp_path, capsys) -> None:
    net, path = graph
    x = noise(2.0, 16000)[: 16000 * 2 - 77]  # not a whole number of chunks
    sf.write(tmp_path / "in.wav", x, 16000, subtype="PCM_16")
    x16, _ = sf.read(tmp_path / "in.wav", dtype="float32")  # what the file holds
    ref = forward(net, x16)
    assert np.abs(ref).max() > 0.05  # the network does something

    assert denoise(tmp_path / "in.wav", tmp_path / "f.wav", "--model", path, "--subtype", "FLOAT") == 0
    out, rate = sf.read(tmp_path / "f.wav", dtype="float32")
    assert rate == 16000 and out.shape == x.shape
    assert np.abs(out - ref).max() < 1e-4
    s = summary_of(capsys.readouterr().err)
    assert float(s["seconds"]) == pytest.approx(len(x) / 16000, abs=0.005) and s["channels"] == "1"
    assert s["rate"] == "16000" and float(s["rtf"]) > 0

    assert denoise(tmp_path / "in.wav", tmp_path / "o.wav", "--model", path) == 0  # the input's subtype
    info = sf.info(tmp_path / "o.wav")
    assert (info.frames, info.samplerate, info.channels, info.subtype) == (len(x), 16000, 1, "PCM_16")
    out16, _ = sf.read(tmp_path / "o.wav", dtype="float32")
    assert np.abs(out16 - np.clip(ref, -1, 32767 / 32768)).max() < 1e-4
    assert leftovers(tmp_path) == []


def test_wav_float_stereo_44k_each_channel_its_own_stream(graph, tmp_path, capsys) -> None:
    net, path = graph
    x = noise(1.5, 44100, channels=2, seed=1)[:-13]
    x[:, 1] *= 0.5
    sf.write(tmp_path / "in.wav", x, 44100, subtype="FLOAT")
    assert denoise(tmp_path / "in.wav", tmp_path / "out.wav", "--model", path) == 0
    info = sf.info(tmp_path / "out.wav")
    assert (info.frames, info.samplerate, info.channels, info.subtype) == (len(x), 44100, 2, "FLOAT")
    out, _ = sf.read(tmp_path / "out.wav", dtype="float32")
    for c in range(2):  # resampled to 16 kHz, denoised, resampled back: the parallel forward's result
        ref = reference(net, x[:, c], 44100)
        assert np.abs(out[:, c] - ref).max() < 2e-3 * np.abs(ref).max()
    assert np.abs(out[:, 0] - out[:, 1]).max() > 0.01
    assert summary_of(capsys.readouterr().err)["channels"] == "2"

    assert denoise(tmp_path / "in.wav", tmp_path / "mono.wav", "--model", path, "--mono") == 0
    mono, _ = sf.read(tmp_path / "mono.wav", dtype="float32")
    assert mono.shape == (len(x),)
    ref = reference(net, x.mean(axis=1), 44100)
    assert np.abs(mono - ref).max() < 2e-3 * np.abs(ref).max()


def test_flac_24bit_keeps_length_rate_channels_and_subtype(graph, tmp_path) -> None:
    net, path = graph
    x = noise(1.0, 22050, channels=2, seed=2)[:-5]
    sf.write(tmp_path / "in.flac", x, 22050, subtype="PCM_24")
    assert denoise(tmp_path / "in.flac", tmp_path / "out.flac", "--model", path) == 0
    info = sf.info(tmp_path / "out.flac")
    assert (info.format, info.subtype, info.frames, info.samplerate, info.channels) == (
        "FLAC", "PCM_24", len(x), 22050, 2
    )  # fmt: skip
    out, _ = sf.read(tmp_path / "out.flac", dtype="float32")
    held, _ = sf.read(tmp_path / "in.flac", dtype="float32")
    ref = np.clip(reference(net, held[:, 1], 22050), -1, 1)
    assert np.abs(out[:, 1] - ref).max() < 2e-3 * np.abs(ref).max()
    # another container or sample format on request
    assert denoise(tmp_path / "in.flac", tmp_path / "out.wav", "--model", path, "--subtype", "pcm_16") == 0
    assert sf.info(tmp_path / "out.wav").subtype == "PCM_16" and sf.info(tmp_path / "out.wav").frames == len(x)
    with pytest.raises(SystemExit, match="FLOAT is not available in FLAC"):
        denoise(tmp_path / "in.flac", tmp_path / "x.flac", "--model", path, "--subtype", "FLOAT")
    with pytest.raises(SystemExit, match=r"cannot write \.m4a files"):
        denoise(tmp_path / "in.flac", tmp_path / "x.m4a", "--model", path)


def test_output_is_time_aligned_with_the_input(identity_graph, tmp_path) -> None:
    """Through an identity graph, clicks come out where they went in: at 16 kHz exactly, at 44.1 kHz
    (resampled there and back) at the same samples, with no lag in the cross-correlation."""
    clicks = [1000, 4321, 9999, 15900]  # the last one in the zero-padded final chunk
    x = np.zeros(16000 - 37, np.float32)
    for i, t in enumerate(clicks):
        x[t] = 0.5 - 0.1 * i
    sf.write(tmp_path / "c16.wav", x, 16000, subtype="FLOAT")
    assert denoise(tmp_path / "c16.wav", tmp_path / "o16.wav", "--model", identity_graph) == 0
    out, _ = sf.read(tmp_path / "o16.wav", dtype="float32")
    assert out.shape == x.shape and np.abs(out - x).max() < 1e-6

    rate, n = 44100, 44100 * 2 - 11
    t = np.arange(n)
    x = np.zeros((n, 2), np.float32)
    for i, at in enumerate([3000, 20011, 50000, n - 400]):  # 2 kHz tone bursts (well inside the 8 kHz band)
        burst = np.hanning(221) * np.sin(2 * np.pi * 2000 * (t[:221] - 110) / rate)
        x[at - 110 : at + 111, i % 2] += (0.6 * burst).astype(np.float32)
    sf.write(tmp_path / "c44.wav", x, rate, subtype="FLOAT")
    assert denoise(tmp_path / "c44.wav", tmp_path / "o44.wav", "--model", identity_graph) == 0
    out, _ = sf.read(tmp_path / "o44.wav", dtype="float32")
    assert out.shape == x.shape and np.abs(out - x).max() < 0.01
    for c in range(2):
        lags = range(-20, 21)
        xc = [float(np.dot(np.roll(out[:, c], -k), x[:, c])) for k in lags]
        assert lags[int(np.argmax(xc))] == 0


def test_atten_lim_mixes_the_input_back(graph, tmp_path) -> None:
    _, path = graph
    x = noise(1.0, 44100, channels=2, seed=4)
    sf.write(tmp_path / "in.wav", x, 44100, subtype="FLOAT")
    assert denoise(tmp_path / "in.wav", tmp_path / "full.wav", "--model", path) == 0
    assert denoise(tmp_path / "in.wav", tmp_path / "lim.wav", "--model", path, "--atten-lim", "6") == 0
    full, _ = sf.read(tmp_path / "full.wav", dtype="float32")
    lim, _ = sf.read(tmp_path / "lim.wav", dtype="float32")
    g = 10 ** (-6 / 20)
    assert np.abs(lim - (g * x + (1 - g) * full)).max() < 1e-5
    assert np.abs(lim - full).max() > 0.01

    pcm = (x[:, 0] * 32767).astype(np.int16)  # 0 dB: nothing removed, the input exactly
    sf.write(tmp_path / "pcm.wav", pcm, 44100, subtype="PCM_16")
    assert denoise(tmp_path / "pcm.wav", tmp_path / "same.wav", "--model", path, "--atten-lim", "0") == 0
    assert np.array_equal(sf.read(tmp_path / "same.wav", dtype="int16")[0], pcm)
    with pytest.raises(SystemExit, match="--atten-lim is a number of dB >= 0"):
        denoise(tmp_path / "pcm.wav", tmp_path / "x.wav", "--model", path, "--atten-lim", "-3")


# --- never losing data -------------------------------------------------------------------------------------------


def test_refuses_to_overwrite_the_input_unless_in_place(graph, tmp_path) -> None:
    net, path = graph
    x = noise(0.5, 16000, seed=5)
    wav = tmp_path / "in.wav"
    sf.write(wav, x, 16000, subtype="PCM_16")
    os.chmod(wav, 0o640)
    before = wav.read_bytes()
    (tmp_path / "sub").mkdir()
    os.symlink(wav, tmp_path / "link.wav")
    os.link(wav, tmp_path / "hard.wav")
    for out in (wav, tmp_path / "sub" / ".." / "in.wav", tmp_path / "link.wav", tmp_path / "hard.wav"):
        with pytest.raises(SystemExit, match="is the input file; give another name, or --in-place"):
            denoise(wav, out, "--model", path)
        assert wav.read_bytes() == before and leftovers(tmp_path) == []

    assert denoise(wav, wav, "--model", path, "--in-place", "--subtype", "FLOAT") == 0
    out, _ = sf.read(wav, dtype="float32")
    assert np.abs(out - forward(net, sf.read(tmp_path / "hard.wav", dtype="float32")[0])).max() < 1e-4
    assert (tmp_path / "hard.wav").read_bytes() == before  # the other name still holds the original
    assert os.stat(wav).st_mode & 0o777 == 0o640 and leftovers(tmp_path) == []
    replaced = wav.read_bytes()
    assert denoise(wav, tmp_path / "link.wav", "--model", path, "--in-place") == 0  # through the symlink
    assert (tmp_path / "link.wav").is_symlink() and wav.read_bytes() != replaced and leftovers(tmp_path) == []


def test_refuses_missing_empty_non_audio_and_nan_inputs_and_leaves_nothing(graph, tmp_path) -> None:
    _, path = graph
    (tmp_path / "notes.wav").write_text("these are not samples\n" * 100)
    sf.write(tmp_path / "empty.wav", np.zeros(0, np.float32), 16000)
    (tmp_path / "zero.wav").write_bytes(b"")
    x = noise(3.0, 16000, seed=6)
    x[24000] = np.nan  # 1.5 s in: found after the first blocks were already denoised
    sf.write(tmp_path / "nan.wav", x, 16000, subtype="FLOAT")
    cases = {
        "missing.wav": "no such file",
        "notes.wav": "not a readable audio file .*convert it to wav or flac",
        "empty.wav": "holds no samples",
        "zero.wav": r"the file is empty \(0 bytes\)",
        "nan.wav": r"NaN or infinite sample at 1\.500 s.*re-export it",
        ".": "is a folder",
    }
    for name, message in cases.items():
        src = tmp_path / name
        before = src.read_bytes() if src.is_file() else None
        with pytest.raises(SystemExit, match=f"^edgessm denoise: .*{message}"):
            denoise(src, tmp_path / "out.wav", "--model", path)
        assert not (tmp_path / "out.wav").exists() and leftovers(tmp_path) == []
        if before is not None:
            assert src.read_bytes() == before


def test_refuses_other_graphs_and_explains_chunk_and_budget(graph, tmp_path) -> None:
    import onnx

    _, path = graph
    sf.write(tmp_path / "in.wav", noise(0.3, 16000), 16000)
    proto = onnx.load(str(path))
    for p in proto.metadata_props:
        if p.key == "task":
            p.value = "kws"
    onnx.save(proto, tmp_path / "kws.onnx")
    with pytest.raises(SystemExit, match=r"kws\.onnx is a kws graph, not a denoiser"):
        denoise(tmp_path / "in.wav", tmp_path / "out.wav", "--model", tmp_path / "kws.onnx")
    chunk_advice = r"256-sample chunks \(16 ms\).*fixed.*`edgessm export RUN --out DIR --chunk 512`"
    with pytest.raises(SystemExit, match=chunk_advice):
        denoise(tmp_path / "in.wav", tmp_path / "out.wav", "--model", path, "--chunk", "512")
    assert denoise(tmp_path / "in.wav", tmp_path / "out.wav", "--model", path, "--chunk", "256") == 0
    with pytest.raises(SystemExit, match="--budget applies to ES-SSM models only"):
        denoise(tmp_path / "in.wav", tmp_path / "o2.wav", "--model", path, "--budget", "0.5")
    with pytest.raises(SystemExit, match=r"no model 'nosuch' \(shipped models: .*denoise"):
        denoise(tmp_path / "in.wav", tmp_path / "o2.wav", "--model", "nosuch")
    assert not (tmp_path / "o2.wav").exists() and leftovers(tmp_path) == []


def test_ctrl_c_exits_130_and_leaves_nothing(graph, tmp_path, monkeypatch, capsys) -> None:
    from edgessm.runtime import denoise as mod

    _, path = graph
    sf.write(tmp_path / "in.wav", noise(4.0, 16000, seed=7), 16000)
    before = (tmp_path / "in.wav").read_bytes()
    feed, calls = mod.Denoiser.feed, []

    def interrupted(self, block):
        calls.append(block.shape)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return feed(self, block)

    monkeypatch.setattr(mod.Denoiser, "feed", interrupted)
    try:
        rc = denoise(tmp_path / "in.wav", tmp_path / "out.wav", "--model", path)
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped edgessm denoise")
    assert rc == 130 and len(calls) == 3
    assert "interrupted; " in capsys.readouterr().err
    assert not (tmp_path / "out.wav").exists() and leftovers(tmp_path) == []
    assert (tmp_path / "in.wav").read_bytes() == before


# --- stdin/stdout, torch-free, progress ---------------------------------------------------------------------------


def test_stdin_to_stdout_as_wav_without_torch(graph, tmp_path) -> None:
    net, path = graph
    x = noise(1.0, 16000, seed=8)[:-3]
    buf = io.BytesIO()
    sf.write(buf, x, 16000, format="FLAC", subtype="PCM_24")
    code = (
        "import sys\n"
        "from edgessm.cli import main\n"
        f"rc = main(['denoise', '-', '-', '--model', {str(path)!r}])\n"
        "assert rc == 0 and 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], input=buf.getvalue(), capture_output=True, check=True)
    out, rate = sf.read(io.BytesIO(done.stdout), dtype="float32")
    info = sf.info(io.BytesIO(done.stdout))
    assert (info.format, info.subtype, rate, len(out)) == ("WAV", "PCM_24", 16000, len(x))
    held, _ = sf.read(io.BytesIO(buf.getvalue()), dtype="float32")
    assert np.abs(out - np.clip(forward(net, held), -1, 1)).max() < 1e-4
    assert summary_of(done.stderr.decode())["out"] == "stdout"

    bad = subprocess.run([sys.executable, "-m", "edgessm", "denoise", "-", "-", "--model", str(path)],
                         input=b"no audio here", capture_output=True)  # fmt: skip
    assert bad.returncode == 1 and b"stdin is not a wav/flac/ogg stream" in bad.stderr and bad.stdout == b""


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("seconds", "flags", "bar"), [(6.0, [], True), (6.0, ["--no-progress"], False),
                                                       (2.0, [], False)])  # fmt: skip
def test_progress_bar_only_for_long_inputs_on_a_terminal(graph, tmp_path, monkeypatch, seconds, flags, bar) -> None:
    _, path = graph
    sf.write(tmp_path / "in.wav", noise(seconds, 8000, level=0.1), 8000)
    screen = FakeTTY()
    monkeypatch.setattr(sys, "stderr", screen)
    assert denoise(tmp_path / "in.wav", tmp_path / "out.wav", "--model", path, *flags) == 0
    text = screen.getvalue()
    assert ("denoising" in text and "%|" in text) == bar
    summary_of(text.replace("\r", "\n"))


# --- live: fake sounddevice streams ------------------------------------------------------------------------------


class FakeInputStream:
    """sounddevice.InputStream stand-in: on start() it delivers 2 s of a tone plus noise at 48 kHz to the
    callback, flagging an input overflow on blocks 5, 17 and 30."""

    OVERFLOW_BLOCKS = (5, 17, 30)
    signal: np.ndarray | None = None

    def __init__(self, callback, samplerate, blocksize, channels=1, **kwargs) -> None:
        self.callback, self.rate, self.blocksize, self.channels = callback, int(samplerate), blocksize, channels

    def start(self) -> None:
        import sounddevice as sd

        x = FakeInputStream.signal
        for i, pos in enumerate(range(0, len(x), self.blocksize)):
            status = sd.CallbackFlags()
            status.input_overflow = i in self.OVERFLOW_BLOCKS
            block = x[pos : pos + self.blocksize, None]
            self.callback(block, len(block), None, status)

    def stop(self) -> None:
        pass

    def close(self) -> None:
        pass


class FakeOutputStream:
    """sounddevice.OutputStream stand-in that only opens at 44.1 kHz, keeps what is written, reports an
    underflow on the 1st (start-up: not counted) and 4th writes, and can raise Ctrl-C on a write."""

    played: list[np.ndarray] = []  # noqa: RUF012
    interrupt_on: int | None = None

    def __init__(self, device=None, samplerate=None, channels=1, dtype="float32", **kwargs) -> None:
        import sounddevice as sd

        if samplerate != 44100:
            raise sd.PortAudioError("Invalid sample rate", -9997)
        self.writes, self.started, self.stopped = 0, False, False

    def start(self) -> None:
        self.started = True

    def write(self, data) -> bool:
        assert self.started and data.dtype == np.float32 and data.shape[1] == 1
        self.writes += 1
        if self.writes == self.interrupt_on:
            raise KeyboardInterrupt
        FakeOutputStream.played.append(data[:, 0].copy())
        return self.writes in (1, 4)

    def stop(self) -> None:
        self.stopped = True

    def close(self) -> None:
        pass


@pytest.fixture
def fake_audio(monkeypatch):
    sd = pytest.importorskip("sounddevice")  # needs the PortAudio library, not a device
    devices = {"input": {"name": "fake mic", "default_samplerate": 48000.0},
               "output": {"name": "fake speakers", "default_samplerate": 44100.0}}  # fmt: skip
    monkeypatch.setattr(sd, "query_devices", lambda device=None, kind=None: devices[kind])
    monkeypatch.setattr(sd, "InputStream", FakeInputStream)
    monkeypatch.setattr(sd, "OutputStream", FakeOutputStream)
    t = np.arange(96000) / 48000
    x = (0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * np.random.default_rng(9).standard_normal(len(t))).astype(np.float32)
    monkeypatch.setattr(FakeInputStream, "signal", x)
    monkeypatch.setattr(FakeOutputStream, "played", [])
    monkeypatch.setattr(FakeOutputStream, "interrupt_on", None)
    return x


def live_summary(stderr: str) -> re.Match:
    found = [m for line in stderr.splitlines() if (m := LIVE_SUMMARY.fullmatch(line.strip()))]
    assert len(found) == 1, f"expected one summary line on stderr, got {stderr!r}"
    return found[0]


def test_live_record_equals_the_file_path_and_counts_overflows(graph, tmp_path, fake_audio, capsys) -> None:
    _, path = graph
    x = fake_audio
    rec = tmp_path / "rec.wav"
    assert denoise("--live", "--model", path, "--record", rec, "--duration", "0.2", "--subtype", "FLOAT") == 0
    err = capsys.readouterr().err
    assert "denoising fake mic at 48000 Hz" in err
    s = live_summary(err)
    assert int(s["over"]) == 3 and int(s["under"]) == 0 and s["target"] == str(rec)
    assert float(s["seconds"]) == pytest.approx(2.0, abs=1e-9)  # every block, overflowing or not
    live, rate = sf.read(rec, dtype="float32")
    assert rate == 48000 and len(live) == len(x)
    # the same samples as a file: the same result (the live loop and the file path are one Denoiser)
    sf.write(tmp_path / "same.wav", x, 48000, subtype="FLOAT")
    assert denoise(tmp_path / "same.wav", tmp_path / "file.wav", "--model", path) == 0
    filed, _ = sf.read(tmp_path / "file.wav", dtype="float32")
    assert np.abs(live - filed).max() < 1e-5 and np.abs(filed).max() > 0.01
    assert leftovers(tmp_path) == []


def test_live_plays_to_speakers_resampling_to_their_rate(graph, tmp_path, fake_audio, capsys) -> None:
    _, path = graph
    x = fake_audio
    assert denoise("--live", "--model", path, "--duration", "0.2") == 0
    s = live_summary(capsys.readouterr().err)
    assert s["target"] == "fake speakers" and int(s["over"]) == 3 and int(s["under"]) == 1  # not the start-up one
    played = np.concatenate(FakeOutputStream.played)
    assert abs(len(played) - round(len(x) * 44100 / 48000)) <= 2  # the device refused 48 kHz: resampled
    sf.write(tmp_path / "same.wav", x, 48000, subtype="FLOAT")
    assert denoise(tmp_path / "same.wav", tmp_path / "file.wav", "--model", path) == 0
    filed = soxr.resample(sf.read(tmp_path / "file.wav", dtype="float32")[0], 48000, 44100, quality="HQ")
    n = min(len(filed), len(played))
    assert np.abs(played[:n] - filed[:n]).max() < 1e-3 * np.abs(filed).max()


def test_live_ctrl_c_stops_cleanly_with_a_summary(graph, fake_audio, monkeypatch, capsys) -> None:
    _, path = graph
    monkeypatch.setattr(FakeOutputStream, "interrupt_on", 6)
    try:
        rc = denoise("--live", "--model", path)
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped edgessm denoise --live")
    assert rc == 0
    s = live_summary(capsys.readouterr().err)
    assert 0 < float(s["seconds"]) < 2.0  # stopped before the whole input
    assert len(FakeOutputStream.played) >= 6  # the tail after Ctrl-C was still played out


def test_live_without_devices_or_with_file_arguments_is_a_clear_error(graph, fake_audio, monkeypatch) -> None:
    import sounddevice as sd

    _, path = graph

    def no_devices(device=None, kind=None):
        raise sd.PortAudioError("Error querying device -1")

    with pytest.raises(SystemExit, match="--live takes no IN or OUT"):
        denoise("in.wav", "--live", "--model", path)
    with pytest.raises(SystemExit, match="--duration applies to --live only"):
        denoise("in.wav", "out.wav", "--model", path, "--duration", "3")
    monkeypatch.setattr(sd, "query_devices", no_devices)
    with pytest.raises(SystemExit, match=r"no usable microphone .*Error querying device.*edgessm denoise IN OUT"):
        denoise("--live", "--model", path)


def test_model_folder_with_a_file_graph_denoises_files_with_it(graph, tmp_path) -> None:
    """`export --file-chunk`: files go through the larger-chunk graph, with the same output; --chunk and
    the live path keep the streaming graph."""
    import argparse

    from edgessm.deploy.package import package
    from edgessm.runtime.denoise import add_arguments, load_model
    from edgessm.runtime.registry import resolve_graph

    net, _ = graph
    folder = tmp_path / "dn"
    report, _ = package(net, {"network": "denoise", "config": TINY}, folder, "dn", CHUNK, file_chunk=4 * CHUNK)
    assert report.file_graph is not None and report.file_graph.max_abs_error < 1e-4
    assert resolve_graph(folder, files=True).name == "dn.c1024.onnx"
    assert resolve_graph(folder).name == "dn.onnx"

    ap = argparse.ArgumentParser()
    add_arguments(ap)
    assert load_model(ap.parse_args(["--model", str(folder)]), files=True).info.chunk == 4 * CHUNK
    assert load_model(ap.parse_args(["--model", str(folder), "--chunk", str(CHUNK)]), files=True).info.chunk == CHUNK
    assert load_model(ap.parse_args(["--model", str(folder)])).info.chunk == CHUNK  # live

    x = noise(1.3, 16000)
    sf.write(tmp_path / "in.wav", x, 16000, subtype="FLOAT")
    assert denoise(tmp_path / "in.wav", tmp_path / "out.wav", "--model", folder) == 0
    out, _ = sf.read(tmp_path / "out.wav", dtype="float32")
    assert out.shape == x.shape and np.abs(out - forward(net, x)).max() < 1e-4
    with pytest.raises(ValueError, match="multiple of the chunk"):
        package(net, {"network": "denoise", "config": TINY}, tmp_path / "bad", "dn", CHUNK, file_chunk=CHUNK + 64)


def test_the_shipped_denoiser_cleans_the_demo_recording(tmp_path) -> None:
    """The default model (models/denoise) denoises the bundled demo: same length and rate, and closer
    to the demo's clean speech than the input is (SI-SDR against the clean mixture component)."""
    from edgessm.data.corpora import shared_data_dir

    demo = Path(__file__).resolve().parents[1] / "demos" / "noisy_speech.wav"
    assert denoise(demo, tmp_path / "out.wav") == 0
    x, sr = sf.read(demo, dtype="float32")
    y, sr_out = sf.read(tmp_path / "out.wav", dtype="float32")
    assert sr_out == sr == 16000 and y.shape == x.shape
    if shared_data_dir(required=False) is None:
        return
    from fixtures import demo_script

    from edgessm.eval.denoise import _join, speakers_of
    from edgessm.eval.metrics import si_sdr

    module = demo_script("make_noisy_speech")
    speakers = speakers_of("test")
    clean = _join(speakers[sorted(speakers)[module.SPEAKER_INDEX]], module.SECONDS)
    assert si_sdr(y, clean) > si_sdr(x, clean) + 3.0  # scale-invariant: the demo's level does not matter
