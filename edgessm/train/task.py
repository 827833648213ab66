"""What every training task is and what the tasks share: the :class:`Task` contract, the data sources, the
datasets drawn from ``(index, seed)`` pairs and the augmentation glue. The tasks themselves are
:mod:`.kws_task` (keyword spotting), :mod:`.denoise_task` and :mod:`.asr_task` (CTC speech recognition);
:mod:`.tasks` names them.

A task turns a config into a model, datasets whose items are drawn from ``(index, seed)`` pairs
(see :mod:`.sampler`), a collate function, a loss and validation metrics (``score``: higher is
better). Data sources are strings:

* ``shared:sc_train`` / ``shared:fsdd`` / ``shared:sc_digits`` / ``shared:negatives`` /
  ``shared:read_speech`` / ``shared:librispeech_5`` / ``shared:sentences_pseudolabeled`` -- the real
  recordings in ``shared/data``
  (never the SC test set); ``shared:sentences_pseudolabeled@LABELS`` takes its transcripts (and its
  pieces of long files) from an ``edgessm label`` manifest;
* ``speech_commands:DIR`` -- a Google Speech Commands v2 folder;
* ``librispeech:DIR`` -- a LibriSpeech-style transcribed folder;
* ``folder:DIR`` -- any folder tree of audio (clean speech for denoising);
* ``manifest:CSV`` -- a manifest (e.g. a synthetic corpus, ``edgessm synth``);
* ``pack:DIR`` -- a data pack (``edgessm pack``: a recipe's clips, compressed to travel) and its noises;
  ``pack:DIR@SOURCE,...`` only its clips of those sources (a denoise pack's roles: clean speech, words,
  babble talkers, music);
* ``noise:DIR`` / ``shared:noise`` -- noise recordings;
* ``music:train`` (``validation``, ``test``) -- real music of free-licensed soundtracks (:mod:`edgessm.data.music`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from edgessm.data import corpora, pack
from edgessm.data.corpora import CorpusError
from edgessm.data.manifest import Clip, read_manifest
from edgessm.data.store import AudioStore
from edgessm.nets import build_network

from .config import TrainConfig
from .device_mix import DeviceMixer
from .sampler import group_rng, item_rng

_SHARED = {
    "sc_train": corpora.shared_sc_train,
    "fsdd": corpora.shared_fsdd,
    "sc_digits": corpora.shared_sc_digits,
    "negatives": corpora.shared_negative_phrases,
    "read_speech": corpora.shared_read_speech,
    "librispeech_5": corpora.shared_librispeech_5,
    "sentences_pseudolabeled": corpora.shared_pseudolabeled_sentences,
}


def load_sources(specs: list[str], words: str = "sc35") -> list[Clip]:
    """Clips of every source spec (see the module docstring). The SC test set is refused."""
    clips: list[Clip] = []
    for spec in specs:
        kind, _, arg = spec.partition(":")
        if kind == "shared":
            arg, _, labels = arg.partition("@")
            if arg not in _SHARED:
                raise ValueError(
                    f"unknown shared source {arg!r}; choose from {sorted(_SHARED)} "
                    "(the Speech Commands test set is for evaluation only)"
                )
            if labels and arg != "sentences_pseudolabeled":
                raise ValueError(f"{spec!r}: only shared:sentences_pseudolabeled takes an @LABELS manifest")
            if labels and not Path(labels).expanduser().is_file():
                raise CorpusError(
                    f"{spec!r}: no label manifest at {labels}; make it with `edgessm label "
                    f"<shared>/data/real_sentences_pseudolabeled --out {labels}`"
                )
            clips += _SHARED[arg](labels=labels) if labels else _SHARED[arg]()
        elif kind == "speech_commands":
            clips += corpora.speech_commands(arg, words)
        elif kind == "librispeech":
            clips += corpora.librispeech(arg)
        elif kind == "folder":
            clips += [Clip(str(p), speaker=p.parent.name, source="folder") for p in corpora.audio_files(arg)]
        elif kind == "manifest":
            clips += read_manifest(Path(arg).expanduser())
        elif kind == "synth":
            clips += read_manifest(corpora.synth_manifest(arg))
        elif kind == "pack":
            clips += _pack_clips(arg)
        else:
            raise ValueError(f"unknown data source {spec!r}")
    if any(c.source == "sc_test" for c in clips):
        raise ValueError("the Speech Commands test clips are for evaluation only and cannot be trained on")
    return clips


MINED_SOURCE = "mined"  # a data pack's recordings of the recipe's mined negatives (edgessm.train.pack)


def _pack_clips(arg: str) -> list[Clip]:
    """``DIR`` or ``DIR@SOURCE,...``: the pack's clips, or only those of the named sources."""
    folder, _, names = arg.partition("@")
    clips = pack.read_pack(folder)
    if not names:
        return clips
    wanted = set(names.split(","))
    chosen = [c for c in clips if c.source in wanted]
    if not chosen:
        raise CorpusError(f"pack {folder} holds no clips of {sorted(wanted)}")
    return chosen


def noise_paths(specs: list[str]) -> list[str]:
    paths: list[str] = []
    for spec in specs:
        kind, _, arg = spec.partition(":")
        if spec == "shared:noise":
            paths += [str(p) for p in corpora.shared_noises()]
        elif kind == "noise":
            paths += [str(p) for p in corpora.audio_files(arg)]
        elif kind == "pack" and "@" in arg:  # recordings packed as clips (a denoise pack's music)
            paths += [c.path for c in _pack_clips(arg)]
        elif kind == "pack":
            paths += [str(p) for p in corpora.audio_files(Path(arg).expanduser() / "noise")]
        elif kind == "music":
            from edgessm.data.music import music_tracks

            paths += [str(p) for p in music_tracks(arg or "train")]
        elif kind == "ambience":
            from edgessm.data.ambience import ambience_files

            paths += [str(p) for p in ambience_files(arg or "train")]
        else:
            raise ValueError(
                f"unknown noise source {spec!r} (use shared:noise, noise:DIR, pack:DIR, music:SPLIT or ambience:SPLIT)"
            )
    return paths


def data_config(cls, data: dict[str, Any]):
    """The task's ``[data]`` dataclass from the config table (lists become tuples; unknown keys are errors)."""
    known = set(cls.__dataclass_fields__)
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"unknown keys in [data] for this task: {sorted(unknown)}; known: {sorted(known)}")
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


def _crop_or_place(x: np.ndarray, length: int, rng: np.random.Generator | None) -> np.ndarray:
    """Fit ``x`` into ``length`` samples: a random placement (train) or centred (validation)."""
    out = np.zeros(length, np.float32)
    if len(x) >= length:
        start = int(rng.integers(0, len(x) - length + 1)) if rng is not None else (len(x) - length) // 2
        return x[start : start + length].copy()
    start = int(rng.integers(0, length - len(x) + 1)) if rng is not None else (length - len(x)) // 2
    out[start : start + len(x)] = x
    return out


class Task:
    """Interface of a training task."""

    name = ""
    static_batches = True  # every training batch has the same shapes (a recorded CUDA graph can replay the step)

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg

    def build_model(self) -> nn.Module:
        return build_network(self.name, **self.model_config())

    def model_config(self) -> dict[str, Any]:
        return dict(self.cfg.model)

    def describe(self) -> dict[str, Any]:
        return {"network": self.name, "config": self.model_config()}

    def train_set(self) -> torch.utils.data.Dataset:
        raise NotImplementedError

    def has_validation(self) -> bool:
        return False

    def collate(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        return {k: torch.stack([torch.as_tensor(it[k]) for it in items]) for k in items[0]}

    def device_mixer(self, device: torch.device) -> DeviceMixer | None:
        """The batched augmentation tail on ``device`` (``train.device_augment``); call before
        :meth:`train_set`, whose examples then carry the drawn plan instead of the finished audio.
        ``None``: this task augments in the loader only."""
        return None

    def loss(self, net: nn.Module, batch: dict[str, Tensor], progress: float) -> tuple[Tensor, dict[str, float]]:
        raise NotImplementedError

    def evaluate(self, model: nn.Module, device: torch.device, max_batches: int = 0) -> dict[str, float]:
        raise NotImplementedError


class _Items(torch.utils.data.Dataset):
    """A dataset whose items are made by ``make(index, rng)``; indexed by ``(index, seed)`` pairs.

    ``grouped``: ``make(index, rng, group)`` also takes the generator of the item's step, shared by every item
    of a global batch (the trainer's sampler then yields ``(index, seed, step seed)``; a plain index or pair
    passes ``group=None``)."""

    def __init__(self, n: int, make, grouped: bool = False) -> None:
        self.n, self.make, self.grouped = n, make, grouped

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key: tuple[int, ...] | int) -> dict[str, Any]:
        index, seed, group = (*key, None)[:3] if isinstance(key, tuple) else (key, None, None)
        rng = None if seed is None else item_rng(seed)
        if not self.grouped:
            return self.make(index, rng)
        return self.make(index, rng, None if group is None else group_rng(group))


def ramp(progress: float | Tensor) -> float | Tensor:
    """``min(1, progress)`` for a float or a device tensor (a recorded step's progress; no host read)."""
    return progress.clamp(max=1.0) if torch.is_tensor(progress) else min(1.0, progress)


# --- augmentation glue (settings are plain config data) ----------------------------------------


def _resolve(settings: dict[str, Any]) -> dict[str, Any]:
    """``shared:rirs`` in ``[augment.rirs] measured`` names the measured RIRs in shared/data."""
    rirs = settings.get("rirs")
    if isinstance(rirs, dict) and str(rirs.get("measured", "")).startswith("shared:"):
        if rirs["measured"] != "shared:rirs":
            raise ValueError(f"unknown shared RIR folder {rirs['measured']!r} (use shared:rirs)")
        settings = {**settings, "rirs": {**rirs, "measured": str(corpora.shared_data_dir() / "rirs_real")}}
    return settings


class _DrawClip:
    """``rng -> clip``: one clip of a store drawn at random (picklable, for data-loader workers)."""

    def __init__(self, store: AudioStore) -> None:
        self.store = store

    def __call__(self, rng: np.random.Generator) -> np.ndarray:
        return self.store[int(rng.integers(len(self.store)))]


def build_augment(settings: dict[str, Any], noises: AudioStore | None, babble_speech=None, music=None):
    """An ``(audio, rng) -> audio`` callable from the ``[augment]`` section, or ``None``.

    ``babble_speech``: the babble noise source's speech, ``rng -> clip`` (without it, its weight is skipped);
    ``music``: ``(length, rng) -> clip`` for the music noise (default: rendered anew).
    """
    if not settings:
        return None
    from edgessm.data import augment

    return augment.build_clip_augment(_resolve(settings), noises, babble_speech=babble_speech, music=music)


def build_denoise_mixer(settings: dict[str, Any]):
    """``(clean, noise, rng) -> (noisy, target)`` mixing per the paper's App. E.2."""
    from edgessm.data import augment

    return augment.build_denoise_mixer(_resolve(settings))
