"""The optional per-block modules of the Centaurus recognizer variants (paper Sec. 5.3, Table 2):
a feed-forward module or a causal convolution module appended after an SSM block, each keeping
the feature shape ``(B, C, T)`` and adding its output to its input.

    ffn:   x + W2 SiLU(W1 LN(x))                                   (W1: C -> m C, W2: m C -> C)
    conv:  x + Wo SiLU(LN(DWConv_k(GLU(Wi LN(x)))))                (Wi: C -> 2C, depthwise causal k, Wo: C -> C)

LayerNorm is over channels at each step (:class:`~edgessm.ssm.ChannelNorm`) and the depthwise
convolution only looks back, so both stream exactly; the convolution's state is its last ``k - 1`` inputs.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from edgessm.ssm import CausalDepthwiseConv, ChannelNorm, Counts, Streamable
from edgessm.ssm.stream import State

MODULE_KINDS = ("none", "ffn", "conv")


def _pointwise(x: Tensor, conv: nn.Conv1d, streaming: bool) -> Tensor:
    if not streaming:
        return conv(x)
    y = conv.weight[:, :, 0] @ x  # one MatMul in the exported graph
    return y if conv.bias is None else y + conv.bias[:, None]


class FeedForwardModule(Streamable):
    """``x + W2 SiLU(W1 LN(x))``, ``(B, C, T) -> (B, C, T)``."""

    def __init__(self, channels: int, mult: int = 2, dropout: float = 0.0) -> None:
        super().__init__()
        self.norm = ChannelNorm(channels)
        self.up = nn.Conv1d(channels, mult * channels, 1)
        self.down = nn.Conv1d(mult * channels, channels, 1)
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()

    def _run(self, x: Tensor, streaming: bool) -> Tensor:
        h = self.norm.step(x) if streaming else self.norm(x)
        h = F.silu(_pointwise(h, self.up, streaming))
        return x + self.drop(_pointwise(h, self.down, streaming))

    def forward(self, x: Tensor) -> Tensor:
        return self._run(x, False)

    def step(self, x: Tensor, state: State) -> tuple[Tensor, State]:
        return self._run(x, True), state

    def counts(self) -> Counts:
        c, h = self.up.in_channels, self.up.out_channels
        return Counts(2 * c * h + c + h + 2 * c, 4.0 * c * h + 8.0 * c)


class ConvModule(Streamable):
    """``x + Wo SiLU(LN(DWConv_k(GLU(Wi LN(x)))))`` with a causal depthwise convolution of size ``k``."""

    def __init__(self, channels: int, kernel_size: int = 7, dropout: float = 0.0) -> None:
        super().__init__()
        self.norm = ChannelNorm(channels)
        self.inner = nn.Conv1d(channels, 2 * channels, 1)
        self.depthwise = CausalDepthwiseConv(channels, kernel_size)
        self.mid_norm = ChannelNorm(channels)
        self.out = nn.Conv1d(channels, channels, 1)
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()

    def state_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        return [(f"depthwise.{n}", s) for n, s in self.depthwise.state_shapes()]

    def _gate(self, x: Tensor, streaming: bool) -> Tensor:
        h = self.norm.step(x) if streaming else self.norm(x)
        return F.glu(_pointwise(h, self.inner, streaming), dim=1)

    def _finish(self, x: Tensor, h: Tensor, streaming: bool) -> Tensor:
        h = F.silu(self.mid_norm.step(h) if streaming else self.mid_norm(h))
        return x + self.drop(_pointwise(h, self.out, streaming))

    def forward(self, x: Tensor) -> Tensor:
        return self._finish(x, self.depthwise(self._gate(x, False)), False)

    def step(self, x: Tensor, state: State) -> tuple[Tensor, State]:
        h, state = self.depthwise.step(self._gate(x, True), state)
        return self._finish(x, h, True), state

    def counts(self) -> Counts:
        c = self.out.in_channels
        return Counts(3 * c * c + 7 * c, 6.0 * c * c + 16.0 * c) + self.depthwise.counts()


def make_module(kind: str, channels: int, *, kernel_size: int = 7, mult: int = 2,
                dropout: float = 0.0) -> Streamable | None:  # fmt: skip
    """The module ``kind`` (one of :data:`MODULE_KINDS`) for ``channels`` features; ``None`` for ``"none"``."""
    if kind == "none":
        return None
    if kind == "ffn":
        return FeedForwardModule(channels, mult, dropout)
    if kind == "conv":
        return ConvModule(channels, kernel_size, dropout)
    raise ValueError(f"unknown block module {kind!r}; choose one of {', '.join(MODULE_KINDS)}")
