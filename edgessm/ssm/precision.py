"""Float32 islands inside mixed precision.

Under CUDA autocast a network's activations arrive in bfloat16 (or float16) while its parameters stay
float32. The SSM layers' math does not belong in half precision: complex FFTs refuse bfloat16
(``view_as_complex``), cuFFT takes float16 only at power-of-two sizes, and kernels ``Re(Ā^l)`` summed
over thousands of steps lose their tails at 8 bits of mantissa. :func:`float32_island` runs a layer's
``forward`` with autocast off and its half-precision tensor arguments cast up, and hands the result back
in the activations' dtype, so everything around the layer (norms, gates, activations, convolutions)
keeps the speed of bf16 while the layer computes as in float32 training.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import torch
from torch import Tensor

LOW = (torch.float16, torch.bfloat16)
F = TypeVar("F", bound=Callable[..., Tensor])


def _up(x: object) -> object:
    return x.float() if isinstance(x, Tensor) and x.dtype in LOW else x


def autocast_devices(tensors: list[Tensor]) -> list[str]:
    """The device types among ``tensors`` (and the CPU) where autocast is on now."""
    devices = {t.device.type for t in tensors} | {"cpu"}
    return [d for d in devices if d in ("cpu", "cuda") and torch.is_autocast_enabled(d)]


def half_precision(x: Tensor) -> bool:
    """Whether ``x`` is met inside a half-precision network: itself float16/bfloat16, or under autocast."""
    return x.dtype in LOW or bool(autocast_devices([x]))


def float32_island(fn: F) -> F:
    """Decorate a ``forward(self, u, ...)``: run it in float32 with autocast off; the output takes the
    dtype of the first half-precision tensor argument (unchanged when there is none)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]
        low = next((t.dtype for t in tensors if t.dtype in LOW), None)
        active = autocast_devices(tensors)
        if low is None and not active:
            return fn(*args, **kwargs)
        with _autocast_off(active):
            out = fn(*map(_up, args), **{k: _up(v) for k, v in kwargs.items()})
        return out.to(low) if low is not None and isinstance(out, Tensor) else out

    return wrapper  # type: ignore[return-value]


class _autocast_off:
    def __init__(self, devices: list[str]) -> None:
        self.contexts = [torch.autocast(device_type=d, enabled=False) for d in devices]

    def __enter__(self) -> None:
        for c in self.contexts:
            c.__enter__()

    def __exit__(self, *exc) -> None:
        for c in reversed(self.contexts):
            c.__exit__(*exc)
