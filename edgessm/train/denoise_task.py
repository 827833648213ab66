"""Denoising as a training task: clean speech mixed with noise, the network's mask or waveform
trained towards the clean speech (:class:`DenoiseTask`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from edgessm.data import pack
from edgessm.data.audio import SAMPLE_RATE, dynamic_range_db, speech_bounds
from edgessm.data.corpora import CorpusError
from edgessm.data.manifest import Clip, assign_split
from edgessm.data.store import AudioStore

from .config import TrainConfig
from .losses import erb_spectral_loss, multires_spectral_loss, si_sdr
from .sampler import item_rng
from .task import (
    Task,
    _crop_or_place,
    _Items,
    _resolve,
    build_denoise_mixer,
    data_config,
    load_sources,
    noise_paths,
    ramp,
)

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
    # Gain error in decibels: mean |dB(g) - dB(t)| over the units, both floored at `mask_db_floor`, divided by the
    # floor's depth. The compressed MSE above barely tells -20 dB from -40 dB (sqrt gains 0.32 and 0.1): denoise v8's
    # gains on noise-dominated units sit at a mean -28 dB where the ideal mask's is -40 dB and RNNoise's output
    # also -40, and the noise that is left costs DNSMOS SIG as well as BAK (`tools/denoise_gain_study.py`).
    mask_db_weight: float = 0.0
    mask_db_floor: float = -40.0
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


def _floored_db(gains: Tensor, floor_db: float) -> Tensor:
    """``20 log10(gains)``, no lower than ``floor_db`` (no gradient below it)."""
    return 20 * torch.log10(gains.clamp_min(10 ** (floor_db / 20)))


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
        if self.data.mask_db_weight:
            if not self.data.mask_weight:
                raise ValueError("data.mask_db_weight scores the gains against the ideal mask: needs data.mask_weight")
            if not self.data.mask_db_floor < 0:
                raise ValueError(f"data.mask_db_floor must be below 0 dB, got {self.data.mask_db_floor}")
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
        # validation pairs: the held-out noise recording, the same SNR/level mixing, no masking, reverb or channel
        plain = {"mask_prob": 0.0, "reverb_prob": 0.0, "channel_prob": 0.0}
        self.mix_val = build_denoise_mixer({**self.cfg.augment, **plain})
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
            if self.data.mask_db_weight:
                floor = self.data.mask_db_floor
                gap = (_floored_db(gains.float(), floor) - _floored_db(target, floor)).abs()
                mask_db = (gap * valid).sum() / valid.sum().clamp_min(1.0) / -floor
                parts["mask_db"] = mask_db.detach()
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
        total = self.data.wave_weight * wave
        parts["wave"] = wave.detach()
        if self.data.spectral_weight:  # off: no STFTs of the batch at all (~15% of a CPU step)
            spec = erb_spectral_loss(est[:, 0], ref[:, 0])
            total = total + self.data.spectral_weight * ramp(progress) * spec
            parts["spec"] = spec.detach()
        if self.data.mask_weight:
            total = total + self.data.mask_weight * mask
            if self.data.mask_db_weight:
                total = total + self.data.mask_db_weight * mask_db
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
