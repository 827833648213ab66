"""``edgessm denoise``: remove noise from a recording, or live from the microphone (torch-free).

edgessm denoise noisy.wav clean.wav                   # any rate, channels and sample format; same out
edgessm denoise talk.flac talk.flac --in-place        # replace the input (only after a complete run)
sox in.wav -t wav - | edgessm denoise - - > out.wav   # stdin/stdout as wav
edgessm denoise --live                                # microphone -> speakers (Ctrl-C to stop)
edgessm denoise --live --record clean.wav --duration 30

A file streams through the stepwise graph a block at a time (constant memory for hours of audio),
each channel with its own recurrent state, through the same :class:`Denoiser` the live loop uses.
The output keeps the input's length, rate, channel count and sample format, and is written to a
temporary file beside OUT that is renamed into place only when the whole input was processed.
On stdin a 16-bit PCM wav stream (``sox IN -t wav -e signed -b 16 -``; its length may be left open)
streams in constant memory too; other containers on stdin (FLAC, Ogg, MP3, 24-bit or float wav) are
read whole first, as libsndfile must seek in them. OUT ``-`` is written to stdout at the end (the
temporary file is on disk, not in memory).

Alignment: the hourglass network is causal and sample-aligned (trained with ``clean[t]`` as the
target for ``noisy[t]``); its algorithmic latency (``latency_samples``, one chunk) is the time the
stepwise graph waits for a chunk to fill, and the output it then emits stands for that same chunk,
not a later one. A spectral denoiser answers ``delay_samples`` later (graph metadata: its output
``t`` stands for input ``t - delay``, the overlap of its frames); its first ``delay`` output samples
are dropped and ``delay`` zeros are fed at the end. Either way the zero padding of the last partial
chunk is cut off, soxr's resamplers are delay-compensated (their flushed tails are drained), and the
result is cut or padded to exactly the input's length.
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .devices import Microphone, input_device, parse_device, sounddevice_or_exit
from .interrupts import Terminated, sigterm_unwinds
from .level import AGC_CHOICES
from .sources import Source, open_source

BLOCK_S = 1.0  # seconds of audio read per block
PROGRESS_MIN_S = 5.0  # no progress bar for inputs shorter than this
LIVE_BLOCK_S = 0.02  # microphone callback block
PCM_SUBTYPES = ("PCM_S8", "PCM_U8", "PCM_16", "PCM_24", "PCM_32", "FLOAT", "DOUBLE")
DEEP_SUBTYPES = ("PCM_24", "PCM_32", "FLOAT", "DOUBLE")
EXTENSIONS = {"wav": "WAV", "wave": "WAV", "flac": "FLAC", "ogg": "OGG", "oga": "OGG", "mp3": "MP3", "aif": "AIFF",
              "aiff": "AIFF", "aifc": "AIFF", "au": "AU", "caf": "CAF", "w64": "W64", "rf64": "RF64"}  # fmt: skip


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("input", nargs="?", metavar="IN", help="noisy audio file (wav, flac, ogg, mp3, ...) or '-' (stdin)")
    ap.add_argument("output", nargs="?", metavar="OUT", help="where to write the denoised audio, or '-' (stdout, wav)")
    ap.add_argument("--model", default="denoise", help="shipped model name or path to a denoising .onnx graph")
    ap.add_argument("--int8", action="store_true", help="use the int8 graph of a shipped model")
    ap.add_argument("--chunk", type=int, help="check the graph's chunk (samples at 16 kHz; fixed at export)")
    ap.add_argument("--budget", metavar="K", help="compute budget of an elastic (ES-SSM) model: its graph at K")
    ap.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    ap.add_argument("--agc", choices=AGC_CHOICES, default="graph",
                    help="the input level control (quiet input raised to the level the model was trained on, the "
                         "output brought back to the input's level): as the graph asks (default; the shipped "
                         "denoiser does), on, or off")  # fmt: skip
    ap.add_argument(
        "--atten-lim",
        type=float,
        metavar="DB",
        help="remove at most DB dB of noise: out = g*noisy + (1-g)*denoised, g = 10^(-DB/20) (default: no limit)",
    )
    ap.add_argument("--mono", action="store_true", help="mix the channels down to one before denoising")
    ap.add_argument("--subtype", help="output sample format (PCM_16, PCM_24, FLOAT, ...; default: the input's)")
    ap.add_argument("--in-place", action="store_true", help="allow OUT to be IN (replaced after a complete run)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar on the terminal")
    live = ap.add_argument_group("live (microphone)")
    live.add_argument("--live", action="store_true", help="denoise the microphone to the speakers (or --record)")
    live.add_argument("--device", help="input device (name or index); see --list-devices")
    live.add_argument("--output-device", help="output device (name or index) to play the denoised audio on")
    live.add_argument("--record", metavar="FILE", help="write the denoised microphone audio to this file instead")
    live.add_argument("--duration", type=float, metavar="S", help="stop after this many seconds")
    live.add_argument("--list-devices", action="store_true", help="list audio devices and exit")


class DenoiseError(SystemExit):
    def __init__(self, message: str) -> None:
        super().__init__(f"edgessm denoise: {message}")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


# --- the denoiser: any rate, any number of channels, sample-aligned --------------------------------------------


class Denoiser:
    """Denoise ``(channels, n)`` blocks of audio at ``rate``; each channel has its own graph stream.

    ``feed(block)`` returns the denoised audio that is ready (at ``rate``, aligned with the input:
    output frame ``i`` is input frame ``i`` denoised); ``finish()`` processes the rest and returns it,
    so that the outputs add up to exactly as many frames as were fed.

    Args:
        model: a :class:`~edgessm.runtime.session.StepModel` of a denoising graph.
        rate: sample rate of the audio fed and returned (resampled to the graph's rate and back).
        channels: channels of the blocks.
        atten_lim_db: remove at most this many dB of noise: ``g * noisy + (1 - g) * denoised`` with
            ``g = 10 ** (-atten_lim_db / 20)`` (``None``: no limit).
    """

    def __init__(self, model, rate: int, channels: int = 1, atten_lim_db: float | None = None) -> None:
        if model.info.task != "denoise":
            raise ValueError(f"{model.path.name} is a {model.info.task or 'untyped'} graph, not a denoiser")
        self.model, self.rate, self.channels = model, int(rate), int(channels)
        self.streams = [model.create_stream() for _ in range(self.channels)]
        for stream in self.streams:  # a graph with a level control: its gain is undone on the output
            stream.keep_gains = True
        graph_rate = model.info.sample_rate
        self._back = [None] * self.channels
        if self.rate != graph_rate:
            import soxr

            self._back = [soxr.ResampleStream(graph_rate, self.rate, 1, dtype="float32", quality="HQ")
                          for _ in range(self.channels)]  # fmt: skip
        self.gain = None if atten_lim_db is None else float(10 ** (-atten_lim_db / 20))
        self._noisy = np.zeros((self.channels, 0), np.float32)  # input not yet matched by output (for the mix)
        self._ready = [np.zeros(0, np.float32) for _ in range(self.channels)]  # denoised, not yet returned
        self._graph_out = [0] * self.channels  # graph-rate output samples taken per channel
        self.delay = model.info.delay_samples  # a delayed graph's first outputs stand for no input: dropped
        self._skip = [self.delay] * self.channels
        self.frames_in = 0
        self.frames_out = 0
        self.busy_s = 0.0  # processing time

    def feed(self, block: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        x = np.asarray(block, np.float32)
        if x.ndim != 2 or x.shape[0] != self.channels:
            raise ValueError(f"expected a ({self.channels}, n) block, got shape {x.shape}")
        if not np.isfinite(x).all():
            raise ValueError("audio contains NaN or infinite samples")
        self.frames_in += x.shape[1]
        if self.gain is not None:
            self._noisy = np.concatenate([self._noisy, x], axis=1)
        for c, stream in enumerate(self.streams):
            stream.accept_waveform(self.rate, x[c])
            self._collect(c, last=False)
        y = self._emit(final=False)
        self.busy_s += time.perf_counter() - t0
        return y

    def finish(self) -> np.ndarray:
        t0 = time.perf_counter()
        for c, stream in enumerate(self.streams):
            stream.flush(extra=self.delay)
            self._collect(c, last=True)
        y = self._emit(final=True)
        self.busy_s += time.perf_counter() - t0
        return y

    def _collect(self, c: int, last: bool) -> None:
        stream = self.streams[c]
        pieces = [np.asarray(o, np.float32).reshape(-1) for o in stream.outputs()]
        y = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
        if last:  # the final chunk was zero-padded: keep the samples that stand for real input only
            y = y[: max(0, stream.samples_in + self.delay - self._graph_out[c])]
        self._graph_out[c] += len(y)
        if self._skip[c]:  # output t of a delayed graph is input t - delay: drop what precedes the input
            k = min(self._skip[c], len(y))
            y, self._skip[c] = y[k:], self._skip[c] - k
        if getattr(self.model, "agc", None) is not None:  # the input was raised: the output keeps the input's level
            y = (y / stream.take_gains(len(y))).astype(np.float32)
        if self._back[c] is not None:
            y = self._back[c].resample_chunk(y, last=last)
        if len(y):
            self._ready[c] = np.concatenate([self._ready[c], y]) if len(self._ready[c]) else y

    def _emit(self, final: bool) -> np.ndarray:
        owed = self.frames_in - self.frames_out
        n = min(owed, *(len(r) for r in self._ready))
        y = np.stack([r[:n] for r in self._ready])
        self._ready = [r[n:] for r in self._ready]
        if final:  # resampling round trips can miss or add a sample: exactly the input's length
            y = np.pad(y, ((0, 0), (0, owed - n)))
            self._ready = [np.zeros(0, np.float32) for _ in range(self.channels)]
        if self.gain is not None:
            noisy, self._noisy = self._noisy[:, : y.shape[1]], self._noisy[:, y.shape[1] :]
            y = self.gain * noisy + (1.0 - self.gain) * y
        self.frames_out += y.shape[1]
        return y.astype(np.float32, copy=False)


# --- reading ----------------------------------------------------------------------------------------------------


# --- writing ----------------------------------------------------------------------------------------------------


def output_format(out: str, source: Source | None, subtype: str | None) -> tuple[str, str, str | None]:
    """``(format, subtype, note)`` for OUT: the container from OUT's extension (wav for stdout), the
    input's subtype where that container takes it, unless ``subtype`` says otherwise."""
    import soundfile as sf

    if out == "-":
        fmt = "WAV"
    else:
        ext = Path(out).suffix.lower().lstrip(".")
        if not ext:
            fmt = source.format if source is not None and source.format else "WAV"
        else:
            fmt = EXTENSIONS.get(ext) or (ext.upper() if ext.upper() in sf.available_formats() else "")
            if not fmt:
                raise DenoiseError(f"cannot write .{ext} files; name OUT .wav or .flac (or .ogg)")
    if subtype:
        subtype = subtype.upper()
        if not sf.check_format(fmt, subtype):
            choices = ", ".join(sf.available_subtypes(fmt))
            raise DenoiseError(f"--subtype {subtype} is not available in {fmt} files; choose one of {choices}")
        return fmt, subtype, None
    src = source.subtype if source is not None else None
    same_container = source is not None and source.format == fmt
    if src and (same_container or src in PCM_SUBTYPES) and sf.check_format(fmt, src):
        return fmt, src, None
    deep = src in DEEP_SUBTYPES and sf.check_format(fmt, "PCM_24")
    chosen = "PCM_24" if deep else sf.default_subtype(fmt)
    note = f"writing {fmt} as {chosen}, not the input's {src} (--subtype chooses)" if src else None
    return fmt, chosen, note


class Writer:
    """Frames written block by block into a temporary file: beside OUT and renamed over it by
    :meth:`commit`, or (OUT ``-``) copied to stdout by :meth:`commit`. :meth:`discard` leaves nothing."""

    def __init__(self, out: str, rate: int, channels: int, fmt: str, subtype: str) -> None:
        import soundfile as sf

        self.out, self.subtype, self.frames = out, subtype, 0
        self._tmp: Path | None = None
        self._fileobj = None
        if out == "-":
            self._fileobj = tempfile.TemporaryFile()
            target = self._fileobj
        else:
            path = self._path = Path(os.path.realpath(out)) if Path(out).is_symlink() else Path(out)  # write through
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            os.close(fd)
            self._tmp = Path(tmp)
            target = tmp
        try:
            self._sf = sf.SoundFile(target, "w", samplerate=rate, channels=channels, subtype=subtype, format=fmt)
        except BaseException:
            self._sf = None
            self.discard()
            raise

    def write(self, block: np.ndarray) -> None:
        """``block (channels, n)`` float32."""
        if not block.shape[1]:
            return
        frames = block.T
        if self.subtype not in ("FLOAT", "DOUBLE"):
            frames = np.clip(frames, -1.0, 1.0)
        self._sf.write(np.ascontiguousarray(frames))
        self.frames += block.shape[1]

    def commit(self) -> None:
        self._sf.close()
        if self._fileobj is not None:
            self._fileobj.seek(0)
            shutil.copyfileobj(self._fileobj, sys.stdout.buffer)
            sys.stdout.buffer.flush()
            self._fileobj.close()
            return
        path = self._path
        try:  # replacing a file keeps its permissions; a new one gets the usual ones (mkstemp makes 0600)
            mode = stat.S_IMODE(path.stat().st_mode)
        except FileNotFoundError:
            mask = os.umask(0)
            os.umask(mask)
            mode = 0o666 & ~mask
        os.chmod(self._tmp, mode)
        os.replace(self._tmp, path)
        self._tmp = None

    def discard(self) -> None:
        if self._sf is not None:
            try:
                self._sf.close()
            except Exception:
                pass
        if self._fileobj is not None:
            self._fileobj.close()
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)
            self._tmp = None


# --- the command ------------------------------------------------------------------------------------------------


def load_model(args: argparse.Namespace, files: bool = False):
    """The denoising graph named by ``--model``/``--int8``, checked against ``--chunk``/``--budget``;
    ``files``: the model's graph for files when it has one (and ``--chunk`` does not ask for another)."""
    from .registry import check_budget, resolve_graph
    from .session import StepModel

    if args.int8 and str(args.model).endswith(".onnx") and ".int8." not in Path(args.model).name:
        raise DenoiseError("--int8 picks the int8 graph of a shipped model; for a path, give the .int8.onnx file")
    if args.threads < 1:
        raise DenoiseError(f"--threads must be at least 1, got {args.threads}")
    try:
        graph = resolve_graph(args.model, int8=args.int8, budget=args.budget)
        model = None
        if files and args.budget is None:  # the model's graph for files, unless --chunk asks for another
            big = resolve_graph(args.model, int8=args.int8, files=True)
            if big != graph:
                model = StepModel(big, threads=args.threads, agc=args.agc)
                model = model if args.chunk in (None, model.info.chunk) else None
        model = model or StepModel(graph, threads=args.threads, agc=args.agc)
    except (OSError, ValueError, RuntimeError) as e:  # RuntimeError: onnxruntime cannot parse the file
        raise DenoiseError(str(e)) from None
    info, name = model.info, model.path.name
    if info.task != "denoise":
        raise DenoiseError(
            f"{name} is a {info.task or 'untyped'} graph, not a denoiser (its metadata says task "
            f"{info.task!r}); give a denoising model with --model"
        )
    if args.chunk is not None and args.chunk != info.chunk:
        source = "RUN" if str(args.model).endswith(".onnx") else args.model  # a training run or a shipped model
        raise DenoiseError(
            f"{name} takes {info.chunk}-sample chunks ({1000 * info.chunk / info.sample_rate:g} ms): the chunk is "
            f"fixed when the graph is exported. Export one for {args.chunk}-sample chunks with "
            f"`edgessm export {source} --out DIR --chunk {args.chunk}` and pass its .onnx with --model"
        )
    try:
        check_budget(info.extra, args.budget, name)  # a graph path given with --budget must be at that budget
    except ValueError as e:
        raise DenoiseError(str(e)) from None
    return model


def run(args: argparse.Namespace) -> int:
    if args.list_devices:
        print(_sounddevice().query_devices())
        return 0
    if args.atten_lim is not None and not args.atten_lim >= 0:
        raise DenoiseError(f"--atten-lim is a number of dB >= 0 (0 keeps the input), got {args.atten_lim}")
    if args.live:
        if args.input or args.output:
            raise DenoiseError("--live takes no IN or OUT; save the denoised microphone with --record OUT")
        if args.record and args.output_device:
            raise DenoiseError("--record and --output-device exclude each other: record to a file or play, not both")
    else:
        for flag in ("device", "output_device", "record", "duration"):
            if getattr(args, flag) is not None:
                raise DenoiseError(f"--{flag.replace('_', '-')} applies to --live only")
        if not (args.input and args.output):
            raise DenoiseError("give IN and OUT (files, or '-' for stdin/stdout), or --live for the microphone")
    try:
        with sigterm_unwinds():
            return _live(args) if args.live else _denoise_file(args)
    except KeyboardInterrupt:  # before any output existed (reading stdin, loading the model)
        print("edgessm denoise: interrupted; nothing was written", file=sys.stderr, flush=True)
        return 130
    except Terminated:
        print("edgessm denoise: terminated; nothing was written", file=sys.stderr, flush=True)
        return 143


def _check_paths(args: argparse.Namespace) -> None:
    src, out = args.input, args.output
    if out == "-":
        if sys.stdout.isatty():
            raise DenoiseError("refusing to write audio to a terminal; redirect stdout (> out.wav) or give OUT")
        return
    if Path(out).is_dir():
        raise DenoiseError(f"OUT {out} is a folder; give a file name, e.g. {Path(out) / 'denoised.wav'}")
    if src == "-" or not Path(src).exists() or not Path(out).exists():
        return
    if os.path.samefile(src, out) and not args.in_place:
        raise DenoiseError(
            f"OUT {out} is the input file; give another name, or --in-place to replace it "
            "(written to a temporary file first and renamed over it only when complete)"
        )


def _denoise_file(args: argparse.Namespace) -> int:
    import soundfile as sf

    from edgessm.data.audio import AudioError

    _check_paths(args)
    try:
        source = open_source(args.input)
    except AudioError as e:
        raise DenoiseError(str(e)) from None
    writer = bar = None
    try:
        fmt, subtype, note = output_format(args.output, source, args.subtype)
        model = load_model(args, files=True)
        channels = 1 if args.mono else source.channels
        denoiser = Denoiser(model, source.rate, channels, args.atten_lim)
        writer = Writer(args.output, source.rate, channels, fmt, subtype)
        if note:
            print(f"edgessm denoise: {note}", file=sys.stderr)
        show = sys.stderr.isatty() and not args.no_progress and (source.seconds or 0.0) > PROGRESS_MIN_S
        bar = _progress(source.seconds) if show else None
        t0 = time.perf_counter()
        for block in source.blocks(max(1, round(BLOCK_S * source.rate))):
            if args.mono:
                block = block.mean(axis=0, keepdims=True)
            writer.write(denoiser.feed(block))
            if bar is not None:
                bar.update(block.shape[1] / source.rate)
        writer.write(denoiser.finish())
        if bar is not None:
            bar.close()  # off the screen before the summary
        writer.commit()
        elapsed = time.perf_counter() - t0
    except KeyboardInterrupt:
        if writer is not None:
            writer.discard()
        target = "nothing was written" if args.output == "-" else f"{args.output} was not written"
        print(f"edgessm denoise: interrupted; {target}", file=sys.stderr, flush=True)
        return 130
    except AudioError as e:
        if writer is not None:
            writer.discard()
        raise DenoiseError(str(e)) from None
    except (OSError, sf.LibsndfileError) as e:  # no permission, disk full, ...
        if writer is not None:
            writer.discard()
        raise DenoiseError(f"cannot write {args.output}: {e}") from None
    except BaseException:
        if writer is not None:
            writer.discard()
        raise
    finally:
        if bar is not None:
            bar.close()
        source.close()
    seconds = denoiser.frames_in / source.rate
    rtf = f"{elapsed / seconds:.3f}" if seconds > 0 else "n/a"
    into = "stdout" if args.output == "-" else args.output
    print(
        f"summary: {seconds:.2f} s processed ({_plural(channels, 'channel')} at {source.rate} Hz) into {into}, "
        f"real-time factor {rtf}",
        file=sys.stderr,
        flush=True,
    )
    return 0


def _progress(total_s: float):
    from tqdm import tqdm

    return tqdm(
        total=total_s,
        file=sys.stderr,
        leave=False,
        dynamic_ncols=True,
        desc="denoising",
        bar_format="{desc} {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s [{elapsed}<{remaining}]",
    )


# --- live: microphone -> speakers or a file ---------------------------------------------------------------------


def _sounddevice():
    return sounddevice_or_exit("live audio", "denoise a file: edgessm denoise IN OUT", DenoiseError)


class Speakers:
    """Blocking writes to an output device at the microphone's rate (or, if the device refuses that
    rate, at its own default rate through a streaming resampler); counts output underflows."""

    def __init__(self, sd, device, rate: int) -> None:
        self.sd, self.underflows, self._started = sd, 0, False
        self._resampler = None
        try:
            self.info = sd.query_devices(device, "output")
            try:
                self.stream = sd.OutputStream(device=device, samplerate=rate, channels=1, dtype="float32")
                self.rate = rate
            except (ValueError, sd.PortAudioError):
                self.rate = int(self.info["default_samplerate"])
                if self.rate == rate:
                    raise
                self.stream = sd.OutputStream(device=device, samplerate=self.rate, channels=1, dtype="float32")
                import soxr

                self._resampler = soxr.ResampleStream(rate, self.rate, 1, dtype="float32", quality="HQ")
        except (ValueError, sd.PortAudioError) as e:
            raise DenoiseError(
                f"no usable output device ({e}); pick one from --list-devices with --output-device, "
                "or save to a file with --record OUT.wav"
            ) from None
        self.name = self.info["name"]

    def write(self, block: np.ndarray, last: bool = False) -> None:
        x = block[0]
        if self._resampler is not None:
            x = self._resampler.resample_chunk(x, last=last)
        if not len(x):
            return
        first = not self._started
        if first:  # started at the first audio, so waiting for the first chunk is no underflow
            self.stream.start()
            self._started = True
        underflowed = self.stream.write(np.ascontiguousarray(x.reshape(-1, 1), np.float32))
        if underflowed and not first:
            self.underflows += 1

    def close(self) -> None:
        if self._started:
            self.stream.stop()  # lets what was written play out
        self.stream.close()


def _live(args: argparse.Namespace) -> int:
    sd = _sounddevice()
    model = load_model(args)
    device, dev, rate = input_device(sd, args.device, _no_microphone)
    denoiser = Denoiser(model, rate, 1, args.atten_lim)
    if args.record:
        if Path(args.record).is_dir():
            raise DenoiseError(f"--record {args.record} is a folder; give a file name")
        fmt, subtype, _ = output_format(args.record, None, args.subtype)
        try:
            sink, target = Writer(args.record, rate, 1, fmt, subtype), args.record
        except OSError as e:
            raise DenoiseError(f"cannot write {args.record}: {e}") from None
    else:
        sink = Speakers(sd, parse_device(args.output_device), rate)
        target = sink.name

    def put(y: np.ndarray, last: bool = False) -> None:
        if isinstance(sink, Speakers):
            sink.write(y, last=last)
        else:
            sink.write(y)

    try:
        mic = Microphone(sd, device, rate, LIVE_BLOCK_S, _no_microphone)
    except SystemExit:
        _close_sink(sink)
        raise
    print(f"denoising {dev['name']} at {rate} Hz to {target} (Ctrl-C to stop)", file=sys.stderr, flush=True)
    try:
        mic.pump(args.duration, lambda block: put(denoiser.feed(block[None])))
        put(denoiser.finish(), last=True)
        if isinstance(sink, Writer):
            sink.commit()
        else:
            sink.close()
    except BaseException:
        _close_sink(sink)
        raise
    seconds = denoiser.frames_in / rate
    rtf = f"{denoiser.busy_s / seconds:.3f}" if seconds > 0 else "n/a"
    underflows = 0 if isinstance(sink, Writer) else sink.underflows
    print(
        f"summary: {seconds:.2f} s processed (1 channel at {rate} Hz) to {target}, "
        f"{_plural(mic.overflows, 'input overflow')}, {_plural(underflows, 'output underflow')}, "
        f"real-time factor {rtf}",
        file=sys.stderr,
        flush=True,
    )
    return 0


def _close_sink(sink) -> None:
    if isinstance(sink, Writer):
        sink.discard()
    else:
        try:
            sink.close()
        except Exception:
            pass


def _no_microphone(e: Exception) -> SystemExit:
    return DenoiseError(
        f"no usable microphone ({e}); pick one from --list-devices with --device, "
        "or denoise a file: edgessm denoise IN OUT"
    )
