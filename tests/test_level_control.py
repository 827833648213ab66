"""The input level control (edgessm.runtime.level): what it does to quiet, loud and steady input, that it is
causal and chunking-invariant, and that a graph asking for it gets it in process() and in its streams."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from edgessm.runtime.level import AgcConfig, LevelControl, apply_agc
from edgessm.runtime.session import StepModel

SR = 16000
MODELS = Path(__file__).resolve().parents[1] / "models"


def dbfs(x: np.ndarray) -> float:
    return 10 * np.log10(np.mean(np.square(x, dtype=np.float64)))


def bursts(level_db: float, room_db: float, seconds: float = 8.0, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """'Words' (0.5 s of noise at ``level_db`` dBFS) every 1.5 s over a steady room at ``room_db``; and the
    mask of the burst samples."""
    rng = np.random.default_rng(seed)
    n = int(seconds * SR)
    x = rng.standard_normal(n) * 10 ** (room_db / 20)
    mask = np.zeros(n, bool)
    for start in range(int(0.5 * SR), n - SR // 2, int(1.5 * SR)):
        mask[start : start + SR // 2] = True
    x[mask] = rng.standard_normal(mask.sum()) * 10 ** (level_db / 20)
    return x.astype(np.float32), mask


def test_quiet_words_are_raised_to_the_target_and_loud_ones_left_alone() -> None:
    cfg = AgcConfig()
    quiet, mask = bursts(-42.0, -75.0)
    y = apply_agc(quiet, cfg)
    late = mask.copy()
    late[: 3 * SR] = False  # after the first words
    # speech peaks (10 ms frames of the bursts) brought near the target, never past it by more than a dB
    assert cfg.target - 4 < dbfs(y[late]) < cfg.target + 1
    loud, _ = bursts(-12.0, -44.0)  # a room above the noise cap, words above the target
    assert np.allclose(apply_agc(loud, cfg), loud)  # louder than the target: gain 0, the same samples


def test_with_a_cut_loud_words_are_brought_down_to_the_target_by_at_most_the_cut() -> None:
    loud, mask = bursts(-10.0, -50.0)
    late = mask.copy()
    late[: 2 * SR] = False
    cfg = AgcConfig(max_cut=12.0)
    y = apply_agc(loud, cfg)
    assert cfg.target - 2 < dbfs(y[late]) < cfg.target + 1  # 10 dB down: peaks at the target
    very, mask = bursts(-3.0, -50.0)
    assert dbfs(apply_agc(very, cfg)[late]) == pytest.approx(dbfs(very[late]) - 12.0, abs=0.5)  # at most the cut
    quiet, _ = bursts(-42.0, -75.0)
    assert np.array_equal(apply_agc(quiet, cfg), apply_agc(quiet, AgcConfig()))  # quiet input: as without
    control, parts = LevelControl(cfg), []
    for i in range(0, len(loud), 333):
        parts.append(control.process(loud[i : i + 333]))
    assert np.array_equal(np.concatenate(parts), y)  # any chunking
    assert np.all(control.last_gain <= 1.0)
    # one loud word after quiet keeps its shape: the cut deepens by at most cut_db_s (6 dB/s, 3 dB in 0.5 s)
    word = np.concatenate([np.zeros(SR, np.float32), loud[mask][: SR // 2]])
    gains = 20 * np.log10(LevelControl(cfg).process(word)[SR:] / np.where(word[SR:] == 0, 1, word[SR:]))
    assert gains.min() > -3.2 and gains[: SR // 10].min() > -0.7


def test_the_room_is_not_pumped_up_and_the_gain_has_its_limits() -> None:
    cfg = AgcConfig()
    rng = np.random.default_rng(1)
    room = (rng.standard_normal(5 * SR) * 10 ** (-65 / 20)).astype(np.float32)
    assert np.array_equal(apply_agc(room), room)  # nothing stands out of a steady room: no gain at all
    quiet, mask = bursts(-42.0, -65.0)
    y = apply_agc(quiet)
    pauses = ~mask
    pauses[: 2 * SR] = False
    assert dbfs(y[pauses]) < cfg.noise_cap + 1.5  # between the raised words the room stays below the cap
    faint, mask = bursts(-80.0, -110.0)
    gain = dbfs(apply_agc(faint)[3 * SR :][mask[3 * SR :]]) - dbfs(faint[3 * SR :][mask[3 * SR :]])
    assert gain == pytest.approx(cfg.max_gain, abs=0.2)  # never more than max_gain
    assert not np.any(apply_agc(np.zeros(SR, np.float32)))  # digital silence stays silence


def test_any_chunking_gives_the_same_samples_and_no_sample_hears_the_future() -> None:
    x, _ = bursts(-40.0, -70.0, seconds=4.0)
    whole = apply_agc(x)
    rng = np.random.default_rng(2)
    control, parts, pos = LevelControl(), [], 0
    while pos < len(x):
        n = int(rng.integers(1, 900))
        parts.append(control.process(x[pos : pos + n]))
        pos += n
    assert np.array_equal(np.concatenate(parts), whole)
    cut = 2 * SR + 37
    changed = x.copy()
    changed[cut:] *= 30.0  # a loud future
    assert np.array_equal(apply_agc(changed)[:cut], whole[:cut])


def test_nothing_leaves_the_sample_range_after_a_loud_onset() -> None:
    quiet, _ = bursts(-50.0, -80.0, seconds=3.0)
    x = np.concatenate([quiet, np.full(SR // 10, 0.9, np.float32) * np.sign(np.sin(np.arange(SR // 10)))])
    y = apply_agc(x)
    assert np.max(np.abs(y)) <= 1.0
    assert np.max(np.abs(y[-SR // 20 :])) <= AgcConfig().ceiling + 1e-6  # a frame later the gain has come down


def test_settings_travel_as_json_and_bad_ones_are_refused() -> None:
    cfg = AgcConfig(target=-22.0, release_db_s=0.5)
    assert AgcConfig.from_json(cfg.to_json()) == cfg
    with pytest.raises(ValueError, match=r"input_agc metadata.*keys among"):
        AgcConfig.from_json(json.dumps({"target": -20, "loudness": 3}))
    with pytest.raises(ValueError, match="max_gain"):
        AgcConfig(max_gain=-1)
    with pytest.raises(ValueError, match="max_cut"):
        AgcConfig(max_cut=-3)
    assert AgcConfig.from_json(json.dumps({"target": -20})).max_cut == 0  # graphs exported before the cut: boost only
    with pytest.raises(ValueError, match="ceiling"):
        AgcConfig(ceiling=1.5)


def test_a_graph_that_asks_for_the_level_control_gets_it_in_process_and_streams(tmp_path) -> None:
    from edgessm.deploy.metadata import set_input_agc
    from edgessm.runtime.registry import verify_file

    folder = tmp_path / "kws35"
    shutil.copytree(MODELS / "kws35", folder, ignore=shutil.ignore_patterns("eval"))
    set_input_agc(folder, AgcConfig())
    for f in folder.glob("*.onnx"):
        verify_file(f)  # the manifest follows the rewritten graphs
    graph = folder / "kws35.onnx"
    model, raw = StepModel(graph), StepModel(graph, agc=False)
    assert model.agc == AgcConfig() and raw.agc is None
    x, _ = bursts(-45.0, -70.0, seconds=3.0)
    out = model.process(x)
    assert np.allclose(out, raw.process(apply_agc(x)), atol=1e-6)
    assert not np.allclose(out, raw.process(x), atol=1e-3)  # the control changed what the graph heard
    stream, pos, outs, heard = model.create_stream(), 0, [], []
    for n in np.random.default_rng(3).integers(100, 3000, 100):
        stream.accept_waveform(SR, x[pos : pos + n])
        pos += int(n)
        for y, chunk in stream.chunks():
            outs.append(y)
            heard.append(chunk)
        if pos >= len(x):
            break
    stream.flush()
    for y, chunk in stream.chunks():
        outs.append(y)
        heard.append(chunk)
    assert np.allclose(np.concatenate(outs, axis=-1), out, atol=1e-5)
    # each output comes with the audio as received (what the contrast gate measures, as eval does)
    assert np.array_equal(np.concatenate(heard)[: len(x)], x)
    set_input_agc(folder, None)
    assert StepModel(graph).agc is None


def test_the_command_line_choice_overrules_the_graph() -> None:
    from edgessm.runtime.level import resolve_agc

    mine = AgcConfig(target=-26.0)
    assert resolve_agc("graph", mine) is mine and resolve_agc(True, None) is None
    assert resolve_agc("off", mine) is None and resolve_agc(False, mine) is None
    assert resolve_agc("on", mine) is mine and resolve_agc("on", None) == AgcConfig()  # the defaults when none
    assert resolve_agc(AgcConfig(max_gain=6.0), mine) == AgcConfig(max_gain=6.0)
    with pytest.raises(ValueError, match="--agc is one of graph, on, off"):
        resolve_agc("loud", mine)
    shipped = StepModel(MODELS / "kws35" / "kws35.onnx")
    assert shipped.agc is not None  # the shipped keyword spotter asks for it
    assert StepModel(MODELS / "kws35" / "kws35.onnx", agc="off").agc is None


def test_a_denoiser_with_the_level_control_hears_raised_input_and_gives_back_the_inputs_level(tmp_path) -> None:
    from edgessm.deploy.metadata import main as metadata_main
    from edgessm.runtime.denoise import Denoiser
    from edgessm.runtime.level import DENOISER

    folder = tmp_path / "denoise"
    shutil.copytree(MODELS / "denoise", folder, ignore=shutil.ignore_patterns("eval"))
    assert metadata_main([str(folder), "--agc", "off"]) == 0
    assert StepModel(folder / "denoise.onnx").agc is None
    assert metadata_main([str(folder), "--agc", "on", "--agc-cut", "6"]) == 0
    assert StepModel(folder / "denoise.onnx").agc.max_cut == 6.0
    with pytest.raises(SystemExit):
        metadata_main([str(folder), "--agc", "off", "--agc-cut", "6"])  # a cut needs the control
    assert metadata_main([str(folder), "--agc", "on"]) == 0  # the task's settings: a denoiser's
    graph = folder / "denoise.onnx"
    model, raw = StepModel(graph), StepModel(graph, agc=False)
    assert model.agc == DENOISER
    x, _ = bursts(-48.0, -62.0, seconds=3.0)  # a quiet recording

    def run(m: StepModel, audio: np.ndarray, block: int) -> np.ndarray:
        d = Denoiser(m, SR, 1)
        parts = [d.feed(audio[None, i : i + block]) for i in range(0, len(audio), block)]
        return np.concatenate([*parts, d.finish()], axis=1)[0]

    y = run(model, x, 1000)
    assert y.shape == x.shape
    assert np.allclose(run(model, x, 357), y, atol=1e-6)  # any block size
    control = LevelControl(DENOISER)
    raised = control.process(x)
    assert dbfs(raised[SR:]) > dbfs(x[SR:]) + 10  # the graph heard it louder ...
    heard = run(raw, raised, 1000)
    expected = heard / control.last_gain  # ... and the output was divided by the same gains
    assert np.allclose(y, expected, atol=1e-5)
    # the input's level, not the raised one's: no louder than the input, the raise taken back from what the
    # graph gave (how much of these noise bursts the denoiser removes at either level is the model's business)
    assert dbfs(y[SR:]) < dbfs(x[SR:]) + 1.0
    assert dbfs(heard[SR:]) - dbfs(y[SR:]) > 10.0


def test_listen_says_when_it_raised_a_quiet_input(tmp_path, capsys) -> None:
    from edgessm.cli import main
    from edgessm.data.audio import write_audio

    quiet, _ = bursts(-50.0, -75.0, seconds=4.0)
    write_audio(tmp_path / "quiet.wav", quiet, SR)
    assert main(["listen", "--model", str(MODELS / "kws35"), "--input", str(tmp_path / "quiet.wav"), "--fast"]) == 0
    assert "quiet input raised by up to 2" in capsys.readouterr().err  # 20-24 dB: the most it gives
    assert main(["listen", "--model", str(MODELS / "kws35"), "--input", str(tmp_path / "quiet.wav"), "--fast",
                 "--agc", "off"]) == 0  # fmt: skip
    assert "raised" not in capsys.readouterr().err
