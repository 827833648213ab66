"""Recognizer evaluation: WER, CER and single-thread RTF of our streaming graph and of pocketsphinx on
the same held-out audio in one run, plus the streaming latencies (torch-free).

Test sets (:func:`test_set`), none of them ever trained on:

- ``synth-sentences`` / ``synth-words``: the synthetic corpus's test voices (their own split);
- ``real-sentences``: the read-speech speakers the recipes hold out for test (``test_pct``);
- ``fsdd-digits``: real spoken digits, FSDD's own test split (6 speakers, 8 kHz; the recipes train on
  its train split only);
- ``fsdd-strings``: 3-5 of those test digits of one speaker joined with pauses ("four one nine");
- ``sc-test``: real Speech Commands test words (the evaluation-only half of the official test set);
- ``real-sentences-quiet``, ``sc-test-quiet``: those sets ``QUIET_DB`` (20 dB) quieter, as a quiet microphone
  or a distant talker gives them (what the graph's input level control, ``edgessm.runtime.level``, is for);
- ``real-stream``: the ``real-sentences`` joined into streams of ``STREAM_UTTERANCES`` with
  ``STREAM_PAUSE_S`` of silence between them, each scored as one utterance. The recogniser keeps its
  state across a stream as it does on a long file or a live microphone, while training utterances
  start after 0.6 s of silence and last at most 8 s; this set shows what that costs (compare its WER
  with ``real-sentences``).

Systems: ``ours`` (the graph, streamed in 100 ms blocks through :class:`~edgessm.runtime.transcriber.Transcriber`
with greedy CTC), its int8 twin when it ships, ``pocketsphinx`` (its en-us acoustic model and general
3-gram LM) and, on the closed-vocabulary sets, both told exactly the set's words: ``ours words`` (final
results decoded over the vocabulary, ``transcribe --words``) and ``pocketsphinx grammar`` (a JSGF
grammar: pocketsphinx's own turf). On the sets of single words both are told that too: one word per
clip (``transcribe --words ... --one-word``; a grammar without the loop); on digit strings, one or more.

Latency (:func:`latencies`): every sentence is fed as a live stream followed by silence; *first
token* is the stream time from the speech onset to the first decoded character, *final* is the time
from the end of speech to the segment becoming final (the endpointer's pause plus the decoder's lag).
Both are algorithmic (stream time); the compute per 20 ms chunk is reported beside them.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from edgessm.data.audio import SAMPLE_RATE, load_audio, speech_bounds, speech_span
from edgessm.data.corpora import normalize_text, shared_fsdd, shared_read_speech, shared_sc_test, synth_manifest
from edgessm.data.labels import SC35_WORDS, SILENCE
from edgessm.data.manifest import Clip, assign_split, read_manifest
from edgessm.data.text import edit_distance

SETS = (
    "synth-sentences",
    "synth-words",
    "real-sentences",
    "real-stream",
    "fsdd-digits",
    "fsdd-strings",
    "sc-test",
    "real-sentences-quiet",
    "sc-test-quiet",
)
CLOSED = ("synth-words", "fsdd-digits", "fsdd-strings", "sc-test", "sc-test-quiet")  # a known small vocabulary
QUIET_DB = -20.0  # the ``-quiet`` sets: the same recordings this much quieter (a quiet microphone)
STREAM_UTTERANCES = 10  # sentences per joined stream (real-stream)
STREAM_PAUSE_S = 1.5  # silence between them: longer than the endpointer's pause, so each ends a segment
DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")

Progress = Callable[[Iterable, str], Iterable]


def _no_progress(items, desc):
    return items


@dataclass
class Utterance:
    name: str
    audio: np.ndarray  # (T,) float32 at 16 kHz
    text: str  # normalised reference


def _sample(clips: Sequence[Clip], n: int, seed: int) -> list[Clip]:
    """``n`` clips spread over the words (round robin over a shuffled order), deterministic."""
    rng = np.random.default_rng(seed)
    by_word: dict[str, list[Clip]] = {}
    for c in sorted(clips, key=lambda c: c.path):
        by_word.setdefault(c.text, []).append(c)
    for v in by_word.values():
        rng.shuffle(v)
    out, words = [], sorted(by_word)
    while len(out) < n and any(by_word.values()):
        for w in words:
            if by_word[w] and len(out) < n:
                out.append(by_word[w].pop())
    return out


def _clips(clips: Iterable[Clip]) -> list[Utterance]:
    return [Utterance(c.path, load_audio(c.path, SAMPLE_RATE)[0], normalize_text(c.text)) for c in clips]


def test_set(name: str, limit: int = 0, seed: int = 0) -> list[Utterance]:
    """The utterances of test set ``name`` (see the module docstring); ``limit``: at most that many."""
    if name in ("synth-sentences", "synth-words"):
        clips = [c for c in read_manifest(synth_manifest("default")) if c.split == "test" and c.text]
        if name == "synth-sentences":
            picked = sorted((c for c in clips if len(c.text.split()) > 1), key=lambda c: c.path)
        else:
            picked = _sample([c for c in clips if len(c.text.split()) == 1], limit or 300, seed)
        return _clips(picked[: limit or None])
    if name == "real-sentences":
        clips = [c for c in shared_read_speech() if assign_split(c, 10.0, 10.0) == "test"]
        return _clips(sorted(clips, key=lambda c: c.path)[: limit or None])
    if name == "real-stream":
        return joined_streams(test_set("real-sentences"), STREAM_UTTERANCES, STREAM_PAUSE_S)[: limit or None]
    if name == "fsdd-digits":
        return _clips(_sample(_fsdd_test(), limit or 300, seed))
    if name == "fsdd-strings":
        return fsdd_strings(limit or 100, seed)
    if name == "sc-test":
        return _clips(_sample([c for c in shared_sc_test() if c.text != SILENCE], limit or 400, seed))
    if name.endswith("-quiet") and name.removesuffix("-quiet") in SETS:
        k = 10 ** (QUIET_DB / 20)
        return [replace(u, audio=(u.audio * k).astype(np.float32)) for u in test_set(name.removesuffix("-quiet"),
                                                                                      limit, seed)]  # fmt: skip
    raise ValueError(f"unknown test set {name!r}; choose from {', '.join(SETS)}")


def joined_streams(utterances: Sequence[Utterance], per_stream: int, pause_s: float) -> list[Utterance]:
    """Consecutive groups of ``per_stream`` utterances, each group one stream with ``pause_s`` of
    silence between its utterances (and none at its ends); the reference is their texts in order."""
    pause = np.zeros(round(pause_s * SAMPLE_RATE), np.float32)
    out = []
    for start in range(0, len(utterances), per_stream):
        group = utterances[start : start + per_stream]
        parts = [p for u in group for p in (pause, u.audio)][1:]
        out.append(Utterance(f"stream{len(out)}", np.concatenate(parts), " ".join(u.text for u in group)))
    return out


def _fsdd_test() -> list[Clip]:
    """FSDD's own test split (recordings 0-4 of every digit and speaker), which the recipes never train on."""
    return [c for c in shared_fsdd() if c.split == "test"]


def fsdd_strings(n: int, seed: int = 0) -> list[Utterance]:
    """``n`` digit strings: 3-5 clips of one FSDD speaker joined with 0.15-0.4 s pauses."""
    rng = np.random.default_rng(seed)
    by_speaker: dict[str, list[Clip]] = {}
    for c in sorted(_fsdd_test(), key=lambda c: c.path):
        by_speaker.setdefault(c.speaker, []).append(c)
    speakers = sorted(by_speaker)
    out = []
    for i in range(n):
        pool = by_speaker[speakers[i % len(speakers)]]
        picked = [pool[int(k)] for k in rng.choice(len(pool), size=int(rng.integers(3, 6)), replace=False)]
        parts = []
        for k, c in enumerate(picked):
            if k:
                parts.append(np.zeros(int(SAMPLE_RATE * rng.uniform(0.15, 0.4)), np.float32))
            parts.append(speech_span(load_audio(c.path, SAMPLE_RATE)[0], margin=800))
        out.append(Utterance(f"fsdd-string-{i}", np.concatenate(parts), " ".join(c.text for c in picked)))
    return out


def vocabulary(name: str, utterances: Sequence[Utterance] = ()) -> list[str]:
    """The words a closed-vocabulary set can contain (for grammars): the digits, the 35 Speech Commands
    words, the synthetic corpus's single words; else the words of ``utterances``."""
    if name in ("fsdd-digits", "fsdd-strings"):
        return list(DIGITS)
    if name in ("sc-test", "sc-test-quiet"):
        return sorted(SC35_WORDS)
    if name == "synth-words":
        clips = read_manifest(synth_manifest("default"))
        return sorted({c.text for c in clips if c.text and len(c.text.split()) == 1})
    return sorted({w for u in utterances for w in u.text.split()})


# --- systems ------------------------------------------------------------------------------------


class GraphRecognizer:
    """Our exported graph, streamed in 100 ms blocks as a live input would be."""

    def __init__(self, model, block_s: float = 0.1, vocabulary: Sequence[str] | None = None,
                 one_word: bool = False, rescorer=None) -> None:  # fmt: skip
        self.model = model
        self.rescorer = rescorer
        self.block = int(block_s * SAMPLE_RATE)
        self.vocabulary = list(vocabulary) if vocabulary else None
        self.one_word = one_word

    def __call__(self, audio: np.ndarray) -> str:
        from edgessm.runtime.transcriber import Transcriber

        rec = Transcriber(self.model, vocabulary=self.vocabulary, one_word=self.one_word, rescorer=self.rescorer)
        segs = []
        for pos in range(0, len(audio), self.block):
            segs += rec.accept_waveform(SAMPLE_RATE, audio[pos : pos + self.block])
        segs += rec.finish()
        return " ".join(s.text for s in segs if s.text)


class PocketSphinx:
    """pocketsphinx 5 (its bundled en-us model): the general LM, or a JSGF grammar of ``words``: one
    or more of them, or exactly one with ``one_word`` (a loop over ~700 words takes ~1 min per clip)."""

    def __init__(self, words: Sequence[str] | None = None, one_word: bool = False) -> None:
        try:
            from pocketsphinx import Decoder
        except ImportError as e:
            hint = "pip install -c constraints.txt '.[peers]'"
            raise RuntimeError(f"pocketsphinx is not installed ({e}); {hint}") from None
        if words:
            loop = "" if one_word else "+"
            grammar = f"#JSGF V1.0;\ngrammar words;\npublic <utt> = ( {' | '.join(words)} ){loop};\n"
            self.decoder = Decoder(samprate=SAMPLE_RATE, loglevel="FATAL")
            self.decoder.add_jsgf_string("words", grammar)
            self.decoder.activate_search("words")
        else:
            self.decoder = Decoder(samprate=SAMPLE_RATE, loglevel="FATAL")

    def __call__(self, audio: np.ndarray) -> str:
        pcm = (np.clip(audio, -1, 1) * 32767).astype(np.int16).tobytes()
        d = self.decoder
        d.start_utt()
        d.process_raw(pcm, full_utt=True)
        d.end_utt()
        hyp = d.hyp()
        return normalize_text(hyp.hypstr) if hyp is not None else ""


class WhisperTiny:
    """Whisper tiny.en (27M parameters, int8 on the CPU, one thread, greedy): the offline teacher of
    ``edgessm label``, scored as a peer. Not streaming: it hears each utterance whole (30 s windows), and
    its text is spelled out in our alphabet (numbers as words) before scoring."""

    def __init__(self) -> None:
        from edgessm.data.teacher import TeacherError, WhisperTeacher

        try:
            self.teacher = WhisperTeacher(threads=1)
        except TeacherError as e:
            raise RuntimeError(str(e)) from None

    def __call__(self, audio: np.ndarray) -> str:
        return self.teacher.transcribe(audio).text


@dataclass
class SetResult:
    system: str
    set: str
    word_errors: int = 0
    words: int = 0
    char_errors: int = 0
    chars: int = 0
    sentences_wrong: int = 0
    utterances: int = 0
    busy_s: float = 0.0
    audio_s: float = 0.0
    examples: list[tuple[str, str]] = field(default_factory=list)  # (reference, hypothesis), the first few
    heard_as: dict[str, Counter[str]] = field(default_factory=dict)  # one-word references: word -> hypotheses

    @property
    def wer(self) -> float:
        return self.word_errors / max(1, self.words)

    @property
    def cer(self) -> float:
        return self.char_errors / max(1, self.chars)

    @property
    def per_word(self) -> dict[str, list[int]]:
        """One-word references: word -> [clips heard exactly, clips]."""
        return {w: [h[w], h.total()] for w, h in sorted(self.heard_as.items())}

    @property
    def heard_instead(self) -> dict[str, dict[str, int]]:
        """One-word references: word -> the wrong hypotheses (``""``: nothing) and their counts, most often first."""
        wrong = {w: [(hyp, k) for hyp, k in h.items() if hyp != w] for w, h in sorted(self.heard_as.items())}
        return {w: dict(sorted(hk, key=lambda x: (-x[1], x[0]))) for w, hk in wrong.items() if hk}

    @property
    def rtf(self) -> float:
        return self.busy_s / self.audio_s if self.audio_s else float("nan")

    def add(self, ref: str, hyp: str, busy_s: float, audio_s: float) -> None:
        self.word_errors += edit_distance(hyp.split(), ref.split())
        self.words += len(ref.split())
        self.char_errors += edit_distance(hyp, ref)
        self.chars += len(ref)
        self.sentences_wrong += hyp != ref
        self.utterances += 1
        self.busy_s += busy_s
        self.audio_s += audio_s
        if len(self.examples) < 5:
            self.examples.append((ref, hyp))
        if len(ref.split()) == 1:
            self.heard_as.setdefault(ref, Counter())[hyp] += 1

    def summary(self) -> dict:
        return {"system": self.system, "set": self.set, "wer": self.wer, "cer": self.cer,
                "utterance_error_rate": self.sentences_wrong / max(1, self.utterances), "utterances": self.utterances,
                "words": self.words, "rtf": self.rtf, "audio_s": self.audio_s, "examples": self.examples,
                "per_word": self.per_word, "heard_instead": self.heard_instead}  # fmt: skip


def evaluate(systems: dict[str, Callable[[np.ndarray], str]], utterances: Sequence[Utterance], set_name: str,
             progress: Progress = _no_progress) -> dict[str, SetResult]:  # fmt: skip
    """Every system on every utterance of one set (the same audio, one after the other)."""
    results = {name: SetResult(name, set_name) for name in systems}
    for u in progress(utterances, set_name):
        for name, system in systems.items():
            t0 = time.perf_counter()
            hyp = system(u.audio)
            results[name].add(u.text, hyp, time.perf_counter() - t0, len(u.audio) / SAMPLE_RATE)
    return results


def latencies(model, utterances: Sequence[Utterance], tail_s: float = 2.0) -> dict:
    """Streaming latencies of ``model`` on ``utterances`` (see the module docstring), in seconds."""
    from edgessm.runtime.transcriber import Transcriber

    first, final, compute = [], [], []
    block = model.info.chunk
    for u in utterances:
        speech_start, speech_end = speech_bounds(u.audio, -30.0)
        x = np.concatenate([u.audio, np.zeros(int(tail_s * SAMPLE_RATE), np.float32)])
        rec = Transcriber(model)
        done_at = None
        for pos in range(0, len(x), block):
            t0 = time.perf_counter()
            segs = rec.accept_waveform(SAMPLE_RATE, x[pos : pos + block])
            compute.append(time.perf_counter() - t0)
            if segs and done_at is None and pos + block >= speech_end:
                done_at = (pos + block) / SAMPLE_RATE
        if rec.first_text_s is not None:
            first.append(rec.first_text_s - speech_start / SAMPLE_RATE)
        if done_at is not None:
            final.append(done_at - speech_end / SAMPLE_RATE)
    return {
        "utterances": len(utterances),
        "first_token_s": _stats(first),
        "final_s": _stats(final),
        "finalized": len(final),
        "compute_per_chunk_ms": _stats([1000 * c for c in compute]),
        "chunk_ms": 1000 * block / SAMPLE_RATE,
    }


def _stats(values: Sequence[float]) -> dict:
    if not values:
        return {"median": float("nan"), "p90": float("nan"), "mean": float("nan")}
    v = np.asarray(values, float)
    return {"median": float(np.median(v)), "p90": float(np.percentile(v, 90)), "mean": float(v.mean())}
