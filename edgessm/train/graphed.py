"""A whole training step recorded once as a CUDA graph and replayed (``train.cuda_graphs``).

A kws step at batch 256 launches ~800 kernels of a few microseconds each; the host needs ~31 µs to queue
each one, so an eager step takes ~25 ms where the device works ~7 ms (``bench roofline``). A CUDA graph
records the step's kernels once (forward, loss, backward, gradient clipping, the optimizer) and replays them
with one launch: the host is out of the way.

What a recorded step needs, and what :class:`StepGraph` does about it:

* **static inputs**: the graph reads its inputs from fixed addresses. Each call copies the batch's tensors
  into buffers made at recording time; a batch of another shape or dtype is refused (one line: which tensor,
  recorded vs given). Non-tensor batch entries are frozen at recording and must not change.
* **no host syncs** inside the step (a value read on the host, a tensor made from Python data, an
  allocation-dependent shape): the recording fails. The networks and the kws / denoise losses have none
  (``tests/test_graphed.py`` checks the step with a dispatch guard on CPU); per-step values enter as device
  tensors filled before each replay (the learning rate, the schedule's progress).
* **warm-up**: the first ``warmup`` calls run eagerly on a side stream (the optimizer's state, cuFFT and
  cuBLAS plans, the measured contraction plans are made there, outside the recording); the next call records
  and replays. Every call is exactly one training step on its batch.

``capture=False`` keeps every rule (static buffers, shape checks, the warm-up count) and runs the step
function eagerly on the buffers: how the plumbing is tested on a CPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

Step = Callable[[dict[str, Any]], dict[str, Tensor]]


class StepGraph:
    """``step(batch) -> outputs`` recorded as one CUDA graph after ``warmup`` eager calls, then replayed.

    The returned tensors are the graph's static outputs: valid until the next call (read them before it).
    """

    def __init__(self, step: Step, warmup: int = 3, capture: bool = True) -> None:
        if warmup < 1:
            raise ValueError(f"a recorded step needs at least one eager warm-up call, got warmup={warmup}")
        self.step, self.warmup, self.capture = step, warmup, capture
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.inputs: dict[str, Tensor] = {}
        self.frozen: dict[str, Any] = {}
        self.outputs: dict[str, Tensor] = {}
        self._stream: torch.cuda.Stream | None = None

    @property
    def recorded(self) -> bool:
        return bool(self.inputs)

    def __call__(self, batch: dict[str, Any]) -> dict[str, Tensor]:
        self.calls += 1
        if self.calls <= self.warmup:
            with self._side_stream():
                return self.step(batch)
        if not self.recorded:
            self._record(batch)
        else:
            self._load(batch)
        if self.graph is not None:
            self.graph.replay()
            return dict(self.outputs)
        return self.step({**self.frozen, **self.inputs})

    def _side_stream(self) -> contextlib.AbstractContextManager:
        """Warm-up work on a side stream, as CUDA graph recording asks (PyTorch's CUDA graphs notes)."""
        if not self.capture:
            return contextlib.nullcontext()
        if self._stream is None:
            self._stream = torch.cuda.Stream()
        self._stream.wait_stream(torch.cuda.current_stream())
        return _joined(self._stream)

    def _record(self, batch: dict[str, Any]) -> None:
        self.inputs = {k: v.detach().clone() for k, v in batch.items() if torch.is_tensor(v)}
        self.frozen = {k: v for k, v in batch.items() if not torch.is_tensor(v)}
        if not self.capture:
            return
        self.graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(self.graph):
                self.outputs = self.step({**self.frozen, **self.inputs})
        except RuntimeError as e:
            self.graph = None
            raise RuntimeError(
                f"train.cuda_graphs: the training step could not be recorded as a CUDA graph "
                f"({str(e).splitlines()[0]}); "
                "something in it waits for the GPU on the host or makes a tensor from host data. Train without "
                "train.cuda_graphs (or with train.compile=reduce-overhead), and report the recipe"
            ) from e

    def _load(self, batch: dict[str, Any]) -> None:
        names = {k for k, v in batch.items() if torch.is_tensor(v)}
        if names != set(self.inputs):
            raise ValueError(
                f"train.cuda_graphs: the batch's tensors changed from {sorted(self.inputs)} to {sorted(names)}"
            )
        for name, buf in self.inputs.items():
            given = batch[name]
            if given.shape != buf.shape or given.dtype != buf.dtype:
                raise ValueError(
                    f"train.cuda_graphs replays one recorded step, so batches must keep their shapes: {name!r} was "
                    f"{tuple(buf.shape)} {buf.dtype} when recorded, this batch has {tuple(given.shape)} {given.dtype}"
                )
            buf.copy_(given, non_blocking=True)
        for name, value in self.frozen.items():
            if batch.get(name) != value:
                raise ValueError(f"train.cuda_graphs: batch entry {name!r} (not a tensor) is frozen at recording "
                                 "and changed")  # fmt: skip


@contextlib.contextmanager
def _joined(stream: torch.cuda.Stream):
    with torch.cuda.stream(stream):
        yield
    torch.cuda.current_stream().wait_stream(stream)


# --- a guard for CPU tests: operations a CUDA graph cannot record --------------------------------------------

HOST_SYNCS = {"_local_scalar_dense", "item", "is_nonzero", "equal", "nonzero", "masked_select", "unique",
              "_unique2", "repeat_interleave"}  # fmt: skip


class HostSyncGuard:
    """Records the operations of a step that would stop a CUDA graph recording: a device value read on the
    host (``item``, ``bool``, ``nonzero``, a boolean-mask index, ...) and tensors made from host data
    (``torch.tensor([...])``, a host tensor moved to the device: pageable host-to-device copies on a GPU).
    ``found`` names each with its count. Run the step on the meta device to check its device code paths (a
    host read fails there after being recorded); on CPU tensors every host read shows, device path or not."""

    def __init__(self) -> None:
        self.found: dict[str, int] = {}
        self._modes = (_DispatchGuard(self.found), _FunctionGuard(self.found))

    def __enter__(self) -> HostSyncGuard:
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)


def _count(found: dict[str, int], name: str) -> None:
    found[name] = found.get(name, 0) + 1


class _DispatchGuard(TorchDispatchMode):
    def __init__(self, found: dict[str, int]) -> None:
        super().__init__()
        self.found = found

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in ("index", "index_put", "index_put_") and _bool_index(args):
            _count(self.found, f"{name} with a boolean mask")  # the selected count sizes the result
        elif name in HOST_SYNCS or name == "lift_fresh":
            _count(self.found, name)
        return func(*args, **(kwargs or {}))


class _FunctionGuard(TorchFunctionMode):
    """Tensors made from Python data on a device, and host tensors moved to one (seen before dispatch)."""

    def __init__(self, found: dict[str, int]) -> None:
        super().__init__()
        self.found = found

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in ("tensor", "as_tensor") and _off_host(kwargs.get("device")):
            _count(self.found, f"torch.{name} on a device")
        elif name in ("to", "cuda") and args and torch.is_tensor(args[0]) and args[0].device.type == "cpu":
            target = kwargs.get("device", next((a for a in args[1:] if isinstance(a, (str, torch.device))), None))
            if _off_host(target) or name == "cuda":
                _count(self.found, "a host tensor moved to the device")
        return func(*args, **kwargs)


def _off_host(device: object) -> bool:
    return device is not None and torch.device(device).type != "cpu"


def _bool_index(args: tuple) -> bool:
    indices = args[1] if len(args) > 1 and isinstance(args[1], (list, tuple)) else ()
    return any(torch.is_tensor(i) and i.dtype == torch.bool for i in indices)


__all__ = ["HOST_SYNCS", "HostSyncGuard", "StepGraph"]
