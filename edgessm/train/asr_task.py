"""Speech recognition as a training task: CTC over characters on sentences, words and joined word
sequences, optionally distilled from the teacher's encoder (:class:`CtcTask`)."""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from edgessm.data.audio import SAMPLE_RATE, speech_bounds
from edgessm.data.corpora import CorpusError
from edgessm.data.manifest import Clip, assign_split
from edgessm.data.store import AudioStore
from edgessm.data.text import CharTokenizer, edit_distance

from .config import TrainConfig
from .distill import HOP, TEACHER_DIM, Placement, TeacherFeatures, distill_loss, stack_targets, teacher_targets
from .task import (
    Task,
    _Items,
    build_augment,
    data_config,
    load_sources,
    noise_paths,
)

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
    # Batches of one shape (> 0): all examples of a step are of one kind, its sentences from one of this
    # many length buckets (equal shares of the draw weight) and its joined sequences of one word count, so a
    # padded batch is mostly speech. Over a run every utterance is drawn as often as without it (a bucket is
    # drawn by its weight, an utterance in it by its own). 0: every example drawn on its own.
    length_buckets: int = 0


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


def _pick(cdf: np.ndarray, rng: np.random.Generator) -> int:
    """A position drawn by the weights whose running sum is ``cdf``."""
    return min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")), len(cdf) - 1)


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
        self._buckets = {split: self._length_buckets(kinds["sentence"]) for split, kinds in self.pool.items()}
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

    def _length_buckets(self, sentences: list[int]) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
        """``(bucket draw probabilities, positions in the sentence pool per bucket, their cumulative weights)``:
        the pool sorted by length and cut into ``length_buckets`` runs of about equal draw weight (none when 0
        or no sentences)."""
        n = self.data.length_buckets
        if n < 0:
            raise ValueError(f"[data] length_buckets must be >= 0 (0: off), got {n}")
        if not n or not sentences:
            return np.ones(0), [], []
        w = source_draw_weights([self.clips[i].source for i in sentences], self.data.source_weights)
        order = np.argsort([self.store.length(i) for i in sentences], kind="stable")
        edges = np.searchsorted(np.cumsum(w[order]) / w.sum(), np.arange(1, n) / n, side="right")
        runs = [r for r in np.split(order, edges) if len(r)]
        p = np.array([w[r].sum() for r in runs])
        return p / p.sum(), runs, [np.cumsum(w[r]) for r in runs]

    def _shape(self, split: str, group: np.random.Generator) -> tuple[str, int | None, int | None]:
        """One batch's shape, drawn from its step's generator: ``(kind, sentence bucket, sequence words)``."""
        kind = self.KINDS[int(group.choice(3, p=self.weights))]
        p, runs, _ = self._buckets[split]
        bucket = int(group.choice(len(runs), p=p)) if kind == "sentence" and runs else None
        words = int(group.integers(2, max(2, self.data.max_sequence) + 1)) if kind == "sequence" else None
        return kind, bucket, words

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

    def _compose(self, split: str, kind: str, rng: np.random.Generator, bucket: int | None = None,
                 words: int | None = None) -> tuple[np.ndarray, str, list[Placement]]:  # fmt: skip
        """One utterance of ``kind`` from ``split``: ``(audio, transcript, where its stored utterances sit)``;
        a sentence from length bucket ``bucket`` and a sequence of ``words`` words where given."""
        pool = self.pool[split]
        if kind == "sentence" and not pool["sentence"]:
            kind = "word"
        if kind != "sentence" and not pool["word"]:
            kind = "sentence"
        cdf = self._cdf[split]

        def draw(k: str) -> int:
            return pool[k][_pick(cdf[k], rng)]

        if kind != "sequence":
            if kind == "sentence" and bucket is not None:  # positions in the pool, each by its own weight
                run, run_cdf = self._buckets[split][1][bucket], self._buckets[split][2][bucket]
                i = pool["sentence"][int(run[_pick(run_cdf, rng)])]
            else:
                i = draw(kind)
            x = self.store[i]
            return x, self.clips[i].text, [Placement(i, 0, 0, len(x))]
        n = words if words is not None else int(rng.integers(2, max(2, self.data.max_sequence) + 1))
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

    def _example(self, index: int, rng: np.random.Generator | None,
                 group: np.random.Generator | None = None) -> dict[str, Any]:  # fmt: skip
        """One training example; ``group``: its step's generator, from which the batch's shape is drawn
        (``length_buckets``; the trainer's grouped sampler passes it)."""
        if rng is None:  # no seed: a deterministic draw (tests, inspection)
            rng = np.random.default_rng(index)
        if group is not None and self.data.length_buckets:
            kind, bucket, words = self._shape("train", group)
            x, text, placed = self._compose("train", kind, rng, bucket, words)
        else:
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
        return _Items(n, self._example, grouped=self.data.length_buckets > 0)

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
