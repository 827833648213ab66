"""Denoiser evaluation: the test mixtures (held out from training), mixing, peer alignment, the report."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy as np
import pytest
from fixtures import shared_or_standin, skip_without_shared

from edgessm.data.corpora import shared_read_speech
from edgessm.data.manifest import assign_split
from edgessm.eval import denoise
from edgessm.eval.peers import Peer, estimate_delay

RECIPE = Path(__file__).resolve().parents[1] / "edgessm" / "train" / "configs" / "denoise.toml"


@pytest.fixture
def shared(tmp_path_factory, monkeypatch) -> Path:
    """The shared recordings the evaluation mixes, or a small stand-in on a machine without them."""
    return shared_or_standin(tmp_path_factory, monkeypatch, "real_read_speech", "speech_commands_background_noise")


def _speech(seconds: float = 3.0) -> np.ndarray:
    """A speech-like test signal: a harmonic tone with a syllable-rate envelope."""
    t = np.arange(int(seconds * 16000)) / 16000
    f0 = 140 + 30 * np.sin(2 * np.pi * 0.7 * t)
    x = sum(np.sin(2 * np.pi * k * np.cumsum(f0) / 16000) / k for k in range(1, 12))
    return (0.1 * x * (0.5 + 0.5 * np.sin(2 * np.pi * 4 * t) ** 2)).astype(np.float32)


def test_mix_sets_snr_and_level():
    rng = np.random.default_rng(0)
    clean, noise = _speech(), rng.standard_normal(48000).astype(np.float32)
    for snr in (-5.0, 0.0, 15.0):
        c, noisy = denoise.mix(clean, noise, snr, level_dbfs=-25.0)
        got = 10 * np.log10(np.mean(c.astype(np.float64) ** 2) / np.mean((noisy - c).astype(np.float64) ** 2))
        assert got == pytest.approx(snr, abs=0.05)
        assert 20 * np.log10(np.sqrt(np.mean(noisy.astype(np.float64) ** 2))) == pytest.approx(-25.0, abs=0.05)


def test_estimate_delay_finds_a_known_lag():
    x = _speech(1.0)
    assert estimate_delay(lambda s: np.concatenate([np.zeros(37, np.float32), s]), x) == 37
    assert estimate_delay(lambda s: 0.5 * s, x) == 0


def test_test_speakers_are_never_trained_or_validated_on():
    skip_without_shared("real_read_speech")  # a property of the real recordings and the recipe's split
    data = tomllib.loads(RECIPE.read_text())["data"]
    val_pct, test_pct = data.get("validation_pct", 10.0), data["test_pct"]
    test = set(denoise.speakers_of("test", val_pct, test_pct))
    assert len(test) >= 15
    trained = {c.speaker for c in shared_read_speech() if assign_split(c, val_pct, test_pct) != "test"}
    assert not test & trained
    assert "dude_miaowing.wav" in data["test_noise_holdout"]
    assert not set(data["test_noise_holdout"]) & set(data["val_noise_holdout"])


def test_mixtures_cover_every_noise_and_snr_and_are_reproducible(shared):
    a = denoise.mixtures("test", per_speaker=1, seed=3)
    b = denoise.mixtures("test", per_speaker=1, seed=3)
    assert [m.name for m in a] == [m.name for m in b]
    assert all(np.array_equal(x.noisy, y.noisy) for x, y in zip(a, b, strict=True))
    assert {m.noise for m in a} == set(denoise.NOISE_KINDS)
    assert {m.snr_db for m in a} == set(denoise.SNRS_DB)
    for m in a:
        assert m.clean.shape == m.noisy.shape and np.isfinite(m.noisy).all() and np.abs(m.noisy).max() < 1


def test_validation_mixtures_use_no_test_speaker_and_no_test_noise(shared, monkeypatch):
    val = denoise.mixtures("validation", per_speaker=1, seed=3)
    test_speakers = set(denoise.speakers_of("test"))
    assert val and not {m.speaker for m in val} & test_speakers
    assert {m.speaker for m in val} == set(denoise.speakers_of("validation"))
    read = []
    real_noise = denoise._real_noise
    monkeypatch.setattr(denoise, "_real_noise", lambda name: read.append(name) or real_noise(name))
    denoise.mixtures("validation", per_speaker=1, seed=3)
    assert read == ["running_tap"]  # the test-only recording is not even read
    with pytest.raises(ValueError, match="'test' or 'validation'"):
        denoise.speakers_of("train")


def test_a_soundscape_joins_recordings_at_one_level_to_the_length_asked() -> None:
    rng = np.random.default_rng(0)
    short = np.full(3000, 0.5, np.float32)  # loud and short
    long = np.random.default_rng(1).standard_normal(20000).astype(np.float32) * 0.01
    silent = np.zeros(4000, np.float32)
    x = denoise._soundscape([short, long, silent], 50000, rng)
    assert x.shape == (50000,) and np.isfinite(x).all()
    frames = x[: len(x) // 1000 * 1000].reshape(-1, 1000)
    rms = np.sqrt((frames**2).mean(axis=1))
    assert np.allclose(rms[rms > 0], 1.0, rtol=0.35)  # every piece at one level, no silent stretch
    assert (rms > 0.5).all()
    with pytest.raises(ValueError, match="silent"):
        denoise._soundscape([silent], 100, rng)


def test_unknown_noise_kinds_are_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown noise kind.*traffic.*everyday"):
        denoise.mixtures("test", kinds=["pink", "traffic"])
    with pytest.raises(ValueError, match="none given"):
        denoise.mixtures("test", kinds=[])


def test_everyday_mixtures_use_the_ambience_recordings_of_their_split(shared, monkeypatch) -> None:
    asked = []
    sound = np.random.default_rng(2).standard_normal(8000).astype(np.float32)
    monkeypatch.setattr(denoise, "_split_ambience", lambda split: asked.append(split) or [sound])
    default = denoise.mixtures("validation", per_speaker=1, seed=3)
    assert asked == []  # the default kinds leave the ambience alone: earlier reports' mixtures stay as they were
    mixed = denoise.mixtures("validation", per_speaker=1, seed=3, kinds=["everyday", "white"])
    assert asked == ["validation"]
    assert [m.noise for m in mixed[:4]] == ["everyday", "white", "everyday", "white"]
    assert [m.speaker for m in mixed] == [m.speaker for m in default]
    for m in mixed:
        assert m.clean.shape == m.noisy.shape and np.isfinite(m.noisy).all() and np.abs(m.noisy).max() < 1


def test_everyday_mixtures_without_the_packages_say_how_to_install_them(monkeypatch) -> None:
    from edgessm.data import ambience
    from edgessm.data.corpora import CorpusError

    def missing(split):
        raise CorpusError("no recorded everyday noise installed: run make ambience")

    monkeypatch.setattr(ambience, "ambience_files", missing)
    with pytest.raises(FileNotFoundError, match=r"everyday.*make ambience"):
        denoise._split_ambience("test")


@pytest.mark.parametrize("key", ["rnnoise", "dfn3"])
def test_peer_output_is_time_aligned(key):
    from fixtures import DEMOS

    from edgessm.data.audio import load_audio

    probe = load_audio(DEMOS / "keywords.wav", 16000)[0][: 6 * 16000]  # real words, 30 dB over quiet noise
    peer = Peer(key, probe)
    assert 0 < peer.delay < 1600  # frame delay plus lookahead, under 100 ms
    y = peer(probe)
    assert y.shape == probe.shape
    # clean speech passes a denoiser largely intact and, once aligned, in phase with the input
    corr = float(y @ probe) / (np.linalg.norm(y) * np.linalg.norm(probe))
    assert corr > 0.8


def test_eval_cli_scores_a_denoiser_graph(tmp_path, capsys, shared):
    import torch
    from test_denoise_cli import TINY  # the tiny random denoiser the CLI tests use

    from edgessm.cli import main
    from edgessm.deploy.onnx_export import export_onnx
    from edgessm.nets import build_network

    torch.manual_seed(0)
    graph = tmp_path / "tiny.onnx"
    export_onnx(build_network("denoise", **TINY).eval(), graph, 256, {"task": "denoise", "model_name": "tiny"})
    out = tmp_path / "report"
    assert main(["eval", str(graph), "--peers", "rnnoise", "--limit", "3", "--out", str(out), "--no-progress"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["mixtures"] == 3 and set(report["systems"]) == {"noisy", "tiny", "RNNoise"}
    noisy = report["systems"]["noisy"]["mean"]
    assert noisy["si_sdr_i"] == pytest.approx(0.0, abs=1e-6)  # the input against itself improves nothing
    for s in report["systems"].values():
        assert 1.0 <= s["mean"]["pesq"] <= 4.7 and 0.0 <= s["mean"]["stoi"] <= 1.0
    assert report["systems"]["tiny"]["rtf"] > 0 and report["systems"]["tiny"]["latency_ms"] == pytest.approx(16.0)
    md = (out / "report.md").read_text()
    assert "| RNNoise |" in md and "Ratios of tiny" in md
    assert (out / "denoise_metrics.png").stat().st_size > 1000
    with pytest.raises(SystemExit, match="one test set"):
        main(["eval", str(graph), "--sets", "sc-test"])
    # tuning runs: more denoisers in the same run, on mixtures of the validation speakers and noises
    torch.manual_seed(1)
    other = tmp_path / "other.onnx"
    export_onnx(build_network("denoise", **TINY).eval(), other, 256, {"task": "denoise", "model_name": "other"})
    argv = ["eval", str(graph), "--mixtures", "validation", "--compare", str(other), "--peers", "none", "--limit",
            "2", "--out", str(tmp_path / "val"), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    val = json.loads((tmp_path / "val" / "report.json").read_text())
    assert val["split"] == "validation" and set(val["systems"]) == {"noisy", "tiny", "other"}
    assert val["systems"]["tiny"]["mean"]["si_sdr"] != val["systems"]["other"]["mean"]["si_sdr"]
    assert "**validation** speakers" in (tmp_path / "val" / "report.md").read_text()
    with pytest.raises(SystemExit, match="two systems named 'tiny'; name one: --compare NAME="):
        main(["eval", str(graph), "--compare", str(graph), "--peers", "none", "--limit", "1"])
    # NAME=MODEL names a system: a release against the same graph re-exported under the same name
    argv = ["eval", str(graph), "--compare", f"release={graph}", "--peers", "none", "--limit", "1",
            "--out", str(tmp_path / "named"), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    named = json.loads((tmp_path / "named" / "report.json").read_text())["systems"]
    assert set(named) == {"noisy", "tiny", "release"}
    assert named["tiny"]["mean"]["si_sdr"] == pytest.approx(named["release"]["mean"]["si_sdr"])


def test_compare_items_take_an_optional_name(tmp_path) -> None:
    from edgessm.eval.cli import compare_name

    assert compare_name("v2=models/denoise") == ("v2", "models/denoise")
    assert compare_name("models/denoise") == (None, "models/denoise")
    assert compare_name("runs/a=b/model") == (None, "runs/a=b/model")  # a path's own '=' names nothing
    odd = tmp_path / "x=y"
    odd.mkdir()
    assert compare_name(str(odd)) == (None, str(odd))  # an existing path is a path
    assert compare_name("=models/denoise") == (None, "=models/denoise")


def test_eval_of_a_model_folder_scores_its_int8_graph_in_the_same_run(tmp_path, monkeypatch, shared) -> None:
    import torch
    from test_denoise_cli import TINY

    from edgessm.cli import main
    from edgessm.deploy import package as pkg
    from edgessm.nets import build_network

    monkeypatch.setattr(pkg, "shared_data_dir", lambda required=False: None)  # skip the exporter's quality run
    torch.manual_seed(0)
    net = build_network("denoise", **TINY).eval()
    calib = [np.random.default_rng(s).normal(0, 0.1, 256 * 40).astype(np.float32) for s in range(2)]
    pkg.package(net, {"network": "denoise", "config": TINY}, tmp_path / "dn", "dn", 256, int8=True, calibration=calib)
    out = tmp_path / "report"
    assert (
        main(["eval", str(tmp_path / "dn"), "--peers", "none", "--limit", "2", "--out", str(out), "--no-progress"]) == 0
    )
    report = json.loads((out / "report.json").read_text())
    assert set(report["systems"]) == {"noisy", "dn", "dn int8"}
    a, b = report["systems"]["dn"]["mean"], report["systems"]["dn int8"]["mean"]
    assert a["si_sdr"] != b["si_sdr"] and abs(a["si_sdr"] - b["si_sdr"]) < 3.0  # two graphs, close results
    assert "| dn int8 |" in (out / "report.md").read_text()


def test_oracle_system_applies_the_ideal_mask_time_aligned() -> None:
    """`--peers oracle`: the ideal mask of the shipped layout, computed from the mixture's clean speech,
    removes most of the noise and returns the input's length, aligned (exponent 1 removes more noise)."""
    from edgessm.eval.metrics import si_sdr

    rng = np.random.default_rng(1)
    clean = _speech(2.0)
    c, noisy = denoise.mix(clean, rng.standard_normal(32000).astype(np.float32), 0.0, level_dbfs=-25.0)
    m = denoise.Mixture("m", "s", "white", 0.0, c, noisy)
    out = {e: denoise.oracle_system([m], exponent=e)(noisy) for e in (0.5, 1.0)}
    for y in out.values():
        assert y.shape == noisy.shape and y.dtype == np.float32
        assert si_sdr(y, c) > si_sdr(noisy, c) + 8.0  # aligned: a shift of one hop would score far lower
    residual = {e: float(np.mean((y - c) ** 2)) for e, y in out.items()}
    assert np.mean(out[1.0] ** 2) < np.mean(out[0.5] ** 2)  # the Wiener gain removes more
    assert min(residual.values()) < 0.1 * float(np.mean((noisy - c) ** 2))
    with pytest.raises(KeyError):
        denoise.oracle_system([m])(noisy[::-1].copy())  # it only knows its own mixtures


def test_phone_music_mixtures_carry_the_music_tracks_through_a_phone_line(shared, monkeypatch) -> None:
    """``music-phone`` mixes the same kind of track as ``music``, band-limited to the phone band; a run without
    it draws the music exactly as before."""
    from edgessm.data.augment import phone_line

    tracks = [np.random.default_rng(k).standard_normal(40000).astype(np.float32) for k in range(40)]
    asked = []

    def split_music(mixtures, rng, split, n_kinds):
        asked.append((mixtures, n_kinds))
        return list(tracks)

    monkeypatch.setattr(denoise, "_split_music", split_music)
    denoise.mixtures("validation", per_speaker=1, seed=3, kinds=["music", "white"])
    n = len(denoise.speakers_of("validation"))
    assert asked == [(n, 2)]  # as many tracks as before the phone kind existed
    mixed = denoise.mixtures("validation", per_speaker=1, seed=3, kinds=["music-phone", "white"])
    phone = [m for m in mixed if m.noise == "music-phone"]
    assert phone and asked[-1] == (n, 2)
    for m in phone:
        noise = (m.noisy - m.clean).astype(np.float64)
        spec = np.abs(np.fft.rfft(noise)) ** 2
        f = np.fft.rfftfreq(len(noise), 1 / 16000)
        assert spec[f > 5000].sum() < 1e-3 * spec[(f > 400) & (f < 3000)].sum()  # nothing above the phone band
        assert spec[f < 100].sum() < 1e-2 * spec[(f > 400) & (f < 3000)].sum()
    x = tracks[0]
    y = phone_line(x)
    assert y.shape == x.shape and y.dtype == np.float32
    assert np.isclose(
        np.sqrt(np.mean(y.astype(np.float64) ** 2)), np.sqrt(np.mean(x.astype(np.float64) ** 2)), rtol=1e-3
    )


def test_a_report_names_its_graph_as_the_working_folder_does(tmp_path, monkeypatch) -> None:
    from edgessm.eval.cli import _shown

    (tmp_path / "models").mkdir()
    monkeypatch.chdir(tmp_path)
    assert _shown(tmp_path / "models" / "x.onnx") == "models/x.onnx"  # committed beside a model: no machine's path
    assert _shown(Path("models/x.onnx")) == "models/x.onnx"
    outside = tmp_path.parent / "elsewhere.onnx"
    assert _shown(outside) == str(outside.resolve())


def test_pause_residual_measures_what_is_left_where_the_speech_is_silent() -> None:
    from edgessm.eval.metrics import pause_residual_db

    rng = np.random.default_rng(0)
    t = np.arange(16000 * 3) / 16000
    talk = (t % 1.0) < 0.6  # 0.6 s of "speech", 0.4 s of silence, three times
    clean = np.where(talk, 0.1 * np.sin(2 * np.pi * 220 * t), 0.0).astype(np.float32)
    noise = rng.normal(size=t.size).astype(np.float32)
    noise *= 0.1 / np.sqrt(2) / np.sqrt(np.mean(noise**2)) * 10 ** (-30 / 20)  # 30 dB under the speech's power
    assert pause_residual_db(clean + noise, clean) == pytest.approx(-30.0, abs=0.5)
    assert pause_residual_db(clean + 0.1 * noise, clean) == pytest.approx(-50.0, abs=0.5)
    assert pause_residual_db(clean, clean) < -150  # digital silence in the pauses
    assert np.isnan(pause_residual_db(noise, noise))  # no pauses: nothing to say
