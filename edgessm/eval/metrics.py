"""Signal metrics in numpy (no torch), for evaluating exported graphs."""

from __future__ import annotations

import numpy as np


def si_sdr(est: np.ndarray, ref: np.ndarray, eps: float = 1e-12) -> float:
    """Scale-invariant signal-to-distortion ratio in dB of ``est`` against ``ref`` (both ``(T,)``)."""
    est = np.asarray(est, np.float64) - np.mean(est)
    ref = np.asarray(ref, np.float64) - np.mean(ref)
    target = (est @ ref) / (ref @ ref + eps) * ref
    noise = est - target
    return float(10 * np.log10((target @ target + eps) / (noise @ noise + eps)))


def snr_db(ref: np.ndarray, test: np.ndarray) -> float:
    """How close ``test`` stays to ``ref`` (same shape): ``10 log10(mean(ref²) / mean((ref - test)²))`` dB."""
    err = float(np.mean((np.asarray(ref, np.float64) - test) ** 2))
    return float(10 * np.log10(max(float(np.mean(np.asarray(ref, np.float64) ** 2)), 1e-30) / max(err, 1e-30)))


def speech_frames(clean: np.ndarray, frame: int = 160, below_db: float = 35.0, guard: int = 3) -> np.ndarray:
    """Which ``frame``-sample frames of a clean recording ``(T,)`` hold speech ``(T // frame,)`` bool: those within
    ``below_db`` of its loudest frames (95th percentile), widened by ``guard`` frames on each side so onsets and
    decays count as speech. The others are its pauses."""
    n = len(clean) // frame * frame
    c = np.asarray(clean[:n], np.float64).reshape(-1, frame)
    level = 10 * np.log10(np.mean(c**2, axis=1) + 1e-20)
    if not len(level):
        return np.zeros(0, bool)
    loud = level >= np.percentile(level, 95) - below_db
    return np.convolve(loud.astype(float), np.ones(2 * guard + 1), mode="same") > 0


def pause_residual_db(est: np.ndarray, clean: np.ndarray, frame: int = 160) -> float:
    """What a denoiser leaves in the pauses: the power of ``est`` in the frames where ``clean`` is silent
    (:func:`speech_frames`), in dB relative to ``clean``'s power while it speaks (both ``(T,)``; lower is
    quieter; NaN without pauses). DNSMOS BAK hears this residual; SI-SDR and PESQ barely do, since it is quiet
    next to the speech."""
    n = min(len(est), len(clean)) // frame * frame
    speech = speech_frames(clean[:n], frame)
    if speech.all() or not speech.any():
        return float("nan")
    c = np.asarray(clean[:n], np.float64).reshape(-1, frame)
    e = np.asarray(est[:n], np.float64).reshape(-1, frame)
    return float(10 * np.log10((np.mean(e[~speech] ** 2) + 1e-20) / np.mean(c[speech] ** 2)))
