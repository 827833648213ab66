"""The three task types the trainer knows: clip classification (keyword spotting),
waveform-to-waveform (denoising) and CTC (speech recognition).

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

import fnmatch
import functools
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from edgessm.data import corpora, pack
from edgessm.data.audio import SAMPLE_RATE, dynamic_range_db, speech_bounds, speech_span
from edgessm.data.corpora import CorpusError
from edgessm.data.labels import SILENCE, UNKNOWN, task_labels
from edgessm.data.manifest import Clip, assign_split, read_manifest
from edgessm.data.noise import MusicBank, music_like
from edgessm.data.store import AudioStore
from edgessm.data.text import CharTokenizer, edit_distance
from edgessm.eval.backgrounds import keyword_free, sounds_like_keywords, stream_background_speaker
from edgessm.nets import build_network

from .config import TrainConfig
from .device_mix import DeviceMixer, mix_fields
from .distill import HOP, TEACHER_DIM, Placement, TeacherFeatures, distill_loss, stack_targets, teacher_targets
from .losses import erb_spectral_loss, multires_spectral_loss, si_sdr
from .sampler import item_rng

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
    """A dataset whose items are made by ``make(index, rng)``; indexed by ``(index, seed)`` pairs."""

    def __init__(self, n: int, make) -> None:
        self.n, self.make = n, make

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key: tuple[int, int] | int) -> dict[str, Any]:
        index, seed = key if isinstance(key, tuple) else (key, None)
        return self.make(index, None if seed is None else item_rng(seed))


# --- keyword spotting -------------------------------------------------------------------------


@dataclass
class KwsData:
    words: str = "sc35"
    sources: tuple[str, ...] = ("shared:sc_train",)
    noise: tuple[str, ...] = ()
    background: bool = True  # add _unknown_ and _silence_ so the live listener can say "nothing"
    clip_samples: int = 16000
    silence_fraction: float = 0.08
    validation_pct: float = 10.0
    # Streaming context: live, the recurrent state has heard minutes of audio before a keyword, not a
    # zero state. Training examples are ``context_samples + clip_samples`` long; with probability
    # ``context_prob`` the context is background (keyword-free speech, music, noise), else silence.
    context_prob: float = 0.0
    context_samples: int = 0
    # hard negatives: this many ``_unknown_`` examples per keyword example, cut from keyword-free
    # sentences of the training voices (the speech a live listener hears most)
    sentence_negatives: float = 0.0
    # every recorded (non-synthetic) training clip is drawn this many times per pass: the real speakers
    # are what users sound like, and a uniform draw gives the synthetic voices most of the examples
    real_repeats: int = 1
    # the keyword-free sentences are also the augmentation's babble source (`[augment.noise] babble`,
    # `babble_talkers`): competing talkers under a keyword. Without a source the babble weight is
    # skipped, and keyword examples never hear other speech (kws35 v2, 150 real test commands: 74%
    # right clean; 21% / 61% / 64% at 10 dB over real speech / music / noise)
    sentence_babble: bool = False
    # each recorded keyword-free sentence (e.g. `shared:read_speech`) is this many entries of the sentence
    # pool that context, hard negatives and babble draw from: real talkers saying other things, so a real
    # voice is not by itself evidence of the few words that have recorded examples
    real_sentence_repeats: int = 1
    # Streaming supervision (kws35 v4): the clip loss trains only the last frame, but a live listener
    # decides at every frame. With ``frame_loss`` > 0 the loss adds, with this weight, (a) "no keyword"
    # at every frame whose head window holds only context (and at every frame of a negative example): the
    # probability mass of the background classes; (b) the keyword at every frame from
    # ``frame_tolerance_s`` after the word's end (its last frame within 35 dB of its loudest) to the clip's
    # end, where the window holds the whole word. Frames while the word is being said are not supervised.
    frame_loss: float = 0.0
    frame_tolerance_s: float = 0.2
    # A session is keyword after keyword: with this probability the context holds one more keyword
    # (any of the task's words, a training clip), so the network learns to say the next word with a
    # previous one still in its state (kws35 v4 never had that). The frames from that keyword's start
    # until ``head window`` after its end are left unsupervised; the frame loss's "no keyword" holds
    # before and after them.
    context_keyword_prob: float = 0.0
    # music (contexts and the augmentation's music noise) from this many pieces of procedural music
    # rendered once (8 s each, noise.MusicBank) instead of anew for every example: half of an example's
    # CPU time, which bounds GPU runs; 0 renders anew (kws35 v6 and before)
    music_pieces: int = 0
    # Mined hard negatives (`edgessm mine`, :mod:`edgessm.train.mine`): a CSV of where a previous model
    # fired in this recipe's keyword-free training speech. ``mined_fraction`` such examples per keyword
    # example, each the recording's last ``context_samples + clip_samples`` up to 0.05-0.3 s after a
    # detection (silence before its start), "no keyword" at every frame; the clip part augmented as a
    # sentence negative is. Random crops (``sentence_negatives``) rarely hold the keyword-like moments of
    # running speech where a live listener false-accepts.
    mined_negatives: str = ""
    mined_fraction: float = 0.0


class KwsTask(Task):
    """Clip classification over the task's words (+ ``_unknown_``, ``_silence_``)."""

    name = "kws"

    def __init__(self, cfg: TrainConfig) -> None:
        super().__init__(cfg)
        self.data = data_config(KwsData, cfg.data)
        labels = list(task_labels(self.data.words))
        if self.data.background:
            labels += [c for c in (UNKNOWN, SILENCE) if c not in labels]
        self.labels = labels
        self._prepared = False
        self._deferred: int | None = None  # with device mixing: the batch's microphone sections (device_mixer)

    def model_config(self) -> dict[str, Any]:
        return {**self.cfg.model, "num_classes": len(self.labels)}

    def device_mixer(self, device: torch.device) -> DeviceMixer | None:
        self._prepare()
        if self.augment is None:
            return None
        mixer = DeviceMixer(self.augment, self.data.clip_samples, device)
        self._deferred = mixer.sections  # the task keeps no device tensors: loader processes fork from it
        return mixer

    def _augmented(self, x: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, dict[str, Any]]:
        """The augmented clip, or with device mixing the planned one and its ``mix_*`` fields."""
        if self._deferred is None:
            return self.augment(x, rng), {}
        mix = self.augment.plan(x, rng)
        return mix.speech, mix_fields(mix, self.data.clip_samples, self._deferred)

    def _unaugmented(self, split: str) -> dict[str, Any]:
        deferred = self._deferred is not None and split == "train"
        return mix_fields(None, self.data.clip_samples, self._deferred) if deferred else {}

    def describe(self) -> dict[str, Any]:
        desc = {**super().describe(), "labels": self.labels, "clip_samples": self.data.clip_samples}
        # trained with context, a network never starts a clip from the zero state: exported graphs
        # start every stream after this much silence (graph metadata ``warmup_samples``), as validation does
        return {**desc, "warmup_samples": self.data.context_samples} if self.data.context_samples else desc

    def select_clips(self) -> tuple[dict[str, list[tuple[Clip, int]]], list[Clip]]:
        """What this recipe trains on: the labelled clips of each split with their label index, and the
        keyword-free training sentences (context, negatives, babble); read from the data sources."""
        index = {lab: i for i, lab in enumerate(self.labels)}
        splits: dict[str, list[tuple[Clip, int]]] = {"train": [], "validation": []}
        banned = sounds_like_keywords(task_labels(self.data.words))
        sentences: list[Clip] = []
        for clip in load_sources(list(self.data.sources), self.data.words):
            if not clip.label:  # unlabelled speech (e.g. ASR sentences) is not a keyword example
                if stream_background_speaker(clip):  # the streaming evaluation's speech background
                    continue
                if clip.text and keyword_free(clip.text, banned) and assign_split(clip) == "train":
                    sentences.append(clip)  # but keyword-free sentences make context and negatives
                continue
            label = clip.label if clip.label in index else (UNKNOWN if UNKNOWN in index else None)
            if label is None or label == SILENCE:
                continue
            split = assign_split(clip, self.data.validation_pct)
            if split in splits:
                splits[split].append((clip, index[label]))
        return splits, sentences

    def packed_clips(self) -> list[Clip]:
        """The clips a data pack of this recipe holds (:mod:`edgessm.data.pack`), split fixed."""
        splits, sentences = self.select_clips()
        return [replace(c, split=split) for split, items in splits.items() for c, _ in items] + [
            replace(c, split="train") for c in sentences
        ]

    def _prepare(self) -> None:
        if self._prepared:
            return
        for key in ("real_repeats", "real_sentence_repeats"):
            if getattr(self.data, key) < 1:
                raise ValueError(f"data.{key} must be at least 1, got {getattr(self.data, key)}")
        splits, clips = self.select_clips()
        repeats = {True: 1, False: self.data.real_sentence_repeats}
        sentences = [c.path for c in clips for _ in range(repeats[c.source.startswith("synth")])]
        if not splits["train"]:
            raise CorpusError("no training clips with a label of this task were found in the data sources")
        self.items = splits
        all_clips = splits["train"] + splits["validation"]
        self.store = AudioStore(
            [c.path for c, _ in all_clips], max_samples=self.data.clip_samples * 2, progress=True, cache="auto"
        )
        self.n_train = len(splits["train"])
        self.noises = AudioStore(noise_paths(list(self.data.noise)), cache="auto") if self.data.noise else None
        wants_sentences = self.data.context_prob > 0 or self.data.sentence_negatives > 0 or self.data.sentence_babble
        if wants_sentences and not sentences:
            raise CorpusError("context_prob / sentence_negatives / sentence_babble need keyword-free sentences in "
                              "the sources (the synthetic corpus has them: synth:default)")  # fmt: skip
        self.sentences = AudioStore(sentences, progress=True, cache="auto") if wants_sentences else None
        babble = _DrawClip(self.sentences) if self.data.sentence_babble else None
        pieces = self.data.music_pieces
        self.music = MusicBank(pieces, seed=self.cfg.train.seed, cache=True) if pieces else None
        self.augment = build_augment(self.cfg.augment, self.noises, babble_speech=babble, music=self.music)
        self.unknown_train = [i for i, (_, lab) in enumerate(splits["train"]) if self.labels[lab] == UNKNOWN]
        self.keyword_train = [i for i, (_, lab) in enumerate(splits["train"])
                              if self.labels[lab] not in (UNKNOWN, SILENCE)]  # fmt: skip
        net = self.build_model()  # the head's window in samples (frames x stride; 0: the whole example)
        self.window_samples = max(0, net.cfg.window) * net.stride or self.data.clip_samples
        # the training pass in item order; recorded clips repeated (silence and hard negatives follow it)
        self.train_order = [i for i, (c, _) in enumerate(splits["train"])
                            for _ in range(1 if c.source.startswith("synth") else self.data.real_repeats)]  # fmt: skip
        self._prepare_mined(clips, splits["train"])
        self._prepared = True

    def _prepare_mined(self, sentences: list[Clip], train: list[tuple[Clip, int]]) -> None:
        """The mined negatives (``mined_negatives``) and a store of their recordings."""
        self.mined: list = []
        if self.data.mined_fraction < 0:
            raise ValueError(f"data.mined_fraction must be >= 0, got {self.data.mined_fraction}")
        if not self.data.mined_negatives:
            if self.data.mined_fraction > 0:
                raise ValueError("data.mined_fraction > 0 needs data.mined_negatives (a CSV of `edgessm mine`)")
            return
        from .mine import read_mined

        if UNKNOWN not in self.labels:
            raise ValueError("mined negatives are _unknown_ examples; this recipe has no _unknown_ class")
        self.mined = read_mined(self.data.mined_negatives)
        if not self.mined:
            raise ValueError(f"{self.data.mined_negatives}: no mined negatives (the model fired nowhere)")
        # only the recipe's own keyword-free training speech: never a validation or test speaker (in a data
        # pack: the recordings `edgessm pack` took whole for its mined.csv, source "mined")
        allowed = {c.path for c in self.keyword_free_training(sentences, train)}
        for spec in self.data.sources:
            if spec.startswith("pack:"):
                allowed |= {c.path for c in _pack_clips(spec.removeprefix("pack:")) if c.source == MINED_SOURCE}
        strange = sorted({m.path for m in self.mined} - allowed)
        if strange:
            raise ValueError(f"{self.data.mined_negatives}: {len(strange)} recordings are not keyword-free "
                             f"training speech of this recipe (e.g. {strange[0]}); mine with the same recipe "
                             "and sources (`edgessm mine RECIPE`)")  # fmt: skip
        paths = sorted({m.path for m in self.mined})
        self.mined_store = AudioStore(paths, progress=True, cache="auto")
        where = {path: i for i, path in enumerate(paths)}
        self.mined_clip = [where[m.path] for m in self.mined]

    def keyword_free_training(self, sentences: list[Clip], train: list[tuple[Clip, int]]) -> list[Clip]:
        """The recordings this recipe treats as keyword-free training speech (what ``edgessm mine`` searches):
        its ``sentences`` and its ``_unknown_`` ``train`` clips (both as :meth:`select_clips` returns them)."""
        unknown = self.labels.index(UNKNOWN) if UNKNOWN in self.labels else -1
        return [*sentences, *(c for c, lab in train if lab == unknown)]

    def _context(self, n: int, r: np.random.Generator) -> tuple[np.ndarray, tuple[int, int]]:
        """``n`` samples of background: speech, music, noise or near-silence; and the span ``(start, end)``
        in samples of a keyword said in it (``(0, 0)``: none; see ``context_keyword_prob``)."""
        kind = r.choice(4, p=[0.45, 0.2, 0.25, 0.1])
        if kind == 0:  # sentences and non-keyword words, -35..-15 dBFS each, short pauses
            out, pos = np.zeros(n, np.float32), int(r.integers(0, SAMPLE_RATE // 2))
            while pos < n:
                if self.unknown_train and r.random() < 0.4:
                    x = self.store[self.unknown_train[int(r.integers(len(self.unknown_train)))]]
                else:
                    x = self.sentences[int(r.integers(len(self.sentences)))]
                x = x[: n - pos] * 10 ** (r.uniform(-35, -15) / 20) / (np.sqrt(np.mean(x**2)) + 1e-6)
                out[pos : pos + len(x)] = x
                pos += len(x) + int(r.uniform(0.05, 0.8) * SAMPLE_RATE)
        elif kind == 1:
            level = r.uniform(-40, -20)
            out = self.music(n, r, level) if self.music is not None else music_like(n, r, level_dbfs=level)
        elif kind == 2 and self.noises is not None and len(self.noises):
            x = self.noises.random_crop(int(r.integers(len(self.noises))), n, r)
            out = (x * 10 ** (r.uniform(-50, -20) / 20) / (np.sqrt(np.mean(x**2)) + 1e-6)).astype(np.float32)
        else:
            out = r.normal(0, 10 ** (r.uniform(-80, -50) / 20), n).astype(np.float32)
        if not (self.keyword_train and r.random() < self.data.context_keyword_prob):
            return out, (0, 0)
        # a previous command, said over the background (or in a pause of the speech, which it replaces)
        x = speech_span(self.store[self.keyword_train[int(r.integers(len(self.keyword_train)))]])[: n // 2]
        start = int(r.integers(0, n - len(x) + 1))
        if kind == 0:
            out[max(0, start - SAMPLE_RATE // 10) : start + len(x) + SAMPLE_RATE // 10] = 0.0
        out[start : start + len(x)] += x * 10 ** (r.uniform(-35, -15) / 20) / (np.sqrt(np.mean(x**2)) + 1e-6)
        return out, (start, start + len(x))

    def _example(self, split: str, index: int, rng: np.random.Generator | None) -> dict[str, Any]:
        if split == "train" and index >= self._n_plain():
            return self._mined_example(index, rng)
        ex = self._clip_example(split, index, rng)
        if self.data.context_samples:  # validation: after silence, as exported graphs start (describe())
            r = rng if rng is not None else item_rng(index)
            n = self.data.context_samples
            background = split == "train" and r.random() < self.data.context_prob
            ctx, span = self._context(n, r) if background else (np.zeros(n, np.float32), (0, 0))
            ex["audio"] = np.concatenate([ctx[None], ex["audio"]], axis=1)
            ex["positive_from"] += n
            if span[1] > span[0]:  # a previous keyword: unsupervised while it is in the head's window
                ex["unsupervised"] = (span[0], span[1] + self.window_samples)
        ex["context"] = self.data.context_samples
        ex.setdefault("unsupervised", (0, 0))
        return ex

    def _clip_example(self, split: str, index: int, rng: np.random.Generator | None) -> dict[str, Any]:
        n = len(self.train_order) if split == "train" else len(self.items[split])
        length = self.data.clip_samples
        if index >= n + self._n_silence(n):  # a hard negative: a window of a keyword-free sentence
            r = rng if rng is not None else item_rng(index)
            x = self.sentences.random_crop(int(r.integers(len(self.sentences))), length, r)
            mix = self._unaugmented(split)
            if self.augment is not None:
                x, mix = self._augmented(x, r)
            return {"audio": x.astype(np.float32)[None], "label": self.labels.index(UNKNOWN), "positive_from": 0,
                    **mix}  # fmt: skip
        if index >= n:  # a silence example: background noise (or near-digital silence) at a random level
            r = rng if rng is not None else item_rng(index)
            if self.noises is not None and len(self.noises) and r.random() < 0.8:
                x = self.noises.random_crop(int(r.integers(len(self.noises))), length, r)
                x = x * 10 ** (r.uniform(-40, -5) / 20) / max(1e-4, float(np.abs(x).max()))
            else:
                x = r.normal(0, 10 ** (r.uniform(-80, -50) / 20), length)
            return {"audio": x.astype(np.float32)[None], "label": self.labels.index(SILENCE), "positive_from": 0,
                    **self._unaugmented(split)}  # fmt: skip
        if split == "train":
            index = self.train_order[index]
        offset = 0 if split == "train" else self.n_train
        clip_idx, label = offset + index, self.items[split][index][1]
        x = _crop_or_place(self.store[clip_idx], length, rng)
        # where the word has been said (clean audio, before shift/speed augmentation: the tolerance covers them)
        word_end = speech_bounds(x)[1] if self.labels[label] not in (UNKNOWN, SILENCE) else 0
        mix = self._unaugmented(split)
        if rng is not None and self.augment is not None:
            x, mix = self._augmented(x, rng)
        positive_from = min(length - 1, word_end + int(self.data.frame_tolerance_s * SAMPLE_RATE))
        return {"audio": x.astype(np.float32)[None], "label": label, "positive_from": positive_from, **mix}

    def _mined_example(self, index: int, rng: np.random.Generator | None) -> dict[str, Any]:
        """A mined negative: the recording up to just after a detection, no keyword at any frame."""
        r = rng if rng is not None else item_rng(index)
        k = int(r.integers(len(self.mined)))
        clip, length = self.mined_clip[k], self.data.clip_samples
        total = self.data.context_samples + length
        end = round((self.mined[k].time_s + r.uniform(0.05, 0.3)) * SAMPLE_RATE)
        x = np.zeros(total, np.float32)
        part = self.mined_store.slice(clip, end - total, end)  # silence before the recording (and after it)
        start = max(0, total - end)
        x[start : start + len(part)] = part
        mix = self._unaugmented("train")
        if self.augment is not None:
            tail, mix = self._augmented(x[-length:], r)
            x = np.concatenate([x[:-length], tail])
        return {"audio": x.astype(np.float32)[None], "label": self.labels.index(UNKNOWN), "positive_from": 0,
                "context": self.data.context_samples, "unsupervised": (0, 0), **mix}  # fmt: skip

    def _n_silence(self, n: int) -> int:
        return round(n * self.data.silence_fraction) if SILENCE in self.labels else 0

    def _n_plain(self) -> int:
        """Training items before the mined negatives: keyword clips, silence, sentence negatives."""
        n = len(self.train_order)
        negatives = round(n * self.data.sentence_negatives) if UNKNOWN in self.labels else 0
        return n + self._n_silence(n) + negatives

    def train_set(self) -> torch.utils.data.Dataset:
        self._prepare()
        mined = round(len(self.train_order) * self.data.mined_fraction) if self.mined else 0
        return _Items(self._n_plain() + mined, lambda i, rng: self._example("train", i, rng))

    def has_validation(self) -> bool:
        self._prepare()
        return bool(self.items["validation"])

    def loss(self, net, batch, progress):
        if self.data.frame_loss <= 0:
            logits = net(batch["audio"])
            loss = F.cross_entropy(logits.float(), batch["label"])
            acc = (logits.argmax(-1) == batch["label"]).float().mean()
            return loss, {"acc": acc}  # tensors: read at log steps only (no host sync per step)
        frames = net(batch["audio"], all_frames=True).float()  # (B, C, F)
        logits = frames[..., -1]  # the clip decision, as without frame supervision
        clip_loss = F.cross_entropy(logits, batch["label"])
        bg, pos = frame_targets(batch, self.labels, int(_unwrap(net).stride), frames.shape[-1])
        logp = F.log_softmax(frames, dim=1)
        background = [self.labels.index(c) for c in (UNKNOWN, SILENCE) if c in self.labels]
        bg_logp = torch.logsumexp(logp[:, background], dim=1)  # (B, F): log P(no keyword)
        kw_logp = logp.gather(1, batch["label"].to(frames.device)[:, None, None].expand(-1, 1, frames.shape[-1]))[:, 0]
        bg_loss = -(bg_logp * bg).sum() / bg.sum().clamp_min(1)
        pos_loss = -(kw_logp * pos).sum() / pos.sum().clamp_min(1)
        loss = clip_loss + self.data.frame_loss * (bg_loss + pos_loss)
        acc = (logits.argmax(-1) == batch["label"]).float().mean()
        fires = ((bg_logp.exp() < 0.5) & (bg > 0)).float().sum() / bg.sum().clamp_min(1)
        return loss, {"acc": acc, "bg_loss": bg_loss.detach(), "pos_loss": pos_loss.detach(), "bg_fire": fires}

    def evaluate(self, model, device, max_batches=0):
        self._prepare()
        n = len(self.items["validation"])
        ds = _Items(n + self._n_silence(n), lambda i, rng: self._example("validation", i, None))
        # recorded speech is what users speak: its accuracy is logged on its own (the score stays overall)
        real = [not c.source.startswith("synth") for c, _ in self.items["validation"]]
        return classify_dataset(model, ds, self.collate, device, max_batches, groups={"real": real})


def _unwrap(net: nn.Module) -> nn.Module:
    """The network inside a DDP / compiled wrapper."""
    while hasattr(net, "module") or hasattr(net, "_orig_mod"):
        net = getattr(net, "module", None) or net._orig_mod
    return net


@functools.cache
def _negative_classes(labels: tuple[str, ...], device: torch.device) -> Tensor:
    """Which classes are no keyword, on ``device``: made once (a tensor made from Python data inside a training
    step is a host-to-device copy that a CUDA graph cannot record)."""
    return torch.tensor([c in (UNKNOWN, SILENCE) for c in labels], device=device)


def ramp(progress: float | Tensor) -> float | Tensor:
    """``min(1, progress)`` for a float or a device tensor (a recorded step's progress; no host read)."""
    return progress.clamp(max=1.0) if torch.is_tensor(progress) else min(1.0, progress)


def frame_targets(batch: dict[str, Tensor], labels: list[str], stride: int, n_frames: int) -> tuple[Tensor, Tensor]:
    """Frame masks ``(B, F)`` of the streaming supervision (:class:`KwsData` ``frame_loss``).

    Frame ``f`` has heard samples ``[0, (f + 1) * stride)`` of the example. ``background`` marks the
    frames that must say "no keyword": those that have heard only the context (``batch["context"]``
    samples), and every frame of a negative example, except the frames ending inside
    ``batch["unsupervised"]`` ``(B, 2)`` (a previous keyword in the context, while the head still hears it).
    ``positive`` marks the frames of a keyword example from ``batch["positive_from"]`` on.
    """
    device = batch["audio"].device  # all on the batch's device: no host sync in a training step
    ends = (torch.arange(n_frames, device=device) + 1) * stride  # (F,) samples heard
    negative = _negative_classes(tuple(labels), device)[batch["label"].to(device)]
    in_context = ends[None, :] <= batch["context"].to(device)[:, None]  # (B, F)
    background = in_context | negative[:, None]
    if "unsupervised" in batch:
        span = batch["unsupervised"].to(device)
        background &= ~((ends[None, :] > span[:, :1]) & (ends[None, :] <= span[:, 1:]))
    positive = (ends[None, :] > batch["positive_from"].to(device)[:, None]) & ~negative[:, None]
    positive[:, -1] |= ~negative  # the last frame always sees the whole clip
    return background.float(), positive.float()


def classify_dataset(
    model: nn.Module,
    ds,
    collate,
    device,
    max_batches: int = 0,
    batch: int = 64,
    groups: dict[str, list[bool]] | None = None,
) -> dict[str, float]:
    """Accuracy and mean loss over ``ds``; ``groups[name][i]`` marks item ``i`` as a member of
    ``name``, whose accuracy is reported as ``accuracy_<name>`` (items past the list are not)."""
    correct = total = 0
    loss = 0.0
    hits: list[bool] = []
    for b, start in enumerate(range(0, len(ds), batch)):
        if max_batches and b >= max_batches:
            break
        items = collate([ds[i] for i in range(start, min(len(ds), start + batch))])
        logits = model(items["audio"].to(device)).float()
        y = items["label"].to(device)
        loss += float(F.cross_entropy(logits, y, reduction="sum"))
        ok = logits.argmax(-1) == y
        hits += ok.tolist()
        correct += int(ok.sum())
        total += len(y)
    acc = correct / max(1, total)
    out = {"accuracy": acc, "loss": loss / max(1, total), "score": acc}
    for name, member in (groups or {}).items():
        chosen = [h for h, m in zip(hits, member, strict=False) if m]  # silence items follow
        if chosen:
            out[f"accuracy_{name}"] = sum(chosen) / len(chosen)
    return out


# --- denoising ----------------------------------------------------------------------------------


@dataclass
class DenoiseData:
    sources: tuple[str, ...] = ("shared:read_speech",)
    noise: tuple[str, ...] = ("shared:noise",)
    segment_samples: int = 32768
    validation_pct: float = 10.0
    test_pct: float = 10.0  # speakers kept for `edgessm eval` (never trained on, never validated on)
    val_noise_holdout: tuple[str, ...] = ("running_tap.wav",)
    test_noise_holdout: tuple[str, ...] = ("dude_miaowing.wav",)  # never mixed in training or validation
    spectral_weight: float = 1.0  # the ERB spectral loss weight ramps from 0 to this over training
    wave_weight: float = 1.0  # weight of the SmoothL1 waveform term
    # Multi-resolution STFT loss (MSE of power-compressed magnitudes, optionally of compressed complex
    # spectra too), at full weight from the start. A real-valued mask scored on waveforms is pulled below
    # |S|/|X| wherever the noise turns the phase (the waveform-optimal gain is the phase-sensitive one):
    # audible speech loss. Scored on magnitudes, the optimum is the magnitude ratio.
    mr_weight: float = 0.0
    mr_ffts: tuple[int, ...] = (256, 512, 1024)
    mr_complex: float = 0.0  # weight of the compressed complex term inside the multi-resolution loss
    real_repeats: int = 1  # every recorded (non-synthetic) clean clip is drawn this many times per pass
    # Gain supervision (mask networks only, `arch = "spectral"`): MSE between the network's gains and the
    # ideal ratio mask at its resolution, both raised to `mask_power` (RNNoise's loss). Under uncertainty
    # an MSE on gains settles on their mean; the compressed-magnitude losses above settle far lower
    # (a power mean with exponent 0.3), which is speech suppressed wherever speech is not certain.
    mask_weight: float = 0.0
    mask_power: float = 0.5
    # Deep filter (`model.df_order` > 0): MSE of the power-compressed complex spectra (|z|^c e^{i arg z}) of
    # the enhanced and the clean frames in the deep-filter bins, the filter's own target (the gains keep theirs).
    df_weight: float = 0.0
    df_compress: float = 0.3
    irm_exponent: float = 0.5  # the gain target (S / (S + N)) ** irm_exponent: 0.5 amplitude ratio, 1 Wiener
    val_items: int = 256  # validation pairs per evaluation (spread evenly over the validation clips)
    min_words: int = 0  # keep only clips whose transcript has at least this many words (0: every clip)
    val_samples: int = 0  # validation length (0: segment_samples); longer ones join consecutive clips, as a stream
    # Real speech from many speakers as isolated words (e.g. Speech Commands): a training example is, with
    # probability word_stream_prob, words of different training speakers cut to their speech and joined
    # with pauses of pause_s seconds, each at its own level within +-word_level_db of the others.
    word_sources: tuple[str, ...] = ()
    word_stream_prob: float = 0.0
    pause_s: tuple[float, float] = (0.05, 0.6)
    word_level_db: float = 6.0
    min_dynamic_range_db: float = 30.0  # word clips with less are skipped: their own noise would be a target
    # Babble talkers (`[augment.noise] babble`): the training-split speakers of these sources (e.g. the real
    # sentences and wake phrases); empty: the clean training clips themselves (mostly synthetic voices).
    babble_sources: tuple[str, ...] = ()
    # Recorded music for the `music` noise kind (e.g. ["music:train"], free game soundtracks; `make music`),
    # each track's loudest `music_max_s` seconds kept in memory; empty: procedural music (noise.music_like).
    music_sources: tuple[str, ...] = ()
    music_max_s: float = 60.0


def _aligned(net: nn.Module, est: Tensor, ref: Tensor) -> tuple[Tensor, Tensor]:
    """``est`` and ``ref`` over the samples they share when ``net`` answers ``delay`` samples late
    (output ``t`` stands for input ``t - delay``); unchanged for a sample-aligned network."""
    delay = int(getattr(getattr(net, "module", net), "delay", 0))
    return (est[..., delay:], ref[..., : ref.shape[-1] - delay]) if delay else (est, ref)


def _compressed_error(est: Tensor, ref: Tensor, bins: int, low: int, scale: Tensor, c: float) -> Tensor:
    """Mean ``|C(est) - C(ref)|^2`` over the lowest ``low`` bins of ``[Re | Im]`` spectra ``(B, m, 2 bins)``,
    ``C(z) = |z|^c z / |z|`` of the spectra divided by each example's ``scale (B, 1, 1)``."""

    def compress(z: Tensor) -> tuple[Tensor, Tensor]:
        re, im = z[..., :low] / scale, z[..., bins : bins + low] / scale
        factor = (re * re + im * im + 1e-12) ** ((c - 1) / 2)
        return re * factor, im * factor

    (er, ei), (rr, ri) = compress(est), compress(ref)
    return ((er - rr) ** 2 + (ei - ri) ** 2).mean()


class DenoiseTask(Task):
    """Waveform-to-waveform: SmoothL1 (beta 0.5) on waveforms + a ramped ERB spectral loss (App. E.2)."""

    name = "denoise"

    def __init__(self, cfg: TrainConfig) -> None:
        super().__init__(cfg)
        self.data = data_config(DenoiseData, cfg.data)
        self._prepared = False

    def _prepare(self) -> None:
        if self._prepared:
            return
        from edgessm.data import augment
        from edgessm.data.noise import NoiseBank

        clips = [c for c in load_sources(list(self.data.sources)) if self.takes_as_clean(c)]
        split = {id(c): assign_split(c, self.data.validation_pct, self.data.test_pct) for c in clips}
        train = [c for c in clips if split[id(c)] == "train"]
        val = [c for c in clips if split[id(c)] == "validation"]
        if not train:
            raise CorpusError("no clean training speech found in the data sources")
        self.train_clips, self.val_clips = train, val
        if self.data.real_repeats < 1:
            raise ValueError(f"data.real_repeats must be at least 1, got {self.data.real_repeats}")
        # the order of one training pass: recorded clips repeated, synthetic voices once
        self.train_order = [i for i, c in enumerate(train)
                            for _ in range(1 if c.source.startswith("synth") else self.data.real_repeats)]  # fmt: skip
        self.clean = AudioStore([c.path for c in train + val], progress=True, cache="auto")
        self.words, self.word_index, self.word_spans = None, [], []
        if self.data.word_stream_prob > 0:
            self._prepare_words()
        paths = noise_paths(list(self.data.noise))
        if not paths:
            raise CorpusError("denoising needs noise recordings (data.noise)")
        held = {Path(n).stem for n in self.data.val_noise_holdout}
        test = {Path(n).stem for n in self.data.test_noise_holdout}
        train_noise = [p for p in paths if pack.noise_stem(p) not in held | test]
        val_noise = [p for p in paths if pack.noise_stem(p) in held] or train_noise
        if not train_noise:
            raise CorpusError("every noise recording is held out; list fewer in data.*_noise_holdout")
        self.noise_train, self.noise_val = AudioStore(train_noise, cache="auto"), AudioStore(val_noise, cache="auto")
        # training noise: the real recordings plus colored, babble (of training speakers), music, hum
        settings = _resolve(self.cfg.augment)
        self.augment = augment.DenoiseAugment(
            augment.config_from_dict(augment.DenoiseAugmentConfig, settings),
            noise_bank=NoiseBank.wrap(self.noise_train, [Path(p).name for p in train_noise]),
            babble_speech=self._babble_speech(len(train)),
            music=self._recorded_music(),
        )
        # validation pairs: the held-out noise recording, the same SNR/level mixing, no masking or reverb
        self.mix_val = build_denoise_mixer({**self.cfg.augment, "mask_prob": 0.0, "reverb_prob": 0.0})
        self._prepared = True

    def takes_as_clean(self, clip: Clip) -> bool:
        """Whether a clip of ``data.sources`` is clean training speech: with ``min_words``, only transcripts
        that long (isolated words in silence are not the speech a denoiser hears)."""
        return not self.data.min_words or not clip.text or len(clip.text.split()) >= self.data.min_words

    def packed_roles(self) -> dict[str, list[Clip]]:
        """The clips a data pack of this recipe holds, by the recipe key that uses them: the clean speech
        (training and validation speakers, split fixed; test speakers stay out), and the training
        speakers of the word streams, of babble and the training music tracks (source ``music``)."""
        split = lambda c: assign_split(c, self.data.validation_pct, self.data.test_pct)  # noqa: E731
        clean = [c for c in load_sources(list(self.data.sources)) if self.takes_as_clean(c)]
        roles = {"sources": [replace(c, split=s) for c in clean if (s := split(c)) != "test"]}
        specs = {"word_sources": list(self.data.word_sources) if self.data.word_stream_prob > 0 else [],
                 "babble_sources": list(self.data.babble_sources)}  # fmt: skip
        for key, sources in specs.items():
            roles[key] = [replace(c, split="train") for c in load_sources(sources) if split(c) == "train"]
        roles["music_sources"] = [Clip(p, speaker=Path(p).stem, source="music", split="train")
                                  for p in noise_paths(list(self.data.music_sources))]  # fmt: skip
        return roles

    def packed_clips(self) -> list[Clip]:
        """Every clip of :meth:`packed_roles` once (a clip in two roles keeps its first split)."""
        seen: set[str] = set()
        out = []
        for clips in self.packed_roles().values():
            for c in clips:
                if c.path not in seen:
                    seen.add(c.path)
                    out.append(c)
        return out

    def _babble_speech(self, n_train: int):
        """Talkers for babble: the training speakers of ``babble_sources``, else the clean training clips."""
        from edgessm.data.store import ClipDrawer

        if not self.data.babble_sources:
            return ClipDrawer(self.clean, range(n_train))
        clips = [c for c in load_sources(list(self.data.babble_sources))
                 if assign_split(c, self.data.validation_pct, self.data.test_pct) == "train"]  # fmt: skip
        if not clips:
            raise CorpusError(f"no training-speaker clips in data.babble_sources {list(self.data.babble_sources)}")
        return ClipDrawer(AudioStore([c.path for c in clips], progress=True, cache="auto"))

    def _recorded_music(self):
        """``(length, rng) -> crop`` of the ``music_sources`` recordings, or ``None`` (procedural music)."""
        from edgessm.data.noise import NoiseBank

        if not self.data.music_sources:
            return None
        paths = noise_paths(list(self.data.music_sources))
        if not paths:
            raise CorpusError(f"data.music_sources {list(self.data.music_sources)} hold no recordings (`make music`)")
        store = AudioStore(paths, max_samples=int(self.data.music_max_s * SAMPLE_RATE), progress=True, cache="auto")
        return NoiseBank.wrap(store, [Path(p).name for p in paths]).sample  # picklable for the loader workers

    def _prepare_words(self) -> None:
        """The training speakers' clean word clips of ``word_sources`` (validation and test speakers and
        recordings under ``min_dynamic_range_db`` left out)."""
        if not 0 <= self.data.word_stream_prob <= 1:
            raise ValueError(f"[data] word_stream_prob must be in [0, 1], not {self.data.word_stream_prob}")
        if not self.data.word_sources:
            raise ValueError("[data] word_stream_prob > 0 needs word_sources (e.g. ['shared:sc_train'])")
        clips = [c for c in load_sources(list(self.data.word_sources))
                 if assign_split(c, self.data.validation_pct, self.data.test_pct) == "train"]  # fmt: skip
        if not clips:
            raise CorpusError(f"no training word clips in {list(self.data.word_sources)}")
        self.words = AudioStore([c.path for c in clips], progress=True, cache="auto")
        floor = self.data.min_dynamic_range_db
        self.word_index = [i for i in range(len(clips)) if dynamic_range_db(self.words[i]) >= floor]
        # (clip, start, end) of each kept word's speech, found once rather than for every example
        self.word_spans = [(i, *speech_bounds(self.words[i], -35.0, margin=800, abs_floor=1e-4))
                           for i in self.word_index]  # fmt: skip
        if not self.word_index:
            raise CorpusError(f"no word clip has a dynamic range of {floor} dB; lower min_dynamic_range_db")

    def _word_stream(self, length: int, rng: np.random.Generator) -> np.ndarray:
        """``length`` samples of random training words joined with pauses, starting at a random offset."""
        out = np.zeros(length, np.float32)
        lo, hi = self.data.pause_s
        pos = -int(rng.integers(0, SAMPLE_RATE // 2))  # the stream may start in the middle of a word
        while pos < length:
            i, start, end = self.word_spans[int(rng.integers(len(self.word_spans)))]
            word = self.words[i][start:end]
            rms = float(np.sqrt(np.mean(word.astype(np.float64) ** 2))) + 1e-9
            word = word * (0.05 / rms * 10 ** (rng.uniform(-1, 1) * self.data.word_level_db / 20))
            a, b = max(pos, 0), min(pos + len(word), length)
            if b > a:
                out[a:b] = word[a - pos : b - pos]
            pos += len(word) + int(SAMPLE_RATE * rng.uniform(lo, hi))
        return out

    def _example(self, split: str, index: int, rng: np.random.Generator | None) -> dict[str, Any]:
        r = rng if rng is not None else item_rng(10_000 + index)
        if split == "train":
            if self.words is not None and r.random() < self.data.word_stream_prob:
                clean = self._word_stream(self.data.segment_samples, r)
            else:  # short clips sit at a random place in silence: the model must keep silence silent
                clean = _crop_or_place(self.clean[self.train_order[index]], self.data.segment_samples, r)
            noisy, target = self.augment(clean, r)
        else:
            length = self.data.val_samples or self.data.segment_samples
            clean = _crop_or_place(self._joined_val(index, length), length, r)
            noise = self.noise_val.random_crop(int(r.integers(len(self.noise_val))), length, r)
            noisy, target = self.mix_val(clean, noise, r)
        return {"noisy": noisy.astype(np.float32)[None], "clean": target.astype(np.float32)[None]}

    def _joined_val(self, index: int, length: int) -> np.ndarray:
        """Validation clip ``index`` followed by the next ones until ``length`` samples: a streamed
        model is validated on as long an input as it will stream, not on one short clip."""
        n, base = len(self.val_clips), len(self.train_clips)
        parts, total = [], 0
        for k in range(index, index + n):
            parts.append(self.clean[base + k % n])
            total += len(parts[-1])
            if total >= length:
                break
        return np.concatenate(parts)

    def train_set(self):
        self._prepare()
        return _Items(len(self.train_order), lambda i, rng: self._example("train", i, rng))

    def has_validation(self) -> bool:
        self._prepare()
        return bool(self.val_clips)

    def loss(self, net, batch, progress):
        # Both terms see the signals divided by each noisy input's RMS: at the paper's input levels
        # (-35..-15 dBFS) raw waveform errors are ~1e-2, where SmoothL1 (beta 0.5) is a vanishing
        # quadratic and the spectral term alone steers training (measured here: SI-SDR fell as it
        # rose). The model still sees and returns raw levels.
        noisy = batch["noisy"].float()
        scale = noisy.pow(2).mean(-1, keepdim=True).sqrt().clamp_min(1e-4)
        parts: dict[str, float] = {}
        if self.data.mask_weight:
            inner = getattr(net, "module", net)
            if not hasattr(inner, "oracle_gains"):
                raise ValueError("data.mask_weight trains a mask network's gains: use model.arch = 'spectral'")
            if self.data.df_weight:
                out, gains, spec = net(batch["noisy"], with_gains=True, with_spectra=True)
            else:
                out, gains = net(batch["noisy"], with_gains=True)
            with torch.no_grad():
                target, valid = inner.oracle_gains(noisy, batch["clean"].float(), exponent=self.data.irm_exponent)
            p = self.data.mask_power
            err = (gains.float().clamp_min(1e-6) ** p - target**p) ** 2
            mask = (err * valid).sum() / valid.sum().clamp_min(1.0)
            parts["mask"] = mask.detach()
            if self.data.df_weight:
                if not getattr(inner, "df_bins", 0):
                    raise ValueError("data.df_weight trains a deep filter: set model.df_order > 0")
                with torch.no_grad():
                    clean_spec = inner.spectra(batch["clean"].float())
                df = _compressed_error(
                    spec.float(), clean_spec, inner.bins, inner.df_bins, scale, self.data.df_compress
                )
                parts["df"] = df.detach()
        else:
            out = net(batch["noisy"])
        est, ref = _aligned(net, out.float() / scale, batch["clean"].float() / scale)
        wave = F.smooth_l1_loss(est, ref, beta=0.5)
        spec = erb_spectral_loss(est[:, 0], ref[:, 0])
        w = self.data.spectral_weight * ramp(progress)
        total = self.data.wave_weight * wave + w * spec
        parts.update(wave=wave.detach(), spec=spec.detach())
        if self.data.mask_weight:
            total = total + self.data.mask_weight * mask
            if self.data.df_weight:
                total = total + self.data.df_weight * df
        if self.data.mr_weight:
            mr = multires_spectral_loss(est[:, 0], ref[:, 0], self.data.mr_ffts, complex_weight=self.data.mr_complex)
            total = total + self.data.mr_weight * mr
            parts["mr"] = mr.detach()
        return total, parts

    def evaluate(self, model, device, max_batches=0):
        """Mean SI-SDR and its improvement over the noisy input on validation pairs, in batches of 16;
        ``max_batches`` (0: ``val_items`` pairs) caps the work, spread evenly over the speakers."""
        self._prepare()
        n = len(self.val_clips)
        count = min(n, max_batches * 16 if max_batches else self.data.val_items)
        picks = np.unique(np.linspace(0, n - 1, count).round().astype(int)) if count else []
        gains, sdrs = [], []
        for start in range(0, len(picks), 16):
            exs = [self._example("validation", int(i), None) for i in picks[start : start + 16]]
            noisy = torch.as_tensor(np.stack([e["noisy"] for e in exs]))
            ref = torch.as_tensor(np.stack([e["clean"][0] for e in exs]))
            est, ref_d = _aligned(model, model(noisy.to(device))[:, 0].float().cpu(), ref)
            s = si_sdr(est, ref_d)
            sdrs += s.tolist()
            gains += (s - si_sdr(noisy[:, 0, : ref_d.shape[-1]], ref_d)).tolist()  # the input over the same samples
        return {
            "si_sdr": float(np.mean(sdrs)),
            "si_sdr_improvement": float(np.mean(gains)),
            "score": float(np.mean(gains)),
        }


# --- CTC speech recognition -----------------------------------------------------------------------


@dataclass
class AsrData:
    """Where the recognizer's utterances come from and how training examples are composed.

    Every example is one of: a multi-word utterance (``sentence_weight``), a single-word clip
    (``word_weight``), or 2..``max_sequence`` single words cut to their speech and joined with
    pauses of ``pause_s`` seconds (``sequence_weight``: digit strings and command chains, which no
    corpus here has). Utterances longer than ``max_samples`` are left out, never cropped (the
    transcript must match the audio). Speakers are split by a stable hash: ``validation_pct`` percent
    validate, the next ``test_pct`` percent are held out for ``edgessm eval asr`` (the denoiser's test
    speakers too); corpora with their own split (the synthetic voices) keep it.
    """

    sources: tuple[str, ...] = ("shared:read_speech",)
    noise: tuple[str, ...] = ()
    max_samples: int = 16000 * 8
    validation_pct: float = 10.0
    test_pct: float = 10.0
    sentence_weight: float = 0.5
    word_weight: float = 0.2
    sequence_weight: float = 0.3
    max_sequence: int = 5
    pause_s: tuple[float, float] = (0.05, 0.5)
    val_items: int = 160  # validation examples per kind (sentences, words, sequences)
    # Seconds of digital silence before every example (before augmentation), left out of the loss; a
    # multiple of the 20 ms frame. Without it the recogniser learnt to emit its guess of the first
    # letter at a fixed frame after the (always recognisable) start-up of its state, where CTC then
    # kept it: every hypothesis began with "o". The streaming runtime starts each stream from the state
    # after this much silence (graph metadata ``warmup_samples``).
    warmup_s: float = 0.0
    # Share of the draws per source within each kind (sentences, words): Clip.source pattern -> weight,
    # e.g. {"real_read_speech" = 3, "synth:*" = 1}; the first matching pattern counts, and every source
    # present must match one. A source's weight is split evenly over its utterances, so a large synthetic
    # corpus no longer drowns a small real one. Empty: every utterance equally likely.
    source_weights: dict[str, float] = field(default_factory=dict)
    # Frame-level distillation from the teacher's encoder (edgessm.train.distill): the weight of its loss
    # beside CTC (0: off) and how far back (seconds, a multiple of 20 ms) the causal student's frame predicts.
    distill_weight: float = 0.0
    distill_lag_s: float = 0.08
    # Teacher transcripts weighted by the teacher's confidence (sequence-level distillation): each
    # utterance with a confidence c (a source read through an ``edgessm label`` manifest:
    # shared:sentences_pseudolabeled@LABELS, or manifest:LABELS) weighs (c / mean c)^p in the CTC loss,
    # p = this value; human transcripts weigh 1. 0: off (every utterance weighs 1).
    confidence_weighting: float = 0.0


def source_draw_weights(sources: list[str], weights: dict[str, float]) -> np.ndarray:
    """Per-utterance draw probabilities ``(n,)`` for utterances of the given ``sources``: each distinct
    source gets the weight of its first matching pattern in ``weights``, split evenly over its
    utterances; empty ``weights``: uniform."""
    n = len(sources)
    if not weights or n == 0:
        return np.full(n, 1.0 / max(n, 1))
    of_source: dict[str, float] = {}
    for src in sorted(set(sources)):
        match = next((w for pat, w in weights.items() if fnmatch.fnmatchcase(src, pat)), None)
        if match is None:
            raise ValueError(
                f"[data] source_weights: no pattern matches source {src!r} (patterns: {sorted(weights)}); "
                'add one ("*" = 1 gives every other source weight 1)'
            )
        if not match >= 0:
            raise ValueError(f"[data] source_weights must be >= 0, got {match} for {src!r}")
        of_source[src] = float(match)
    count: dict[str, int] = {}
    for src in sources:
        count[src] = count.get(src, 0) + 1
    p = np.array([of_source[src] / count[src] for src in sources])
    if p.sum() <= 0:
        raise ValueError(f"[data] source_weights give every source of a pool weight 0: {sorted(of_source)}")
    return p / p.sum()


class CtcTask(Task):
    """Character CTC on sentences, single words and joined word sequences (padded batches)."""

    name = "asr"
    KINDS = ("sentence", "word", "sequence")
    static_batches = False  # padded to each batch's longest utterance

    def __init__(self, cfg: TrainConfig) -> None:
        super().__init__(cfg)
        self.data = data_config(AsrData, cfg.data)
        self.tok = CharTokenizer()
        weights = np.array([self.data.sentence_weight, self.data.word_weight, self.data.sequence_weight], float)
        if (weights < 0).any() or weights.sum() <= 0:
            raise ValueError("[data] sentence_weight, word_weight and sequence_weight must be >= 0, not all 0")
        self.weights = weights / weights.sum()
        self.warmup = round(self.data.warmup_s * SAMPLE_RATE)
        if self.warmup < 0 or self.warmup % 320:
            raise ValueError(f"[data] warmup_s={self.data.warmup_s} must be >= 0 and a multiple of 0.02 s")
        lag = self.data.distill_lag_s / 0.02
        if self.data.distill_weight < 0 or lag < 0 or abs(lag - round(lag)) > 1e-6:
            raise ValueError("[data] distill_weight must be >= 0 and distill_lag_s a multiple of 0.02 s >= 0")
        self.distill_lag = round(lag)
        if self.data.confidence_weighting < 0:
            raise ValueError(f"[data] confidence_weighting must be >= 0, got {self.data.confidence_weighting}")
        self.teacher: TeacherFeatures | None = None
        self.clip_weight: np.ndarray | None = None  # CTC loss weight per utterance ([data] confidence_weighting)
        self._prepared = False

    def model_config(self) -> dict[str, Any]:
        cfg = {**self.cfg.model, "vocab_size": len(self.tok)}
        return {**cfg, "distill_dim": TEACHER_DIM} if self.data.distill_weight > 0 else cfg

    def describe(self) -> dict[str, Any]:
        desc = {**super().describe(), "labels": list(self.tok.chars)}
        return {**desc, "warmup_samples": self.warmup} if self.warmup else desc

    def _warm(self, x: np.ndarray) -> np.ndarray:
        """``x`` after :attr:`AsrData.warmup_s` of silence."""
        return np.concatenate([np.zeros(self.warmup, np.float32), x]) if self.warmup else x

    def split(self, clip: Clip) -> str:
        return assign_split(clip, self.data.validation_pct, self.data.test_pct)

    def utterances(self) -> list[Clip]:
        """Every transcribed utterance of the recipe's sources (all splits)."""
        return [c for c in load_sources(list(self.data.sources)) if c.text and not c.text.startswith("_")]

    def packed_clips(self) -> list[Clip]:
        """The clips a data pack of this recipe holds (:mod:`edgessm.data.pack`): the transcribed training
        and validation utterances, split fixed; the held-out test speakers stay out."""
        return [replace(c, split=s) for c in self.utterances() if (s := self.split(c)) in ("train", "validation")]

    def _prepare(self) -> None:
        if self._prepared:
            return
        clips = self.utterances()
        if not clips:
            raise CorpusError("no transcribed utterances found in the data sources")
        by_split: dict[str, list[Clip]] = {"train": [], "validation": []}
        for c in clips:
            by_split.setdefault(self.split(c), []).append(c)
        self.clips = by_split["train"] + by_split["validation"]
        self.store = AudioStore([c.path for c in self.clips], progress=True, cache="auto")  # decoded once, reused
        # per split and kind: store indices of the utterances short enough to train on
        self.pool: dict[str, dict[str, list[int]]] = {s: {"sentence": [], "word": []} for s in by_split}
        for i, c in enumerate(self.clips):
            if self.store.length(i) <= self.data.max_samples:
                split = "train" if i < len(by_split["train"]) else "validation"
                self.pool[split]["sentence" if len(c.text.split()) > 1 else "word"].append(i)
        for split in ("train", "validation"):
            if not self.pool[split]["sentence"] and not self.pool[split]["word"]:
                raise CorpusError(f"no {split} utterances of at most {self.data.max_samples} samples")
        # cumulative draw probabilities per split and kind (source_weights)
        self._cdf = {
            split: {
                kind: np.cumsum(source_draw_weights([self.clips[i].source for i in idx], self.data.source_weights))
                for kind, idx in kinds.items()
            }
            for split, kinds in self.pool.items()
        }
        self.clip_weight = self._confidence_weights() if self.data.confidence_weighting else None
        self.noises = AudioStore(noise_paths(list(self.data.noise)), cache="auto") if self.data.noise else None
        # speed perturbation changes an example's length and timing, which the transcript survives but the
        # teacher's frames must follow: it is done here, before the warm-up, with the placements moved too
        augment_settings = dict(self.cfg.augment)
        self.speed_prob = float(augment_settings.pop("speed_prob", 0.0))
        self.speed_factors = tuple(float(f) for f in augment_settings.pop("speed_factors", (0.9, 1.1)))
        if not 0.0 <= self.speed_prob <= 1.0:
            raise ValueError(f"[augment] speed_prob must be in [0, 1], got {self.speed_prob}")
        if len(self.speed_factors) != 2 or not 0 < self.speed_factors[0] <= self.speed_factors[1]:
            raise ValueError(
                f"[augment] speed_factors must be [low, high] with 0 < low <= high, got {list(self.speed_factors)}"
            )
        self.augment = build_augment(augment_settings, self.noises)
        self._val = self._validation_items()
        if self.data.distill_weight > 0:
            train = self.pool["train"]["sentence"] + self.pool["train"]["word"]
            self.teacher = TeacherFeatures.for_store(self.store, train, [c.path for c in self.clips])
            if self.teacher.dim != TEACHER_DIM:
                raise ValueError(f"the teacher's frames have {self.teacher.dim} dimensions, expected {TEACHER_DIM}")
        self._prepared = True

    def _confidence_weights(self) -> np.ndarray:
        """``(len(self.clips),)`` CTC loss weight per utterance (``[data] confidence_weighting``): ``(c / mean
        c)^p`` where the teacher's confidence ``c`` is known, the mean over those utterances; 1 elsewhere."""
        from edgessm.data.label import confidences

        p = float(self.data.confidence_weighting)
        known: dict[str, float] = {}
        for spec in self.data.sources:
            kind, _, arg = spec.partition(":")
            labels = arg.partition("@")[2] if kind == "shared" else arg if kind == "manifest" else ""
            if labels:
                known.update(confidences(labels))
        c = np.array([known.get(str(Path(clip.path).resolve()), np.nan) for clip in self.clips])
        has = np.isfinite(c)
        if not has.any():
            raise ValueError(
                "[data] confidence_weighting: no source carries the teacher's confidences (use "
                "shared:sentences_pseudolabeled@LABELS or manifest:LABELS with a manifest of `edgessm label`)"
            )
        w = np.ones(len(c))
        w[has] = (np.maximum(c[has], 1e-3) / c[has].mean()) ** p
        return w

    def _compose(self, split: str, kind: str, rng: np.random.Generator) -> tuple[np.ndarray, str, list[Placement]]:
        """One utterance of ``kind`` from ``split``: ``(audio, transcript, where its stored utterances sit)``."""
        pool = self.pool[split]
        if kind == "sentence" and not pool["sentence"]:
            kind = "word"
        if kind != "sentence" and not pool["word"]:
            kind = "sentence"
        cdf = self._cdf[split]

        def draw(k: str) -> int:
            return pool[k][min(int(np.searchsorted(cdf[k], rng.random() * cdf[k][-1], side="right")), len(pool[k]) - 1)]

        if kind != "sequence":
            i = draw(kind)
            x = self.store[i]
            return x, self.clips[i].text, [Placement(i, 0, 0, len(x))]
        n = int(rng.integers(2, max(2, self.data.max_sequence) + 1))
        parts: list[np.ndarray] = []
        words: list[str] = []
        placed: list[Placement] = []
        lo, hi = self.data.pause_s
        length = 0
        for _ in range(n):
            i = draw("word")
            pause = np.zeros(int(SAMPLE_RATE * rng.uniform(lo, hi)) if parts else 0, np.float32)
            x = self.store[i]
            start, end = speech_bounds(x, -30.0, margin=800, abs_floor=1e-4)
            if parts and length + len(pause) + end - start > self.data.max_samples:
                break  # never longer than an utterance may be
            parts += [pause, x[start:end]]
            words.append(self.clips[i].text)
            placed.append(Placement(i, length + len(pause), start, end - start))
            length += len(pause) + end - start
        return np.concatenate(parts), " ".join(words), placed

    def _validation_items(self) -> list[tuple[str, np.ndarray, str]]:
        """Fixed validation examples: ``(kind, audio, transcript)``, ``val_items`` of each kind."""
        items = []
        for kind in self.KINDS:
            rng = np.random.default_rng([17, self.KINDS.index(kind)])
            pool = self.pool["validation"]
            if kind != "sequence" and not pool[kind]:
                continue
            if kind == "sequence" and not pool["word"]:
                continue
            for _ in range(self.data.val_items):
                x, text, _ = self._compose("validation", kind, rng)
                items.append((kind, self._warm(x), text))
        return items

    def _example(self, index: int, rng: np.random.Generator | None) -> dict[str, Any]:
        if rng is None:  # no seed: a deterministic draw (tests, inspection)
            rng = np.random.default_rng(index)
        kind = self.KINDS[int(rng.choice(3, p=self.weights))]
        x, text, placed = self._compose("train", kind, rng)
        if self.speed_prob and rng.random() < self.speed_prob:  # no draw when off: old recipes keep their audio
            from edgessm.data.augment import random_played_faster

            x, factor = random_played_faster(x, rng, self.speed_factors)
            placed = [p.played_faster(factor) for p in placed]
        x = self._warm(x)
        if self.augment is not None:
            x = self.augment(x, rng)
        item = {"audio": np.asarray(x, np.float32), "tokens": self.tok.encode(text), "text": text}
        if self.clip_weight is not None:  # a joined sequence weighs the mean of its parts
            item["weight"] = float(np.mean([self.clip_weight[p.index] for p in placed]))
        if self.teacher is not None:  # targets of the clean utterances, after the warm-up silence
            placed = [replace(p, out_start=p.out_start + self.warmup) for p in placed]
            item["teacher"], item["teacher_mask"] = teacher_targets(placed, len(x) // HOP, self.teacher)
        return item

    def collate(self, items):
        stride = 320
        n = max(len(it["audio"]) for it in items)
        n = math.ceil(n / stride) * stride
        audio = torch.zeros(len(items), 1, n)
        for i, it in enumerate(items):
            audio[i, 0, : len(it["audio"])] = torch.as_tensor(it["audio"])
        tokens = torch.cat([torch.as_tensor(it["tokens"], dtype=torch.long) for it in items])
        batch = {
            "audio": audio,
            "audio_lengths": torch.tensor([len(it["audio"]) for it in items]),
            "tokens": tokens,
            "token_lengths": torch.tensor([len(it["tokens"]) for it in items]),
            "texts": [it["text"] for it in items],
        }
        if all("teacher" in it for it in items):
            batch["teacher"], batch["teacher_mask"] = stack_targets(items, n // stride)
        if all("weight" in it for it in items):
            batch["weights"] = torch.tensor([it["weight"] for it in items], dtype=torch.float32)
        return batch

    def train_set(self):
        self._prepare()
        n = sum(len(v) for v in self.pool["train"].values())
        return _Items(n, self._example)

    def has_validation(self) -> bool:
        self._prepare()
        return bool(self._val)

    def _stride(self, net) -> int:
        model = getattr(net, "module", net)
        return getattr(model, "stride", getattr(getattr(model, "_orig_mod", None), "stride", 320))

    def loss(self, net, batch, progress):
        distill = "teacher" in batch
        out = net(batch["audio"], distill=True) if distill else net(batch["audio"])
        logits = (out[0] if distill else out).float()  # (B, V, F)
        stride = self._stride(net)
        skip = self.warmup // stride  # the warm-up frames are not scored
        logp = logits[..., skip:].log_softmax(1).permute(2, 0, 1)  # (F, B, V)
        frames = torch.clamp(batch["audio_lengths"] // stride - skip, max=logp.shape[0])
        if "weights" in batch:  # the weighted mean of the per-utterance losses, each per target character
            each = F.ctc_loss(logp, batch["tokens"], frames, batch["token_lengths"], blank=0, zero_infinity=True,
                              reduction="none") / batch["token_lengths"].clamp(min=1).to(logp.dtype)  # fmt: skip
            w = batch["weights"].to(each.device, each.dtype)
            loss = (w * each).sum() / w.sum().clamp(min=1e-8)
        else:
            loss = F.ctc_loss(logp, batch["tokens"], frames, batch["token_lengths"], blank=0, zero_infinity=True)
        if not distill:
            return loss, {}
        kd = distill_loss(out[1], batch["teacher"], batch["teacher_mask"], self.distill_lag)
        return loss + self.data.distill_weight * kd, {"ctc": loss.detach(), "distill": kd.detach()}

    def evaluate(self, model, device, max_batches=0):
        """Greedy-decoded WER per kind (``wer_sentence``, ``wer_word``, ``wer_sequence``), overall WER and
        CER; ``score`` is ``-cer`` (smoother than WER on a small validation set)."""
        self._prepare()
        order = sorted(range(len(self._val)), key=lambda i: len(self._val[i][1]))  # similar lengths: less padding
        errs: dict[str, list[int]] = {k: [0, 0] for k in self.KINDS}
        cerrs = chars = 0
        for b, start in enumerate(range(0, len(order), 16)):
            if max_batches and b >= max_batches:
                break
            chosen = [self._val[i] for i in order[start : start + 16]]
            batch = self.collate([{"audio": x, "tokens": self.tok.encode(t), "text": t} for _, x, t in chosen])
            ids = model(batch["audio"].to(device)).argmax(1).cpu()
            frames = batch["audio_lengths"] // self._stride(model)
            skip = self.warmup // self._stride(model)
            for k, (kind, _, ref) in enumerate(chosen):
                hyp = self.tok.greedy(ids[k, skip : frames[k]].tolist())
                errs[kind][0] += edit_distance(hyp.split(), ref.split())
                errs[kind][1] += len(ref.split())
                cerrs += edit_distance(hyp, ref)
                chars += len(ref)
        out = {f"wer_{k}": e / n for k, (e, n) in errs.items() if n}
        out["wer"] = sum(e for e, _ in errs.values()) / max(1, sum(n for _, n in errs.values()))
        out["cer"] = cerrs / max(1, chars)
        out["score"] = -out["cer"]
        return out


TASKS: dict[str, type[Task]] = {"kws": KwsTask, "denoise": DenoiseTask, "asr": CtcTask}


def build_task(cfg: TrainConfig) -> Task:
    if cfg.task not in TASKS:
        raise ValueError(f"unknown task {cfg.task!r}; choose one of {sorted(TASKS)}")
    return TASKS[cfg.task](cfg)


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
