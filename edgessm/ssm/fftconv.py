"""Causal FFT convolution and the contraction planner for bottleneck SSM blocks.

For the bottleneck einsum (paper eq. 6/7, frequency index f)

    ŷ_bjf = û_bif · B̄_ni · k̂_nf · C_jn

Lemma 1 leaves two feasible contraction orders (paper Sec. 4.3, Fig. 2, App. B):

* ``natural``  - project the input, convolve each state with its kernel, project the output:
  cost ≈ B N F (H + H');
* ``full``     - build the full kernel ``k_jif = C_jn k_nf B̄_ni`` first, then one full convolution:
  cost ≈ H H' F (B + N).

``natural`` wins iff ``1/B + 1/N > 1/H + 1/H'``. Each order then has a refinement deciding on
which side of the FFT the projections happen (Listing 1): the natural order projects in time when
``N <= H`` (fewer signals to transform), otherwise in frequency; the full order builds the kernel
in time when ``H H' <= N`` (fewer kernels to transform), otherwise in frequency.
:func:`plan_bottleneck` encodes the rule and :func:`bottleneck_flops` is the explicit FLOP model
that lets tests and benchmarks check the choice.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

Order = Literal["natural", "full"]
Side = Literal["time", "freq"]


def fft_size(n: int) -> int:
    """Smallest ``m >= n`` of the form ``2^a 3^b 5^c`` (fast for every FFT backend)."""
    best = 1 << max(0, (n - 1).bit_length())
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            m = p35
            while m < n:
                m *= 2
            best = min(best, m)
            p35 *= 3
        p5 *= 5
    return best


def rfft(x: Tensor, n: int) -> Tensor:
    """``torch.fft.rfft(x, n)`` over the last axis in float32 or wider; on a CPU, where it needs a gradient,
    through :class:`_RealFFT` (the same numbers, a cheaper backward)."""
    x = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    if x.device.type == "cpu" and x.requires_grad and torch.is_grad_enabled():
        return _RealFFT.apply(x, n)
    return torch.fft.rfft(x, n=n)


class _RealFFT(torch.autograd.Function):
    """``torch.fft.rfft(x, n)`` with its gradient as one inverse real FFT.

    PyTorch's own backward pads the one-sided gradient with zeros to ``n`` bins and runs a complex FFT of
    all ``n``: twice the work of the forward and a full-size fill. For ``y_f = Σ_t x_t e^{-2πi f t / n}``
    (``f = 0 .. n/2``) the gradient is ``Re Σ_f g_f e^{2πi f t / n}``: ``n · irfft(h)`` with ``h`` the
    gradient ``g`` whose bins strictly between DC and Nyquist are halved (``irfft`` counts each of them twice
    and reads only the real part of the two ends). On this CPU it took 7% off kws_v8's training step."""

    @staticmethod
    def forward(ctx, x: Tensor, n: int) -> Tensor:
        ctx.n, ctx.length = n, x.shape[-1]
        return torch.fft.rfft(x, n=n)

    @staticmethod
    def backward(ctx, g: Tensor) -> tuple[Tensor, None]:
        n = ctx.n
        half = torch.full((g.shape[-1],), 0.5 * n, dtype=g.real.dtype, device=g.device)
        half[0] = n
        if n % 2 == 0:
            half[-1] = n
        return torch.fft.irfft(g * half, n=n)[..., : ctx.length], None


def _irfft(x: Tensor, n: int, length: int) -> Tensor:
    return torch.fft.irfft(x, n=n)[..., :length]


# Frequency-domain contractions in real arithmetic: complex einsums are several times slower than
# real batched matmuls on CPUs, and a real matmul is what every backend tunes best.


_LOOP_MAX_INPUTS = 16


def _mix_complex(x: Tensor, w: Tensor) -> Tensor:
    """``y_bjf = Σ_i x_bif w_jif`` for complex ``x (B, I, F)``, ``w (J, I, F)``.

    Up to 16 inputs: a sum of broadcast products. More: one real bmm over ``f``,
    ``[Re y | Im y] = [Re x | Im x] @ [[Re w, Im w], [-Im w, Re w]]``.
    """
    if x.shape[1] <= _LOOP_MAX_INPUTS:
        # few inputs: accumulate elementwise products (a bmm over F tiny matrices is far slower)
        y = x[:, 0:1] * w[:, 0]
        for i in range(1, x.shape[1]):
            y = y + x[:, i : i + 1] * w[:, i]
        return y
    j = w.shape[0]
    a = torch.cat([x.real, x.imag], dim=1).permute(2, 0, 1)  # (F, B, 2I)
    wr, wi = w.real.permute(2, 1, 0), w.imag.permute(2, 1, 0)  # (F, I, J)
    k = torch.cat([torch.cat([wr, wi], -1), torch.cat([-wi, wr], -1)], -2)  # (F, 2I, 2J)
    y = torch.bmm(a, k)  # (F, B, 2J)
    return torch.complex(y[..., :j], y[..., j:]).permute(1, 2, 0)


def _project_complex(x: Tensor, w: Tensor) -> Tensor:
    """``y_bnf = Σ_i w_ni x_bif`` for complex ``x (B, I, F)`` and real ``w (N, I)``."""
    y = torch.einsum("ni,bifc->bnfc", w, torch.view_as_real(x))
    return torch.view_as_complex(y.contiguous())


def causal_conv(u: Tensor, k: Tensor, mode: Literal["depthwise", "full"] = "depthwise") -> Tensor:
    """Causal linear convolution ``y[t] = Σ_{s<=t} k[t-s] u[s]`` via zero-padded FFTs.

    Args:
        u: ``(B, H, L)`` input.
        k: ``(H, Lk)`` for ``depthwise`` or ``(H', H, Lk)`` for ``full`` (every input/output pair).

    Returns:
        ``(B, H, L)`` or ``(B, H', L)``: the first ``L`` samples of the linear convolution.
    """
    length = u.shape[-1]
    n = fft_size(length + k.shape[-1] - 1)
    uf = rfft(u, n)
    kf = rfft(k, n)
    if mode == "depthwise":
        yf = uf * kf
    elif mode == "full":
        yf = _mix_complex(uf, kf)
    else:
        raise ValueError(f"unknown convolution mode {mode!r}; use 'depthwise' or 'full'")
    return _irfft(yf, n, length)


@dataclass(frozen=True)
class Plan:
    """A contraction order for the bottleneck einsum and the side of the FFT for its projections."""

    order: Order
    side: Side
    fused: bool | None = None  # natural-freq only: None = the fused contraction wherever it may run, False = never

    @property
    def name(self) -> str:
        return f"{self.order}-{self.side}" + ("-unfused" if self.fused is False else "")


PLANS = (Plan("natural", "time"), Plan("natural", "freq"), Plan("full", "time"), Plan("full", "freq"))
# On a GPU the fused contraction is not always the faster (H100, session 24: 4x slower at B 64, H 128, N 64,
# H' 128, F 1001; 12% slower but half the memory at App. C's size), so the measured planner times both.
UNFUSED = Plan("natural", "freq", fused=False)


def plan_bottleneck(batch: int, h_in: int, h_out: int, n: int) -> Plan:
    """The paper's rule (App. B, Listing 1) for ``ŷ = û B̄ k̂ C`` with ``n`` kernels."""
    if 1 / batch + 1 / n > 1 / h_in + 1 / h_out:
        return Plan("natural", "time" if n <= h_in else "freq")
    return Plan("full", "time" if h_in * h_out <= n else "freq")


def _fft_flops(n_fft: int) -> float:
    # one real FFT of size n: about 2.5 n log2 n real FLOPs
    return 2.5 * n_fft * math.log2(max(2, n_fft))


def bottleneck_flops(
    plan: Plan, batch: int, h_in: int, h_out: int, n: int, length: int, include_fft: bool = True
) -> float:
    """Forward FLOPs of ``y = C (k * (B̄ u))`` along ``plan``, kernel ``k (n, length)`` given.

    Conventions: a real multiply-add is 2 FLOPs, a real-by-complex multiply-add 4, a complex
    multiply-add 8, a complex product 6; real FFT/iFFT of size ``m`` costs 2.5 m log2 m
    (``include_fft=False`` counts the contractions only, the paper's App. B model).
    The backward pass costs about twice the forward for every order (paper, footnote 10).
    """
    m = fft_size(2 * length - 1)
    f = m // 2 + 1
    fft = _fft_flops(m) if include_fft else 0.0
    b, h, j, L = batch, h_in, h_out, length
    if plan == Plan("natural", "time"):
        return 2 * b * n * h * L + fft * (b * n + n) + 6 * b * n * f + fft * b * n + 2 * b * j * n * L
    if plan == Plan("natural", "freq"):
        return fft * (b * h + n) + 4 * b * n * h * f + 6 * b * n * f + 4 * b * j * n * f + fft * b * j
    if plan == Plan("full", "time"):
        return 2 * j * h * n * L + fft * (j * h + b * h) + 8 * b * j * h * f + fft * b * j
    if plan == Plan("full", "freq"):
        return fft * (n + b * h) + 4 * j * h * n * f + 8 * b * j * h * f + fft * b * j
    raise ValueError(f"unknown plan {plan}")


def cheapest_plan(batch: int, h_in: int, h_out: int, n: int, length: int) -> Plan:
    """The plan with the fewest FLOPs under :func:`bottleneck_flops` (a plain loop: ``torch.compile`` traces
    it, where ``min(..., key=...)`` breaks the graph)."""
    best, fewest = PLANS[0], math.inf
    for plan in PLANS:
        flops = bottleneck_flops(plan, batch, h_in, h_out, n, length)
        if flops < fewest:
            best, fewest = plan, flops
    return best


# (batch, h_in, h_out, n, length, kernel length, device, dtype, with backward) -> the fastest plan measured
MEASURED: dict[tuple, Plan] = {}


def time_plan(
    plan: Plan,
    batch: int,
    h_in: int,
    h_out: int,
    n: int,
    length: int,
    kernel_length: int | None = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    backward: bool = True,
    repeats: int = 3,
) -> float:
    """Median seconds of one :func:`bottleneck_conv` along ``plan`` (forward, and backward if asked) on
    random tensors of the given sizes; CUDA events on a GPU, the wall clock elsewhere. One untimed run
    first (cuFFT plans, allocator). Out of memory counts as infinitely slow."""
    device = torch.device(device)
    g = torch.Generator(device="cpu").manual_seed(0)

    def rand(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype).requires_grad_(backward)

    try:
        u, k = rand(batch, h_in, length), rand(n, kernel_length or length)
        b, c = rand(n, h_in), rand(h_out, n)
    except torch.OutOfMemoryError:
        return _out_of_memory(device)

    def run() -> None:
        y = bottleneck_conv(u, k, b, c, plan)
        if backward:
            torch.autograd.grad(y.sum(), (u, k, b, c))

    return median_seconds(run, device, repeats)


def _out_of_memory(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.empty_cache()  # what the failed candidate allocated goes back before the next is timed
    return math.inf


def median_seconds(run: Callable[[], None], device: torch.device, repeats: int = 3) -> float:
    """Median seconds of ``run()`` over ``repeats`` calls after one untimed call (cuFFT plans, allocator): CUDA
    events on a GPU, the wall clock elsewhere. Out of memory counts as infinitely slow (the planners' timer)."""
    try:
        run()
        times = []
        for _ in range(repeats):
            if device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                run()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            else:
                t0 = time.perf_counter()
                run()
                times.append(time.perf_counter() - t0)
    except torch.OutOfMemoryError:
        return _out_of_memory(device)
    return sorted(times)[len(times) // 2]


def measured_plan(
    batch: int,
    h_in: int,
    h_out: int,
    n: int,
    length: int,
    kernel_length: int | None = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    backward: bool = True,
    timer: Callable[..., float] = time_plan,
) -> Plan:
    """The fastest of :data:`PLANS` for these sizes, timed once (:func:`time_plan`) and then cached in
    :data:`MEASURED`: on a GPU the FLOP model is a poor guide (launch-bound sizes, cuFFT's sizes),
    so the blocks measure there. Where the fused contraction may run, natural-freq is timed with and
    without it (:data:`UNFUSED`). While ``torch.compile`` traces, an unmeasured shape gets the paper's rule."""
    key = (batch, h_in, h_out, n, length, kernel_length or length, str(torch.device(device)), dtype, backward)
    if key not in MEASURED:
        if torch.compiler.is_compiling():
            return plan_bottleneck(batch, h_in, h_out, n)
        args = (batch, h_in, h_out, n, length, kernel_length, device, dtype, backward)
        candidates = PLANS + ((UNFUSED,) if _fused(torch.empty(0, device=device)) else ())
        MEASURED[key] = min(candidates, key=lambda p: timer(p, *args))
    return MEASURED[key]


def _fused(t: Tensor) -> bool:
    """Whether the fused Triton contraction runs for ``t`` (:func:`edgessm.ssm.fused.use_fused`)."""
    from . import fused

    return fused.wants_fused(t) and fused.use_fused(t)  # Triton is imported only past the first test


def bottleneck_conv(u: Tensor, k: Tensor, b_bar: Tensor, c: Tensor, plan: Plan) -> Tensor:
    """``y_bjt = C_jn (k_n * (B̄_ni u_bi))_t`` evaluated along ``plan``.

    Args:
        u: ``(B, H, L)`` input.
        k: ``(N, L)`` per-state kernels (sub-states already contracted away).
        b_bar: ``(N, H)`` discrete input matrix.
        c: ``(H', N)`` output matrix.
        plan: contraction order and FFT side, see :func:`plan_bottleneck`.

    Returns:
        ``(B, H', L)``.
    """
    length = u.shape[-1]
    n_fft = fft_size(length + k.shape[-1] - 1)
    if plan.order == "natural" and plan.side == "time":
        x = torch.einsum("bit,ni->bnt", u, b_bar)
        x = _irfft(rfft(x, n_fft) * rfft(k, n_fft), n_fft, length)
        return torch.einsum("bnt,jn->bjt", x, c)
    if plan.order == "natural":
        uf, kf = rfft(u, n_fft), rfft(k, n_fft)
        # fused: one kernel, the (B, N, F) intermediate never in memory
        if plan.fused is not False and _fused(uf.real):
            from . import fused

            return _irfft(fused.project_convolve(uf, kf, b_bar, c), n_fft, length)
        return _irfft(_project_complex(_project_complex(uf, b_bar) * kf, c), n_fft, length)
    if plan.side == "time":
        k_full = torch.einsum("jn,ni,nt->jit", c, b_bar, k)
        return causal_conv(u, k_full, "full")
    kf = torch.view_as_real(rfft(k, n_fft))  # (N, F, 2)
    cb = torch.einsum("jn,ni->jin", c, b_bar)  # small: contract the projections first
    kf_full = torch.view_as_complex(torch.einsum("jin,nfc->jifc", cb, kf).contiguous())
    return _irfft(_mix_complex(rfft(u, n_fft), kf_full), n_fft, length)
