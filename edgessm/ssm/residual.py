"""The Centaurus residual block (paper Fig. 5, App. E):

    x -> [causal depthwise Conv1d] -> SSM -> LayerNorm -> [Dropout1d] -> (+ skip) -> SiLU

The skip is the identity, or a pointwise projection when the channel count changes; the first
block of a network may have no skip. LayerNorm normalises over channels at each time step, so the
whole block is causal and streams exactly.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .blocks import SSMLayer
from .essm import ElasticSpectralSSM
from .factory import make_ssm
from .resample import CausalDepthwiseConv
from .stream import Counts, State, Streamable


class ChannelNorm(nn.Module):
    """LayerNorm over the channel axis of ``(B, C, T)``; identity for a single channel."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(channels) if channels > 1 else None

    def forward(self, x: Tensor) -> Tensor:
        # Computed along axis 1 directly: no (B, T, C) transposes in training or in the exported graph,
        # and a 4x faster backward than nn.LayerNorm on the transposed view for long, narrow inputs.
        if self.norm is None:
            return x
        n = self.norm
        if torch.is_grad_enabled() and not torch.jit.is_tracing() and not torch.onnx.is_in_onnx_export():
            return _ChannelLayerNorm.apply(x, n.weight, n.bias, n.eps)  # training: the gradient in one pass
        d = x - x.mean(1, keepdim=True)
        var = (d * d).mean(1, keepdim=True)
        return d * torch.rsqrt(var + n.eps) * n.weight[:, None] + n.bias[:, None]

    def step(self, x: Tensor) -> Tensor:
        """The same function in the form that streams fastest (fewest graph nodes per chunk).

        One frame: a single ``LayerNormalization`` node. Wide or short chunks: one between two transposes. Narrow,
        long ones (where that kernel's per-row cost dominates): centring and the channel mean as
        MatMuls with constant matrices.
        """
        if self.norm is None:
            return x
        c, t = int(x.shape[1]), int(x.shape[-1])
        if t == 1:  # one frame: (C, 1) are the trailing axes, so one LayerNormalization node over both
            n = self.norm
            return F.layer_norm(x, (c, 1), n.weight[:, None], n.bias[:, None], n.eps)
        if c >= 8 or t <= 16 * c:
            n = self.norm
            return F.layer_norm(x.transpose(1, 2), (c,), n.weight, n.bias, n.eps).transpose(1, 2)
        eye = torch.eye(c, dtype=x.dtype, device=x.device)
        d = (eye - 1.0 / c) @ x
        var = torch.full((1, c), 1.0 / c, dtype=x.dtype, device=x.device) @ (d * d)
        return d / torch.sqrt(var + self.norm.eps) * self.norm.weight[:, None] + self.norm.bias[:, None]


class _ChannelLayerNorm(torch.autograd.Function):
    """``y = x̂ w + b`` with ``x̂ = (x - mean_c x) / sqrt(var_c x + eps)`` over axis 1 of ``x (B, C, T)``, and its
    gradient written out (the standard LayerNorm backward) instead of autograd's chain through every
    elementwise step: ``dx = rstd (g' - mean_c g' - x̂ mean_c(g' x̂))`` with ``g' = g w``. About half the memory
    passes of the chain; the same values to float rounding (``tests/test_channel_norm.py``)."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
        d = x - x.mean(1, keepdim=True)
        rstd = torch.rsqrt(d.square().mean(1, keepdim=True) + eps)
        xhat = d.mul_(rstd)
        ctx.save_for_backward(xhat, rstd, weight)
        return torch.addcmul(bias[:, None], xhat, weight[:, None])

    @staticmethod
    def backward(ctx, g: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None, None]:
        xhat, rstd, weight = ctx.saved_tensors
        g_weight = (g * xhat).sum((0, 2)) if ctx.needs_input_grad[1] else None
        g_bias = g.sum((0, 2)) if ctx.needs_input_grad[2] else None
        g_x = None
        if ctx.needs_input_grad[0]:
            gh = g * weight[:, None]
            g_x = (gh - gh.mean(1, keepdim=True) - xhat * (gh * xhat).mean(1, keepdim=True)).mul_(rstd)
        return g_x, g_weight, g_bias, None


class CentaurusBlock(Streamable):
    """One residual SSM block.

    Args:
        kind: SSM block kind (``depthwise``, ``pointwise``, ``bottleneck``, ``full``, ``rtf``, or ``essm``: the elastic
            spectral SSM with ``K̄ = n_states`` channels and its options in ``ssm_kwargs``).
        h_in, h_out: channels in and out.
        n_states: states N (per channel for depthwise/full, state blocks for bottlenecks).
        n_sub: sub-states M of the bottleneck block.
        skip: ``True`` adds the identity (or a pointwise projection if channels change).
        pre_conv: kernel size of the causal depthwise Conv1d before the SSM (0: none).
        dropout: Dropout1d probability (applied only with more than 4 channels, as in the paper).
        activation: apply the final SiLU.
        norm: the LayerNorm over channels at every time step (``False``: none).
        **ssm_kwargs: passed to the SSM block (``dt_min``, ``dt_max``, ``plan``, ...; for ``essm``: ``length``,
            ``mode``, ``gate``, ``budget_dropout``, ...).
    """

    def __init__(
        self,
        kind: str,
        h_in: int,
        h_out: int,
        n_states: int,
        n_sub: int = 4,
        *,
        skip: bool = True,
        pre_conv: int = 0,
        dropout: float = 0.0,
        activation: bool = True,
        norm: bool = True,
        **ssm_kwargs,
    ) -> None:
        super().__init__()
        self.h_in, self.h_out = h_in, h_out
        self.pre = CausalDepthwiseConv(h_in, pre_conv) if pre_conv else None
        self.ssm: SSMLayer | ElasticSpectralSSM = make_ssm(kind, h_in, h_out, n_states, n_sub, **ssm_kwargs)
        self.norm = ChannelNorm(h_out if norm else 1)  # one channel: the identity
        self.drop = nn.Dropout1d(dropout) if dropout > 0 and h_out > 4 else nn.Identity()
        self.skip = skip
        self.proj = nn.Conv1d(h_in, h_out, 1, bias=False) if skip and h_in != h_out else None
        self.activation = activation

    def _finish(self, x: Tensor, h: Tensor, streaming: bool = False) -> Tensor:
        h = self.drop(self.norm.step(h) if streaming else self.norm(h))
        if self.skip:
            if self.proj is None:
                h = h + x
            else:  # streaming: the 1x1 convolution as one MatMul
                h = h + (self.proj.weight[:, :, 0] @ x if streaming else self.proj(x))
        return F.silu(h) if self.activation else h

    def forward(self, x: Tensor) -> Tensor:
        """``(B, H, L) -> (B, H', L)``."""
        h = x if self.pre is None else self.pre(x)
        return self._finish(x, self.ssm(h))

    def state_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        pre = [] if self.pre is None else [(f"pre.{n}", s) for n, s in self.pre.state_shapes()]
        return pre + [(f"ssm.{n}", s) for n, s in self.ssm.state_shapes()]

    def step(self, x: Tensor, state: State) -> tuple[Tensor, State]:
        n_pre = 0 if self.pre is None else len(self.pre.state_shapes())
        h, pre_state = (x, []) if self.pre is None else self.pre.step(x, state[:n_pre])
        h, ssm_state = self.ssm.step(h, state[n_pre:])
        return self._finish(x, h, streaming=True), pre_state + ssm_state

    def counts(self) -> Counts:
        total = self.ssm.counts()
        if self.pre is not None:
            total = total + self.pre.counts()
        if self.proj is not None:  # paper App. D: H H' parameters and 2 H H' FLOPs
            total = total + Counts(self.h_in * self.h_out, 2.0 * self.h_in * self.h_out)
        elif self.skip:
            total = total + Counts(0, float(self.h_out))
        return total


def trainable_parameters(module: nn.Module) -> int:
    """Number of trainable scalars (what the optimiser sees; Δ and norms included)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
