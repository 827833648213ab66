"""Keyword spotting as a training task: clip classification over the recipe's words with streaming
context, hard negatives and frame-level targets (:class:`KwsTask`); its validation (:func:`classify_dataset`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from edgessm.data.audio import SAMPLE_RATE, speech_bounds, speech_span
from edgessm.data.augment import set_active_level
from edgessm.data.corpora import CorpusError
from edgessm.data.labels import SILENCE, UNKNOWN, task_labels
from edgessm.data.manifest import Clip, assign_split
from edgessm.data.noise import MusicBank, music_like
from edgessm.data.store import AudioStore
from edgessm.eval.backgrounds import keyword_free, sounds_like_keywords, stream_background_speaker

from .config import TrainConfig
from .device_mix import DeviceMixer, mix_fields
from .mined import read_mined_lists
from .sampler import item_rng
from .task import (
    MINED_SOURCE,
    Task,
    _crop_or_place,
    _DrawClip,
    _Items,
    _pack_clips,
    build_augment,
    data_config,
    load_sources,
    noise_paths,
)

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
    # (A list of CSVs joins them: the same moment found by two models counts once.)
    mined_negatives: str | tuple[str, ...] = ""
    mined_fraction: float = 0.0
    # Speech levels (dBFS, the active level: :func:`active_level_dbfs`). Empty: each recording at its own level
    # (+- the augmentation's gain). Speech Commands clips span -35..-13 dBFS, read sentences only -25..-18, so
    # loud speech was nearly always a keyword (kws35 v14: 3.5 false accepts per hour on running read speech at
    # everyday levels, 21 at a close microphone's). A range here sets every training keyword, non-keyword word,
    # sentence window, mined spot and context talker to a level uniform in it, before augmentation: level alone
    # no longer tells a keyword from other speech.
    level_dbfs: tuple[float, ...] = ()
    # Per-word draws of the recorded training clips (``{"no": 2}``: each recorded clip of *no* twice per pass, and
    # twice as likely as a context keyword), times ``real_repeats``. Speech Commands has about half as many
    # clips and speakers for no, go, left and right (~900, 640 speakers) as for the other six commands (~2,100,
    # 1,080): with a uniform draw the network learns those four as half as likely a priori (recipe kws_v12 draws them
    # twice: more left and right caught, not more no, about half of whose misses name another keyword).
    word_repeats: dict[str, int] = field(default_factory=dict)
    # Distillation from a trained keyword spotter (``distill_model``: a shipped name, model folder or finished
    # run, with this task's labels and frame rate): at every frame of every example the network also learns the
    # teacher's posteriors, softened by ``distill_temperature``, with weight ``distill_weight`` (Hinton et al.
    # 2015: ``T^2`` times the Kullback-Leibler divergence of the softened distributions). The teacher hears the
    # same augmented audio; it costs one forward pass of it per step. A small network (kws35-es) can learn from a
    # larger one (kws35) what its hard labels do not say: how alike words sound, and where the larger one stays
    # silent. Measured (recipe kws_es_v6): the student caught more, but fired as often as without a teacher: soft
    # targets do not replace the student's own mined negatives.
    distill_model: str = ""
    distill_weight: float = 0.0
    distill_temperature: float = 2.0
    # The teacher's peaks (with ``distill_model``): the stream decision fires on a keyword's highest posterior,
    # and a false peak is a few frames of an example, which the frame-averaged term above weighs little (the
    # student of kws_es_v6 peaked at a median 0.42 where kws35 stayed under 0.1: tools/kws_spot_study.py). With
    # ``distill_peak_weight`` each example also adds, summed over the keywords, the binary cross-entropy of the
    # student's highest posterior of the keyword over the example's frames against the teacher's
    # (:meth:`KwsTask.peak_loss`): a peak the teacher does not have is pushed down where it stands.
    distill_peak_weight: float = 0.0


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
        if self.data.level_dbfs and (len(self.data.level_dbfs) != 2 or not
                                     -80 <= self.data.level_dbfs[0] <= self.data.level_dbfs[1] <= 0):  # fmt: skip
            raise ValueError(f"data.level_dbfs must be [low, high] dBFS with -80 <= low <= high <= 0, "
                             f"got {list(self.data.level_dbfs)}")  # fmt: skip
        strange = sorted(set(self.data.word_repeats) - set(labels) - {UNKNOWN, SILENCE})
        if strange:
            raise ValueError(f"data.word_repeats names {strange}, which are not words of '{self.data.words}'")
        low = {w: n for w, n in self.data.word_repeats.items() if not (isinstance(n, int) and n >= 1)}
        if low:
            raise ValueError(f"data.word_repeats must be whole numbers >= 1, got {low}")
        if self.data.distill_weight < 0 or self.data.distill_peak_weight < 0 or self.data.distill_temperature <= 0:
            raise ValueError(f"data.distill_weight and data.distill_peak_weight must be >= 0 and "
                             f"data.distill_temperature > 0, got {self.data.distill_weight}, "
                             f"{self.data.distill_peak_weight}, {self.data.distill_temperature}")  # fmt: skip
        for key in ("distill_weight", "distill_peak_weight"):
            if getattr(self.data, key) > 0 and not self.data.distill_model:
                raise ValueError(f"data.{key} > 0 needs data.distill_model (a shipped keyword spotter such as "
                                 "'kws35', a model folder or a finished training run)")  # fmt: skip
        self._teachers: dict[str, nn.Module] = {}  # the distillation teacher per device, loaded at its first use
        self._prepared = False
        self._deferred: int | None = None  # with device mixing: the batch's microphone sections (device_mixer)

    def _leveled(self, x: np.ndarray, r: np.random.Generator) -> np.ndarray:
        """``x`` at an active level uniform in ``level_dbfs`` (unchanged, and no draw, when that is empty)."""
        if not self.data.level_dbfs:
            return x
        return set_active_level(x, r.uniform(*self.data.level_dbfs))

    def _talker_range(self) -> tuple[float, float]:
        """The RMS levels (dBFS) of the talkers and keywords in an example's context."""
        return tuple(self.data.level_dbfs) if self.data.level_dbfs else (-35.0, -15.0)

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
        self._clip_max = self.data.clip_samples * 2  # the store keeps at most this much of a clip (its loudest part)
        self.store = AudioStore([c.path for c, _ in all_clips], max_samples=self._clip_max, progress=True, cache="auto")
        self.n_train = len(splits["train"])
        self.noises = AudioStore(noise_paths(list(self.data.noise)), cache="auto") if self.data.noise else None
        wants_sentences = self.data.context_prob > 0 or self.data.sentence_negatives > 0 or self.data.sentence_babble
        if wants_sentences and not sentences:
            raise CorpusError("context_prob / sentence_negatives / sentence_babble need keyword-free sentences in "
                              "the sources (the synthetic corpus has them: synth:default)")  # fmt: skip
        self.sentences = AudioStore(sentences, progress=True, cache="auto") if wants_sentences else None
        self._sentence_paths = sentences if wants_sentences else []
        babble = _DrawClip(self.sentences) if self.data.sentence_babble else None
        pieces = self.data.music_pieces
        self.music = MusicBank(pieces, seed=self.cfg.train.seed, cache=True) if pieces else None
        self.augment = build_augment(self.cfg.augment, self.noises, babble_speech=babble, music=self.music)
        self.unknown_train = [i for i, (_, lab) in enumerate(splits["train"]) if self.labels[lab] == UNKNOWN]
        self.keyword_train = [i for i, (c, lab) in enumerate(splits["train"])
                              if self.labels[lab] not in (UNKNOWN, SILENCE)
                              for _ in range(self._word_draws(c, lab, real_repeats=1))]  # fmt: skip
        net = self.build_model()  # the head's window in samples (frames x stride; 0: the whole example)
        self.window_samples = max(0, net.cfg.window) * net.stride or self.data.clip_samples
        # the training pass in item order; recorded clips repeated (silence and hard negatives follow it)
        self.train_order = [i for i, (c, lab) in enumerate(splits["train"])
                            for _ in range(self._word_draws(c, lab, self.data.real_repeats))]  # fmt: skip
        self._prepare_mined(clips, splits["train"])
        self._prepared = True

    def _word_draws(self, clip: Clip, label: int, real_repeats: int) -> int:
        """How many times a training clip is drawn per pass: synthetic once, recorded ``real_repeats`` times
        ``word_repeats`` of its word."""
        if clip.source.startswith("synth"):
            return 1
        return real_repeats * self.data.word_repeats.get(self.labels[label], 1)

    def _prepare_mined(self, sentences: list[Clip], train: list[tuple[Clip, int]]) -> None:
        """The mined negatives (``mined_negatives``) and where their recordings are decoded."""
        self.mined: list = []
        if self.data.mined_fraction < 0:
            raise ValueError(f"data.mined_fraction must be >= 0, got {self.data.mined_fraction}")
        if not self.data.mined_negatives:
            if self.data.mined_fraction > 0:
                raise ValueError("data.mined_fraction > 0 needs data.mined_negatives (a CSV of `edgessm mine`)")
            return
        if UNKNOWN not in self.labels:
            raise ValueError("mined negatives are _unknown_ examples; this recipe has no _unknown_ class")
        self.mined = read_mined_lists(self.data.mined_negatives)
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
        # Mined recordings are keyword-free training speech, which the sentences' store and the clips' store
        # (an _unknown_ clip it holds whole) hold decoded already: a list mined anew for each sitting adds no
        # second decoded copy of them (and no cache of its own). A new store takes the rest (e.g. a long clip
        # the clips' store keeps only the loudest part of).
        paths = sorted({m.path for m in self.mined})
        held: dict[str, tuple[AudioStore, int]] = {}
        for i, path in enumerate(self._sentence_paths):
            held.setdefault(path, (self.sentences, i))
        for i, (clip, _) in enumerate(train):  # the clips' store holds the training clips first, in this order
            if clip.path not in held and self.store.length(i) < self._clip_max:
                held[clip.path] = (self.store, i)
        rest = [p for p in paths if p not in held]
        other = AudioStore(rest, progress=True, cache="auto") if rest else None
        where = {p: held[p] for p in paths if p in held}
        where.update({p: (other, i) for i, p in enumerate(rest)})
        self.mined_clip = [where[m.path] for m in self.mined]  # (store, index) of each spot's recording

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
                    rms = np.sqrt(np.mean(x**2))
                else:  # a sentence at its whole level, only the part that fits converted
                    i = int(r.integers(len(self.sentences)))
                    x, rms = self.sentences.slice(i, 0, n - pos), self.sentences.rms(i)
                x = x[: n - pos] * 10 ** (r.uniform(*self._talker_range()) / 20) / (rms + 1e-6)
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
        gain = 10 ** (r.uniform(*self._talker_range()) / 20) / (np.sqrt(np.mean(x**2)) + 1e-6)
        out[start : start + len(x)] += x * gain
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
            if split == "train":
                x = self._leveled(x, r)
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
        if rng is not None and split == "train":
            x = self._leveled(x, rng)
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
        (store, clip), length = self.mined_clip[k], self.data.clip_samples
        total = self.data.context_samples + length
        end = round((self.mined[k].time_s + r.uniform(0.05, 0.3)) * SAMPLE_RATE)
        x = np.zeros(total, np.float32)
        part = store.slice(clip, end - total, end)  # silence before the recording (and after it)
        start = max(0, total - end)
        x[start : start + len(part)] = part
        x = self._leveled(x, r)
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

    def teacher(self, device: torch.device) -> nn.Module:
        """The distillation teacher (``distill_model``) on ``device``, in eval mode, frozen; checked against this
        task's labels when first loaded."""
        key = str(device)
        if key not in self._teachers:
            from edgessm.deploy.load import load_trained

            net, desc = load_trained(self.data.distill_model)
            labels = list(desc.get("labels", []))
            if desc.get("network") != "kws" or labels != self.labels:
                raise ValueError(
                    f"data.distill_model {self.data.distill_model!r} is not a keyword spotter of this "
                    f"task's {len(self.labels)} labels (it has {len(labels)}: {labels[:4]}...)"
                )
            for p in net.parameters():
                p.requires_grad_(False)
            self._teachers[key] = net.eval().to(device)
        return self._teachers[key]

    def teacher_frames(self, frames: Tensor, audio: Tensor) -> Tensor:
        """The teacher's frame logits ``(B, C, F)`` for ``audio``, checked against the student's ``frames``."""
        teacher = self.teacher(frames.device)
        with torch.no_grad():
            target = teacher(audio, all_frames=True).float()
        if target.shape != frames.shape:
            raise ValueError(
                f"data.distill_model gives {tuple(target.shape)} frame logits where this network gives "
                f"{tuple(frames.shape)}: teacher and student must share labels and frame rate"
            )
        return target

    def distill_loss(self, frames: Tensor, audio: Tensor, target: Tensor | None = None) -> Tensor:
        """``T^2 KL(teacher || student)`` of the softened posteriors, averaged over every frame of every example;
        ``frames`` the student's logits ``(B, C, F)`` for ``audio`` (``target``: the teacher's, if already run)."""
        if target is None:
            target = self.teacher_frames(frames, audio)
        t = self.data.distill_temperature
        log_q = F.log_softmax(target / t, dim=1)
        log_p = F.log_softmax(frames / t, dim=1)
        kl = (log_q.exp() * (log_q - log_p)).sum(1)  # (B, F)
        return kl.mean() * t * t

    def peak_loss(self, frames: Tensor, target: Tensor) -> Tensor:
        """The keyword peaks' binary cross-entropy (``distill_peak_weight``): per example and keyword ``k``, the
        student's peak ``m_k = max_f p_k(f)`` against the teacher's ``q_k`` (posteriors at temperature 1),
        ``-(q_k log m_k + (1 - q_k) log(1 - m_k))``, summed over the keywords and averaged over the examples.
        ``frames``, ``target``: student and teacher logits ``(B, C, F)``. Its gradient reaches each keyword's
        highest frame only; it is smallest where ``m = q``."""
        keywords = ~_negative_classes(tuple(self.labels), frames.device)
        log_m = F.log_softmax(frames, dim=1)[:, keywords].amax(-1)  # (B, K): log of each keyword's peak
        q = F.softmax(target, dim=1)[:, keywords].amax(-1)
        log_not_m = torch.log1p(-log_m.exp().clamp(max=1 - 1e-6))
        return -(q * log_m + (1 - q) * log_not_m).sum(1).mean()

    def loss(self, net, batch, progress):
        distill = self.data.distill_weight > 0 or self.data.distill_peak_weight > 0
        if self.data.frame_loss <= 0 and not distill:
            logits = net(batch["audio"])
            loss = F.cross_entropy(logits.float(), batch["label"])
            acc = (logits.argmax(-1) == batch["label"]).float().mean()
            return loss, {"acc": acc}  # tensors: read at log steps only (no host sync per step)
        frames = net(batch["audio"], all_frames=True).float()  # (B, C, F)
        logits = frames[..., -1]  # the clip decision, as without frame supervision
        clip_loss = F.cross_entropy(logits, batch["label"])
        acc = (logits.argmax(-1) == batch["label"]).float().mean()
        extra: dict[str, Tensor] = {}
        if distill:
            target = self.teacher_frames(frames, batch["audio"])
            if self.data.distill_weight > 0:
                kd = self.distill_loss(frames, batch["audio"], target)
                clip_loss = clip_loss + self.data.distill_weight * kd
                extra["distill"] = kd.detach()
            if self.data.distill_peak_weight > 0:
                peak = self.peak_loss(frames, target)
                clip_loss = clip_loss + self.data.distill_peak_weight * peak
                extra["peak"] = peak.detach()
        if self.data.frame_loss <= 0:
            return clip_loss, {"acc": acc, **extra}
        bg, pos = frame_targets(batch, self.labels, int(_unwrap(net).stride), frames.shape[-1])
        logp = F.log_softmax(frames, dim=1)
        background = [self.labels.index(c) for c in (UNKNOWN, SILENCE) if c in self.labels]
        bg_logp = torch.logsumexp(logp[:, background], dim=1)  # (B, F): log P(no keyword)
        kw_logp = logp.gather(1, batch["label"].to(frames.device)[:, None, None].expand(-1, 1, frames.shape[-1]))[:, 0]
        bg_loss = -(bg_logp * bg).sum() / bg.sum().clamp_min(1)
        pos_loss = -(kw_logp * pos).sum() / pos.sum().clamp_min(1)
        loss = clip_loss + self.data.frame_loss * (bg_loss + pos_loss)
        fires = ((bg_logp.exp() < 0.5) & (bg > 0)).float().sum() / bg.sum().clamp_min(1)
        return loss, {"acc": acc, "bg_loss": bg_loss.detach(), "pos_loss": pos_loss.detach(), "bg_fire": fires, **extra}

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
