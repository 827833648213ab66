"""Fused Triton kernels for GPU training, beside the PyTorch paths they replace.

* :func:`modal_kernel` (:mod:`.modal`): the diagonal blocks' kernels ``Σ_m c Re(Ā^l)`` without the basis.
* :func:`project_convolve` (:mod:`.contraction`): the bottleneck blocks' frequency-domain contraction
  ``ŷ = C (k̂ ⊙ (B̄ û))`` with the ``(B, N, F)`` intermediate kept on chip.
* :func:`row_energy` (:mod:`.front`): the filterbank front's chunked scan, band outputs squared and summed
  on chip (``(B, F, T)`` never written).

When they run is decided in :mod:`.launch` (``EDGESSM_FUSED``; CUDA, or CPU under ``TRITON_INTERPRET=1``).
Triton is imported only when a fused kernel may run: this package's names load on first use, and
:func:`wants_fused` (the cheap first test the PyTorch paths make) imports nothing.
"""

from __future__ import annotations

import importlib
import os

from torch import Tensor

_LAZY = {
    "modal_kernel": ".modal",
    "project_convolve": ".contraction",
    "row_energy": ".front",
    "CALLS": ".launch",
    "FusedUnavailable": ".launch",
    "interpreting": ".launch",
    "triton_version": ".launch",
    "use_fused": ".launch",
    "why_not": ".launch",
}


def wants_fused(t: Tensor, fused: bool | None = None) -> bool:
    """Could the fused path be asked for ``t``? (``fused=True``, ``EDGESSM_FUSED=1``, or a CUDA tensor with
    ``EDGESSM_FUSED`` not ``0``.) :func:`use_fused` then decides, importing Triton."""
    env = os.environ.get("EDGESSM_FUSED", "")
    if fused is not None:
        return fused
    return env == "1" or (t.is_cuda and env != "0")


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CALLS", "FusedUnavailable", "interpreting", "modal_kernel", "project_convolve", "row_energy",
           "triton_version", "use_fused", "wants_fused", "why_not"]  # fmt: skip
