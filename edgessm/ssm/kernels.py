"""Kernel generation for diagonal SSMs without materialising the basis kernels.

The paper's ``get_kernel`` (App. C, Listing 1) contracts the sub-state axis away while the basis
kernels ``K_nm[l] = Re(Ā_nm^l)`` are generated (eq. 7):

    k[..., l] = Σ_m c[..., m] · Re(Ā[..., m]^l),    Ā = exp(wr + i wi),   l = 0..L-1.

``modal_kernel`` evaluates this in blocks of time so the ``(..., M, L)`` basis never exists in
memory, and its backward pass regenerates the basis instead of saving it (the same idea as a
fused kernel: memory is ``O(|c| + |k|)``, not ``O(|c| · L)``). On CUDA the fused Triton kernel
(:mod:`edgessm.ssm.fused`) does the same in one launch each way, the basis never leaving registers.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .discretize import phase
from .fused import wants_fused

# Elements of one (..., M, block) basis slab: bounds the transient memory of the generator.
_SLAB = 1 << 21


def _block_len(n_modes: int, length: int) -> int:
    return max(1, min(length, _SLAB // max(1, n_modes)))


def _basis(wr: Tensor, wi: Tensor, t: Tensor, with_sin: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    mag = torch.exp(wr.unsqueeze(-1) * t)
    ang = phase(wi, t)
    cos = torch.cos(ang).to(wr.dtype)
    sin = torch.sin(ang).to(wr.dtype) if with_sin else None
    return mag, cos, sin


class _ModalKernel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, wr: Tensor, wi: Tensor, c: Tensor, length: int) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(wr, wi, c)
        ctx.length = length
        out = wr.new_empty(*wr.shape[:-1], length)
        step = _block_len(wr.numel(), length)
        for l0 in range(0, length, step):
            t = torch.arange(l0, min(l0 + step, length), device=wr.device, dtype=wr.dtype)
            mag, cos, _ = _basis(wr, wi, t, with_sin=False)
            out[..., l0 : l0 + len(t)] = torch.einsum("...m,...ml->...l", c, mag * cos)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        wr, wi, c = ctx.saved_tensors
        length = ctx.length
        need_w = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        dwr = torch.zeros_like(wr)
        dwi = torch.zeros_like(wi)
        dc = torch.zeros_like(c)
        step = _block_len(wr.numel(), length)
        for l0 in range(0, length, step):
            t = torch.arange(l0, min(l0 + step, length), device=wr.device, dtype=wr.dtype)
            g = grad[..., l0 : l0 + len(t)]
            mag, cos, sin = _basis(wr, wi, t, with_sin=need_w)
            re = mag * cos
            dc += torch.einsum("...l,...ml->...m", g, re)
            if need_w:
                gt = g * t
                # d/dwr Re(c e^{l w}) = l c Re(e^{l w});  d/dwi = -l c Im(e^{l w})
                dwr += c * torch.einsum("...l,...ml->...m", gt, re)
                dwi -= c * torch.einsum("...l,...ml->...m", gt, mag * sin)
        return dwr, dwi, dc, None


def modal_kernel(wr: Tensor, wi: Tensor, c: Tensor, length: int, fused: bool | None = None) -> Tensor:
    """``k[..., l] = Σ_m c[..., m] exp(l wr) cos(l wi)`` for ``l < length``.

    Args:
        wr, wi: ``Δ Re(A)`` and ``Δ Im(A)``, shape ``(..., M)``.
        c: real weights of the modes (``E``, ``Δ E`` or ones), broadcastable to ``(..., M)``.
        length: number of taps ``L``.
        fused: ``True`` demands the fused Triton kernel (an error where it cannot run), ``False`` never
            uses it; ``None`` follows ``EDGESSM_FUSED`` and otherwise fuses on CUDA
            (:func:`edgessm.ssm.fused.use_fused`).

    Returns:
        ``(..., L)`` in the dtype of ``wr``.
    """
    if wants_fused(wr, fused):
        from .fused import modal_kernel as fused_modal_kernel
        from .fused import use_fused  # imports Triton: only where it may be used

        if use_fused(wr, fused):
            return fused_modal_kernel(wr, wi, c, int(length)).to(wr.dtype)
    shape = torch.broadcast_shapes(wr.shape, wi.shape, c.shape)
    return _ModalKernel.apply(wr.expand(shape), wi.expand(shape), c.expand(shape).to(wr.dtype), int(length))


def modal_kernel_reference(wr: Tensor, wi: Tensor, c: Tensor, length: int) -> Tensor:
    """Plain (materialising) version of :func:`modal_kernel`, for tests."""
    t = torch.arange(length, dtype=wr.dtype, device=wr.device)
    mag = torch.exp(wr.unsqueeze(-1) * t)
    return torch.einsum("...m,...ml->...l", c.expand(wr.shape).to(wr.dtype), mag * torch.cos(phase(wi, t)).to(wr.dtype))
