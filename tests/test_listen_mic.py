"""The microphone loop against a real PortAudio stream: a virtual PulseAudio source fed by a wav.

Skipped (with the reason) where PulseAudio is not installed; `make test` installs it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from conftest import randomize

from edgessm.data.audio import write_audio
from edgessm.deploy.onnx_export import export_onnx
from edgessm.nets import build_network

pytestmark = pytest.mark.skipif(
    not (shutil.which("pulseaudio") and shutil.which("paplay")), reason="pulseaudio/paplay not installed"
)


class Pulse:
    """PulseAudio servers started for a test (each with its own runtime folder), stopped after it."""

    def __init__(self) -> None:
        self.runtimes: list[str] = []

    def start(self, *modules: str, asoundrc: str | None = None) -> dict:
        """A server with ``modules`` loaded (``virt_mic`` made the default source) and, with ``asoundrc``,
        that ALSA configuration for the processes run with the environment it returns. Skips the test
        (one-line reason) when it will not start here."""
        runtime = tempfile.mkdtemp()
        os.chmod(runtime, 0o700)
        self.runtimes.append(runtime)
        env = {**os.environ, "XDG_RUNTIME_DIR": runtime}
        if asoundrc is not None:  # alsa.conf reads $XDG_CONFIG_HOME/alsa/asoundrc
            os.makedirs(f"{runtime}/config/alsa")
            with open(f"{runtime}/config/alsa/asoundrc", "w") as f:
                f.write(asoundrc)
            env["XDG_CONFIG_HOME"] = f"{runtime}/config"
        cmd = ["pulseaudio", "-D", "--exit-idle-time=-1", "-n", "--load=module-native-protocol-unix"]
        proc = subprocess.run([*cmd, *(f"--load={m}" for m in modules)], env=env, capture_output=True, text=True)
        for _ in range(50 if proc.returncode == 0 else 0):
            if subprocess.run(["pactl", "info"], env=env, capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        else:
            why = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
            pytest.skip(f"pulseaudio does not start here: {why}")
        subprocess.run(["pactl", "set-default-source", "virt_mic"], env=env, check=True)
        return env

    def pid(self, env: dict) -> int:
        with open(f"{env['XDG_RUNTIME_DIR']}/pulse/pid") as f:
            return int(f.read())

    def stop(self) -> None:
        for runtime in self.runtimes:
            env = {**os.environ, "XDG_RUNTIME_DIR": runtime}
            with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
                os.kill(self.pid(env), signal.SIGCONT)  # a test may have stopped it
            subprocess.run(["pulseaudio", "-k"], env=env, capture_output=True, timeout=30)
            shutil.rmtree(runtime, ignore_errors=True)


SPEAKER_AND_MIC = ("module-null-sink sink_name=virt_speaker",
                   "module-remap-source master=virt_speaker.monitor source_name=virt_mic")  # fmt: skip


@pytest.fixture
def pulse():
    servers = Pulse()
    yield servers
    servers.stop()


@pytest.fixture
def virtual_mic(pulse):
    return pulse.start(*SPEAKER_AND_MIC)


@pytest.fixture(scope="module")
def kws_graph(tmp_path_factory) -> str:
    """A small keyword spotter (random weights; with --threshold 1.1 it never fires)."""
    torch.manual_seed(0)
    net = randomize(build_network("kws", channels=[4, 8], states=[4, 8], kinds=["full", "pointwise"], pools=[4, 4],
                                  window=12, dropout=0.0), seed=1, dynamics=False)  # fmt: skip
    path = tmp_path_factory.mktemp("graph") / "kws.onnx"
    export_onnx(net, path, 256, {"task": "kws", "labels": [f"w{i}" for i in range(33)] + ["_unknown_", "_silence_"]})
    return str(path)


def test_listen_hears_the_virtual_microphone(virtual_mic, kws_graph, tmp_path) -> None:
    t = np.arange(16000 * 5) / 16000
    write_audio(tmp_path / "tone.wav", (0.4 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), 16000)
    rec = tmp_path / "heard.wav"
    cmd = [sys.executable, "-m", "edgessm", "listen", "--model", kws_graph, "--device", "pulse",
           "--duration", "3", "--record", str(rec), "--threshold", "1.1"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=virtual_mic, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stderr.readline()  # play only once the microphone is open (a loaded machine starts slowly)
    assert first.startswith("listening on"), first + proc.stderr.read()
    player = subprocess.Popen(["paplay", "--device=virt_speaker", str(tmp_path / "tone.wav")], env=virtual_mic)
    _, rest = proc.communicate(timeout=60)
    err = first + rest
    assert proc.returncode == 0, err
    player.wait(timeout=30)
    heard, rate = sf.read(rec)
    # PulseAudio's capture latency eats into the 3 s: at least half a second must have gone through
    assert rate == 16000 and len(heard) > 8000
    # the closing summary on stderr reports what was recorded (and no meter: stderr is not a terminal)
    summary = re.search(r"summary: ([\d.]+) s of audio heard, 0 detections, \d+ input overflows?", err)
    assert summary and abs(float(summary[1]) - len(heard) / rate) < 0.01 and "\r" not in err
    tail = heard[-8000:]
    spectrum = np.abs(np.fft.rfft(tail))
    assert abs(np.argmax(spectrum) * rate / len(tail) - 440) < 5  # it heard the tone


def test_transcribe_captions_the_virtual_microphone(virtual_mic, tmp_path) -> None:
    from test_transcribe import pause, spelling_graph, spoken

    graph = spelling_graph(tmp_path / "spell.onnx")
    x = np.concatenate([pause(0.5), spoken("go", frames_per_char=8), pause(1.5)])
    write_audio(tmp_path / "go.wav", x, 16000, subtype="FLOAT")
    cmd = [sys.executable, "-m", "edgessm", "transcribe", "--input", "mic", "--model", graph, "--device", "pulse",
           "--duration", "4", "--words", "go,stop,up", "--json"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=virtual_mic, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stderr.readline()  # play only once the microphone is open
    assert "captioning" in first, first + proc.stderr.read()
    subprocess.run(["paplay", "--device=virt_speaker", str(tmp_path / "go.wav")], env=virtual_mic, timeout=30)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "heard" in err
    texts = [json.loads(line)["text"] for line in out.splitlines()]
    assert texts == ["go"]


# --- faults of the live loop, against the virtual source ------------------------------------------------------

SUMMARY = re.compile(
    r"summary: (?P<heard>[\d.]+) s of audio heard, (?P<n>\d+) detections?(?: \([^)]*\))?, "
    r"(?P<overflows>\d+) input overflows?, real-time factor [\d.]+"
)
LOST = re.compile(r"edgessm listen: the microphone went away after (?P<heard>[\d.]+) s: (?P<why>.+)")
DEMO = Path(__file__).resolve().parents[1] / "demos"
SETTLE_S = 3.0  # listening before a fault is made: PulseAudio's first audio takes ~1 s on a loaded machine


def _interactive_ctrl_c() -> None:
    """In the child: Ctrl-C as at a terminal. A test suite started as a background job (``cmd &``)
    inherits SIGINT ignored, which listen rightly keeps (a background job is not stopped by Ctrl-C);
    the tests below play a user at a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_listen(env: dict, model: str, *flags: str) -> subprocess.Popen:
    """`edgessm listen --device pulse` (the virtual source), returned once the microphone is open."""
    cmd = [sys.executable, "-m", "edgessm", "listen", "--model", model, "--device", "pulse", *flags]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_interactive_ctrl_c)  # fmt: skip
    first = proc.stderr.readline()
    if not first.startswith("listening on"):
        proc.kill()
        pytest.fail(first + proc.communicate()[1])
    proc.first_line = first
    return proc


def finish(proc: subprocess.Popen, timeout: float) -> tuple[str, str, float]:
    """stdout, stderr (with the first line) and how long it took to end."""
    t0 = time.monotonic()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"listen did not end within {timeout} s: {err}")
    return out, proc.first_line + err, time.monotonic() - t0


def the_summary(err: str) -> re.Match:
    found = [m for line in err.splitlines() if (m := SUMMARY.fullmatch(line.strip()))]
    assert len(found) == 1 and err.rstrip().endswith(found[0][0]), err  # once, and last
    return found[0]


def check_record(path: Path, heard_s: float) -> np.ndarray:
    """The record is a whole 16 kHz file holding what the summary says was heard, with the tone in it."""
    assert not list(path.parent.glob(f".{path.name}.*"))  # no temporary file left beside it
    heard, rate = sf.read(path, dtype="float32")
    assert rate == 16000 and abs(len(heard) / rate - heard_s) < 0.01 and len(heard) >= 8000
    tail = heard[-16000:-2000]  # up to the last second heard, less the last moment (the source going quiet)
    spectrum = np.abs(np.fft.rfft(tail * np.hanning(len(tail))))
    assert abs(np.argmax(spectrum) * rate / len(tail) - 440) < 3  # the tone, not garbage
    return heard


def write_tone(path: Path, seconds: float, rate: int = 16000) -> Path:
    t = np.arange(round(seconds * rate)) / rate
    write_audio(path, (0.4 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), rate)
    return path


def pipe_writer(fifo: Path, stop: threading.Event) -> None:
    """Feed a 440 Hz tone (16-bit, 16 kHz mono) into a pipe source in real time, until ``stop`` or the
    source goes away."""
    t = np.arange(800) / 16000
    chunk = (0.4 * 32767 * np.sin(2 * np.pi * 440 * t)).astype("<i2").tobytes()  # 50 ms, whole periods
    with contextlib.suppress(OSError), open(fifo, "wb", buffering=0) as f:
        start, n = time.monotonic(), 0
        while not stop.is_set():
            f.write(chunk)
            n += 1
            time.sleep(max(0.0, start + n * 0.05 - time.monotonic()))


@pytest.mark.parametrize("source", ["remap", "pipe"])
def test_a_source_removed_mid_stream_ends_listen_with_its_record(pulse, kws_graph, tmp_path, source) -> None:
    """The device goes away (its PulseAudio module unloaded, and no other source to move the stream to):
    one line saying so, the record of what was heard, the summary, exit status 1, at once."""
    stop = threading.Event()
    if source == "remap":  # the null sink goes, and with its monitor the remapped source on it
        env = pulse.start(*SPEAKER_AND_MIC)
        player = subprocess.Popen(["paplay", "--device=virt_speaker", str(write_tone(tmp_path / "t.wav", 20))],
                                  env=env)  # fmt: skip
        module = "module-null-sink"
    else:
        fifo = tmp_path / "mic.fifo"
        env = pulse.start(f"module-pipe-source source_name=virt_mic file={fifo} format=s16le rate=16000 channels=1")
        writer = threading.Thread(target=pipe_writer, args=(fifo, stop), daemon=True)
        writer.start()
        module = "module-pipe-source"
    rec = tmp_path / "heard.wav"
    try:
        proc = start_listen(env, kws_graph, "--record", str(rec), "--threshold", "1.1")
        time.sleep(SETTLE_S)
        subprocess.run(["pactl", "unload-module", module], env=env, check=True, timeout=10)
        _, err, took = finish(proc, timeout=20)
    finally:
        stop.set()
        if source == "remap":
            player.kill()
    assert proc.returncode == 1, err
    lost = [m for line in err.splitlines() if (m := LOST.fullmatch(line))]
    assert len(lost) == 1 and lost[0]["why"].startswith("its audio stream ended"), err
    assert took < 5  # noticed at once: no waiting for --mic-timeout or for ever
    s = the_summary(err)
    assert lost[0]["heard"] == s["heard"] and float(s["heard"]) > 0.5
    assert f"recorded {s['heard']} s to {rec}" in err
    check_record(rec, float(s["heard"]))


@pytest.mark.parametrize("stall", ["suspend", "sigstop"])
def test_a_source_that_stops_delivering_is_caught_by_the_watchdog(pulse, kws_graph, tmp_path, stall) -> None:
    """PortAudio stops calling back and the stream stays open: the source suspended, or the whole sound
    server stopped (where even stopping the stream hangs). listen ends after --mic-timeout anyway."""
    env = pulse.start(*SPEAKER_AND_MIC)
    player = subprocess.Popen(["paplay", "--device=virt_speaker", str(write_tone(tmp_path / "t.wav", 20))], env=env)
    rec = tmp_path / "heard.wav"
    server = pulse.pid(env)
    try:
        proc = start_listen(env, kws_graph, "--record", str(rec), "--threshold", "1.1", "--mic-timeout", "1")
        time.sleep(SETTLE_S)
        if stall == "suspend":
            subprocess.run(["pactl", "suspend-source", "virt_mic", "1"], env=env, check=True, timeout=10)
        else:
            os.kill(server, signal.SIGSTOP)
        _, err, took = finish(proc, timeout=20)
    finally:
        os.kill(server, signal.SIGCONT)
        player.kill()
    assert proc.returncode == 1, err
    lost = [m for line in err.splitlines() if (m := LOST.fullmatch(line))]
    assert len(lost) == 1 and re.match(r"no audio for 1\.\d s \(", lost[0]["why"]), err
    # 1 s of silence, plus up to 2 s for a stop that hangs (then the process ends with os._exit)
    assert took < (4 if stall == "suspend" else 6)
    s = the_summary(err)
    assert lost[0]["heard"] == s["heard"] and float(s["heard"]) > 0.5
    check_record(rec, float(s["heard"]))


@pytest.mark.parametrize("rate", [48000, 44100])
def test_a_stereo_source_at_48k_or_44k_hears_the_demo_words(pulse, tmp_path, rate) -> None:
    """A virtual source at 48 (44.1) kHz stereo, fed the demo recording at that rate in stereo: listen
    opens the device at a rate and channel count it takes (PulseAudio's ALSA device takes any; PortAudio
    reports 44.1 kHz) and the model, at 16 kHz mono, hears the same words as from the file itself, each
    where the recording has it. (A device that refuses mono or its rate: see test_listen_faults.py.)"""
    import soxr

    spec = f"format=s16le rate={rate} channels=2"
    env = pulse.start(f"module-null-sink sink_name=virt_speaker {spec}",
                      f"module-remap-source master=virt_speaker.monitor source_name=virt_mic {spec}")  # fmt: skip
    sources = subprocess.run(["pactl", "list", "short", "sources"], env=env, capture_output=True, text=True).stdout
    assert re.search(rf"virt_mic\s+\S+\s+s16le 2ch {rate}Hz", sources), sources
    x, sr = sf.read(DEMO / "keywords.wav", dtype="float32")
    x = soxr.resample(x[: round(10 * sr)], sr, rate)  # its first six words: yes, left, stop, no, up, right
    sf.write(tmp_path / "demo.wav", np.stack([x, x], axis=1), rate, subtype="PCM_16")
    flags = ("--json", "--threshold", "0.8")
    # the model may be retrained: compare with what it hears in the file itself
    cmd = [sys.executable, "-m", "edgessm", "listen", "--model", "kws35", "--input", str(tmp_path / "demo.wav")]
    reference = subprocess.run([*cmd, "--fast", *flags], capture_output=True, text=True)
    assert reference.returncode == 0, reference.stderr
    expected = [json.loads(line) for line in reference.stdout.splitlines()]
    demo_words = {line.split()[2] for line in (DEMO / "keywords.txt").read_text().splitlines()}
    assert len(expected) >= 3 and {e["keyword"] for e in expected} <= demo_words, reference.stdout

    proc = start_listen(env, "kws35", *flags)
    assert re.match(r"listening on pulse at \d+ Hz for ", proc.first_line), proc.first_line
    subprocess.run(["paplay", "--device=virt_speaker", str(tmp_path / "demo.wav")], env=env, timeout=30)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, err, _ = finish(proc, timeout=20)
    assert proc.returncode == 0, err
    heard = [json.loads(line) for line in out.splitlines()]
    assert [h["keyword"] for h in heard] == [e["keyword"] for e in expected], (heard, expected)  # in order
    lag = [h["time"] - e["time"] for h, e in zip(heard, expected, strict=True)]
    assert max(lag) - min(lag) < 0.25, lag  # each at its place in the recording (one playback delay)
    assert int(the_summary(err)["n"]) == len(heard)


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_after_a_pause_leaves_a_valid_record_and_exit_status_0(virtual_mic, kws_graph, tmp_path,
                                                                      presses) -> None:  # fmt: skip
    """SIGINT ends the session normally: the record, the summary, status 0; also pressed twice, 3 ms apart
    (the second lands while the first is handled: stopping the stream, committing the record). Before
    it, the process is paused for 2.5 s (Ctrl-Z, then fg), longer than --mic-timeout: a pause of listen
    itself is no silence of the microphone."""
    env = virtual_mic
    player = subprocess.Popen(["paplay", "--device=virt_speaker", str(write_tone(tmp_path / "t.wav", 20))], env=env)
    rec = tmp_path / "heard.wav"
    try:
        proc = start_listen(env, kws_graph, "--record", str(rec), "--threshold", "1.1", "--mic-timeout", "1")
        time.sleep(SETTLE_S)
        proc.send_signal(signal.SIGSTOP)
        time.sleep(2.5)
        proc.send_signal(signal.SIGCONT)
        time.sleep(1.5)
        for _ in range(presses):
            proc.send_signal(signal.SIGINT)
            time.sleep(0.003)
        _, err, took = finish(proc, timeout=20)
    finally:
        player.kill()
    assert proc.returncode == 0 and "went away" not in err and "Traceback" not in err, err
    assert took < 3
    s = the_summary(err)
    assert f"recorded {s['heard']} s to {rec}" in err and float(s["heard"]) > 2.5
    check_record(rec, float(s["heard"]))
