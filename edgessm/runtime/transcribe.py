"""``edgessm transcribe``: speech to text from recordings or live from the microphone (torch-free).

edgessm transcribe talk.wav                       # the transcript on stdout, a line per segment
edgessm transcribe a.flac b.mp3 --json            # JSON lines: segments with word timestamps
edgessm transcribe --input mic                    # live captions: partial text updates in place
sox in.wav -t wav - | edgessm transcribe -        # a wav/flac stream on stdin

A recording streams through the stepwise graph a block at a time (constant memory for hours of
audio, any rate, format and channel count: channels are averaged). A segment ends when the speaker
pauses (``--pause``) or at ``--max-segment`` seconds. The transcript goes to stdout; progress, live
partial results and the summary go to stderr, so ``edgessm transcribe x.wav > x.txt`` keeps only text.

On stdin a 16-bit PCM wav stream is read as it arrives too (constant memory, its length may be left
open as streaming writers do); other containers on stdin (FLAC, Ogg, MP3, 24-bit or float wav) are
read whole first, as libsndfile must seek in them: pipe ``-t wav -e signed -b 16`` for hours of audio.
A stream cut off before the length its header promises fails at its end, after the text of what came.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from .level import AGC_CHOICES

BLOCK_S = 1.0  # seconds of a recording read per block
PROGRESS_MIN_S = 5.0  # no progress bar for inputs shorter than this


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("inputs", nargs="*", metavar="IN", help="audio files (wav, flac, ogg, mp3, ...) or '-' (stdin)")
    ap.add_argument("--input", dest="live", choices=["mic"], help="'mic': live captioning from the microphone")
    ap.add_argument("--model", default="asr", help="shipped model name or path to a recognizer .onnx graph")
    ap.add_argument("--int8", action="store_true", help="use the int8 graph of a shipped model")
    ap.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    ap.add_argument("--agc", choices=AGC_CHOICES, default="graph",
                    help="the input level control (quiet input raised to the level the model was trained on): as "
                         "the graph asks (default; the shipped recognizer does not), on, or off")  # fmt: skip
    ap.add_argument("--json", action="store_true", help="JSON lines: one final segment each, with word timestamps")
    ap.add_argument("--words", metavar="LIST",
                    help="closed vocabulary: comma-separated words or @FILE (one per line); final results are the "
                         "most probable sequence of these words (commands, digits)")  # fmt: skip
    ap.add_argument(
        "--one-word",
        action="store_true",
        help="with --words: each result is exactly one of the words (a command per utterance)",
    )
    ap.add_argument("--lm", metavar="NPZ",
                    help="word n-gram model (edgessm lm): final results by beam search with it; default: the "
                    "model's own (lm.npz in its folder, if it ships one); 'none': greedy decoding")  # fmt: skip
    ap.add_argument("--beam", type=int, help="with a word model: hypotheses kept per frame (default: the "
                    "model's shipped setting, else 16)")  # fmt: skip
    ap.add_argument("--lm-weight", type=float, help="with a word model: its weight (default: shipped, else 0.5)")
    ap.add_argument("--word-bonus", type=float, help="with a word model: log-score added per word (default: "
                    "shipped, else 1.0)")  # fmt: skip
    ap.add_argument(
        "--open-vocabulary",
        action="store_true",
        help="with a word model: also write words outside its vocabulary (default: only its words)",
    )
    ap.add_argument("--pause", type=float, default=0.8, metavar="S", help="a pause this long ends a segment")
    ap.add_argument("--max-segment", type=float, default=20.0, metavar="S", help="longest segment in seconds")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar on the terminal")
    live = ap.add_argument_group("live (microphone)")
    live.add_argument("--device", help="input device (name or index); see --list-devices")
    live.add_argument("--duration", type=float, metavar="S", help="stop after this many seconds")
    live.add_argument("--list-devices", action="store_true", help="list audio devices and exit")


def _fail(message: str) -> SystemExit:
    return SystemExit(f"edgessm transcribe: {message}")


def _word_json(w) -> dict:
    out = {"word": w.text, "start": round(w.start_s, 2), "end": round(w.end_s, 2)}
    if w.confidence is not None:  # --one-word: the word's share of the probability
        out["confidence"] = round(w.confidence, 3)
    return out


class Printer:
    """Writes final segments to stdout and the live partial line to stderr (rewritten in place)."""

    def __init__(self, as_json: bool, label: str | None = None, live: bool = False) -> None:
        self.as_json, self.label, self.live = as_json, label, live
        self._shown = 0

    def final(self, seg, source: str | None = None) -> None:
        self.clear()
        if self.as_json:
            event = {
                "text": seg.text,
                "start": round(seg.start_s, 2),
                "end": round(seg.end_s, 2),
                "words": [_word_json(w) for w in seg.words],
            }
            if source is not None:
                event = {"file": source, **event}
            print(json.dumps(event), flush=True)
        elif seg.text:
            print(f"{source}: {seg.text}" if self.label and source else seg.text, flush=True)

    def partial(self, text: str) -> None:
        if not self.live or self.as_json:
            return
        width = 78
        line = text if len(text) <= width else "…" + text[-(width - 1) :]
        sys.stderr.write("\r" + line.ljust(self._shown))
        sys.stderr.flush()
        self._shown = len(line)

    def clear(self) -> None:
        if self._shown:
            sys.stderr.write("\r" + " " * self._shown + "\r")
            sys.stderr.flush()
            self._shown = 0


def _progress(total_s: float, name: str):
    from tqdm import tqdm

    fmt = "{desc} {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s [{elapsed}<{remaining}]"
    return tqdm(total=total_s, file=sys.stderr, leave=False, dynamic_ncols=True, desc=name, bar_format=fmt)


def load_recognizer(args: argparse.Namespace):
    from .ctc import EndpointConfig
    from .registry import resolve_graph
    from .session import StepModel
    from .transcriber import NotARecognizer, Transcriber

    if args.pause <= 0 or args.max_segment <= 0:
        raise _fail("--pause and --max-segment must be positive (seconds)")
    vocabulary = read_words(args.words) if args.words else None
    if args.one_word and not vocabulary:
        raise _fail("--one-word needs --words (the words an utterance can be)")
    try:
        # files go through the model's graph for files (larger chunks, same transcript) when it has one
        graph = resolve_graph(args.model, int8=args.int8, files=not args.live)
        model = StepModel(graph, threads=args.threads, agc=args.agc)
        endpoint = EndpointConfig(trailing_silence_s=args.pause, max_segment_s=args.max_segment)
        lm = word_model(args, graph, words=vocabulary is not None)
        # refuse a non-recognizer or a bad vocabulary before any input
        rescorer = beam_decoder(model.info.labels, args, lm, graph) if lm else None
        Transcriber(model, endpoint, vocabulary, args.one_word, rescorer=rescorer)
    except (NotARecognizer, FileNotFoundError, ValueError, OSError) as e:
        raise _fail(str(e)) from None
    return lambda: Transcriber(model, endpoint, vocabulary, args.one_word, rescorer=rescorer)


def word_model(args: argparse.Namespace, graph, words: bool = False) -> str | None:
    """The word model final segments are decoded with: ``--lm PATH``; ``--lm none``: none (greedy); no
    ``--lm``: the one the model ships (its folder's ``lm.npz``), for files and live input alike (the search
    runs once per final segment: ~25 ms per second of speech on one core), none with ``--words`` (a word
    list is its own language model)."""
    from .registry import shipped_lm

    if args.lm is not None:
        return None if args.lm.lower() == "none" else args.lm
    if words:
        return None
    path = shipped_lm(graph)
    return str(path) if path is not None else None


def beam_decoder(labels, args: argparse.Namespace, lm: str | None = None, graph=None):
    """The beam decoder over the word model ``lm`` (default ``args.lm``), with clear errors for a bad file;
    ``--beam``, ``--lm-weight``, ``--word-bonus`` where given, else the settings ``graph``'s folder ships
    with its word model (:func:`~edgessm.runtime.registry.shipped_lm_settings`), else the defaults."""
    from pathlib import Path

    from .beam import BeamDecoder
    from .ngram import WordLM
    from .registry import LM_DEFAULTS, shipped_lm_settings

    shipped = shipped_lm_settings(graph) if graph is not None else LM_DEFAULTS
    beam, alpha, beta = (shipped[k] if getattr(args, k, None) is None else getattr(args, k)
                         for k in LM_DEFAULTS)  # fmt: skip
    path = Path(lm or args.lm).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"--lm {path}: no such file (build one: python -m edgessm.runtime.ngram --help)")
    try:
        lm = WordLM.load(path)
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(f"--lm {path}: not a word model written by edgessm ({e})") from None
    closed = not getattr(args, "open_vocabulary", False)
    return BeamDecoder(labels, lm, beam=int(beam), alpha=float(alpha), beta=float(beta), closed=closed)


def read_words(spec: str) -> list[str]:
    """``--words``: ``yes,no,up`` or ``@words.txt`` (one word per line, ``#`` comments)."""
    from edgessm.data.corpora import normalize_text

    if spec.startswith("@"):
        try:
            text = open(spec[1:], encoding="utf-8").read()
        except OSError as e:
            raise _fail(f"--words: cannot read {spec[1:]} ({e.strerror})") from None
        items = [line.split("#")[0] for line in text.splitlines()]
    else:
        items = spec.split(",")
    words = sorted({w for item in items for w in normalize_text(item).split()})
    if not words:
        raise _fail(f"--words {spec!r} holds no words")
    return words


def run(args: argparse.Namespace) -> int:
    if args.list_devices:
        from .devices import sounddevice_or_exit

        print(sounddevice_or_exit("edgessm transcribe", "transcribe a recording").query_devices())
        return 0
    if args.live and args.inputs:
        raise _fail("give audio files or --input mic, not both")
    if not args.live and not args.inputs:
        raise _fail("nothing to transcribe: give audio files (or '-' for stdin), or --input mic to caption live")
    if args.inputs.count("-") > 1:
        raise _fail("stdin ('-') can be read only once")
    make = load_recognizer(args)
    if args.live:
        return _live(make, args)
    printer = Printer(args.json, label=None if len(args.inputs) == 1 else "file")
    heard = busy = 0.0
    failed = 0
    for name in args.inputs:
        try:
            h, b = _transcribe_file(make(), name, printer, args)
        except _InputError as e:
            printer.clear()
            print(f"edgessm transcribe: {e}", file=sys.stderr, flush=True)
            failed += 1
            continue
        heard, busy = heard + h, busy + b
    if heard > 0:
        print(f"transcribed {heard:.1f} s of audio in {busy:.1f} s (real-time factor {busy / heard:.3f})",
              file=sys.stderr, flush=True)  # fmt: skip
    return 1 if failed else 0


class _InputError(Exception):
    pass


def _transcribe_file(rec, name: str, printer: Printer, args: argparse.Namespace) -> tuple[float, float]:
    from edgessm.data.audio import AudioError

    from .sources import open_source

    try:
        source = open_source(name)
    except AudioError as e:
        raise _InputError(str(e)) from None
    label = "stdin" if name == "-" else name
    bar = None
    if (source.seconds or 0.0) >= PROGRESS_MIN_S and sys.stderr.isatty() and not args.no_progress:  # length known
        bar = _progress(source.seconds, "transcribing")
    t0 = time.perf_counter()
    try:
        for block in source.blocks(int(BLOCK_S * source.rate)):
            for seg in rec.accept_waveform(source.rate, block.mean(axis=0)):
                if bar is not None:
                    bar.clear()
                printer.final(seg, label)
            if bar is not None:
                bar.update(block.shape[1] / source.rate)
        for seg in rec.finish():
            printer.final(seg, label)
    except AudioError as e:
        raise _InputError(str(e)) from None
    finally:
        source.close()
        if bar is not None:
            bar.close()
    return rec.heard_s, time.perf_counter() - t0


def _no_microphone(e: Exception) -> SystemExit:
    return _fail(
        f"no usable microphone ({e}); pick one from --list-devices with --device, or transcribe a recording: "
        "edgessm transcribe FILE"
    )


def _live(make, args: argparse.Namespace) -> int:
    from .devices import Microphone, input_device, sounddevice_or_exit

    sd = sounddevice_or_exit("edgessm transcribe: the microphone", "transcribe a recording: edgessm transcribe FILE")
    device, dev, rate = input_device(sd, args.device, _no_microphone)
    rec = make()
    printer = Printer(args.json, live=True)

    def feed(block: np.ndarray) -> None:
        for seg in rec.accept_waveform(rate, block):
            printer.final(seg)
        printer.partial(rec.partial().text)

    mic = Microphone(sd, device, rate, 0.05, _no_microphone)
    print(f"captioning {dev['name']} at {rate} Hz (Ctrl-C to stop)", file=sys.stderr, flush=True)
    mic.pump(args.duration, feed)
    for seg in rec.finish():
        printer.final(seg)
    printer.clear()
    note = f", {mic.overflows} input overflows" if mic.overflows else ""
    print(f"heard {rec.heard_s:.1f} s{note}", file=sys.stderr, flush=True)
    return 0
