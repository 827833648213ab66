"""The streaming contract shared by every temporal layer.

Every layer has a parallel ``forward(x)`` for training and a functional
``step(x_chunk, state) -> (y_chunk, new_state)`` for streaming, where ``state`` is a flat list of
real tensors (no complex dtypes, no state held on the module) described by ``state_shapes()``.
A network's step is the composition of its layers' steps, so export is mechanical.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import torch
from torch import Tensor, nn

State = list[Tensor]


@dataclass(frozen=True)
class Counts:
    """Inference-time size and cost of a layer (paper App. D / Table 3 conventions).

    ``params``: numbers the streaming step needs (discretisation folded in).
    ``flops``: FLOPs per input sample of this layer (one recurrent step at its own rate).
    """

    params: int
    flops: float

    def __add__(self, other: Counts) -> Counts:
        return Counts(self.params + other.params, self.flops + other.flops)


class Streamable(nn.Module):
    """Base class: a layer with a parallel ``forward`` and a chunked ``step``.

    Attributes:
        rate: output samples per input sample (``1/r`` for an ``r``-fold downsampler).
        chunk_multiple: ``step`` accepts chunks whose length is a multiple of this.
    """

    rate: Fraction = Fraction(1)
    chunk_multiple: int = 1

    def state_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        """``(name, shape without batch)`` of each state tensor, in ``step`` order."""
        return []

    def init_state(
        self, batch: int, *, device: torch.device | str | None = None, dtype: torch.dtype | None = None
    ) -> State:
        """Zero state for ``batch`` independent streams."""
        dtype = dtype or torch.get_default_dtype()
        return [torch.zeros(batch, *shape, device=device, dtype=dtype) for _, shape in self.state_shapes()]

    def step(self, x: Tensor, state: State) -> tuple[Tensor, State]:
        """Advance the stream by one chunk ``x (B, C, T)``; returns the output chunk and the new state."""
        raise NotImplementedError

    def counts(self) -> Counts:
        """Inference parameters and FLOPs per input sample."""
        raise NotImplementedError

    def check_chunk(self, x: Tensor) -> None:
        if int(x.shape[-1]) % self.chunk_multiple:
            raise ValueError(
                f"{type(self).__name__}.step got a chunk of {x.shape[-1]} samples; chunks must be a multiple "
                f"of {self.chunk_multiple} (buffer the input to the network's total stride)"
            )


class StreamSequential(Streamable):
    """Layers applied in order; state is the concatenation of the layers' states."""

    def __init__(self, *layers: Streamable) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        rate = Fraction(1)
        multiple = Fraction(1)
        for layer in layers:
            # an input chunk of `multiple` samples must reach this layer as a multiple of its own
            need = Fraction(layer.chunk_multiple) / rate
            multiple = _lcm_fraction(multiple, need)
            rate *= layer.rate
        self.rate = rate
        self.chunk_multiple = int(multiple)

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return x

    def state_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        return [(f"{i}.{name}", shape) for i, layer in enumerate(self.layers) for name, shape in layer.state_shapes()]

    def step(self, x: Tensor, state: State) -> tuple[Tensor, State]:
        self.check_chunk(x)
        new: State = []
        pos = 0
        for layer in self.layers:
            n = len(layer.state_shapes())
            x, s = layer.step(x, state[pos : pos + n])
            new.extend(s)
            pos += n
        return x, new

    def counts(self) -> Counts:
        total = Counts(0, 0.0)
        rate = Fraction(1)
        for layer in self.layers:
            c = layer.counts()
            total = total + Counts(c.params, c.flops * float(rate))
            rate *= layer.rate
        return total


def graph_form(frames: int) -> bool:
    """Whether a layer computes ``frames`` frames in the form its exported graph takes (while exporting, and
    for a one-frame live call): few nodes, e.g. one MatMul for a DFT. Otherwise PyTorch may take a cheaper
    form of the same numbers (an FFT, a reshape instead of a gather), as a training step does."""
    return frames == 1 or torch.onnx.is_in_onnx_export()


def _lcm_fraction(a: Fraction, b: Fraction) -> Fraction:
    import math

    num = math.lcm(a.numerator * b.denominator, b.numerator * a.denominator)
    return Fraction(num, a.denominator * b.denominator)


def causal_toeplitz(k: Tensor) -> Tensor:
    """Lower-triangular Toeplitz matrices ``M[..., t, s] = k[..., t - s]`` (0 for ``s > t``).

    ``k (..., T)`` -> ``(..., T, T)``; ``M @ u`` is the causal convolution of ``u`` with ``k`` inside one chunk.
    """
    length = k.shape[-1]
    t = torch.arange(length, device=k.device)
    lag = t[:, None] - t[None, :]
    mask = lag >= 0
    return k[..., lag.clamp_min(0)] * mask.to(k.dtype)


def run_chunked(layer: Streamable, x: Tensor, sizes: list[int], state: State | None = None) -> tuple[Tensor, State]:
    """Stream ``x (B, C, L)`` through ``layer.step`` in chunks of the given sizes (summing to ``L``)."""
    if sum(sizes) != x.shape[-1]:
        raise ValueError(f"chunk sizes sum to {sum(sizes)}, signal has {x.shape[-1]} samples")
    state = layer.init_state(x.shape[0], device=x.device, dtype=x.dtype) if state is None else state
    outs = []
    pos = 0
    for size in sizes:
        y, state = layer.step(x[..., pos : pos + size], state)
        outs.append(y)
        pos += size
    return torch.cat(outs, dim=-1), state


def flops_per_second(layer: Streamable, sample_rate: int = 16000) -> float:
    """Inference FLOPs per second of input audio at ``sample_rate``."""
    return layer.counts().flops * sample_rate
