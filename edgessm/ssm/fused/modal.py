"""Fused modal kernel generation (Centaurus eq. 7, the paper's ``get_kernel``) in Triton:

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
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .launch import CALLS, bound, cdiv, kernel, tl

BLOCK_R, BLOCK_L = 16, 128  # forward tile: rows x taps
BLOCK_RB, BLOCK_LB = 16, 128  # backward: rows per program, taps per loop step


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


class _FusedModalKernel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, wr: Tensor, wi: Tensor, c: Tensor, length: int) -> Tensor:  # type: ignore[override]
        r, m = wr.shape
        out = torch.empty(r, length, dtype=torch.float32, device=wr.device)
        if r and length:
            if m == 0:
                out.zero_()
            else:
                grid = (cdiv(r, BLOCK_R), cdiv(length, BLOCK_L))
                kernel(_modal_fwd)[grid](wr, wi, c, out, r, bound(m), bound(length), BLOCK_R=BLOCK_R, BLOCK_L=BLOCK_L)
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
            grid = (cdiv(r, BLOCK_RB), m)
            kernel(_modal_bwd)[grid](
                wr, wi, c, grad, dwr, dwi, dc, r, bound(m), bound(grad.shape[-1]), BLOCK_R=BLOCK_RB, BLOCK_L=BLOCK_LB
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


__all__ = ["BLOCK_L", "BLOCK_R", "modal_kernel"]
