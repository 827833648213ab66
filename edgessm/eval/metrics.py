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
