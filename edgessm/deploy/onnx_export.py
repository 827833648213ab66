"""Stepwise ONNX export: one graph that advances a stream by one chunk.

Inputs: ``audio`` ``(1, 1, chunk)`` float32 and every state tensor (``in.<name>``, zeros to start).
Outputs: ``output`` (frame logits, CTC logits or denoised audio for the chunk) and every new state
(``out.<name>``), in the order of ``model.state_shapes()``. Static shapes, float32 only, no
complex numbers, no FFT, no Loop/Scan/If: the SSM recurrences are MatMul/Mul/Add on constants
frozen for this chunk size (:mod:`.freeze`). The metadata the runtime needs travels in the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from edgessm import __version__
from edgessm.atomic import atomic_path

from .freeze import freeze, unfreeze

OPSET = 17
# Ops that NPU compilers commonly accept (a conservative list; everything else is reported).
NPU_FRIENDLY_OPS = frozenset(
    "Add Sub Mul Div MatMul Gemm Conv ConvTranspose Relu Sigmoid Tanh Softmax Reshape Transpose Concat "
    "Slice Squeeze Unsqueeze ReduceMean ReduceSum LayerNormalization Clip Min Max Identity Constant Pad "
    "Split Neg Sqrt Pow Exp Log Flatten AveragePool Cast Expand Gather".split()
)


class StepGraph(nn.Module):
    """``forward(audio, *states) -> (output, *new_states)``: the traceable view of ``model.step``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, audio: torch.Tensor, *states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y, new = self.model.step(audio, list(states))
        return (y, *new)


def weights_hash(model: nn.Module) -> str:
    """SHA-256 of the model's tensors (names, shapes and float32 bytes, in name order)."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.detach().cpu().float().contiguous().numpy().tobytes())
    return h.hexdigest()


def parallel_output(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """What the streamed graph must reproduce, computed by the parallel (FFT) forward."""
    if hasattr(model, "frame_logits"):
        return model.frame_logits(x)
    return model(x)


def model_stride(model: nn.Module) -> int:
    if hasattr(model, "stride"):
        return int(model.stride)
    return int(model.chunk_multiple)


@dataclass
class ExportReport:
    path: Path
    chunk: int
    max_abs_error: float
    op_census: dict[str, int]
    unfriendly_ops: list[str]
    metadata: dict[str, str] = field(default_factory=dict)
    budgets: dict[int, ExportReport] = field(default_factory=dict)  # the other budget graphs of a model folder
    file_graph: ExportReport | None = None  # the model folder's graph for files (larger chunks), if any
    openvino_max_abs: float | None = None  # OpenVINO (CPU) vs ONNX Runtime on real speech, when OpenVINO is installed


def export_onnx(model: nn.Module, path: str | os.PathLike, chunk: int, metadata: dict[str, Any] | None = None,
                verify_inputs: list[np.ndarray] | None = None, tolerance: float = 1e-4) -> ExportReport:  # fmt: skip
    """Export ``model`` (anything with ``step``/``state_shapes``/``init_state``) for ``chunk``-sample chunks.

    The graph is checked with ``onnx.checker`` and, for every array of ``verify_inputs``, streamed
    through ONNX Runtime and compared with the PyTorch parallel forward; a maximum absolute error
    above ``tolerance`` raises ``RuntimeError`` (nothing is written then).
    """
    import onnx

    stride = model_stride(model)
    if chunk <= 0 or chunk % stride:
        raise ValueError(f"chunk must be a positive multiple of the network's total stride {stride}, got {chunk}")
    path = Path(path)
    model = model.eval()
    shapes = model.state_shapes()
    meta = {
        "edgessm_version": __version__,
        "sample_rate": "16000",
        "chunk": str(chunk),
        "stride": str(stride),
        "latency_samples": str(chunk + int(getattr(model, "delay", 0))),
        "states": json.dumps([[name, list(shape)] for name, shape in shapes]),
        "weights_sha256": weights_hash(model),
    }
    if getattr(model, "delay", 0):  # output sample t stands for input sample t - delay (runtimes compensate)
        meta["delay_samples"] = str(int(model.delay))
    if hasattr(model, "counts"):
        counts = model.counts()
        meta["params"] = str(counts.params)
        meta["flops_per_second"] = str(round(counts.flops * 16000))
    meta.update({k: v if isinstance(v, str) else json.dumps(v) for k, v in (metadata or {}).items()})
    try:
        freeze(model, chunk)
        states = model.init_state(1)
        audio = torch.zeros(1, 1, chunk)
        in_names = ["audio", *[f"in.{n}" for n, _ in shapes]]
        out_names = ["output", *[f"out.{n}" for n, _ in shapes]]
        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            raw = Path(tmp) / "raw.onnx"
            torch.onnx.export(
                StepGraph(model).eval(),  # the exporter restores the wrapper's mode afterwards: make it eval
                (audio, *states),
                str(raw),
                input_names=in_names,
                output_names=out_names,
                opset_version=OPSET,
                dynamo=False,
                do_constant_folding=True,
            )
            proto = onnx.load(str(raw))
    finally:
        unfreeze(model)
        model.eval()
    proto.ir_version = min(proto.ir_version, 10)  # onnxruntime builds reject IR versions newer than they know
    del proto.metadata_props[:]
    for k, v in meta.items():
        proto.metadata_props.add(key=k, value=v)
    onnx.checker.check_model(proto)
    census = dict(sorted(Counter(n.op_type for n in proto.graph.node).items()))
    report = ExportReport(path, chunk, 0.0, census, sorted(set(census) - NPU_FRIENDLY_OPS), meta)
    errors = [verify(model, proto.SerializeToString(), chunk, x) for x in (verify_inputs or [])]
    report.max_abs_error = max(errors, default=0.0)
    if report.max_abs_error > tolerance:
        raise RuntimeError(
            f"exported graph disagrees with the PyTorch model: max abs error {report.max_abs_error:.3g} > {tolerance}"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        onnx.save(proto, str(tmp))
    return report


def run_stream(session, x: np.ndarray, chunk: int) -> np.ndarray:
    """Stream ``x (T,)`` (``T`` a multiple of ``chunk``) through an ONNX Runtime step session."""
    inputs = session.get_inputs()
    states = {i.name: np.zeros(i.shape, np.float32) for i in inputs[1:]}
    outs = []
    for pos in range(0, len(x), chunk):
        feed = {"audio": x[pos : pos + chunk].reshape(1, 1, chunk).astype(np.float32), **states}
        result = session.run(None, feed)
        outs.append(result[0])
        states = {i.name: r for i, r in zip(inputs[1:], result[1:], strict=True)}
    return np.concatenate(outs, axis=-1)


@torch.no_grad()
def verify(model: nn.Module, onnx_bytes: bytes, chunk: int, x: np.ndarray) -> float:
    """Max abs difference between the ONNX stream and the PyTorch parallel forward on ``x (T,)``."""
    import onnxruntime as ort

    x = np.asarray(x, np.float32)[: len(x) - len(x) % chunk]
    model.eval()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(onnx_bytes, opts, providers=["CPUExecutionProvider"])
    streamed = run_stream(session, x, chunk)
    ref = parallel_output(model, torch.from_numpy(x).view(1, 1, -1)).numpy()
    if streamed.shape != ref.shape:
        raise RuntimeError(f"streamed output shape {streamed.shape} differs from the model's {ref.shape}")
    return float(np.abs(streamed - ref).max())
