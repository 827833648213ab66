"""Fused frequency-domain contraction of the bottleneck blocks (Centaurus eq. 6, the natural order):

    ŷ[b, j, f] = Σ_n C[j, n] · k̂[n, f] · Σ_i B̄[n, i] · û[b, i, f]

for the rFFT ``û`` of a batch ``(B, H, F)``, the per-state kernels' rFFT ``k̂ (N, F)`` and real projections
``B̄ (N, H)``, ``C (H', N)``. Unfused, the intermediate ``x̂ = B̄ û`` is a complex ``(B, N, F)`` tensor written
and read several times (the natural order's 6 GiB at the paper's App. C size). Here one program owns a batch
row and ``BLOCK_F`` frequencies and walks the states ``BLOCK_N`` at a time: two small matrix products per
block (``B̄ û`` then ``C (k̂ ⊙ ·)``, real and imaginary parts) with the ``(BLOCK_N, BLOCK_F)`` slice of ``x̂``
in registers, never in memory.

Backward (PyTorch's convention: a complex gradient is ``∂L/∂Re + i ∂L/∂Im``), with ``ĝ`` the gradient of ``ŷ``
and ``ẑ = k̂ ⊙ x̂``:

    ∂û  = B̄ᵀ (conj(k̂) ⊙ Cᵀ ĝ)                    one program per (b, frequency block), states walked
    ∂k̂  = Σ_b conj(x̂) ⊙ Cᵀ ĝ                     one program per (state block, frequency block),
    ∂B̄  = Re Σ_{b,f} (conj(k̂) ⊙ Cᵀ ĝ) conj(û)ᵀ     batch walked; ∂B̄ and ∂C are summed over frequency
    ∂C  = Re Σ_{b,f} ĝ conj(ẑ)ᵀ                    blocks afterwards (fixed order: deterministic)

Products run in float32 (``tl.dot`` in IEEE precision: no TF32 unless torch allows it for matmuls).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .launch import CALLS, block, bound, cdiv, kernel, tl

BLOCK_F, BLOCK_N = 32, 16


def _precision() -> str:
    return "tf32" if torch.backends.cuda.matmul.allow_tf32 else "ieee"


def _fwd(
    ur_ptr, ui_ptr, kr_ptr, ki_ptr, b_ptr, c_ptr, yr_ptr, yi_ptr, H, N, J, F,
    BLOCK_H: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_F: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0)
    fs = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    hs = tl.arange(0, BLOCK_H)
    js = tl.arange(0, BLOCK_J)
    fmask = fs < F
    umask = (hs < H)[:, None] & fmask[None, :]
    u_off = b * H * F + hs[:, None] * F + fs[None, :]
    ur = tl.load(ur_ptr + u_off, mask=umask, other=0.0)
    ui = tl.load(ui_ptr + u_off, mask=umask, other=0.0)
    acc_r = tl.zeros((BLOCK_J, BLOCK_F), dtype=tl.float32)
    acc_i = tl.zeros((BLOCK_J, BLOCK_F), dtype=tl.float32)
    for n0 in range(0, N, BLOCK_N):
        ns = n0 + tl.arange(0, BLOCK_N)
        nmask = ns < N
        bt = tl.load(b_ptr + ns[:, None] * H + hs[None, :], mask=nmask[:, None] & (hs < H)[None, :], other=0.0)
        xr = tl.dot(bt, ur, input_precision=PRECISION)
        xi = tl.dot(bt, ui, input_precision=PRECISION)
        kmask = nmask[:, None] & fmask[None, :]
        kr = tl.load(kr_ptr + ns[:, None] * F + fs[None, :], mask=kmask, other=0.0)
        ki = tl.load(ki_ptr + ns[:, None] * F + fs[None, :], mask=kmask, other=0.0)
        zr = xr * kr - xi * ki
        zi = xr * ki + xi * kr
        ct = tl.load(c_ptr + js[:, None] * N + ns[None, :], mask=(js < J)[:, None] & nmask[None, :], other=0.0)
        acc_r += tl.dot(ct, zr, input_precision=PRECISION)
        acc_i += tl.dot(ct, zi, input_precision=PRECISION)
    y_off = b * J * F + js[:, None] * F + fs[None, :]
    ymask = (js < J)[:, None] & fmask[None, :]
    tl.store(yr_ptr + y_off, acc_r, mask=ymask)
    tl.store(yi_ptr + y_off, acc_i, mask=ymask)


def _bwd_input(
    gr_ptr, gi_ptr, kr_ptr, ki_ptr, b_ptr, c_ptr, dur_ptr, dui_ptr, H, N, J, F,
    BLOCK_H: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_F: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0)
    fs = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    hs = tl.arange(0, BLOCK_H)
    js = tl.arange(0, BLOCK_J)
    fmask = fs < F
    gmask = (js < J)[:, None] & fmask[None, :]
    g_off = b * J * F + js[:, None] * F + fs[None, :]
    gr = tl.load(gr_ptr + g_off, mask=gmask, other=0.0)
    gi = tl.load(gi_ptr + g_off, mask=gmask, other=0.0)
    acc_r = tl.zeros((BLOCK_H, BLOCK_F), dtype=tl.float32)
    acc_i = tl.zeros((BLOCK_H, BLOCK_F), dtype=tl.float32)
    for n0 in range(0, N, BLOCK_N):
        ns = n0 + tl.arange(0, BLOCK_N)
        nmask = ns < N
        ctt = tl.load(c_ptr + js[None, :] * N + ns[:, None], mask=nmask[:, None] & (js < J)[None, :], other=0.0)
        gzr = tl.dot(ctt, gr, input_precision=PRECISION)  # Cᵀ ĝ: (BLOCK_N, BLOCK_F)
        gzi = tl.dot(ctt, gi, input_precision=PRECISION)
        kmask = nmask[:, None] & fmask[None, :]
        kr = tl.load(kr_ptr + ns[:, None] * F + fs[None, :], mask=kmask, other=0.0)
        ki = tl.load(ki_ptr + ns[:, None] * F + fs[None, :], mask=kmask, other=0.0)
        gxr = kr * gzr + ki * gzi  # conj(k̂) ⊙ Cᵀ ĝ
        gxi = kr * gzi - ki * gzr
        btt = tl.load(b_ptr + ns[None, :] * H + hs[:, None], mask=(hs < H)[:, None] & nmask[None, :], other=0.0)
        acc_r += tl.dot(btt, gxr, input_precision=PRECISION)
        acc_i += tl.dot(btt, gxi, input_precision=PRECISION)
    u_off = b * H * F + hs[:, None] * F + fs[None, :]
    umask = (hs < H)[:, None] & fmask[None, :]
    tl.store(dur_ptr + u_off, acc_r, mask=umask)
    tl.store(dui_ptr + u_off, acc_i, mask=umask)


def _bwd_params(
    ur_ptr, ui_ptr, gr_ptr, gi_ptr, kr_ptr, ki_ptr, b_ptr, c_ptr, dkr_ptr, dki_ptr, db_ptr, dc_ptr, B, H, N, J, F,
    BLOCK_H: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_F: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    pid_n = tl.program_id(0)
    pid_f = tl.program_id(1)
    ns = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    fs = pid_f * BLOCK_F + tl.arange(0, BLOCK_F)
    hs = tl.arange(0, BLOCK_H)
    js = tl.arange(0, BLOCK_J)
    nmask, fmask, hmask, jmask = ns < N, fs < F, hs < H, js < J
    kmask = nmask[:, None] & fmask[None, :]
    kr = tl.load(kr_ptr + ns[:, None] * F + fs[None, :], mask=kmask, other=0.0)
    ki = tl.load(ki_ptr + ns[:, None] * F + fs[None, :], mask=kmask, other=0.0)
    bt = tl.load(b_ptr + ns[:, None] * H + hs[None, :], mask=nmask[:, None] & hmask[None, :], other=0.0)
    ctt = tl.load(c_ptr + js[None, :] * N + ns[:, None], mask=nmask[:, None] & jmask[None, :], other=0.0)
    dkr = tl.zeros((BLOCK_N, BLOCK_F), dtype=tl.float32)
    dki = tl.zeros((BLOCK_N, BLOCK_F), dtype=tl.float32)
    db = tl.zeros((BLOCK_N, BLOCK_H), dtype=tl.float32)
    dc = tl.zeros((BLOCK_J, BLOCK_N), dtype=tl.float32)
    umask = hmask[:, None] & fmask[None, :]
    gmask = jmask[:, None] & fmask[None, :]
    for b in range(0, B):
        u_off = b * H * F + hs[:, None] * F + fs[None, :]
        ur = tl.load(ur_ptr + u_off, mask=umask, other=0.0)
        ui = tl.load(ui_ptr + u_off, mask=umask, other=0.0)
        g_off = b * J * F + js[:, None] * F + fs[None, :]
        gr = tl.load(gr_ptr + g_off, mask=gmask, other=0.0)
        gi = tl.load(gi_ptr + g_off, mask=gmask, other=0.0)
        xr = tl.dot(bt, ur, input_precision=PRECISION)  # x̂ = B̄ û: (BLOCK_N, BLOCK_F)
        xi = tl.dot(bt, ui, input_precision=PRECISION)
        gzr = tl.dot(ctt, gr, input_precision=PRECISION)  # Cᵀ ĝ
        gzi = tl.dot(ctt, gi, input_precision=PRECISION)
        dkr += xr * gzr + xi * gzi  # conj(x̂) ⊙ Cᵀ ĝ
        dki += xr * gzi - xi * gzr
        gxr = kr * gzr + ki * gzi  # conj(k̂) ⊙ Cᵀ ĝ
        gxi = kr * gzi - ki * gzr
        db += tl.dot(gxr, tl.trans(ur), input_precision=PRECISION) + tl.dot(
            gxi, tl.trans(ui), input_precision=PRECISION
        )
        zr = xr * kr - xi * ki
        zi = xr * ki + xi * kr
        dc += tl.dot(gr, tl.trans(zr), input_precision=PRECISION)  # Re(ĝ conj(ẑ)ᵀ)
        dc += tl.dot(gi, tl.trans(zi), input_precision=PRECISION)
    tl.store(dkr_ptr + ns[:, None] * F + fs[None, :], dkr, mask=kmask)
    tl.store(dki_ptr + ns[:, None] * F + fs[None, :], dki, mask=kmask)
    # partial sums of this frequency block: (F blocks, N, H) and (F blocks, J, N), summed by the caller
    tl.store(db_ptr + pid_f * N * H + ns[:, None] * H + hs[None, :], db, mask=nmask[:, None] & hmask[None, :])
    tl.store(dc_ptr + pid_f * J * N + js[:, None] * N + ns[None, :], dc, mask=jmask[:, None] & nmask[None, :])


def _blocks(h: int, j: int) -> dict[str, object]:
    return {"BLOCK_H": block(h), "BLOCK_J": block(j), "BLOCK_N": BLOCK_N, "BLOCK_F": BLOCK_F,
            "PRECISION": _precision()}  # fmt: skip


class _ProjectConvolve(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ur: Tensor, ui: Tensor, kr: Tensor, ki: Tensor, b_bar: Tensor, c: Tensor):  # type: ignore[override]
        batch, h, f = ur.shape
        n, j = b_bar.shape[0], c.shape[0]
        yr = torch.empty(batch, j, f, device=ur.device, dtype=torch.float32)
        yi = torch.empty_like(yr)
        kernel(_fwd)[(batch, cdiv(f, BLOCK_F))](ur, ui, kr, ki, b_bar, c, yr, yi, h, bound(n), j, f, **_blocks(h, j))
        CALLS["project_convolve_fwd"] += 1
        ctx.save_for_backward(ur, ui, kr, ki, b_bar, c)
        return yr, yi

    @staticmethod
    def backward(ctx, gr: Tensor, gi: Tensor):  # type: ignore[override]
        ur, ui, kr, ki, b_bar, c = ctx.saved_tensors
        batch, h, f = ur.shape
        n, j = b_bar.shape[0], c.shape[0]
        gr, gi = gr.float().contiguous(), gi.float().contiguous()
        blocks = _blocks(h, j)
        dur, dui = torch.empty_like(ur), torch.empty_like(ui)
        kernel(_bwd_input)[(batch, cdiv(f, BLOCK_F))](gr, gi, kr, ki, b_bar, c, dur, dui, h, bound(n), j, f, **blocks)
        dkr, dki = torch.empty_like(kr), torch.empty_like(ki)
        nf = cdiv(f, BLOCK_F)
        db = torch.empty(nf, n, h, device=ur.device, dtype=torch.float32)
        dc = torch.empty(nf, j, n, device=ur.device, dtype=torch.float32)
        kernel(_bwd_params)[(cdiv(n, BLOCK_N), nf)](
            ur, ui, gr, gi, kr, ki, b_bar, c, dkr, dki, db, dc, bound(batch), h, n, j, f, **blocks
        )
        CALLS["project_convolve_bwd"] += 1
        return dur, dui, dkr, dki, db.sum(0), dc.sum(0)


def project_convolve(uf: Tensor, kf: Tensor, b_bar: Tensor, c: Tensor) -> Tensor:
    """Fused ``ŷ[b, j, f] = Σ_n C[j, n] k̂[n, f] Σ_i B̄[n, i] û[b, i, f]``.

    Args:
        uf: ``(B, H, F)`` complex64, the input's rFFT.
        kf: ``(N, F)`` complex64, the per-state kernels' rFFT.
        b_bar: ``(N, H)`` float32.
        c: ``(H', N)`` float32.

    Returns:
        ``(B, H', F)`` complex64; differentiable in every argument.
    """
    parts = [t.contiguous() for t in (uf.real, uf.imag, kf.real, kf.imag)]
    yr, yi = _ProjectConvolve.apply(*parts, b_bar.float().contiguous(), c.float().contiguous())
    return torch.complex(yr, yi)


__all__ = ["BLOCK_F", "BLOCK_N", "project_convolve"]
