"""The microphone loop against a real PortAudio stream: a virtual PulseAudio source fed by a wav.

Skipped (with the reason) where PulseAudio is not installed; `make test` installs it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

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


@pytest.fixture
def virtual_mic():
    runtime = tempfile.mkdtemp()
    os.chmod(runtime, 0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": runtime}
    subprocess.run(
        ["pulseaudio", "-D", "--exit-idle-time=-1", "-n", "--load=module-native-protocol-unix",
         "--load=module-null-sink sink_name=virt_speaker",
         "--load=module-remap-source master=virt_speaker.monitor source_name=virt_mic"],
        env=env, check=True, capture_output=True,
    )  # fmt: skip
    for _ in range(50):
        if subprocess.run(["pactl", "info"], env=env, capture_output=True).returncode == 0:
            break
        time.sleep(0.1)
    subprocess.run(["pactl", "set-default-source", "virt_mic"], env=env, check=True)
    yield env
    subprocess.run(["pulseaudio", "-k"], env=env, capture_output=True)
    shutil.rmtree(runtime, ignore_errors=True)


def test_listen_hears_the_virtual_microphone(virtual_mic, tmp_path) -> None:
    torch.manual_seed(0)
    net = randomize(build_network("kws", channels=[4, 8], states=[4, 8], kinds=["full", "pointwise"], pools=[4, 4],
                                  window=12, dropout=0.0), seed=1, dynamics=False)  # fmt: skip
    export_onnx(
        net,
        tmp_path / "kws.onnx",
        256,
        {"task": "kws", "labels": [f"w{i}" for i in range(33)] + ["_unknown_", "_silence_"]},
    )
    t = np.arange(16000 * 5) / 16000
    write_audio(tmp_path / "tone.wav", (0.4 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), 16000)
    rec = tmp_path / "heard.wav"
    cmd = [sys.executable, "-m", "edgessm", "listen", "--model", str(tmp_path / "kws.onnx"), "--device", "pulse",
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
