"""The torch-free runtime: streaming API over exported graphs, and no torch on its import path."""

from __future__ import annotations

import itertools
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import randomize

from edgessm.deploy.onnx_export import export_onnx, parallel_output
from edgessm.nets import build_network
from edgessm.runtime import StepModel

SMALL = {"channels": [4, 8, 16], "states": [4, 8, 16], "kinds": ["full", "bottleneck", "pointwise"], "pools": [4, 4, 4]}


@pytest.fixture(scope="module")
def kws_graph(tmp_path_factory):
    torch.manual_seed(0)
    net = randomize(build_network("kws", **SMALL, window=12, dropout=0.0), seed=1, dynamics=False).eval()
    path = tmp_path_factory.mktemp("g") / "kws.onnx"
    export_onnx(net, path, 128, {"task": "kws", "labels": [f"w{i}" for i in range(35)]})
    return net, path


def test_stream_accepts_any_piece_sizes(kws_graph) -> None:
    net, path = kws_graph
    model = StepModel(path)
    assert model.info.task == "kws" and model.info.chunk == 128 and len(model.info.labels) == 35
    x = (0.3 * np.random.default_rng(0).normal(size=128 * 30)).astype(np.float32)
    stream = model.create_stream()
    pos, rng = 0, np.random.default_rng(1)
    outs = []
    while pos < len(x):
        n = int(rng.integers(1, 500))
        stream.accept_waveform(16000, x[pos : pos + n])
        outs += list(stream.outputs())
        pos += n
    y = np.concatenate(outs, axis=-1)
    with torch.no_grad():
        ref = parallel_output(net, torch.from_numpy(x).view(1, 1, -1))[0].numpy()
    assert y.shape == ref.shape
    assert np.abs(y - ref).max() < 1e-4
    stream.reset()
    assert stream.chunks_done == 0 and all(not s.any() for s in stream.state)


def test_stream_resamples_and_flushes(kws_graph) -> None:
    _, path = kws_graph
    stream = StepModel(path).create_stream()
    x = np.sin(2 * np.pi * 440 * np.arange(44100) / 44100).astype(np.float32) * 0.3
    for piece in np.array_split(x, 7):
        stream.accept_waveform(44100, piece)
    stream.flush()
    frames = sum(o.shape[-1] for o in stream.outputs())
    assert abs(stream.samples_in - 16000) <= 64  # one second at 16 kHz
    assert frames == -(-stream.samples_in // 128) * 2  # 128-sample chunks, 2 frames each
    with pytest.raises(ValueError, match="reset"):
        stream.accept_waveform(22050, x[:100])
    with pytest.raises(ValueError, match="NaN"):
        stream.accept_waveform(44100, np.array([np.nan], np.float32))


def test_runtime_never_imports_torch(kws_graph) -> None:
    _, path = kws_graph
    code = (
        "import sys, numpy as np\n"
        "from edgessm.runtime import StepModel\n"
        f"m = StepModel({str(path)!r}); s = m.create_stream(); s.accept_waveform(16000, np.zeros(1000, np.float32))\n"
        "s.flush(); list(s.outputs())\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_or_foreign_graph_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="not found"):
        StepModel(tmp_path / "none.onnx")
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "foreign.onnx")
    with pytest.raises(ValueError, match="not an edgessm stepwise graph"):
        StepModel(tmp_path / "foreign.onnx")


def test_export_kit_runner_streams_a_wav(kws_graph, tmp_path) -> None:
    from pathlib import Path

    from edgessm.data.audio import write_audio

    net, path = kws_graph
    x = (0.3 * np.random.default_rng(3).normal(size=128 * 20 + 50)).astype(np.float32)
    write_audio(tmp_path / "in.wav", x, 16000)
    runner = Path(__file__).resolve().parents[1] / "export" / "stream_wav.py"
    subprocess.run([sys.executable, str(runner), str(path), str(tmp_path / "in.wav"), "--out", str(tmp_path / "o.npy")],
                   check=True, capture_output=True)  # fmt: skip
    out = np.load(tmp_path / "o.npy")
    x16 = np.round(np.clip(x, -1, 1) * 32767) / 32768.0  # what the PCM16 file holds
    x16 = np.concatenate([x16, np.zeros(-len(x16) % 128)]).astype(np.float32)
    with torch.no_grad():
        ref = parallel_output(net, torch.from_numpy(x16).view(1, 1, -1))[0].numpy()
    assert out.shape == ref.shape and np.abs(out - ref).max() < 1e-3


def test_model_benchmark_reports_rtf_latency_memory(kws_graph, capsys) -> None:
    from edgessm.bench.models import main

    _, path = kws_graph
    assert main([str(path), "--seconds", "2"]) == 0
    out = capsys.readouterr().out
    assert "RTF" in out and path.name in out
    code = "import sys, edgessm.bench.models; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_listen_on_a_file_prints_detections_without_torch(kws_graph, tmp_path) -> None:
    from edgessm.data.audio import write_audio

    _, path = kws_graph
    x = (0.3 * np.random.default_rng(5).normal(size=16000 * 3)).astype(np.float32)
    write_audio(tmp_path / "in.wav", x, 22050)  # not the model's rate: the stream resamples
    code = (
        "import sys\n"
        "from edgessm.cli import main\n"
        f"rc = main(['listen', '--model', {str(path)!r}, '--input', {str(tmp_path / 'in.wav')!r}, '--threshold', '0',"
        " '--refractory', '0.5', '--json', '--fast'])\n"
        "assert rc == 0 and 'torch' not in sys.modules, 'torch was imported'\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    import json

    events = [json.loads(line) for line in out.splitlines()]
    times = [e["time"] for e in events]
    assert events and all(e["keyword"].startswith("w") for e in events)
    assert all(b - a >= 0.5 - 1e-9 for a, b in itertools.pairwise(times))
    assert times[-1] <= 3.2


def test_listen_refuses_a_non_keyword_model(tmp_path) -> None:
    from edgessm.cli import main

    torch.manual_seed(0)
    net = build_network("asr", **{**SMALL, "pools": [4, 4, 20]})
    export_onnx(net, tmp_path / "asr.onnx", 320, {"task": "asr"})
    with pytest.raises(SystemExit, match="not a keyword spotter"):
        main(["listen", "--model", str(tmp_path / "asr.onnx"), "--input", "x.wav"])
    with pytest.raises(SystemExit, match="no model 'nope'"):
        main(["listen", "--model", "nope", "--input", "x.wav"])


def test_edgessm_bench_takes_graphs_directly(kws_graph, capsys) -> None:
    from edgessm.cli import main

    _, path = kws_graph
    assert main(["bench", str(path), "--seconds", "1"]) == 0
    assert "RTF" in capsys.readouterr().out


def test_listen_reads_raw_pcm_from_stdin_and_records_what_it_heard(kws_graph, tmp_path) -> None:
    import soundfile as sf

    _, path = kws_graph
    x = (0.3 * np.random.default_rng(6).normal(size=8000 * 2)).astype(np.float32)
    pcm = (x * 32767).astype("<i2").tobytes()
    rec = tmp_path / "heard.wav"
    cmd = [sys.executable, "-m", "edgessm", "listen", "--model", str(path), "--input", "-", "--rate", "8000",
           "--threshold", "0", "--json", "--record", str(rec)]  # fmt: skip
    out = subprocess.run(cmd, input=pcm, check=True, capture_output=True).stdout.decode()
    assert out.strip()  # threshold 0: detections were printed
    heard, rate = sf.read(rec)
    assert rate == 16000 and abs(len(heard) - 32000) <= 64  # 2 s at 8 kHz, resampled to 16 kHz
