"""Static int8 quantization (QDQ, per-channel weight scales) of a stepwise graph.

Activations are calibrated by streaming real audio through the float graph, so each calibration
sample is a real ``(audio chunk, state)`` pair; activations are asymmetric uint8 with per-tensor
scales, weights symmetric int8 with one scale per output channel.

What stays float32, and why (each measured on kws35, output SNR of int8 vs fp32 graph):

- the state path (:func:`state_path_nodes`): a state integrates thousands of steps;
- the first block (:func:`full_rate_nodes`): it sees the raw waveform, whose level spans the
  whole input range;
- the waveform-domain transforms (:func:`waveform_domain_nodes`): the nodes that read the audio
  input or write the audio output through shape-only and elementwise ops, and those that feed a
  ``Log`` (a spectral denoiser's DFT, inverse DFT and band energies). Audio and powers span a far
  wider range than 8 bits hold per tensor: quantized, the spectral denoiser's output was at
  -28 dB SNR from the float graph's, its SI-SDR improvement -9.8 dB instead of +6.7 dB;
- the SSM kernels (:func:`ssm_kernel_nodes`): the in-chunk Toeplitz and state maps (MatMuls with a
  per-channel >2-D constant) and the grouped per-state Convs. Their channels differ in scale by
  10^3 or more, which per-tensor activation scales cannot hold (quantizing just one of them
  took the whole graph down to 12 dB), and onnxruntime has no per-channel int8 kernel for an
  N-D weight.

The projections and heads, where the parameters and most MACs of the later blocks are, run in
int8. Two rewrites before calibration make their weights per-channel (:func:`prepare_for_int8`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import numpy as np

from edgessm.atomic import atomic_path

QUANTIZED_OPS = ["MatMul", "Conv", "ConvTranspose", "Gemm"]
_PASS_THROUGH = {"Add", "Sub", "Mul", "Squeeze", "Unsqueeze", "Reshape", "Transpose", "Concat", "Slice", "Identity"}
_DOWNSAMPLERS = {"AveragePool", "MaxPool", "ReduceMean"}  # pooling: exported as a ReduceMean over a reshape


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


def _stride(node) -> int:
    return max((max(a.ints) for a in node.attribute if a.name == "strides" and a.ints), default=1)


def full_rate_nodes(model) -> list[str]:
    """Quantizable nodes that run at the input sample rate: everything up to the first downsampler
    (pooling or strided Conv, included) and from the last upsampler (strided ConvTranspose,
    included) on.

    The first block sees the raw waveform, whose level spans the whole input range; with per-tensor
    activation scales its MatMuls lose the quiet parts. A denoiser's last level writes the waveform
    itself. Keeping them float costs little: they have the fewest channels.
    """
    nodes = list(model.graph.node)  # topological order; export traces layer by layer
    down = next(
        (i for i, n in enumerate(nodes) if n.op_type in _DOWNSAMPLERS or (n.op_type == "Conv" and _stride(n) > 1)), None
    )
    if down is None:
        return []  # no downsampling: the whole network runs at the input rate; quantize as usual
    ups = [i for i, n in enumerate(nodes) if n.op_type == "ConvTranspose" and _stride(n) > 1]
    picked = nodes[: down + 1] + (nodes[ups[-1] :] if ups else [])
    return [n.name for n in picked if n.op_type in QUANTIZED_OPS]


def waveform_domain_nodes(model) -> list[str]:
    """Quantizable nodes reached from the audio input forwards, or from the audio output (a denoiser's,
    graph metadata ``task``) and from every ``Log`` backwards, through ops that only move or combine
    values elementwise (``_PASS_THROUGH``)."""
    graph = model.graph
    producer = {out: n for n in graph.node for out in n.output}
    consumers: dict[str, list] = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    keep: set[str] = set()

    def walk(stack: list, forward: bool) -> None:
        seen: set[str] = set()
        while stack:
            n = stack.pop()
            if n.name in seen:
                continue
            seen.add(n.name)
            if n.op_type in QUANTIZED_OPS:
                keep.add(n.name)
            elif n.op_type in _PASS_THROUGH:
                if forward:
                    stack.extend(c for o in n.output for c in consumers.get(o, []))
                else:
                    stack.extend(producer[i] for i in n.input if i in producer)

    audio_in = [i.name for i in graph.input if not i.name.startswith("in.")]
    walk([c for name in audio_in for c in consumers.get(name, [])], forward=True)
    meta = {p.key: p.value for p in model.metadata_props}
    writes_audio = meta.get("task") == "denoise"  # a classifier's or recognizer's output is not audio
    audio_out = [o.name for o in graph.output if not o.name.startswith("out.")] if writes_audio else []
    walk([producer[name] for name in audio_out if name in producer], forward=False)
    walk([producer[i] for n in graph.node if n.op_type == "Log" for i in n.input if i in producer], forward=False)
    return sorted(keep)


def _constants(model) -> dict[str, np.ndarray]:
    from onnx import numpy_helper

    found = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            found[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    return found


def ssm_kernel_nodes(model) -> list[str]:
    """The SSM kernel ops: MatMuls with a constant operand of more than two dimensions (one
    Toeplitz or state map per channel) and grouped Convs (per-state filters)."""
    consts = _constants(model)
    out = []
    for n in model.graph.node:
        if n.op_type == "MatMul" and any(i in consts and consts[i].ndim > 2 for i in n.input):
            out.append(n.name)
        elif n.op_type in ("Conv", "ConvTranspose") and any(a.name == "group" and a.i > 1 for a in n.attribute):
            out.append(n.name)
    return out


def prepare_for_int8(model):
    """Rewrite a float graph (in place) so its weights quantize per output channel; returns it.

    1. Float constants that feed a quantizable op become initializers: onnxruntime's quantizer
       treats only initializers as weights, and quantizes a ``Constant`` node's output like an
       activation, with one scale for the whole tensor.
    2. A 2-D weight on the *left* of a MatMul (``W @ x``, our channel-first projections) is
       divided by its row maxima ``r`` and followed by a float ``Mul`` by ``r``: onnxruntime
       quantizes per channel only the right operand, and the rows of these weights differ by up to
       ~900x. The result is the same function; the int8 weight then has one effective scale per
       output channel.
    """
    from onnx import helper, numpy_helper

    consumers: dict[str, list] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    nodes = []
    for n in model.graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            t = numpy_helper.to_array(n.attribute[0].t)
            if (
                t.dtype == np.float32
                and t.ndim >= 2
                and any(c.op_type in QUANTIZED_OPS for c in consumers.get(n.output[0], []))
            ):
                model.graph.initializer.append(numpy_helper.from_array(t, n.output[0]))
                continue
        nodes.append(n)
    inits = {i.name: i for i in model.graph.initializer}
    rewritten = []
    for n in nodes:
        rewritten.append(n)
        if n.op_type != "MatMul" or n.input[0] not in inits or n.input[1] in inits:
            continue
        w = numpy_helper.to_array(inits[n.input[0]])
        if w.ndim != 2 or len(consumers.get(n.input[0], [])) != 1:
            continue
        r = np.maximum(np.abs(w).max(axis=1, keepdims=True), 1e-30).astype(np.float32)
        inits[n.input[0]].CopyFrom(numpy_helper.from_array((w / r).astype(np.float32), n.input[0]))
        scale = n.name + "/row_scale"
        model.graph.initializer.append(numpy_helper.from_array(r, scale))
        y = n.output[0]
        n.output[0] = y + "/row_normalized"
        rewritten.append(helper.make_node("Mul", [n.output[0], scale], [y], name=n.name + "/row_rescale"))
    del model.graph.node[:]
    model.graph.node.extend(rewritten)
    return model


class Int8Plan(NamedTuple):
    kept: list[str]  # MatMul/Conv nodes left float32
    quantized: list[str]  # MatMul/Conv nodes in int8


class _Calibration:
    """onnxruntime CalibrationDataReader: real chunks with the states the float graph reaches."""

    def __init__(self, float_path: str, audio: Iterable[np.ndarray], max_samples: int) -> None:
        import onnxruntime as ort

        sess = ort.InferenceSession(float_path, providers=["CPUExecutionProvider"])
        inputs = sess.get_inputs()
        chunk = inputs[0].shape[-1]
        audio = [np.asarray(x, np.float32) for x in audio]
        total = sum(len(x) // chunk for x in audio)
        keep = {int(k * total / max_samples) for k in range(max_samples)} if total > max_samples else None
        self.feeds: list[dict[str, np.ndarray]] = []  # every chunk is streamed; an even sample of them is kept
        n = 0
        for x in audio:
            state = [np.zeros(i.shape, np.float32) for i in inputs[1:]]
            for pos in range(0, len(x) - chunk + 1, chunk):
                feed = {inputs[0].name: x[pos : pos + chunk].reshape(1, 1, chunk)}
                feed.update({i.name: s for i, s in zip(inputs[1:], state, strict=True)})
                if keep is None or n in keep:
                    self.feeds.append(feed)
                n += 1
                state = sess.run(None, feed)[1:]
        self._it = iter(self.feeds)

    def get_next(self):
        return next(self._it, None)

    def rewind(self) -> None:
        self._it = iter(self.feeds)


def quantize_int8(float_path: str | os.PathLike, out_path: str | os.PathLike, calibration_audio: Iterable[np.ndarray],
                  max_calibration_chunks: int = 3000) -> Int8Plan:  # fmt: skip
    """Write the int8 QDQ version of ``float_path``; returns which MatMul/Conv nodes stayed float and
    which were quantized."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    model = onnx.load(str(float_path))
    metadata = [(p.key, p.value) for p in model.metadata_props]
    keep = sorted({*state_path_nodes(model), *full_rate_nodes(model), *ssm_kernel_nodes(model),
                   *waveform_domain_nodes(model)})  # fmt: skip
    quantizable = [n.name for n in model.graph.node if n.op_type in QUANTIZED_OPS]
    out_path = Path(out_path)
    with tempfile.TemporaryDirectory() as tmp:
        prepared = Path(tmp) / "prepared.onnx"
        onnx.save(prepare_for_int8(model), str(prepared))
        reader = _Calibration(str(prepared), calibration_audio, max_calibration_chunks)
        if not reader.feeds:
            raise ValueError("no calibration audio: give at least one input longer than the graph's chunk")
        raw = Path(tmp) / "q.onnx"
        quantize_static(
            str(prepared),
            str(raw),
            reader,
            quant_format=QuantFormat.QDQ,
            op_types_to_quantize=QUANTIZED_OPS,
            nodes_to_exclude=keep,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            calibrate_method=CalibrationMethod.MinMax,
            extra_options={"ActivationSymmetric": False, "QDQOpTypePerChannelSupportToAxis": {"MatMul": -1}},
        )
        q = onnx.load(str(raw))
        q.ir_version = min(q.ir_version, 10)
        del q.metadata_props[:]
        for key, value in metadata:
            q.metadata_props.add(key=key, value=value)
        kept_float = "state path, first block, waveform-domain transforms, SSM kernels"
        q.metadata_props.add(key="quantization", value=f"int8 QDQ: uint8 activations, per-channel int8 weights; "
                             f"float32: {kept_float}")  # fmt: skip
        with atomic_path(out_path) as tmp_out:
            onnx.save(q, str(tmp_out))
    kept = set(keep)
    return Int8Plan([k for k in quantizable if k in kept], [k for k in quantizable if k not in kept])
