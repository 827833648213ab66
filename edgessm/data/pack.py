"""Data packs: a training recipe's audio in a few compressed files, so that the run can travel.

A machine rented for training (a GPU box) has neither ``../shared`` nor the synthesis caches, and what
travels to it is often size-limited. A pack holds the clips a recipe trains on, each trimmed to its
speech (keyword clips) and all of them Ogg Opus-encoded back to back in a few shards, with the clips'
metadata; decoding a pack takes seconds on many cores.

Layout of a pack folder::

    clips.csv       a manifest (:mod:`edgessm.data.manifest`); each path is ``shardNN.ogg#START-END``
                    (samples at 16 kHz) and every clip carries its train/validation split
    shardNN.ogg     Ogg Opus, 16 kHz mono: clips back to back
    noise/*.ogg     the recipe's noise recordings
    rirs/*.flac     the recipe's room impulse responses (simulated and measured)
    pack.json       what was packed: clips and hours per source, bitrate, size, the recipe

Paths of the form ``FILE#START-END`` are *pack references*: :func:`read_ref` returns those samples of
the decoded shard (each shard is decoded once per process and kept).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import soundfile as sf

from edgessm.atomic import atomic_path, write_text

from .audio import SAMPLE_RATE, load_audio
from .manifest import Clip, read_manifest, write_manifest

MANIFEST = "clips.csv"
_REF = re.compile(r"^(?P<file>.+\.ogg)#(?P<start>\d+)-(?P<end>\d+)$")
_decoded: dict[str, np.ndarray] = {}  # shard path -> int16 samples (per process)

# libsndfile's Opus compression level (0..1) -> bitrate, measured at 16 kHz on Speech Commands clips:
# 0.9 ~28 kb/s, 0.93 ~21, 0.96 ~15, 0.98 ~10. At 0.96 the 40-band log-mel moves by 1.8 dB on average
# (p90 4 dB) in speech frames: well inside what noise augmentation does to a training example.
DEFAULT_LEVEL = 0.96


def noise_stem(path: str | os.PathLike) -> str:
    """A noise recording's own name without extension, also for the copy a pack holds in its ``noise/``
    folder (``NNN_name.ogg``, :func:`write_pack`): held-out recordings are found by name in either place."""
    p = Path(path)
    if p.parent.name == "noise" and (p.parent.parent / MANIFEST).is_file():
        head, sep, rest = p.stem.partition("_")
        return rest if sep and head.isdigit() else p.stem
    return p.stem


def is_ref(path: str | os.PathLike) -> bool:
    """Whether ``path`` names samples of a pack shard (``FILE.ogg#START-END``)."""
    return _REF.match(str(path)) is not None


def file_of(path: str | os.PathLike) -> str:
    """The file behind ``path``: a pack reference's shard, else ``path`` itself."""
    m = _REF.match(str(path))
    return m["file"] if m else str(path)


def _shard(path: str) -> np.ndarray:
    if path not in _decoded:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"pack shard {path} not found (was the pack copied whole?)")
        x, rate = sf.read(path, dtype="int16", always_2d=False)
        if rate != SAMPLE_RATE:
            raise ValueError(f"{path}: a pack shard must be {SAMPLE_RATE} Hz, not {rate}")
        _decoded[path] = np.ascontiguousarray(x)
    return _decoded[path]


def prefetch(paths: Iterable[str], workers: int | None = None) -> None:
    """Decode the shards that ``paths`` refer to, in parallel (libsndfile releases the GIL)."""
    shards = sorted({m["file"] for p in paths if (m := _REF.match(str(p)))} - set(_decoded))
    if shards:
        with ThreadPoolExecutor(workers or min(len(shards), os.cpu_count() or 1)) as pool:
            list(pool.map(_shard, shards))


def read_ref(path: str | os.PathLike) -> np.ndarray:
    """The float32 samples ``(T,)`` at 16 kHz that a pack reference names."""
    m = _REF.match(str(path))
    if m is None:
        raise ValueError(f"{path} is not a pack reference (FILE.ogg#START-END)")
    x = _shard(m["file"])
    start, end = int(m["start"]), int(m["end"])
    if end > len(x):
        raise ValueError(f"{path}: past the end of its shard ({len(x)} samples); the pack is damaged")
    return x[start:end].astype(np.float32) / 32767.0


def read_pack(folder: str | os.PathLike) -> list[Clip]:
    """The clips of the pack in ``folder`` (paths are pack references)."""
    manifest = Path(folder).expanduser() / MANIFEST
    if not manifest.is_file():
        raise FileNotFoundError(f"{folder} is not a data pack (no {MANIFEST}; make one with `edgessm pack`)")
    return read_manifest(manifest)


def _encode(path: Path, audio: np.ndarray, level: float) -> None:
    with atomic_path(path) as tmp:
        sf.write(str(tmp), audio, SAMPLE_RATE, format="OGG", subtype="OPUS", compression_level=level)


def write_pack(
    out: str | os.PathLike,
    clips: Sequence[Clip],
    prepare: Callable[[Clip, np.ndarray], np.ndarray] | None = None,
    noises: Sequence[str] = (),
    rirs: Sequence[np.ndarray] = (),
    level: float = DEFAULT_LEVEL,
    shards: int = 16,
    info: dict | None = None,
    progress: bool = True,
    noise_max_s: float = 0.0,
) -> dict:
    """Write a pack of ``clips`` (and ``noises``, ``rirs``) to the folder ``out``.

    Args:
        clips: what to pack; their ``split`` should already be set (the pack keeps it).
        prepare: ``(clip, audio (T,)) -> audio``, e.g. a trim to the speech; identity if ``None``.
        noises: noise recordings (packed whole, one Opus file each).
        rirs: room impulse responses ``(K,)`` (16-bit FLAC; unit energy, so their peak is below 1).
        level: libsndfile's Opus compression level (see :data:`DEFAULT_LEVEL`).
        shards: number of shard files (decoded in parallel on the training machine).
        info: more facts for ``pack.json`` (e.g. the recipe).
        noise_max_s: keep at most this many seconds of each noise recording (its middle; 0: whole).

    Returns:
        the summary written to ``pack.json``.
    """
    out = Path(out).expanduser()
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty; choose a new folder for the pack")
    out.mkdir(parents=True, exist_ok=True)
    n_shards = max(1, min(shards, len(clips)))

    def load(clip: Clip) -> np.ndarray:
        x, _ = load_audio(clip.path, SAMPLE_RATE)
        return prepare(clip, x) if prepare is not None else x

    packed: list[Clip | None] = [None] * len(clips)
    hours: dict[str, float] = defaultdict(float)
    bar = None
    if progress and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=len(clips), desc="packing", unit="clip")

    def write_shard(s: int) -> None:  # libsndfile releases the GIL: shards encode in parallel
        name, pos, audio = f"shard{s:02d}.ogg", 0, []
        for i in range(s, len(clips), n_shards):
            x = load(clips[i])
            packed[i] = replace(clips[i], path=str(out / f"{name}#{pos}-{pos + len(x)}"))
            hours[clips[i].source] += len(x) / SAMPLE_RATE / 3600
            audio.append(x)
            pos += len(x)
            if bar is not None:
                bar.update(1)
        _encode(out / name, np.concatenate(audio).astype(np.float32), level)

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(write_shard, range(n_shards)))
    if bar is not None:
        bar.close()
    write_manifest(out / MANIFEST, packed)
    if noises:
        (out / "noise").mkdir()
        for i, p in enumerate(noises):
            x, _ = load_audio(p, SAMPLE_RATE)
            keep = int(noise_max_s * SAMPLE_RATE)
            if keep and len(x) > keep:
                x = x[(len(x) - keep) // 2 : (len(x) + keep) // 2]
            _encode(out / "noise" / f"{i:03d}_{Path(p).stem}.ogg", x, level)
    if len(rirs):
        (out / "rirs").mkdir()
        for i, h in enumerate(rirs):
            sf.write(str(out / "rirs" / f"{i:04d}.flac"), np.clip(h, -1, 1), SAMPLE_RATE, subtype="PCM_16")
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    summary = {
        "clips": len(packed),
        "per_source": dict(Counter(c.source for c in packed)),
        "hours": {k: round(v, 3) for k, v in hours.items()},
        "noises": len(noises),
        "rirs": len(rirs),
        "opus_level": level,
        "megabytes": round(size / 1e6, 2),
        **(info or {}),
    }
    write_text(out / "pack.json", json.dumps(summary, indent=1) + "\n")
    return summary
