"""Frame-level distillation from the teacher's encoder into the streaming recognizer.

The paper's recognizer learnt from a teacher's frame-level outputs (wav2vec2 soft logits over 960 h). What
runs offline here is Whisper tiny.en (:mod:`edgessm.data.teacher`), whose decoder speaks BPE tokens, not our
characters; its *encoder* output, though, is a frame-level description of the speech learnt from 680k hours,
20 ms per frame -- the same rate as our CTC frames. So besides CTC on the transcript, the recognizer learns to
predict the teacher's encoder frames from its own encoder output through a linear head that is used only in
training (and left out of the shipped model):

    L = L_CTC + w · mean over frames f with a teacher frame of  [ |ŷ_f − z_{f−d}|₁ / D − log σ(cos(ŷ_f, z_{f−d})) ]

(the L1-plus-cosine objective of layer-wise feature distillation, DistilHuBERT), with ``z`` the teacher frames
standardised per dimension and ``d`` a lag in frames: the student is causal, the teacher sees the whole
utterance, so frame ``f`` predicts the teacher's frame ``d`` frames back. Targets come from the *clean*
utterance while the student hears it with noise and reverberation (so the head also learns to denoise).

The teacher's frames of every training utterance are computed once (16 h of audio in ~6 min on two cores,
batched) and kept on disk under ``cache_dir()/teacher``, keyed by the utterances and the teacher. A recipe
whose utterances differ from a cached set's (a corpus added) copies the frames that set already holds and
runs the teacher on the new utterances only.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

HOP = 320  # samples per teacher (and CTC) frame at 16 kHz: Whisper's 10 ms mel hop, then its stride-2 conv
PAD_FRAMES = 100  # mel frames (1 s) of padding after each utterance: near the 30 s window's features, 10x faster
VERSION = "whisper-encoder-v1"
TEACHER_DIM = 384  # Whisper tiny.en's encoder width


def default_cache_dir() -> Path:
    """``cache_dir()/teacher`` (``$EDGESSM_CACHE`` or ``~/.cache/edgessm``)."""
    from edgessm.data.corpora import cache_dir

    return cache_dir() / "teacher"


@dataclass(frozen=True)
class Placement:
    """Where (part of) a stored utterance sits in a composed example, in samples: ``n`` samples of utterance
    ``index`` from its sample ``clip_start`` on, at sample ``out_start`` of the example. ``rate``: stored
    samples per example sample (the speed factor when the example was played faster, 1 otherwise), so
    example sample ``out_start + k`` holds stored sample ``clip_start + k · rate``."""

    index: int
    out_start: int
    clip_start: int
    n: int
    rate: float = 1.0

    def played_faster(self, factor: float) -> Placement:
        """Where this part sits once the whole example is played ``factor`` times faster
        (:func:`edgessm.data.augment.played_faster`: example sample ``s`` moves to ``s / factor``)."""
        start = round(self.out_start / factor)
        return replace(self, out_start=start, n=round((self.out_start + self.n) / factor) - start,
                       rate=self.rate * factor)  # fmt: skip


class TeacherFeatures:
    """The teacher's encoder frames for utterances of an audio store, memory-mapped from ``folder``.

    Files: ``frames.npy`` ``(total, D)`` float16, ``index.npy`` ``(n_store, 2)`` int64 (first frame, frame
    count; count 0 = not computed), ``stats.npz`` (per-dimension ``mean`` and ``std``), ``info.json``,
    ``utterances.json`` (``[path, samples, first frame, frame count]`` per utterance: what a later set reuses).
    """

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)
        self.frames = np.load(self.folder / "frames.npy", mmap_mode="r")
        self.index = np.load(self.folder / "index.npy")
        with np.load(self.folder / "stats.npz") as z:
            self.mean = z["mean"].astype(np.float32)
            self.std = z["std"].astype(np.float32)
        self.dim = int(self.frames.shape[1])

    def __contains__(self, i: int) -> bool:
        return 0 <= i < len(self.index) and self.index[i, 1] > 0

    def get(self, i: int) -> np.ndarray:
        """Standardised teacher frames of store utterance ``i``: ``(frames, D)`` float32."""
        start, count = self.index[i]
        return (np.asarray(self.frames[start : start + count], np.float32) - self.mean) / self.std

    @staticmethod
    def key(paths: Sequence[str], lengths: Sequence[int], teacher_id: str) -> str:
        h = hashlib.sha256(f"{VERSION}|{teacher_id}".encode())
        for p, n in zip(paths, lengths, strict=True):
            h.update(f"{p}|{n}\n".encode())
        return h.hexdigest()[:16]

    @classmethod
    def for_store(cls, store, indices: Sequence[int], paths: Sequence[str], encode: Encoder | None = None,
                  teacher_id: str = "", cache_dir: str | os.PathLike | None = None, batch: int = 16,
                  progress: bool = True) -> TeacherFeatures:  # fmt: skip
        """The teacher's frames of ``store[i]`` for every ``i`` in ``indices`` (``paths[i]`` names them for the
        cache key): loaded from the cache, or computed by ``encode`` (default: Whisper's encoder,
        :func:`whisper_encoder`) with a progress bar, and cached."""
        if encode is None:  # Whisper, loaded only if the frames are not cached yet
            encode, teacher_id = whisper_encoder()
        indices = sorted(set(int(i) for i in indices))
        lengths = [store.length(i) for i in indices]
        key = cls.key([paths[i] for i in indices], lengths, teacher_id)
        folder = Path(cache_dir or default_cache_dir()) / key
        if not (folder / "info.json").is_file():
            reuse = cached_utterances(folder.parent, teacher_id)
            compute_features(store, indices, len(paths), encode, teacher_id, folder, batch=batch, progress=progress,
                             paths=paths, reuse=reuse)  # fmt: skip
        elif not (folder / UTTERANCES).is_file():  # written before the listing: list it for later sets
            index = np.load(folder / "index.npy")
            _write_listing(folder, [(paths[i], store.length(i), *map(int, index[i])) for i in indices])
        return cls(folder)


def frame_count(n_samples: int) -> int:
    """Teacher frames of an utterance of ``n_samples``: one per started 20 ms."""
    return max(1, math.ceil(n_samples / HOP))


Encoder = Callable[[Sequence[np.ndarray]], list[np.ndarray]]  # clips -> [(frame_count(len), D)]


def whisper_encoder(model_dir: str | None = None) -> tuple[Encoder, str]:
    """``(encode, teacher id)`` for :meth:`TeacherFeatures.for_store`: Whisper tiny.en's encoder
    (:func:`teacher_frames`), loaded at its first call; raises :class:`edgessm.data.teacher.TeacherError`
    when it is not installed."""
    from edgessm.data.teacher import WhisperTeacher, default_model_dir

    path = Path(model_dir).expanduser() if model_dir is not None else default_model_dir()

    @functools.cache
    def teacher() -> WhisperTeacher:
        return WhisperTeacher(path, threads=min(4, os.cpu_count() or 1))

    return (lambda clips: teacher_frames(teacher(), clips)), f"{path.name}-tiny.en"


def teacher_frames(teacher, clips: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Whisper's encoder output for each clip (16 kHz float32), batched: ``[(frame_count(len), D)]``.

    Each clip's log-mel frames are followed by at least :data:`PAD_FRAMES` of padding (not the full 30 s
    window: the frames agree with it to a cosine of 0.93--0.99 on real sentences, at a tenth of the cost)."""
    import ctranslate2

    mels = [teacher.model.feature_extractor(np.ascontiguousarray(x, dtype=np.float32)) for x in clips]
    width = max(m.shape[-1] for m in mels) + PAD_FRAMES
    width = min(3000, width + width % 2)
    batch = np.zeros((len(mels), mels[0].shape[0], width), np.float32)
    for k, m in enumerate(mels):
        batch[k, :, : min(width, m.shape[-1])] = m[:, :width]
    out = np.asarray(teacher.model.model.encode(ctranslate2.StorageView.from_array(batch), to_cpu=True))
    result = []
    for x in clips:
        n = frame_count(len(x))
        f = out[len(result), :n]
        if len(f) < n:  # longer than the window: repeat the last frame (utterances here are ≤ 8 s)
            f = np.concatenate([f, np.repeat(f[-1:], n - len(f), 0)])
        result.append(f)
    return result


UTTERANCES = "utterances.json"


def _write_listing(folder: Path, rows: Sequence[tuple[str, int, int, int]]) -> None:
    """``folder/utterances.json``: ``[path, samples, first frame, frame count]`` per cached utterance."""
    from edgessm.atomic import write_text

    write_text(folder / UTTERANCES, json.dumps([list(r) for r in rows]) + "\n")


def cached_utterances(root: Path, teacher_id: str) -> dict[tuple[str, int], tuple[Path, int, int]]:
    """Every utterance whose frames a finished cache under ``root`` holds for this teacher and :data:`VERSION`:
    ``(path, samples) -> (folder, first frame, frame count)``."""
    found: dict[tuple[str, int], tuple[Path, int, int]] = {}
    for listing in sorted(Path(root).glob(f"*/{UTTERANCES}")) if Path(root).is_dir() else []:
        folder = listing.parent
        try:
            info = json.loads((folder / "info.json").read_text())
            rows = json.loads(listing.read_text())
        except (OSError, ValueError):
            continue  # unfinished or damaged: computed again
        if info.get("version") != VERSION or info.get("teacher") != teacher_id:
            continue
        for path, samples, start, count in rows:
            found.setdefault((str(path), int(samples)), (folder, int(start), int(count)))
    return found


def compute_features(store, indices: Sequence[int], n_store: int, encode: Encoder, teacher_id: str, folder: Path,
                     batch: int = 16, progress: bool = True, paths: Sequence[str] | None = None,
                     reuse: dict[tuple[str, int], tuple[Path, int, int]] | None = None) -> None:  # fmt: skip
    """Write :class:`TeacherFeatures` files for ``store[i]``, ``i`` in ``indices``, to ``folder`` (atomically:
    a half-written cache is never read). ``paths[i]`` names utterance ``i`` in the listing; ``reuse``
    (:func:`cached_utterances`): frames already computed, copied instead of running the teacher again."""
    from tqdm import tqdm

    counts = {i: frame_count(store.length(i)) for i in indices}
    index = np.zeros((n_store, 2), np.int64)
    start = 0
    for i in indices:
        index[i] = (start, counts[i])
        start += counts[i]
    tmp = folder.with_name(folder.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    frames = None
    names = None if paths is None else [str(p) for p in paths]
    old = {}  # utterance -> (cache folder, first frame, frame count) of frames computed before
    if names is not None and reuse:
        hits = {i: reuse.get((names[i], store.length(i))) for i in indices}
        old = {i: hit for i, hit in hits.items() if hit is not None and hit[2] == counts[i]}
    order = sorted((i for i in indices if i not in old), key=store.length)  # similar lengths per batch: little padding
    hours = sum(store.length(i) for i in indices) / 16000 / 3600
    total = sum(store.length(i) for i in order) / 16000 / 3600
    shown = progress and sys.stderr.isatty()  # as AudioStore: no bars in a log file
    copied = f", {len(old)} utterances copied from earlier sets" if old else ""
    bar = tqdm(total=len(order), desc=f"teacher frames ({total:.1f} h{copied})", unit="utt", disable=not shown)
    s1 = s2 = np.zeros(0)
    n_stat = 0
    sources: dict[Path, np.ndarray] = {}

    def put(i: int, f: np.ndarray) -> None:
        nonlocal frames, s1, s2, n_stat
        if frames is None:
            dim = f.shape[1]
            frames = np.lib.format.open_memmap(tmp / "frames.npy", "w+", np.float16, (start, dim))
            s1, s2 = np.zeros(dim), np.zeros(dim)
        frames[index[i, 0] : index[i, 0] + counts[i]] = f.astype(np.float16)
        s1 += f.sum(0, dtype=np.float64)
        s2 += (f.astype(np.float64) ** 2).sum(0)
        n_stat += len(f)

    for i, (src, first, count) in sorted(old.items()):
        if src not in sources:
            sources[src] = np.load(src / "frames.npy", mmap_mode="r")
        put(i, np.asarray(sources[src][first : first + count], np.float32))
    for b in range(0, len(order), batch):
        chunk = order[b : b + batch]
        outs = encode([store[i] for i in chunk])
        if any(len(f) != counts[i] for i, f in zip(chunk, outs, strict=True)):
            raise ValueError("the teacher returned a frame count other than frame_count(samples)")
        for i, f in zip(chunk, outs, strict=True):
            put(i, f)
        bar.update(len(chunk))
    bar.close()
    sources.clear()
    if frames is None:
        raise ValueError("no utterances to compute teacher frames for")
    frames.flush()
    del frames
    mean = s1 / n_stat
    std = np.sqrt(np.maximum(s2 / n_stat - mean**2, 1e-8))
    np.save(tmp / "index.npy", index)
    np.savez(tmp / "stats.npz", mean=mean.astype(np.float32), std=std.astype(np.float32))
    info = {"version": VERSION, "teacher": teacher_id, "utterances": len(indices), "frames": start,
            "hours": round(hours, 3)}  # fmt: skip
    (tmp / "info.json").write_text(json.dumps(info, indent=1) + "\n")
    if names is not None:
        _write_listing(tmp, [(names[i], store.length(i), *map(int, index[i])) for i in indices])
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)


def teacher_targets(
    placements: Sequence[Placement], n_frames: int, features: TeacherFeatures
) -> tuple[np.ndarray, np.ndarray]:
    """Per-frame teacher targets of a composed example: ``(targets (n_frames, D) float32, mask (n_frames,)
    bool)``. Example frame ``f`` (centre sample ``f·HOP + HOP/2``) takes the teacher frame of the utterance
    placed there, at the same time within it (``Placement.rate`` apart); frames in pauses, padding or
    utterances without teacher frames stay masked."""
    targets = np.zeros((n_frames, features.dim), np.float32)
    mask = np.zeros(n_frames, bool)
    centres = np.arange(n_frames) * HOP + HOP // 2
    for p in placements:
        if p.index not in features:
            continue
        z = features.get(p.index)
        on = np.flatnonzero((centres >= p.out_start) & (centres < p.out_start + p.n))
        j = np.floor(((centres[on] - p.out_start) * p.rate + p.clip_start) / HOP).astype(np.int64)
        ok = j < len(z)
        targets[on[ok]] = z[j[ok]]
        mask[on[ok]] = True
    return targets, mask


def distill_loss(pred: Tensor, target: Tensor, mask: Tensor, lag: int) -> Tensor:
    """The distillation term (module docstring). ``pred (B, D, F)`` the student's head, ``target (B, F, D)``
    standardised teacher frames, ``mask (B, F)``; student frame ``f`` is scored against teacher frame
    ``f - lag``. Mean over the scored frames (0 when none)."""
    n = pred.shape[-1]
    if lag >= n:
        return pred.sum() * 0.0
    p = pred[..., lag:].transpose(1, 2).float()  # (B, F - lag, D)
    t = target[:, : n - lag].to(p.dtype)
    m = mask[:, : n - lag].to(p.dtype)
    per_frame = (p - t).abs().mean(-1) - F.logsigmoid(F.cosine_similarity(p, t, dim=-1))
    return (per_frame * m).sum() / m.sum().clamp(min=1.0)


def stack_targets(items: Sequence[dict], n_frames: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Collate per-example ``teacher`` / ``teacher_mask`` arrays into ``(B, n_frames, D)`` and ``(B, n_frames)``."""
    dim = items[0]["teacher"].shape[1]
    target = torch.zeros(len(items), n_frames, dim)
    mask = torch.zeros(len(items), n_frames, dtype=torch.bool)
    for k, it in enumerate(items):
        f = min(n_frames, len(it["teacher"]))
        target[k, :f] = torch.as_tensor(it["teacher"][:f])
        mask[k, :f] = torch.as_tensor(it["teacher_mask"][:f])
    return target, mask
