"""An SSM filterbank front end: band log-energies of the waveform, computed by one full SSM block.

    x (B, 1, T) -> FullSSM 1 -> F (ERB-spaced resonators) -> y² -> causal mean over P samples
      -> log(· + floor) -> per-band affine  ->  (B, F, T / P)

The paper's networks put linear full SSM blocks on the raw waveform, followed by a per-sample
LayerNorm and SiLU. Measured here (8 fixed words, 200 steps of CTC, same optimiser): that stack
cannot even memorise the words (loss plateaus at ~1 nat per character; every hypothesis starts
with the same letters), while the *same* later blocks fed by these log band energies fit them
exactly within 100 steps. A recogniser needs a magnitude nonlinearity and a compression that the
linear-filter + LayerNorm + SiLU stack has to discover by itself; here they are built in.

Everything stays state-space and streams exactly: the filters are the modes of the full block
(:func:`~edgessm.ssm.discretize.auditory_modes`, learnable), the energy is pointwise, the mean is
a causal pooling of ``P`` samples (a ``ReduceMean`` node when exported) and the log and affine
are per frame.
"""

from __future__ import annotations

import math
from fractions import Fraction

import torch
from torch import Tensor, nn

from .blocks import FullSSM
from .fftconv import causal_conv, fft_size
from .precision import float32_island
from .resample import _check_length
from .stream import Counts, State, Streamable

# Initial per-band normalisation ``(log(e + floor) - SHIFT) * GAIN``: measured on the `asr` recipe's
# training mix (noise, reverb, levels; 40 examples) with the initial 40 filters, band log-energies have
# a mean of -11.5 (each band between -12.2 and -10.8) and a spread of 3.6 (3.3-4.0); these constants
# bring them near zero mean and unit scale. Both are learnable per band.
SHIFT, GAIN = -11.5, 1.0 / 3.6


def frame_energy(y: Tensor, pool: int) -> Tensor:
    """Band outputs ``(B, F, T)`` -> mean energies ``(B, F, T / pool)`` (a ReduceMean when exported:
    onnxruntime's AveragePool is ~10x slower on these shapes)."""
    b, c, t = (int(n) for n in y.shape)
    return (y * y).reshape(b, c, t // pool, pool).mean(-1)


def band_energy(x: Tensor, k: Tensor, pool: int) -> Tensor:
    """Mean energies over ``pool`` samples of ``x`` filtered by every kernel of a bank.

    ``x (B, 1, T)``, ``k (F, Lk)`` -> ``(B, F, T / pool)``: ``e[b, f, m] = mean_{t in frame m} y[b, f, t]²``
    with ``y[b, f, t] = Σ_{s <= t} k[f, t - s] x[b, 0, s]`` (causal linear convolution by zero-padded FFTs).

    The same numbers as :func:`~edgessm.ssm.fftconv.causal_conv` followed by the energy, with a backward
    written out: autograd through those steps keeps and walks several ``(B, F, T)`` intermediates (the
    padded spectra, the squares, the broadcast of the mean) and transforms the gradient back to the full
    padded length for ``y``; here the band outputs ``y`` are the only thing kept, and the kernel gradient is
    the cross-correlation of ``x`` with ``dL/dy = 2 y dL/de / pool``, one forward FFT of ``dL/dy`` and a sum
    over the batch in the frequency domain (issue 34: the front was ~90% of a kws training step on a CPU).
    """
    if x.dim() != 3 or x.shape[1] != 1 or k.dim() != 2:
        raise ValueError(f"band_energy takes x (B, 1, T) and k (F, Lk), got {tuple(x.shape)} and {tuple(k.shape)}")
    if x.shape[-1] % pool:
        raise ValueError(f"band_energy: {x.shape[-1]} samples are not a whole number of {pool}-sample frames")
    return _BandEnergy.apply(x, k, int(pool))


class _BandEnergy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, k: Tensor, pool: int) -> Tensor:
        y = causal_conv(x, k[:, None], "full")  # (B, F, T); no graph is recorded inside a Function
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            ctx.save_for_backward(x, k, y)
        ctx.n, ctx.pool = fft_size(int(x.shape[-1]) + int(k.shape[-1]) - 1), pool  # causal_conv's FFT size
        return frame_energy(y, pool)

    @staticmethod
    def backward(ctx, ge: Tensor) -> tuple[Tensor | None, Tensor | None, None]:
        x, k, y = ctx.saved_tensors
        n, pool = ctx.n, ctx.pool
        b, f, t = (int(d) for d in y.shape)
        # dL/dy = 2 y dL/de / pool, the frame's gradient broadcast over its samples
        gy = (y.reshape(b, f, t // pool, pool) * (ge * (2.0 / pool)).unsqueeze(-1)).reshape(b, f, t)
        gyf = torch.fft.rfft(gy, n=n)  # (B, F, n/2 + 1)
        del gy
        gx = gk = None
        if ctx.needs_input_grad[0]:  # dL/dx[s] = Σ_f Σ_t dL/dy[f, t] k[f, t - s]: correlation with each kernel
            gx = torch.fft.irfft((gyf * torch.fft.rfft(k, n=n).conj()).sum(1, keepdim=True), n=n)[..., :t]
        if ctx.needs_input_grad[1]:  # dL/dk[f, τ] = Σ_b Σ_t dL/dy[b, f, t] x[b, t - τ]; zero padding to
            # n >= T + Lk - 1 keeps the circular correlation's wrapped terms on zeros for τ < Lk
            gk = torch.fft.irfft(gyf.mul_(torch.fft.rfft(x, n=n).conj()).sum(0), n=n)[..., : int(k.shape[-1])]
        return gx, gk, None


class FilterbankFront(Streamable):
    """``(B, 1, T) -> (B, bands, T / pool)``: log energies of ``bands`` learnable SSM band-pass filters.

    Args:
        bands: number of filters (output channels).
        states: complex modes per filter; filter ``j`` starts as the ``j``-th ``states`` of
            ``bands * states`` ERB-spaced resonances, all in phase at unit peak gain.
        pool: samples per output frame (the energy is averaged over them).
        rate: input sample rate in Hz (the filters span 50 Hz .. 0.9 x Nyquist).
        floor: added to the energy before the log (silence maps to ``log(floor)``, not ``-inf``).
    """

    def __init__(self, bands: int = 40, states: int = 1, pool: int = 160, rate: float = 16000.0,
                 floor: float = 1e-8) -> None:  # fmt: skip
        super().__init__()
        if bands < 1 or states < 1 or pool < 1 or floor <= 0:
            raise ValueError(
                f"bands, states and pool must be >= 1 and floor > 0, got {bands}, {states}, {pool}, {floor}"
            )
        self.bands, self.pool, self.floor = bands, pool, float(floor)
        self.ssm = FullSSM(1, bands, states, init="auditory", rate=rate)
        with torch.no_grad():  # E Δ = 2β / states (β = -Re(ΔA) of the auditory modes): each mode peaks near
            wr, _ = self.ssm.modes.dtA()  # 1/states and the filter's modes add in phase, not with random signs
            self.ssm.E.copy_(-2 * wr / states / self.ssm.modes.delta())
        self.shift = nn.Parameter(torch.full((bands,), SHIFT))
        self.gain = nn.Parameter(torch.full((bands,), GAIN))
        self.rate = Fraction(1, pool)
        self.chunk_multiple = pool

    def _compress(self, energy: Tensor) -> Tensor:
        """Mean band energies ``(B, F, frames)`` -> normalised log energies."""
        return (torch.log(energy + self.floor) - self.shift[:, None]) * self.gain[:, None]

    @float32_island
    def forward(self, x: Tensor) -> Tensor:
        _check_length(self, x)
        # the resonators die out within a few thousand samples: short kernels, shorter FFTs (live_length)
        k = self.ssm.kernel(self.ssm.modes.live_length(int(x.shape[-1])))  # (F, 1, Lk)
        return self._compress(band_energy(x, k[:, 0], self.pool))

    def state_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        return [(f"ssm.{n}", s) for n, s in self.ssm.state_shapes()]

    def step(self, x: Tensor, state: State) -> tuple[Tensor, State]:
        self.check_chunk(x)
        y, state = self.ssm.step(x, state)
        return self._compress(frame_energy(y, self.pool)), state

    def counts(self) -> Counts:
        """Filters, plus a square and an add per band and sample, plus log and affine per band and frame."""
        per_frame = 3.0 * self.bands / self.pool
        return self.ssm.counts() + Counts(2 * self.bands, 2.0 * self.bands + per_frame)

    def extra_repr(self) -> str:
        return f"bands={self.bands}, pool={self.pool}, floor={self.floor:g} (log {math.log(self.floor):.1f})"
