"""The torch-free runtime: streaming API over exported graphs, and no torch on its import path."""

from __future__ import annotations

import collections
import io
import itertools
import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile as sf
import torch
from conftest import randomize
from fixtures import DEMOS, demo_script

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


def test_stepper_gives_the_functional_calls_numbers_and_keeps_its_state(kws_graph) -> None:
    """The bound (IO-binding) path of a stream: the same outputs and states as ``run``, call after call, and a
    state set from outside takes effect on the next call."""
    from edgessm.runtime.session import Stepper

    _, path = kws_graph
    model = StepModel(path)
    x = (0.3 * np.random.default_rng(2).normal(size=128 * 12)).astype(np.float32)
    state, step = model.initial_state(), model.stepper()
    assert step._bound
    outs = []
    for pos in range(0, len(x), 128):
        y, state = model.run(x[pos : pos + 128], state)
        got = step(x[pos : pos + 128])
        np.testing.assert_array_equal(got, y)
        outs.append(got)
        for a, b in zip(step.state, state, strict=True):
            np.testing.assert_array_equal(a, b)
    assert not all(np.array_equal(outs[0], o) for o in outs[1:])  # each call returns its own array
    step.state = model.initial_state()  # back to the start: the first chunk's output again
    np.testing.assert_array_equal(step(x[:128]), outs[0])
    with pytest.raises(ValueError, match="state tensors"):
        step.state = state[:-1]
    unbound = Stepper(SimpleNamespace(run=model.run), model.initial_state())  # no session: called through run()
    assert not unbound._bound
    np.testing.assert_array_equal(unbound(x[:128]), outs[0])


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


def test_export_kit_runner_applies_the_graphs_level_control_like_the_runtime(kws_graph, tmp_path) -> None:
    import shutil
    from pathlib import Path

    from edgessm.data.audio import write_audio
    from edgessm.deploy.metadata import set_graph_metadata
    from edgessm.runtime.level import AgcConfig

    _, path = kws_graph
    graph = tmp_path / "agc.onnx"
    shutil.copy(path, graph)
    set_graph_metadata(graph, "input_agc", AgcConfig().to_json())
    rng = np.random.default_rng(4)
    x = (0.003 * rng.normal(size=128 * 200)).astype(np.float32)  # quiet: the control raises it
    x[128 * 20 : 128 * 60] *= 10
    write_audio(tmp_path / "in.wav", x, 16000)
    runner = Path(__file__).resolve().parents[1] / "export" / "stream_wav.py"
    subprocess.run([sys.executable, str(runner), str(graph), str(tmp_path / "in.wav"), "--out",
                    str(tmp_path / "o.npy")], check=True, capture_output=True)  # fmt: skip
    import soundfile as sf

    x16 = sf.read(tmp_path / "in.wav", dtype="float32")[0]  # what the PCM16 file holds, as the kit reads it
    ours = StepModel(graph).process(x16)
    assert StepModel(graph).agc is not None
    assert np.abs(np.load(tmp_path / "o.npy") - ours).max() < 1e-4
    assert np.abs(StepModel(graph, agc=False).process(x16) - ours).max() > 1e-3  # the control made a difference


def test_export_kit_runner_warms_the_state_up_like_the_runtime(tmp_path) -> None:
    """A graph whose output is its call count: with ``warmup_samples`` both runners start counting after it."""
    import json
    from pathlib import Path

    import onnx
    from onnx import TensorProto, helper

    from edgessm.data.audio import write_audio

    nodes = [helper.make_node("Add", ["count", "one"], ["count_out"]),
             helper.make_node("Reshape", ["count", "shape"], ["output"])]  # fmt: skip
    inits = [helper.make_tensor("one", TensorProto.FLOAT, [1, 1], [1.0]),
             helper.make_tensor("shape", TensorProto.INT64, [3], [1, 1, 1])]  # fmt: skip
    graph = helper.make_graph(
        nodes, "count",
        [helper.make_tensor_value_info("audio", TensorProto.FLOAT, [1, 1, 320]),
         helper.make_tensor_value_info("count", TensorProto.FLOAT, [1, 1])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1, 1]),
         helper.make_tensor_value_info("count_out", TensorProto.FLOAT, [1, 1])],
        inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    meta = {"task": "asr", "chunk": "320", "stride": "320", "states": json.dumps([["count", [1]]]),
            "warmup_samples": "900"}  # fmt: skip
    for key, value in meta.items():
        model.metadata_props.add(key=key, value=value)
    onnx.save(model, str(tmp_path / "count.onnx"))
    write_audio(tmp_path / "in.wav", np.zeros(320 * 4, np.float32), 16000)
    runner = Path(__file__).resolve().parents[1] / "export" / "stream_wav.py"
    subprocess.run([sys.executable, str(runner), str(tmp_path / "count.onnx"), str(tmp_path / "in.wav"),
                    "--out", str(tmp_path / "o.npy")], check=True, capture_output=True)  # fmt: skip
    kit = np.load(tmp_path / "o.npy").reshape(-1)
    ours = StepModel(tmp_path / "count.onnx").process(np.zeros(320 * 4, np.float32)).reshape(-1)
    assert kit.tolist() == ours.tolist() == [3.0, 4.0, 5.0, 6.0]  # 900 samples: three whole chunks of silence


def test_model_benchmark_reports_rtf_latency_memory(kws_graph, capsys) -> None:
    from edgessm.bench.models import main

    _, path = kws_graph
    assert main([str(path), "--seconds", "2"]) == 0
    out = capsys.readouterr().out
    assert "RTF" in out and path.name in out
    code = "import sys, edgessm.bench.models; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_model_benchmark_interleaves_graphs_and_tells_same_names_apart(kws_graph, tmp_path, capsys) -> None:
    import shutil

    from edgessm.bench.models import main, measure_all

    _, path = kws_graph
    other = tmp_path / "other" / path.name
    other.parent.mkdir()
    shutil.copy(path, other)
    results = measure_all([path, other], seconds=1.0, rounds=3)
    assert [r["rounds"] for r in results] == [3, 3] and all(r["rtf"] > 0 for r in results)
    assert main([str(path), str(other), "--seconds", "1", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    assert "in 2 interleaved rounds" in out and f"other/{path.name}" in out and f"{path.parent.name}/{path.name}" in out


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


# --- edgessm listen: summary, meter, microphone errors and overflows, Ctrl-C, the demo recording ---------------

SUMMARY = re.compile(
    r"summary: (?P<heard>[\d.]+) s of audio heard, (?P<n>\d+) detections?(?: \((?P<words>[^)]*)\))?, "
    r"(?P<overflows>\d+) input overflows?, real-time factor (?P<rtf>[\d.]+)"
)
DETECTION_LINE = re.compile(r" *\d+\.\d\d s  w\d+ +\d\.\d\d")


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def render_terminal(text: str) -> list[str]:
    """What a terminal shows after ``text``: a carriage return moves to column 0, characters overwrite."""
    lines, col = [[]], 0
    for ch in text:
        if ch == "\n":
            lines.append([])
            col = 0
        elif ch == "\r":
            col = 0
        else:
            line = lines[-1]
            line.extend(" " * (col + 1 - len(line)))
            line[col] = ch
            col += 1
    return ["".join(line).rstrip() for line in lines if "".join(line).strip()]


def summary_of(stderr: str) -> re.Match:
    found = [m for line in stderr.splitlines() if (m := SUMMARY.fullmatch(line.strip()))]
    assert len(found) == 1, f"expected one summary line on stderr, got {stderr!r}"
    return found[0]


def test_listen_summary_goes_to_stderr_and_json_keeps_stdout_clean(kws_graph, capsys) -> None:
    from edgessm.cli import main

    _, path = kws_graph
    wav = DEMOS / "keywords.wav"
    args = ["listen", "--model", str(path), "--input", str(wav), "--fast", "--threshold", "0", "--refractory", "1"]
    assert main([*args, "--json"]) == 0
    out, err = capsys.readouterr()
    events = [json.loads(line) for line in out.splitlines()]  # stdout: JSON lines and nothing else
    assert events and all(set(e) == {"keyword", "score", "time"} for e in events)
    assert all(b["time"] - a["time"] >= 1 - 1e-9 for a, b in itertools.pairwise(events))
    s = summary_of(err)
    assert float(s["heard"]) == pytest.approx(sf.info(wav).frames / 16000, abs=0.005)
    assert int(s["n"]) == len(events) and int(s["overflows"]) == 0 and float(s["rtf"]) > 0
    counts = collections.Counter(e["keyword"] for e in events)
    assert s["words"] == ", ".join(f"{w} {n}" for w, n in sorted(counts.items()))
    assert "\r" not in err and "dBFS" not in err  # stderr is not a terminal: no meter

    assert main(args) == 0  # the human-readable form: same detections, one line each
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == len(events) and all(DETECTION_LINE.fullmatch(x) for x in out.splitlines())
    assert "summary" not in out and int(summary_of(err)["n"]) == len(events)

    # the contrast gate (the demo's words follow pauses: each stands out from the second before it) only
    # removes detections, and a negative gate is refused
    assert main([*args, "--json", "--contrast", "6"]) == 0
    gated = [json.loads(line) for line in capsys.readouterr()[0].splitlines()]
    assert 0 < len(gated) <= len(events) and all(e in events for e in gated)
    with pytest.raises(SystemExit, match="--contrast must be 0"):
        main([*args, "--contrast", "-3"])
    # the speech-after gate reads an _unknown_ class, which this test model lacks: refused in one line
    with pytest.raises(SystemExit, match=r"no _unknown_ class \(turn the gate off: --speech-after 0\)"):
        main([*args, "--speech-after", "0.5"])
    with pytest.raises(SystemExit, match="--speech-after is a posterior in"):
        main([*args, "--speech-after", "1.5"])
    assert main([*args, "--json", "--speech-after", "0"]) == 0  # off: the plain decision
    assert [json.loads(line) for line in capsys.readouterr()[0].splitlines()] == events
    # a hold: one detection per crossing still, each the hold's strongest word, timed within the hold
    assert main([*args, "--json", "--hold", "0.3"]) == 0
    held = [json.loads(line) for line in capsys.readouterr()[0].splitlines()]
    assert len(held) == len(events)
    assert all(0 <= h["time"] - e["time"] <= 0.3 + 1e-6 and h["score"] >= e["score"] - 1e-3
               for h, e in zip(held, events, strict=True))  # fmt: skip
    with pytest.raises(SystemExit, match="--hold is in seconds"):
        main([*args, "--hold", "-1"])
    # a runner-up margin: each word fires where it leads the others by 0.3 (at or after its plain crossing), or
    # stays silent
    assert main([*args, "--json", "--margin", "0.3"]) == 0
    led = [json.loads(line) for line in capsys.readouterr()[0].splitlines()]
    assert all(any(e["keyword"] == h["keyword"] and 0 <= h["time"] - e["time"] < 1.0 for e in events) for h in led)
    with pytest.raises(SystemExit, match="--margin is a difference of posteriors"):
        main([*args, "--margin", "1.5"])


@pytest.mark.parametrize(
    ("flags", "tty", "meter"),
    [([], True, True), (["--quiet"], True, False), (["--json"], True, False), ([], False, False)],
)
def test_listen_meter_only_on_an_interactive_terminal(kws_graph, tmp_path, monkeypatch, flags, tty, meter) -> None:
    from edgessm.cli import main

    _, path = kws_graph
    x = (0.3 * np.random.default_rng(7).normal(size=16000 * 2)).astype(np.float32)
    sf.write(tmp_path / "in.wav", x, 16000)
    screen = FakeTTY() if tty else io.StringIO()
    monkeypatch.setattr(sys, "stdout", screen)  # detections and meter share one terminal, as they would
    monkeypatch.setattr(sys, "stderr", screen)
    rc = main(["listen", "--model", str(path), "--input", str(tmp_path / "in.wav"), "--fast", "--threshold", "0",
               "--refractory", "0.5", *flags])  # fmt: skip
    assert rc == 0
    text = screen.getvalue()
    assert ("dBFS" in text) == meter and ("\r" in text) == meter
    if meter:
        assert re.search(r"-?\d+ dBFS \[#+-*\] +[\d.]+ s  \d+ detections?", text)
    if "--json" not in flags:
        # the meter is wiped before every detection and before the summary: nothing of it stays on screen
        shown = render_terminal(text)
        assert len(shown) > 1 and SUMMARY.fullmatch(shown[-1])
        assert all(DETECTION_LINE.fullmatch(line) for line in shown[:-1]), shown


class FakeInputStream:
    """A stand-in for sounddevice.InputStream: on start() it delivers 40 blocks of a 440 Hz tone
    (2 s at 48 kHz) to the callback, with an input overflow flagged on blocks 5, 17 and 30."""

    OVERFLOW_BLOCKS = (5, 17, 30)
    fail_on: str | None = None  # "open" or "start": raise PortAudioError there

    def __init__(self, callback, samplerate, blocksize, channels=1, **kwargs) -> None:
        import sounddevice as sd

        if self.fail_on == "open":
            raise sd.PortAudioError("Error opening InputStream: Device unavailable", -9985)
        self.callback, self.rate, self.blocksize, self.channels = callback, int(samplerate), blocksize, channels
        self.closed = False

    def start(self) -> None:
        import sounddevice as sd

        if self.fail_on == "start":
            raise sd.PortAudioError("Error starting stream: Device unavailable", -9985)
        t = np.arange(40 * self.blocksize) / self.rate
        tone = (0.25 * np.sin(2 * np.pi * 440 * t)).astype(np.float32).reshape(40, self.blocksize, 1)
        for i, block in enumerate(tone):
            status = sd.CallbackFlags()
            status.input_overflow = i in self.OVERFLOW_BLOCKS
            self.callback(block, self.blocksize, None, status)

    def stop(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def fake_mic(monkeypatch):
    sd = pytest.importorskip("sounddevice")  # needs the PortAudio library, not a device
    dev = {"name": "fake mic", "default_samplerate": 48000.0, "max_input_channels": 1}
    monkeypatch.setattr(sd, "query_devices", lambda device=None, kind=None: dev)
    monkeypatch.setattr(sd, "InputStream", FakeInputStream)
    monkeypatch.setattr(FakeInputStream, "fail_on", None)
    return sd


def test_listen_counts_microphone_overflows_and_hears_every_block(kws_graph, tmp_path, fake_mic, monkeypatch) -> None:
    from edgessm.cli import main

    _, path = kws_graph
    screen = FakeTTY()
    monkeypatch.setattr(sys, "stderr", screen)
    rec = tmp_path / "heard.wav"
    rc = main(["listen", "--model", str(path), "--duration", "0.2", "--threshold", "1.1", "--record", str(rec)])
    assert rc == 0
    text = screen.getvalue()
    assert "listening on fake mic at 48000 Hz" in text
    assert "3 overflows" in text  # on the meter
    s = summary_of(text)
    assert int(s["overflows"]) == 3 and int(s["n"]) == 0
    assert float(s["heard"]) == pytest.approx(2.0, abs=0.005)  # every block, overflowing or not, was heard
    heard, rate = sf.read(rec)
    assert rate == 16000 and abs(len(heard) - 32000) <= 2
    spectrum = np.abs(np.fft.rfft(heard[8000:24000]))
    assert abs(np.argmax(spectrum) * rate / 16000 - 440) < 2  # resampled from 48 kHz, not garbled
    # --duration over before the first block was taken: what the stream captured is still heard
    assert main(["listen", "--model", str(path), "--duration", "0", "--quiet"]) == 0
    assert float(summary_of(screen.getvalue().split("fake mic")[-1])["heard"]) == pytest.approx(2.0, abs=0.005)


@pytest.mark.parametrize("fail_on", ["query", "open", "start"])
def test_listen_without_a_usable_microphone_suggests_a_file(kws_graph, fake_mic, monkeypatch, fail_on) -> None:
    from edgessm.cli import main

    _, path = kws_graph
    sd = fake_mic
    if fail_on == "query":  # what PortAudio says on a machine with no audio devices at all

        def query(device=None, kind=None):
            raise sd.PortAudioError("Error querying device -1")

        monkeypatch.setattr(sd, "query_devices", query)
    monkeypatch.setattr(FakeInputStream, "fail_on", fail_on)
    with pytest.raises(SystemExit) as e:
        main(["listen", "--model", str(path), "--duration", "0.2"])
    message = str(e.value.code)
    assert message.startswith("edgessm listen: no usable microphone") and "--input FILE" in message
    assert ("Error querying device" if fail_on == "query" else "Device unavailable") in message


def test_listen_ctrl_c_ends_cleanly_with_a_summary(kws_graph, tmp_path, monkeypatch, capsys) -> None:
    import time

    from edgessm.cli import main

    _, path = kws_graph
    x = (0.3 * np.random.default_rng(8).normal(size=16000 * 3)).astype(np.float32)
    sf.write(tmp_path / "in.wav", x, 16000)
    calls = []

    def sleep(seconds: float) -> None:  # the real-time pacing of a file; the 11th wait is interrupted
        calls.append(seconds)
        if len(calls) == 11:
            raise KeyboardInterrupt

    monkeypatch.setattr(time, "sleep", sleep)
    rec = tmp_path / "heard.wav"
    try:
        rc = main(["listen", "--model", str(path), "--input", str(tmp_path / "in.wav"), "--record", str(rec), "--json"])
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped edgessm listen")
    assert rc == 0 and len(calls) == 11
    s = summary_of(capsys.readouterr().err)
    assert float(s["heard"]) == pytest.approx(1.0, abs=1e-9)  # ten 100 ms blocks were heard before Ctrl-C
    assert len(sf.read(rec)[0]) == 16000


def test_listen_stdin_odd_reads_never_drop_samples(kws_graph, tmp_path, monkeypatch, capsys) -> None:
    from edgessm.cli import main

    _, path = kws_graph
    x = np.random.default_rng(9).integers(-20000, 20000, size=5000).astype("<i2")
    data = x.tobytes()

    class Pipe:  # a pipe that hands out odd numbers of bytes per read
        def __init__(self) -> None:
            self.pos, self.sizes = 0, itertools.cycle([3, 1, 7, 2, 5, 641])

        def read(self, n: int) -> bytes:
            piece = data[self.pos : self.pos + min(n, next(self.sizes))]
            self.pos += len(piece)
            return piece

    monkeypatch.setattr(sys, "stdin", type("Stdin", (), {"buffer": Pipe()})())
    rec = tmp_path / "heard.wav"
    assert main(["listen", "--model", str(path), "--input", "-", "--threshold", "1.1", "--record", str(rec)]) == 0
    heard, _ = sf.read(rec, dtype="int16")
    assert len(heard) == len(x) and np.abs(heard.astype(int) - x).max() <= 1
    assert float(summary_of(capsys.readouterr().err)["heard"]) == pytest.approx(len(x) / 16000, abs=0.005)


def test_listen_duration_limits_a_file(kws_graph, capsys) -> None:
    from edgessm.cli import main

    _, path = kws_graph
    args = ["listen", "--model", str(path), "--input", str(DEMOS / "keywords.wav"), "--fast", "--duration", "2"]
    assert main(args) == 0
    assert float(summary_of(capsys.readouterr().err)["heard"]) == pytest.approx(2.0, abs=1e-9)


def test_listen_takes_the_input_as_its_positional_argument(kws_graph, capsys) -> None:
    from edgessm.cli import main

    _, path = kws_graph
    demo = str(DEMOS / "keywords.wav")
    base = ["listen", "--model", str(path), "--fast", "--threshold", "0", "--refractory", "1"]
    assert main([*base, "--input", demo]) == 0
    by_option = capsys.readouterr()
    assert main([*base, demo]) == 0
    positional = capsys.readouterr()
    assert positional.out == by_option.out != ""  # the same detections
    assert summary_of(positional.err)["heard"] == summary_of(by_option.err)["heard"]
    assert main([*base, demo, "--input", demo]) == 0  # the same input twice is one input
    capsys.readouterr()
    with pytest.raises(SystemExit, match=r"two inputs given \(.*keywords.wav and --input -\); give one"):
        main([*base, demo, "--input", "-"])


COMMAND_WORDS = {"yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go"}


def test_demo_recording_is_small_labelled_real_speech() -> None:
    info = sf.info(DEMOS / "keywords.wav")
    assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16")
    assert 12 <= info.duration <= 15 and (DEMOS / "keywords.wav").stat().st_size < 500_000
    rows = [line.split() for line in (DEMOS / "keywords.txt").read_text().splitlines()]
    assert 6 <= len(rows) <= 8 and all(len(r) == 4 for r in rows)
    starts, ends = [float(r[0]) for r in rows], [float(r[1]) for r in rows]
    assert {r[2] for r in rows} <= COMMAND_WORDS and len({r[3] for r in rows}) == len(rows)  # different speakers
    assert all(1.5 <= b - a <= 2.0 for a, b in itertools.pairwise(starts))
    assert all(0 < s < e <= info.duration for s, e in zip(starts, ends, strict=True))
    audio, rate = sf.read(DEMOS / "keywords.wav", dtype="float32")
    spoken = np.zeros(len(audio), bool)
    for s, e in zip(starts, ends, strict=True):
        spoken[round(s * rate) : round(e * rate)] = True
    quiet = ~np.convolve(spoken, np.ones(rate // 5), "same").astype(bool)  # 100 ms away from every word
    assert 10 * np.log10(np.mean(audio[spoken] ** 2) / np.mean(audio[quiet] ** 2)) > 20  # words over a quiet bed
    assert np.mean(audio[quiet] ** 2) > 0  # a real background, not digital silence


def test_demo_script_rebuilds_the_demo(tmp_path) -> None:
    from edgessm.data.corpora import shared_data_dir

    shared = shared_data_dir(required=False)
    if shared is None or not (shared / "speech_commands_test_v0.02").is_dir():
        pytest.skip("the shared data folder (Speech Commands test clips) is not here")
    assert demo_script("make_demo").main(["--out", str(tmp_path)]) == 0
    assert (tmp_path / "keywords.txt").read_text() == (DEMOS / "keywords.txt").read_text(), "demos/ is out of date"
    new, old = (sf.read(d / "keywords.wav", dtype="int16")[0] for d in (tmp_path, DEMOS))
    # the same clips at the same places; at most a rounding step apart (float sums may differ across CPUs)
    assert new.shape == old.shape and np.abs(new.astype(int) - old).max() <= 1, "demos/keywords.wav is out of date"


def test_noisy_speech_demo_is_rebuilt_from_a_held_out_test_mixture(tmp_path) -> None:
    from edgessm.data.corpora import shared_data_dir

    shared = shared_data_dir(required=False)
    if shared is None or not (shared / "real_read_speech").is_dir():
        pytest.skip("the shared data folder (read speech, noise recordings) is not here")
    assert demo_script("make_noisy_speech").main(["--out", str(tmp_path)]) == 0
    new, old = (sf.read(d / "noisy_speech.wav", dtype="int16")[0] for d in (tmp_path, DEMOS))
    assert new.shape == old.shape and np.abs(new.astype(int) - old).max() <= 1, "demos/noisy_speech.wav is out of date"


def test_kit_runner_aligns_a_delayed_denoiser_with_its_input(tmp_path) -> None:
    """export/stream_wav.py reads a denoiser's output from `delay_samples` on: the shipped spectral
    denoiser's file output is the same as `edgessm denoise`'s, sample for sample (within PCM rounding)."""
    from edgessm.cli import main

    demo = Path(__file__).resolve().parents[1] / "demos" / "noisy_speech.wav"
    graph = Path(__file__).resolve().parents[1] / "models" / "denoise" / "denoise.onnx"
    runner = Path(__file__).resolve().parents[1] / "export" / "stream_wav.py"
    subprocess.run([sys.executable, str(runner), str(graph), str(demo), "--out", str(tmp_path / "kit.wav")],
                   check=True, capture_output=True)  # fmt: skip
    assert main(["denoise", str(demo), str(tmp_path / "ours.wav"), "--model", str(graph)]) == 0
    kit, ours = (sf.read(tmp_path / f, dtype="int16")[0].astype(int) for f in ("kit.wav", "ours.wav"))
    assert kit.shape == ours.shape and np.abs(kit - ours).max() <= 2
