"""Waveform augmentation for keyword spotting and denoising: shift, gain, noise at an SNR, room
reverb, microphone response, SpecAugment-style masking, and the Centaurus denoising mix.

numpy/scipy only (no torch), so it runs in DataLoader workers and on the torch-free side. Every
random choice comes from the ``numpy.random.Generator`` passed in, so the same generator state
gives bit-identical audio; in a DataLoader, make one per example, e.g.
``np.random.default_rng([seed, epoch, index])``.

Audio is float32 mono ``(T,)`` at 16 kHz unless said otherwise. Levels are in dBFS meaning RMS in
dB relative to 1.0 (a full-scale sine is -3 dBFS). Each deterministic function (``shift``,
``add_noise``, ``band_limit``, ``spec_mask``, ...) has a ``random_*`` or sampling counterpart.
Pipelines (:class:`KwsAugment`, :class:`DenoiseAugment`) take plain config dataclasses that a
TOML file can fill through :func:`config_from_dict`. Noise sources live in
:mod:`edgessm.data.noise`, room impulse responses in :mod:`edgessm.data.rir`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import numpy as np

from .audio import SAMPLE_RATE
from .corpora import shared_data_dir
from .noise import (
    _SILENT_POWER,
    COLORS,
    NoiseBank,
    SpeechSource,
    ambience,
    babble,
    colored_noise,
    hum_clicks,
    music_like,
    tonal_events,
)
from .rir import RirBank, RoomSimConfig, reverb, reverb_pair

__all__ = [
    "COLORS",
    "DenoiseAugment",
    "DenoiseAugmentConfig",
    "KwsAugment",
    "KwsAugmentConfig",
    "KwsMix",
    "MicResponseConfig",
    "NoiseBank",
    "NoiseSourceConfig",
    "RirBank",
    "RirSourceConfig",
    "RoomSimConfig",
    "SpecMaskConfig",
    "active_level_dbfs",
    "add_noise",
    "apply_gain",
    "apply_mic_response",
    "babble",
    "band_limit",
    "build_clip_augment",
    "build_denoise_mixer",
    "build_rir_bank",
    "colored_noise",
    "config_from_dict",
    "draw_mic_response",
    "draw_noise",
    "level_dbfs",
    "max_mic_sections",
    "mix_at",
    "mix_for_denoising",
    "peaking_eq",
    "peaking_sos",
    "played_faster",
    "random_gain",
    "random_mic_response",
    "random_played_faster",
    "random_shift",
    "random_spec_mask",
    "random_speed",
    "reverb",
    "reverb_pair",
    "sample_spec_masks",
    "scale_noise",
    "set_active_level",
    "set_level",
    "shared_data_dir",
    "shift",
    "snr_db",
    "spec_mask",
    "speed",
]


# --- levels, shift, gain -------------------------------------------------------------------------


def _mono(x: np.ndarray, what: str = "audio") -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"{what} must be mono (T,), got shape {x.shape}")
    return x


def _power(x: np.ndarray) -> float:
    return float(np.mean(np.square(x, dtype=np.float64))) if x.size else 0.0


def level_dbfs(x: np.ndarray) -> float:
    """RMS level of ``x`` in dB re 1.0 (``-inf`` for silence)."""
    p = _power(np.asarray(x))
    return 10.0 * np.log10(p) if p > 0 else float("-inf")


def active_level_dbfs(x: np.ndarray, frame: int = 160) -> float:
    """The level of the speech in ``x (T,)``, not of its pauses: the RMS (dB re 1.0) of its loudest third of
    ``frame``-sample frames (10 ms at 16 kHz), so a one-second command and a window of running speech said
    equally loud measure the same. ``-inf`` for silence."""
    x = np.asarray(_mono(x), np.float64)
    n = max(1, len(x) // frame)
    powers = np.mean(np.square(np.resize(x, n * frame) if len(x) < frame else x[: n * frame]).reshape(n, -1), axis=1)
    loud = np.sort(powers)[::-1][: max(1, n // 3)]
    p = float(np.mean(loud))
    return 10.0 * np.log10(p) if p > _SILENT_POWER else float("-inf")


def set_active_level(x: np.ndarray, dbfs: float) -> np.ndarray:
    """``x`` scaled so its :func:`active_level_dbfs` is ``dbfs`` (silent input returned as it is). float32."""
    level = active_level_dbfs(x)
    return np.asarray(x, np.float32) if not np.isfinite(level) else (x * 10 ** ((dbfs - level) / 20)).astype(np.float32)


def set_level(x: np.ndarray, dbfs: float) -> np.ndarray:
    """``x`` scaled to an RMS level of ``dbfs`` (silent input is returned as zeros). float32."""
    p = _power(np.asarray(x))
    if p <= _SILENT_POWER:
        return np.zeros(np.shape(x), np.float32)
    return (np.asarray(x, np.float64) * (10.0 ** (dbfs / 20.0) / np.sqrt(p))).astype(np.float32)


def shift(x: np.ndarray, samples: int, circular: bool = False) -> np.ndarray:
    """Delay ``x (..., T)`` by ``samples`` (negative: advance), keeping the length.

    The vacated samples are zeros, or the wrapped-around ones when ``circular``. float32.
    """
    x = np.asarray(x, dtype=np.float32)
    t = x.shape[-1]
    if circular:
        return np.roll(x, samples, axis=-1)
    out = np.zeros_like(x)
    if samples >= 0:
        out[..., samples:] = x[..., : max(t - samples, 0)]
    else:
        out[..., : max(t + samples, 0)] = x[..., -samples:]
    return out


def random_shift(x: np.ndarray, rng: np.random.Generator, max_shift: int, circular: bool = False) -> np.ndarray:
    """:func:`shift` by a uniform integer in ``[-max_shift, max_shift]`` samples."""
    return shift(x, int(rng.integers(-max_shift, max_shift + 1)), circular)


def played_faster(x: np.ndarray, factor: float, sr: int = SAMPLE_RATE) -> np.ndarray:
    """All of ``x (T,)`` played ``factor`` times faster: about ``T / factor`` samples, pitch and formants
    times ``factor`` (Ko et al. 2015's speed perturbation, as sox ``speed``). Input sample ``s`` lands near
    output sample ``s / factor``. float32."""
    from .audio import resample

    x = np.asarray(x, dtype=np.float32)
    if factor == 1.0 or x.shape[-1] == 0:
        return x.copy()
    if not factor > 0:
        raise ValueError(f"a speed factor must be > 0, got {factor}")
    return resample(x, round(sr * factor), sr)  # sr*factor samples per second read as sr: faster by factor


def speed(x: np.ndarray, factor: float, sr: int = SAMPLE_RATE) -> np.ndarray:
    """``x (T,)`` played ``factor`` times faster (pitch and formants scale with it, as with a different
    talker's vocal tract; Ko et al. 2015), back in ``T`` samples. The energy centroid keeps its position
    where the length allows, so a word centred in a clip stays centred. float32."""
    x = np.asarray(x, dtype=np.float32)
    t = x.shape[-1]
    if factor == 1.0 or t == 0:
        return x.copy()
    y = played_faster(x, factor, sr)
    energy = x.astype(np.float64) ** 2
    centre = float(np.sum(np.arange(t) * energy) / energy.sum()) if energy.sum() > 0 else t / 2
    start = round(centre / factor - centre)  # where x's window starts in y, centroid kept in place
    out = np.zeros(t, np.float32)
    lo, hi = max(start, 0), min(start + t, y.shape[-1])
    if hi > lo:
        out[lo - start : hi - start] = y[lo:hi]
    return out


def random_speed(x: np.ndarray, rng: np.random.Generator, factors: tuple[float, float] = (0.9, 1.1),
                 sr: int = SAMPLE_RATE) -> np.ndarray:  # fmt: skip
    """:func:`speed` by a factor log-uniform in ``factors``."""
    return speed(x, _loguniform(rng, factors), sr)


def random_played_faster(x: np.ndarray, rng: np.random.Generator, factors: tuple[float, float] = (0.9, 1.1),
                         sr: int = SAMPLE_RATE) -> tuple[np.ndarray, float]:  # fmt: skip
    """:func:`played_faster` by a factor log-uniform in ``factors``: ``(audio, factor)``, so what is timed
    in ``x`` (e.g. a recognizer's teacher frames) can follow it."""
    factor = _loguniform(rng, factors)
    return played_faster(x, factor, sr), factor


def apply_gain(x: np.ndarray, gain_db: float) -> np.ndarray:
    """``x`` times ``10**(gain_db/20)``, float32."""
    return (np.asarray(x, np.float64) * 10.0 ** (gain_db / 20.0)).astype(np.float32)


def random_gain(x: np.ndarray, rng: np.random.Generator, gain_db: tuple[float, float] = (-6.0, 6.0)) -> np.ndarray:
    """:func:`apply_gain` with a gain uniform in ``gain_db`` (dB)."""
    return apply_gain(x, float(rng.uniform(*gain_db)))


# --- additive noise ------------------------------------------------------------------------------


def scale_noise(clean: np.ndarray, noise: np.ndarray, snr: float) -> np.ndarray:
    """``noise (T,)`` scaled so that ``10 log10(mean(clean²) / mean(noise²)) == snr`` (dB). float64.

    Powers are over the whole clip. A silent ``clean`` or silent ``noise`` (mean square below
    1e-10, i.e. -100 dBFS) makes the SNR undefined: the result is zeros.
    """
    clean, noise = _mono(clean, "clean"), _mono(noise, "noise")
    if clean.shape != noise.shape:
        raise ValueError(f"clean {clean.shape} and noise {noise.shape} must have the same length")
    pc, pn = _power(clean), _power(noise)
    if pc <= _SILENT_POWER or pn <= _SILENT_POWER:
        return np.zeros(noise.shape, np.float64)
    return np.asarray(noise, np.float64) * np.sqrt(pc / (pn * 10.0 ** (snr / 10.0)))


def add_noise(clean: np.ndarray, noise: np.ndarray, snr: float) -> np.ndarray:
    """``clean + noise`` with the noise scaled to a power SNR of ``snr`` dB; ``(T,)`` float32.

    Silent ``clean`` or ``noise`` (below -100 dBFS): the clean signal is returned unchanged (the SNR
    is undefined; to put noise on silence give it a level with :func:`set_level` instead).
    """
    return (np.asarray(clean, np.float64) + scale_noise(clean, noise, snr)).astype(np.float32)


def snr_db(clean: np.ndarray, noise: np.ndarray) -> float:
    """Power SNR of ``clean`` over ``noise`` in dB (``inf`` for silent noise)."""
    pc, pn = _power(np.asarray(clean)), _power(np.asarray(noise))
    return float("inf") if pn == 0 else (10.0 * np.log10(pc / pn) if pc > 0 else float("-inf"))


def mix_at(
    clean: np.ndarray,
    noise: np.ndarray,
    snr: float,
    level: float,
    target: np.ndarray | None = None,
    max_peak: float = 1.0,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Mix ``clean`` and ``noise`` at ``snr`` dB, then scale so the mixture's RMS is ``level`` dBFS.

    The same factor scales the mixture and the target, so ``noisy == target + g * scaled_noise``
    when ``target`` is ``clean``. If the noisy or target peak would exceed ``max_peak``, the
    factor is lowered until it does not (the level then ends below ``level``).

    Args:
        clean: ``(T,)`` speech that goes into the mixture (e.g. reverberant speech).
        noise: ``(T,)`` noise.
        snr: SNR in dB of ``clean`` over the scaled noise.
        level: RMS level of the noisy mixture in dBFS.
        target: ``(T,)`` training target (defaults to ``clean``; e.g. a dry or early-reflection
            version of reverberant ``clean``).
        max_peak: peak limit of both outputs.

    Returns:
        ``(noisy, target, level_db)``: float32 ``(T,)`` arrays and the RMS level (dBFS) reached.
    """
    c = np.asarray(_mono(clean, "clean"), np.float64)
    if np.shape(noise) != c.shape:
        raise ValueError(f"clean {c.shape} and noise {np.shape(noise)} must have the same length")
    tgt = c if target is None else np.asarray(_mono(target, "target"), np.float64)
    if tgt.shape != c.shape:
        raise ValueError(f"target {tgt.shape} and clean {c.shape} must have the same length")
    n = scale_noise(c, noise, snr) if _power(c) > _SILENT_POWER else np.asarray(noise, np.float64)
    mix = c + n
    p = _power(mix)
    if p <= _SILENT_POWER:
        return np.zeros(c.shape, np.float32), np.zeros(c.shape, np.float32), float("-inf")
    g = 10.0 ** (level / 20.0) / np.sqrt(p)
    peak = max(float(np.max(np.abs(mix))), float(np.max(np.abs(tgt))) if tgt.size else 0.0)
    if g * peak > max_peak:
        g = max_peak / peak
    return (g * mix).astype(np.float32), (g * tgt).astype(np.float32), 10.0 * np.log10(g * g * p)


def mix_for_denoising(
    clean: np.ndarray,
    noise: np.ndarray,
    rng: np.random.Generator,
    snr_range: tuple[float, float] = (-5.0, 15.0),
    level_range: tuple[float, float] = (-35.0, -15.0),
    *,
    target: np.ndarray | None = None,
    max_peak: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """The Centaurus denoising mix (App. E.2): SNR uniform in ``snr_range`` dB, then the noisy
    mixture and the target both scaled by one factor so the mixture's RMS is uniform in
    ``level_range`` dBFS.

    Clip-safe: if the noisy or target peak would exceed ``max_peak`` (1.0), the level is lowered
    until it does not, so that example sits below the drawn level. A silent ``clean`` gives a
    noise-only input with a silent target; a silent ``noise`` gives ``noisy == target``.

    Args:
        clean: ``(T,)`` float speech. noise: ``(T,)`` float noise (see :class:`NoiseBank`).
        target: optional ``(T,)`` target instead of ``clean`` (same scale factor), see :func:`mix_at`.

    Returns:
        ``(noisy, target)``, float32 ``(T,)`` each, with ``noisy == target + g * scaled_noise``.
    """
    snr = float(rng.uniform(*snr_range))
    level = float(rng.uniform(*level_range))
    noisy, tgt, _ = mix_at(clean, noise, snr, level, target=target, max_peak=max_peak)
    return noisy, tgt


# --- microphone response -------------------------------------------------------------------------


def _rms_match(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    px, py = _power(x), _power(y)
    if px <= _SILENT_POWER or py <= _SILENT_POWER:
        return y.astype(np.float32)
    return (y * np.sqrt(px / py)).astype(np.float32)


def band_limit(
    x: np.ndarray,
    lowpass_hz: float | None = None,
    highpass_hz: float | None = None,
    order: int = 4,
    sr: int = SAMPLE_RATE,
    keep_level: bool = True,
) -> np.ndarray:
    """Butterworth low-pass and/or high-pass of ``x (..., T)`` (causal ``sosfilt``).

    Args:
        lowpass_hz / highpass_hz: -3 dB cutoffs in Hz (``None``: no filter on that side).
        order: Butterworth order of each filter (attenuation ``6·order`` dB per octave).
        keep_level: rescale the output to the input's RMS level.

    Returns:
        float32, same shape as ``x``.
    """
    from scipy import signal  # imported here: scipy.signal takes about a second to import

    x = np.asarray(x, np.float64)
    y = x
    nyq = sr / 2
    if lowpass_hz is not None:
        if not 0 < lowpass_hz < nyq:
            raise ValueError(f"lowpass cutoff must be in (0, {nyq}) Hz, got {lowpass_hz}")
        y = signal.sosfilt(butterworth_sos(order, lowpass_hz, "lowpass", sr), y, axis=-1)
    if highpass_hz is not None:
        if not 0 < highpass_hz < nyq:
            raise ValueError(f"highpass cutoff must be in (0, {nyq}) Hz, got {highpass_hz}")
        y = signal.sosfilt(butterworth_sos(order, highpass_hz, "highpass", sr), y, axis=-1)
    return _rms_match(y, x) if keep_level else y.astype(np.float32)


def mu_law(x: np.ndarray, bits: int = 8, mu: float = 255.0) -> np.ndarray:
    """``x (..., T)`` through ``bits``-bit μ-law companding and back (G.711's curve), full scale at its peak:
    quiet passages keep their detail, loud ones carry coarse steps, as a digital phone line does. float32."""
    x = np.asarray(x, np.float64)
    peak = float(np.max(np.abs(x))) if x.size else 0.0
    if peak <= 0.0:
        return x.astype(np.float32)
    steps = 2 ** (bits - 1) - 1
    u = np.sign(x) * np.log1p(mu * np.abs(x) / peak) / np.log1p(mu)
    q = np.round(u * steps) / steps
    return (np.sign(q) * np.expm1(np.abs(q) * np.log1p(mu)) / mu * peak).astype(np.float32)


def phone_line(
    x: np.ndarray, low_hz: float = 300.0, high_hz: float = 3400.0, companding: bool = True, sr: int = SAMPLE_RATE
) -> np.ndarray:
    """``x (..., T)`` as a narrowband phone line passes it: band-limited to ``low_hz``-``high_hz`` (4th-order
    Butterworth each side), then 8-bit μ-law (:func:`mu_law`) with its quantization noise kept below 4 kHz, as an
    8 kHz line's is. Hold music over a call sounds like this. The input's RMS level is kept. float32."""
    y = band_limit(x, lowpass_hz=high_hz, highpass_hz=low_hz, sr=sr, keep_level=False)
    if companding:
        y = band_limit(mu_law(y), lowpass_hz=min(4000.0, 0.45 * sr), sr=sr, keep_level=False)
    return _rms_match(y, np.asarray(x, np.float64))


def random_narrow_channel(x: np.ndarray, rng: np.random.Generator, sr: int = SAMPLE_RATE) -> np.ndarray:
    """``x (T,)`` through a random narrow channel: half the draws a phone line (:func:`phone_line`, 200-400 Hz to
    3.2-3.6 kHz, μ-law on half of them), the other half a small loudspeaker (a radio, a TV, a laptop: 200-800 Hz
    to 3.5-7 kHz). For noise: music and voices heard through a phone or a speaker in the room are band-limited,
    where the recorded corpora are full band. Keeps the RMS level; float32."""
    if rng.random() < 0.5:
        low, high = float(rng.uniform(200.0, 400.0)), float(rng.uniform(3200.0, 3600.0))
        return phone_line(x, low, high, companding=bool(rng.random() < 0.5), sr=sr)
    low, high = float(rng.uniform(200.0, 800.0)), float(rng.uniform(3500.0, min(7000.0, 0.45 * sr)))
    return band_limit(x, lowpass_hz=high, highpass_hz=low, sr=sr)


def butterworth_sos(order: int, cutoff_hz: float, kind: str = "lowpass", sr: int = SAMPLE_RATE) -> np.ndarray:
    """Digital Butterworth low- or high-pass as second-order sections ``(ceil(order / 2), 6)``, the
    filter ``scipy.signal.butter(order, cutoff_hz, kind, fs=sr, output="sos")`` designs, in closed form
    (the augmentation draws a new cutoff for every example; scipy's general design took ~1 ms).

    The analog prototype's conjugate pole pairs sit at angles ``θ_i = π (order - 1 - 2i) / (2·order)``
    from the negative real axis, ``i < order // 2``; each pair is ``s² + 2 cos(θ_i) s + 1``
    (``Q_i = 1 / (2 cos θ_i)``), an odd order adds the real pole, ``s + 1``. The bilinear transform
    with the cutoff prewarped, ``K = tan(π f_c / sr)``, maps a pair to ``b = K² [1, 2, 1]`` (low-pass)
    or ``[1, -2, 1]`` (high-pass) over ``a = [1 + K/Q + K², 2 (K² - 1), 1 - K/Q + K²]``, normalised to
    ``a_0 = 1``.
    """
    if order < 1:
        raise ValueError(f"Butterworth order must be >= 1, got {order}")
    if kind not in ("lowpass", "highpass"):
        raise ValueError(f"kind must be 'lowpass' or 'highpass', got {kind!r}")
    if not 0 < cutoff_hz < sr / 2:
        raise ValueError(f"cutoff must be in (0, {sr / 2}) Hz, got {cutoff_hz}")
    k = math.tan(math.pi * cutoff_hz / sr)
    low = kind == "lowpass"
    sections = []
    if order % 2:  # the real pole: s + 1
        norm = 1 + k
        b = [k, k, 0.0] if low else [1.0, -1.0, 0.0]
        sections.append([*(c / norm for c in b), 1.0, (k - 1) / norm, 0.0])
    for i in range(order // 2):
        c = 2 * math.cos(math.pi * (order - 1 - 2 * i) / (2 * order))  # 1 / Q
        norm = 1 + c * k + k * k
        b = [k * k, 2 * k * k, k * k] if low else [1.0, -2.0, 1.0]
        sections.append([*(v / norm for v in b), 1.0, 2 * (k * k - 1) / norm, (1 - c * k + k * k) / norm])
    return np.array(sections)


def peaking_sos(freq_hz: float, gain_db: float, q: float = 1.0, sr: int = SAMPLE_RATE) -> np.ndarray:
    """One peaking-EQ biquad (RBJ cookbook) as a second-order section ``(1, 6)``: ``gain_db`` at
    ``freq_hz``, bandwidth set by ``q``."""
    a = 10.0 ** (gain_db / 40.0)
    w0 = 2 * np.pi * freq_hz / sr
    alpha = np.sin(w0) / (2 * q)
    b = np.array([1 + alpha * a, -2 * np.cos(w0), 1 - alpha * a])
    den = np.array([1 + alpha / a, -2 * np.cos(w0), 1 - alpha / a])
    return np.concatenate([b, den])[None] / den[0]


def peaking_eq(x: np.ndarray, freq_hz: float, gain_db: float, q: float = 1.0, sr: int = SAMPLE_RATE) -> np.ndarray:
    """One peaking-EQ biquad (:func:`peaking_sos`) applied to ``x (..., T)``. float32."""
    from scipy import signal

    return signal.sosfilt(peaking_sos(freq_hz, gain_db, q, sr), np.asarray(x, np.float64), axis=-1).astype(np.float32)


@dataclass
class MicResponseConfig:
    """Random microphone/channel response: band limits and peaking EQ bands (ranges uniform;
    frequencies log-uniform)."""

    lowpass_prob: float = 0.7
    lowpass_hz: tuple[float, float] = (3000.0, 7500.0)
    highpass_prob: float = 0.7
    highpass_hz: tuple[float, float] = (50.0, 400.0)
    order: int = 4
    n_peaks: tuple[int, int] = (0, 2)
    peak_hz: tuple[float, float] = (150.0, 6000.0)
    peak_gain_db: tuple[float, float] = (-8.0, 8.0)
    peak_q: tuple[float, float] = (0.5, 3.0)


def draw_mic_response(rng: np.random.Generator, config: MicResponseConfig | None = None,
                      sr: int = SAMPLE_RATE) -> np.ndarray:  # fmt: skip
    """A random microphone response as second-order sections ``(S, 6)`` (``S = 0``: flat): optional
    Butterworth low- and high-pass, then 0-2 peaking EQ bands (what :func:`random_mic_response` applies)."""
    cfg = config or MicResponseConfig()
    lp = _loguniform(rng, cfg.lowpass_hz) if rng.random() < cfg.lowpass_prob else None
    hp = _loguniform(rng, cfg.highpass_hz) if rng.random() < cfg.highpass_prob else None
    sections = [np.zeros((0, 6))]
    if lp is not None and lp < 0.49 * sr:
        sections.append(butterworth_sos(cfg.order, lp, "lowpass", sr))
    if hp is not None:
        sections.append(butterworth_sos(cfg.order, hp, "highpass", sr))
    for _ in range(int(rng.integers(cfg.n_peaks[0], cfg.n_peaks[1] + 1))):
        f0 = min(_loguniform(rng, cfg.peak_hz), 0.45 * sr)
        sections.append(peaking_sos(f0, float(rng.uniform(*cfg.peak_gain_db)), float(rng.uniform(*cfg.peak_q)), sr))
    return np.concatenate(sections)


def max_mic_sections(config: MicResponseConfig | None = None) -> int:
    """The most sections :func:`draw_mic_response` returns under ``config``."""
    cfg = config or MicResponseConfig()
    return 2 * ((cfg.order + 1) // 2) + cfg.n_peaks[1]


def apply_mic_response(x: np.ndarray, sos: np.ndarray) -> np.ndarray:
    """``x (T,)`` through the sections ``sos (S, 6)`` (float64, causal), back at ``x``'s RMS level. float32."""
    from scipy import signal

    x64 = np.asarray(x, np.float64)
    y = signal.sosfilt(sos, x64, axis=-1) if len(sos) else x64
    return _rms_match(y, x64)


def random_mic_response(
    x: np.ndarray, rng: np.random.Generator, config: MicResponseConfig | None = None, sr: int = SAMPLE_RATE
) -> np.ndarray:
    """A random microphone response (:func:`draw_mic_response`) on ``x (T,)``; the output keeps the
    input's RMS level. float32, same shape."""
    return apply_mic_response(x, draw_mic_response(rng, config, sr))


def _loguniform(rng: np.random.Generator, bounds: tuple[float, float]) -> float:
    return float(np.exp(rng.uniform(np.log(bounds[0]), np.log(bounds[1]))))


# --- SpecAugment-style masking on the waveform ---------------------------------------------------


def _stft_frames(t: int, hop: int) -> int:
    return 1 + -(-t // hop)  # frame k is centred on sample k*hop; the last covers sample t-1


def spec_mask(
    x: np.ndarray,
    time_spans: Sequence[tuple[int, int]] = (),
    freq_bands: Sequence[tuple[float, float]] = (),
    n_fft: int = 512,
    hop: int = 128,
    sr: int = SAMPLE_RATE,
) -> np.ndarray:
    """Zero time spans and frequency bands of ``x (T,)``'s STFT and resynthesise ``(T,)``.

    Periodic-Hann STFT (``n_fft``, ``hop``, frames centred on ``k·hop``), weighted overlap-add
    back. Every frame whose window touches a span ``[start, stop)`` (samples) is zeroed, so those
    samples come out exactly zero (the edges fade over ``n_fft/2`` samples on each side); every
    bin whose centre lies in a band ``[low, high]`` (Hz) is zeroed in all frames. With no masks the
    output equals the input (to float rounding). Returns float32 ``(T,)``.
    """
    x = _mono(x)
    t = x.shape[0]
    if n_fft % hop:
        raise ValueError(f"n_fft ({n_fft}) must be a multiple of hop ({hop})")
    if t == 0 or (not time_spans and not freq_bands):
        return x.astype(np.float32, copy=True)
    import scipy.fft

    half = n_fft // 2
    n_frames = _stft_frames(t, hop)
    win, inverse_wss = _stft_windows(t, n_fft, hop)
    xp = np.zeros((n_frames - 1) * hop + n_fft, np.float32)
    xp[half : half + t] = x
    frames = np.lib.stride_tricks.sliding_window_view(xp, n_fft)[::hop] * win
    spec = scipy.fft.rfft(frames, axis=-1)  # float32 in, complex64 out (numpy's would be float64)
    starts = np.arange(n_frames) * hop - half  # first sample of each frame, in x's coordinates
    for a, b in time_spans:
        if b > a:  # the window is non-zero on samples start+1 .. start+n_fft-1
            spec[(starts + 1 < b) & (starts + n_fft - 1 >= a)] = 0
    freqs = np.fft.rfftfreq(n_fft, 1 / sr)
    for lo, hi in freq_bands:
        spec[:, (freqs >= lo) & (freqs <= hi)] = 0
    out = scipy.fft.irfft(spec, n=n_fft, axis=-1) * win
    return (_overlap_add(out, hop)[half : half + t] * inverse_wss).astype(np.float32, copy=False)


@functools.lru_cache(maxsize=16)
def _stft_windows(t: int, n_fft: int, hop: int) -> tuple[np.ndarray, np.ndarray]:
    """The periodic Hann window ``(n_fft,)`` of :func:`spec_mask` and ``1 / Σ window²`` over the ``t`` output
    samples ``(t,)`` (the weighted overlap-add's normalisation), float32; the same for every example of a length."""
    win = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    half, n_frames = n_fft // 2, _stft_frames(t, hop)
    wss = _overlap_add(np.broadcast_to(win**2, (n_frames, n_fft)), hop)[half : half + t]
    return win.astype(np.float32), (1.0 / np.maximum(wss, 1e-12)).astype(np.float32)


def _overlap_add(frames: np.ndarray, hop: int) -> np.ndarray:
    """``(F, n)`` frames placed every ``hop`` samples and summed: ``((F - 1) hop + n,)``; ``n`` a multiple of
    ``hop``, so the sum is ``n / hop`` shifted block additions (no loop over frames)."""
    n_frames, n = frames.shape
    r = n // hop
    out = np.zeros((n_frames + r - 1, hop), frames.dtype)
    blocks = frames.reshape(n_frames, r, hop)
    for j in range(r):
        out[j : j + n_frames] += blocks[:, j]
    return out.reshape(-1)


@dataclass
class SpecMaskConfig:
    """Random masks: counts (inclusive ranges), widths (uniform), STFT size."""

    n_time: tuple[int, int] = (1, 2)
    time_s: tuple[float, float] = (0.01, 0.06)
    n_freq: tuple[int, int] = (1, 2)
    freq_hz: tuple[float, float] = (100.0, 800.0)
    n_fft: int = 512
    hop: int = 128


def sample_spec_masks(
    length: int, rng: np.random.Generator, config: SpecMaskConfig | None = None, sr: int = SAMPLE_RATE
) -> tuple[list[tuple[int, int]], list[tuple[float, float]]]:
    """Random ``(time_spans, freq_bands)`` for :func:`spec_mask`: spans in samples ``[start, stop)``
    inside ``[0, length)``, bands in Hz ``[low, high]`` inside ``[0, sr/2]``."""
    cfg = config or SpecMaskConfig()
    spans = []
    for _ in range(int(rng.integers(cfg.n_time[0], cfg.n_time[1] + 1))):
        w = min(length, round(rng.uniform(*cfg.time_s) * sr))
        a = int(rng.integers(0, length - w + 1))
        spans.append((a, a + w))
    bands = []
    for _ in range(int(rng.integers(cfg.n_freq[0], cfg.n_freq[1] + 1))):
        w = min(sr / 2, float(rng.uniform(*cfg.freq_hz)))
        lo = float(rng.uniform(0, sr / 2 - w))
        bands.append((lo, lo + w))
    return spans, bands


def random_spec_mask(
    x: np.ndarray, rng: np.random.Generator, config: SpecMaskConfig | None = None, sr: int = SAMPLE_RATE
) -> np.ndarray:
    """:func:`spec_mask` with masks from :func:`sample_spec_masks`. float32 ``(T,)``."""
    cfg = config or SpecMaskConfig()
    spans, bands = sample_spec_masks(np.shape(x)[-1], rng, cfg, sr)
    return spec_mask(x, spans, bands, cfg.n_fft, cfg.hop, sr)


# --- pipelines -----------------------------------------------------------------------------------


@dataclass
class RirSourceConfig:
    """Where reverb comes from when a pipeline is built from a config: ``simulated`` shoebox RIRs
    (how many, ``seed``, ``room`` ranges, cached in ``cache_dir`` or the default cache) and/or a
    folder of ``measured`` RIR files. Both empty (the default): no reverb."""

    simulated: int = 0
    seed: int = 0
    room: RoomSimConfig = field(default_factory=RoomSimConfig)
    cache_dir: str = ""
    measured: str = ""


def build_rir_bank(config: RirSourceConfig) -> RirBank | None:
    """The :class:`RirBank` a :class:`RirSourceConfig` describes, or ``None`` when it names no RIRs.

    Simulating is slow the first time (about a second per RIR), then read from the cache."""
    banks = []
    if config.simulated > 0:
        banks.append(RirBank.simulated(config.simulated, config.seed, config.room, config.cache_dir or None))
    if config.measured:
        banks.append(RirBank.from_folder(config.measured))
    if not banks:
        return None
    bank = banks[0]
    for b in banks[1:]:
        bank = bank + b
    return bank


@dataclass
class NoiseSourceConfig:
    """Which noise to add: relative weights of the sources (a source that is not available,
    e.g. no :class:`NoiseBank` given, is skipped) and their ranges."""

    bank: float = 1.0
    colored: float = 0.2
    babble: float = 0.2
    music: float = 0.0  # procedural music (noise.music_like)
    hum: float = 0.0  # mains hum, buzz and clicks (noise.hum_clicks)
    tonal: float = 0.0  # sirens, beeps, whistles, chirps, animal-like calls (noise.tonal_events)
    ambient: float = 0.0  # drifting wind, rain, fans and engines (noise.ambience)
    colored_exponent: tuple[float, float] = (-2.0, 2.0)
    babble_talkers: tuple[int, int] = (3, 6)
    # Perturbations that make a few recordings many (each off at 0; no random draw then, so recipes
    # without them keep their exact audio): played faster or slower (a tap's or a fan's texture moves
    # up or down in frequency), a random microphone/room EQ, or two drawn noises summed at -10..10 dB.
    speed_prob: float = 0.0
    speed_factors: tuple[float, float] = (0.7, 1.4)
    eq_prob: float = 0.0
    pair_prob: float = 0.0
    # the drawn noise through a narrow channel (random_narrow_channel): a phone line or a small loudspeaker,
    # as hold music over a call or a radio in the room reach a microphone
    channel_prob: float = 0.0


@dataclass
class KwsAugmentConfig:
    """Keyword-spotting augmentation (each step applied with its probability, in this order):
    speed (talker perturbation), shift, reverb, noise at an SNR, microphone response, gain, masking,
    clipping to [-1, 1].

    ``silence_noise_dbfs``: level range of noise added to silent clips (where an SNR means nothing).
    """

    speed_prob: float = 0.0
    speed_factors: tuple[float, float] = (0.9, 1.1)  # log-uniform playback-rate range
    shift_prob: float = 1.0
    max_shift_s: float = 0.1
    circular_shift: bool = False
    reverb_prob: float = 0.3
    rirs: RirSourceConfig = field(default_factory=RirSourceConfig)
    noise_prob: float = 0.8
    snr_db: tuple[float, float] = (0.0, 20.0)
    silence_noise_dbfs: tuple[float, float] = (-60.0, -25.0)
    noise: NoiseSourceConfig = field(default_factory=NoiseSourceConfig)
    mic_prob: float = 0.3
    mic: MicResponseConfig = field(default_factory=MicResponseConfig)
    gain_prob: float = 1.0
    gain_db: tuple[float, float] = (-6.0, 6.0)
    mask_prob: float = 0.0
    mask: SpecMaskConfig = field(default_factory=SpecMaskConfig)
    clip: bool = True


@dataclass
class DenoiseAugmentConfig:
    """Denoising pairs per Centaurus App. E.2 (SNR -5..15 dB, noisy level -35..-15 dBFS, masking on
    the noisy input only), plus optional room reverb on the clean speech.

    ``reverb_target``: what the model should output for reverberated speech: ``early`` (direct
    sound + the first ``early_s`` of reflections), ``dry`` (the clean source) or ``reverberant``.
    """

    snr_db: tuple[float, float] = (-5.0, 15.0)
    level_dbfs: tuple[float, float] = (-35.0, -15.0)
    max_peak: float = 1.0
    noise: NoiseSourceConfig = field(default_factory=lambda: NoiseSourceConfig(bank=1.0, colored=0.1, babble=0.1))
    reverb_prob: float = 0.2
    rirs: RirSourceConfig = field(default_factory=RirSourceConfig)
    reverb_target: Literal["early", "dry", "reverberant"] = "early"
    early_s: float = 0.05
    mask_prob: float = 1.0
    mask: SpecMaskConfig = field(default_factory=SpecMaskConfig)
    # the speech itself through a narrow channel (random_narrow_channel; the target too: a phone call's band
    # cannot be restored), so that band-limited sound is not by itself a sign of noise (draws only when > 0)
    channel_prob: float = 0.0


def draw_noise(
    length: int,
    rng: np.random.Generator,
    config: NoiseSourceConfig,
    noise_bank: NoiseBank | None = None,
    babble_speech: SpeechSource | None = None,
    music: Callable[[int, np.random.Generator], np.ndarray] | None = None,
) -> np.ndarray:
    """One ``(length,)`` float32 noise from a source picked by weight among those available, perturbed
    as ``config`` says (speed, EQ, a second noise summed in, a narrow channel). ``music``: ``(length, rng) -> clip`` for
    the music kind (e.g. a :class:`~edgessm.data.noise.MusicBank`; default: rendered anew)."""
    noise = _perturbed_noise(length, rng, config, noise_bank, babble_speech, music)
    if config.pair_prob and rng.random() < config.pair_prob:
        other = _perturbed_noise(length, rng, config, noise_bank, babble_speech, music)
        rel = 10 ** (float(rng.uniform(-10.0, 10.0)) / 20)
        noise = noise / (np.sqrt(_power(noise)) + 1e-6) + rel * other / (np.sqrt(_power(other)) + 1e-6)
    if config.eq_prob and rng.random() < config.eq_prob:
        noise = random_mic_response(noise, rng)
    if config.channel_prob and rng.random() < config.channel_prob:
        noise = random_narrow_channel(noise, rng)
    return np.asarray(noise, np.float32)


def _perturbed_noise(length, rng, config, noise_bank, babble_speech, music=None) -> np.ndarray:
    if not (config.speed_prob and rng.random() < config.speed_prob):
        return _one_noise(length, rng, config, noise_bank, babble_speech, music)
    from .audio import resample

    factor = _loguniform(rng, config.speed_factors)
    source = _one_noise(int(np.ceil(length * factor)) + 16, rng, config, noise_bank, babble_speech, music)
    y = resample(source, round(SAMPLE_RATE * factor), SAMPLE_RATE)[:length]
    return np.pad(y, (0, length - y.shape[0])) if y.shape[0] < length else y


def _one_noise(length, rng, config, noise_bank, babble_speech, music=None) -> np.ndarray:
    weights = np.array(
        [
            config.bank if noise_bank is not None else 0.0,
            config.colored,
            config.babble if babble_speech is not None else 0.0,
            config.music,
            config.hum,
            config.tonal,  # new kinds go last: a recipe without them keeps its exact draws
            config.ambient,
        ]
    )
    if not weights.sum() > 0:
        raise ValueError("no noise source available: give a NoiseBank or babble speech, or a colored weight > 0")
    kind = int(rng.choice(len(weights), p=weights / weights.sum()))
    if kind == 0:
        return noise_bank.sample(length, rng)
    if kind == 1:
        return colored_noise(length, rng, float(rng.uniform(*config.colored_exponent)))
    if kind == 2:
        return babble(babble_speech, length, rng, talkers=config.babble_talkers)
    if kind == 3:
        return music(length, rng) if music is not None else music_like(length, rng)
    if kind == 4:
        return hum_clicks(length, rng)
    if kind == 5:
        return tonal_events(length, rng)
    return ambience(length, rng)


class KwsAugment:
    """``(audio (T,), rng) -> augmented (T,)`` float32 for keyword spotting (see :class:`KwsAugmentConfig`).

    Args:
        config: the probabilities and ranges.
        noise_bank: real noise recordings (``None``: colored noise and babble only).
        rir_bank: room impulse responses (``None``: the bank ``config.rirs`` names, if any; else no reverb).
        babble_speech: speech for babble noise (clips or a callable ``rng -> clip``).
        sr: sample rate.
    """

    def __init__(
        self,
        config: KwsAugmentConfig | None = None,
        *,
        noise_bank: NoiseBank | None = None,
        rir_bank: RirBank | None = None,
        babble_speech: SpeechSource | None = None,
        sr: int = SAMPLE_RATE,
        music: Callable[[int, np.random.Generator], np.ndarray] | None = None,
    ) -> None:
        self.config = config or KwsAugmentConfig()
        rir_bank = rir_bank if rir_bank is not None else build_rir_bank(self.config.rirs)
        self.noise_bank, self.rir_bank, self.babble_speech, self.sr = noise_bank, rir_bank, babble_speech, sr
        self.music = music

    def __call__(self, audio: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return self.finish(self.plan(audio, rng))

    def plan(self, audio: np.ndarray, rng: np.random.Generator) -> KwsMix:
        """Every random draw of one augmentation (in ``__call__``'s order) with speed and shift done:
        what :meth:`finish` applies here, or :class:`edgessm.train.device_mix.DeviceMixer` to a batch."""
        cfg = self.config
        x = np.asarray(_mono(audio), np.float32)
        t = x.shape[0]
        if cfg.speed_prob and rng.random() < cfg.speed_prob:  # no draw when off: old recipes keep their audio
            x = random_speed(x, rng, cfg.speed_factors, self.sr)
        if rng.random() < cfg.shift_prob:
            x = random_shift(x, rng, round(cfg.max_shift_s * self.sr), cfg.circular_shift)
        mix = KwsMix(speech=x)
        if self.rir_bank is not None and rng.random() < cfg.reverb_prob:
            mix.rir = self.rir_bank.sample_index(rng)
        if rng.random() < cfg.noise_prob:
            mix.noise = draw_noise(t, rng, cfg.noise, self.noise_bank, self.babble_speech, self.music)
            mix.level_u = float(rng.random())  # rng.uniform(lo, hi) is lo + (hi - lo) * rng.random()
        if rng.random() < cfg.mic_prob:
            mix.mic = draw_mic_response(rng, cfg.mic, self.sr)
        if rng.random() < cfg.gain_prob:
            mix.gain_db = float(rng.uniform(*cfg.gain_db))
        if rng.random() < cfg.mask_prob:
            mix.mask = sample_spec_masks(t, rng, cfg.mask, self.sr)
        return mix

    def finish(self, mix: KwsMix) -> np.ndarray:
        """The augmented clip ``(T,)`` float32 of a :meth:`plan`: reverb, noise at the drawn SNR (at the
        drawn level on silence), microphone response, gain, masks, clipping."""
        cfg = self.config
        x = mix.speech
        if mix.rir >= 0:
            x = reverb(x, self.rir_bank[mix.rir], self.rir_bank.directs[mix.rir])
        if mix.noise is not None:
            if _power(x) > _SILENT_POWER:
                x = add_noise(x, mix.noise, _uniform(cfg.snr_db, mix.level_u))
            else:
                x = (x + set_level(mix.noise, _uniform(cfg.silence_noise_dbfs, mix.level_u))).astype(np.float32)
        if mix.mic is not None:
            x = apply_mic_response(x, mix.mic)
        if mix.gain_db is not None:
            x = apply_gain(x, mix.gain_db)
        if mix.mask is not None:
            x = spec_mask(x, *mix.mask, cfg.mask.n_fft, cfg.mask.hop, self.sr)
        if cfg.clip:
            x = np.clip(x, -1.0, 1.0)
        return x.astype(np.float32, copy=False)


@dataclass
class KwsMix:
    """One :class:`KwsAugment` draw after speed and shift: the clip and what is still to be applied to it.

    ``speech (T,)`` float32; ``rir`` the RIR bank index (-1: no reverb); ``noise (T,)`` the drawn noise
    (``None``: none) mixed at the SNR ``lo + (hi - lo) * level_u`` of ``snr_db`` (the level of
    ``silence_noise_dbfs`` on a silent clip); ``mic (S, 6)`` a microphone response's sections (``None``:
    none); ``gain_db`` (``None``: none); ``mask`` (time spans, frequency bands) (``None``: none)."""

    speech: np.ndarray
    rir: int = -1
    noise: np.ndarray | None = None
    level_u: float = 0.0
    mic: np.ndarray | None = None
    gain_db: float | None = None
    mask: tuple[list[tuple[int, int]], list[tuple[float, float]]] | None = None


def _uniform(bounds: tuple[float, float], u: float) -> float:
    return bounds[0] + (bounds[1] - bounds[0]) * u


class DenoiseAugment:
    """``(clean (T,), rng) -> (noisy, target)`` float32 pairs for denoising (see :class:`DenoiseAugmentConfig`).

    Steps: optionally the clean speech through a narrow channel (``channel_prob``; the target follows),
    optional reverb on it (the target follows ``reverb_target``), a noise from the sources,
    :func:`mix_for_denoising` (SNR and level per App. E.2, clip-safe), then masking of the noisy input
    only. Pass ``noise=`` to a call (or use :meth:`mix`) to use a given noise clip instead of the
    sources. ``rir_bank=None`` uses the bank ``config.rirs`` names, if any.
    """

    def __init__(
        self,
        config: DenoiseAugmentConfig | None = None,
        *,
        noise_bank: NoiseBank | None = None,
        rir_bank: RirBank | None = None,
        babble_speech: SpeechSource | None = None,
        music: Callable[[int, np.random.Generator], np.ndarray] | None = None,
        sr: int = SAMPLE_RATE,
    ) -> None:
        self.config = config or DenoiseAugmentConfig()
        rir_bank = rir_bank if rir_bank is not None else build_rir_bank(self.config.rirs)
        self.noise_bank, self.rir_bank, self.babble_speech, self.sr = noise_bank, rir_bank, babble_speech, sr
        self.music = music  # the music kind's source, ``(length, rng) -> clip`` (None: procedural)

    def __call__(
        self, clean: np.ndarray, rng: np.random.Generator, noise: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        cfg = self.config
        speech = np.asarray(_mono(clean, "clean"), np.float32)
        if cfg.channel_prob and rng.random() < cfg.channel_prob:
            speech = random_narrow_channel(speech, rng, self.sr)
        target = speech
        if self.rir_bank is not None and rng.random() < cfg.reverb_prob:
            reverberant, early = self.rir_bank.apply_pair(speech, rng, cfg.early_s)
            target = {"early": early, "dry": speech, "reverberant": reverberant}[cfg.reverb_target]
            speech = reverberant
        if noise is None:
            noise = draw_noise(speech.shape[0], rng, cfg.noise, self.noise_bank, self.babble_speech, self.music)
        noisy, target = mix_for_denoising(
            speech, noise, rng, cfg.snr_db, cfg.level_dbfs, target=target, max_peak=cfg.max_peak
        )
        if rng.random() < cfg.mask_prob:
            noisy = random_spec_mask(noisy, rng, cfg.mask, self.sr)
        return noisy, target

    def mix(self, clean: np.ndarray, noise: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``(clean (T,), noise (T,), rng) -> (noisy, target)``: the pipeline with the given noise."""
        return self(clean, rng, noise=noise)


def build_clip_augment(
    settings: Mapping[str, Any] | None,
    noises: Sequence[np.ndarray] | None = None,
    *,
    babble_speech: SpeechSource | None = None,
    music: Callable[[int, np.random.Generator], np.ndarray] | None = None,
) -> KwsAugment | None:
    """A :class:`KwsAugment` from a config's ``[augment]`` table (keys of :class:`KwsAugmentConfig`),
    or ``None`` when the table is empty.

    ``noises``: noise clips (any indexable collection of ``(T_i,)`` float arrays, e.g. an
    ``AudioStore``), wrapped without copying into a :class:`NoiseBank`.
    """
    if not settings:
        return None
    bank = NoiseBank.wrap(noises) if noises is not None and len(noises) else None
    return KwsAugment(config_from_dict(KwsAugmentConfig, settings), noise_bank=bank, babble_speech=babble_speech,
                      music=music)  # fmt: skip


def build_denoise_mixer(
    settings: Mapping[str, Any] | None, *, babble_speech: SpeechSource | None = None
) -> Callable[[np.ndarray, np.ndarray, np.random.Generator], tuple[np.ndarray, np.ndarray]]:
    """``(clean, noise, rng) -> (noisy, target)`` per App. E.2 from a config's ``[augment]`` table
    (keys of :class:`DenoiseAugmentConfig`; an empty table gives the paper's defaults). The result
    is a bound method of a :class:`DenoiseAugment`, so it pickles into DataLoader workers."""
    return DenoiseAugment(config_from_dict(DenoiseAugmentConfig, settings), babble_speech=babble_speech).mix


# --- configs from plain data (TOML) --------------------------------------------------------------

C = TypeVar("C")


def config_from_dict(cls: type[C], data: Mapping[str, Any] | None) -> C:
    """Build config dataclass ``cls`` from a (TOML) mapping: nested tables fill nested configs,
    lists become tuples, missing keys keep their defaults; an unknown key raises ``ValueError``."""
    return _updated(cls(), data or {})


def _updated(default: C, data: Mapping[str, Any]) -> C:
    known = {f.name for f in dataclasses.fields(default)}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"unknown {type(default).__name__} keys {sorted(unknown)}; valid keys: {sorted(known)}")
    values = {}
    for key, value in data.items():
        current = getattr(default, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, Mapping):
                raise ValueError(f"{type(default).__name__}.{key} must be a table, got {value!r}")
            value = _updated(current, value)
        elif isinstance(current, tuple):
            value = tuple(value)
        values[key] = value
    return dataclasses.replace(default, **values)
