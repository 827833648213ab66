"""Losses and metrics for waveform training: the ERB-scaled and multi-resolution spectral losses, SI-SDR."""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from edgessm.dsp import erb_filterbank


@functools.cache
def _erb_bank(n_fft: int, n_bands: int, device: torch.device) -> Tensor:
    """:func:`~edgessm.dsp.erb_filterbank` on ``device``, made once: a host-to-device copy every step would also
    stop a recorded CUDA graph (``train.cuda_graphs``)."""
    return erb_filterbank(n_fft, n_bands).to(device)


def erb_spectral_loss(est: Tensor, ref: Tensor, n_fft: int = 512, hop: int = 128, n_bands: int = 32,
                      power: float = 0.3) -> Tensor:  # fmt: skip
    """L1 distance of compressed ERB-band magnitudes of ``est`` and ``ref`` ``(B, T)``."""
    window = torch.hann_window(n_fft, device=est.device)
    fb = _erb_bank(n_fft, n_bands, est.device)

    def bands(x: Tensor) -> Tensor:
        mag = torch.stft(x.float(), n_fft, hop, window=window, return_complex=True).abs()
        return (fb @ mag).clamp_min(1e-8) ** power

    return torch.mean(torch.abs(bands(est) - bands(ref)))


def multires_spectral_loss(est: Tensor, ref: Tensor, ffts: tuple[int, ...] = (256, 512, 1024), power: float = 0.3,
                           complex_weight: float = 0.0) -> Tensor:  # fmt: skip
    """Mean over STFT sizes ``ffts`` (hop n/4, Hann) of the MSE between power-compressed magnitudes
    ``|E|^c`` and ``|R|^c`` of ``est`` and ``ref`` ``(B, T)``, plus ``complex_weight`` times the MSE of the
    compressed complex spectra ``|E|^c e^{i angle E}`` (the DeepFilterNet loss's two terms)."""
    total = est.new_zeros(())
    for n in ffts:
        window = torch.hann_window(n, device=est.device)
        e = torch.stft(est.float(), n, n // 4, window=window, return_complex=True)
        r = torch.stft(ref.float(), n, n // 4, window=window, return_complex=True)
        # |z| clamped away from 0: the gradient of |z|^c is infinite at 0
        me, mr = e.abs().clamp_min(1e-6), r.abs().clamp_min(1e-6)
        ce, cr = me**power, mr**power
        total = total + torch.mean((ce - cr) ** 2)
        if complex_weight:
            diff = e * (ce / me) - r * (cr / mr)
            total = total + complex_weight * torch.mean(diff.real**2 + diff.imag**2)
    return total / len(ffts)


def si_sdr(est: Tensor, ref: Tensor, eps: float = 1e-8) -> Tensor:
    """Scale-invariant signal-to-distortion ratio in dB over the last axis (zero-mean signals)."""
    est = est - est.mean(-1, keepdim=True)
    ref = ref - ref.mean(-1, keepdim=True)
    scale = (est * ref).sum(-1, keepdim=True) / (ref.pow(2).sum(-1, keepdim=True) + eps)
    target = scale * ref
    noise = est - target
    return 10 * torch.log10((target.pow(2).sum(-1) + eps) / (noise.pow(2).sum(-1) + eps))
