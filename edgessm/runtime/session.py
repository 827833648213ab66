"""Open a stepwise graph, keep its state, feed it audio of any length and rate."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000


@dataclass(frozen=True)
class GraphInfo:
    """What an exported graph says about itself (its ONNX metadata)."""

    task: str
    sample_rate: int
    chunk: int
    stride: int
    latency_samples: int
    states: list[tuple[str, tuple[int, ...]]]
    labels: list[str]
    weights_sha256: str
    extra: dict[str, str]
    warmup_samples: int = 0  # a new stream starts from the state after this much silence (0: zeros)
    delay_samples: int = 0  # output sample t stands for input sample t - delay (a spectral denoiser's frame overlap)


def read_info(session) -> GraphInfo:
    meta = dict(session.get_modelmeta().custom_metadata_map)
    missing = {"chunk", "stride", "states"} - set(meta)
    if missing:
        raise ValueError(
            f"not an edgessm stepwise graph: metadata {sorted(missing)} missing (export it with edgessm export)"
        )
    labels = json.loads(meta["labels"]) if "labels" in meta else []
    return GraphInfo(
        task=meta.get("task", ""),
        sample_rate=int(meta.get("sample_rate", SAMPLE_RATE)),
        chunk=int(meta["chunk"]),
        stride=int(meta["stride"]),
        latency_samples=int(meta.get("latency_samples", meta["chunk"])),
        states=[(n, tuple(s)) for n, s in json.loads(meta["states"])],
        labels=labels,
        weights_sha256=meta.get("weights_sha256", ""),
        extra=meta,
        warmup_samples=int(meta.get("warmup_samples", 0)),
        delay_samples=int(meta.get("delay_samples", 0)),
    )


class StepModel:
    """An exported stepwise graph in an onnxruntime session.

    Args:
        path: the ``.onnx`` file.
        threads: intra-op threads (1 is best for a single real-time stream).
    """

    def __init__(self, path: str | os.PathLike, threads: int = 1) -> None:
        import onnxruntime as ort

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"model graph {path} not found")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL  # fusions, constant folding
        self.path = path
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.info = read_info(self.session)
        self._inputs = [i.name for i in self.session.get_inputs()]
        self._outputs = [o.name for o in self.session.get_outputs()]
        self._start: list[np.ndarray] | None = None  # initial_state(), computed once
        if len(self._inputs) != 1 + len(self.info.states):
            raise ValueError(f"{path}: {len(self._inputs) - 1} state inputs, metadata lists {len(self.info.states)}")

    def initial_state(self) -> list[np.ndarray]:
        """The state a new stream starts from: zeros, advanced through ``warmup_samples`` of silence
        (rounded up to whole chunks, outputs discarded) when the graph's metadata asks for it."""
        if self._start is None:
            state = [np.zeros((1, *shape), np.float32) for _, shape in self.info.states]
            silence = np.zeros(self.info.chunk, np.float32)
            for _ in range(-(-self.info.warmup_samples // self.info.chunk)):
                _, state = self.run(silence, state)
            self._start = state
        return [s.copy() for s in self._start]

    def run(self, chunk: np.ndarray, state: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        """One graph call: ``chunk`` ``(chunk,)`` float32 at the graph's rate -> ``(output, new state)``."""
        feed = {self._inputs[0]: np.asarray(chunk, np.float32).reshape(1, 1, self.info.chunk)}
        feed.update(zip(self._inputs[1:], state, strict=True))
        out = self.session.run(self._outputs, feed)
        return out[0][0], out[1:]

    def process(self, audio: np.ndarray) -> np.ndarray:
        """A whole recording ``(T,)`` at the graph's rate from :meth:`initial_state`: the outputs of every
        chunk concatenated on their last axis (the tail is zero-padded to a whole chunk)."""
        chunk = self.info.chunk
        x = np.zeros(-(-len(audio) // chunk) * chunk, np.float32)
        x[: len(audio)] = audio
        state, outs = self.initial_state(), []
        for pos in range(0, len(x), chunk):
            y, state = self.run(x[pos : pos + chunk], state)
            outs.append(y)
        return np.concatenate(outs, axis=-1) if outs else np.zeros((*self.output_shape[:-1], 0), np.float32)

    @property
    def output_shape(self) -> tuple[int, ...]:
        """Shape of one call's output without the batch axis."""
        return tuple(self.session.get_outputs()[0].shape[1:])

    def create_stream(self) -> Stream:
        return Stream(self)


class Stream:
    """One audio stream through a :class:`StepModel`: buffering to the graph's chunk, streaming
    resampling from the caller's rate, and the recurrent state.

    ``accept_waveform(rate, samples)`` takes any number of samples; ``outputs()`` yields one graph
    output per complete chunk; ``flush()`` pads the tail with zeros so every sample is processed;
    ``reset()`` starts over.
    """

    def __init__(self, model: StepModel) -> None:
        self.model = model
        self.reset()

    on_audio = None  # optional callable receiving every block of graph-rate audio fed to the model

    def reset(self) -> None:
        self.state = self.model.initial_state()
        self._buf = np.zeros(0, np.float32)
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []  # (output, the chunk of audio it came from)
        self._resampler = None
        self._rate: int | None = None
        self.samples_in = 0  # samples accepted, at the graph's rate
        self.chunks_done = 0

    def restart_state(self) -> None:
        """Start the recurrent state over (the graph's initial state) for the chunks still to come;
        buffered audio, resampler and clock carry on."""
        self.state = self.model.initial_state()

    def accept_waveform(self, sample_rate: int, samples: np.ndarray) -> None:
        """Append mono float samples in [-1, 1] recorded at ``sample_rate``."""
        x = np.asarray(samples, np.float32).reshape(-1)
        if not np.isfinite(x).all():
            raise ValueError("audio contains NaN or infinite samples")
        target = self.model.info.sample_rate
        if sample_rate != target:
            if self._rate not in (None, sample_rate):
                raise ValueError(f"stream started at {self._rate} Hz; reset() before switching to {sample_rate} Hz")
            if self._resampler is None:
                import soxr

                self._resampler = soxr.ResampleStream(sample_rate, target, 1, dtype="float32", quality="HQ")
            x = self._resampler.resample_chunk(x)
        self._rate = sample_rate
        self._append(x)

    def _append(self, x: np.ndarray) -> None:
        if self.on_audio is not None and len(x):
            self.on_audio(x)
        self.samples_in += len(x)
        self._buf = np.concatenate([self._buf, x]) if len(self._buf) else x
        chunk = self.model.info.chunk
        while len(self._buf) >= chunk:
            x = self._buf[:chunk]
            y, self.state = self.model.run(x, self.state)
            self._buf = self._buf[chunk:]
            self._pending.append((y, x))
            self.chunks_done += 1

    def flush(self, extra: int = 0) -> None:
        """Finish the stream: drain the resampler, append ``extra`` graph-rate zeros (to bring out the
        last ``delay_samples`` of a delayed graph) and zero-pad the last partial chunk. ``samples_in``
        counts neither the padding nor ``extra``."""
        if self._resampler is not None:
            self._append(self._resampler.resample_chunk(np.zeros(0, np.float32), last=True))
        if extra > 0:
            self._append(np.zeros(extra, np.float32))
            self.samples_in -= extra
        rest = len(self._buf)
        if rest:
            chunk = self.model.info.chunk
            self._append(np.zeros(chunk - rest, np.float32))
            self.samples_in -= chunk - rest

    def outputs(self) -> Iterator[np.ndarray]:
        """Outputs of the chunks processed since the last call, oldest first."""
        for y, _ in self.chunks():
            yield y

    def chunks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Like :meth:`outputs`, each output with the chunk of graph-rate audio ``(chunk,)`` it was computed
        from (the last one zero-padded after :meth:`flush`)."""
        pending, self._pending = self._pending, []
        yield from pending
