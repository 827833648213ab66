"""Waveform augmentation: SNR and level arithmetic, noise sources, reverb, filters, masking, pipelines."""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf
from scipy import signal

from edgessm.data import rir as rir_mod
from edgessm.data.augment import (
    DenoiseAugment,
    DenoiseAugmentConfig,
    KwsAugment,
    KwsAugmentConfig,
    NoiseSourceConfig,
    SpecMaskConfig,
    add_noise,
    apply_gain,
    band_limit,
    build_clip_augment,
    build_denoise_mixer,
    butterworth_sos,
    config_from_dict,
    level_dbfs,
    mix_at,
    mix_for_denoising,
    peaking_eq,
    random_mic_response,
    random_shift,
    random_spec_mask,
    shift,
    snr_db,
    spec_mask,
)
from edgessm.data.corpora import shared_data_dir
from edgessm.data.noise import COLORS, NoiseBank, babble, colored_noise
from edgessm.data.rir import (
    RirBank,
    RoomSimConfig,
    direct_path_index,
    reverb,
    reverb_pair,
    rt60_schroeder,
)

SR = 16000


def speechlike(seed: int, seconds: float = 1.0) -> np.ndarray:
    """Amplitude-modulated, low-passed noise with pauses: a cheap stand-in for speech."""
    rng = np.random.default_rng(seed)
    n = int(seconds * SR)
    x = signal.sosfilt(signal.butter(2, [200, 3500], "bandpass", fs=SR, output="sos"), rng.standard_normal(n))
    envelope = np.clip(np.sin(2 * np.pi * 3.0 * np.arange(n) / SR + rng.uniform(0, 6)), 0, None)
    return (0.1 * x * envelope).astype(np.float32)


def synthetic_rir(pre: int = 100, seconds: float = 0.4, rt60: float = 0.4, seed: int = 0) -> np.ndarray:
    """Zeros, a unit direct path, then an exponentially decaying noise tail (known RT60)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SR)) / SR
    tail = 0.3 * rng.standard_normal(t.size) * 10.0 ** (-3.0 * t / rt60)  # -60 dB after rt60 s
    h = np.concatenate([np.zeros(pre), [1.0], tail[1:]])
    return h.astype(np.float32)


def welch_db(x: np.ndarray, nperseg: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    f, p = signal.welch(x, fs=SR, nperseg=nperseg)
    return f, 10 * np.log10(p + 1e-30)


def band_mean(f: np.ndarray, p_db: np.ndarray, lo: float, hi: float) -> float:
    return float(p_db[(f >= lo) & (f <= hi)].mean())


@pytest.fixture(scope="module")
def small_sources() -> tuple[NoiseBank, RirBank, list[np.ndarray]]:
    rng = np.random.default_rng(123)
    bank = NoiseBank({"hum": 0.05 * np.sin(np.arange(3 * SR) * 0.05), "hiss": 0.02 * rng.standard_normal(SR // 3)})
    rirs = RirBank([synthetic_rir(40, rt60=0.3, seed=1), synthetic_rir(60, rt60=0.6, seed=2)])
    speech = [speechlike(s, 0.7) for s in range(4)]
    return bank, rirs, speech


# --- shift, gain, SNR, mixing ----------------------------------------------------------------------


def test_shift_zero_fill_and_circular() -> None:
    x = np.arange(1, 11, dtype=np.float32)
    np.testing.assert_array_equal(shift(x, 3), [0, 0, 0, 1, 2, 3, 4, 5, 6, 7])
    np.testing.assert_array_equal(shift(x, -3), [4, 5, 6, 7, 8, 9, 10, 0, 0, 0])
    np.testing.assert_array_equal(shift(x, 3, circular=True), np.roll(x, 3))
    assert not shift(x, 20).any()
    for seed in range(20):
        y = random_shift(x, np.random.default_rng(seed), 2)
        assert any(np.array_equal(y, shift(x, k)) for k in range(-2, 3))


def test_gain_in_db() -> None:
    x = speechlike(0)
    assert level_dbfs(apply_gain(x, -6.0)) == pytest.approx(level_dbfs(x) - 6.0, abs=1e-4)


@pytest.mark.parametrize("snr", [-5.0, 0.0, 7.3, 20.0])
def test_add_noise_reaches_snr(snr: float) -> None:
    clean = speechlike(1)
    noise = colored_noise(clean.size, np.random.default_rng(2), "pink", level_dbfs=-3.0)
    noisy = add_noise(clean, noise, snr)
    assert noisy.dtype == np.float32 and noisy.shape == clean.shape
    assert snr_db(clean, noisy.astype(np.float64) - clean) == pytest.approx(snr, abs=0.1)


def test_add_noise_guards_silence_and_shapes() -> None:
    clean, noise = speechlike(1), colored_noise(SR, np.random.default_rng(0))
    silent = np.zeros(SR, np.float32)
    np.testing.assert_array_equal(add_noise(silent, noise, 10.0), silent)
    np.testing.assert_array_equal(add_noise(clean, silent, 10.0), clean)
    with pytest.raises(ValueError, match="same length"):
        add_noise(clean, noise[:-1], 10.0)


def test_mix_at_snr_level_and_decomposition() -> None:
    clean = speechlike(3, 2.0)
    noise = NoiseBank({"n": colored_noise(5 * SR, np.random.default_rng(4), "brown")}).sample(
        clean.size, np.random.default_rng(5)
    )
    noisy, target, level = mix_at(clean, noise, 4.0, -27.0)
    assert level == pytest.approx(-27.0, abs=1e-6)
    assert level_dbfs(noisy) == pytest.approx(-27.0, abs=0.01)
    residual = noisy.astype(np.float64) - target
    assert snr_db(target, residual) == pytest.approx(4.0, abs=0.1)
    a = residual @ noise / (noise.astype(np.float64) @ noise)  # residual is a scaled copy of the noise
    np.testing.assert_allclose(residual, a * noise, atol=1e-6)
    g = target.astype(np.float64) @ clean / (clean.astype(np.float64) @ clean)  # same for the target
    np.testing.assert_allclose(target, g * clean, atol=1e-6)


def test_mix_for_denoising_ranges() -> None:
    clean = speechlike(6, 1.5)
    snrs, levels = [], []
    for seed in range(40):
        rng = np.random.default_rng(seed)
        noise = colored_noise(clean.size, rng, "white")
        noisy, target = mix_for_denoising(clean, noise, rng)
        assert noisy.dtype == target.dtype == np.float32 and noisy.shape == clean.shape
        levels.append(level_dbfs(noisy))
        snrs.append(snr_db(target, noisy.astype(np.float64) - target))
        assert max(np.abs(noisy).max(), np.abs(target).max()) <= 1.0
    assert -35.01 <= min(levels) and max(levels) <= -14.99
    assert -5.1 <= min(snrs) and max(snrs) <= 15.1
    assert np.ptp(levels) > 10 and np.ptp(snrs) > 10  # spread over the ranges, not constant


def test_mix_is_clip_safe_and_handles_silence() -> None:
    clean = speechlike(7)
    clean[100] = 0.9  # a sharp peak: at -5 dBFS RMS this would clip
    noise = colored_noise(clean.size, np.random.default_rng(0), "white", -40.0)
    noisy, target = mix_for_denoising(clean, noise, np.random.default_rng(1), (30, 30), (-5.0, -5.0))
    assert np.abs(noisy).max() <= 1.0 and np.abs(target).max() <= 1.0
    assert level_dbfs(noisy) < -5.0
    silent = np.zeros_like(clean)
    noisy, target = mix_for_denoising(silent, noise, np.random.default_rng(2))
    assert not target.any() and -35.01 <= level_dbfs(noisy) <= -14.99
    noisy, target = mix_for_denoising(clean, np.zeros_like(clean), np.random.default_rng(3))
    np.testing.assert_array_equal(noisy, target)


# --- noise sources -------------------------------------------------------------------------------


@pytest.mark.parametrize("color", sorted(COLORS))
def test_colored_noise_slope_length_level(color: str) -> None:
    x = colored_noise(2**16 + 3, np.random.default_rng(0), color, level_dbfs=-20.0)
    assert x.shape == (2**16 + 3,) and x.dtype == np.float32
    assert level_dbfs(x) == pytest.approx(-20.0, abs=1e-3)
    f, p_db = welch_db(x, 2048)
    keep = (f >= 100) & (f <= 6000)
    slope = np.polyfit(np.log10(f[keep]), p_db[keep] / 10, 1)[0]
    assert slope == pytest.approx(COLORS[color], abs=0.1)


def test_colored_noise_rejects_unknown_color() -> None:
    with pytest.raises(ValueError, match="unknown noise color"):
        colored_noise(100, np.random.default_rng(0), "purple")


def test_babble_from_list_and_callable() -> None:
    clips = [speechlike(s, 0.5) for s in range(3)]
    a = babble(clips, 3 * SR, np.random.default_rng(0), talkers=4, level_dbfs=-25.0)
    assert a.shape == (3 * SR,) and level_dbfs(a) == pytest.approx(-25.0, abs=1e-3)
    np.testing.assert_array_equal(a, babble(clips, 3 * SR, np.random.default_rng(0), talkers=4, level_dbfs=-25.0))
    assert not np.array_equal(a, babble(clips, 3 * SR, np.random.default_rng(1), talkers=4, level_dbfs=-25.0))
    # clips laid end to end: no long silent stretch (a 0.5 s clip has pauses, 4 talkers fill them)
    frame_rms = np.sqrt(np.mean(a[: a.size // 160 * 160].reshape(-1, 160) ** 2, axis=1))
    assert (frame_rms > 1e-4).mean() > 0.95
    b = babble(lambda rng: speechlike(int(rng.integers(100)), 0.3), SR, np.random.default_rng(0), talkers=(2, 3))
    assert b.shape == (SR,) and np.isfinite(b).all()
    with pytest.raises(ValueError, match="at least one speech clip"):
        babble([], SR, np.random.default_rng(0))
    with pytest.raises(ValueError, match="silent"):
        babble([np.zeros(100)], SR, np.random.default_rng(0))


def write_wav(path, x: np.ndarray, sr: int = SR) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), x, sr, subtype="PCM_16")


def test_noise_bank_holdout_loop_and_errors(tmp_path) -> None:
    rng = np.random.default_rng(0)
    write_wav(tmp_path / "a.wav", 0.1 * rng.standard_normal(2 * SR))
    write_wav(tmp_path / "short.wav", 0.1 * rng.standard_normal(SR // 8))
    write_wav(tmp_path / "sub" / "running_tap.wav", 0.1 * rng.standard_normal(8000), sr=8000)  # resampled
    train = NoiseBank.from_folder(tmp_path, holdout=["running_tap.wav"])
    assert sorted(train.names) == ["a.wav", "short.wav"] and train.held_out == ["sub/running_tap.wav"]
    held = NoiseBank.from_folder(tmp_path, holdout=["running_tap"], subset="holdout")
    assert held.names == ["sub/running_tap.wav"] and held.clips[0].shape == (SR,)
    assert len(NoiseBank.from_folder(tmp_path, subset="all")) == 3

    short = train.clips[train.names.index("short.wav")]
    crop = train.crop(train.names.index("short.wav"), SR, np.random.default_rng(1))
    n = short.size
    assert crop.shape == (SR,)
    np.testing.assert_array_equal(crop[n:], crop[:-n])  # looped: periodic with the file's length
    assert any(np.array_equal(crop[: n - s], short[s:]) for s in range(n))  # starts anywhere in the file
    a = train.clips[train.names.index("a.wav")]
    long = train.crop(train.names.index("a.wav"), 1000, np.random.default_rng(2))
    assert any(np.array_equal(long, a[s : s + 1000]) for s in range(a.size - 999))  # a plain crop, no wrap
    x1 = train.sample(4000, np.random.default_rng(9))
    np.testing.assert_array_equal(x1, train.sample(4000, np.random.default_rng(9)))

    with pytest.raises(ValueError, match="match no file"):
        NoiseBank.from_folder(tmp_path, holdout=["runing_tap.wav"])
    with pytest.raises(ValueError, match="empty"):
        NoiseBank.from_folder(tmp_path, holdout=["a", "short", "running_tap"])
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no audio here")
    with pytest.raises(ValueError, match="holds no audio"):
        NoiseBank.from_folder(tmp_path / "empty")
    with pytest.raises(ValueError, match="does not exist"):
        NoiseBank.from_folder(tmp_path / "missing")
    with pytest.raises(ValueError, match="at least one"):
        NoiseBank({})


def test_noise_bank_on_shared_background_noise() -> None:
    shared = shared_data_dir(required=False)
    if shared is None or not (shared / "speech_commands_background_noise").is_dir():
        pytest.skip("shared/data not present")
    bank = NoiseBank.from_folder(shared / "speech_commands_background_noise", holdout=["running_tap.wav"])
    assert len(bank) == 5 and "running_tap.wav" not in bank.names and bank.held_out == ["running_tap.wav"]
    assert all(c.dtype == np.float32 and c.size > 50 * SR for c in bank.clips)


# --- reverb --------------------------------------------------------------------------------------


def test_reverb_keeps_length_and_direct_path_alignment() -> None:
    h = synthetic_rir(pre=123)
    assert direct_path_index(h) == 123
    x = np.zeros(SR, np.float32)
    x[5000] = 1.0
    for y in (reverb(x, h), *reverb_pair(x, h)):
        assert y.shape == x.shape and y.dtype == np.float32
        assert int(np.argmax(np.abs(y))) == 5000
    rev, early = reverb_pair(x, h, early_s=0.05)
    np.testing.assert_allclose(early[5000 : 5000 + 800], rev[5000 : 5000 + 800], atol=1e-6)
    assert np.abs(early[5000 + 801 :]).max() < 1e-6 and np.abs(rev[5000 + 801 :]).max() > 0
    # a reverberant clip stays time-aligned with its dry version (sparse clicks: a sharp correlation)
    dry = np.zeros(SR, np.float32)
    dry[np.random.default_rng(0).choice(SR, 30, replace=False)] = 1.0
    wet = reverb(dry, h)
    xc = signal.correlate(wet, dry, mode="full")
    assert int(np.argmax(xc)) - (dry.size - 1) == 0
    batch = reverb(np.stack([x, dry]), h)  # (..., T) works too
    np.testing.assert_allclose(batch[1], wet, atol=1e-6)


def test_direct_path_skips_pre_noise_and_picks_first_strong_arrival() -> None:
    h = np.zeros(400)
    h[50] = 0.8  # direct path
    h[90] = 1.0  # a stronger early reflection
    h[:40] = 0.01  # measurement noise before it
    assert direct_path_index(h) == 50


def test_rt60_estimate_on_known_decay() -> None:
    for rt in (0.2, 0.5, 1.0):
        h = synthetic_rir(pre=0, seconds=1.5 * rt + 0.1, rt60=rt, seed=3)
        assert rt60_schroeder(h) == pytest.approx(rt, rel=0.1)


def test_simulated_rirs_rt60_cache_and_determinism(tmp_path, monkeypatch, capsys) -> None:
    pytest.importorskip("pyroomacoustics")
    cfg = RoomSimConfig(rt60_s=(0.2, 0.45), room_max_m=(5.0, 4.5, 3.0))
    bank = RirBank.simulated(3, seed=7, config=cfg, cache_dir=tmp_path)
    assert "simulating 3 room responses once (cached in" in capsys.readouterr().err  # minutes on a fresh machine
    assert len(bank) == 3 and len(list(tmp_path.glob("shoebox-*.npz"))) == 1
    for h, rt in zip(bank.rirs, bank.rt60_s, strict=True):
        assert np.sum(h.astype(np.float64) ** 2) == pytest.approx(1.0, abs=1e-5)
        assert rt60_schroeder(h) == pytest.approx(rt, rel=0.05)  # trimming keeps the decay
        assert 0.2 * 0.85 <= rt <= 0.45 * 1.15
        assert 0.1 <= rt60_schroeder(h, fit_db=(-5.0, -35.0)) <= 0.7  # T30 agrees roughly
        x = np.zeros(8000, np.float32)
        x[3000] = 1.0
        assert int(np.argmax(np.abs(reverb(x, h)))) == 3000
    assert len({h.size for h in bank.rirs}) > 1  # different rooms

    def no_sim(*args, **kwargs):
        raise AssertionError("should have come from the cache")

    monkeypatch.setattr(rir_mod, "simulate_rir", no_sim)
    again = RirBank.simulated(2, seed=7, config=cfg, cache_dir=tmp_path)
    assert "simulating" not in capsys.readouterr().err  # from the cache: nothing to say
    for a, b in zip(again.rirs, bank.rirs[:2], strict=True):
        np.testing.assert_array_equal(a, b)
    monkeypatch.undo()
    fresh = RirBank.simulated(1, seed=7, config=cfg, cache_dir=tmp_path / "other")  # regenerated: identical
    np.testing.assert_array_equal(fresh.rirs[0], bank.rirs[0])
    other = RirBank.simulated(1, seed=8, config=cfg, cache_dir=tmp_path)
    assert not np.array_equal(other.rirs[0][:100], bank.rirs[0][:100])
    assert len(list(tmp_path.glob("shoebox-*.npz"))) == 2


def test_measured_rirs_from_shared_data() -> None:
    shared = shared_data_dir(required=False)
    if shared is None or not (shared / "rirs_real").is_dir():
        pytest.skip("shared/data not present")
    bank = RirBank.from_folder(shared / "rirs_real")
    assert len(bank) == 3
    for h, rt in zip(bank.rirs, bank.rt60_s, strict=True):
        assert h.dtype == np.float32 and np.sum(h.astype(np.float64) ** 2) == pytest.approx(1.0, abs=1e-5)
        assert direct_path_index(h) <= 60  # trimmed to 2.5 ms (40 samples) before the direct path
        assert 0.15 < rt < 1.5
    combined = bank + RirBank([synthetic_rir()])
    assert len(combined) == 4 and np.isnan(combined.rt60_s[-1])


def test_rir_bank_errors(tmp_path) -> None:
    with pytest.raises(ValueError, match="at least one"):
        RirBank([])
    with pytest.raises(ValueError, match="silent"):
        RirBank([np.zeros(10)])
    with pytest.raises(ValueError, match="holds no audio"):
        RirBank.from_folder(tmp_path)


# --- microphone response and masking ---------------------------------------------------------------


def test_band_limit_attenuates_outside_the_band_and_keeps_level() -> None:
    x = colored_noise(4 * SR, np.random.default_rng(0), "white", -20.0)
    f, ref = welch_db(x)
    low = band_limit(x, lowpass_hz=2000.0)
    f, p = welch_db(low)
    assert level_dbfs(low) == pytest.approx(-20.0, abs=0.05)
    assert band_mean(f, p, 4000, 7500) - band_mean(f, ref, 4000, 7500) < -25  # 1+ octave above: > 24 dB down
    assert abs(band_mean(f, p, 200, 600) - band_mean(f, p, 900, 1400)) < 1  # flat pass band
    high = band_limit(x, highpass_hz=1000.0, keep_level=False)
    f, p = welch_db(high)
    assert band_mean(f, p, 30, 250) - band_mean(f, ref, 30, 250) < -25
    assert abs(band_mean(f, p, 3000, 6000) - band_mean(f, ref, 3000, 6000)) < 0.5
    with pytest.raises(ValueError, match="lowpass cutoff"):
        band_limit(x, lowpass_hz=9000.0)


@pytest.mark.parametrize("order", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("kind", ["lowpass", "highpass"])
def test_closed_form_butterworth_filters_like_scipys_design(order, kind) -> None:
    x = np.random.default_rng(order).normal(size=8000)
    for cutoff in (30.0, 400.0, 3000.0, 7900.0):
        ours = signal.sosfilt(butterworth_sos(order, cutoff, kind, SR), x)
        ref = signal.sosfilt(signal.butter(order, cutoff, kind, fs=SR, output="sos"), x)
        assert np.abs(ours - ref).max() < 1e-9 * np.abs(ref).max(), (order, kind, cutoff)
    with pytest.raises(ValueError, match="cutoff must be in"):
        butterworth_sos(order, SR / 2, kind, SR)
    with pytest.raises(ValueError, match="kind must be"):
        butterworth_sos(order, 1000.0, "bandpass", SR)


def test_peaking_eq_gain_at_centre_and_random_mic_keeps_level() -> None:
    t = np.arange(2 * SR) / SR
    tone = np.sin(2 * np.pi * 1000 * t)
    y = peaking_eq(tone, 1000.0, 6.0, q=1.0)
    assert level_dbfs(y[SR:]) - level_dbfs(tone[SR:]) == pytest.approx(6.0, abs=0.1)
    far = np.sin(2 * np.pi * 60 * t)
    assert level_dbfs(peaking_eq(far, 4000.0, 6.0)[SR:]) == pytest.approx(level_dbfs(far[SR:]), abs=0.1)
    x = speechlike(2)
    for seed in range(5):
        z = random_mic_response(x, np.random.default_rng(seed))
        assert z.shape == x.shape and level_dbfs(z) == pytest.approx(level_dbfs(x), abs=0.01)


def test_spec_mask_zeroes_spans_and_bands_and_keeps_length() -> None:
    x = colored_noise(SR + 77, np.random.default_rng(0), "white", -20.0)
    np.testing.assert_allclose(spec_mask(x, [(0, 0)]), x, atol=1e-6)  # an empty span: perfect reconstruction
    y = spec_mask(x, time_spans=[(4000, 5600), (0, 300)], n_fft=512, hop=128)
    assert y.shape == x.shape and y.dtype == np.float32
    assert np.abs(y[4000:5600]).max() < 1e-7 and np.abs(y[:300]).max() < 1e-7
    np.testing.assert_allclose(y[6200:], x[6200:], atol=1e-6)  # beyond one window: untouched
    np.testing.assert_allclose(y[1000:3400], x[1000:3400], atol=1e-6)
    z = spec_mask(x, freq_bands=[(2000.0, 3000.0)])
    assert z.shape == x.shape
    f, pz = welch_db(z, 512)
    f, px = welch_db(x, 512)
    assert band_mean(f, pz, 2150, 2850) - band_mean(f, px, 2150, 2850) < -20
    assert abs(band_mean(f, pz, 300, 1700) - band_mean(f, px, 300, 1700)) < 0.5
    assert abs(band_mean(f, pz, 3300, 7000) - band_mean(f, px, 3300, 7000)) < 0.5


def test_random_spec_mask_is_seeded() -> None:
    x = speechlike(4, 2.0)
    cfg = SpecMaskConfig(n_time=(2, 2), n_freq=(1, 1))
    a = random_spec_mask(x, np.random.default_rng(0), cfg)
    assert a.shape == x.shape and (a == 0).sum() >= 0.01 * SR  # two spans of >= 10 ms are zero
    np.testing.assert_array_equal(a, random_spec_mask(x, np.random.default_rng(0), cfg))
    assert not np.array_equal(a, random_spec_mask(x, np.random.default_rng(1), cfg))


# --- pipelines -----------------------------------------------------------------------------------


def test_kws_augment_is_deterministic_and_keeps_shape(small_sources) -> None:
    bank, rirs, speech = small_sources
    cfg = KwsAugmentConfig(reverb_prob=0.5, mic_prob=0.5, mask_prob=0.5)
    aug = KwsAugment(cfg, noise_bank=bank, rir_bank=rirs, babble_speech=speech)
    x = speechlike(9)
    outs = [aug(x, np.random.default_rng(s)) for s in range(12)]
    for s, y in enumerate(outs):
        assert y.shape == x.shape and y.dtype == np.float32 and np.abs(y).max() <= 1.0
        np.testing.assert_array_equal(y, aug(x, np.random.default_rng(s)))
    assert len({y.tobytes() for y in outs}) == len(outs)
    # silence gets noise at an absolute level
    quiet = KwsAugment(KwsAugmentConfig(noise_prob=1.0, gain_prob=0.0, mic_prob=0.0), noise_bank=bank)
    y = quiet(np.zeros(SR, np.float32), np.random.default_rng(0))
    assert -60.01 <= level_dbfs(y) <= -24.99
    with pytest.raises(ValueError, match="no noise source"):
        KwsAugment(KwsAugmentConfig(noise_prob=1.0, noise=NoiseSourceConfig(colored=0.0)))(x, np.random.default_rng(0))


def test_denoise_augment_pairs(small_sources) -> None:
    bank, rirs, speech = small_sources
    clean = speechlike(10, 2.0)
    plain = DenoiseAugment(DenoiseAugmentConfig(reverb_prob=0.0, mask_prob=0.0), noise_bank=bank)
    for seed in range(5):
        noisy, target = plain(clean, np.random.default_rng(seed))
        assert -35.01 <= level_dbfs(noisy) <= -14.99
        g = target.astype(np.float64) @ clean / (clean.astype(np.float64) @ clean)
        np.testing.assert_allclose(target, g * clean, atol=1e-6)  # target is the scaled clean speech
        assert -5.1 <= snr_db(target, noisy.astype(np.float64) - target) <= 15.1
    full = DenoiseAugment(
        DenoiseAugmentConfig(reverb_prob=1.0, mask_prob=1.0), noise_bank=bank, rir_bank=rirs, babble_speech=speech
    )
    a = full(clean, np.random.default_rng(0))
    b = full(clean, np.random.default_rng(0))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[0], full(clean, np.random.default_rng(1))[0])
    noisy, target = a
    assert noisy.shape == target.shape == clean.shape
    assert (noisy == 0).sum() >= 0.01 * SR  # masked input ...
    assert (target == 0).sum() < (noisy == 0).sum()  # ... but not the target
    # the early-reflection target stays aligned with the dry source: an impulse keeps its position
    click = np.zeros(SR, np.float32)
    click[7000] = 0.5
    _, target = DenoiseAugment(DenoiseAugmentConfig(reverb_prob=1.0, mask_prob=0.0), rir_bank=rirs)(
        click, np.random.default_rng(3), noise=colored_noise(SR, np.random.default_rng(4))
    )
    assert int(np.argmax(np.abs(target))) == 7000
    given = DenoiseAugment(DenoiseAugmentConfig(reverb_prob=0.0, mask_prob=0.0))
    noise = colored_noise(clean.size, np.random.default_rng(0), "pink")
    noisy, target = given(clean, np.random.default_rng(0), noise=noise)
    residual = noisy.astype(np.float64) - target
    np.testing.assert_allclose(residual, (residual @ noise / (noise.astype(np.float64) @ noise)) * noise, atol=1e-6)


def test_config_from_dict_like_toml() -> None:
    cfg = config_from_dict(
        DenoiseAugmentConfig, {"snr_db": [0, 10], "noise": {"babble": 0.5}, "mask": {"n_time": [0, 3]}}
    )
    assert cfg.snr_db == (0, 10) and cfg.mask.n_time == (0, 3)
    assert cfg.noise.babble == 0.5 and cfg.noise.colored == 0.1  # the pipeline's own nested defaults are kept
    assert config_from_dict(KwsAugmentConfig, None) == KwsAugmentConfig()
    with pytest.raises(ValueError, match="unknown KwsAugmentConfig keys"):
        config_from_dict(KwsAugmentConfig, {"snr": [0, 5]})
    with pytest.raises(ValueError, match="unknown NoiseSourceConfig keys"):
        config_from_dict(KwsAugmentConfig, {"noise": {"pink": 1.0}})


def test_augmentation_does_not_import_torch() -> None:
    code = (
        "import sys, edgessm.data.augment, edgessm.data.noise, edgessm.data.rir; "
        "assert 'torch' not in sys.modules and 'pyroomacoustics' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_builders_from_config_tables(tmp_path) -> None:
    store = [0.05 * np.random.default_rng(i).standard_normal(SR // 2).astype(np.float32) for i in range(3)]
    assert build_clip_augment({}, store) is None
    aug = build_clip_augment({"noise_prob": 1.0, "snr_db": [5, 5], "gain_prob": 0.0, "mic_prob": 0.0}, store)
    x = speechlike(11)
    y = aug(x, np.random.default_rng(0))
    assert y.shape == x.shape
    np.testing.assert_array_equal(y, aug(x, np.random.default_rng(0)))
    assert aug.noise_bank is not None and aug.noise_bank.clips is store  # wrapped, not copied
    write_wav(tmp_path / "rirs" / "room.wav", synthetic_rir(pre=30))
    kws = build_clip_augment({"reverb_prob": 1.0, "rirs": {"measured": str(tmp_path / "rirs")}})
    assert kws.rir_bank is not None and len(kws.rir_bank) == 1
    mixer = build_denoise_mixer({"mask_prob": 0.0})
    clean, noise = speechlike(12), colored_noise(SR, np.random.default_rng(1), "pink")
    noisy, target = mixer(clean, noise, np.random.default_rng(2))
    assert -35.01 <= level_dbfs(noisy) <= -14.99
    assert -5.1 <= snr_db(target, noisy.astype(np.float64) - target) <= 15.1
    again = pickle.loads(pickle.dumps(mixer))(clean, noise, np.random.default_rng(2))  # DataLoader workers
    np.testing.assert_array_equal(again[0], noisy)


def test_hum_clicks_and_music_are_reproducible_at_their_level_and_drawn_by_weight():
    from edgessm.data.augment import draw_noise
    from edgessm.data.noise import hum_clicks, music_like

    for make in (hum_clicks, music_like):
        a, b = make(32000, np.random.default_rng(5)), make(32000, np.random.default_rng(5))
        assert a.dtype == np.float32 and a.shape == (32000,) and np.array_equal(a, b)
        assert 20 * np.log10(np.sqrt(np.mean(a.astype(np.float64) ** 2))) == pytest.approx(-20.0, abs=0.01)
    hum = hum_clicks(64000, np.random.default_rng(1))
    spec = np.abs(np.fft.rfft(hum.astype(np.float64))) ** 2
    freqs = np.fft.rfftfreq(64000, 1 / 16000)
    low = spec[(freqs > 40) & (freqs < 1100)].sum() / spec.sum()
    assert low > 0.3  # most of the energy is mains hum and its harmonics
    # with only the hum weight set, every draw is hum (same generator state -> same samples)
    only_hum = NoiseSourceConfig(bank=0.0, colored=0.0, babble=0.0, hum=1.0)
    x = draw_noise(16000, np.random.default_rng(2), only_hum)
    r = np.random.default_rng(2)
    r.random()  # the source choice
    assert np.array_equal(x, hum_clicks(16000, r))


def test_speed_scales_pitch_and_keeps_length_and_word_position() -> None:
    from edgessm.data.augment import random_speed, speed

    t = np.arange(16000) / 16000
    word = np.where((t > 0.3) & (t < 0.6), np.sin(2 * np.pi * 500 * t), 0.0).astype(np.float32)

    def peak_hz(x: np.ndarray) -> float:
        return float(np.argmax(np.abs(np.fft.rfft(x)))) * 16000 / len(x)

    def centroid(x: np.ndarray) -> float:
        e = x.astype(np.float64) ** 2
        return float(np.sum(np.arange(len(x)) * e) / e.sum())

    for factor in (0.9, 1.1):
        y = speed(word, factor)
        assert y.shape == word.shape and y.dtype == np.float32
        assert peak_hz(y) == pytest.approx(500 * factor, abs=2)
        assert centroid(y) == pytest.approx(centroid(word), abs=80)  # the word stays where it was
        active = np.flatnonzero(np.abs(y) > 0.1)
        assert (active[-1] - active[0]) / 16000 == pytest.approx(0.3 / factor, abs=0.01)  # shorter when faster
    np.testing.assert_array_equal(speed(word, 1.0), word)
    a = random_speed(word, np.random.default_rng(3), (0.85, 1.15))
    np.testing.assert_array_equal(a, random_speed(word, np.random.default_rng(3), (0.85, 1.15)))
    assert not np.array_equal(a, word)


def test_noise_perturbations_move_the_spectrum_and_stay_seeded() -> None:
    from edgessm.data.augment import NoiseSourceConfig, draw_noise

    tone = NoiseSourceConfig(bank=0.0, colored=0.0, babble=0.0, music=0.0, hum=1.0)
    n = 32000
    plain = draw_noise(n, np.random.default_rng(5), tone)
    np.testing.assert_array_equal(plain, draw_noise(n, np.random.default_rng(5), tone))  # off: no extra draws

    def centroid_hz(x: np.ndarray) -> float:
        p = np.abs(np.fft.rfft(x)) ** 2
        return float(np.sum(np.fft.rfftfreq(len(x), 1 / 16000) * p) / p.sum())

    fast = NoiseSourceConfig(**{**tone.__dict__, "speed_prob": 1.0, "speed_factors": (1.4, 1.4)})
    slow = NoiseSourceConfig(**{**tone.__dict__, "speed_prob": 1.0, "speed_factors": (0.7, 0.7)})
    rng_f, rng_s = np.random.default_rng(7), np.random.default_rng(7)
    f = [centroid_hz(draw_noise(n, rng_f, fast)) for _ in range(4)]
    s = [centroid_hz(draw_noise(n, rng_s, slow)) for _ in range(4)]
    assert np.mean(f) > 1.5 * np.mean(s)  # the same draws, 2x apart in playback rate
    every = NoiseSourceConfig(colored=1.0, speed_prob=1.0, eq_prob=1.0, pair_prob=1.0)
    a = draw_noise(n, np.random.default_rng(3), every)
    assert a.shape == (n,) and a.dtype == np.float32 and np.isfinite(a).all() and np.abs(a).max() > 0
    np.testing.assert_array_equal(a, draw_noise(n, np.random.default_rng(3), every))


def test_tonal_events_and_ambience_are_reproducible_at_level_and_drawn_by_weight() -> None:
    from edgessm.data.augment import draw_noise
    from edgessm.data.noise import ambience, tonal_events

    for make in (tonal_events, ambience):
        for seed in range(6):  # several seeds: each draws its own kind of event or ambience
            a, b = make(40000, np.random.default_rng(seed)), make(40000, np.random.default_rng(seed))
            assert a.dtype == np.float32 and a.shape == (40000,) and np.array_equal(a, b)
            assert np.isfinite(a).all()
            assert 20 * np.log10(np.sqrt(np.mean(a.astype(np.float64) ** 2))) == pytest.approx(-20.0, abs=0.01)
        assert make(1, np.random.default_rng(0)).shape == (1,)
        for seed in range(50):  # every kind of event, at many durations: never a NaN (one crashed a training run)
            assert np.isfinite(make(65600, np.random.default_rng(seed))).all()
    # tonal events are tonal: in most 64 ms frames a few spectral peaks hold much of the energy
    x = tonal_events(16000 * 8, np.random.default_rng(3)).astype(np.float64)
    frames = x[: len(x) // 1024 * 1024].reshape(-1, 1024) * np.hanning(1024)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    loud = power.sum(1) > 0.1 * np.median(power.sum(1))
    top = np.sort(power[loud], axis=1)[:, -20:].sum(1) / power[loud].sum(1)
    assert np.median(top) > 0.5  # 20 of 513 bins; white noise would hold ~4%
    # ambience drifts: its level over 0.5 s windows varies far more than stationary noise's would
    levels = [np.std(np.diff(_window_db(ambience(16000 * 10, np.random.default_rng(s))))) for s in range(8)]
    white = np.random.default_rng(0).standard_normal(16000 * 10)
    assert max(levels) > 5 * np.std(np.diff(_window_db(white)))
    # with only one weight set every draw is that kind
    for field_name, make in (("tonal", tonal_events), ("ambient", ambience)):
        only = NoiseSourceConfig(bank=0.0, colored=0.0, babble=0.0, **{field_name: 1.0})
        r = np.random.default_rng(2)
        r.random()
        assert np.array_equal(draw_noise(16000, np.random.default_rng(2), only), make(16000, r))
    # a recipe without the new kinds keeps its draws: the source is picked as it was among five kinds
    from edgessm.data.noise import colored_noise, hum_clicks, music_like

    old = NoiseSourceConfig(bank=0.0, colored=1.0, babble=0.0, music=1.0, hum=1.0)
    for seed in range(20):
        r = np.random.default_rng(seed)
        kind = int(r.choice(5, p=np.array([0, 1, 0, 1, 1]) / 3))
        if kind == 1:
            expect = colored_noise(8000, r, float(r.uniform(-2.0, 2.0)))
        else:
            expect = music_like(8000, r) if kind == 3 else hum_clicks(8000, r)
        assert np.array_equal(draw_noise(8000, np.random.default_rng(seed), old), expect)


def _window_db(x: np.ndarray, n: int = 8000) -> np.ndarray:
    w = x[: len(x) // n * n].reshape(-1, n)
    return 10 * np.log10(np.mean(w.astype(np.float64) ** 2, axis=1) + 1e-20)


def test_music_bank_crops_prerendered_music_at_the_asked_level() -> None:
    from edgessm.data.noise import MusicBank, music_like

    bank = MusicBank(pieces=3, seconds=0.5, seed=1)
    assert bank.data.shape == (3, 8000) and bank.data.dtype == np.int16
    piece = np.round(np.clip(music_like(8000, np.random.default_rng([1, 2]), 16000, -20.0), -1, 1) * 32767)
    assert np.array_equal(bank.data[2], piece.astype(np.int16))  # piece i is music_like from seed [seed, i]
    x = bank(20000, np.random.default_rng(0), level_dbfs=-30.0)  # longer than a piece: pieces joined
    assert x.shape == (20000,) and x.dtype == np.float32
    assert 10 * np.log10(np.mean(x.astype(np.float64) ** 2)) == pytest.approx(-30.0, abs=0.01)
    a, b = bank(4000, np.random.default_rng(5)), bank(4000, np.random.default_rng(5))
    assert np.array_equal(a, b)
    with pytest.raises(ValueError, match="pieces >= 1"):
        MusicBank(pieces=0)


def test_a_cached_music_bank_maps_the_same_pieces_back_without_rendering(tmp_path, monkeypatch) -> None:
    from edgessm.data import noise

    monkeypatch.setenv("EDGESSM_CACHE", str(tmp_path))
    first = noise.MusicBank(pieces=2, seconds=0.25, seed=3, cache=True)
    assert len(list((tmp_path / "music").glob("bank-2x0.25s-3-*.npy"))) == 1
    monkeypatch.setattr(noise, "music_like", lambda *a, **k: (_ for _ in ()).throw(AssertionError("rendered")))
    again = noise.MusicBank(pieces=2, seconds=0.25, seed=3, cache=True)
    assert isinstance(again.data, np.memmap) and np.array_equal(again.data, first.data)
    with pytest.raises(AssertionError, match="rendered"):  # other settings: another bank
        noise.MusicBank(pieces=2, seconds=0.25, seed=4, cache=True)


def test_augmentation_draws_its_music_from_the_bank_when_given_one(monkeypatch) -> None:
    from edgessm.data import augment
    from edgessm.data.noise import MusicBank

    bank = MusicBank(pieces=2, seconds=0.5)
    monkeypatch.setattr(augment, "music_like", lambda *a, **k: (_ for _ in ()).throw(AssertionError("rendered")))
    aug = augment.build_clip_augment({"noise_prob": 1.0, "noise": {"music": 1.0, "colored": 0.0}}, music=bank)
    y = aug(np.zeros(8000, np.float32), np.random.default_rng(0))
    assert y.shape == (8000,) and np.abs(y).max() > 0


def test_mu_law_quantises_to_256_levels_and_keeps_quiet_detail() -> None:
    from edgessm.data.augment import mu_law

    x = np.linspace(-0.5, 0.5, 20001, dtype=np.float32)
    y = mu_law(x)
    assert y.dtype == np.float32 and y.shape == x.shape
    assert len(np.unique(y)) <= 255 and np.isclose(np.abs(y).max(), 0.5, rtol=1e-5)
    quiet, loud = np.abs(x) < 0.005, np.abs(x) > 0.4
    assert np.abs(y - x)[quiet].max() < 3e-4 < 3e-3 < np.abs(y - x)[loud].max() < 0.02  # finer steps near zero
    assert np.array_equal(mu_law(np.zeros(5)), np.zeros(5, np.float32))


def test_a_narrow_channel_band_limits_the_noise_and_keeps_its_level() -> None:
    from edgessm.data.augment import NoiseSourceConfig, draw_noise, random_narrow_channel

    white = np.random.default_rng(0).standard_normal(32000).astype(np.float32) * 0.1
    f = np.fft.rfftfreq(len(white), 1 / 16000)
    for seed in range(8):
        y = random_narrow_channel(white, np.random.default_rng(seed))
        spec = np.abs(np.fft.rfft(y.astype(np.float64))) ** 2
        assert spec[f > 7500].sum() < 1e-3 * spec[(f > 1000) & (f < 3000)].sum()
        assert spec[f < 60].sum() < 1e-2 * spec[(f > 1000) & (f < 3000)].sum()
        assert np.isclose(np.std(y), np.std(white), rtol=1e-2)
    off, on = (
        NoiseSourceConfig(bank=0, colored=1, babble=0),
        NoiseSourceConfig(bank=0, colored=1, babble=0, channel_prob=1),
    )
    a = draw_noise(16000, np.random.default_rng(3), off)
    b = draw_noise(16000, np.random.default_rng(3), NoiseSourceConfig(bank=0, colored=1, babble=0, channel_prob=0.0))
    c = draw_noise(16000, np.random.default_rng(3), on)
    assert np.array_equal(a, b)  # off draws nothing: recipes without it keep their exact noise
    assert not np.allclose(a, c) and np.isclose(np.std(a), np.std(c), rtol=1e-2)


def test_denoise_pairs_through_a_narrow_channel_band_limit_the_target_too() -> None:
    from edgessm.data.augment import DenoiseAugment, DenoiseAugmentConfig, NoiseSourceConfig

    clean = np.random.default_rng(0).standard_normal(32000).astype(np.float32) * 0.05
    noise = NoiseSourceConfig(bank=0, colored=1, babble=0)
    plain = DenoiseAugmentConfig(noise=noise, mask_prob=0.0, reverb_prob=0.0)
    phone = DenoiseAugmentConfig(noise=noise, mask_prob=0.0, reverb_prob=0.0, channel_prob=1.0)
    a = DenoiseAugment(plain)(clean, np.random.default_rng(1))
    b = DenoiseAugment(DenoiseAugmentConfig(noise=noise, mask_prob=0.0, reverb_prob=0.0, channel_prob=0.0))(
        clean, np.random.default_rng(1)
    )
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))  # off: the same pairs as before
    _, target = DenoiseAugment(phone)(clean, np.random.default_rng(1))
    f = np.fft.rfftfreq(len(target), 1 / 16000)
    spec = np.abs(np.fft.rfft(target.astype(np.float64))) ** 2
    assert spec[f > 7500].sum() < 1e-3 * spec[(f > 1000) & (f < 3000)].sum()


def test_active_level_is_the_level_of_the_speech_not_of_its_pauses() -> None:
    from edgessm.data.augment import active_level_dbfs

    t = np.arange(16000) / 16000
    tone = (0.1 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)  # -23 dBFS
    short = np.zeros(16000, np.float32)
    short[4000:10000] = tone[:6000]  # 0.375 s of it in a second of silence
    assert abs(active_level_dbfs(tone) - level_dbfs(tone)) < 0.1
    assert abs(active_level_dbfs(short) - level_dbfs(tone)) < 0.1  # the plain RMS would say 4 dB less
    assert level_dbfs(short) < level_dbfs(tone) - 4
    assert active_level_dbfs(np.zeros(16000, np.float32)) == float("-inf")
    assert np.isfinite(active_level_dbfs(tone[:50]))  # shorter than a frame
