"""Diagonal SSM modes: parameterisation, initialisation and discretisation.

One convention for every Centaurus block (paper Sec. 3, eq. 2-3 and 7-8):

* continuous eigenvalues  ``A = -exp(a_log) + i * a_im``  so ``Re(A) < 0`` always;
* a learnable step ``Δ = exp(dt_log)`` per state (the axis the paper's App. E names);
* transition (ZOH, eq. 2):  ``Ā = exp(Δ A)``, optionally times a fixed leak ``exp(-1/M)`` that bounds every
  mode's memory to ``M`` steps (``DiagonalModes.memory``; see there);
* input matrix ``B̄ = Δ B`` kept real, as in the paper's Listing 1 (``B_discrete = delta * B``),
  so that eq. 8 holds with real projections and the counts of Table 3 apply;
* recurrence with post-update readout (eq. 8):  ``x[t] = Ā x[t-1] + B̄ u[t]``,  ``y[t] = C E Re(x[t])``;
  the matching convolution kernel is ``k[l] = C E Re(Ā^l) B̄`` for ``l >= 0``.

Powers of ``Ā`` are evaluated in real arithmetic, ``Ā^l = exp(l Δ Re A) (cos(l Δ Im A) + i sin(l Δ Im A))``,
with the phase reduced modulo 2π in float64 so long kernels stay accurate in float32.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from edgessm.dsp import erb_to_hz, hz_to_erb

# Re(A) never gets closer to 0 than this: |Ā| < 1 strictly, the state stays bounded.
MIN_DECAY = 1e-4
TAIL = 1e-8  # a kernel's tail below this fraction of its start is left out of FFT convolutions


def dt_grid(n: int, dt_min: float = 1e-3, dt_max: float = 1e-1) -> Tensor:
    """``n`` step sizes spaced geometrically in ``[dt_min, dt_max]`` (paper App. E).

    A single step takes the geometric middle of the range rather than its lower end.
    """
    if n == 1:
        return torch.tensor([math.sqrt(dt_min * dt_max)], dtype=torch.float64)
    return torch.logspace(math.log10(dt_min), math.log10(dt_max), n, dtype=torch.float64)


def auditory_modes(count: int, rate: float, low_hz: float = 50.0, high: float = 0.9) -> tuple[Tensor, Tensor]:
    """``count`` resonances spaced evenly on the ERB-rate scale (Glasberg & Moore) from ``low_hz`` to
    ``high`` x Nyquist: ``(ω, β)`` in radians per sample at ``rate`` Hz, each mode's centre frequency and
    decay. A mode ``exp(-β + iω)`` has a -3 dB bandwidth of ``2β``; ``β`` makes it one ERB,
    ``24.7 (4.37 f / 1000 + 1)`` Hz, wide (capped below ``ω``): a gammatone-like filterbank.

    The waveform-end blocks use it instead of S4D-Lin: with a few states there, ``Im(ΔA) = πnΔ`` puts
    every resonance below ~300 Hz at 16 kHz, and the learned ``Δ`` moves them too slowly to reach the
    formants (a trained keyword spotter's first block still listened below 460 Hz).
    """
    lo, hi = float(hz_to_erb(low_hz)), float(hz_to_erb(high * rate / 2))
    if count > 1:
        e = torch.linspace(lo, hi, count, dtype=torch.float64)
    else:
        e = torch.tensor([(lo + hi) / 2], dtype=torch.float64)
    f = erb_to_hz(e)
    bandwidth = 24.7 * (4.37 * f / 1000 + 1)
    omega = 2 * math.pi * f / rate
    beta = torch.minimum(math.pi * bandwidth / rate, 0.5 * omega)
    return omega, beta


def s4d_imag(n: int) -> Tensor:
    """S4D-Lin imaginary parts ``π n`` for ``n = 0..n-1`` (the real part is -1/2)."""
    return math.pi * torch.arange(n, dtype=torch.float64)


class DiagonalModes(nn.Module):
    """A tensor of complex continuous-time eigenvalues with their learnable steps Δ.

    Args:
        imag: initial ``Im(A)``, shape ``S`` (the mode shape of the block).
        dt: initial Δ, any shape that broadcasts to ``S`` (one Δ per state, per the block).
        real: initial ``-Re(A)``: 1/2 for every mode (S4D-Lin), or a tensor broadcasting to ``S``.

    The parameters carry ``_optim = {"weight_decay": 0.0}`` so trainers can give them their own group.

    ``memory`` (steps; 0: unbounded) bounds the modes' memory: ``Re(ΔA)`` gets a fixed extra ``-1/memory``,
    so ``|Ā| <= exp(-1/memory)`` and a state forgets by ``1/e`` within ``memory`` steps whatever ``Δ``
    learns. Why: S4D's ``Δ`` grid reaches time constants of a minute at a 50 Hz frame rate, but a
    keyword spotter trains on two-second examples from the zero state, so those modes are never seen
    past their first seconds. In a live stream they have run for minutes and sit far from anything the
    network was trained on (kws35 v4: the share of real words scored above 0.9 fell from 52% to 28-37%
    when one more second of silence came before the word). Bounded modes reach their stream behaviour
    within the training examples. The leak is a constant, not a parameter: it is part of the config.
    """

    def __init__(self, imag: Tensor, dt: Tensor, real: float | Tensor = 0.5, memory: float = 0.0) -> None:
        super().__init__()
        self.memory = memory
        imag = imag.to(torch.float32)
        if isinstance(real, Tensor):  # one decay per mode (above MIN_DECAY, which dtA adds back)
            a_log = torch.log((real.to(torch.float64) - MIN_DECAY).clamp_min(1e-6)).expand(imag.shape)
        else:
            a_log = torch.full_like(imag, math.log(real))
        self.a_log = nn.Parameter(a_log.to(torch.float32).clone())
        self.a_im = nn.Parameter(imag.clone())
        self.dt_log = nn.Parameter(torch.log(dt).to(torch.float32))
        for p in (self.a_log, self.a_im, self.dt_log):
            p._optim = {"weight_decay": 0.0}  # type: ignore[attr-defined]

    @property
    def shape(self) -> torch.Size:
        return self.a_im.shape

    def delta(self) -> Tensor:
        """Δ broadcast to the mode shape ``S``."""
        return torch.exp(self.dt_log).expand(self.shape)

    def live_length(self, length: int, tail: float = TAIL) -> int:
        """Samples of the modes' impulse responses that matter for an input of ``length``: until the
        slowest, ``|Ā|^t = exp(Re(ΔA) t)``, has decayed below ``tail`` (at most ``length``).

        Convolving with only that much of a kernel changes nothing at float32 resolution, and when the
        modes ring for less than the input is long, the FFTs shrink from ``2 L`` to ``L + live`` points.

        Off the CPU (and while ``torch.compile`` traces) it is ``length``: a kernel length read from the
        parameters would make the host wait for the GPU in every layer of every step, and a step that syncs
        can be neither captured as a CUDA graph nor compiled into one graph. The FFTs it saves are
        a small part of a GPU step.
        """
        if self.a_log.device.type != "cpu" or torch.compiler.is_compiling():
            return length
        with torch.no_grad():
            wr, _ = self.dtA()
        need = math.log(tail) / float(wr.max())
        if not math.isfinite(need):  # non-finite parameters (a diverged run): the whole kernel, no crash here
            return length
        return max(1, min(length, math.ceil(need)))

    @property
    def memory(self) -> float:
        """The bound on the modes' memory in steps (0: none)."""
        return self._memory

    @memory.setter
    def memory(self, steps: float) -> None:
        self._memory = memory_steps(steps)

    def dtA(self) -> tuple[Tensor, Tensor]:
        """``Δ A`` as ``(real, imag)``, each of shape ``S``; ``Ā = exp(Δ A)`` (eq. 2), with the leak
        ``-1/memory`` added to the real part when the memory is bounded."""
        dt = self.delta()
        a_re = -(torch.exp(self.a_log) + MIN_DECAY)
        leak = 1.0 / self._memory if self._memory else 0.0
        return dt * a_re - leak, dt * self.a_im


def memory_steps(steps: float) -> float:
    """A memory bound in steps, checked: 0 (unbounded) or at least one step."""
    if not (steps == 0 or (math.isfinite(steps) and steps >= 1)):
        raise ValueError(f"a memory bound must be 0 (unbounded) or at least one step, got {steps}")
    return float(steps)


def phase(wi: Tensor, t: Tensor) -> Tensor:
    """``t * wi`` reduced to ``[-π, π)``, computed in float64; shape ``(*wi.shape, len(t))``."""
    ang = wi.to(torch.float64).unsqueeze(-1) * t.to(torch.float64)
    return torch.remainder(ang + math.pi, 2 * math.pi) - math.pi


def powers(wr: Tensor, wi: Tensor, t: Tensor, dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
    """``Ā^t`` for ``Ā = exp(wr + i wi)`` at integer times ``t`` as ``(real, imag)``.

    Shapes: ``wr, wi`` are ``S``; ``t`` is ``(T,)``; results are ``(*S, T)`` in ``dtype``
    (default: the dtype of ``wr``). The magnitude is evaluated in ``wr``'s precision and the
    phase in float64.
    """
    dtype = dtype or wr.dtype
    mag = torch.exp(wr.unsqueeze(-1) * t.to(wr.dtype))
    ang = phase(wi, t)
    return (mag * torch.cos(ang).to(mag.dtype)).to(dtype), (mag * torch.sin(ang).to(mag.dtype)).to(dtype)
