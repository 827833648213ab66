"""Streamable resampling and short-context layers: causal pooling, strided and transposed
convolutions (kernel = stride, so every chunk that is a multiple of the stride is self-contained),
and the optional causal depthwise Conv1d placed before an SSM (paper Table 1, last row).
"""

from __future__ import annotations

from fractions import Fraction

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .stream import Counts, State, Streamable


def _check_length(layer: Streamable, x: Tensor) -> None:
    if int(x.shape[-1]) % layer.chunk_multiple:
        raise ValueError(
            f"{type(layer).__name__} needs a length that is a multiple of {layer.chunk_multiple}, got {x.shape[-1]}"
        )


class AvgPool(Streamable):
    """Causal average pooling by ``r``: output frame ``t`` is the mean of samples ``[t r, t r + r)``."""

    def __init__(self, r: int) -> None:
        super().__init__()
        self.r = r
        self.rate = Fraction(1, r)
        self.chunk_multiple = r

    def forward(self, x: Tensor) -> Tensor:
        """``(B, C, L) -> (B, C, L / r)``."""
        _check_length(self, x)
        b, c, t = (int(n) for n in x.shape)  # static shapes: no Shape ops in an exported graph
        return x.reshape(b, c, t // self.r, self.r).mean(-1)

    def step(self, x: Tensor, state: State) -> tuple[Tensor, State]:
        self.check_chunk(x)
        return self.forward(x), state  # a ReduceMean when exported (onnxruntime's AveragePool is ~10x slower)

    def counts(self) -> Counts:
        return Counts(0, 1.0)  # one add per input sample (the 1/r scale is folded)


class DownConv(Streamable):
    """Strided convolution ``kernel = stride = r`` that also projects ``c_in -> c_out`` channels."""

    def __init__(self, c_in: int, c_out: int, r: int, bias: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, r, stride=r, bias=bias)
        self.rate = Fraction(1, r)
        self.chunk_multiple = r

    def forward(self, x: Tensor) -> Tensor:
        _check_length(self, x)
        return self.conv(x)

    def step(self, x: Tensor, state: State) -> tuple[Tensor, State]:
        self.check_chunk(x)
        return self.conv(x), state

    def counts(self) -> Counts:
        c_out, c_in, r = self.conv.weight.shape
        return Counts(c_out * c_in * r, 2.0 * c_out * c_in)  # per input sample


class UpConv(Streamable):
    """Transposed convolution ``kernel = stride = r`` projecting ``c_in -> c_out``: each input
    frame becomes ``r`` output samples (the decoder of an hourglass network)."""

    def __init__(self, c_in: int, c_out: int, r: int, bias: bool = True) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(c_in, c_out, r, stride=r, bias=bias)
        self.rate = Fraction(r)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x)

    def step(self, x: Tensor, state: State) -> tuple[Tensor, State]:
        return self.conv(x), state

    def counts(self) -> Counts:
        c_in, c_out, r = self.conv.weight.shape
        return Counts(c_in * c_out * r, 2.0 * c_in * c_out * r)  # per input frame


class CausalDepthwiseConv(Streamable):
    """Depthwise Conv1d with left padding ``k - 1`` (no look-ahead); its state is the last ``k - 1`` inputs."""

    def __init__(self, channels: int, kernel_size: int = 4) -> None:
        super().__init__()
        self.channels, self.kernel_size = channels, kernel_size
        self.conv = nn.Conv1d(channels, channels, kernel_size, groups=channels)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(F.pad(x, (self.kernel_size - 1, 0)))

    def state_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        return [("history", (self.channels, self.kernel_size - 1))]

    def step(self, x: Tensor, state: State) -> tuple[Tensor, State]:
        (hist,) = state
        full = torch.cat([hist, x], dim=-1)
        c = self.conv
        if int(x.shape[-1]) == 1:  # one frame: a weighted sum over the taps (Mul, ReduceSum, Add when exported)
            y = (full * c.weight[:, 0]).sum(-1, keepdim=True) + c.bias[:, None]
        else:  # a 2-D depthwise Conv over a (B, C, 1, T) view: ONNX Runtime's CPU provider runs it with its
            # blocked depthwise kernel, 3-5x faster than a grouped 1-D Conv at 2-20 frames
            y = F.conv2d(full.unsqueeze(2), c.weight.unsqueeze(2), c.bias, groups=self.channels).squeeze(2)
        return y, [full[..., full.shape[-1] - (self.kernel_size - 1) :]]

    def counts(self) -> Counts:
        return Counts(self.channels * self.kernel_size, 2.0 * self.channels * self.kernel_size)
