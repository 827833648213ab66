"""Streaming greedy CTC decoding with partial results, word timings and endpointing (torch-free).

The decoder takes the recognizer's frame logits chunk after chunk and keeps the best path: the
argmax label of every frame, repeats collapsed, blanks dropped. ``partial()`` is the text of the
segment being spoken; a segment becomes *final* when the speaker pauses (``trailing_silence_s`` of
frames that emit nothing but blank or space after some text) or when it reaches ``max_segment_s``,
and then the next segment starts. Words carry the times of their first and last character frames.

    decoder = CtcStreamDecoder(labels, frame_s=0.02)
    for logits in stream:                     # (vocab, frames) per graph call
        for segment in decoder.accept(logits):
            print(segment.text)               # final
        print(decoder.partial().text, end="\\r")
    last = decoder.flush()
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Word:
    text: str
    start_s: float  # start of the frame that emitted its first character
    end_s: float  # end of the last frame of its last character
    confidence: float | None = None  # one-word decoding: the word's share of the probability (else None)


@dataclass(frozen=True)
class Segment:
    text: str
    start_s: float
    end_s: float
    words: tuple[Word, ...]
    final: bool


@dataclass
class EndpointConfig:
    trailing_silence_s: float = 0.8  # a pause this long after some text ends the segment
    max_segment_s: float = 20.0  # a segment this long ends at once


@dataclass
class _Char:
    label: str
    start: int  # first frame of the label's run
    end: int  # last frame of the run (inclusive)


@dataclass
class _State:
    chars: list[_Char] = field(default_factory=list)
    prev: int = -1  # argmax of the previous frame (repeats collapse only within a run)
    silent: int = 0  # frames since the last frame that emitted or extended a non-space character
    start: int | None = None  # first frame of the segment's first character (None: no text yet)


class CtcStreamDecoder:
    """Best-path CTC over a stream of ``(vocab, frames)`` logits; see the module docstring.

    Args:
        labels: the output vocabulary in logit order (``labels[blank]`` is the blank).
        frame_s: seconds per output frame (the network's total stride / sample rate).
        endpoint: when a segment ends.
        blank: index of the blank label.
        space: the label that separates words.
    """

    def __init__(self, labels: list[str] | tuple[str, ...], frame_s: float,
                 endpoint: EndpointConfig | None = None, blank: int = 0, space: str = " ") -> None:  # fmt: skip
        if frame_s <= 0:
            raise ValueError(f"frame_s must be positive, got {frame_s}")
        self.labels = list(labels)
        self.frame_s = frame_s
        self.endpoint = endpoint or EndpointConfig()
        self.blank = blank
        self.space = space
        self.frame = 0  # frames decoded since the start (or the last reset)
        self.paused = False  # whether the last segment ``accept`` ended was ended by a pause
        self._s = _State()

    def reset(self) -> None:
        """Forget the current segment and restart the clock (a new stream)."""
        self.frame = 0
        self.paused = False
        self._s = _State()

    def accept(self, logits: np.ndarray) -> list[Segment]:
        """Decode ``logits (vocab, frames)``; returns the segments that became final in them."""
        logits = np.asarray(logits)
        if logits.ndim == 3 and logits.shape[0] == 1:
            logits = logits[0]
        if logits.ndim != 2 or logits.shape[0] != len(self.labels):
            raise ValueError(f"expected logits of shape ({len(self.labels)}, frames), got {logits.shape}")
        done = []
        trailing = max(1, round(self.endpoint.trailing_silence_s / self.frame_s))
        longest = max(1, round(self.endpoint.max_segment_s / self.frame_s))
        for k in np.argmax(logits, axis=0).tolist():
            self._step(int(k))
            s = self._s
            if s.start is not None and (s.silent >= trailing or self.frame - s.start >= longest):
                done.append(self._segment(final=True))
                self.paused = s.silent >= trailing
                self._s = _State(prev=s.prev)
        return done

    def _step(self, k: int) -> None:
        s, t = self._s, self.frame
        self.frame += 1
        if k == self.blank:
            s.prev, s.silent = k, s.silent + 1
            return
        label = self.labels[k]
        if k == s.prev and s.chars:
            s.chars[-1].end = t  # the same run: extends the last character
        elif label == self.space and (not s.chars or s.chars[-1].label == self.space):
            pass  # no leading or doubled spaces
        else:
            s.chars.append(_Char(label, t, t))
            if s.start is None and label != self.space:
                s.start = t
        s.prev = k
        s.silent = s.silent + 1 if label == self.space else 0

    @property
    def in_segment(self) -> bool:
        """Whether the current segment has text (O(1); ``partial()`` builds the whole segment)."""
        return self._s.start is not None

    def partial(self) -> Segment:
        """The segment being decoded (``final=False``); empty text while nothing was said."""
        return self._segment(final=False)

    def flush(self) -> Segment | None:
        """End of stream: the current segment as final, or ``None`` if it has no text."""
        if self._s.start is None:
            return None
        seg = self._segment(final=True)
        self._s = _State()
        return seg

    def _segment(self, final: bool) -> Segment:
        words: list[Word] = []
        current: list[_Char] = []
        for c in [*self._s.chars, _Char(self.space, 0, 0)]:
            if c.label == self.space:
                if current:
                    text = "".join(x.label for x in current)
                    words.append(Word(text, current[0].start * self.frame_s, (current[-1].end + 1) * self.frame_s))
                current = []
            else:
                current.append(c)
        if not words:
            return Segment("", self.frame * self.frame_s, self.frame * self.frame_s, (), final)
        return Segment(" ".join(w.text for w in words), words[0].start_s, words[-1].end_s, tuple(words), final)
