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

from .blocks import FullSSM, assign_plan
from .discretize import powers
from .fftconv import causal_conv, fft_size, median_seconds
from .precision import float32_island, half_precision
from .resample import _check_length
from .stream import Counts, State, Streamable, causal_toeplitz

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
    over the batch in the frequency domain (the front was ~90% of a kws training step on a CPU).
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


def chunked_band_energy(x: Tensor, wr: Tensor, wi: Tensor, w: Tensor, pool: int, sub: int,
                        fused: bool | None = None, tf32: bool = False) -> Tensor:  # fmt: skip
    """:func:`band_energy` of the modal filters ``k[f, τ] = Σ_m w[f, m] Re(Ā[f, m]^τ)`` by a chunked scan.

    ``x (B, 1, T)``; ``wr, wi, w (F, M)`` (``Ā = exp(wr + i wi)``); ``sub`` divides ``pool``, ``pool`` divides
    ``T`` -> ``(B, F, T / pool)``. The filter is the recursion ``h[t] = Ā h[t-1] + x[t]``, ``y[t] = Σ_m w_m Re h_m[t]``
    run in chunks of ``sub`` samples (the streaming step's algorithm, :meth:`SSMLayer._modal_constants`):

    * between chunks: ``H_{p+1} = Ā^sub H_p + Z_p``, ``Z_p = Σ_s Ā^{sub-1-s} x_p[s]``: a causal convolution along
      the ``P = T / sub`` chunks with the complex kernel ``(Ā^sub)^p``, by FFTs of ``2 P`` points;
    * inside chunk ``p``: ``y_p[t] = Σ_s K[t, s] x_p[s] + Σ_m w_m Re(Ā_m^{t+1} H_p[m])``, with ``K`` the
      ``sub × sub`` causal Toeplitz matrix of the kernel: for all bands at once one matrix product
      ``[x_p | Re H_p | Im H_p] (B P, sub + 2 F M) @ W (sub + 2 F M, F sub)`` (:func:`_frame_energy_of_product`),
      or, fused (``fused``: as :func:`~edgessm.ssm.kernels.modal_kernel`'s; on CUDA by default), one Triton
      kernel per band and row block that squares and sums ``y`` where it is made
      (:func:`edgessm.ssm.fused.row_energy`): the band outputs never reach memory. ``tf32``: its products may
      run in TF32 (as they do anyway where ``torch.backends.cuda.matmul.allow_tf32`` is set).

    The same numbers as :func:`band_energy`'s FFT convolution over the whole input (no kernel truncation),
    without FFTs at the sample rate: the ``(B, F, T)`` band outputs are one matrix product, kept once for the
    backward, which is two more products (the front is most of a GPU step's memory traffic).
    """
    b, one, t = (int(n) for n in x.shape)
    if one != 1 or t % pool or pool % sub:
        raise ValueError(f"chunked_band_energy: x (B, 1, T) with T a multiple of pool, pool of sub; got "
                         f"{tuple(x.shape)}, pool {pool}, sub {sub}")  # fmt: skip
    f, m = (int(n) for n in wr.shape)
    chunks = t // sub
    lags = torch.arange(sub + 1, device=x.device)
    pr, pi = powers(wr, wi, lags)  # Ā^0 .. Ā^sub: (F, M, sub + 1)
    xs = x.reshape(b, chunks, sub)
    # Z_p, the state a chunk leaves from a zero start: Σ_s Ā^{sub-1-s} x_p[s]
    z = torch.complex(torch.einsum("bps,fms->bfmp", xs, pr[..., :sub].flip(-1)),
                      torch.einsum("bps,fms->bfmp", xs, pi[..., :sub].flip(-1)))  # fmt: skip
    # H_p = Σ_{q<p} (Ā^sub)^{p-1-q} Z_q: a causal convolution over the chunks, shifted by one (H_0 = 0)
    gr, gi = powers(wr, wi, sub * torch.arange(chunks, device=x.device))  # (F, M, P)
    n = fft_size(2 * chunks)
    h = torch.fft.ifft(torch.fft.fft(z, n=n) * torch.fft.fft(torch.complex(gr, gi), n=n), n=n)[..., : chunks - 1]
    h = torch.nn.functional.pad(h, (1, 0)).permute(0, 3, 1, 2)  # (B, P, F, M)
    toeplitz = causal_toeplitz(torch.einsum("fm,fml->fl", w, pr[..., :sub]))  # K_f[t, s]: (F, t, s)
    readout_r, readout_i = w[..., None] * pr[..., 1:], -w[..., None] * pi[..., 1:]  # (F, M, t)
    if _fused_front(x, fused):
        from .fused import row_energy

        q = row_energy(xs.reshape(b * chunks, sub), torch.cat([h.real, h.imag], -1).reshape(b * chunks, f, 2 * m),
                       toeplitz.transpose(1, 2), torch.cat([readout_r, readout_i], 1), tf32=tf32)  # fmt: skip
        per_frame = pool // sub
        e = q.reshape(b, t // pool, per_frame, f).sum(2) / pool  # (B, frames, F)
        return e.transpose(1, 2)
    h = h.reshape(b * chunks, f * m)
    a = torch.cat([xs.reshape(b * chunks, sub), h.real, h.imag], dim=1)
    # W: rows [input samples s | Re H_fm | Im H_fm], columns (f, t): K_f[t, s]; w Re Ā^{t+1}; -w Im Ā^{t+1}
    eye = torch.eye(f, dtype=x.dtype, device=x.device)
    readout_r = torch.einsum("fmt,fg->fmgt", readout_r, eye).reshape(f * m, f * sub)
    readout_i = torch.einsum("fmt,fg->fmgt", readout_i, eye).reshape(f * m, f * sub)
    weights = torch.cat([toeplitz.permute(2, 0, 1).reshape(sub, f * sub), readout_r, readout_i], dim=0)
    return _frame_energy_of_product(a, weights, b, f, pool // sub)


def _fused_front(x: Tensor, fused: bool | None) -> bool:
    """Whether the fused Triton row energies run for ``x`` (:func:`edgessm.ssm.fused.use_fused`); demanded on
    the meta device (``bench roofline --fused-front``), the operator's shapes are traced instead."""
    from . import fused as kernels

    if fused and x.device.type == "meta":
        return True
    return kernels.wants_fused(x, fused) and kernels.use_fused(x, fused)  # imports Triton only past the first test


def _frame_energy_of_product(a: Tensor, w: Tensor, batch: int, bands: int, per_frame: int) -> Tensor:
    """``e[b, f, j] = mean over frame j of (a @ w)²``: ``a (B P, K)``, ``w (K, F S)``, rows of ``a`` ordered
    (batch, chunk), columns of ``w`` (band, sample); ``per_frame`` chunks to a frame -> ``(B, F, P / per_frame)``."""
    return _FrameEnergyOfProduct.apply(a, w, batch, bands, per_frame)


class _FrameEnergyOfProduct(torch.autograd.Function):
    """The product's output ``y`` is made once and kept; the backward is ``dL/dy`` (one pass over ``y``) and two
    products, ``dL/da = dL/dy wᵀ`` and ``dL/dw = aᵀ dL/dy``: no other ``(B, F, T)`` tensor is stored or walked."""

    @staticmethod
    def forward(ctx, a: Tensor, w: Tensor, batch: int, bands: int, per_frame: int) -> Tensor:
        y = a @ w  # (B P, F S)
        rows, cols = (int(n) for n in y.shape)
        sub = cols // bands
        frames = rows // batch // per_frame
        # one reading of y, no squared copy of it: the norm over each frame's samples of a band
        e = torch.linalg.vector_norm(y.reshape(batch, frames, per_frame, bands, sub), dim=(2, 4)).square()
        e = e / (per_frame * sub)  # (B, frames, F)
        ctx.save_for_backward(a, w, y)
        ctx.dims = (batch, frames, per_frame, bands, sub)
        return e.transpose(1, 2)

    @staticmethod
    def backward(ctx, ge: Tensor) -> tuple[Tensor | None, Tensor | None, None, None, None]:
        a, w, y = ctx.saved_tensors
        batch, frames, per_frame, bands, sub = ctx.dims
        scale = ge.transpose(1, 2) * (2.0 / (per_frame * sub))  # (B, frames, F)
        gy = (y.reshape(batch, frames, per_frame, bands, sub) * scale[:, :, None, :, None]).reshape(y.shape)
        ga = gy @ w.T if ctx.needs_input_grad[0] else None
        gw = a.T @ gy if ctx.needs_input_grad[1] else None
        return ga, gw, None, None, None


PLANS = ("fft", "chunked")
FRONT_PLANS = (*PLANS, "measure")
MEASURED: dict[tuple, str] = {}  # the measured planner's choices, per shape and device


def set_front_plan(model: nn.Module, plan: str) -> int:
    """Give every :class:`FilterbankFront` in ``model`` the band-energy ``plan`` (one of :data:`FRONT_PLANS`);
    returns how many fronts there are."""
    return assign_plan(model, FilterbankFront, plan, list(FRONT_PLANS), "train.front_plan")


def chunk_samples(pool: int, fused: bool = False) -> int:
    """The chunk of :func:`chunked_band_energy` for frames of ``pool`` samples: its largest divisor up to 64;
    ``fused``: its largest power-of-two divisor up to 64 where that is at least 16 (the Triton kernel's tiles
    are powers of two; 32 for 10 ms at 16 kHz)."""
    if fused:
        two = pool & -pool  # the largest power of two dividing pool
        if two >= 16:
            return min(two, 64)
    return max(d for d in range(1, min(pool, 64) + 1) if pool % d == 0)


def time_front(front: FilterbankFront, plan: str, batch: int, length: int, device: torch.device,
               repeats: int = 3) -> float:  # fmt: skip
    """Median seconds of ``front``'s forward + backward along ``plan`` on random audio (CUDA events on a GPU);
    one untimed run first. Out of memory counts as infinitely slow."""
    x = (0.05 * torch.randn(batch, 1, length, generator=torch.Generator().manual_seed(0))).to(device)
    x.requires_grad_()
    params = [p for p in front.parameters() if p.requires_grad]

    def run() -> None:
        e = front.band_energies(x, plan)
        torch.autograd.grad(e.sum(), [x, *params], allow_unused=True)

    return median_seconds(run, device, repeats)


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
        # how training computes the band energies, the same numbers either way (`train.front_plan`): "fft"
        # (band_energy), "chunked" (chunked_band_energy) or "measure" (both timed once per shape, the faster kept)
        self.plan = "fft"
        # the chunked plan's fused Triton kernel: None on CUDA where it can run (EDGESSM_FUSED), True demands it
        self.fused: bool | None = None

    def _compress(self, energy: Tensor) -> Tensor:
        """Mean band energies ``(B, F, frames)`` -> normalised log energies."""
        return (torch.log(energy + self.floor) - self.shift[:, None]) * self.gain[:, None]

    def choose_plan(self, batch: int, length: int, device: torch.device) -> str:
        """The plan of ``forward`` for a batch of ``batch`` x ``length`` samples on ``device`` (see ``plan``)."""
        if self.plan in PLANS:
            return self.plan
        if self.plan != "measure":
            raise ValueError(f"the filterbank front's plan must be {', '.join(FRONT_PLANS)}; got {self.plan!r}")
        key = (batch, length, self.bands, self.ssm.n_states, self.pool, str(device))
        if key not in MEASURED:
            if torch.compiler.is_compiling():
                return "fft"
            MEASURED[key] = min(PLANS, key=lambda p: time_front(self, p, batch, length, device))
        return MEASURED[key]

    def band_energies(self, x: Tensor, plan: str, tf32: bool = False) -> Tensor:
        """Mean band energies ``(B, F, T / pool)`` of ``x (B, 1, T)`` along ``plan`` ("fft" or "chunked");
        ``tf32``: the fused chunked kernel may multiply in TF32."""
        if plan == "chunked":
            wr, wi, w = self.ssm._weights()  # (F, 1, M): one input channel
            fused = _fused_front(x, self.fused)
            sub = chunk_samples(self.pool, fused)
            return chunked_band_energy(x, wr[:, 0], wi[:, 0], w[:, 0], self.pool, sub, fused=fused, tf32=tf32)
        # the resonators die out within a few thousand samples: short kernels, shorter FFTs (live_length)
        k = self.ssm.kernel(self.ssm.modes.live_length(int(x.shape[-1])))  # (F, 1, Lk)
        return band_energy(x, k[:, 0], self.pool)

    def forward(self, x: Tensor) -> Tensor:
        # in a half-precision network (bf16 autocast, or half activations) the fused chunked front's 32-term
        # products may run in TF32 (~1e-3 relative, below bf16's 4e-3 in the blocks after it); the front itself
        # is a float32 island, where autocast is off: asked here, before it
        return self._forward(x, half_precision(x))

    @float32_island
    def _forward(self, x: Tensor, low: bool) -> Tensor:
        _check_length(self, x)
        plan = self.choose_plan(int(x.shape[0]), int(x.shape[-1]), x.device)
        return self._compress(self.band_energies(x, plan, tf32=low))

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
