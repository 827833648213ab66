"""The spectrogram front (edgessm.nets.spectrogram) and the front transplant (edgessm.train.front_fit)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import random_chunks, randomize, rel_err

from edgessm.dsp import erb_triangles
from edgessm.nets import build_network
from edgessm.nets.spectrogram import SpectrogramFront
from edgessm.ssm import run_chunked
from edgessm.ssm.filterbank import GAIN, SHIFT
from edgessm.train.front_fit import fit_front, front_of, transplant


def test_bands_are_erb_spaced_triangles_that_each_see_a_bin() -> None:
    w = erb_triangles(40, 256, 16000.0, 50.0, 7200.0)
    assert torch.allclose(w.sum(-1), torch.ones(40))
    assert (w > 0).sum(-1).min() >= 1  # the narrow low bands still cover a bin
    centres = (w * torch.arange(w.shape[-1])).sum(-1)
    assert torch.all(centres[1:] >= centres[:-1]) and centres[-1] * 16000 / 256 > 6500


def test_a_tone_is_loudest_in_its_own_band_and_silence_is_the_floor() -> None:
    front = SpectrogramFront(bands=32).eval()
    w = erb_triangles(32, 256, 16000.0, 50.0, 7200.0)
    centre_hz = (w * torch.arange(w.shape[-1])).sum(-1) * 16000 / 256
    t = torch.arange(16000) / 16000
    with torch.no_grad():
        for hz in (300.0, 1000.0, 3000.0):
            z = front(0.1 * torch.sin(2 * math.pi * hz * t)[None, None])  # (1, 32, 100)
            loudest = int(z[0, :, 10:].mean(-1).argmax())
            assert abs(float(centre_hz[loudest]) - hz) / hz < 0.15
        quiet = front(torch.zeros(1, 1, 1600))
    assert torch.allclose(quiet, torch.full_like(quiet, (math.log(front.floor) - SHIFT) * GAIN))


def test_white_noise_starts_near_unit_band_energy() -> None:
    front = SpectrogramFront().eval()
    with torch.no_grad():
        energy, _ = front._energies(torch.randn(4, 1, 32000), torch.zeros(4, 1, 96))
    assert 0.7 < float(energy[:, 2:].mean()) < 1.3


@pytest.mark.parametrize("window", [160, 256, 320])
def test_streaming_equals_forward_for_any_chunking(window: int) -> None:
    front = SpectrogramFront(bands=12, pool=160, window=window).eval()
    with torch.no_grad():
        front.root.mul_(1 + 0.3 * torch.rand_like(front.root))
    x = torch.randn(2, 1, 160 * 40)
    with torch.no_grad():
        y, state = run_chunked(front, x, [160 * s for s in random_chunks(40, seed=4, high=9)])
        assert y.shape == (2, 12, 40)
        assert rel_err(y, front(x)) < 1e-5
    assert len(state) == len(front.state_shapes()) == (window > 160)
    with torch.no_grad():
        empty, kept = front.step(x[..., :0], state)
    assert empty.shape == (2, 12, 0) and all(torch.equal(a, b) for a, b in zip(kept, state, strict=True))


def test_a_frame_is_the_window_that_ends_at_its_hop() -> None:
    """Frame m reads samples pool (m + 1) - window .. pool (m + 1) - 1: an impulse shows up in exactly the
    frames whose window holds it (the filterbank front's frame times, causal)."""
    front = SpectrogramFront(bands=8, pool=160, window=256).eval()
    x = torch.zeros(1, 1, 1600)
    x[0, 0, 700] = 1.0
    with torch.no_grad():
        z = front(x)[0].mean(0)
    loud = torch.nonzero(z > z.min() + 1.0).flatten().tolist()
    assert loud == [m for m in range(10) if 160 * (m + 1) - 256 <= 700 < 160 * (m + 1)]


def test_the_band_weights_and_the_normalisation_learn() -> None:
    front = SpectrogramFront(bands=6, pool=80, window=128)
    front(torch.randn(2, 1, 800)).square().mean().backward()
    for name in ("root", "shift", "gain"):
        grad = dict(front.named_parameters())[name].grad
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0, name


def test_bad_settings_are_refused_with_the_values() -> None:
    with pytest.raises(ValueError, match=r"between pool and 2 pool \(160\.\.320 samples\), got 400"):
        SpectrogramFront(window=400)
    with pytest.raises(ValueError, match="even"):
        SpectrogramFront(window=255)
    with pytest.raises(ValueError, match="f_min < f_max"):
        SpectrogramFront(f_min=9000.0)


KWS = {"channels": [16, 24], "states": [8, 8], "kinds": ["essm", "essm"], "pools": [2, 1], "essm_length": 16,
       "window": 10, "num_classes": 5, "dropout": 0.0}  # fmt: skip


def test_a_keyword_spotter_on_the_spectrogram_streams_and_exports_exactly(tmp_path) -> None:
    from edgessm.deploy.onnx_export import NPU_FRIENDLY_OPS, export_onnx

    net = randomize(build_network("kws", front="spectrogram", front_bands=12, front_window=256, **KWS), seed=5)
    net.eval()
    assert net.stride == 320
    x = torch.randn(1, 1, 320 * 12)
    with torch.no_grad():
        y, _ = run_chunked(net, x, [320 * s for s in random_chunks(12, seed=6, high=4)])
        assert rel_err(y, net.frame_logits(x)) < 1e-4
    audio = (0.3 * np.random.default_rng(0).normal(size=320 * 20)).astype(np.float32)
    report = export_onnx(net, tmp_path / "k.onnx", 1280, {"task": "kws"}, [audio])
    assert report.max_abs_error < 1e-4
    assert "Log" in report.op_census and set(report.op_census) <= NPU_FRIENDLY_OPS


def test_a_transplant_keeps_the_blocks_and_fitting_brings_the_new_front_to_the_old_features() -> None:
    torch.manual_seed(0)
    old = build_network("kws", front="filterbank", front_bands=12, **KWS).eval()
    new = build_network("kws", front="spectrogram", front_bands=12, front_window=256, **KWS)
    fresh = transplant(old, new)
    assert fresh == ["backbone.layers.0.gain", "backbone.layers.0.root", "backbone.layers.0.shift"]
    theirs = old.state_dict()
    for k, v in new.state_dict().items():
        if k not in fresh:
            assert torch.equal(v, theirs[k]), k
    g = torch.Generator().manual_seed(1)
    batches = (torch.randn(4, 1, 3200, generator=g) * torch.rand(4, 1, 1, generator=g) for _ in range(120))
    losses = fit_front(front_of(new), front_of(old), batches, steps=120, lr=0.02, log_every=0)
    assert np.mean(losses[-10:]) < 0.25 * np.mean(losses[:5])
    with pytest.raises(ValueError, match="differ beyond their fronts"):
        transplant(old, build_network("kws", front="spectrogram", front_bands=12, **{**KWS, "channels": [16, 32]}))


def test_a_recogniser_moves_to_the_spectrogram_front_too() -> None:
    """A recogniser keeps its front as its encoder's first layer: the transplant finds it there, copies the rest
    and leaves the new front's tensors to fit; a network without a front is refused."""
    torch.manual_seed(0)
    stages = {"channels": [16, 24], "states": [8, 16], "kinds": ["bottleneck", "pointwise"], "pools": [4, 1]}
    old = build_network("asr", front="filterbank", front_bands=12, front_pool=80, **stages).eval()
    new = build_network("asr", front="spectrogram", front_bands=12, front_pool=80, front_window=160, **stages)
    fresh = transplant(old, new)
    assert fresh == ["encoder.layers.0.gain", "encoder.layers.0.root", "encoder.layers.0.shift"]
    assert front_of(new) is new.encoder.layers[0]
    theirs = old.state_dict()
    assert all(torch.equal(v, theirs[k]) for k, v in new.state_dict().items() if k not in fresh)
    x = torch.randn(2, 1, 3200) * 0.1
    with torch.no_grad():
        assert front_of(new)(x).shape == front_of(old)(x).shape
    with pytest.raises(ValueError, match="no front to replace"):
        front_of(build_network("asr", front="waveform", **stages))
