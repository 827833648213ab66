"""The SSM filterbank front end: band-pass filters on the ERB scale, log energies, exact streaming,
and the networks built on it (streaming, export)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import random_chunks, randomize, rel_err

from edgessm.nets import build_network
from edgessm.ssm import run_chunked
from edgessm.ssm.filterbank import GAIN, SHIFT, FilterbankFront


def test_each_band_is_a_band_pass_filter_on_the_erb_scale() -> None:
    fb = FilterbankFront(bands=24, states=2, pool=160)
    with torch.no_grad():
        response = torch.fft.rfft(fb.ssm.kernel(8192)[:, 0].double(), 16000).abs()  # 1 Hz bins
    peaks = response.argmax(-1).float()
    assert torch.all(peaks[1:] > peaks[:-1])  # one band per place, low to high
    assert peaks[0] < 120 and peaks[-1] > 6000
    erb_rate = 21.4 * torch.log10(1 + 0.00437 * peaks)
    steps = erb_rate[1:] - erb_rate[:-1]
    assert steps.std() / steps.mean() < 0.25  # evenly spaced on the ERB scale
    gains = response.max(-1).values
    assert gains.min() > 0.5 and gains.max() < 2.0  # every band near unit peak gain (its modes add in phase)


def test_a_tone_is_loudest_in_its_own_band_and_silence_is_finite() -> None:
    fb = FilterbankFront(bands=32, pool=160).eval()
    t = torch.arange(16000) / 16000
    with torch.no_grad():
        centres = torch.fft.rfft(fb.ssm.kernel(8192)[:, 0].double(), 16000).abs().argmax(-1)
        for hz in (300.0, 1000.0, 3000.0):
            z = fb(0.1 * torch.sin(2 * math.pi * hz * t)[None, None])  # (1, 32, 100)
            loudest = int(z[0, :, 50:].mean(-1).argmax())
            assert abs(float(centres[loudest]) - hz) / hz < 0.15
        quiet = fb(torch.zeros(1, 1, 1600))
    assert torch.allclose(quiet, torch.full_like(quiet, (math.log(fb.floor) - SHIFT) * GAIN))


def test_streaming_equals_forward_for_any_chunking() -> None:
    fb = randomize(FilterbankFront(bands=8, states=2, pool=40), seed=3).eval()
    x = torch.randn(2, 1, 40 * 50)
    with torch.no_grad():
        y, state = run_chunked(fb, x, [40 * s for s in random_chunks(50, seed=4, high=9)])
        assert y.shape == (2, 8, 50)
        assert rel_err(y, fb(x)) < 1e-4
    assert len(state) == len(fb.state_shapes()) == 1


def test_the_filters_and_the_normalisation_learn() -> None:
    fb = FilterbankFront(bands=6, pool=80)
    fb(torch.randn(2, 1, 800)).square().mean().backward()
    for name in ("ssm.E", "ssm.modes.a_im", "ssm.modes.a_log", "shift", "gain"):
        grad = dict(fb.named_parameters())[name].grad
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0, name


def test_bad_settings_are_refused_with_the_values() -> None:
    with pytest.raises(ValueError, match="bands, states and pool must be >= 1 and floor > 0"):
        FilterbankFront(bands=0)
    with pytest.raises(ValueError, match="floor > 0"):
        FilterbankFront(floor=0.0)
    with pytest.raises(ValueError, match="front must be one of waveform, filterbank"):
        build_network("asr", front="mel")


FRONT = {"front": "filterbank", "front_bands": 12, "front_pool": 80}
STAGES = {"channels": [16, 24], "states": [8, 16], "kinds": ["bottleneck", "pointwise"]}


@pytest.mark.parametrize("name", ["asr", "kws"])
def test_networks_on_the_filterbank_stream_like_forward(name: str) -> None:
    pools = [4, 1] if name == "asr" else [2, 2]
    net = randomize(build_network(name, **FRONT, **STAGES, pools=pools, dropout=0.0), seed=5).eval()
    assert net.stride == 80 * math.prod(pools)
    first = next(m for m in net.modules() if type(m).__name__ == "CentaurusBlock")
    assert first.h_in == 12 and first.skip  # the first block reads the bands, with a projected skip
    x = torch.randn(1, 1, net.stride * 12)
    with torch.no_grad():
        y, _ = run_chunked(net, x, [net.stride * s for s in random_chunks(12, seed=6, high=4)])
        ref = net.frame_logits(x) if name == "kws" else net(x)
        assert rel_err(y, ref) < 1e-4
    c = net.counts()
    assert 0.8 * sum(p.numel() for p in net.parameters()) < c.params <= sum(p.numel() for p in net.parameters())


def test_recognizer_on_the_filterbank_exports_exactly(tmp_path) -> None:
    from edgessm.deploy.onnx_export import NPU_FRIENDLY_OPS, export_onnx

    net = randomize(build_network("asr", **FRONT, **STAGES, pools=[4, 1]), seed=7)
    audio = (0.3 * np.random.default_rng(0).normal(size=320 * 20)).astype(np.float32)
    report = export_onnx(net, tmp_path / "a.onnx", 320, {"task": "asr"}, [audio])
    assert report.max_abs_error < 1e-4
    assert {"Log", "ReduceMean"} <= set(report.op_census) <= NPU_FRIENDLY_OPS


def test_training_convolves_only_the_filters_live_part_and_loses_nothing() -> None:
    from edgessm.ssm.fftconv import causal_conv

    fb = FilterbankFront(bands=16, pool=160).eval()
    x = torch.randn(1, 1, 16000)
    assert fb.ssm.modes.live_length(16000) < 4000  # ERB-wide resonators die out within a few thousand samples
    with torch.no_grad():
        full = causal_conv(x, fb.ssm.kernel(16000), "full")
        energy = torch.nn.functional.avg_pool1d(full * full, 160, 160)
        assert rel_err(fb(x), fb._compress(energy)) < 1e-5
        fb.ssm.modes.a_log.fill_(-30.0)  # a filter that rings (almost) forever: the whole input is needed
    assert fb.ssm.modes.live_length(16000) == 16000


def test_band_energy_has_the_gradients_of_convolving_then_squaring() -> None:
    """The front's fused energy (hand-written backward) against autograd through the FFT convolution and the
    mean of squares, and float64 gradcheck; the kernel gradient only, or the input's too."""
    from edgessm.ssm.fftconv import causal_conv
    from edgessm.ssm.filterbank import band_energy

    torch.manual_seed(0)
    x = torch.randn(3, 1, 160 * 7, dtype=torch.float64, requires_grad=True)
    k = torch.randn(5, 333, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: band_energy(a, b, 160), (x, k))
    for lk in (1, 900, 4800):  # a one-tap kernel, a short one, one as long as the input
        x = torch.randn(4, 1, 4800, requires_grad=True)
        k = (0.1 * torch.randn(6, lk)).requires_grad_()
        w = torch.randn(4, 6, 30)
        ref = causal_conv(x, k[:, None], "full")
        ref = ref.square().reshape(4, 6, 30, 160).mean(-1)
        got = band_energy(x, k, 160)
        assert rel_err(got.detach(), ref.detach()) < 1e-6
        grads = torch.autograd.grad((got * w).sum(), (x, k)), torch.autograd.grad((ref * w).sum(), (x, k))
        for a, b in zip(*grads, strict=True):
            assert rel_err(a, b) < 1e-5
    x.requires_grad_(False)
    (gk,) = torch.autograd.grad((band_energy(x, k, 160) * w).sum(), (k,))
    assert gk.shape == k.shape and torch.isfinite(gk).all()
    with torch.no_grad():  # nothing kept for a backward that cannot come
        assert band_energy(x, k, 160).grad_fn is None
    with pytest.raises(ValueError, match="whole number of 160-sample frames"):
        band_energy(x[..., :1000], k, 160)


@pytest.mark.parametrize(("states", "sub"), [(1, 40), (2, 32), (1, 160)])
def test_chunked_band_energy_is_the_fft_convolution(states: int, sub: int) -> None:
    """The chunked scan (Toeplitz product inside chunks, the modes' state carried between them) gives the FFT
    path's energies and gradients (input and every filter parameter), in float64 and float32."""
    from edgessm.ssm.filterbank import band_energy, chunked_band_energy

    torch.manual_seed(0)
    fb = randomize(FilterbankFront(bands=6, states=states, pool=160)).double()
    x = torch.randn(3, 1, 160 * 11, dtype=torch.float64, requires_grad=True)
    wr, wi, w = fb.ssm._weights()
    fft = band_energy(x, fb.ssm.kernel(x.shape[-1])[:, 0], 160)
    chunked = chunked_band_energy(x, wr[:, 0], wi[:, 0], w[:, 0], 160, sub)
    assert chunked.shape == fft.shape == (3, 6, 11)
    assert rel_err(chunked.detach(), fft.detach()) < 1e-12
    g = torch.randn_like(fft)
    params = [x, *fb.parameters()]
    for a, b in zip(torch.autograd.grad((fft * g).sum(), params, allow_unused=True),
                    torch.autograd.grad((chunked * g).sum(), params, allow_unused=True), strict=True):  # fmt: skip
        assert (a is None) == (b is None)
        if a is not None:
            assert rel_err(b, a) < 1e-10
    # float32 on a second of audio: the recursion over 400 chunks keeps float32 accuracy
    fb32, x32 = FilterbankFront(bands=40, pool=160), torch.randn(2, 1, 16000)
    with torch.no_grad():
        fb32.plan = "fft"
        ref = fb32(x32)
        fb32.plan = "chunked"
        assert rel_err(fb32(x32), ref) < 1e-5
        with torch.autocast("cpu", dtype=torch.bfloat16):  # a float32 island under autocast, as the FFT path
            assert rel_err(fb32(x32.bfloat16()).float(), ref) < 1e-2
    with pytest.raises(ValueError, match="pool of sub"):
        chunked_band_energy(x, wr[:, 0], wi[:, 0], w[:, 0], 160, 48)


def test_front_plan_is_fft_unless_asked_and_measured_once_per_shape(monkeypatch) -> None:
    from edgessm.ssm import filterbank

    fb = FilterbankFront(bands=4, pool=160)
    assert fb.choose_plan(2, 1600, torch.device("cpu")) == "fft"  # the default
    net = build_network("asr", **FRONT, **STAGES, pools=[4, 1])
    assert filterbank.set_front_plan(net, "chunked") == 1
    with pytest.raises(ValueError, match=r"train\.front_plan must be one of fft, chunked, measure"):
        filterbank.set_front_plan(net, "fast")
    timed = []

    def fake_timer(front, plan, batch, length, device):
        timed.append(plan)
        return {"fft": 2.0, "chunked": 1.0}[plan]

    monkeypatch.setattr(filterbank, "time_front", fake_timer)
    monkeypatch.setattr(filterbank, "MEASURED", {})
    fb.plan = "measure"
    assert fb.choose_plan(2, 1600, torch.device("cpu")) == "chunked"
    assert fb.choose_plan(2, 1600, torch.device("cpu")) == "chunked" and timed == ["fft", "chunked"]  # once per shape
    fb.plan = "chunked"
    x = torch.randn(2, 1, 1600)
    with torch.no_grad():
        chunked = fb(x)
        fb.plan = "fft"
        assert rel_err(chunked, fb(x)) < 1e-5
    fb.plan = "fast"
    with pytest.raises(ValueError, match="front's plan must be"):
        fb(x)
    # the real timer runs both plans forward and backward
    assert filterbank.time_front.__name__ == "fake_timer"
    monkeypatch.undo()
    assert 0 < filterbank.time_front(FilterbankFront(bands=4, pool=160), "chunked", 2, 1600, torch.device("cpu")) < 60
