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

import itertools
import os
import shutil
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


INT8_MIN_SNR_DB = 20.0  # the int8 graph's outputs at least this close to the float graph's, or more nodes stay float


class Int8Plan(NamedTuple):
    kept: list[str]  # MatMul/Conv nodes left float32
    quantized: list[str]  # MatMul/Conv nodes in int8
    sensitive: tuple[str, ...] = ()  # of ``kept``: projections kept float by the sensitivity search, worst first
    snr_db: float | None = None  # the int8 graph's output SNR against the float graph's on the check audio


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

    def rewind(self, every: int = 1) -> None:
        """Start over, with every ``every``-th feed (a quicker calibration)."""
        self._it = iter(self.feeds[::every])


def quantize_int8(float_path: str | os.PathLike, out_path: str | os.PathLike, calibration_audio: Iterable[np.ndarray],
                  max_calibration_chunks: int = 3000, check_audio: Iterable[np.ndarray] | None = None,
                  min_snr_db: float | None = None, keep_float: Iterable[str] = (), log=None) -> Int8Plan:  # fmt: skip
    """Write the int8 QDQ version of ``float_path``; returns which MatMul/Conv nodes stayed float and
    which were quantized.

    With ``check_audio`` the plan's output SNR against the float graph is measured there (``snr_db``). With
    ``min_snr_db`` too, a graph below it gets a sensitivity search: each projection still in int8 is
    quantized *alone* (a tenth of the calibration chunks) and ranked by the SNR it alone leaves; then the
    worst are kept float one at a time, each step a full quantization, until the floor is met or none is
    left (kws35-es v2: one 1536 → 48 spectral mixing MatMul took the whole graph from 24 to 9 dB).
    ``keep_float``: projections to keep float from the start, as if the search had chosen them (another
    budget's graph of the same network, say). ``log(str)`` hears about the search."""
    import onnx

    float_path = Path(float_path)
    model = onnx.load(str(float_path))
    metadata = [(p.key, p.value) for p in model.metadata_props]
    keep = sorted({*state_path_nodes(model), *full_rate_nodes(model), *ssm_kernel_nodes(model),
                   *waveform_domain_nodes(model)})  # fmt: skip
    quantizable = [n.name for n in model.graph.node if n.op_type in QUANTIZED_OPS]
    check = [np.asarray(x, np.float32) for x in check_audio or []]
    out_path = Path(out_path)
    with tempfile.TemporaryDirectory() as tmp:
        prepared = Path(tmp) / "prepared.onnx"
        onnx.save(prepare_for_int8(model), str(prepared))
        reader = _Calibration(str(prepared), calibration_audio, max_calibration_chunks)
        if not reader.feeds:
            raise ValueError("no calibration audio: give at least one input longer than the graph's chunk")
        reference = _outputs(float_path, check)

        tries = itertools.count()

        def quantized(exclude: Iterable[str], extra: Iterable[str] = (), every: int = 1) -> tuple[Path, float | None]:
            path = Path(tmp) / f"q{next(tries)}.onnx"
            reader.rewind(every)
            _quantize(prepared, path, reader, sorted({*exclude, *extra}), list(extra), metadata)
            return path, _agreement(reference, path, check)

        sensitive = [n for n in keep_float if n in quantizable and n not in keep]
        best, snr = quantized(keep, sensitive)
        if snr is not None and min_snr_db is not None and snr < min_snr_db:
            alone = {}
            for name in (n for n in quantizable if n not in keep):
                alone[name] = quantized(set(quantizable) - {name}, every=10)[1]
            ranked = sorted(alone, key=alone.get)
            if log is not None:
                worst = ", ".join(f"{n} {alone[n]:.1f} dB" for n in ranked[:4])
                log(f"int8 output SNR {snr:.1f} dB < {min_snr_db:g} dB; alone in int8, the worst projections: {worst}")
            for name in ranked:
                sensitive.append(name)
                best, snr = quantized(keep, sensitive)
                if log is not None:
                    log(f"  {name} kept float: {snr:.1f} dB")
                if snr >= min_snr_db:
                    break
        with atomic_path(out_path) as tmp_out:
            shutil.copyfile(best, tmp_out)
    kept = {*keep, *sensitive}
    return Int8Plan([k for k in quantizable if k in kept], [k for k in quantizable if k not in kept], tuple(sensitive),
                    snr)  # fmt: skip


def _quantize(prepared: Path, out: Path, reader: _Calibration, exclude: list[str], searched: list[str],
              metadata: list) -> None:  # fmt: skip
    """One static QDQ quantization of the prepared graph, ``exclude`` left float; the float graph's metadata
    carried over, with a line saying what stayed float (``searched``: the sensitivity search's nodes)."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    raw = out.with_suffix(".raw.onnx")
    quantize_static(
        str(prepared),
        str(raw),
        reader,
        quant_format=QuantFormat.QDQ,
        op_types_to_quantize=QUANTIZED_OPS,
        nodes_to_exclude=exclude,
        per_channel=True,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        calibrate_method=CalibrationMethod.MinMax,
        extra_options={"ActivationSymmetric": False, "QDQOpTypePerChannelSupportToAxis": {"MatMul": -1}},
    )
    q = onnx.load(str(raw))
    raw.unlink()
    q.ir_version = min(q.ir_version, 10)
    del q.metadata_props[:]
    for key, value in metadata:
        q.metadata_props.add(key=key, value=value)
    kept_float = "state path, first block, waveform-domain transforms, SSM kernels"
    if searched:
        kept_float += f", the projections most sensitive to int8 ({' '.join(searched)})"
    q.metadata_props.add(key="quantization", value=f"int8 QDQ: uint8 activations, per-channel int8 weights; "
                         f"float32: {kept_float}")  # fmt: skip
    onnx.save(q, str(out))


def _outputs(graph: Path, audio: list[np.ndarray]) -> list[np.ndarray]:
    from edgessm.runtime.session import StepModel

    model = StepModel(graph) if audio else None
    return [model.process(x) for x in audio]


def _agreement(reference: list[np.ndarray], graph: Path, audio: list[np.ndarray]) -> float | None:
    """The lowest output SNR (dB) of ``graph`` against the float graph's outputs ``reference`` over ``audio``."""
    from edgessm.eval.metrics import snr_db

    if not audio:
        return None
    return min(snr_db(ref, out) for ref, out in zip(reference, _outputs(graph, audio), strict=True))
