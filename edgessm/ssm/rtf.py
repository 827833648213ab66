"""RTF: the rational transfer function SSM ("State-Free Inference of State-Space Models", Parnichkun et al.).

Every channel ``i`` filters with an order-``N`` rational transfer function (the paper's eq. 4)

    H_i(z) = h0_i + (b_i1 z^-1 + ... + b_iN z^-N) / (1 + a_1 z^-1 + ... + a_N z^-N),

one denominator per group of channels (``denominators`` groups), then an optional pointwise mixer,
like the depthwise Centaurus block.

Training (state-free, Sec. 3): both polynomials are evaluated on the ``n`` roots of unity by one FFT of
their zero-padded coefficients, ``K = irfft(rfft(b) / rfft(a))``, cost ``O(n log n)`` whatever ``N``.
That kernel is the impulse response *periodised* with period ``n``: ``k̃[t] = Σ_m k[t + m n]``. Rather
than learning the periodised numerator and inverting the map for deployment (the reference code's
``get_C`` solves the wrong system; our design notes §2.3, §7.8), ``b`` here is the numerator of the
recurrent filter itself and the FFT gets the corrected numerator ``b'`` whose periodised response is
exactly ``k`` on ``[0, n)``: with ``S`` the shift, ``k' = (I - S^n) k`` telescopes under the periodic sum.
``S^n`` acts on the ``N``-dimensional solution space of the recurrence: by the first row ``ρ`` of the
companion matrix's ``n``-th power, i.e. the coefficients of ``z^n mod Ã(z)`` (``log n`` polynomial squarings), so

    k[t + n] = Σ_j ρ_j k[t + j],   k'[t] = k[t] - k[t + n]  (t = 1..N),   b'_j = Σ_{i<j} a_i k'[j - i].

Tap 0 then holds an alias ``k[n]`` and is set to ``h0``. The result equals the recurrence to float64
rounding for any ``n >= L`` (tests: 1e-9 against a direct loop), so training length and FFT size are
free and the streamed filter is the trained one.

Stability: Montel's bound. ``a = (1 - δ) â / (Σ|â| + |s| + ε)`` gives ``Σ|a| < 1``, so every pole lies in
the open unit disc (``|z| >= 1`` would give ``|z| <= Σ|a| < 1``); more precisely ``|z| <= (1 - δ)^(1/N)``.
It also makes the companion matrix non-expansive (its infinity norm is ``max(1, Σ|a|) = 1``), which is why
the matrix powers above and the streaming form below are safe in float32.

Streaming: the direct form, state ``x[t] = (v[t-N+1], ..., v[t])`` of the all-pole part
``v[t] = u[t] - Σ_i a_i v[t-i]``, read out before the update, ``y[t] = h0 u[t] + Σ_i b_i v[t-i]``; the chunk
constants come from :meth:`SSMLayer._dense_constants` in float64. Why not the modal (diagonal) form of
the poles: its residues blow up when poles cluster, and the zero initialisation puts all ``N`` of them
at the origin. At ``N = 16`` with ``a ~ 1e-6`` (just off zero) the poles lie on a circle of radius 0.44,
the residues reach 1e6 and cancel, and a float32 modal filter is 0.7% off (``a ~ 1e-9``: 110%), where
the direct form stays at 5e-8. The companion form under Montel is bounded by construction.
``modal_error`` measures both on a trained layer.

Initialisation: the paper's "zero" scheme (``a = b = 0``, the kernel starts as ``h0 δ``) or ``xavier``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .blocks import ChannelKernelSSM, _hi
from .discretize import memory_steps
from .fftconv import causal_conv, fft_size
from .precision import float32_island
from .stream import Counts, State

EPS = 1e-6
# Σ|a| <= 1 - MARGIN (representable in float32): every pole radius stays below about 1 - MARGIN / N, i.e. a
# memory of at most N / MARGIN steps, like the floor on Re(A) of the diagonal blocks.
MARGIN = 1e-3


class RationalSSM(ChannelKernelSSM):
    """Depthwise RTF block: a rational kernel per channel, then an optional ``H -> H'`` mixer.

    Args:
        h_in: input channels H.
        h_out: output channels H' (default H).
        n_states: the order N of every transfer function (its streaming state per channel).
        mixer: add the pointwise mixer (required when ``h_out != h_in``).
        denominators: groups of channels sharing one denominator (must divide ``h_in``; default one per channel).
        init: ``"zero"`` (the paper's default) or ``"xavier"`` (``U(±1/√N)`` coefficients).
    """

    kind = "rtf"

    def __init__(
        self,
        h_in: int,
        h_out: int | None = None,
        n_states: int = 16,
        *,
        mixer: bool = True,
        denominators: int | None = None,
        init: str = "zero",
    ) -> None:
        super().__init__()
        h_out = h_in if h_out is None else h_out
        groups = h_in if denominators is None else denominators
        if groups < 1 or h_in % groups:
            raise ValueError(f"denominators={groups} must divide the {h_in} input channels")
        if n_states < 1:
            raise ValueError(f"an RTF block needs an order of at least 1, got n_states={n_states}")
        self.h_in, self.h_out, self.n_states, self.groups = h_in, h_out, n_states, groups
        if init == "zero":
            a, b = torch.zeros(groups, n_states), torch.zeros(h_in, n_states)
        elif init == "xavier":
            bound = 1 / math.sqrt(n_states)
            a = torch.empty(groups, n_states).uniform_(-bound, bound)
            b = torch.empty(h_in, n_states).uniform_(-bound, bound)
        else:
            raise ValueError(f"unknown RTF init {init!r}; choose 'zero' or 'xavier'")
        self.a_raw = nn.Parameter(a)  # â: the denominator before Montel's normalisation
        self.a_slack = nn.Parameter(torch.ones(groups))  # s: how far Σ|a| stays below 1
        for p in (self.a_raw, self.a_slack):
            p._optim = {"weight_decay": 0.0}  # type: ignore[attr-defined]
        self.b = nn.Parameter(b)
        self.h0 = nn.Parameter(torch.randn(h_in))
        self._set_mixer(h_in, h_out, mixer)
        self.memory = 0.0

    @property
    def memory(self) -> float:
        """A bound on the filters' memory in steps (0: none, the Montel bound alone): every pole radius
        is scaled by ``ρ = exp(-1/memory)`` (``a_i -> a_i ρ^i``), as the leak bounds the diagonal blocks' modes."""
        return self._memory

    @memory.setter
    def memory(self, steps: float) -> None:
        self._memory = memory_steps(steps)

    # -- the transfer function ---------------------------------------------------------------------

    def denominator(self) -> Tensor:
        """``a (H, N)``: Montel-normalised, ``Σ_i |a_i| <= 1 - MARGIN`` (all poles inside the unit circle)."""
        norm = self.a_raw.abs().sum(-1, keepdim=True) + self.a_slack.abs().unsqueeze(-1) + EPS
        a = (1 - MARGIN) * self.a_raw / norm
        if self._memory:  # poles scaled by ρ: the roots of Ã(z / ρ) ρ^N
            a = a * torch.exp(-torch.arange(1, self.n_states + 1, device=a.device, dtype=a.dtype) / self._memory)
        return a.repeat_interleave(self.h_in // self.groups, dim=0)

    def kernel(self, length: int) -> Tensor:
        """Per-channel kernels ``(H, length)``: the exact impulse responses, by the state-free FFT."""
        a, b = self.denominator(), self.b
        n = fft_size(max(length, self.n_states + 1))
        ones = torch.ones_like(a[:, :1])
        den = torch.fft.rfft(torch.cat([ones, a], -1), n)
        num = torch.fft.rfft(torch.cat([torch.zeros_like(ones), unperiodise(a, b, n)], -1), n)
        k = torch.fft.irfft(num / den, n)[:, :length]
        return torch.cat([self.h0.unsqueeze(-1), k[:, 1:]], dim=-1)  # tap 0 held the alias k[n]

    def poles(self) -> Tensor:
        """The poles of every channel's filter, ``(H, N)`` complex (float64): the companion eigenvalues."""
        with torch.no_grad():
            return torch.linalg.eigvals(_companion(_hi(self.denominator())))

    @float32_island
    def forward(self, u: Tensor) -> Tensor:
        """``(B, H, L) -> (B, H', L)``."""
        return self._mix(causal_conv(u, self.kernel(int(u.shape[-1])), "depthwise"))

    # -- streaming ---------------------------------------------------------------------------------

    def state_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        return [("x", (self.h_in, self.n_states))]

    def step_constants(self, length: int) -> dict[str, Tensor]:
        a, b, h0 = _hi(self.denominator()), _hi(self.b), _hi(self.h0)
        # x[t] = (v[t-N+1], ..., v[t]) as a row: x[t] = x[t-1] M^T + u[t] e_N,  y[t] = x[t-1] · (b_N .. b_1) + h0 u[t]
        gamma = torch.zeros_like(a)
        gamma[:, -1] = 1.0
        return self._dense_constants(_companion(a).transpose(-1, -2), gamma, b.flip(-1), h0, length)

    def advance(self, u: Tensor, state: State, c: dict[str, Tensor]) -> tuple[Tensor, State]:
        (x,) = state  # (B, H, N)
        y, x = self._scan(x, u, c)
        return self._mix(y), [x]

    def counts(self) -> Counts:
        h, n = self.h_in, self.n_states
        mix_p, mix_f = self._mixer_counts()
        # a per group, b and h0 per channel; per sample and channel 2N for the all-pole update, 2N + 2 readout
        return Counts(self.groups * n + h * n + h + mix_p, h * (4 * n + 2) + mix_f)


def _companion(a: Tensor) -> Tensor:
    """``M (..., N, N)`` advancing ``s_t = (k_t, ..., k_{t+N-1})`` of the recurrence ``Σ_i a_i k_{t-i} = 0``
    (``a_0 = 1``) by one step: ones above the diagonal, last row ``(-a_N, ..., -a_1)``."""
    n = int(a.shape[-1])
    shift = torch.eye(n, dtype=a.dtype, device=a.device)[1:].expand(*a.shape[:-1], n - 1, n)
    return torch.cat([shift, -a.flip(-1).unsqueeze(-2)], dim=-2)


def power_mod(a: Tensor, n: int) -> Tensor:
    """Coefficients ``ρ (..., N)`` (of ``z^0 .. z^{N-1}``) of ``z^n mod Ã(z)``, ``Ã = z^N + a_1 z^{N-1} + ... + a_N``.

    Since ``Ã(S)`` annihilates every solution ``k`` of the recurrence (``S`` the shift), ``S^n k = ρ(S) k``:
    ``ρ`` is the first row of the companion matrix's ``n``-th power. Binary exponentiation with polynomial
    squares (FFTs of ``2N`` points) and reductions by a table of ``z^{N+j} mod Ã``: ``O(N^2 log n)``, where the
    matrix power costs ``O(N^3 log n)``. Under Montel's bound every intermediate has ``Σ|ρ_j| <= 1``.
    """
    order = int(a.shape[-1])
    if order == 1:
        return (-a) ** n
    table = [-a.flip(-1)]  # z^N mod Ã: (..., N)
    for _ in range(order - 2):  # z^{N+j+1} = z z^{N+j}: shift up, fold the z^N overflow back in
        last = table[-1]
        shifted = torch.cat([torch.zeros_like(last[..., :1]), last[..., :-1]], -1)
        table.append(shifted + last[..., -1:] * table[0])
    table = torch.stack(table, dim=-2)  # (..., N - 1, N)

    def reduce(p: Tensor) -> Tensor:  # degree <= 2N - 2 -> degree < N
        return p[..., :order] + (p[..., order:].unsqueeze(-2) @ table).squeeze(-2)

    size = 2 * order
    rho = torch.zeros_like(a)
    rho[..., 0] = 1.0
    for bit in bin(n)[2:]:
        f = torch.fft.rfft(rho, size)
        rho = reduce(torch.fft.irfft(f * f, size)[..., : 2 * order - 1])
        if bit == "1":  # times z
            rho = torch.cat([torch.zeros_like(rho[..., :1]), rho[..., :-1]], -1) + rho[..., -1:] * table[..., 0, :]
    return rho


def unperiodise(a: Tensor, b: Tensor, n: int) -> Tensor:
    """The numerator ``b' (..., N)`` whose ``n``-periodised impulse response equals that of ``b / a`` on ``[1, n)``.

    ``a, b (..., N)``: denominator (without its leading 1) and numerator coefficients of ``z^-1 .. z^-N``.
    Differentiable; ``O(N^2 log n)`` (:func:`power_mod`), independent of the sequence length otherwise.
    """
    order = int(a.shape[-1])
    a0 = torch.cat([torch.ones_like(a[..., :1]), a], -1)  # (..., N + 1)
    size = 2 * order - 1
    t = torch.arange(size, device=a.device)
    lag = t[:, None] - t[None, :]
    band = ((lag >= 0) & (lag <= order)).to(a.dtype)
    toeplitz = a0[..., lag.clamp(0, order)] * band  # [i, j] = a_{i-j}: (..., 2N - 1, 2N - 1)
    rhs = torch.cat([b, torch.zeros_like(b[..., : order - 1])], -1).unsqueeze(-1)
    k = torch.linalg.solve_triangular(toeplitz, rhs, upper=False, unitriangular=True).squeeze(-1)  # k_1..k_{2N-1}
    rho = power_mod(a, n)  # k_{t+n} = ρ · (k_t .. k_{t+N-1})
    tail = (k.unfold(-1, order, 1) * rho.unsqueeze(-2)).sum(-1)  # k_{t+n}, t = 1..N
    return (toeplitz[..., :order, :order] @ (k[..., :order] - tail).unsqueeze(-1)).squeeze(-1)


def modal_error(layer: RationalSSM, length: int = 4096) -> dict[str, float]:
    """How well the float32 direct form and a float32 modal (partial-fraction) form reproduce the exact
    float64 impulse responses of ``layer``, as relative errors, with the largest pole radius and residue."""
    with torch.no_grad():
        a, b = _hi(layer.denominator()), _hi(layer.b)
        exact = _recurrence(a, b, length)
        direct = _recurrence(a.float(), b.float(), length).double()
        poles = torch.linalg.eigvals(_companion(a))  # (H, N)
        # residues of B(z)/A(z) = Σ r / (z - p): r = B~(p) / A~'(p); taps k[t] = Σ r p^(t-1)
        bz = sum(b[:, i, None].to(poles.dtype) * poles ** (layer.n_states - 1 - i) for i in range(layer.n_states))
        diff = poles.unsqueeze(-1) - poles.unsqueeze(-2) + torch.eye(layer.n_states, dtype=poles.dtype)
        residues = bz / diff.prod(-1)
        t = torch.arange(length - 1, dtype=torch.float64)
        p32, r32 = poles.to(torch.complex64), residues.to(torch.complex64)
        modal = torch.einsum("hn,hnt->ht", r32, p32.unsqueeze(-1) ** t.float()).real.double()
        modal = torch.cat([torch.zeros_like(modal[:, :1]), modal], -1)
        scale = exact.norm().clamp_min(1e-300)  # b = 0 (the zero init): both errors are 0
        return {
            "direct_f32": float((direct - exact).norm() / scale),
            "modal_f32": float((modal - exact).norm() / scale),
            "max_pole_radius": float(poles.abs().max()),
            "max_residue": float(residues.abs().max()),
        }


def _recurrence(a: Tensor, b: Tensor, length: int) -> Tensor:
    """The strictly proper impulse responses ``(H, length)`` by running ``v[t] = δ[t] - Σ a_i v[t-i]`` directly."""
    h, n = a.shape
    v = torch.zeros(h, length + n, dtype=a.dtype)
    out = torch.zeros(h, length, dtype=a.dtype)
    for t in range(length):
        past = v[:, t : t + n].flip(-1)  # v[t-1], ..., v[t-n]
        out[:, t] = (b * past).sum(-1)
        v[:, t + n] = (1.0 if t == 0 else 0.0) - (a * past).sum(-1)
    return out
