"""When and how the fused Triton kernels run: availability, the ``EDGESSM_FUSED`` switch, compiling (or
interpreting) a kernel, and launch bookkeeping. Shared by every fused kernel of :mod:`edgessm.ssm.fused`.

Dispatch (:func:`use_fused`): on CUDA tensors when Triton imports, unless ``EDGESSM_FUSED=0``;
``EDGESSM_FUSED=1`` (or ``fused=True``) demands the fused path and fails loudly (:class:`FusedUnavailable`)
where it cannot run, never falling back in silence. On CPU the kernels run only under Triton's interpreter
(``TRITON_INTERPRET=1`` when Triton is first imported; the test suite sets it): that is how CI, which has
no GPU, checks them against PyTorch. :data:`CALLS` counts fused launches so tests can tell the path was taken.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from collections.abc import Callable

import torch
from torch import Tensor

try:  # Triton comes with torch on Linux x86_64; elsewhere the PyTorch paths run
    import triton
    import triton.language as tl
except Exception:  # pragma: no cover - platform without Triton
    triton = tl = None

CALLS: Counter[str] = Counter()  # fused launches per kernel name (tests check the path was taken)


class FusedUnavailable(RuntimeError):
    """``EDGESSM_FUSED=1`` (or ``fused=True``) asked for a fused kernel that cannot run here."""


def triton_version() -> str | None:
    """Triton's version, or ``None`` where it does not import."""
    return None if triton is None else str(triton.__version__)


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter: ``TRITON_INTERPRET=1`` was set when Triton was
    first imported (its language module is built for one mode or the other at import)."""
    if triton is None:
        return False
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.standard.sum, InterpretedFunction)


def why_not(t: Tensor) -> str | None:
    """Why the fused kernels cannot run on ``t`` (``None``: they can)."""
    if triton is None:
        return "Triton is not installed (it comes with torch on Linux x86_64)"
    if t.dtype != torch.float32:
        return f"the fused kernels take float32 tensors, not {t.dtype}"
    if t.device.type == "cuda" or (t.device.type == "cpu" and interpreting()):
        return None
    return (
        f"Triton runs on CUDA tensors (or on CPU when TRITON_INTERPRET=1 was set before Triton was imported), "
        f"not on {t.device.type}"
    )


def use_fused(t: Tensor, fused: bool | None = None) -> bool:
    """Whether to take the fused path for ``t``: ``fused`` if given, else ``EDGESSM_FUSED`` (``1`` demand,
    ``0`` never, unset: on CUDA where possible). A demand that cannot be met raises :class:`FusedUnavailable`."""
    if fused is None:
        env = os.environ.get("EDGESSM_FUSED", "")
        fused = True if env == "1" else False if env == "0" else None
    reason = why_not(t)
    if fused is None:
        return reason is None and t.device.type == "cuda"
    if fused and reason is not None:
        raise FusedUnavailable(f"fused kernel demanded (EDGESSM_FUSED=1 or fused=True) but {reason}")
    return fused


@functools.cache
def _compiled(fn: Callable, interpret: bool) -> object:
    if interpret:
        from triton.runtime.interpreter import InterpretedFunction

        return InterpretedFunction(fn)
    return triton.jit(fn)


def kernel(fn: Callable) -> object:
    """``fn`` (a plain function written in Triton's language) as a launchable kernel: compiled for the GPU,
    or wrapped for the interpreter when Triton was imported under ``TRITON_INTERPRET=1``."""
    return _compiled(fn, interpreting())


def bound(n: int) -> object:
    """A loop bound as a kernel argument. The interpreter hands plain ints to a kernel as 1-element arrays,
    which numpy >= 2.4 no longer accepts as a ``range`` bound (triton-lang/triton#9171); there it goes as a
    ``tl.constexpr``. Compiled kernels take it as a runtime int, so one compilation serves every length."""
    return tl.constexpr(n) if interpreting() else n


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def block(n: int, least: int = 16) -> int:
    """The power of two >= ``n`` (at least ``least``: ``tl.dot`` needs 16 on each side)."""
    return max(least, 1 << max(0, (n - 1).bit_length()))
