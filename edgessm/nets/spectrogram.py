"""A spectrogram front end: log band energies of a fixed short-time DFT, the cheap alternative to the SSM
filterbank front (:mod:`edgessm.ssm.filterbank`).

    x (B, 1, T) -> frames of ``window`` samples every ``pool`` -> Hann · real DFT (one MatMul) -> |X_k|²
      -> band energies  e = |X|² Wᵀ  (W = R² ≥ 0, learnable, ERB-spaced triangles at start)
      -> log(e + floor) -> per-band affine  ->  (B, bands, T / pool)

Frame ``m`` is the ``window`` samples that end at sample ``pool (m + 1)``: causal, at the same times as the
filterbank front's frames (the mean energy of samples ``pool m .. pool (m + 1) - 1``), so the blocks after
either front see their frames at the same moments. ``pool <= window <= 2 pool``: the streaming state is the
last ``window - pool`` samples, and every frame is one chunk row of ``pool`` samples with the ``window - pool``
samples before it, so framing is a reshape and a concatenation (no gather), and the DFT of all frames of a
chunk is one ``(frames, window) @ (window, 2 bins)`` MatMul (in PyTorch, outside a graph, an FFT of the same
frames).

Why: the filterbank front's 40 resonators run at 16 kHz, and their exact chunked scan is most of a small
network's time on a CPU (kws35-es: ~58% of a call at budget 4; the resonators' Toeplitz product alone is
2.2 M multiply-adds per 80 ms). This front does ~60 k multiply-adds per 10 ms frame (n = 256, bins up to
``f_max``) in a handful of graph nodes.
"""

from __future__ import annotations

from fractions import Fraction

import torch
from torch import Tensor, nn

from edgessm.dsp import erb_triangles, rdft_matrices, sqrt_hann
from edgessm.ssm.filterbank import GAIN, SHIFT
from edgessm.ssm.precision import float32_island
from edgessm.ssm.resample import _check_length
from edgessm.ssm.stream import Counts, State, Streamable, graph_form


class SpectrogramFront(Streamable):
    """``(B, 1, T) -> (B, bands, T / pool)``: log energies of ``bands`` learnable non-negative band weightings
    of a Hann-windowed ``window``-point power spectrum, one frame per ``pool`` samples.

    Args:
        bands: output channels.
        pool: hop in samples (one output frame per ``pool`` input samples).
        window: frame length in samples, ``pool <= window <= 2 pool`` (also the DFT size; even).
        rate: sample rate in Hz.
        f_min, f_max: centres of the first and last band in Hz (the filterbank front's 50 Hz .. 0.9 Nyquist).
        floor: added to the energy before the log.
    """

    def __init__(self, bands: int = 40, pool: int = 160, window: int = 256, rate: float = 16000.0,
                 f_min: float = 50.0, f_max: float | None = None, floor: float = 1e-8) -> None:  # fmt: skip
        super().__init__()
        f_max = 0.9 * rate / 2 if f_max is None else f_max
        if bands < 1 or pool < 1 or floor <= 0 or not 0 < f_min < f_max <= rate / 2:
            raise ValueError(f"bands and pool must be >= 1, floor > 0 and 0 < f_min < f_max <= rate / 2; got "
                             f"{bands}, {pool}, {floor}, {f_min}, {f_max}")  # fmt: skip
        if not pool <= window <= 2 * pool or window % 2:
            raise ValueError(f"the spectrogram front's window must be even and between pool and 2 pool "
                             f"({pool}..{2 * pool} samples), got {window}")  # fmt: skip
        self.bands, self.pool, self.window, self.floor = bands, pool, window, float(floor)
        weights = erb_triangles(bands, window, rate, f_min, f_max)  # (bands, bins)
        self.bins = int(weights.shape[-1])
        forward, _ = rdft_matrices(window)  # (n, 2 (n/2 + 1)): [Re | Im]
        half = window // 2 + 1
        hann = sqrt_hann(window) ** 2  # the periodic Hann window
        dft = torch.cat([forward[:, : self.bins], forward[:, half : half + self.bins]], dim=1) * hann[:, None]
        self.register_buffer("dft", dft, persistent=False)  # (window, 2 bins): a constant, rebuilt from the config
        self.register_buffer("hann", hann, persistent=False)  # the FFT path's window (``_energies``)
        # band weights W = R² >= 0 (energies stay positive for any R); scaled so that white noise of unit
        # variance gives unit band energy at the start (Σ_t hann² per bin, weights summing to 1 per band)
        scale = float((hann.double() ** 2).sum())
        self.root = nn.Parameter((weights / scale).sqrt())
        self.shift = nn.Parameter(torch.full((bands,), SHIFT))
        self.gain = nn.Parameter(torch.full((bands,), GAIN))
        self.rate = Fraction(1, pool)
        self.chunk_multiple = pool

    def _energies(self, x: Tensor, history: Tensor) -> tuple[Tensor, Tensor]:
        """``x (B, 1, T)``, ``history (B, 1, window - pool)`` -> band energies ``(B, frames, bands)`` and the
        new history."""
        b, p, h = int(x.shape[0]), self.pool, self.window - self.pool
        rows = x.reshape(b, int(x.shape[-1]) // p, p)  # (B, F, pool): frame m's last pool samples
        if not rows.shape[1]:  # an empty chunk: no frame, the history stays
            return x.new_zeros(b, 0, self.bands), history
        if h:
            before = torch.cat([history, rows[:, :-1, p - h :]], dim=1)  # (B, F, h): the h samples before each row
            frames, history = torch.cat([before, rows], dim=-1), rows[:, -1:, p - h :]
        else:
            frames = rows
        weights = (self.root * self.root).t()  # (bins, bands)
        if not graph_form(int(frames.shape[1])):
            # outside a graph an FFT: the same |X|² at ~1/10 of the DFT product's operations (a training step)
            z = torch.fft.rfft(frames * self.hann, dim=-1)[..., : self.bins]
            # Re² + Im² as two strided squares: half the time of a sum over view_as_real's axis of 2
            return (z.real.square() + z.imag.square()) @ weights, history
        spec = frames @ self.dft  # (B, F, 2 bins): [Re X | Im X]
        # |X|² Wᵀ = (Re X)² Wᵀ + (Im X)² Wᵀ: one product with the weights stacked twice (no slices, no add)
        return (spec * spec) @ torch.cat([weights, weights], dim=0), history

    def _compress(self, energy: Tensor) -> Tensor:
        """``(B, F, bands)`` energies -> ``(B, bands, F)`` normalised log energies."""
        return ((torch.log(energy + self.floor) - self.shift) * self.gain).transpose(1, 2)

    @float32_island
    def forward(self, x: Tensor) -> Tensor:
        _check_length(self, x)
        zeros = x.new_zeros(int(x.shape[0]), 1, self.window - self.pool)
        return self._compress(self._energies(x, zeros)[0])

    def state_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        return [("history", (1, self.window - self.pool))] if self.window > self.pool else []

    def step(self, x: Tensor, state: State) -> tuple[Tensor, State]:
        self.check_chunk(x)
        history = state[0] if state else x.new_zeros(int(x.shape[0]), 1, 0)
        energy, history = self._energies(x, history)
        return self._compress(energy), ([history] if state else [])

    def counts(self) -> Counts:
        """The DFT product and the power per frame, the band product, log and affine per band and frame."""
        w, k, f = self.window, self.bins, self.bands
        per_frame = 2.0 * w * 2 * k + 3.0 * k + 2.0 * 2 * k * f + 3.0 * f
        return Counts(self.bands * self.bins + 2 * self.bands, per_frame / self.pool)

    def extra_repr(self) -> str:
        return (f"bands={self.bands}, pool={self.pool}, window={self.window}, bins={self.bins}, "
                f"floor={self.floor:g}")  # fmt: skip
