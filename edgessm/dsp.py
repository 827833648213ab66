"""Small signal-processing constants shared by losses and networks: the ERB scale, ERB band matrices
(full-range filterbanks and the spectrogram front's bounded triangles),
real DFT matrices and the square-root Hann window. Built in float64, returned as float32 tensors."""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor


def hz_to_erb(f: Tensor | float) -> Tensor:
    """ERB-rate scale (Glasberg & Moore): ``21.4 log10(1 + 0.00437 f)``."""
    return 21.4 * torch.log10(1 + 0.00437 * torch.as_tensor(f, dtype=torch.float64))


def erb_to_hz(e: Tensor) -> Tensor:
    """The inverse of :func:`hz_to_erb`."""
    return (10 ** (e / 21.4) - 1) / 0.00437


def erb_triangles(bands: int, n: int, rate: float, f_min: float, f_max: float) -> Tensor:
    """``(bands, bins)`` triangular weights over the DFT bins ``0 .. bins - 1`` of an ``n``-point DFT (``bins``:
    up to the last band's upper edge), centres equally spaced on the ERB-rate scale from ``f_min`` to
    ``f_max`` Hz, each at least one bin wide on either side (so narrow low bands still see a bin); rows sum
    to 1."""
    spacing = rate / n
    lo, hi = float(hz_to_erb(f_min)), float(hz_to_erb(f_max))
    step = (hi - lo) / max(bands - 1, 1)
    erb = torch.linspace(lo, hi, bands, dtype=torch.float64)
    centre = erb_to_hz(erb)
    left = torch.clamp(centre - erb_to_hz(erb - step), min=spacing)
    right = torch.clamp(erb_to_hz(erb + step) - centre, min=spacing)
    bins = min(n // 2 + 1, int((centre[-1] + right[-1]) / spacing) + 1)
    f = torch.arange(bins, dtype=torch.float64)[None, :] * spacing
    c, lo_w, hi_w = centre[:, None], left[:, None], right[:, None]
    tri = torch.clamp(torch.minimum((f - (c - lo_w)) / lo_w, ((c + hi_w) - f) / hi_w), min=0)
    return (tri / tri.sum(-1, keepdim=True).clamp_min(1e-12)).float()


@functools.lru_cache(maxsize=8)
def erb_filterbank(n_fft: int = 512, n_bands: int = 32, sr: int = 16000) -> Tensor:
    """Triangular filters equally spaced on the ERB scale: ``(n_bands, n_fft // 2 + 1)``, rows sum to 1."""
    freqs = torch.linspace(0, sr / 2, n_fft // 2 + 1, dtype=torch.float64)
    erb = hz_to_erb(freqs)
    edges = torch.linspace(0, float(hz_to_erb(sr / 2)), n_bands + 2, dtype=torch.float64)
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    fb = torch.clamp(torch.minimum((erb - lo) / (mid - lo), (hi - erb) / (hi - mid)), min=0)
    fb = fb / fb.sum(-1, keepdim=True).clamp_min(1e-12)
    return fb.float()


def erb_expansion(n_fft: int, n_bands: int, sr: int = 16000) -> Tensor:
    """``(n_bands, bins)``: spreads one value per ERB band back over the DFT bins (each bin's column is a
    weighted mean of the bands that cover it; a bin no band covers takes its nearest band's value)."""
    fb = erb_filterbank(n_fft, n_bands, sr).double()
    cover = fb.sum(0)
    out = fb / cover.clamp_min(1e-12)
    covered = torch.nonzero(cover > 0).flatten()
    for b in torch.nonzero(cover == 0).flatten().tolist():
        out[:, b] = out[:, int(covered[(covered - b).abs().argmin()])]
    return out.float()


def sqrt_hann(n: int) -> Tensor:
    """Periodic square-root Hann window ``(n,)``: analysis x synthesis at 50% overlap sums to 1."""
    t = torch.arange(n, dtype=torch.float64)
    return torch.sin(math.pi * t / n).float()  # sqrt(0.5 - 0.5 cos(2 pi t / n)) = |sin(pi t / n)|


def rdft_matrices(n: int) -> tuple[Tensor, Tensor]:
    """Real DFT of ``n`` points as two real matrices (``bins = n // 2 + 1``, ``n`` even):
    ``forward (n, 2 bins)``: ``frame @ forward = [Re X | Im X]`` with ``X_k = Σ_t x_t e^{-2πikt/n}``;
    ``inverse (2 bins, n)``: ``[Re X | Im X] @ inverse = frame`` (the inverse real DFT)."""
    if n % 2:
        raise ValueError(f"the DFT size must be even, got {n}")
    bins = n // 2 + 1
    t = torch.arange(n, dtype=torch.float64)[:, None]
    k = torch.arange(bins, dtype=torch.float64)[None, :]
    phase = 2 * math.pi * t * k / n
    forward = torch.cat([torch.cos(phase), -torch.sin(phase)], dim=1)
    weight = torch.full((bins,), 2.0, dtype=torch.float64)
    weight[0] = weight[-1] = 1.0  # DC and Nyquist appear once in the full spectrum
    inverse = torch.cat([torch.cos(phase).T * weight[:, None], -torch.sin(phase).T * weight[:, None]], dim=0) / n
    return forward.float(), inverse.float()
