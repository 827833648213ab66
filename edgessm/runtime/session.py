"""Open a stepwise graph, keep its state, feed it audio of any length and rate."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .level import AgcConfig, LevelControl, apply_agc, resolve_agc

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
    agc: AgcConfig | None = None  # the input's level control (metadata ``input_agc``; :mod:`.level`), None: none


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
        agc=AgcConfig.from_json(meta["input_agc"]) if meta.get("input_agc") else None,
    )


class StepModel:
    """An exported stepwise graph in an onnxruntime session.

    Args:
        path: the ``.onnx`` file.
        threads: intra-op threads (1 is best for a single real-time stream).
        agc: the input's level control (:func:`~.level.resolve_agc`): ``True`` / ``"graph"`` the one the
            graph's metadata names (``input_agc``), if any; ``False`` / ``"off"`` none, the audio as it is;
            ``"on"`` the graph's or the default settings; an :class:`~.level.AgcConfig`: those settings.
            ``self.agc`` holds the settings in use (or None).
    """

    def __init__(self, path: str | os.PathLike, threads: int = 1, agc: bool | str | AgcConfig = True) -> None:
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
        self.agc: AgcConfig | None = resolve_agc(agc, self.info.agc, self.info.task)
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
        """One graph call: ``chunk`` ``(chunk,)`` float32 at the graph's rate -> ``(output, new state)``.
        Functional (the caller keeps the state); a stream of calls is cheaper through :meth:`stepper`."""
        feed = {self._inputs[0]: np.asarray(chunk, np.float32).reshape(1, 1, self.info.chunk)}
        feed.update(zip(self._inputs[1:], state, strict=True))
        out = self.session.run(self._outputs, feed)
        return out[0][0], out[1:]

    def stepper(self, state: list[np.ndarray] | None = None) -> Stepper:
        """A :class:`Stepper` for one stream of calls, from ``state`` (default :meth:`initial_state`)."""
        return Stepper(self, self.initial_state() if state is None else state)

    def process(self, audio: np.ndarray) -> np.ndarray:
        """A whole recording ``(T,)`` at the graph's rate from :meth:`initial_state`: the outputs of every
        chunk concatenated on their last axis (the tail is zero-padded to a whole chunk), through the level
        control first when ``self.agc`` is set (what a :class:`Stream` gives)."""
        chunk = self.info.chunk
        agc = getattr(self, "agc", None)  # stand-ins borrowing this method may have none
        x = np.zeros(-(-len(audio) // chunk) * chunk, np.float32)
        x[: len(audio)] = audio if agc is None else apply_agc(audio, agc, self.info.sample_rate)
        step = self.stepper()
        outs = [step(x[pos : pos + chunk]) for pos in range(0, len(x), chunk)]
        return np.concatenate(outs, axis=-1) if outs else np.zeros((*self.output_shape[:-1], 0), np.float32)

    @property
    def output_shape(self) -> tuple[int, ...]:
        """Shape of one call's output without the batch axis."""
        return tuple(self.session.get_outputs()[0].shape[1:])

    def create_stream(self) -> Stream:
        return Stream(self)


class Stepper:
    """One stream of graph calls with the state kept inside: ``step(chunk) -> output``.

    The same numbers as :meth:`StepModel.run`, cheaper per call: the graph reads its inputs from and writes
    its outputs into buffers bound to the session once (onnxruntime IO bindings), two sets of state buffers
    taking turns as input and output, so a call builds no feed dictionary and allocates no arrays. For a
    10 ms denoiser call that is a large part of the cost (the call itself is a few hundred small nodes).
    Graphs with a dynamic or non-float32 input or output (and stand-ins without a session) fall back to
    :meth:`StepModel.run`.

    Args:
        model: the graph.
        state: the state to start from (copied), e.g. :meth:`StepModel.initial_state`.
    """

    def __init__(self, model: StepModel, state: list[np.ndarray]) -> None:
        import onnxruntime as ort

        self.model = model
        sess = getattr(model, "session", None)  # a stand-in with only run() and initial_state() is called through run()
        ios = [*sess.get_inputs(), *sess.get_outputs()] if sess is not None else []
        self._bound = bool(ios) and all(
            io.type == "tensor(float)" and all(isinstance(d, int) for d in io.shape) for io in ios
        )
        if not self._bound:
            self._state = [np.array(s, np.float32) for s in state]
            return
        inputs, outputs = sess.get_inputs(), sess.get_outputs()
        self._chunk = np.zeros(inputs[0].shape, np.float32)
        self._out = np.zeros(outputs[0].shape, np.float32)
        self._buffers = [[np.zeros(i.shape, np.float32) for i in inputs[1:]] for _ in range(2)]
        value = ort.OrtValue.ortvalue_from_numpy  # wraps the array's memory, no copy
        self._values, self._bindings = [], []
        for k in (0, 1):  # call k reads state set k and writes set 1 - k
            b = sess.io_binding()
            pairs = [(inputs[0].name, self._chunk, b.bind_ortvalue_input)]
            pairs += [(i.name, a, b.bind_ortvalue_input) for i, a in zip(inputs[1:], self._buffers[k], strict=True)]
            pairs += [(outputs[0].name, self._out, b.bind_ortvalue_output)]
            pairs += [(o.name, a, b.bind_ortvalue_output) for o, a in zip(outputs[1:], self._buffers[1 - k],
                                                                           strict=True)]  # fmt: skip
            for name, array, bind in pairs:
                v = value(array)
                bind(name, v)
                self._values.append(v)  # the bindings refer to these
            self._bindings.append(b)
        self._k = 0
        self.state = state

    @property
    def state(self) -> list[np.ndarray]:
        """A copy of the state the next call starts from."""
        return [a.copy() for a in (self._buffers[self._k] if self._bound else self._state)]

    @state.setter
    def state(self, state: list[np.ndarray]) -> None:
        if not self._bound:
            self._state = [np.array(s, np.float32) for s in state]
            return
        current = self._buffers[self._k]
        if len(state) != len(current):
            raise ValueError(f"{len(state)} state tensors given, the graph has {len(current)}")
        for buf, s in zip(current, state, strict=True):
            buf[...] = np.asarray(s, np.float32).reshape(buf.shape)

    def __call__(self, chunk: np.ndarray) -> np.ndarray:
        """One call: ``chunk`` ``(chunk,)`` float32 at the graph's rate -> the output without the batch axis."""
        if not self._bound:
            y, self._state = self.model.run(chunk, self._state)
            return y
        self._chunk.reshape(-1)[:] = np.asarray(chunk, np.float32).reshape(-1)
        self.model.session.run_with_iobinding(self._bindings[self._k])
        self._k = 1 - self._k
        return self._out[0].copy()


class Stream:
    """One audio stream through a :class:`StepModel`: buffering to the graph's chunk, streaming
    resampling from the caller's rate, the model's level control (``model.agc``) and the recurrent state.

    ``accept_waveform(rate, samples)`` takes any number of samples; ``outputs()`` yields one graph
    output per complete chunk; ``flush()`` pads the tail with zeros so every sample is processed;
    ``reset()`` starts over.
    """

    def __init__(self, model: StepModel) -> None:
        self.model = model
        self.reset()

    on_audio = None  # optional callable receiving every block of graph-rate audio fed, before the level control
    keep_gains = False  # keep the level control's per-sample gains for take_gains() (a denoiser undoes them)

    def reset(self) -> None:
        self._step = self.model.stepper()
        self._buf = np.zeros(0, np.float32)
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []  # (output, the chunk of audio it came from)
        self._resampler = None
        self._rate: int | None = None
        agc = getattr(self.model, "agc", None)
        self._agc = LevelControl(agc, self.model.info.sample_rate) if agc is not None else None
        self._fed = np.zeros(0, np.float32)  # with a level control: its output, what the graph is fed
        self._gains = np.zeros(0)  # with keep_gains: the control's gain of each sample fed, not yet taken
        self.samples_in = 0  # samples accepted, at the graph's rate
        self.chunks_done = 0

    def restart_state(self) -> None:
        """Start the recurrent state over (the graph's initial state) for the chunks still to come;
        buffered audio, resampler and clock carry on."""
        self._step.state = self.model.initial_state()

    @property
    def state(self) -> list[np.ndarray]:
        """A copy of the recurrent state the next chunk starts from (one array per graph state input)."""
        return self._step.state

    @state.setter
    def state(self, state: list[np.ndarray]) -> None:
        self._step.state = state

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
        if self._agc is not None:  # the graph hears the level-controlled samples; chunks() gives the ones received
            fed = self._agc.process(x)
            self._fed = np.concatenate([self._fed, fed]) if len(self._fed) else fed
            if self.keep_gains:
                self._gains = np.concatenate([self._gains, self._agc.last_gain])
        chunk = self.model.info.chunk
        while len(self._buf) >= chunk:
            x = self._buf[:chunk]
            y = self._step(self._fed[:chunk] if self._agc is not None else x)
            self._buf = self._buf[chunk:]
            if self._agc is not None:
                self._fed = self._fed[chunk:]
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

    @property
    def max_gain_db(self) -> float | None:
        """The most gain the model's level control has applied in this stream (dB; None without a control)."""
        return self._agc.max_gain_db if self._agc is not None else None

    def take_gains(self, n: int) -> np.ndarray:
        """The level control's linear gains of the next ``n`` samples fed (oldest first; ones without a control,
        or for samples the stream has not seen); needs ``keep_gains`` set before the audio came."""
        g = np.ones(n)
        k = min(n, len(self._gains))
        g[:k], self._gains = self._gains[:k], self._gains[k:]
        return g

    def outputs(self) -> Iterator[np.ndarray]:
        """Outputs of the chunks processed since the last call, oldest first."""
        for y, _ in self.chunks():
            yield y

    def chunks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Like :meth:`outputs`, each output with the chunk of graph-rate audio ``(chunk,)`` it was computed
        from, as received (before the model's level control; the last one zero-padded after :meth:`flush`):
        what the keyword decision's contrast gate measures, as ``edgessm eval`` does."""
        pending, self._pending = self._pending, []
        yield from pending
