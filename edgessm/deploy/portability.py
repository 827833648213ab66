"""A second runtime for the same graphs: OpenVINO on its CPU device, compared with ONNX Runtime."""

from __future__ import annotations

import os

import numpy as np


def run_openvino(path: str | os.PathLike, x: np.ndarray, threads: int = 1) -> np.ndarray:
    """Stream ``x (T,)`` through the stepwise graph at ``path`` with OpenVINO (CPU, float32 precision)."""
    import openvino as ov

    compiled = ov.Core().compile_model(
        str(path), "CPU", {"INFERENCE_NUM_THREADS": str(threads), "INFERENCE_PRECISION_HINT": "f32"}
    )
    request = compiled.create_infer_request()
    inputs = compiled.inputs
    chunk = int(inputs[0].shape[-1])
    state = [np.zeros(tuple(i.shape), np.float32) for i in inputs[1:]]
    outs = []
    x = np.asarray(x, np.float32)
    for pos in range(0, len(x) - chunk + 1, chunk):
        values = list(request.infer([x[pos : pos + chunk].reshape(1, 1, chunk), *state]).values())
        outs.append(values[0])
        state = values[1:]
    return np.concatenate(outs, axis=-1)


def runtime_agreement(path: str | os.PathLike, x: np.ndarray) -> tuple[float, float]:
    """``(max abs difference, SNR in dB)`` of OpenVINO's outputs against ONNX Runtime's, streaming
    ``x`` through ``path``. An int8 graph differs more than rounding: each runtime has its own
    integer kernels and requantization."""
    import onnxruntime as ort

    from .onnx_export import run_stream

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    chunk = session.get_inputs()[0].shape[-1]
    x = np.asarray(x, np.float32)[: len(x) - len(x) % chunk]
    from edgessm.eval.metrics import snr_db

    a, b = run_stream(session, x, chunk), run_openvino(path, x)
    return float(np.abs(a - b).max()), snr_db(a, b)


def compare_runtimes(path: str | os.PathLike, x: np.ndarray) -> float:
    """Max abs difference between OpenVINO and ONNX Runtime streaming ``x`` through ``path``."""
    return runtime_agreement(path, x)[0]


def openvino_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("openvino") is not None
