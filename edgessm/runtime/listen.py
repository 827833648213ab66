"""``edgessm listen``: live keyword spotting from the microphone or a file (torch-free).

edgessm listen --model kws35                     # default microphone
edgessm listen --model kws35 demo.wav           # a recording, as if it were live (or --input demo.wav)
arecord -t raw -f S16_LE -r 16000 | edgessm listen --input -    # raw 16-bit PCM (or a 16-bit wav stream) on stdin

Detections go to stdout, one line each (``--json``: one JSON object each). Everything else goes
to stderr: the live level meter (only when stderr is a terminal, without ``--json`` or
``--quiet``), errors, and the summary printed when the input ends or on Ctrl-C. Ctrl-C is the
normal way to stop a live session, so it exits with status 0.

A recording is read a block at a time (constant memory for hours of audio; any rate, format and
channel count: channels are averaged), the same samples in the same 100 ms blocks as a whole-file
read would give. Input that is not usable audio (missing, empty, text, NaN samples, a stream cut
off) stops with a one-line message on stderr and exit status 1. ``--record`` is written to a
temporary file beside it and renamed into place only when the session ends normally (the input
ran out, ``--duration`` passed, or Ctrl-C); after an error or SIGTERM there is no file.

The microphone is opened at its own rate with one channel; a device that refuses that is opened
with two channels (or its most, averaged to mono) and, failing that, at 48, 44.1 or 16 kHz; the
model's stream resamples whatever it gets. A microphone that goes away mid-session (unplugged, its
sound server dropping the stream) or that delivers no audio for ``--mic-timeout`` seconds (a
stalled server: PortAudio may simply stop calling back) ends the session as a device end, not a
program error: a one-line message on stderr, ``--record`` kept with what was heard up to then, the
summary, and exit status 1. listen does not reopen the device (a sound server that moves the
stream to another input keeps it going by itself). Input overflows (audio PortAudio had to drop)
are counted on the meter and in the summary and are never fatal.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from .denoise import EXTENSIONS, Writer
from .interrupts import Terminated, ignore_ctrl_c, one_ctrl_c, sigterm_unwinds, whole_blocks
from .level import AGC_CHOICES

METER_DB_RANGE = 60.0  # the meter's bar spans -60..0 dBFS
METER_WIDTH = 20  # characters of bar
METER_PERIOD_S = 0.1  # redraw at most this often
MIC_RATES = (48000, 44100, 16000)  # tried in turn when a microphone refuses its own default rate

EPILOG = """\
exit status: 0 when the input ends, --duration passes, or on Ctrl-C (the summary is printed and
--record is kept); 1 for unusable input or refused option values, or when the microphone goes away
(unplugged, its sound server dropping the stream, or no audio for --mic-timeout seconds): a one-line
message, then --record kept with what was heard up to then and the summary. listen does not reopen
a lost microphone (a sound server that moves the stream to another input keeps it going by itself).
143 on SIGTERM (no --record file). Input overflows are counted in the meter and summary, never fatal.
A microphone that refuses mono or its default rate is opened in stereo (mixed to mono) or at
48/44.1/16 kHz, and resampled to the model's rate."""


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.epilog = EPILOG
    ap.formatter_class = argparse.RawDescriptionHelpFormatter  # keeps the epilog's lines; options as usual
    ap.add_argument("--model", default="kws35", help="shipped model name or path to a keyword-spotting .onnx graph")
    ap.add_argument("file", nargs="?", metavar="INPUT", help="the same as --input: an audio file, '-' (stdin) or 'mic'")
    ap.add_argument(
        "--input", default=None, help="'mic' (default), an audio file, or '-': raw PCM or a 16-bit wav stream on stdin"
    )
    ap.add_argument(
        "--rate", type=int, default=16000, help="sample rate of raw PCM on stdin (16-bit little-endian mono)"
    )
    ap.add_argument("--fast", action="store_true", help="process a file as fast as possible instead of in real time")
    ap.add_argument(
        "--record", metavar="WAV", help="save exactly the 16 kHz audio the model got (.wav or .flac, 16-bit)"
    )
    ap.add_argument(
        "--duration", type=float, help="stop after this many seconds (microphone: of listening; file/stdin: of audio)"
    )
    ap.add_argument("--device", help="input device (name or index) for the microphone; see --list-devices")
    ap.add_argument("--list-devices", action="store_true", help="list audio input devices and exit")
    ap.add_argument(
        "--mic-timeout",
        type=float,
        default=2.0,
        metavar="S",
        help="end (exit status 1, --record and summary kept) when the microphone gives no audio for S seconds "
        "(5 s for its first audio, if longer; default 2; 0: only when its device goes away)",
    )
    ap.add_argument(
        "--threshold",
        type=float,
        help="smoothed posterior needed to fire, 0..1, for every keyword (default: the "
        "model's own per-keyword thresholds, calibrated to its false-accept rate; else 0.7)",
    )
    ap.add_argument("--smooth", type=int, default=4, help="frames of posterior smoothing")
    ap.add_argument("--refractory", type=float, default=1.0, help="seconds after a detection with no other")
    ap.add_argument("--contrast", type=float, metavar="DB",
                    help="the contrast gate: a keyword fires only if it stands DB above the second before it (a "
                         "command after a pause or above the room, not a word inside running speech); "
                         "0: off (default: the model's)")  # fmt: skip
    ap.add_argument("--speech-after", type=float, metavar="P",
                    help="the speech-after gate: a keyword fires only if the model hears no running speech in the "
                         "0.4 s after it (mean _unknown_ posterior at most P; reported 0.4 s later); 0: off "
                         "(default: the model's)")  # fmt: skip
    ap.add_argument("--hold", type=float, metavar="S",
                    help="hold a keyword that crosses the threshold S seconds and fire the keyword that stands "
                         "highest in that time (the start of a word can sound like another); reported S later; "
                         "0: off (default: the model's)")  # fmt: skip
    ap.add_argument("--margin", type=float, metavar="P",
                    help="a keyword fires only where its smoothed posterior stands P above every other "
                         "keyword's (a doubtful word stays silent rather than named wrong); 0: off (default: "
                         "the model's)")  # fmt: skip
    ap.add_argument("--keywords", nargs="+", help="only these words, e.g. --keywords yes,no (default: all)")
    ap.add_argument("--int8", action="store_true", help="use the int8 graph of a shipped model")
    ap.add_argument("--budget", metavar="K", help="compute budget of an elastic (ES-SSM) model: its graph at K")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--agc", choices=AGC_CHOICES, default="graph",
                    help="the input level control (quiet input raised to the level the model was trained on): "
                         "as the graph asks (default; the shipped keyword spotters do), on, or off")  # fmt: skip
    ap.add_argument("--json", action="store_true", help="one JSON object per detection (and no meter)")
    ap.add_argument("--quiet", action="store_true", help="no live level meter on the terminal")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def level_dbfs(block: np.ndarray) -> float:
    """RMS level of a block in dB relative to full scale (a full-scale square wave is 0 dBFS)."""
    if not len(block):
        return -math.inf
    rms = float(np.sqrt(np.mean(np.square(block, dtype=np.float64))))
    return 20 * math.log10(rms) if rms > 0 else -math.inf


class Listener:
    """One listening session: feeds a :class:`~edgessm.runtime.session.Stream`, turns its outputs
    into detections, keeps the counts and draws the meter.

    Args:
        stream: the model's stream.
        decider: a :class:`~edgessm.runtime.kws.KeywordDecider` for the model's labels.
        as_json: print detections as JSON objects.
        meter: draw the live level meter on stderr.
    """

    def __init__(self, stream, decider, as_json: bool = False, meter: bool = False) -> None:
        self.stream = stream
        self.decider = decider
        self.as_json = as_json
        self.meter = meter
        self.counts: Counter[str] = Counter()
        self.overflows = 0  # input overflows reported by the audio device
        self.busy_s = 0.0  # time spent processing (resampling, graph, decisions)
        self.rate = stream.model.info.sample_rate
        self._peak_db = -math.inf  # loudest block since the meter was last drawn
        self._shown = 0  # characters of meter on screen (0: none)
        self._next_draw = 0.0

    @property
    def heard_s(self) -> float:
        return self.stream.samples_in / self.rate

    def feed(self, rate: int, samples: np.ndarray) -> None:
        """Process a block of audio recorded at ``rate`` and print the detections it triggers; a Ctrl-C
        meanwhile waits for the block to be done (the record and the clock stay equal)."""
        with whole_blocks():
            t0 = time.perf_counter()
            self.stream.accept_waveform(rate, samples)
            self._decide()
            self.busy_s += time.perf_counter() - t0
            if self.meter:
                self._peak_db = max(self._peak_db, level_dbfs(samples))
                self.show()

    def finish(self) -> None:
        """Process the last partial chunk (zero-padded) and take the meter off the screen."""
        t0 = time.perf_counter()
        self.stream.flush()
        self._decide()
        for det in self.decider.flush():  # a keyword the speech-after gate still held
            self._report(det)
        self.busy_s += time.perf_counter() - t0
        self.clear()

    def _decide(self) -> None:
        for logits, audio in self.stream.chunks():
            for det in self.decider.process(logits, audio):
                self._report(det)

    def _report(self, det) -> None:
        self.counts[det.label] += 1
        self.clear()
        if self.as_json:
            # "time": seconds from the start of the stream at which the word's decision frame ended
            event = {"keyword": det.label, "time": round(det.time_s, 3), "score": round(det.score, 3)}
            print(json.dumps(event), flush=True)
        else:
            print(f"{det.time_s:8.2f} s  {det.label:<10} {det.score:.2f}", flush=True)
        self._next_draw = 0.0  # put the meter back at once

    # --- the meter: one line on stderr, rewritten in place ---------------------------------------

    def meter_line(self) -> str:
        db = max(self._peak_db, -99.0)
        filled = round(METER_WIDTH * min(1.0, max(0.0, 1 + db / METER_DB_RANGE)))
        line = (
            f"{db:4.0f} dBFS [{'#' * filled}{'-' * (METER_WIDTH - filled)}] {self.heard_s:7.1f} s"
            f"  {_plural(sum(self.counts.values()), 'detection')}"
        )
        if self.overflows:
            line += f"  {_plural(self.overflows, 'overflow')}"
        return line

    def show(self, force: bool = False) -> None:
        """Redraw the meter (at most every ``METER_PERIOD_S`` unless ``force``)."""
        now = time.monotonic()
        if not self.meter or (not force and now < self._next_draw):
            return
        line = self.meter_line()
        sys.stderr.write("\r" + line.ljust(self._shown))
        sys.stderr.flush()
        self._shown = len(line)
        self._next_draw = now + METER_PERIOD_S
        self._peak_db = -math.inf

    def clear(self) -> None:
        if self._shown:
            sys.stderr.write("\r" + " " * self._shown + "\r")
            sys.stderr.flush()
            self._shown = 0

    def summary(self) -> str:
        words = ", ".join(f"{w} {n}" for w, n in sorted(self.counts.items()))
        n = sum(self.counts.values())
        rtf = f"{self.busy_s / self.heard_s:.3f}" if self.heard_s > 0 else "n/a"
        raised = getattr(self.stream, "max_gain_db", None)
        quiet = f"; quiet input raised by up to {raised:.0f} dB (--agc off: as it is)" if raised and raised >= 6 else ""
        return (
            f"summary: {self.heard_s:.2f} s of audio heard, {_plural(n, 'detection')}"
            f"{f' ({words})' if words else ''}, {_plural(self.overflows, 'input overflow')}, real-time factor {rtf}"
            f"{quiet}"
        )


def _fail(message: str) -> SystemExit:
    return SystemExit(f"edgessm listen: {message}")


class RecordError(Exception):
    """``--record`` could not be written (disk full, no permission, ...)."""


class Recorder:
    """``--record``: the graph-rate audio the model hears (a :class:`~edgessm.runtime.session.Stream`'s
    ``on_audio``), written as it comes to a temporary file beside ``path`` that :meth:`commit` renames
    into place (a :class:`~edgessm.runtime.denoise.Writer`); :meth:`discard` leaves nothing. The latest
    piece is held back, so that the zero padding of the stream's last chunk can be cut off.

    Args:
        path: the file; its extension picks the container (wav without one), 16-bit where it has it.
        rate: the graph's sample rate.
    """

    def __init__(self, path: str, rate: int) -> None:
        import soundfile as sf

        ext = Path(path).suffix.lower().lstrip(".")
        fmt = EXTENSIONS.get(ext) if ext else "WAV"
        if fmt not in sf.available_formats():
            raise _fail(f"--record {path}: cannot write .{ext} files; name it .wav or .flac")
        subtype = "PCM_16" if sf.check_format(fmt, "PCM_16") else sf.default_subtype(fmt)
        self.path, self._held = path, None
        try:
            self.writer = Writer(path, rate, 1, fmt, subtype)
        except (OSError, RuntimeError) as e:  # RuntimeError: soundfile.LibsndfileError
            raise _fail(f"cannot write --record {path}: {e}") from None

    def __call__(self, samples: np.ndarray) -> None:
        """Take ``samples (n,)`` float32 heard by the model."""
        if self._held is not None:
            self._write(self._held)
        self._held = samples

    def commit(self, frames: int) -> None:
        """Write the held piece, cut so that ``frames`` samples are written in all, and put the file in place."""
        if self._held is not None:
            self._write(self._held[: max(0, frames - self.writer.frames)])
            self._held = None
        try:
            self.writer.commit()
        except (OSError, RuntimeError) as e:
            raise RecordError(f"cannot write {self.path}: {e}") from None

    def discard(self) -> None:
        self.writer.discard()

    def _write(self, samples: np.ndarray) -> None:
        try:
            self.writer.write(samples[None])
        except (OSError, RuntimeError) as e:
            raise RecordError(f"cannot write {self.path}: {e}") from None


def _sounddevice():
    from .devices import sounddevice_or_exit

    return sounddevice_or_exit("edgessm listen: the microphone", "listen to a recording with --input FILE")


def _no_microphone(e: Exception) -> SystemExit:
    return _fail(
        f"no usable microphone ({e}); pick one from --list-devices with --device, "
        "or listen to a recording with --input FILE (or raw PCM on stdin with --input -)"
    )


def run(args: argparse.Namespace) -> int:
    if args.list_devices:
        print(_sounddevice().query_devices())
        return 0
    _check_options(args)
    listener = _listener(args)
    try:
        with sigterm_unwinds():
            code = _listen(listener, args)
    except Terminated:
        note = f"; {args.record} was not written" if args.record else ""
        print(f"edgessm listen: terminated{note}", file=sys.stderr, flush=True)
        code = 143
    except SystemExit as e:
        _exit_now_if_portaudio_is_stuck(e.code)
        raise
    except BaseException as e:
        _exit_now_if_portaudio_is_stuck(f"edgessm listen: {type(e).__name__}: {e}")
        raise
    _exit_now_if_portaudio_is_stuck(code)
    return code


def _exit_now_if_portaudio_is_stuck(code: int | str | None) -> None:
    """End the process at once (``os._exit``) with ``code`` (a message: printed, status 1) when PortAudio
    could not stop the microphone (a stalled sound server): exiting normally would then hang or crash
    in PortAudio. The session's files and messages are complete by then."""
    from .devices import streams_left_behind

    if not streams_left_behind():
        return
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    for f in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            f.flush()
    os._exit(code or 0)


def _check_options(args: argparse.Namespace) -> None:
    """Refuse option values that cannot work, before a model is loaded or any input is read; settles
    ``args.input`` (``--input`` or the positional INPUT, ``mic`` when neither is given)."""
    if args.file is not None and args.input is not None and args.file != args.input:
        raise _fail(f"two inputs given ({args.file} and --input {args.input}); give one")
    args.input = args.input or args.file or "mic"
    if args.rate <= 0:
        raise _fail(f"--rate is the sample rate of raw PCM on stdin in Hz, got {args.rate}")
    if args.duration is not None and not args.duration >= 0:
        raise _fail(f"--duration is a number of seconds >= 0, got {args.duration}")
    if not args.mic_timeout >= 0:
        raise _fail(f"--mic-timeout is a number of seconds >= 0 (0: no timeout), got {args.mic_timeout}")
    from .kws import check_gates

    try:
        check_gates(args.contrast, args.speech_after, hold_s=args.hold, margin=args.margin)
    except ValueError as e:
        raise _fail(str(e)) from None
    record = args.record
    if record is None:
        return
    if record == "-":
        raise _fail("--record - would mix audio into the detections on stdout; give a file name")
    if Path(record).is_dir():
        raise _fail(f"--record {record} is a folder; give a file name, e.g. {Path(record) / 'heard.wav'}")
    given = args.input not in ("mic", "-") and Path(args.input).exists() and Path(record).exists()
    if given and os.path.samefile(args.input, record):
        raise _fail(f"--record {record} is the input file; give another name (it would be replaced)")


def _listener(args: argparse.Namespace) -> Listener:
    """The model named by ``--model`` (a keyword spotter) with its decider, as a :class:`Listener`."""
    from .kws import KeywordDecider, graph_decision
    from .registry import check_budget, resolve_graph
    from .session import StepModel

    try:
        model = StepModel(resolve_graph(args.model, int8=args.int8, budget=args.budget), threads=args.threads,
                          agc=args.agc)  # fmt: skip
        check_budget(model.info.extra, args.budget, model.path.name)
    except (FileNotFoundError, ValueError) as e:
        raise _fail(str(e)) from None
    info = model.info
    if info.task != "kws" or not info.labels:
        raise _fail(f"{args.model} is a {info.task or 'non-keyword'} model, not a keyword spotter")
    keywords = tuple(w for item in args.keywords or () for w in item.split(",") if w)
    cfg = graph_decision(info.extra, args.threshold, args.smooth, args.refractory, keywords, args.contrast,
                         args.speech_after, args.hold, args.margin)  # fmt: skip
    try:
        decider = KeywordDecider(info.labels, info.stride / info.sample_rate, cfg)
    except ValueError as e:
        raise _fail(str(e)) from None
    meter = sys.stderr.isatty() and not args.json and not args.quiet
    return Listener(model.create_stream(), decider, as_json=args.json, meter=meter)


def _listen(listener: Listener, args: argparse.Namespace) -> int:
    """Listen to ``--input`` until it ends, ``--duration`` passes or Ctrl-C; then the record and the summary.
    Unusable input or a failed write: the record is discarded and the message raised as ``SystemExit``.
    A microphone lost mid-session: the message, the record and the summary, and status 1."""
    from edgessm.data.audio import AudioError

    from .devices import MicrophoneLost

    recorder = Recorder(args.record, listener.rate) if args.record else None
    listener.stream.on_audio = recorder
    lost: Exception | None = None
    with one_ctrl_c():
        try:
            try:
                if args.input == "-":
                    _listen_stdin(listener, args)
                elif args.input != "mic":
                    _listen_file(listener, args.input, args)
                else:
                    _listen_mic(listener, listener.decider, args)
            except KeyboardInterrupt:  # Ctrl-C: the normal end of a live session
                pass
            except MicrophoneLost as e:  # a device end, not a program error: what was heard is kept
                lost = e
            ignore_ctrl_c()  # the session is ending: another Ctrl-C must cost neither the record nor the summary
            listener.finish()
            if recorder is not None:
                recorder.commit(listener.stream.samples_in)
        except BaseException as e:  # errors, SIGTERM: no half-written record
            listener.clear()
            if recorder is not None:
                recorder.discard()
            if isinstance(e, (AudioError, RecordError)):
                raise _fail(str(e)) from None
            raise
        if lost is not None:
            print(f"edgessm listen: the microphone went away after {listener.heard_s:.2f} s: {lost}", file=sys.stderr)
        if recorder is not None:
            print(f"recorded {listener.heard_s:.2f} s to {args.record}", file=sys.stderr)
        print(listener.summary(), file=sys.stderr, flush=True)
    return 0 if lost is None else 1


def _listen_stdin(listener: Listener, args: argparse.Namespace) -> None:
    """Raw 16-bit PCM (``--rate``, mono) or a 16-bit wav stream on stdin, fed as it arrives (about 100 ms
    at a time); raises :class:`~edgessm.data.audio.AudioError` for text, other containers, a cut-off stream."""
    from .sources import PcmPipe

    pipe = PcmPipe(sys.stdin.buffer, args.rate)
    for block in pipe.blocks(args.duration):
        listener.feed(pipe.rate, block)


def _listen_file(listener: Listener, name: str, args: argparse.Namespace) -> None:
    """A recording read and fed 100 ms at a time, as a microphone would (in real time unless ``--fast``):
    ``(channels, n)`` blocks averaged to ``(n,)``, one block in memory at a time; raises
    :class:`~edgessm.data.audio.AudioError` for unusable input."""
    from .sources import open_source

    source = open_source(name)
    try:
        rate = source.rate
        limit = math.inf if args.duration is None else round(args.duration * rate)
        start, pos = time.monotonic(), 0
        for block in source.blocks(max(1, rate // 10)):
            if pos >= limit:
                break
            block = block[:, : int(min(block.shape[1], limit - pos))]
            if not args.fast:  # pace the file like a live microphone
                time.sleep(max(0.0, start + pos / rate - time.monotonic()))
            listener.feed(rate, block.mean(axis=0))
            pos += block.shape[1]
    finally:
        source.close()


def _listen_mic(listener: Listener, decider, args: argparse.Namespace) -> None:
    """The microphone, at a rate and channel count it takes (blocks mixed to mono, resampled by the stream),
    until ``--duration``, Ctrl-C, or :class:`~edgessm.runtime.devices.MicrophoneLost` (the device went away
    or gave no audio for ``--mic-timeout`` seconds)."""
    from .devices import Microphone, input_device

    sd = _sounddevice()
    device, dev, rate = input_device(sd, args.device, _no_microphone)
    stall_s = args.mic_timeout or math.inf  # 0: only a stream that ends ends the session
    mic = Microphone(sd, device, rate, 0.05, _no_microphone, rates=MIC_RATES, stall_s=stall_s)

    def feed(block: np.ndarray) -> None:
        listener.overflows = mic.overflows
        listener.feed(mic.rate, block)

    words = ", ".join(decider.labels[i] for i in np.flatnonzero(decider.active))
    mixed = f" ({mic.channels} channels mixed to mono)" if mic.channels > 1 else ""
    print(f"listening on {dev['name']} at {mic.rate} Hz{mixed} for {words} (Ctrl-C to stop)", file=sys.stderr,
          flush=True)  # fmt: skip
    try:
        mic.pump(args.duration, feed, idle=lambda: listener.show(force=True), poll_s=METER_PERIOD_S)
    finally:
        listener.overflows = mic.overflows
