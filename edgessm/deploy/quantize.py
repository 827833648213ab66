"""Static int8 quantization (QDQ, per-channel weight scales) of a stepwise graph.

Activations are calibrated by streaming real audio through the float graph, so each calibration
sample is a real ``(audio chunk, state)`` pair. The SSM recurrence is numerically sensitive (a
state integrates thousands of steps), so the ops on the state path stay float32: every node that
reads a state input, and every node between a state output and the MatMul that produces its
update. The first block, which runs on the raw waveform before any pooling, also stays float (see
:func:`full_rate_nodes`). Projections, in-chunk convolutions (Toeplitz MatMuls), Convs and the
heads of the later blocks run in int8.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from edgessm.atomic import atomic_path

QUANTIZED_OPS = ["MatMul", "Conv", "ConvTranspose", "Gemm"]
_PASS_THROUGH = {"Add", "Sub", "Mul", "Squeeze", "Unsqueeze", "Reshape", "Transpose", "Concat", "Slice", "Identity"}


def state_path_nodes(model) -> list[str]:
    """Names of the nodes that must stay float: readers of state inputs and writers of state outputs."""
    graph = model.graph
    state_inputs = {i.name for i in graph.input if i.name.startswith("in.")}
    state_outputs = {o.name for o in graph.output if o.name.startswith("out.")}
    producer = {out: n for n in graph.node for out in n.output}
    keep: set[str] = set()
    for n in graph.node:
        if state_inputs & set(n.input):
            keep.add(n.name)
    stack = [producer[o] for o in state_outputs if o in producer]
    seen: set[str] = set()
    while stack:
        n = stack.pop()
        if n.name in seen:
            continue
        seen.add(n.name)
        keep.add(n.name)
        if n.op_type in _PASS_THROUGH:  # walk back to the MatMul that computes the update
            stack.extend(producer[i] for i in n.input if i in producer)
    return sorted(keep)


_DOWNSAMPLERS = {"AveragePool", "MaxPool"}


def full_rate_nodes(model) -> list[str]:
    """Quantizable nodes that run at the input sample rate: everything before the first pooling node.

    The first block sees the raw waveform, whose level spans the whole input range; with per-tensor
    activation scales its MatMuls lose the quiet parts. Keeping that block float costs little (it
    has the fewest channels); on kws35 it is the largest single int8 error source measured.
    """
    out = []
    for n in model.graph.node:  # ONNX nodes are in topological order; export traces layer by layer
        if n.op_type in _DOWNSAMPLERS:
            return out
        if n.op_type in QUANTIZED_OPS:
            out.append(n.name)
    return []  # no downsampling: the whole network runs at the input rate; quantize as usual


class _Calibration:
    """onnxruntime CalibrationDataReader: real chunks with the states the float graph reaches."""

    def __init__(self, float_path: str, audio: Iterable[np.ndarray], max_samples: int) -> None:
        import onnxruntime as ort

        sess = ort.InferenceSession(float_path, providers=["CPUExecutionProvider"])
        inputs = sess.get_inputs()
        chunk = inputs[0].shape[-1]
        self.feeds: list[dict[str, np.ndarray]] = []
        for x in audio:
            state = [np.zeros(i.shape, np.float32) for i in inputs[1:]]
            x = np.asarray(x, np.float32)
            for pos in range(0, len(x) - chunk + 1, chunk):
                feed = {inputs[0].name: x[pos : pos + chunk].reshape(1, 1, chunk)}
                feed.update({i.name: s for i, s in zip(inputs[1:], state, strict=True)})
                self.feeds.append(feed)
                state = sess.run(None, feed)[1:]
        if len(self.feeds) > max_samples:
            step = len(self.feeds) / max_samples
            self.feeds = [self.feeds[int(k * step)] for k in range(max_samples)]
        self._it = iter(self.feeds)

    def get_next(self):
        return next(self._it, None)

    def rewind(self) -> None:
        self._it = iter(self.feeds)


def quantize_int8(float_path: str | os.PathLike, out_path: str | os.PathLike, calibration_audio: Iterable[np.ndarray],
                  max_calibration_chunks: int = 400) -> list[str]:  # fmt: skip
    """Write the int8 QDQ version of ``float_path``; returns the names of the nodes kept float."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    model = onnx.load(str(float_path))
    keep = sorted(set(state_path_nodes(model)) | set(full_rate_nodes(model)))
    reader = _Calibration(str(float_path), calibration_audio, max_calibration_chunks)
    if not reader.feeds:
        raise ValueError("no calibration audio: give at least one input longer than the graph's chunk")
    out_path = Path(out_path)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "q.onnx"
        quantize_static(
            str(float_path),
            str(raw),
            reader,
            quant_format=QuantFormat.QDQ,
            op_types_to_quantize=QUANTIZED_OPS,
            nodes_to_exclude=keep,
            per_channel=True,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            calibrate_method=CalibrationMethod.MinMax,
            extra_options={"ActivationSymmetric": True},
        )
        q = onnx.load(str(raw))
        q.ir_version = min(q.ir_version, 10)
        del q.metadata_props[:]
        for p in model.metadata_props:
            q.metadata_props.add(key=p.key, value=p.value)
        q.metadata_props.add(key="quantization", value="int8 QDQ per-channel; state path float32")
        with atomic_path(out_path) as tmp_out:
            onnx.save(q, str(tmp_out))
    return keep
