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

from .ctc import CtcStreamDecoder, EndpointConfig, Segment
from .session import StepModel


class NotARecognizer(ValueError):
    pass


class Transcriber:
    """One stream through a CTC recognizer graph (``task = "asr"`` in its metadata).

    Args:
        model: the exported stepwise graph.
        endpoint: when a segment becomes final (pause length, longest segment).
    """

    def __init__(self, model: StepModel, endpoint: EndpointConfig | None = None) -> None:
        info = model.info
        if info.task != "asr" or not info.labels:
            kind = info.task or "non-recognizer"
            raise NotARecognizer(f"{model.path.name} is a {kind} model, not a speech recognizer")
        self.model = model
        self.stream = model.create_stream()
        self.decoder = CtcStreamDecoder(info.labels, info.stride / info.sample_rate, endpoint)
        self.first_text_s: float | None = None  # stream time at which the first character was decoded

    @property
    def heard_s(self) -> float:
        """Seconds of audio accepted so far."""
        return self.stream.samples_in / self.model.info.sample_rate

    def accept_waveform(self, sample_rate: int, samples: np.ndarray) -> list[Segment]:
        """Feed mono float samples in [-1, 1]; returns the segments that became final."""
        self.stream.accept_waveform(sample_rate, samples)
        return self._decode()

    def _decode(self) -> list[Segment]:
        done: list[Segment] = []
        for logits in self.stream.outputs():
            done += self.decoder.accept(logits)
            if self.first_text_s is None and (done or self.decoder.partial().text):
                self.first_text_s = self.decoder.frame * self.decoder.frame_s
        return done

    def partial(self) -> Segment:
        """The segment being spoken (not final; empty text in a pause)."""
        return self.decoder.partial()

    def finish(self) -> list[Segment]:
        """End of input: process the buffered tail and return the remaining final segments."""
        self.stream.flush()
        done = self._decode()
        last = self.decoder.flush()
        return done + ([last] if last is not None else [])

    def reset(self) -> None:
        """Start a new stream (state, buffers and clock)."""
        self.stream.reset()
        self.decoder.reset()
        self.first_text_s = None


def transcribe_audio(model: StepModel, audio: np.ndarray, sample_rate: int, endpoint: EndpointConfig | None = None,
                     block_s: float = 1.0) -> list[Segment]:  # fmt: skip
    """All final segments of a recording ``(T,)`` streamed through ``model`` ``block_s`` seconds at a time."""
    rec = Transcriber(model, endpoint)
    step = max(1, int(block_s * sample_rate))
    out: list[Segment] = []
    for pos in range(0, len(audio), step):
        out += rec.accept_waveform(sample_rate, audio[pos : pos + step])
    return out + rec.finish()
