"""The spectral-mask denoiser (``arch = "spectral"``): exact streaming, perfect reconstruction at unit
gains, its one-hop delay through export, ``edgessm denoise`` and training."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import randomize

from edgessm.nets import SpectralDenoiser, build_network
from edgessm.ssm.stream import run_chunked

SMALL = {"arch": "spectral", "hop": 32, "bands": 8, "fine_bins": 4, "channels": [8, 8], "states": [4, 4],
         "kinds": ["bottleneck", "pointwise"]}  # fmt: skip


def _net(seed: int = 1, **over) -> SpectralDenoiser:
    torch.manual_seed(0)
    return randomize(build_network("denoise", **{**SMALL, **over}), seed=seed, dynamics=False).eval()


def test_arch_picks_the_network_and_unknown_ones_are_refused() -> None:
    assert isinstance(build_network("denoise", **SMALL), SpectralDenoiser)
    assert type(build_network("denoise", channels=[4, 8], states=[4, 4], kinds=["full", "pointwise"],
                              pools=[4, 4], bottleneck_states=8, n_bottleneck=1)).__name__ == "Hourglass"  # fmt: skip
    with pytest.raises(ValueError, match="unknown denoise arch 'unet'; choose one of hourglass, spectral"):
        build_network("denoise", arch="unet")
    with pytest.raises(ValueError, match="fine_bins must be in"):
        build_network("denoise", **{**SMALL, "fine_bins": 40})


@pytest.mark.parametrize(
    "over",
    [
        {},
        {"pre_conv": 4, "dt_min": 0.01, "dt_max": 1.0},
        {"df_order": 3, "df_bins": 6},
        {"df_order": 1},
        {"df_order": 3, "df_bins": 6, "df_gated": True},
    ],
)
def test_stream_equals_parallel_for_any_chunking(over: dict) -> None:
    net = _net(**over)
    if net.df_head is not None:  # switched on: a one-frame step gathers the filter's taps, longer inputs reshape
        with torch.no_grad():
            for conv in (net.df_head, net.df_in):
                conv.weight.normal_(0.0, 0.2)
    x = 0.1 * torch.randn(2, 1, 32 * 60)
    with torch.no_grad():
        y = net(x)
        for sizes in ([32] * 60, [32 * k for k in (7, 1, 20, 2, 30)], [32 * 60]):
            ys, _ = run_chunked(net, x, sizes)
            assert (ys - y).abs().max() < 1e-5 * y.abs().max()  # float32 round-off (the phase advances divide)
    assert y.abs().max() > 1e-3  # not silence


def test_unit_gains_reconstruct_the_input_one_hop_late() -> None:
    net = _net()
    with torch.no_grad():
        net.head.weight.zero_()
        net.head.bias.fill_(40.0)  # sigmoid(40) = 1 in float32
        x = 0.2 * torch.randn(1, 1, 32 * 40)
        y = net(x)
    assert net.delay == 32
    assert y[..., :32].abs().max() < 1e-6  # before the input: nothing
    assert (y[..., 32:] - x[..., :-32]).abs().max() < 1e-5


def test_gains_are_in_the_unit_interval_and_attenuate() -> None:
    net = _net()
    with torch.no_grad():
        net.head.bias.fill_(-40.0)  # gains 0: silence out
        net.head.weight.zero_()
        assert net(0.3 * torch.randn(1, 1, 32 * 20)).abs().max() < 1e-6
    cfg = build_network("denoise", arch="spectral")
    assert torch.sigmoid(torch.tensor(cfg.cfg.gain_bias)) > 0.9  # a new network starts near the identity


def test_export_and_the_denoise_command_compensate_the_delay(tmp_path) -> None:
    """The graph carries ``delay_samples``; ``edgessm denoise`` drops it, so the file is aligned with its
    input: out[t] = net(x)[t + hop], to the last sample, at 16 kHz and through resampling."""
    import soundfile as sf
    import soxr

    from edgessm.cli import main
    from edgessm.deploy.onnx_export import export_onnx
    from edgessm.runtime.session import StepModel

    net = _net()
    path = tmp_path / "spec.onnx"
    export_onnx(net, path, 64, {"task": "denoise"})
    info = StepModel(path).info
    assert info.delay_samples == 32 and info.latency_samples == 64 + 32
    x = (0.1 * np.random.default_rng(0).normal(size=64 * 30 + 17)).astype(np.float32)
    sf.write(tmp_path / "in.wav", x, 16000, subtype="FLOAT")
    assert main(["denoise", str(tmp_path / "in.wav"), str(tmp_path / "out.wav"), "--model", str(path)]) == 0
    y, rate = sf.read(tmp_path / "out.wav", dtype="float32")
    padded = np.concatenate([x, np.zeros(-(len(x) + 32) % 64 + 32, np.float32)])
    with torch.no_grad():
        ref = net(torch.from_numpy(padded).view(1, 1, -1))[0, 0].numpy()[32 : 32 + len(x)]
    assert rate == 16000 and y.shape == x.shape
    assert np.abs(y - ref).max() < 1e-4
    # at 44.1 kHz the same network runs between two resamplers, still aligned with the input
    x44 = soxr.resample(x, 16000, 44100, quality="HQ")
    sf.write(tmp_path / "in44.wav", x44, 44100, subtype="FLOAT")
    assert main(["denoise", str(tmp_path / "in44.wav"), str(tmp_path / "out44.wav"), "--model", str(path)]) == 0
    y44, _ = sf.read(tmp_path / "out44.wav", dtype="float32")
    back = soxr.resample(y44, 44100, 16000, quality="HQ")[: len(ref)]
    n = min(len(back), len(ref)) - 200
    lag = np.argmax(np.correlate(back[200:n], ref[200 - 8 : n + 8], mode="valid")) - 8
    assert y44.shape == x44.shape and lag == 0


def test_training_loss_compares_each_output_with_the_input_it_stands_for() -> None:
    """A network at the identity (unit gains) scores a perfect SI-SDR against the clean target when the
    target is the input: the task aligns output t with target t - delay."""
    from edgessm.train.losses import si_sdr
    from edgessm.train.tasks import _aligned

    net = _net()
    with torch.no_grad():
        net.head.weight.zero_()
        net.head.bias.fill_(40.0)
        x = 0.2 * torch.randn(2, 1, 32 * 30)
        est, ref = _aligned(net, net(x), x)
    assert est.shape[-1] == ref.shape[-1] == 32 * 29
    assert si_sdr(est[:, 0], ref[:, 0]).min() > 80


def test_multires_loss_scores_magnitudes_not_phase() -> None:
    """Zero for the reference itself, positive for a quieter copy, and (magnitude term only) blind to a
    sign flip, which only the complex term sees."""
    from edgessm.train.losses import multires_spectral_loss

    ref = 0.1 * torch.randn(2, 4096)
    assert float(multires_spectral_loss(ref, ref)) == pytest.approx(0.0, abs=1e-10)
    assert float(multires_spectral_loss(0.5 * ref, ref)) > 1e-4
    assert float(multires_spectral_loss(-ref, ref)) == pytest.approx(0.0, abs=1e-10)
    assert float(multires_spectral_loss(-ref, ref, complex_weight=1.0)) > 1e-3
    est = (0.5 * ref).requires_grad_()
    multires_spectral_loss(est, ref, ffts=(256,)).backward()
    assert torch.isfinite(est.grad).all() and est.grad.abs().sum() > 0


def test_oracle_gains_are_the_ideal_ratio_mask_at_the_networks_resolution() -> None:
    net = _net()
    t = torch.arange(32 * 40) / 16000
    speech = (0.3 * torch.sin(2 * torch.pi * 500 * t))[None, None]  # one fine bin (500 Hz at 50 Hz bins)
    noise = 0.3 * torch.sin(2 * torch.pi * 3000 * t)[None, None]  # one ERB band above the fine bins
    target, valid = net.oracle_gains(speech + noise, speech)
    assert target.shape == valid.shape == (1, 40, net.cfg.bands + net.cfg.fine_bins)
    frames = slice(2, None)  # past the first frame, which starts from silence
    fine_500 = net.cfg.bands + round(500 / (16000 / net.n_fft))
    assert target[0, frames, fine_500].min() > 0.99  # speech alone: keep
    band = int(torch.argmax(net.band_power[round(3000 / (16000 / net.n_fft))]))
    assert target[0, frames, band].max() < 0.05  # noise alone: remove
    same, has = net.oracle_gains(speech, speech)  # no noise at all: keep everything that has signal
    assert torch.allclose(same[has > 0], torch.ones(()))
    silent, ok = net.oracle_gains(torch.zeros_like(speech), torch.zeros_like(speech))
    assert ok.sum() == 0 and torch.isfinite(silent).all()
    wiener, _ = net.oracle_gains(0.5 * noise + speech, speech, exponent=1.0)  # (S / (S + N)) ** 1
    amplitude, _ = net.oracle_gains(0.5 * noise + speech, speech)
    assert torch.allclose(wiener, amplitude**2, atol=1e-6)


def test_forward_with_gains_returns_the_gains_the_output_was_made_with() -> None:
    net = _net()
    x = 0.1 * torch.randn(2, 1, 32 * 12)
    with torch.no_grad():
        y, g = net(x, with_gains=True)
        assert torch.equal(y, net(x))
        assert g.shape == (2, 12, net.cfg.bands + net.cfg.fine_bins) and (g >= 0).all() and (g <= 1).all()
        net.head.weight.zero_()
        net.head.bias.fill_(-40.0)  # all gains ~0: silence out
        assert net(x).abs().max() < 1e-9


def test_deep_filter_reads_earlier_frames_of_its_bins_only() -> None:
    """With every gain at 0 and the filter fixed to ``d_{t,1} = 1`` (one frame back), the enhanced spectrum
    is the previous frame in the deep-filter bins and silence above them; it starts switched off."""
    fresh = build_network("denoise", **{**SMALL, "df_order": 2, "df_bins": 5})
    assert fresh.df_head.weight.abs().max() == 0 and fresh.df_head.bias.abs().max() == 0
    net = _net(df_order=2, df_bins=5)
    f, bins = 5, net.bins
    with torch.no_grad():
        net.head.weight.zero_()
        net.head.bias.fill_(-40.0)
        net.df_head.weight.zero_()
        net.df_head.bias.zero_()
        net.df_head.bias[2 * f : 3 * f] = 20.0  # channels [k][re, im][bin]: k = 1, real part, tanh(20) = 1
        x = 0.2 * torch.randn(1, 1, 32 * 12)
        _, out = net(x, with_spectra=True)
        spec = net.spectra(x)
    low = torch.cat([out[..., :f], out[..., bins : bins + f]], -1)
    earlier = torch.cat([spec[..., :f], spec[..., bins : bins + f]], -1)
    assert (low[:, 1:] - earlier[:, :-1]).abs().max() < 1e-5 and low[:, 0].abs().max() < 1e-6
    assert out[..., f:bins].abs().max() < 1e-6 and out[..., bins + f :].abs().max() < 1e-6


def test_a_deep_filter_added_to_a_trained_denoiser_starts_as_that_denoiser() -> None:
    """Every tensor of the network without a deep filter fits the one with it (`train --init-partial`); the
    new ones (the phase-advance projection and the coefficient head) start at zero, so the output is the
    same until training moves them."""
    plain = _net(pre_conv=4)
    grown = build_network("denoise", **{**SMALL, "pre_conv": 4, "df_order": 3, "df_bins": 4}).eval()
    missing, unexpected = grown.load_state_dict(plain.state_dict(), strict=False)
    assert sorted(missing) == ["df_head.bias", "df_head.weight", "df_in.bias", "df_in.weight"] and not unexpected
    x = 0.1 * torch.randn(2, 1, 32 * 30)
    with torch.no_grad():
        assert torch.equal(grown(x), plain(x))


def test_a_deep_filter_grown_to_more_bins_starts_as_the_smaller_one() -> None:
    """``adapt_weights`` lays a trained deep filter's projection and head out for more bins (zeros for the new
    ones): the grown network's output equals the smaller one's, streamed or not, and then its new bins can move."""
    small = _net(pre_conv=4, df_order=3, df_bins=4)
    with torch.no_grad():  # a trained filter: every weight of it non-zero
        for conv in (small.df_head, small.df_in):
            conv.weight.normal_(0, 0.3)
            conv.bias.normal_(0, 0.3)
    big = build_network("denoise", **{**SMALL, "pre_conv": 4, "df_order": 3, "df_bins": 7}).eval()
    weights = big.adapt_weights(small.state_dict())
    big.load_state_dict(weights)  # strict: every tensor fits
    x = 0.1 * torch.randn(2, 1, 32 * 30)
    with torch.no_grad():
        assert torch.allclose(big(x), small(x), atol=1e-6)
        y, _ = run_chunked(big, x, [32, 96, 320, 32 * 30 - 448])
        assert torch.allclose(y, small(x), atol=1e-6)
    assert big.adapt_weights(weights) is weights  # already this size: unchanged
    with torch.no_grad():
        big.df_head.bias.normal_()  # the new bins take part once trained
        assert not torch.allclose(big(x), small(x), atol=1e-4)
    assert small.adapt_weights(weights) is weights  # a larger filter is not shrunk (--init-partial drops it)


def test_phase_advance_feature_follows_a_tone() -> None:
    """A tone at the centre of bin k advances by π k per hop (hop = half the DFT): cos = (-1)^k, sin = 0."""
    net = _net(df_order=2, df_bins=8)
    k, n_fft = 3, net.n_fft
    t = torch.arange(32 * 20, dtype=torch.float32)
    x = (0.3 * torch.cos(2 * torch.pi * k * t / n_fft)).view(1, 1, -1)
    with torch.no_grad():
        spec = net.spectra(x)
        low = torch.cat([torch.zeros(1, net.df_past, 16), net._low(spec)], dim=1)
        feats = net._phasors(net._windows(low))  # (1, m, 2 F)
    assert torch.allclose(feats[0, 2:, k], torch.full_like(feats[0, 2:, k], -1.0), atol=1e-3)
    assert feats[0, 2:, 8 + k].abs().max() < 1e-3


@pytest.mark.parametrize("gated", [False, True])
def test_deep_filter_exports_exactly(tmp_path, gated: bool) -> None:
    from edgessm.deploy.onnx_export import export_onnx

    net = _net(df_order=3, df_bins=6, df_gated=gated)
    x = (0.1 * np.random.default_rng(1).normal(size=64 * 40)).astype(np.float32)
    report = export_onnx(net, tmp_path / "df.onnx", 64, {"task": "denoise"}, [x])
    assert report.max_abs_error < 1e-4 and not report.unfriendly_ops


def test_a_gated_deep_filter_keeps_no_more_of_a_bin_than_its_gain() -> None:
    """Ungated, the filter's sum of noisy frames reaches the output even where the gains remove everything;
    gated (``df_gated``), ``Y = g (X + Σ d X)``: zero gains are silence, unit gains the ungated output."""
    x = 0.1 * torch.randn(1, 1, 32 * 30, generator=torch.Generator().manual_seed(3))
    out = {}
    for gated in (False, True):
        net = _net(df_order=3, df_bins=4, df_gated=gated)
        with torch.no_grad():
            net.df_head.weight.normal_(0.0, 0.3, generator=torch.Generator().manual_seed(4))
            net.head.weight.zero_()
            for bias, name in ((-40.0, "shut"), (40.0, "open")):  # sigmoid: every gain 0 or 1
                net.head.bias.fill_(bias)
                out[gated, name] = net(x)
            net.df_head.weight.zero_()
            out[gated, "no filter"] = net(x)  # gains still open
    assert float(out[False, "shut"].abs().max()) > 1e-3  # the filter alone still passes noise
    assert float(out[True, "shut"].abs().max()) < 1e-9
    torch.testing.assert_close(out[True, "open"], out[False, "open"])
    assert float((out[True, "open"] - out[True, "no filter"]).abs().max()) > 1e-3  # the filter does act


def test_deep_filter_loss_sees_phase_and_level() -> None:
    from edgessm.train.tasks import _compressed_error

    torch.manual_seed(0)
    ref = torch.randn(2, 10, 2 * 17)
    scale = torch.ones(2, 1, 1)
    assert float(_compressed_error(ref, ref, 17, 5, scale, 0.3)) < 1e-12
    assert float(_compressed_error(-ref, ref, 17, 5, scale, 0.3)) > 0.1  # a sign flip: the same magnitudes
    assert float(_compressed_error(0.5 * ref, ref, 17, 5, scale, 0.3)) > 0.01
    above = ref.clone()
    above[..., 5:17] = 0  # bins above the filter's are not its business
    above[..., 17 + 5 :] = 0
    assert float(_compressed_error(above, ref, 17, 5, scale, 0.3)) < 1e-12


def test_without_its_own_loss_the_deep_filter_learns_from_the_waveform_loss() -> None:
    """`data.df_weight = 0` (denoise v6): no compressed-spectrum term, yet the coefficient head, zero at the
    start, gets a gradient from the waveform loss, and a step along it lowers that loss."""
    from edgessm.train.config import TrainConfig
    from edgessm.train.tasks import DenoiseTask

    data = {"mask_weight": 4.0, "df_weight": 0.0, "wave_weight": 0.1, "spectral_weight": 0.0}
    task = DenoiseTask(TrainConfig.from_dict({"task": "denoise", "model": {}, "data": data}))
    torch.manual_seed(0)
    # eval(): no dropout draw between the two losses
    net = build_network("denoise", **{**SMALL, "pre_conv": 4, "df_order": 3, "df_bins": 4}).eval()
    t = torch.arange(32 * 40, dtype=torch.float32)
    clean = (0.2 * torch.sin(2 * torch.pi * 0.02 * t) * torch.sin(2 * torch.pi * 0.001 * t)).view(1, 1, -1)
    batch = {"clean": clean.repeat(2, 1, 1), "noisy": clean.repeat(2, 1, 1) + 0.05 * torch.randn(2, 1, t.numel())}
    loss, parts = task.loss(net, batch, 0.5)
    assert "df" not in parts
    loss.backward()
    grad = net.df_head.weight.grad
    assert grad is not None and float(grad.abs().sum()) > 0
    with torch.no_grad():
        net.df_head.weight -= 0.01 * grad / grad.norm()
    after, _ = task.loss(net, batch, 0.5)
    assert float(after.detach()) < float(loss.detach())
