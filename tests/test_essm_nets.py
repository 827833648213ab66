"""ES-SSM in whole networks: budgets at network level, training budgets, per-budget export, the
registry, the runtime's --budget and the budget sweep of edgessm eval (tiny random networks)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from conftest import random_chunks, randomize, rel_err

from edgessm.deploy.onnx_export import parallel_output, run_stream
from edgessm.nets import build_network
from edgessm.ssm import StreamSequential, run_chunked
from edgessm.ssm.essm import ElasticSpectralSSM, essm_layers, sample_train_budget
from edgessm.train.trainer import budget_generator, step_budget

# a raw-waveform frontend pooling to 1 kHz, then two ES-SSM blocks (L = 16 frames, K̄ = 8)
TINY_ES = {"channels": [4, 8, 8], "states": [4, 8, 8], "kinds": ["full", "essm", "essm"], "pools": [16, 1, 1],
           "essm_length": 16, "window": 12, "dropout": 0.0}  # fmt: skip
NON_ES = {"channels": [4, 8], "states": [4, 8], "kinds": ["full", "pointwise"], "pools": [4, 4], "window": 12,
          "dropout": 0.0}  # fmt: skip
LABELS = ["yes", "no", "_unknown_", "_silence_"]
CHUNK = 64


@pytest.fixture(autouse=True, scope="module")
def _private_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EDGESSM_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield


def _signal(n: int, seed: int = 0) -> np.ndarray:
    return (0.3 * np.random.default_rng(seed).normal(size=n)).astype(np.float32)


def _kws(seed: int = 1, **over) -> torch.nn.Module:
    torch.manual_seed(0)
    return randomize(build_network("kws", **{**TINY_ES, **over}, num_classes=len(LABELS)), seed=seed, dynamics=False)


def _package(net, folder: Path, config: dict, budgets: list[int] | None):
    from edgessm.deploy import package as pkg

    desc = {"network": "kws", "config": {**config, "num_classes": len(LABELS)}, "labels": LABELS}
    return pkg.package(net, desc, folder, folder.name, CHUNK, verify_audio=[_signal(CHUNK * 40, seed=3)],
                       budgets=budgets)  # fmt: skip


@pytest.fixture(scope="module")
def es_folder(tmp_path_factory):
    """A model folder of a tiny elastic keyword spotter exported at budgets 4 and K̄ = 8."""
    net = _kws().eval()
    folder = tmp_path_factory.mktemp("models") / "tiny-es"
    report, _ = _package(net, folder, TINY_ES, [4])
    return net, folder, report


@pytest.fixture(scope="module")
def plain_folder(tmp_path_factory):
    """A model folder of a keyword spotter without ES-SSM layers."""
    torch.manual_seed(0)
    net = randomize(build_network("kws", **NON_ES, num_classes=len(LABELS)), seed=2, dynamics=False).eval()
    folder = tmp_path_factory.mktemp("models") / "tiny"
    _package(net, folder, NON_ES, None)
    return folder


# --- networks ---------------------------------------------------------------------------------------------------


def test_essm_is_a_block_kind_with_config_options() -> None:
    from edgessm.ssm import BLOCK_KINDS, CentaurusBlock, make_ssm

    assert "essm" in BLOCK_KINDS
    layer = make_ssm("essm", 3, 5, 8, length=16, mode="fir", gate=False, budget_dropout=False)
    assert isinstance(layer, ElasticSpectralSSM) and (layer.h_in, layer.h_out, layer.k_max) == (3, 5, 8)
    assert layer.gate_in is None and layer.budget_dropout is None
    with pytest.raises(ValueError, match="essm"):
        make_ssm("nope", 3, 5, 8)
    block = CentaurusBlock("essm", 4, 4, 8, length=16, budget_dropout={"p_full": 0.5, "snap": [2, 4, 8]})
    assert block.ssm.budget_dropout.p_full == 0.5 and block.ssm.budget_dropout.snap == (2, 4, 8)
    net = _kws(essm_gate=False, essm_budget_dropout=False, essm_mode="lds")
    layers = essm_layers(net)
    assert len(layers) == 2 and all(m.mode == "lds" and not m.use_gate and m.budget_dropout is None for m in layers)
    assert not any("gate" in name for name in net.state_dict())
    assert _kws().k_max == 8 and build_network("kws", **NON_ES).k_max is None


@pytest.mark.parametrize("gate", [True, False])
def test_network_at_budget_k_equals_its_training_forward_at_k(gate: bool) -> None:
    net = _kws(essm_gate=gate)
    x = torch.randn(2, 1, 16 * 40)
    with torch.no_grad():
        for k in (2, 5, 8):
            net.train()
            assert sample_train_budget(net, lambda k_max, generator=None, k=k: k) == k  # one K_train per update
            y_train = net(x)
            assert [m.last_budget for m in essm_layers(net)] == [k, k]
            net.eval()
            net.set_budget(k)
            assert net.budget == k and torch.equal(net(x), y_train)
        y8 = net(x)
        net.set_budget(4)
        assert not torch.allclose(net(x), y8)  # the budget changes the function
        # streaming at a budget equals the parallel forward at that budget
        net.budget = 3
        y, _ = run_chunked(net, x, [16 * s for s in random_chunks(40, seed=2, high=9)])
        assert rel_err(y, net.frame_logits(x)) < 1e-4
    with pytest.raises(ValueError, match=r"budget must be in \[1, 8\]"):
        net.set_budget(9)
    with pytest.raises(ValueError, match="ES-SSM models only"):
        build_network("kws", **NON_ES).set_budget(2)
    counts = {}
    for k in (2, 8):
        net.budget = k
        counts[k] = net.counts()
    assert counts[2].params < counts[8].params and counts[2].flops < counts[8].flops


def test_denoiser_takes_essm_blocks_and_bottleneck() -> None:
    torch.manual_seed(0)
    cfg = {"channels": [4, 8], "states": [4, 8], "kinds": ["full", "essm"], "pools": [4, 4], "bottleneck_states": 8,
           "n_bottleneck": 1, "bottleneck_kind": "essm", "essm_length": 16}  # fmt: skip
    net = randomize(build_network("denoise", **cfg), seed=5, dynamics=False)
    assert len(essm_layers(net)) == 3 and net.k_max == 8
    x = torch.randn(1, 1, 16 * 30)
    with torch.no_grad():
        net.train()
        sample_train_budget(net, lambda k_max, generator=None: 3)
        y_train = net(x)
        net.eval()
        net.budget = 3
        assert torch.equal(net(x), y_train)
        y, _ = run_chunked(net, x, [16 * s for s in random_chunks(30, seed=6, high=6)])
        assert rel_err(y, net(x)) < 1e-4


def test_denoise_command_runs_an_elastic_denoiser_at_the_chosen_budget(tmp_path, capsys) -> None:
    """``edgessm denoise --budget K`` streams the folder's budget-K graph: the file equals the PyTorch
    network at budget K (and differs from the full budget)."""
    from edgessm.cli import main
    from edgessm.data.audio import load_audio, write_audio
    from edgessm.deploy import package as pkg

    cfg = {"channels": [4, 8], "states": [4, 8], "kinds": ["full", "essm"], "pools": [4, 4], "bottleneck_states": 8,
           "n_bottleneck": 1, "bottleneck_kind": "essm", "essm_length": 16}  # fmt: skip
    torch.manual_seed(0)
    net = randomize(build_network("denoise", **cfg), seed=5, dynamics=False).eval()
    folder = tmp_path / "tiny-dn-es"
    pkg.package(net, {"network": "denoise", "config": cfg}, folder, folder.name, 16 * 16,
                verify_audio=[_signal(16 * 16 * 8, seed=3)], budgets=[2])  # fmt: skip
    x = _signal(16 * 16 * 12 + 100, seed=4)  # not a whole number of chunks
    write_audio(tmp_path / "in.wav", x, 16000, subtype="FLOAT")
    outs = {}
    for k in (2, 8):
        out = tmp_path / f"out{k}.wav"
        assert main(["denoise", str(tmp_path / "in.wav"), str(out), "--model", str(folder), "--budget", str(k)]) == 0
        outs[k] = load_audio(out)[0]
        net.budget = k
        xp = torch.from_numpy(np.pad(x, (0, -len(x) % 256))).view(1, 1, -1)
        with torch.no_grad():
            ref = net(xp)[0, 0].numpy()[: len(x)]
        assert outs[k].shape == x.shape and np.abs(outs[k] - ref).max() < 1e-4
    assert np.abs(outs[2] - outs[8]).max() > 1e-3  # the budget changed the computation
    capsys.readouterr()
    with pytest.raises(SystemExit, match="no graph at budget 3"):
        main(["denoise", str(tmp_path / "in.wav"), str(tmp_path / "o3.wav"), "--model", str(folder), "--budget", "3"])
    assert not (tmp_path / "o3.wav").exists()


# --- training budgets -------------------------------------------------------------------------------------------


def test_training_budget_is_a_pure_function_of_seed_and_step() -> None:
    net = _kws()
    forward = [step_budget(net, 7, s, full_steps=3) for s in range(60)]
    backward = [step_budget(net, 7, s, full_steps=3) for s in reversed(range(60))][::-1]
    assert forward == backward  # no hidden state: any order, any process, any restart
    assert forward[:3] == [8, 8, 8]  # the full budget during the warmup
    assert set(forward) <= {2, 3, 4, 6, 8} and len(set(forward[3:])) >= 3
    other = [step_budget(net, 8, s, full_steps=3) for s in range(60)]
    assert forward != other
    assert all(m.train_budget == other[-1] for m in essm_layers(net))  # the last call set every layer
    assert budget_generator(1, 5).initial_seed() == budget_generator(1, 5).initial_seed()
    assert budget_generator(1, 5).initial_seed() != budget_generator(1, 6).initial_seed()
    # models without ES-SSM layers or without budget dropout: nothing sampled, the global RNG untouched
    rng = torch.get_rng_state()
    assert step_budget(build_network("kws", **NON_ES), 0, 10) is None
    assert step_budget(_kws(essm_budget_dropout=False), 0, 10) is None
    assert torch.equal(rng, torch.get_rng_state())


def test_trainer_logs_the_budget_of_each_update_and_resumes_exactly(tmp_path: Path) -> None:
    import csv

    from fixtures import speech_commands_folder

    from edgessm.train.config import TrainConfig
    from edgessm.train.trainer import Trainer

    folder = speech_commands_folder(tmp_path / "sc", speakers=4)

    def config() -> TrainConfig:
        return TrainConfig.from_dict({
            "task": "kws", "model": {**TINY_ES, "window": 8},
            "data": {"words": "sc10", "sources": [f"speech_commands:{folder}"], "clip_samples": 2048},
            "optim": {"lr": 0.01, "warmup": 0.25},
            "train": {"steps": 8, "batch_size": 4, "eval_every": 100, "checkpoint_every": 100, "log_every": 1,
                      "workers": 0, "seed": 3},
        })  # fmt: skip

    full = Trainer(config(), tmp_path / "a", device="cpu", progress=False)
    full.fit()
    with open(tmp_path / "a" / "log.csv") as f:
        logged = [int(float(r["budget"])) for r in csv.DictReader(f) if r.get("budget")]
    assert logged == [step_budget(full.model, 3, s, full_steps=2) for s in range(8)]
    part = Trainer(config(), tmp_path / "b", device="cpu", progress=False)
    part.fit(stop_after=4)
    resumed = Trainer(config(), tmp_path / "b", device="cpu", progress=False, resume=True)
    resumed.fit()
    for (name, a), (_, b) in zip(full.model.state_dict().items(), resumed.model.state_dict().items(), strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-5), name


def test_shipped_elastic_recipe_mixes_time_only_through_essm_blocks() -> None:
    from edgessm.train.config import load_config
    from edgessm.train.tasks import build_task

    cfg = load_config("kws_es")
    base = load_config("kws")
    es, kws = cfg.to_dict(), base.to_dict()
    assert es["task"] == kws["task"] and es["optim"] == kws["optim"]
    # kws35-es trained on kws35 v2's data recipe; kws (v3) only adds to it (real sentences, babble,
    # speed perturbation, noise kinds): every kws_es data/augment value is kws's, its sources a subset
    for section in ("data", "augment"):
        for key, value in es[section].items():
            if key == "sources":
                assert set(value) < set(kws[section][key])
            else:
                assert kws[section][key] == value, (section, key)
    net = build_task(cfg).build_model()
    assert net.k_max == 32 and net.stride == 320 and all(m.length == 64 for m in essm_layers(net))
    assert set(cfg.model["kinds"]) == {"essm"}  # the budget then sets the whole network's sequence mixing
    full = net.counts()
    assert 150_000 < full.params < 300_000 and 40e6 < full.flops * 16000 < 100e6
    net.budget = 8  # about kws35's compute
    assert net.counts().flops * 16000 < 30e6
    net.budget = 2
    assert net.counts().flops < 0.25 * full.flops
    ablations = {"model.essm_gate=false": "use_gate", "model.essm_budget_dropout=false": "budget_dropout"}
    for override, check in ablations.items():
        ablation = build_task(load_config("kws_es", [override])).build_model()
        assert all(not getattr(m, check) for m in essm_layers(ablation))


# --- export, registry, runtime -------------------------------------------------------------------------------------


def test_graphs_at_budget_4_and_full_budget_match_pytorch(es_folder) -> None:
    import onnxruntime as ort

    net, folder, report = es_folder
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["k_max"] == 8 and manifest["budgets"] == {"4": "tiny-es.k4.onnx", "8": "tiny-es.onnx"}
    assert {"tiny-es.onnx", "tiny-es.k4.onnx"} <= set(manifest["files"])
    assert report.max_abs_error < 1e-4 and report.budgets[4].max_abs_error < 1e-4
    x = _signal(CHUNK * 50, seed=11)
    outs = {}
    for k, name in ((4, "tiny-es.k4.onnx"), (8, "tiny-es.onnx")):
        meta = {p.key: p.value for p in onnx.load(str(folder / name)).metadata_props}
        assert meta["budget"] == str(k) and meta["k_max"] == "8"
        session = ort.InferenceSession(str(folder / name), providers=["CPUExecutionProvider"])
        outs[k] = run_stream(session, x, CHUNK)
        net.budget = k
        with torch.no_grad():
            ref = parallel_output(net.eval(), torch.from_numpy(x).view(1, 1, -1)).numpy()
        assert np.abs(outs[k] - ref).max() < 1e-4
    assert np.abs(outs[4] - outs[8]).max() > 1e-3
    assert int(report.budgets[4].metadata["params"]) < int(report.metadata["params"])
    assert net.budget == 8  # package leaves the model at K̄


def test_budget_graphs_resolve_by_name(es_folder, plain_folder, monkeypatch) -> None:
    from edgessm.runtime import registry

    _, folder, _ = es_folder
    monkeypatch.setattr(registry, "MODELS_DIR", folder.parent)
    assert registry.resolve_graph("tiny-es") == folder / "tiny-es.onnx"
    assert registry.resolve_graph("tiny-es", budget=4) == folder / "tiny-es.k4.onnx"
    assert registry.resolve_graph("tiny-es", budget="8") == folder / "tiny-es.onnx"
    assert registry.resolve_graph(folder, budget=4) == folder / "tiny-es.k4.onnx"  # a folder path
    assert registry.resolve_graph(folder / "tiny-es.onnx", budget=4) == folder / "tiny-es.k4.onnx"  # a sibling
    assert registry.budget_graphs("tiny-es") == {4: folder / "tiny-es.k4.onnx", 8: folder / "tiny-es.onnx"}
    with pytest.raises(FileNotFoundError, match=r"no graph at budget 3 \(exported budgets: 4, 8\).*--budget 3"):
        registry.resolve_graph("tiny-es", budget=3)
    with pytest.raises(ValueError, match="whole number"):
        registry.resolve_graph("tiny-es", budget="0.5")
    monkeypatch.setattr(registry, "MODELS_DIR", plain_folder.parent)
    with pytest.raises(ValueError, match="--budget applies to ES-SSM models only; tiny has no compute budgets"):
        registry.resolve_graph("tiny", budget=4)
    assert registry.parse_budgets("all", 8) == [2, 3, 4, 6, 8] and registry.parse_budgets("all", 12)[-1] == 12
    assert registry.parse_budgets("8,2", 8) == [2, 8]
    with pytest.raises(ValueError, match="above the model's K̄ = 8"):
        registry.parse_budgets("2,16", 8)


def _mock_clips(tmp_path: Path, monkeypatch) -> None:
    """A few synthetic clips stand in for every clip set (no shared data needed, seconds to run)."""
    from edgessm.data.audio import write_audio
    from edgessm.data.manifest import Clip
    from edgessm.eval import kws

    clips = []
    for i, word in enumerate(["yes", "no", "bed", "yes", "_silence_"]):
        path = tmp_path / "clips" / f"{i}.wav"
        write_audio(path, _signal(12000, seed=i), 16000)
        clips.append((Clip(str(path)), word))
    monkeypatch.setattr(kws, "clip_set", lambda name: clips)


def test_runtime_commands_take_a_budget(es_folder, tmp_path, monkeypatch, capsys) -> None:
    from edgessm.cli import main
    from edgessm.data.audio import write_audio

    _, folder, _ = es_folder
    _mock_clips(tmp_path, monkeypatch)
    write_audio(tmp_path / "in.wav", _signal(16000), 16000)
    listen = ["listen", "--input", str(tmp_path / "in.wav"), "--fast", "--quiet"]
    assert main([*listen, "--model", str(folder), "--budget", "4"]) == 0
    assert main([*listen, "--model", str(folder / "tiny-es.k4.onnx"), "--budget", "4"]) == 0
    with pytest.raises(SystemExit, match="no graph at budget 2"):
        main([*listen, "--model", str(folder), "--budget", "2"])
    assert main(["eval", str(folder), "--budget", "4", "--sets", "sc-test", "--no-progress"]) == 0
    assert main(["bench", str(folder), "--budget", "4", "--seconds", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "tiny-es.k4.onnx" in out and "tiny-es.onnx " not in out


def test_graphs_without_budgets_refuse_one_clearly(plain_folder, tmp_path, capsys) -> None:
    from edgessm.cli import main
    from edgessm.data.audio import write_audio

    write_audio(tmp_path / "in.wav", _signal(8000), 16000)
    message = "--budget applies to ES-SSM models only"
    graph = str(plain_folder / "tiny.onnx")
    for argv in (
        ["listen", "--model", str(plain_folder), "--input", str(tmp_path / "in.wav"), "--fast", "--budget", "4"],
        ["listen", "--model", graph, "--input", str(tmp_path / "in.wav"), "--fast", "--budget", "4"],
        ["eval", graph, "--budget", "4", "--sets", "sc-test"],
        ["eval", str(plain_folder), "--budget-sweep"],
        ["bench", graph, "--budget", "4", "--seconds", "0.5"],
        ["bench", str(plain_folder), "--budget", "all", "--seconds", "0.5"],
        ["export", str(plain_folder), "--out", str(tmp_path / "x"), "--budget", "4"],
    ):
        with pytest.raises(SystemExit, match=message):
            main(argv)
    assert not (tmp_path / "x").exists()


def test_eval_budget_sweep_writes_the_table_and_plot(es_folder, tmp_path, monkeypatch, capsys) -> None:
    from edgessm.cli import main

    _, folder, _ = es_folder
    _mock_clips(tmp_path, monkeypatch)
    out = tmp_path / "report"
    argv = ["eval", str(folder), "--budget-sweep", "--rtf-seconds", "0.3", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert "| K | params | MFLOP/s | state (floats) | RTF (1 thread) | SC test 12-class | SC test exact |" in table
    rows = json.loads((out / "report.json").read_text())["budget_sweep"]["rows"]
    assert [r["budget"] for r in rows] == [4, 8] and all(r["clips"]["sc-test"]["clips"] == 5 for r in rows)
    assert all(0 < r["rtf"] < 10 for r in rows) and rows[0]["mflops_per_s"] < rows[1]["mflops_per_s"]
    assert all(len(r["rtf_rounds"]) == 3 and r["rtf"] == sorted(r["rtf_rounds"])[1] for r in rows)  # median round
    assert (out / "report.md").read_text().startswith("| K |")
    assert (out / "budget_sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # ablations side by side on the same clips, and a subset of budgets
    import shutil

    other = shutil.copytree(folder, tmp_path / "tiny-es-nogate")
    argv = ["eval", str(folder), "--budget-sweep", "--budgets", "4", "--compare", str(other), "--rtf-seconds", "0"]
    assert main(argv) == 0
    both = capsys.readouterr().out
    assert "| model | K |" in both and "| tiny-es | 4 |" in both and "| tiny-es-nogate | 4 |" in both
    assert "RTF" not in both  # speed not measured: no speed column (nor an empty speed panel)
    assert "| 8 |" not in both
    argv = ["eval", str(folder), "--budget-sweep", "--budgets", "4", "--compare", f"ablation={other}", "--rtf-seconds",
            "0"]  # fmt: skip
    assert main(argv) == 0
    assert "| ablation | 4 |" in capsys.readouterr().out  # NAME=MODEL names a row
    with pytest.raises(SystemExit, match="no graph at budget 2"):
        main(["eval", str(folder), "--budget-sweep", "--budgets", "2,4"])


def test_runtime_budget_helpers_stay_torch_free(es_folder) -> None:
    import subprocess

    _, folder, _ = es_folder
    code = (
        "import sys\n"
        "from edgessm.runtime.registry import resolve_graph\n"
        "from edgessm.eval import budget\n"
        f"assert resolve_graph({str(folder)!r}, budget=4).name == 'tiny-es.k4.onnx'\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_layer_stack_budget_helpers() -> None:
    net = StreamSequential(ElasticSpectralSSM(2, 2, length=16, k_max=8), ElasticSpectralSSM(2, 2, length=16, k_max=4))
    from edgessm.ssm import set_budget

    set_budget(net, 6)
    assert [m.budget for m in net.layers] == [6, 4]  # clamped to each layer's K̄
