"""``python -m edgessm.bench trainstep``: a recipe and its variants timed side by side."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from edgessm.bench import run

TINY = """task = "denoise"
[model]
channels = [4, 8]
states = [4, 4]
kinds = ["full", "pointwise"]
pools = [4, 4]
bottleneck_states = 8
n_bottleneck = 1
[data]
segment_samples = 4096
[train]
batch_size = 2
"""


def test_rows_share_one_input_and_report_params_and_ratios(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    out = tmp_path / "ts.json"
    both = "model.full_init=auditory;model.states=[8,8]"
    args = [str(cfg), "--vs", "model.channels=[8,16]", "--vs", both, "--repeats", "2", "--json", str(out)]
    assert run("trainstep", args) == 0
    text = capsys.readouterr().out
    assert "batch 2 x 0.26 s" in text and "model.channels=[8,16]" in text
    rows = json.loads(out.read_text())["rows"]
    assert [r["label"] for r in rows] == ["recipe", "model.channels=[8,16]", both]
    assert rows[0]["ratio"] == 1.0 and all(len(r["times"]) == 2 and r["median_s"] > 0 for r in rows)
    assert rows[1]["params"] > rows[0]["params"]  # the wider variant was really built
    assert json.loads(out.read_text())["shape"] == [2, 1, 4096]


def test_cpu_clock_times_the_steps_in_process_time(tmp_path: Path, capsys, monkeypatch) -> None:
    import time

    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    calls = []

    def fake_process_time() -> float:
        calls.append(1)
        return 0.5 * len(calls)  # every step "takes" 0.5 s of CPU time

    monkeypatch.setattr(time, "process_time", fake_process_time)
    out = tmp_path / "ts.json"
    assert run("trainstep", [str(cfg), "--clock", "cpu", "--repeats", "2", "--json", str(out)]) == 0
    assert "in CPU time" in capsys.readouterr().out
    assert json.loads(out.read_text())["rows"][0]["times"] == [0.5, 0.5]
    with pytest.raises(SystemExit, match="--clock cpu times this process's CPU work"):
        run("trainstep", [str(cfg), "--clock", "cpu", "--device", "cuda", "--repeats", "1"])


def test_a_misspelt_override_names_the_row_and_the_known_keys(tmp_path: Path) -> None:
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    with pytest.raises(SystemExit, match=r"model.chanels=\[8,16\]: unknown denoise config keys \['chanels'\]"):
        run("trainstep", [str(cfg), "--vs", "model.chanels=[8,16]", "--repeats", "1"])


@pytest.mark.slow  # inductor compiles the tiny network for ~1-2 min on this CPU
def test_a_compiled_row_times_the_compiled_network(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    out = tmp_path / "ts.json"
    args = [str(cfg), "--vs", "train.compile=reduce-overhead", "--repeats", "1", "--json", str(out)]
    assert run("trainstep", args) == 0
    rows = json.loads(out.read_text())["rows"]
    assert rows[1]["label"] == "train.compile=reduce-overhead" and rows[1]["median_s"] > 0


def test_a_compile_mode_that_does_not_exist_names_the_row(tmp_path: Path) -> None:
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    with pytest.raises(SystemExit, match=r"train.compile=fast: train.compile = 'fast'"):
        run("trainstep", [str(cfg), "--vs", "train.compile=fast", "--repeats", "1"])


def test_a_graphed_row_needs_cuda_and_says_so(tmp_path: Path) -> None:
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    with pytest.raises(SystemExit, match=r"train.cuda_graphs=true: train.cuda_graphs: it needs a CUDA device"):
        run("trainstep", [str(cfg), "--vs", "train.cuda_graphs=true", "--repeats", "1"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="records a CUDA graph: needs a GPU")
def test_a_graphed_row_replays_the_recorded_step(tmp_path: Path) -> None:
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    out = tmp_path / "ts.json"
    args = [str(cfg), "--device", "cuda", "--vs", "train.cuda_graphs=true", "--repeats", "2", "--json", str(out)]
    assert run("trainstep", args) == 0
    assert json.loads(out.read_text())["rows"][1]["median_s"] > 0
