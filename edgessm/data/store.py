"""Decoded audio held in memory: every clip of a training set read once, resampled to 16 kHz and
stored as int16 in one flat buffer (shared copy-on-write by data-loader workers)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .audio import SAMPLE_RATE, load_audio


def loudest_window(x: np.ndarray, length: int) -> np.ndarray:
    """The ``length``-sample window of ``x (T,)`` with the most energy (``x`` itself if shorter)."""
    if x.shape[-1] <= length:
        return x
    energy = np.concatenate([[0.0], np.cumsum(x.astype(np.float64) ** 2)])
    start = int(np.argmax(energy[length:] - energy[:-length]))
    return x[start : start + length]


class AudioStore:
    """``store[i]`` is clip ``i`` as float32 ``(T_i,)`` at 16 kHz.

    Args:
        paths: audio files.
        max_samples: keep at most this many samples per clip (its loudest window); 0 keeps all.
        progress: show a progress bar while decoding.
    """

    def __init__(self, paths: Sequence[str], max_samples: int = 0, progress: bool = False, workers: int = 4) -> None:
        def load(p: str) -> np.ndarray:
            x, _ = load_audio(p, SAMPLE_RATE)
            if max_samples:
                x = loudest_window(x, max_samples)
            return np.round(np.clip(x, -1, 1) * 32767).astype(np.int16)

        with ThreadPoolExecutor(workers) as pool:
            it = pool.map(load, paths)
            if progress and sys.stderr.isatty():
                from tqdm import tqdm

                it = tqdm(it, total=len(paths), desc="decoding audio", unit="clip", leave=False)
            arrays = list(it)
        lengths = np.array([len(a) for a in arrays], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(lengths)])
        self.data = np.concatenate(arrays) if arrays else np.zeros(0, np.int16)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.data[self.offsets[i] : self.offsets[i + 1]].astype(np.float32) / 32767.0

    def length(self, i: int) -> int:
        return int(self.offsets[i + 1] - self.offsets[i])


class ClipDrawer:
    """``drawer(rng) -> (T,)`` float32: a random clip of ``store`` among ``indices`` (all if ``None``).

    A picklable speech source for babble noise (see :func:`edgessm.data.noise.babble`)."""

    def __init__(self, store: AudioStore, indices: Sequence[int] | None = None) -> None:
        self.store = store
        self.indices = np.arange(len(store)) if indices is None else np.asarray(indices, np.int64)
        if self.indices.size == 0:
            raise ValueError("ClipDrawer needs at least one clip")

    def __call__(self, rng: np.random.Generator) -> np.ndarray:
        return self.store[int(self.indices[int(rng.integers(self.indices.size))])]
