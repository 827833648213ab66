"""A streaming recognizer session: an exported CTC graph, its audio stream and the CTC decoder (torch-free).

    rec = Transcriber(StepModel(resolve_graph("asr")))
    for block in microphone_blocks:                 # any rate, any block size
        for seg in rec.accept_waveform(rate, block):
            print(seg.text)                         # final segments, as the speaker pauses
        print(rec.partial().text, end="\\r")       # what is being said now
    for seg in rec.finish():                        # end of input: the last segment
        print(seg.text)

Segment and word times are seconds from the start of the stream (:class:`~edgessm.runtime.ctc.Segment`).
"""

from __future__ import annotations

import numpy as np

from .beam import BeamDecoder
from .ctc import CtcStreamDecoder, EndpointConfig, Segment, Word
from .lexicon import LexiconDecoder, log_softmax
from .session import StepModel

IDLE_FRAMES = 25  # frames of logits kept while nothing is being said (for a vocabulary's second pass)


class NotARecognizer(ValueError):
    pass


class Transcriber:
    """One stream through a CTC recognizer graph (``task = "asr"`` in its metadata).

    Args:
        model: the exported stepwise graph.
        endpoint: when a segment becomes final (pause length, longest segment).
        vocabulary: the words that can occur (commands, digits): a final segment is decoded again as
            the most probable sequence of these words (:class:`~edgessm.runtime.lexicon.LexiconDecoder`);
            partial results stay greedy. ``None``: open vocabulary (greedy best path).
        one_word: with a vocabulary, every final segment is a single word of it (or dropped): commands.
        rescorer: open vocabulary with words: a final segment is decoded again by this decoder (e.g. a
            :class:`~edgessm.runtime.beam.BeamDecoder` with a word n-gram model); partials stay greedy.
        restart_in_pauses: when a segment ends in a pause, the network's state starts over from the
            state it starts every stream with. Recognizers are trained on utterances that start
            from silence; carried across minutes of speech their state drifts.
    """

    def __init__(self, model: StepModel, endpoint: EndpointConfig | None = None,
                 vocabulary: list[str] | None = None, one_word: bool = False,
                 restart_in_pauses: bool = True, rescorer: BeamDecoder | None = None) -> None:  # fmt: skip
        info = model.info
        if info.task != "asr" or not info.labels:
            kind = info.task or "non-recognizer"
            raise NotARecognizer(f"{model.path.name} is a {kind} model, not a speech recognizer")
        self.model = model
        self.stream = model.create_stream()
        self.decoder = CtcStreamDecoder(info.labels, info.stride / info.sample_rate, endpoint)
        self.first_text_s: float | None = None  # stream time at which the first character was decoded
        if one_word and not vocabulary:
            raise ValueError("one_word decoding needs a vocabulary (the words a segment can be)")
        if vocabulary and rescorer is not None:
            raise ValueError("a closed vocabulary (--words) and a language model (--lm) exclude each other")
        self.lexicon = LexiconDecoder(info.labels, vocabulary, one_word=one_word) if vocabulary else rescorer
        self._frames: list[np.ndarray] = []  # logits since frame self._base (kept only with a vocabulary)
        self._base = 0
        self.restart_in_pauses = restart_in_pauses
        self.restarts = 0  # times the state started over in a pause

    @property
    def heard_s(self) -> float:
        """Seconds of audio accepted so far."""
        return self.stream.samples_in / self.model.info.sample_rate

    def accept_waveform(self, sample_rate: int, samples: np.ndarray) -> list[Segment]:
        """Feed mono float samples in [-1, 1]; returns the segments that became final.

        Fed about one graph chunk at a time and decoded in between, so that a restart in a pause
        takes effect at the next chunk, not after the rest of a long block."""
        x = np.asarray(samples, np.float32).reshape(-1)
        if not np.isfinite(x).all():
            raise ValueError("audio contains NaN or infinite samples")
        info = self.model.info
        step = max(1, info.chunk * sample_rate // info.sample_rate)
        done: list[Segment] = []
        for pos in range(0, max(1, len(x)), step):
            self.stream.accept_waveform(sample_rate, x[pos : pos + step])
            done += self._decode()
        return done

    def _decode(self) -> list[Segment]:
        done: list[Segment] = []
        for logits in self.stream.outputs():
            segs = self.decoder.accept(logits)
            if self.restart_in_pauses and segs and self.decoder.paused:
                self.stream.restart_state()
                self.restarts += 1
            if self.lexicon is not None:
                self._frames.append(np.asarray(logits).reshape(len(self.decoder.labels), -1))
                segs = [self._rescore(seg) for seg in segs]
                self._forget_silence()
            done += segs
            if self.first_text_s is None and (done or self.decoder.in_segment):
                self.first_text_s = self.decoder.frame * self.decoder.frame_s
        return done

    def _rescore(self, seg: Segment) -> Segment:
        """``seg`` decoded again over the vocabulary, from the buffered logits up to a little after its end."""
        fs = self.decoder.frame_s
        logits = np.concatenate(self._frames, axis=1)
        cut = min(logits.shape[1], max(0, round(seg.end_s / fs) - self._base + 10))
        found = self.lexicon.decode(log_softmax(logits[:, :cut]))
        self._frames, self._base = [logits[:, cut:]], self._base + cut
        words = tuple(
            Word(w.text, (self._base - cut + w.start) * fs, (self._base - cut + w.end + 1) * fs, w.confidence)
            for w in found
        )
        if not words:
            return Segment("", seg.start_s, seg.end_s, (), seg.final)
        return Segment(" ".join(w.text for w in words), words[0].start_s, words[-1].end_s, words, seg.final)

    def _forget_silence(self) -> None:
        """While nothing is being said, keep only the last :data:`IDLE_FRAMES` frames of logits."""
        if self.decoder.in_segment or sum(f.shape[1] for f in self._frames) < 2 * IDLE_FRAMES:
            return  # trimmed in batches, not on every chunk
        logits = np.concatenate(self._frames, axis=1)
        drop = max(0, logits.shape[1] - IDLE_FRAMES)
        self._frames, self._base = [logits[:, drop:]], self._base + drop

    def partial(self) -> Segment:
        """The segment being spoken (not final; empty text in a pause)."""
        return self.decoder.partial()

    def finish(self) -> list[Segment]:
        """End of input: process the buffered tail and return the remaining final segments."""
        self.stream.flush()
        done = self._decode()
        last = self.decoder.flush()
        if last is not None and self.lexicon is not None:
            last = self._rescore(last)
        return [s for s in done + ([last] if last is not None else []) if s.text or self.lexicon is None]

    def reset(self) -> None:
        """Start a new stream (state, buffers and clock)."""
        self.stream.reset()
        self.decoder.reset()
        self.first_text_s = None
        self._frames, self._base = [], 0
        self.restarts = 0


def transcribe_audio(model: StepModel, audio: np.ndarray, sample_rate: int, endpoint: EndpointConfig | None = None,
                     block_s: float = 1.0, vocabulary: list[str] | None = None,
                     one_word: bool = False, rescorer: BeamDecoder | None = None) -> list[Segment]:  # fmt: skip
    """All final segments of a recording ``(T,)`` streamed through ``model`` ``block_s`` seconds at a time."""
    rec = Transcriber(model, endpoint, vocabulary, one_word, rescorer=rescorer)
    step = max(1, int(block_s * sample_rate))
    out: list[Segment] = []
    for pos in range(0, len(audio), step):
        out += rec.accept_waveform(sample_rate, audio[pos : pos + step])
    return out + rec.finish()
