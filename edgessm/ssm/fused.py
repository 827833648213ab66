"""Fused Triton kernels for GPU training (issue 34), beside the PyTorch paths they replace.

Modal kernel generation (Centaurus eq. 7, the paper's ``get_kernel``):

    k[r, l] = Σ_m c[r, m] · exp(l · wr[r, m]) · cos(l · wi[r, m]),     l = 0..L-1,

for rows ``r`` (every leading index of the layer: channels, states, ...) and sub-states ``m``. The PyTorch
path (:func:`edgessm.ssm.kernels.modal_kernel`) builds ``(R, M, slab)`` basis slabs and contracts them; it
launches a handful of kernels per slab and moves the basis through memory. Here one program owns a
``(BLOCK_R, BLOCK_L)`` tile of ``k`` and loops over ``m`` with the tile in registers: reads ``3 R M``
numbers, writes ``R L``, and never stores the basis. The backward pass regenerates the basis the same way
(one program per ``(BLOCK_R rows, one m)``, looping over ``l``):

    dc[r, m]  =  Σ_l g[r, l] · exp(l wr) cos(l wi)
    dwr[r, m] =  c[r, m] · Σ_l g[r, l] · l · exp(l wr) cos(l wi)
    dwi[r, m] = −c[r, m] · Σ_l g[r, l] · l · exp(l wr) sin(l wi)

The phase ``l · wi`` is formed and reduced to ``[−π, π)`` in float64 (as :func:`~edgessm.ssm.discretize.phase`
does): at ``l`` in the thousands a float32 product is off by ``1e-3`` rad; exp/cos/sin run in float32.

Dispatch (:func:`use_fused`): on CUDA tensors when Triton imports, unless ``EDGESSM_FUSED=0``;
``EDGESSM_FUSED=1`` demands the fused path and fails loudly (:class:`FusedUnavailable`) where it cannot
run, never falling back in silence. On CPU the kernels run only under Triton's interpreter
(``TRITON_INTERPRET=1`` when Triton is first imported; the test suite sets it): that is how CI, which has
no GPU, checks them against PyTorch. :data:`CALLS`
counts the fused launches so tests can tell the path was taken.
"""

from __future__ import annotations

import functools
import math
import os
from collections import Counter

import torch
from torch import Tensor

try:  # Triton comes with torch on Linux x86_64; elsewhere the PyTorch paths run
    import triton
    import triton.language as tl
except Exception:  # pragma: no cover - platform without Triton
    triton = tl = None

CALLS: Counter[str] = Counter()  # fused launches per kernel name (tests check the path was taken)
BLOCK_R, BLOCK_L = 16, 128  # forward tile: rows x taps
BLOCK_RB, BLOCK_LB = 16, 128  # backward: rows per program, taps per loop step


class FusedUnavailable(RuntimeError):
    """``EDGESSM_FUSED=1`` (or ``fused=True``) asked for a fused kernel that cannot run here."""


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter: ``TRITON_INTERPRET=1`` was set when Triton was
    first imported (its language module is built for one mode or the other at import)."""
    if triton is None:
        return False
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.standard.sum, InterpretedFunction)


def triton_version() -> str | None:
    """Triton's version, or ``None`` where it does not import."""
    return None if triton is None else str(triton.__version__)


def why_not(t: Tensor) -> str | None:
    """Why the fused kernels cannot run on ``t`` (``None``: they can)."""
    if triton_version() is None:
        return "Triton is not installed (it comes with torch on Linux x86_64)"
    if t.dtype != torch.float32:
        return f"the fused kernels take float32 parameters, not {t.dtype}"
    if t.device.type == "cuda" or (t.device.type == "cpu" and interpreting()):
        return None
    return (
        f"Triton runs on CUDA tensors (or on CPU when TRITON_INTERPRET=1 was set before Triton was imported), "
        f"not on {t.device.type}"
    )


def use_fused(t: Tensor, fused: bool | None = None) -> bool:
    """Whether to take the fused path for ``t``: ``fused`` if given, else ``EDGESSM_FUSED`` (``1`` demand,
    ``0`` never, unset: on CUDA where possible). A demand that cannot be met raises :class:`FusedUnavailable`."""
    if fused is None:
        env = os.environ.get("EDGESSM_FUSED", "")
        fused = True if env == "1" else False if env == "0" else None
    reason = why_not(t)
    if fused is None:
        return reason is None and t.device.type == "cuda"
    if fused and reason is not None:
        raise FusedUnavailable(f"fused kernel demanded (EDGESSM_FUSED=1 or fused=True) but {reason}")
    return fused


# ---- Triton kernels (plain functions, turned into Triton kernels by _jit at first use) ----


def _modal_fwd(wr_ptr, wi_ptr, c_ptr, out_ptr, R, M, L, BLOCK_R: tl.constexpr, BLOCK_L: tl.constexpr):
    pid_r = tl.program_id(0)
    pid_l = tl.program_id(1)
    rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    taps = pid_l * BLOCK_L + tl.arange(0, BLOCK_L)
    rmask = rows < R
    lf = taps.to(tl.float32)
    ld = taps.to(tl.float64)
    acc = tl.zeros((BLOCK_R, BLOCK_L), dtype=tl.float32)
    for m in range(0, M):
        wr = tl.load(wr_ptr + rows * M + m, mask=rmask, other=0.0)
        wi = tl.load(wi_ptr + rows * M + m, mask=rmask, other=0.0)
        c = tl.load(c_ptr + rows * M + m, mask=rmask, other=0.0)
        ang = wi.to(tl.float64)[:, None] * ld[None, :]
        ang = ang - 6.283185307179586 * tl.floor(ang * 0.15915494309189535 + 0.5)
        acc += c[:, None] * tl.exp(wr[:, None] * lf[None, :]) * tl.cos(ang.to(tl.float32))
    mask = rmask[:, None] & (taps < L)[None, :]
    tl.store(out_ptr + rows[:, None] * L + taps[None, :], acc, mask=mask)


def _modal_bwd(
    wr_ptr, wi_ptr, c_ptr, g_ptr, dwr_ptr, dwi_ptr, dc_ptr, R, M, L, BLOCK_R: tl.constexpr, BLOCK_L: tl.constexpr
):
    pid_r = tl.program_id(0)
    m = tl.program_id(1)
    rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows < R
    wr = tl.load(wr_ptr + rows * M + m, mask=rmask, other=0.0)
    wi = tl.load(wi_ptr + rows * M + m, mask=rmask, other=0.0)
    c = tl.load(c_ptr + rows * M + m, mask=rmask, other=0.0)
    wi64 = wi.to(tl.float64)
    s_cos = tl.zeros((BLOCK_R,), dtype=tl.float32)
    s_lcos = tl.zeros((BLOCK_R,), dtype=tl.float32)
    s_lsin = tl.zeros((BLOCK_R,), dtype=tl.float32)
    for l0 in range(0, L, BLOCK_L):
        taps = l0 + tl.arange(0, BLOCK_L)
        lmask = taps < L
        g = tl.load(g_ptr + rows[:, None] * L + taps[None, :], mask=rmask[:, None] & lmask[None, :], other=0.0)
        lf = taps.to(tl.float32)
        ang = wi64[:, None] * taps.to(tl.float64)[None, :]
        ang = (ang - 6.283185307179586 * tl.floor(ang * 0.15915494309189535 + 0.5)).to(tl.float32)
        gm = g * tl.exp(wr[:, None] * lf[None, :])
        gc = gm * tl.cos(ang)
        s_cos += tl.sum(gc, axis=1)
        s_lcos += tl.sum(gc * lf[None, :], axis=1)
        s_lsin += tl.sum(gm * tl.sin(ang) * lf[None, :], axis=1)
    tl.store(dc_ptr + rows * M + m, s_cos, mask=rmask)
    tl.store(dwr_ptr + rows * M + m, c * s_lcos, mask=rmask)
    tl.store(dwi_ptr + rows * M + m, -c * s_lsin, mask=rmask)


@functools.cache
def _jit(interpret: bool) -> dict[str, object]:
    """The kernels, compiled for the GPU or wrapped for Triton's interpreter, whatever ``TRITON_INTERPRET``
    was when Triton was imported (so a test can turn the interpreter on for itself)."""
    if interpret:
        from triton.runtime.interpreter import InterpretedFunction

        return {fn.__name__: InterpretedFunction(fn) for fn in (_modal_fwd, _modal_bwd)}
    return {fn.__name__: triton.jit(fn) for fn in (_modal_fwd, _modal_bwd)}


def _bound(n: int) -> object:
    """A loop bound as a kernel argument. The interpreter hands plain ints to a kernel as 1-element arrays,
    which numpy >= 2.4 no longer accepts as a ``range`` bound (triton-lang/triton#9171); there it goes as a
    ``tl.constexpr``. Compiled kernels take it as a runtime int, so one compilation serves every length."""
    return tl.constexpr(n) if interpreting() else n


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class _FusedModalKernel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, wr: Tensor, wi: Tensor, c: Tensor, length: int) -> Tensor:  # type: ignore[override]
        r, m = wr.shape
        out = torch.empty(r, length, dtype=torch.float32, device=wr.device)
        if r and length:
            if m == 0:
                out.zero_()
            else:
                grid = (_cdiv(r, BLOCK_R), _cdiv(length, BLOCK_L))
                _jit(interpreting())["_modal_fwd"][grid](
                    wr, wi, c, out, r, _bound(m), _bound(length), BLOCK_R=BLOCK_R, BLOCK_L=BLOCK_L
                )
                CALLS["modal_fwd"] += 1
        ctx.save_for_backward(wr, wi, c)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        wr, wi, c = ctx.saved_tensors
        r, m = wr.shape
        grad = grad.float().contiguous()
        dwr, dwi, dc = (torch.zeros_like(wr) for _ in range(3))
        if r and m and grad.shape[-1]:
            grid = (_cdiv(r, BLOCK_RB), m)
            _jit(interpreting())["_modal_bwd"][grid](
                wr, wi, c, grad, dwr, dwi, dc, r, _bound(m), _bound(grad.shape[-1]), BLOCK_R=BLOCK_RB, BLOCK_L=BLOCK_LB
            )
            CALLS["modal_bwd"] += 1
        return dwr, dwi, dc, None


def modal_kernel(wr: Tensor, wi: Tensor, c: Tensor, length: int) -> Tensor:
    """Fused ``k[..., l] = Σ_m c[..., m] exp(l wr) cos(l wi)``; arguments broadcast to ``(..., M)``
    (float32), result ``(..., L)``. Same contract as :func:`edgessm.ssm.kernels.modal_kernel`."""
    shape = torch.broadcast_shapes(wr.shape, wi.shape, c.shape)
    flat = (math.prod(shape[:-1]), shape[-1])
    args = [t.expand(shape).reshape(flat).contiguous().float() for t in (wr, wi, c)]
    return _FusedModalKernel.apply(*args, int(length)).reshape(*shape[:-1], int(length))


__all__ = ["CALLS", "FusedUnavailable", "interpreting", "modal_kernel", "triton_version", "use_fused", "why_not"]
