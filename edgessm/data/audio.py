"""Audio files in and out: decode, mix down, resample, refuse what is not audio, write atomically.

numpy only (soundfile + soxr), so the inference commands can use it without torch.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import soundfile as sf

from edgessm.atomic import atomic_path

SAMPLE_RATE = 16000


class AudioError(ValueError):
    """An input that is not usable audio; the message says what to do."""


def empty_file(path: str | os.PathLike) -> AudioError:
    """The error for an input file of 0 bytes (a recording never saved, a copy that wrote nothing)."""
    return AudioError(f"{path}: the file is empty (0 bytes); was the recording saved or copied completely?")


def resample(x: np.ndarray, sr_in: int, sr_out: int) -> np.ndarray:
    """Resample ``x (..., T)`` (float32) with soxr's high-quality filter; identity if the rates match."""
    if sr_in == sr_out:
        return x
    import soxr

    if x.ndim == 1:
        return soxr.resample(x, sr_in, sr_out, quality="HQ").astype(np.float32, copy=False)
    flat = x.reshape(-1, x.shape[-1])
    out = soxr.resample(np.ascontiguousarray(flat.T), sr_in, sr_out, quality="HQ").T
    return np.ascontiguousarray(out.reshape(*x.shape[:-1], out.shape[-1])).astype(np.float32, copy=False)


def load_audio(path: str | os.PathLike, sr: int | None = SAMPLE_RATE, mono: bool = True) -> tuple[np.ndarray, int]:
    """Read an audio file as float32 in [-1, 1].

    Args:
        path: wav/flac/ogg (anything libsndfile reads; other formats through librosa/audioread).
        sr: resample to this rate (``None`` keeps the file's rate).
        mono: average the channels.

    Returns:
        ``(audio, rate)`` with audio ``(T,)`` if mono else ``(channels, T)``.

    Raises:
        AudioError: missing file, undecodable data, empty or non-finite samples.
    """
    path = Path(path)
    if not path.is_file():
        raise AudioError(f"{path}: no such file")
    if path.stat().st_size == 0:
        raise empty_file(path)
    try:
        data, rate = sf.read(str(path), dtype="float32", always_2d=True)
        data = data.T
    except (sf.LibsndfileError, RuntimeError, TypeError) as e:
        try:
            import librosa

            data, rate = librosa.load(str(path), sr=None, mono=False)
            data = np.atleast_2d(data).astype(np.float32)
        except Exception:
            raise AudioError(f"{path}: not a readable audio file ({e}); convert it to wav or flac") from e
    if data.shape[-1] == 0:
        raise AudioError(f"{path}: the file holds no samples")
    if not np.isfinite(data).all():
        raise AudioError(f"{path}: contains NaN or infinite samples; re-export it as PCM wav or flac")
    if mono:
        data = data.mean(axis=0)
    if sr is not None and rate != sr:
        data, rate = resample(data, rate, sr), sr
    return data, int(rate)


def write_audio(path: str | os.PathLike, audio: np.ndarray, sr: int, subtype: str = "PCM_16") -> None:
    """Write ``audio`` ((T,) or (channels, T), float in [-1, 1]) atomically: a temp file renamed into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    audio = np.asarray(audio, dtype=np.float32)
    if not np.isfinite(audio).all():
        raise AudioError(f"refusing to write {path}: the audio contains NaN or infinite samples")
    data = audio.T if audio.ndim == 2 else audio
    with atomic_path(path) as tmp:
        sf.write(
            tmp,
            np.clip(data, -1.0, 1.0) if subtype.startswith("PCM") else data,
            sr,
            subtype=subtype,
            format=_format_for(path),
        )


def _format_for(path: Path) -> str:
    ext = path.suffix.lower().lstrip(".")
    return {"wav": "WAV", "flac": "FLAC", "ogg": "OGG"}.get(ext, "WAV")


def fit_length(x: np.ndarray, length: int, offset: int = 0) -> np.ndarray:
    """Crop ``x (T,)`` at ``offset`` or zero-pad it at the end to exactly ``length`` samples."""
    if x.shape[-1] >= length:
        return x[..., offset : offset + length]
    pad = [(0, 0)] * (x.ndim - 1) + [(0, length - x.shape[-1])]
    return np.pad(x, pad)


def speech_bounds(x: np.ndarray, floor_db: float = -35.0, margin: int = 0, abs_floor: float = 0.0,
                  frame: int = 160) -> tuple[int, int]:  # fmt: skip
    """``(start, end)`` sample indices of the speech in ``x``: the first to the last ``frame``-sample frame
    whose RMS is within ``floor_db`` of the loudest frame's (and at least ``abs_floor``), widened by
    ``margin`` samples; the whole of ``x`` when no frame qualifies."""
    e = frame_energy_db(x, frame)
    if len(e) == 0:
        return 0, len(x)
    on = np.flatnonzero((e >= e.max() + floor_db) & (e >= 20 * np.log10(abs_floor + 1e-12)))
    if not len(on):
        return 0, len(x)
    return max(0, int(on[0]) * frame - margin), min(len(x), (int(on[-1]) + 1) * frame + margin)


def speech_span(x: np.ndarray, floor_db: float = -35.0, margin: int = 0, abs_floor: float = 0.0) -> np.ndarray:
    """``x`` cut to its speech (:func:`speech_bounds`)."""
    start, end = speech_bounds(x, floor_db, margin, abs_floor)
    return x[start:end]


def frame_energy_db(x: np.ndarray, frame: int = 160) -> np.ndarray:
    """Mean power in dB of each whole ``frame``-sample frame of ``x``: ``(len(x) // frame,)``."""
    n = len(x) // frame
    return 10 * np.log10(np.mean(np.asarray(x[: n * frame], np.float64).reshape(n, frame) ** 2, axis=1) + 1e-12)


def dynamic_range_db(x: np.ndarray, frame: int = 160) -> float:
    """Spread of a recording's frame energies in dB, 95th minus 10th percentile of ``frame``-sample RMS
    frames: a short clip of clean speech in silence scores 40-60 dB, one in room or street noise
    under 25 (its noise floor sits close to its speech). 0 for clips shorter than a frame."""
    e = frame_energy_db(x, frame)
    return float(np.percentile(e, 95) - np.percentile(e, 10)) if len(e) else 0.0
