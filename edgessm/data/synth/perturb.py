"""Speaker-like perturbations of synthetic speech, in numpy, fully determined by a :class:`Perturbation`.

Applied in :func:`render` after resampling to 16 kHz: pitch shift that keeps formants (phase-vocoder
stretch + resampling), vocal-tract-length perturbation (the cepstral spectral envelope warped in
frequency while the harmonics stay put), speed perturbation (resampling: tempo, pitch and formants
together, as in Kaldi), a random EQ (shelf and peaking biquads), silence trimming with a margin, and
level normalisation. All signals are float32 mono ``(T,)`` in [-1, 1]; rates are in Hz.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import soxr
from scipy.ndimage import uniform_filter1d
from scipy.signal import butter, sosfilt

from edgessm.data.audio import SAMPLE_RATE, resample

N_FFT = 512
HOP = 128
SMOOTH_BINS = 17  # 531 Hz of power averaging before the log (wider than the harmonic spacing)
LIFTER = 28  # cepstral coefficients kept for the envelope (1.75 ms at 16 kHz: below a 500 Hz pitch period)
MAX_ENVELOPE_GAIN_DB = 18.0


@dataclass(frozen=True)
class Perturbation:
    """One utterance's perturbation parameters.

    Attributes:
        speed: resampling speed factor (> 1: shorter and higher).
        pitch: pitch shift in semitones, formants kept.
        vtlp: formant (vocal tract length) warp factor (> 1: formants move up, a shorter vocal tract).
        eq: biquads as ``(kind, frequency Hz, gain dB, Q)``, kind ``lowshelf`` / ``peaking`` / ``highshelf``.
        level_db: RMS of the active (non-silent) part in dBFS.
        margin: silence kept before and after the speech, seconds.
    """

    speed: float
    pitch: float
    vtlp: float
    eq: tuple[tuple[str, float, float, float], ...]
    level_db: float
    margin: tuple[float, float]


def sample_perturbation(rng: np.random.Generator, pitch_range: float = 2.0) -> Perturbation:
    """Draw parameters; ``pitch_range`` is the +/- semitone span (wider for voices whose engine has no pitch
    control). One fixed-size draw, so equal generator states give equal perturbations."""
    u = iter(rng.random(21).tolist())
    r = lambda lo, hi: round(lo + (hi - lo) * next(u), 4)  # noqa: E731
    speed, pitch, vtlp = r(0.9, 1.1), r(-pitch_range, pitch_range), r(0.88, 1.12)
    bands = [
        ("lowshelf", r(80, 400), r(-8, 6), 0.7071),
        ("peaking", round(300 * (3500 / 300) ** next(u), 1), r(-8, 8), r(0.7, 2.5)),  # log-uniform frequency
        ("highshelf", r(2500, 6000), r(-12, 5), 0.7071),
        ("peaking", round(150 * (6000 / 150) ** next(u), 1), r(-6, 6), r(0.7, 3.0)),
    ]
    n_bands = 2 + int(next(u) < 0.5)
    keep = sorted(sorted(range(len(bands)), key=lambda i: next(u))[:n_bands])  # a random subset, in order
    level, before, after = r(-30, -16), r(0.05, 0.25), r(0.05, 0.3)
    return Perturbation(speed, pitch, vtlp, tuple(bands[i] for i in keep), level, (before, after))


# ---- STFT tools ----

_WINDOW = np.hanning(N_FFT + 1)[:-1].astype(np.float64)  # periodic Hann


def stft(x: np.ndarray, n_fft: int = N_FFT, hop: int = HOP) -> np.ndarray:
    """Complex STFT ``(frames, n_fft // 2 + 1)`` of ``x (T,)``, centred (zero padding of ``n_fft // 2``)."""
    pad = n_fft // 2
    xp = np.pad(np.asarray(x, dtype=np.float64), (pad, pad + n_fft))
    n_frames = 1 + (len(x) + 2 * pad - n_fft) // hop + 1
    frames = np.lib.stride_tricks.sliding_window_view(xp, n_fft)[: n_frames * hop : hop]
    return np.fft.rfft(frames * _WINDOW, axis=-1)


def istft(spec: np.ndarray, length: int, n_fft: int = N_FFT, hop: int = HOP) -> np.ndarray:
    """Inverse of :func:`stft` (weighted overlap-add), cut or zero-padded to ``length`` samples."""
    frames = np.fft.irfft(spec, n=n_fft, axis=-1) * _WINDOW
    n_frames, ratio = frames.shape[0], n_fft // hop
    out = np.zeros((n_frames + ratio - 1, hop))
    norm = np.zeros((n_frames + ratio - 1, hop))
    for j in range(ratio):
        out[j : j + n_frames] += frames[:, j * hop : (j + 1) * hop]
        norm[j : j + n_frames] += _WINDOW[j * hop : (j + 1) * hop] ** 2
    y = (out.reshape(-1) / np.maximum(norm.reshape(-1), 1e-3))[n_fft // 2 :]
    return np.pad(y, (0, max(0, length - len(y))))[:length]


def time_stretch(x: np.ndarray, factor: float) -> np.ndarray:
    """Phase-vocoder time stretch: ``round(len(x) * factor)`` samples, pitch unchanged."""
    spec = stft(x)
    steps = np.arange(0.0, spec.shape[0] - 1, 1.0 / factor)
    idx = steps.astype(np.int64)
    frac = (steps - idx)[:, None]
    mag = (1 - frac) * np.abs(spec[idx]) + frac * np.abs(spec[idx + 1])
    omega = 2 * np.pi * HOP * np.arange(spec.shape[1]) / N_FFT
    angle = np.angle(spec)
    dphi = angle[idx + 1] - angle[idx] - omega
    dphi -= 2 * np.pi * np.round(dphi / (2 * np.pi))
    advance = np.cumsum(omega + dphi, axis=0)
    phase = angle[0] + np.vstack([np.zeros((1, spec.shape[1])), advance[:-1]])
    return istft(mag * np.exp(1j * phase), round(len(x) * factor))


def warp_source_bins(factor: float, n_bins: int, boundary: float = 0.8) -> tuple[np.ndarray, np.ndarray]:
    """For each output bin g, the (fractional) input bin whose envelope the piecewise-linear VTLP warp
    (Jaitly & Hinton 2013; 0 and Nyquist fixed) moves to g, as ``(lower bin, weight of the upper bin)``."""
    f = np.arange(n_bins, dtype=np.float64)
    nyq = n_bins - 1
    knee = boundary * nyq * min(factor, 1.0) / factor
    warped = np.where(f <= knee, f * factor, nyq - (nyq - knee * factor) / (nyq - knee) * (nyq - f))
    source = np.interp(f, warped, f)  # inverse of the warp
    lo = np.clip(np.floor(source).astype(np.int64), 0, nyq - 1)
    return lo, source - lo


def envelope(spec: np.ndarray) -> np.ndarray:
    """Log (natural) spectral envelope ``(frames, bins)`` of an STFT: the power is averaged over 530 Hz,
    which fills the valleys between harmonics (F0 up to ~450 Hz), floored 60 dB under the frame's peak (so
    band edges such as a resampler's cut-off do not turn into huge gains), then cepstrally smoothed."""
    power = np.maximum(uniform_filter1d(np.abs(spec) ** 2, size=SMOOTH_BINS, axis=-1, mode="nearest"), 1e-14)
    power = np.maximum(power, power.max(axis=-1, keepdims=True) * 1e-6)
    cep = np.fft.irfft(0.5 * np.log(power), n=N_FFT, axis=-1)
    cep[:, LIFTER:-LIFTER] = 0.0
    return np.fft.rfft(cep, axis=-1).real


def warp_formants(x: np.ndarray, factor: float) -> np.ndarray:
    """Move the spectral envelope (formants) by ``factor`` and keep the harmonics (pitch): each frame is
    multiplied by warped envelope / envelope (see :func:`envelope`)."""
    if abs(factor - 1.0) < 1e-4:
        return x
    spec = stft(x)
    env = envelope(spec)
    lo, w = warp_source_bins(factor, env.shape[1])
    warped = env[:, lo] * (1 - w) + env[:, lo + 1] * w  # gathers, not a matmul: no BLAS threads in workers
    limit = MAX_ENVELOPE_GAIN_DB / 20 * np.log(10)
    gain = np.exp(np.clip(warped - env, -limit, limit))
    return istft(spec * gain, len(x))


def pitch_formant_shift(x: np.ndarray, sr: int, semitones: float, formant_factor: float) -> np.ndarray:
    """Shift pitch by ``semitones`` and formants by ``formant_factor``, duration unchanged.

    Stretching by p = 2^(semitones/12) then resampling by 1/p raises every frequency by p; the envelope
    warp by ``formant_factor / p`` then puts the formants where asked.
    """
    p = 2.0 ** (semitones / 12.0)
    y = x
    if abs(semitones) > 1e-3:
        y = soxr.resample(time_stretch(x, p), sr * p, sr, quality="HQ")
        y = np.pad(y, (0, max(0, len(x) - len(y))))[: len(x)]
    return warp_formants(y, formant_factor / p)


def change_speed(x: np.ndarray, sr: int, factor: float) -> np.ndarray:
    """Speed perturbation by resampling: ``len(x) / factor`` samples, all frequencies times ``factor``."""
    if abs(factor - 1.0) < 1e-6:
        return x
    return soxr.resample(x, sr * factor, sr, quality="HQ")


def biquad(kind: str, freq: float, gain_db: float, q: float, sr: int) -> np.ndarray:
    """One RBJ-cookbook biquad as a second-order section ``(6,)``: ``lowshelf``, ``highshelf`` (Q sets the
    slope; 0.7071 is the usual shelf) or ``peaking``."""
    a = 10.0 ** (gain_db / 40.0)
    w0 = 2 * np.pi * min(freq, 0.45 * sr) / sr
    cw, alpha = np.cos(w0), np.sin(w0) / (2 * q)
    if kind == "peaking":
        b = [1 + alpha * a, -2 * cw, 1 - alpha * a]
        den = [1 + alpha / a, -2 * cw, 1 - alpha / a]
    elif kind in ("lowshelf", "highshelf"):
        s = 2 * np.sqrt(a) * alpha
        sign = 1 if kind == "lowshelf" else -1
        b = [a * ((a + 1) - sign * (a - 1) * cw + s), sign * 2 * a * ((a - 1) - sign * (a + 1) * cw)]
        b.append(a * ((a + 1) - sign * (a - 1) * cw - s))
        den = [(a + 1) + sign * (a - 1) * cw + s, -sign * 2 * ((a - 1) + sign * (a + 1) * cw)]
        den.append((a + 1) + sign * (a - 1) * cw - s)
    else:
        raise ValueError(f"unknown biquad kind {kind!r}")
    return np.array([*b, *den]) / den[0]


_HIGHPASS = butter(2, 50.0, btype="highpass", fs=SAMPLE_RATE, output="sos")


def equalize(x: np.ndarray, sr: int, bands: tuple[tuple[str, float, float, float], ...]) -> np.ndarray:
    """A 50 Hz high-pass (engines leave DC and rumble) followed by the given biquads."""
    sos = np.vstack([_HIGHPASS, *[biquad(k, f, g, q, sr)[None] for k, f, g, q in bands]])
    return sosfilt(sos, x)


# ---- silence and level ----


def frame_db(x: np.ndarray, sr: int, frame_s: float = 0.02, hop_s: float = 0.01) -> np.ndarray:
    """Frame energies in dBFS ``(frames,)`` with 20 ms frames every 10 ms."""
    frame, hop = int(frame_s * sr), int(hop_s * sr)
    if len(x) < frame:
        x = np.pad(x, (0, frame - len(x)))
    c = np.concatenate([[0.0], np.cumsum(np.asarray(x, np.float64) ** 2)])
    starts = np.arange(0, len(x) - frame + 1, hop)
    return 10 * np.log10((c[starts + frame] - c[starts]) / frame + 1e-12)


def active_span(x: np.ndarray, sr: int, rel_db: float = -40.0, floor_db: float = -65.0) -> tuple[int, int] | None:
    """First and last sample of the speech: frames within ``rel_db`` of the loudest and above ``floor_db``."""
    db = frame_db(x, sr)
    active = np.flatnonzero(db > max(db.max() + rel_db, floor_db))
    if active.size == 0:
        return None
    hop, frame = int(0.01 * sr), int(0.02 * sr)
    return int(active[0] * hop), int(min(len(x), active[-1] * hop + frame))


def trim(x: np.ndarray, sr: int, before: float, after: float) -> np.ndarray:
    """Cut leading/trailing silence keeping ``before`` / ``after`` seconds (zero-padded where the engine left
    less); raises ``ValueError`` for silent audio."""
    span = active_span(x, sr)
    if span is None:
        raise ValueError("the engine produced silence")
    b, a = round(before * sr), round(after * sr)
    start, end = span[0] - b, span[1] + a
    y = x[max(0, start) : min(len(x), end)]
    return np.pad(y, (max(0, -start), max(0, end - len(x))))


def normalize(x: np.ndarray, sr: int, level_db: float, peak: float = 0.95) -> np.ndarray:
    """Scale so the active frames' RMS is ``level_db`` dBFS, then down if the peak would exceed ``peak``."""
    db = frame_db(x, sr)
    active = db[db > db.max() - 40.0]
    rms_db = 10 * np.log10(np.mean(10 ** (active / 10)) + 1e-12)
    y = x * 10 ** ((level_db - rms_db) / 20)
    top = np.abs(y).max()
    return y * (peak / top) if top > peak else y


def render(audio: np.ndarray, sr_in: int, p: Perturbation) -> np.ndarray:
    """An engine's output ``(T,)`` at ``sr_in`` Hz -> the perturbed, trimmed, normalised clip ``(T',)``
    float32 at 16 kHz."""
    x = resample(np.asarray(audio, dtype=np.float32), sr_in, SAMPLE_RATE).astype(np.float64)
    sr = SAMPLE_RATE
    x = trim(x, sr, 0.2, 0.2)  # coarse: less to process, and room for the filters' tails
    x = pitch_formant_shift(x, sr, p.pitch, p.vtlp)
    x = change_speed(x, sr, p.speed)
    x = equalize(x, sr, p.eq)
    x = trim(x, sr, *p.margin)
    return normalize(x, sr, p.level_db).astype(np.float32)
