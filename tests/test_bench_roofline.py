"""``python -m edgessm.bench roofline``: a training step's operations, FLOPs and bytes by block."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from fixtures import tiny_kws_toml
from torch import nn

from edgessm.bench import run
from edgessm.bench.roofline import GLUE, H100, OPTIMIZER, group_of, trace_step


class _Two(nn.Module):
    def __init__(self, sync: bool = False) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 16), nn.Linear(16, 4)])
        self.sync = sync

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers[0](x.transpose(1, 2)).relu()  # the transpose is a view: no kernel
        if self.sync and float(x.detach().sum()) > 0:  # a value read on the host
            x = x * 2
        return self.layers[1](x)


def test_groups_are_numbered_blocks() -> None:
    assert group_of("backbone.layers.3.ssm.modes") == "backbone.layers.3"
    assert group_of("head") == "head" and group_of("head.1") == "head.1"


def test_counts_matrix_flops_views_and_fused_bytes() -> None:
    net = _Two().to("meta")
    x = torch.empty(5, 8, 7, device="meta")  # (B, features, T): 35 rows through 8 -> 16 -> 4
    rec = trace_step(net, x, H100)
    first, second = rec.costs["layers.0"], rec.costs["layers.1"]
    # forward x W^T, backward the weight's gradient (the first layer's input needs none)
    assert first.tensor_flops == pytest.approx(2 * (2 * 35 * 8 * 16))
    assert second.tensor_flops == pytest.approx(3 * (2 * 35 * 16 * 4))  # forward, input and weight gradients
    assert first.ops > 0 and rec.costs[OPTIMIZER].ops > 0 and GLUE in rec.costs
    assert "transpose" not in rec.by_op and "t" not in rec.by_op  # views cost nothing
    # a fused block moves its boundary tensors and parameters: 2.5 x (in + out) + 3 x params
    params = (8 * 16 + 16) * 4
    assert first.fused_bytes == pytest.approx(2.5 * (5 * 7 * 8 + 5 * 7 * 16) * 4 + 3 * params)
    assert first.fused_bytes < first.bytes
    assert sum(c.syncs for c in rec.costs.values()) == 0  # the optimizer's step counts live on the host


def test_a_host_sync_in_the_step_is_reported() -> None:
    with pytest.raises((RuntimeError, NotImplementedError), match="meta"):
        trace_step(_Two(sync=True).to("meta"), torch.empty(2, 8, 3, device="meta"), H100)


def test_cli_prints_blocks_and_totals(tmp_path: Path, capsys) -> None:
    cfg = tiny_kws_toml(tmp_path / "tiny.toml", tmp_path / "no-data-needed", steps=1)  # only the network is built
    out = tmp_path / "roofline.json"
    assert run("roofline", [str(cfg), "--batch", "4", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "batch 4 x 0.51 s" in text and "backbone.layers.0" in text and "host syncs in the step: 0" in text
    report = json.loads(out.read_text())
    assert report["shape"] == [4, 1, 8192] and report["summary"]["ops"] == sum(r["ops"] for r in report["rows"])
    assert report["summary"]["fused_ms"] < report["summary"]["eager_device_ms"]
    with pytest.raises(SystemExit, match="positive"):
        run("roofline", [str(cfg), "--bandwidth", "0"])


def test_fused_front_is_traced_as_its_kernel_operators(tmp_path: Path, capsys) -> None:
    """``--fused-front``: the filterbank front's chunked scan through the fused Triton operators (their fake
    kernels on the meta device): fewer bytes than the PyTorch chunked front, the kernels' FLOPs counted."""
    from edgessm.ssm.fused.front import tile_flops

    cfg = tiny_kws_toml(tmp_path / "tiny.toml", tmp_path / "no-data-needed", steps=1)
    front = ["--set", "model.front=filterbank", "--set", "model.front_bands=4", "--batch", "2"]
    reports = {}
    for name, flags in (("chunked", ["--set", "train.front_plan=chunked"]), ("fused", ["--fused-front"])):
        out = tmp_path / f"{name}.json"
        assert run("roofline", [str(cfg), *front, *flags, "--json", str(out)]) == 0
        reports[name] = {r["block"]: r for r in json.loads(out.read_text())["rows"]}
        shape = json.loads(out.read_text())["shape"]
    assert "front chunked (fused kernel)" in capsys.readouterr().out
    chunked, fused = reports["chunked"]["backbone.layers.0"], reports["fused"]["backbone.layers.0"]
    assert fused["bytes"] < chunked["bytes"] and fused["ops"] < chunked["ops"]
    rows = shape[0] * shape[-1] // 32  # 32-sample chunks (10 ms frames), 4 bands, one mode: K = 2
    kernels = 7 * tile_flops(rows, 4, 32, 2)  # forward 1, backward 6 (attributed to the front, not its neighbour)
    assert kernels <= fused["tensor_flops"] < 1.05 * kernels  # the rest: the scan's state products between chunks
    with pytest.raises(SystemExit, match="no filterbank front"):
        run("roofline", [str(cfg), "--fused-front"])
