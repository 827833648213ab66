"""Faults of `edgessm listen`'s live loop, with a fake PortAudio stream (fast, no sound server): input
overflow bursts and a stalled consumer, a device that refuses mono or its own rate, a stream that ends
on its own, callbacks that stop coming, and a stream that will not stop. The same faults against a
real PortAudio stream (a PulseAudio virtual source) are in test_listen_mic.py.
"""

from __future__ import annotations

import io
import re
import sys
import threading
import time

import numpy as np
import pytest
import soundfile as sf
import torch
from conftest import randomize

from edgessm.deploy.onnx_export import export_onnx
from edgessm.nets import build_network

SUMMARY = re.compile(
    r"summary: (?P<heard>[\d.]+) s of audio heard, (?P<n>\d+) detections?(?: \([^)]*\))?, "
    r"(?P<overflows>\d+) input overflows?, real-time factor [\d.]+"
)
LOST = re.compile(r"edgessm listen: the microphone went away after (?P<heard>[\d.]+) s: (?P<why>.+)")


@pytest.fixture(scope="module")
def kws_graph(tmp_path_factory):
    """A small keyword spotter (random weights; --threshold 1.1 keeps it from firing)."""
    torch.manual_seed(0)
    net = randomize(build_network("kws", channels=[4, 8], states=[4, 8], kinds=["full", "pointwise"], pools=[4, 4],
                                  window=12, dropout=0.0), seed=1, dynamics=False)  # fmt: skip
    path = tmp_path_factory.mktemp("g") / "kws.onnx"
    export_onnx(net.eval(), path, 256, {"task": "kws", "labels": [f"w{i}" for i in range(35)]})
    return str(path)


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


class ThreadedStream:
    """sounddevice.InputStream stand-in that calls back from its own thread, as PortAudio does: the rows of
    ``signal`` (frames, channels) in blocks of ``blocksize``, ``spacing_s`` apart, flagging an input
    overflow on the blocks in ``overflow_blocks``. Then, by ``then``: "finish" (the finished callback, as
    when a device goes away), "hang" (nothing more, as when the sound server stalls), or "hang-stop"
    (that, and stop/abort block until the test ends). Opening refuses what ``accepts(rate, channels)``
    rejects."""

    signal: np.ndarray = np.zeros((0, 1), np.float32)
    spacing_s = 0.0
    overflow_blocks: frozenset[int] = frozenset()
    then = "hang"
    accepts = staticmethod(lambda rate, channels: True)
    opened: list[tuple[int, int]] = []  # noqa: RUF012  (rate, channels) of every attempt
    release = threading.Event()  # lets a "hang-stop" stream's stop return

    def __init__(self, device=None, channels=1, samplerate=None, callback=None, finished_callback=None,
                 blocksize=0, **kwargs) -> None:  # fmt: skip
        import sounddevice as sd

        ThreadedStream.opened.append((int(samplerate), channels))
        if not self.accepts(int(samplerate), channels):
            raise sd.PortAudioError("Error opening InputStream: Invalid sample rate or channel count", -9997)
        self.callback, self.finished_callback, self.blocksize = callback, finished_callback, blocksize
        self.channels, self.stopping = channels, threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        import sounddevice as sd

        x = self.signal
        assert x.shape[1] == self.channels
        for i, pos in enumerate(range(0, len(x), self.blocksize)):
            if self.stopping.is_set():
                return
            status = sd.CallbackFlags()
            status.input_overflow = i in self.overflow_blocks
            block = np.ascontiguousarray(x[pos : pos + self.blocksize], np.float32)
            self.callback(block, len(block), None, status)
            time.sleep(self.spacing_s)
        if self.then == "finish":
            self.finished_callback()

    def stop(self) -> None:
        self.stopping.set()
        if self.then == "hang-stop":
            self.release.wait()

    abort = stop

    def close(self) -> None:
        pass


@pytest.fixture
def fake_stream(monkeypatch, kws_graph):
    sd = pytest.importorskip("sounddevice")  # needs the PortAudio library, not a device
    dev = {"name": "fake mic", "default_samplerate": 48000.0, "max_input_channels": 2}
    monkeypatch.setattr(sd, "query_devices", lambda device=None, kind=None: dev)
    monkeypatch.setattr(sd, "InputStream", ThreadedStream)
    monkeypatch.setattr(sd, "_exit_handler", lambda: None)  # what a stuck stop unregisters: not the real one
    monkeypatch.setattr(ThreadedStream, "opened", [])
    monkeypatch.setattr(ThreadedStream, "release", threading.Event())
    yield dev, kws_graph
    ThreadedStream.release.set()


def tone(seconds: float, rate: int = 48000, freq: float = 440.0, amp: float = 0.3) -> np.ndarray:
    t = np.arange(round(seconds * rate)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def listen(graph, tmp_path, monkeypatch, *flags: str) -> tuple[int, str, np.ndarray]:
    """``edgessm listen`` on the fake microphone (no detections): status, stderr (a terminal), the record."""
    from edgessm.cli import main

    screen = FakeTTY()
    monkeypatch.setattr(sys, "stderr", screen)
    rec = tmp_path / "heard.wav"
    rc = main(["listen", "--model", graph, "--threshold", "1.1", "--record", str(rec), *flags])
    heard, rate = sf.read(rec, dtype="float32")
    assert rate == 16000
    assert not list(tmp_path.glob(".*.tmp"))  # the record's temporary file is gone
    return rc, screen.getvalue(), heard


def summary_of(text: str) -> re.Match:
    found = [m for line in text.replace("\r", "\n").splitlines() if (m := SUMMARY.fullmatch(line.strip()))]
    assert len(found) == 1, text
    return found[0]


def peak_hz(x: np.ndarray, rate: int = 16000) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.argmax(spectrum) * rate / len(x))


def test_overflow_bursts_and_a_stalled_consumer_are_counted_never_fatal(fake_stream, tmp_path, monkeypatch) -> None:
    _, graph = fake_stream
    from edgessm.runtime.listen import Listener

    monkeypatch.setattr(ThreadedStream, "signal", tone(3.0)[:, None])  # 60 blocks of 50 ms
    monkeypatch.setattr(ThreadedStream, "spacing_s", 0.005)
    monkeypatch.setattr(ThreadedStream, "overflow_blocks", frozenset([*range(10, 15), *range(30, 40)]))
    feed = Listener.feed
    calls = []

    def slow_feed(self, rate, samples):  # the consumer stalls for 0.6 s once: blocks pile up meanwhile
        calls.append(len(samples))
        if len(calls) == 5:
            time.sleep(0.6)
        feed(self, rate, samples)

    monkeypatch.setattr(Listener, "feed", slow_feed)
    rc, text, heard = listen(graph, tmp_path, monkeypatch, "--duration", "1.5")  # the default --mic-timeout: 2 s
    assert rc == 0 and "went away" not in text
    assert "15 overflows" in text  # on the meter (stderr is a terminal here)
    s = summary_of(text)
    assert int(s["overflows"]) == 15
    assert float(s["heard"]) == pytest.approx(3.0, abs=0.005)  # every block, overflowing or late, was heard
    assert abs(len(heard) - 48000) <= 2 and abs(peak_hz(heard[8000:40000]) - 440) < 2


def test_a_device_that_refuses_mono_and_its_rate_is_opened_in_stereo_at_48k(fake_stream, tmp_path,
                                                                           monkeypatch) -> None:  # fmt: skip
    dev, graph = fake_stream
    dev.update(name="stereo-only mic", default_samplerate=96000.0)
    monkeypatch.setattr(ThreadedStream, "accepts", staticmethod(lambda rate, ch: ch == 2 and rate in (44100, 48000)))
    a, b = tone(2.0, freq=440, amp=0.4), tone(2.0, freq=1000, amp=0.3)
    monkeypatch.setattr(ThreadedStream, "signal", np.stack([a + b, a - b], axis=1))  # the mix is the 440 Hz tone
    rc, text, heard = listen(graph, tmp_path, monkeypatch, "--duration", "0.5")
    assert rc == 0
    assert ThreadedStream.opened == [(96000, 1), (96000, 2), (48000, 1), (48000, 2)]
    assert "listening on stereo-only mic at 48000 Hz (2 channels mixed to mono)" in text
    assert float(summary_of(text)["heard"]) == pytest.approx(2.0, abs=0.005)
    x = heard[4000:28000]
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    at = lambda hz: spectrum[round(hz * len(x) / 16000)]  # noqa: E731
    assert abs(peak_hz(x) - 440) < 2 and at(1000) < 1e-3 * at(440)  # averaged, not one channel
    assert np.sqrt(np.mean(x**2)) == pytest.approx(0.4 / np.sqrt(2), rel=0.02)


def test_no_setting_works_the_first_refusal_is_reported(fake_stream, monkeypatch) -> None:
    _, graph = fake_stream
    from edgessm.cli import main

    monkeypatch.setattr(ThreadedStream, "accepts", staticmethod(lambda rate, ch: False))
    with pytest.raises(SystemExit) as e:
        main(["listen", "--model", graph, "--duration", "0.2"])
    assert str(e.value.code).startswith("edgessm listen: no usable microphone (Error opening InputStream")
    assert len(ThreadedStream.opened) == 6  # 48000 (its own), 44100, 16000 Hz; 1 and 2 channels


@pytest.mark.parametrize("then", ["finish", "hang", "hang-stop"])
def test_a_microphone_that_goes_away_ends_with_the_record_the_summary_and_status_1(
    fake_stream, tmp_path, monkeypatch, then
) -> None:
    _, graph = fake_stream
    import edgessm.runtime.devices as devices

    monkeypatch.setattr(ThreadedStream, "signal", tone(1.0)[:, None])
    monkeypatch.setattr(ThreadedStream, "then", then)
    monkeypatch.setattr(devices, "STOP_TIMEOUT_S", 0.3)
    monkeypatch.setattr(devices, "_left_behind", [])
    exits = []

    def exit_now(code):  # what the CLI does when a stream would not stop: end the process at once
        exits.append(code)
        raise SystemExit(code)

    monkeypatch.setattr("os._exit", exit_now)
    t0 = time.monotonic()
    try:
        rc, text, heard = listen(graph, tmp_path, monkeypatch, "--mic-timeout", "0.5")
    except SystemExit as e:
        rc, text = e.code, sys.stderr.getvalue()
        heard, _ = sf.read(tmp_path / "heard.wav", dtype="float32")
    took = time.monotonic() - t0
    lines = text.replace("\r", "\n").splitlines()
    lost = [m for line in lines if (m := LOST.fullmatch(line.strip()))]
    assert rc == 1 and len(lost) == 1, text
    assert float(lost[0]["heard"]) == pytest.approx(1.0, abs=0.005)
    if then == "finish":
        assert "its audio stream ended" in lost[0]["why"] and took < 5
    else:
        assert re.match(r"no audio for 0\.[5-9] s", lost[0]["why"]) and took < 6
    assert exits == ([1] if then == "hang-stop" else [])
    s = summary_of(text)
    assert float(s["heard"]) == pytest.approx(1.0, abs=0.005) and lines[-1].strip() == s[0]
    assert f"recorded 1.00 s to {tmp_path / 'heard.wav'}" in text
    assert abs(len(heard) - 16000) <= 2 and abs(peak_hz(heard[2000:14000]) - 440) < 2


def test_mic_timeout_zero_waits_for_audio_but_not_for_a_stream_that_ended(fake_stream, tmp_path, monkeypatch) -> None:
    _, graph = fake_stream
    monkeypatch.setattr(ThreadedStream, "signal", tone(0.5)[:, None])
    monkeypatch.setattr(ThreadedStream, "then", "hang")
    rc, text, _ = listen(graph, tmp_path, monkeypatch, "--mic-timeout", "0", "--duration", "3")
    assert rc == 0 and "went away" not in text  # 3 s without audio: no timeout asked for
    monkeypatch.setattr(ThreadedStream, "then", "finish")
    rc, text, _ = listen(graph, tmp_path, monkeypatch, "--mic-timeout", "0")
    assert rc == 1 and "its audio stream ended" in text


def test_mic_timeout_must_be_a_number_of_seconds(fake_stream) -> None:
    _, graph = fake_stream
    from edgessm.cli import main

    with pytest.raises(SystemExit) as e:
        main(["listen", "--model", graph, "--mic-timeout", "-1"])
    assert "--mic-timeout is a number of seconds >= 0" in str(e.value.code)
