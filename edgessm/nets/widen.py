"""Grow a trained network of residual SSM blocks to more channels without changing what it computes.

A network trained at ``C`` channels per block starts a wider recipe (``k C`` channels, ``k`` a whole number)
where it stands instead of from random weights (Net2Net's "wider" operator, Chen et al. 2016): every channel
of the residual stream is repeated ``k`` times, and every weight that *reads* the stream is split over the
copies. With the stream ``[h; h]`` (``k = 2``):

* what a block writes to the stream (its SSM's output projection ``C``, the skip projection's rows, the
  channel LayerNorm's weight and bias) is repeated, so the block writes ``[y; y]``; the LayerNorm over
  channels of ``[y; y]`` has ``y``'s mean and variance, so it normalises each copy as before;
* what is per channel of the stream (the causal depthwise convolution before the SSM; pooling) is repeated;
* what reads the stream (the SSM's input projection ``B``, the skip projection's columns, the heads after the
  last block) is split into ``W / k + D_j`` for copy ``j``, with ``sum_j D_j = 0``: ``sum_j (W / k + D_j) h = W h``
  exactly. The ``D_j`` are small random matrices: with ``D = 0`` the copies would get equal gradients and
  stay copies for ever.

A strided projection between blocks (:class:`~edgessm.ssm.DownConv`, a recogniser's downsampling) reads the
stream and writes it: its input channels are split, its output channels repeated.

So the grown network computes the same function (to float rounding) and fine-tuning starts from its loss.
Supported: blocks whose SSM is a (pointwise) bottleneck, the kinds whose only per-channel parameters are the
projections ``B`` and ``C``; the states are not grown.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

from edgessm.ssm import CentaurusBlock, DownConv

#: block tensors laid out over the stream channels the block reads or writes: name -> axis
_PER_INPUT_CHANNEL = {"pre.conv.weight": 0, "pre.conv.bias": 0}
_READS = {"ssm.B": 1, "proj.weight": 1}
_WRITES = {"ssm.C": 0, "proj.weight": 0, "norm.norm.weight": 0, "norm.norm.bias": 0}
GROWABLE = ("bottleneck", "pointwise")


def repeat_channels(t: Tensor, axis: int, k: int) -> Tensor:
    """``k`` copies of ``t`` along ``axis``: channel ``j`` of the result is channel ``j mod n`` of ``t``."""
    return t if k == 1 else torch.cat([t] * k, dim=axis)


def split_reads(t: Tensor, axis: int, k: int, noise: float, gen: torch.Generator) -> Tensor:
    """``t`` reading ``k`` copies of its input channels: ``[t / k + D_1, ..., t / k + D_k]`` along ``axis``,
    ``D_j`` Gaussian with standard deviation ``noise * std(t) / k`` and ``sum_j D_j = 0``."""
    if k == 1:
        return t
    d = torch.randn((k, *t.shape), generator=gen, dtype=torch.float64)
    d = ((d - d.mean(0, keepdim=True)) * (noise * float(t.detach().double().std()) / k)).to(t.device, t.dtype)
    return torch.cat([t / k + d[j] for j in range(k)], dim=axis)


def _factor(old: int, new: int, where: str) -> int:
    if new < old:
        raise ValueError(
            f"{where}: a {new}-channel network cannot start from {old}-channel weights; widening only grows "
            "(set the recipe's model.channels to the weights' or a multiple of them)"
        )
    if new % old:
        raise ValueError(
            f"{where}: cannot grow {old} channels to {new}; widening repeats each channel a whole number of "
            "times, so the new width must be a multiple of the old one"
        )
    return new // old


def _grow_projection(
    weights: dict[str, Tensor], out: dict[str, Tensor], prefix: str, down: DownConv, noise: float, gen: torch.Generator
) -> tuple[int, bool]:
    """Grow a strided projection ``(out, in, r)`` between blocks into ``out``: inputs split, outputs repeated.
    Returns the factor of its output channels and whether it grew."""
    w = weights.get(prefix + "conv.weight")
    if w is None:
        raise ValueError(f"{prefix[:-1]}: the weights have no strided projection here (another layout)")
    new_out, new_in, _ = down.conv.weight.shape
    k_in = _factor(int(w.shape[1]), int(new_in), f"{prefix[:-1]} input")
    k_out = _factor(int(w.shape[0]), int(new_out), f"{prefix[:-1]} output")
    if k_in == k_out == 1:
        return 1, False
    out[prefix + "conv.weight"] = repeat_channels(split_reads(w, 1, k_in, noise, gen), 0, k_out)
    if prefix + "conv.bias" in weights:
        out[prefix + "conv.bias"] = repeat_channels(weights[prefix + "conv.bias"], 0, k_out)
    return k_out, True


def _widths(weights: dict[str, Tensor], prefix: str) -> tuple[int | None, int | None]:
    """The channels a block of ``weights`` reads and writes (``None`` where its tensors do not say)."""

    def size(name: str, axis: int) -> int | None:
        t = weights.get(prefix + name)
        return None if t is None else int(t.shape[axis])

    h_in = size("ssm.B", 1) or size("pre.conv.weight", 0)
    h_out = size("ssm.C", 0) or size("norm.norm.weight", 0)
    return h_in, h_out


def widen_weights(
    model: nn.Module,
    weights: dict[str, Tensor],
    *,
    readers: Mapping[str, int] | None = None,
    writers: Mapping[str, int] | None = None,
    noise: float = 0.1,
    seed: int = 0,
) -> dict[str, Tensor]:
    """``weights`` of a narrower network of ``model``'s layout, grown to ``model``'s channels.

    Args:
        model: the wider network; its :class:`~edgessm.ssm.CentaurusBlock` modules, in order, are the stream.
        weights: the trained network's state dict (not modified); its widths are read off each block's
            ``ssm.B`` (inputs) and ``ssm.C`` (outputs).
        readers: tensors after the last block that read its output, with the axis they read over (a head's
            ``(out, C)`` weight: 1). Split over the copies.
        writers: tensors after the last block whose ``axis`` runs over a layer as wide as the stream (a hidden
            layer of the head: its weight's rows and its bias). Repeated.
        noise: the split weights' symmetry-breaking part, relative to each tensor's standard deviation.
        seed: seed of that noise (the same weights and seed grow the same network).

    Returns a new dict, or ``weights`` itself where every block already has ``model``'s widths (or the weights
    are of another layout: loading them reports that).
    """
    blocks = [(name, m) for name, m in model.named_modules() if isinstance(m, CentaurusBlock | DownConv)]
    gen = torch.Generator().manual_seed(seed)
    out, k_last, grown = dict(weights), 1, False
    for name, block in blocks:
        prefix = f"{name}."
        keys = [k for k in weights if k.startswith(prefix)]
        if not keys:
            return weights  # another layout: loading reports it
        if isinstance(block, DownConv):
            k_last, changed = _grow_projection(weights, out, prefix, block, noise, gen)
            grown = grown or changed
            continue
        k_last = 1
        old_in, old_out = _widths(weights, prefix)
        if old_in in (None, block.h_in) and old_out in (None, block.h_out):
            continue  # this block's channels are the network's (other differences are for the loader to report)
        kind = getattr(block.ssm, "kind", type(block.ssm).__name__)
        if kind not in GROWABLE:
            raise ValueError(
                f"{name} is a {kind!r} block: widening grows {' and '.join(map(repr, GROWABLE))} blocks, whose "
                "per-channel parameters are only the projections B and C"
            )
        if old_in is None or old_out is None or f"{prefix}ssm.B" not in weights:
            raise ValueError(f"{name}: the weights' block has no projections B and C to grow (another kind of block)")
        k_in = _factor(old_in, block.h_in, f"{name} input")
        k_out = k_last = _factor(old_out, block.h_out, f"{name} output")
        if (f"{prefix}proj.weight" in weights) != (block.proj is not None):
            raise ValueError(
                f"{name}: {old_in} -> {old_out} channels cannot grow to {block.h_in} -> {block.h_out}: one of "
                "the two has a skip projection and the other an identity skip"
            )
        grown = True
        for key in keys:
            t, short = weights[key], key[len(prefix) :]
            if short in _PER_INPUT_CHANNEL:
                t = repeat_channels(t, _PER_INPUT_CHANNEL[short], k_in)
            if short in _READS:
                t = split_reads(t, _READS[short], k_in, noise, gen)
            if short in _WRITES:
                t = repeat_channels(t, _WRITES[short], k_out)
            out[key] = t
    if not grown:
        return weights
    for key, axis in (readers or {}).items():
        if key in out:
            out[key] = split_reads(out[key], axis, k_last, noise, gen)
    for key, axis in (writers or {}).items():
        if key in out:
            out[key] = repeat_channels(out[key], axis, k_last)
    return out
