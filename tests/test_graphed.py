"""``train.cuda_graphs``: the whole training step recorded once as a CUDA graph and replayed (train/graphed.py).

CI has no GPU. On CPU: the replay plumbing (static buffers, shape checks, warm-up) with ``capture=False``, a
training run through it equal to the eager run, the step free of what a recording cannot hold (a dispatch
guard), and the refusals. With CUDA (a lent GPU): the recorded run against the eager one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from fixtures import clean_and_noise_folders, speech_commands_folder
from test_train import TINY_KWS, _losses, kws_config

from edgessm.train import trainer as trainer_module
from edgessm.train.config import TrainConfig
from edgessm.train.graphed import HostSyncGuard, StepGraph
from edgessm.train.tasks import build_task
from edgessm.train.trainer import Trainer, graph_refusal


def _kws(folder: Path, steps: int = 8, **train) -> TrainConfig:
    """test_train's tiny kws run with frame supervision (the frame targets are what a recording must hold)."""
    cfg = kws_config(folder, steps=steps, **train)
    cfg.data = {**cfg.data, "context_samples": 2000, "frame_loss": 1.0}
    return cfg


def _denoise(tmp: Path) -> TrainConfig:
    clean, noise = clean_and_noise_folders(tmp / "data")
    return TrainConfig.from_dict(
        {
            "task": "denoise",
            "model": {"arch": "spectral", "channels": [8, 8], "states": [4, 4], "kinds": ["bottleneck", "pointwise"]},
            "data": {"sources": [f"folder:{clean}"], "noise": [f"noise:{noise}"], "segment_samples": 4160,
                     "val_noise_holdout": ["hum.wav"], "validation_pct": 50.0, "mask_weight": 4.0, "irm_exponent": 0.75,
                     "wave_weight": 0.1, "spectral_weight": 0.5},
            "train": {"steps": 4, "batch_size": 2, "workers": 0},
        }
    )  # fmt: skip


@pytest.fixture(scope="module")
def sc_folder(tmp_path_factory) -> Path:
    return speech_commands_folder(tmp_path_factory.mktemp("sc"))


def test_replays_read_fixed_buffers_and_refuse_other_shapes() -> None:
    seen = []

    def step(batch):
        seen.append(batch["x"])
        return {"y": batch["x"] * batch["scale"]}

    graph = StepGraph(step, warmup=2, capture=False)
    for i in range(2):  # warm-up: the batch itself
        x = torch.full((3,), float(i))
        assert graph({"x": x, "scale": 2.0})["y"].tolist() == [2.0 * i] * 3 and seen[-1] is x
    assert not graph.recorded
    outs = [graph({"x": torch.full((3,), float(i)), "scale": 2.0})["y"].tolist() for i in (5, 6)]
    assert outs == [[10.0] * 3, [12.0] * 3] and graph.recorded and graph.calls == 4
    assert seen[-1] is seen[-2] is graph.inputs["x"]  # replays read the buffers made at recording
    with pytest.raises(ValueError, match=r"'x' was \(3,\) torch.float32 when recorded, this batch has \(4,\)"):
        graph({"x": torch.zeros(4), "scale": 2.0})
    with pytest.raises(ValueError, match="'scale' \\(not a tensor\\) is frozen at recording"):
        graph({"x": torch.zeros(3), "scale": 3.0})
    with pytest.raises(ValueError, match="tensors changed"):
        graph({"x": torch.zeros(3), "z": torch.zeros(3), "scale": 2.0})
    with pytest.raises(ValueError, match="warm-up"):
        StepGraph(step, warmup=0)


def _steps_under_guard(trainer: Trainer) -> dict[str, int]:
    """The trainer's step on one batch, on the meta device (the networks take their device code paths there,
    as on a GPU; a value read on the host fails): once as the warm-up does (the optimizer's state is made),
    then under the guard with the schedule's progress as a device tensor, as a recorded step gets it."""
    ds = trainer.task.train_set()
    batch = trainer.task.collate([ds[(i, i)] for i in range(2)])
    batch = {k: v.to("meta") if torch.is_tensor(v) else v for k, v in batch.items()}
    trainer.model.to("meta")  # the same Parameter objects: the optimizer still holds them
    trainer._finite = trainer._finite.to("meta")
    trainer._train_step({**batch, "_progress": 0.0})
    guard = HostSyncGuard()
    try:
        with guard:
            out = trainer._train_step({**batch, "_progress": torch.zeros((), device="meta")})
    except (RuntimeError, NotImplementedError) as e:  # a host read on meta: name what the guard saw
        raise AssertionError(f"the step reads the device on the host: {guard.found} ({e})") from None
    assert set(out) >= {"loss", "grad_norm"} and all(torch.is_tensor(v) for v in out.values())
    return guard.found


def test_kws_frame_loss_step_holds_nothing_a_recording_cannot(sc_folder: Path, tmp_path: Path) -> None:
    """Forward, the frame-supervised loss, backward, clipping and AdamW read nothing on the host and make no
    tensor from Python data (the class mask of the frame targets is made once per device)."""
    trainer = Trainer(_kws(sc_folder), tmp_path / "run", device="cpu", progress=False)
    assert _steps_under_guard(trainer) == {}


def test_denoise_step_holds_nothing_a_recording_cannot(tmp_path: Path) -> None:
    """The spectral denoiser's mask (its oracle gains), waveform and ramped spectral losses (progress as a device
    tensor; the ERB bank of the spectral loss is made once per device)."""
    trainer = Trainer(_denoise(tmp_path), tmp_path / "run", device="cpu", progress=False)
    assert _steps_under_guard(trainer) == {}


def test_the_guard_finds_host_reads_and_tensors_from_python_data() -> None:
    x = torch.randn(4)
    with HostSyncGuard() as guard:
        _ = x[x > 0]  # a data-dependent shape
        _ = float(x.sum())
        _ = torch.tensor([1.0, 2.0])
        _ = torch.tensor([1.0, 2.0], device="meta")
        _ = x.to("meta")
    assert guard.found == {"index with a boolean mask": 1, "_local_scalar_dense": 1, "lift_fresh": 1,
                           "torch.tensor on a device": 1, "a host tensor moved to the device": 1}  # fmt: skip


def _log(run: Path) -> list[tuple[float, float]]:
    return list(zip(_losses(run), _losses(run, "grad_norm"), strict=True))


def test_a_run_through_the_replay_plumbing_equals_the_eager_run(
    sc_folder: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    """On CPU the recorded step runs eagerly on its static buffers (capture=False): the same losses, gradient
    norms and weights as the plain loop, step for step (warm-up, recording and replays all train)."""
    eager = Trainer(_kws(sc_folder), tmp_path / "eager", device="cpu", progress=False)
    eager.fit()
    monkeypatch.setattr(trainer_module, "graph_refusal", lambda *a: None)
    graphed = Trainer(_kws(sc_folder, cuda_graphs=True), tmp_path / "graphed", device="cpu", progress=False)
    assert graphed.graphed
    graphed.fit()
    assert "train.cuda_graphs: the step is recorded as its replay buffers" in capsys.readouterr().out
    assert _log(tmp_path / "graphed") == _log(tmp_path / "eager") and len(_log(tmp_path / "eager")) == 8
    for a, b in zip(graphed.model.state_dict().values(), eager.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_refusals_say_why_in_one_line(sc_folder: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"train.cuda_graphs: it needs a CUDA device \(this run trains on cpu\)"):
        Trainer(_kws(sc_folder, cuda_graphs=True), tmp_path / "run", device="cpu", progress=False)
    cuda = torch.device("cuda")  # a device object only: nothing runs
    cfg = _kws(sc_folder)
    task = build_task(cfg)
    net = task.build_model()
    assert graph_refusal(cfg, cuda, 1, net, task) is None
    assert "choose one" in graph_refusal(_kws(sc_folder, compile="reduce-overhead"), cuda, 1, net, task)
    assert "torchrun" in graph_refusal(cfg, cuda, 2, net, task)
    assert "bf16" in graph_refusal(_kws(sc_folder, amp="fp16"), cuda, 1, net, task)
    es_model = {**TINY_KWS, "kinds": ["essm", "essm"], "essm_budget_dropout": True}
    es_cfg = TrainConfig.from_dict({**cfg.to_dict(), "model": es_model})
    es_task = build_task(es_cfg)
    assert "budget" in graph_refusal(es_cfg, cuda, 1, es_task.build_model(), es_task)
    asr_cfg = TrainConfig.from_dict({"task": "asr", "model": {}})
    assert "change shape" in graph_refusal(asr_cfg, cuda, 1, net, build_task(asr_cfg))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="records a CUDA graph: needs a GPU (run on a lent one)")
def test_recorded_cuda_run_follows_the_eager_run(sc_folder: Path, tmp_path: Path) -> None:
    eager = Trainer(_kws(sc_folder, amp="off"), tmp_path / "eager", device="cuda", progress=False)
    eager.fit()
    graphed = Trainer(_kws(sc_folder, amp="off", cuda_graphs=True), tmp_path / "graphed", device="cuda",
                      progress=False)  # fmt: skip
    graphed.fit()
    a, b = _log(tmp_path / "graphed"), _log(tmp_path / "eager")
    assert len(a) == len(b) == 8
    for (la, ga), (lb, gb) in zip(a, b, strict=True):
        assert la == pytest.approx(lb, rel=1e-3) and ga == pytest.approx(gb, rel=1e-2)
