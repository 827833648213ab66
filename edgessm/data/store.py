"""Decoded audio held in memory: every clip of a training set read once, resampled to 16 kHz and
stored as int16 in one flat buffer (shared copy-on-write by data-loader workers).

With ``cache=True`` the decoded buffer is also saved under ``<cache_dir>/stores/KEY/`` (two ``.npy`` files)
keyed by the files' paths, sizes and the digests of their bytes (and ``max_samples``), so a resumed or repeated
run memory-maps it back at once instead of decoding tens of thousands of files again (58k Speech Commands clips:
~150 s on 2 cores); the pages are shared by every data-loader process and read only where an example touches
them. A changed file changes the key; a corpus copied or mounted again (new modification times, the same bytes)
keeps it (:class:`~edgessm.data.digests.FileDigests`: a file is hashed again only when its size or modification
time changed). Every use renews a store's time; making a new store removes those unused for ``KEEP_DAYS``."""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from . import pack
from .audio import SAMPLE_RATE, load_audio
from .digests import index_at

# cache="auto": fewer files that are also smaller than this are decoded again (milliseconds)
CACHE_MIN_FILES = 256
CACHE_MIN_BYTES = 4 << 20
#: a cached store nobody used for this many days is removed when a new one is made (it is only decoded again)
KEEP_DAYS = 14


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
        cache: keep the decoded buffer on disk for the next run (see the module); ``"auto"``: for sets of at
            least ``CACHE_MIN_FILES`` files or ``CACHE_MIN_BYTES`` (a few short files decode at once).
    """

    def __init__(self, paths: Sequence[str], max_samples: int = 0, progress: bool = False, workers: int = 4,
                 cache: bool | str = False) -> None:  # fmt: skip
        self._rms: dict[int, np.float32] = {}
        if cache == "auto":
            cache = len(paths) >= CACHE_MIN_FILES or _total_bytes(paths) >= CACHE_MIN_BYTES
        cached = _cache_path(paths, max_samples) if cache else None
        if cached is not None and (cached / "data.npy").is_file():
            self.offsets = np.load(cached / "offsets.npy")
            self.data = np.load(cached / "data.npy", mmap_mode="r")
            _mark_used(cached)
            return

        pack.prefetch(paths)  # clips of a data pack: its shards decoded once, in parallel

        def load(p: str) -> np.ndarray:
            x = pack.read_ref(p) if pack.is_ref(p) else load_audio(p, SAMPLE_RATE)[0]
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
        if cached is not None:
            _save_cache(cached, self.offsets, self.data)
            _remove_unused(cached.parent, keep=cached)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.data[self.offsets[i] : self.offsets[i + 1]].astype(np.float32) / 32767.0

    def rms(self, i: int) -> np.float32:
        """The root mean square of all of clip ``i``, ``np.sqrt(np.mean(store[i] ** 2))`` in float32, computed
        once: a long clip that is only ever cropped is not converted whole again for its level."""
        if i not in self._rms:
            x = self[i]
            self._rms[i] = np.sqrt(np.mean(x**2))
        return self._rms[i]

    def length(self, i: int) -> int:
        return int(self.offsets[i + 1] - self.offsets[i])

    def slice(self, i: int, start: int, stop: int) -> np.ndarray:
        """Samples ``start:stop`` of clip ``i`` as float32 (only those are converted: cheap on long clips)."""
        a = int(self.offsets[i])
        stop = min(max(0, stop), self.length(i))
        return self.data[a + max(0, start) : a + stop].astype(np.float32) / 32767.0

    def random_crop(self, i: int, length: int, rng: np.random.Generator) -> np.ndarray:
        """A random ``(length,)`` window of clip ``i``, the clip looped when it is shorter."""
        n = self.length(i)
        if n >= length:
            start = int(rng.integers(0, n - length + 1))
            return self.slice(i, start, start + length)
        x = np.tile(self[i], -(-length // max(1, n)) + 1)
        start = int(rng.integers(0, len(x) - length + 1))
        return x[start : start + length]


def _cache_path(paths: Sequence[str], max_samples: int) -> Path:
    """Where the decoded buffer of ``paths`` is cached: a digest of every file's path, size and content.

    A store made before content keys (the files' modification times in its key) is taken over when the files
    still have those times, so it is not decoded again."""
    from .corpora import cache_dir

    stores = cache_dir() / "stores"
    digests = index_at(stores / "digests.json")
    h = hashlib.sha256(f"{SAMPLE_RATE}:{max_samples}:content".encode())
    legacy = hashlib.sha256(f"{SAMPLE_RATE}:{max_samples}".encode())
    shards: dict[str, str] = {}  # a pack's shard holds many clips: hashed once
    for p in paths:
        f = pack.file_of(p)  # a pack reference: its shard file
        st = os.stat(f)
        if f not in shards:
            shards[f] = digests.of(f, st)
        h.update(f"\n{os.path.abspath(p)}:{st.st_size}:{shards[f]}".encode())
        legacy.update(f"\n{os.path.abspath(p)}:{st.st_size}:{st.st_mtime_ns}".encode())
    digests.save()
    folder, old = stores / h.hexdigest()[:24], stores / legacy.hexdigest()[:24]
    if not (folder / "data.npy").is_file() and (old / "data.npy").is_file():
        try:
            os.replace(old, folder)
        except OSError:  # another process took it over first, or a read-only cache: use it where it is
            return folder if (folder / "data.npy").is_file() else old
    return folder


def _mark_used(folder: Path) -> None:
    """Renew a store's time (its folder's modification time), which :func:`_remove_unused` reads."""
    try:
        os.utime(folder)
    except OSError:
        pass  # a read-only cache is never pruned either


def _remove_unused(stores: Path, keep: Path, days: float = KEEP_DAYS) -> list[Path]:
    """Remove the stores under ``stores`` not used for ``days`` (never ``keep``): the removed folders.

    A process that still maps one keeps reading it (the file is unlinked, not its pages)."""
    import shutil
    import time

    removed = []
    limit = time.time() - days * 86400
    for folder in stores.iterdir():
        if folder == keep or not folder.is_dir() or not (folder / "data.npy").is_file():
            continue
        try:
            if folder.stat().st_mtime < limit:
                shutil.rmtree(folder)
                removed.append(folder)
        except OSError:
            continue
    return removed


def _total_bytes(paths: Sequence[str]) -> int:
    """The size on disk of ``paths`` (a pack reference counts its whole shard once)."""
    files = {pack.file_of(p) for p in paths}
    return sum(os.stat(f).st_size for f in files)


def _save_cache(folder, offsets: np.ndarray, data: np.ndarray) -> None:
    """Write a store's two arrays into ``folder`` atomically: both are written into a temporary folder that
    is renamed into place, so a reader sees a whole cache or none (an interrupted write leaves no half)."""
    import shutil
    import tempfile

    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        np.save(tmp / "offsets.npy", offsets)
        np.save(tmp / "data.npy", data)
        try:
            os.replace(tmp, folder)
        except OSError:  # another process cached the same clips first: theirs is as good
            if not (folder / "data.npy").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
