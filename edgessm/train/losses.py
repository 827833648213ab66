"""Losses and metrics for waveform training: the ERB-scaled spectral loss and SI-SDR."""

from __future__ import annotations

import torch
from torch import Tensor

from edgessm.dsp import erb_filterbank


def erb_spectral_loss(est: Tensor, ref: Tensor, n_fft: int = 512, hop: int = 128, n_bands: int = 32,
                      power: float = 0.3) -> Tensor:  # fmt: skip
    """L1 distance of compressed ERB-band magnitudes of ``est`` and ``ref`` ``(B, T)``."""
    window = torch.hann_window(n_fft, device=est.device)
    fb = erb_filterbank(n_fft, n_bands).to(est.device)

    def bands(x: Tensor) -> Tensor:
        mag = torch.stft(x.float(), n_fft, hop, window=window, return_complex=True).abs()
        return (fb @ mag).clamp_min(1e-8) ** power

    return torch.mean(torch.abs(bands(est) - bands(ref)))


def si_sdr(est: Tensor, ref: Tensor, eps: float = 1e-8) -> Tensor:
    """Scale-invariant signal-to-distortion ratio in dB over the last axis (zero-mean signals)."""
    est = est - est.mean(-1, keepdim=True)
    ref = ref - ref.mean(-1, keepdim=True)
    scale = (est * ref).sum(-1, keepdim=True) / (ref.pow(2).sum(-1, keepdim=True) + eps)
    target = scale * ref
    noise = est - target
    return 10 * torch.log10((target.pow(2).sum(-1) + eps) / (noise.pow(2).sum(-1) + eps))
