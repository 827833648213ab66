"""Fused row energies of the filterbank front's chunked scan (:func:`edgessm.ssm.filterbank.chunked_band_energy`):

    y_f[r, t] = Σ_s Wx[f, s, t] · x[r, s]  +  Σ_k Wh[f, k, t] · h[r, f, k]        q[r, f] = Σ_t y_f[r, t]²

for rows ``r`` (a batch item's chunk of ``S`` samples), bands ``f``, the chunk's samples ``x (R, S)``, the state
each band enters the chunk with ``h (R, F, K)`` (real then imaginary parts of its ``M`` modes, ``K = 2 M``), the
band's causal Toeplitz matrix ``Wx[f] (S, S)`` and its state read-out ``Wh[f] (K, S)``. The caller sums ``q`` over
a frame's chunks.

The PyTorch path writes the band outputs ``y (R, F S)`` (the front's only sample-rate tensor, ``F`` times the
audio) and keeps it for the backward. Here one program owns ``BLOCK_R`` rows of one band: two small products
with ``y_f`` in registers, squared and summed there; only ``q (R, F)`` (``S`` times smaller) is written. The
backward recomputes ``y_f`` the same way (the front is most of a GPU training step's memory traffic),
with ``dL/dy_f = 2 dL/dq[r, f] · y_f``:

    dx[r, :]      = Σ_f dL/dy_f[r, :] Wx[f]ᵀ       one program per row block, bands walked (no atomics)
    dh[r, f, :]   = dL/dy_f[r, :] Wh[f]ᵀ
    dWx[f]        = Σ_r x[r, :]ᵀ dL/dy_f[r, :]      one program per (band, row split); the splits' partial
    dWh[f]        = Σ_r h[r, f, :]ᵀ dL/dy_f[r, :]   sums are added afterwards in a fixed order (deterministic)

Products run in float32 (``tl.dot`` in IEEE precision), in TF32 where the caller asks (``tf32``: the front
inside a half-precision network) or torch allows it for matrix products. ``S`` is best a power of two of at
least 16 (the fused plan picks such a chunk: 32 for 10 ms frames); other sizes are padded with masked zeros.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .contraction import _precision
from .launch import CALLS, block, bound, cdiv, kernel, tl

BLOCK_R = 64  # rows (chunks) per program
SPLITS = 64  # row splits of the weight gradients: (band, split) programs, partial sums added by the caller


def _band_output(x_ptr, h_ptr, wx_ptr, wh_ptr, rows, f, R, S, F, K, ss, PRECISION: tl.constexpr):
    """``y_f`` of ``rows`` in registers, with the input tile and the Toeplitz tile it was made from (a device
    function of the kernels below): one product for the chunk's samples, ``K`` rank-one updates for the state
    (``K = 2 M`` is small: a product padded to 16 would do 8x the work)."""
    rmask = rows < R
    smask = ss < S
    x = tl.load(x_ptr + rows[:, None] * S + ss[None, :], mask=rmask[:, None] & smask[None, :], other=0.0)
    wx = tl.load(wx_ptr + f * S * S + ss[:, None] * S + ss[None, :], mask=smask[:, None] & smask[None, :], other=0.0)
    y = tl.dot(x, wx, input_precision=PRECISION)
    for k in range(0, K):
        hk = tl.load(h_ptr + rows * (F * K) + f * K + k, mask=rmask, other=0.0)
        y += hk[:, None] * tl.load(wh_ptr + (f * K + k) * S + ss, mask=smask, other=0.0)[None, :]
    return y, x, wx


# a kernel's callee must be a device function itself when compiled
_load_band = kernel(_band_output) if tl is not None else _band_output


def _fwd(
    x_ptr, h_ptr, wx_ptr, wh_ptr, q_ptr, R, S, F, K,
    BLOCK_R: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    f = tl.program_id(1)
    ss = tl.arange(0, BLOCK_S)
    y, _x, _wx = _load_band(x_ptr, h_ptr, wx_ptr, wh_ptr, rows, f, R, S, F, K, ss, PRECISION)
    tl.store(q_ptr + rows * F + f, tl.sum(y * y, axis=1), mask=rows < R)


def _bwd_rows(
    x_ptr, h_ptr, wx_ptr, wh_ptr, gq_ptr, dx_ptr, dh_ptr, R, S, F, K,
    BLOCK_R: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    ss = tl.arange(0, BLOCK_S)
    rmask = rows < R
    smask = ss < S
    dx = tl.zeros((BLOCK_R, BLOCK_S), dtype=tl.float32)
    for f in range(0, F):
        y, _x, wx = _load_band(x_ptr, h_ptr, wx_ptr, wh_ptr, rows, f, R, S, F, K, ss, PRECISION)
        gy = y * (2.0 * tl.load(gq_ptr + rows * F + f, mask=rmask, other=0.0))[:, None]
        dx += tl.dot(gy, tl.trans(wx), input_precision=PRECISION)
        for k in range(0, K):
            whk = tl.load(wh_ptr + (f * K + k) * S + ss, mask=smask, other=0.0)
            tl.store(dh_ptr + rows * (F * K) + f * K + k, tl.sum(gy * whk[None, :], axis=1), mask=rmask)
    tl.store(dx_ptr + rows[:, None] * S + ss[None, :], dx, mask=rmask[:, None] & smask[None, :])


def _bwd_weights(
    x_ptr, h_ptr, wx_ptr, wh_ptr, gq_ptr, dwx_ptr, dwh_ptr, R, S, F, K, NSPLIT, PER_SPLIT,
    BLOCK_R: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    f = tl.program_id(0)
    split = tl.program_id(1)
    ss = tl.arange(0, BLOCK_S)
    ks = tl.arange(0, BLOCK_K)
    dwx = tl.zeros((BLOCK_S, BLOCK_S), dtype=tl.float32)
    dwh = tl.zeros((BLOCK_K, BLOCK_S), dtype=tl.float32)
    for i in range(0, PER_SPLIT):  # this split's row blocks: split, split + NSPLIT, ...
        rows = (split + i * NSPLIT) * BLOCK_R + tl.arange(0, BLOCK_R)
        rmask = rows < R
        y, x, _wx = _load_band(x_ptr, h_ptr, wx_ptr, wh_ptr, rows, f, R, S, F, K, ss, PRECISION)
        gy = y * (2.0 * tl.load(gq_ptr + rows * F + f, mask=rmask, other=0.0))[:, None]
        dwx += tl.dot(tl.trans(x), gy, input_precision=PRECISION)
        for k in range(0, K):  # row k of dwh: Σ_r h[r, f, k] gy[r, :]
            hk = tl.load(h_ptr + rows * (F * K) + f * K + k, mask=rmask, other=0.0)
            dwh += tl.where(ks[:, None] == k, tl.sum(hk[:, None] * gy, axis=0)[None, :], 0.0)
    out = split * F + f
    smask = ss < S
    tl.store(dwx_ptr + out * S * S + ss[:, None] * S + ss[None, :], dwx, mask=smask[:, None] & smask[None, :])
    tl.store(dwh_ptr + out * K * S + ks[:, None] * S + ss[None, :], dwh, mask=(ks < K)[:, None] & smask[None, :])


def _blocks(s: int, k: int, tf32: bool) -> dict[str, object]:
    precision = "tf32" if tf32 else _precision()  # _precision: TF32 where torch allows it for matrix products
    return {"BLOCK_R": BLOCK_R, "BLOCK_S": block(s), "BLOCK_K": block(k, 1), "PRECISION": precision}


# The kernels as PyTorch operators (torch.library): opaque to torch.compile (no graph break, nothing traced into),
# shapes known on the meta device (`edgessm.bench roofline` traces the fused front there), a backward of their own.
@torch.library.custom_op("edgessm::front_row_energy", mutates_args=())
def _row_energy_op(x: Tensor, h: Tensor, wx: Tensor, wh: Tensor, tf32: bool) -> Tensor:
    r, s = x.shape
    f, k = int(h.shape[1]), int(h.shape[2])
    q = torch.empty(r, f, device=x.device, dtype=torch.float32)
    if r and f:
        kernel(_fwd)[(cdiv(r, BLOCK_R), f)](x, h, wx, wh, q, r, s, f, bound(k), **_blocks(s, k, tf32))
        CALLS["front_energy_fwd"] += 1
    return q


@_row_energy_op.register_fake
def _(x: Tensor, h: Tensor, wx: Tensor, wh: Tensor, tf32: bool) -> Tensor:
    return x.new_empty(x.shape[0], h.shape[1])


@torch.library.custom_op("edgessm::front_row_energy_backward", mutates_args=())
def _row_energy_backward_op(
    x: Tensor, h: Tensor, wx: Tensor, wh: Tensor, gq: Tensor, tf32: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    r, s = x.shape
    f, k = int(h.shape[1]), int(h.shape[2])
    blocks = _blocks(s, k, tf32)
    splits = max(1, min(SPLITS, cdiv(r, BLOCK_R)))
    new = torch.empty if r and f else torch.zeros  # the kernels write every element
    dx, dh = new(x.shape, device=x.device), new(h.shape, device=x.device)
    dwx = new(splits, f, s, s, device=x.device, dtype=torch.float32)
    dwh = new(splits, f, k, s, device=x.device, dtype=torch.float32)
    if r and f:
        kernel(_bwd_rows)[(cdiv(r, BLOCK_R),)](x, h, wx, wh, gq, dx, dh, r, s, bound(f), bound(k), **blocks)
        per_split = cdiv(cdiv(r, BLOCK_R), splits)
        kernel(_bwd_weights)[(f, splits)](
            x, h, wx, wh, gq, dwx, dwh, r, s, f, bound(k), splits, bound(per_split), **blocks
        )
        CALLS["front_energy_bwd"] += 1
    return dx, dh, dwx.sum(0), dwh.sum(0)


@_row_energy_backward_op.register_fake
def _(x: Tensor, h: Tensor, wx: Tensor, wh: Tensor, gq: Tensor, tf32: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return torch.empty_like(x), torch.empty_like(h), torch.empty_like(wx), torch.empty_like(wh)


def _save_inputs(ctx, inputs: tuple, output: Tensor) -> None:
    ctx.save_for_backward(*inputs[:4])
    ctx.tf32 = inputs[4]


def _row_energy_backward(ctx, gq: Tensor) -> tuple[Tensor | None, ...]:
    return (*_row_energy_backward_op(*ctx.saved_tensors, gq.float().contiguous(), ctx.tf32), None)


_row_energy_op.register_autograd(_row_energy_backward, setup_context=_save_inputs)


def tile_flops(rows: int, bands: int, sub: int, k: int) -> float:
    """FLOPs of one ``y_f = x wx[f] + h wh[f]`` recomputation over every row and band, as the kernels do it (the
    product on tiles padded to a power of two of at least 16, the state's ``k`` rank-one updates): the forward
    is one, the backward six (two recomputations, four gradient products of about the same size)."""
    return 2.0 * rows * bands * block(sub) * (block(sub) + k)


def row_energy(x: Tensor, h: Tensor, wx: Tensor, wh: Tensor, tf32: bool = False) -> Tensor:
    """Fused ``q[r, f] = Σ_t (x[r] @ wx[f] + h[r, f] @ wh[f])[t]²``; differentiable in every argument.

    Args:
        x: ``(R, S)`` float32, the rows' input samples.
        h: ``(R, F, K)`` float32, each band's state at the row's start (real parts, then imaginary).
        wx: ``(F, S, S)`` float32, ``wx[f, s, t]``: input sample ``s``'s weight in output sample ``t``.
        wh: ``(F, K, S)`` float32, the state's read-out.
        tf32: multiply in TF32 (~1e-3 relative; the front under bf16 autocast asks for it), not only where
            ``torch.backends.cuda.matmul.allow_tf32`` allows it.

    Returns:
        ``(R, F)`` float32.
    """
    r, s = x.shape
    f, k = int(h.shape[1]), int(h.shape[2])
    if h.shape[0] != r or wx.shape != (f, s, s) or wh.shape != (f, k, s):
        raise ValueError(f"row_energy: x (R, S), h (R, F, K), wx (F, S, S), wh (F, K, S); got {tuple(x.shape)}, "
                         f"{tuple(h.shape)}, {tuple(wx.shape)}, {tuple(wh.shape)}")  # fmt: skip
    return _row_energy_op(*(t.float().contiguous() for t in (x, h, wx, wh)), bool(tf32))


__all__ = ["BLOCK_R", "SPLITS", "row_energy", "tile_flops"]
