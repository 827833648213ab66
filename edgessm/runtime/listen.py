"""``edgessm listen``: live keyword spotting from the microphone or a file (torch-free).

edgessm listen --model kws35                     # default microphone
edgessm listen --model kws35 --input demo.wav    # a recording, as if it were live
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import time

import numpy as np


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--model", default="kws35", help="shipped model name or path to a keyword-spotting .onnx graph")
    ap.add_argument("--input", default="mic", help="'mic' (default), an audio file, or '-' for raw PCM on stdin")
    ap.add_argument(
        "--rate", type=int, default=16000, help="sample rate of raw PCM on stdin (16-bit little-endian mono)"
    )
    ap.add_argument("--fast", action="store_true", help="process a file as fast as possible instead of in real time")
    ap.add_argument("--record", metavar="WAV", help="save exactly the 16 kHz audio the model heard")
    ap.add_argument("--duration", type=float, help="stop listening to the microphone after this many seconds")
    ap.add_argument("--device", help="input device (name or index) for the microphone; see --list-devices")
    ap.add_argument("--list-devices", action="store_true", help="list audio input devices and exit")
    ap.add_argument("--threshold", type=float, default=0.7, help="smoothed posterior needed to fire (0..1)")
    ap.add_argument("--smooth", type=int, default=4, help="frames of posterior smoothing")
    ap.add_argument("--refractory", type=float, default=1.0, help="seconds after a detection with no other")
    ap.add_argument("--keywords", nargs="+", help="only these words, e.g. --keywords yes,no (default: all)")
    ap.add_argument("--int8", action="store_true", help="use the int8 graph of a shipped model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="one JSON object per detection")


def _print(det, as_json: bool) -> None:
    if as_json:
        # "time": seconds from the start of the stream at which the word's decision frame ended
        event = {"keyword": det.label, "time": round(det.time_s, 3), "score": round(det.score, 3)}
        print(json.dumps(event), flush=True)
    else:
        print(f"{det.time_s:8.2f} s  {det.label:<10} {det.score:.2f}", flush=True)


def run(args: argparse.Namespace) -> int:
    from edgessm.data.audio import AudioError, load_audio

    from .kws import DecisionConfig, KeywordDecider
    from .registry import resolve_graph
    from .session import StepModel

    if args.list_devices:
        import sounddevice as sd

        print(sd.query_devices())
        return 0
    try:
        model = StepModel(resolve_graph(args.model, int8=args.int8), threads=args.threads)
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(f"edgessm listen: {e}") from None
    info = model.info
    if info.task != "kws" or not info.labels:
        raise SystemExit(f"edgessm listen: {args.model} is a {info.task or 'non-keyword'} model, not a keyword spotter")
    keywords = tuple(w for item in args.keywords or () for w in item.split(",") if w)
    cfg = DecisionConfig(args.threshold, args.smooth, args.refractory, keywords)
    try:
        decider = KeywordDecider(info.labels, info.stride / info.sample_rate, cfg)
    except ValueError as e:
        raise SystemExit(f"edgessm listen: {e}") from None
    stream = model.create_stream()

    def drain() -> None:
        for logits in stream.outputs():
            for det in decider.process(logits):
                _print(det, args.json)

    heard: list[np.ndarray] = []
    if args.record:
        stream.on_audio = heard.append

    def finish() -> int:
        stream.flush()
        drain()
        if args.record:
            from edgessm.data.audio import write_audio

            audio = np.concatenate(heard) if heard else np.zeros(0, np.float32)
            write_audio(args.record, audio[: stream.samples_in], info.sample_rate)
            print(f"recorded {stream.samples_in / info.sample_rate:.2f} s to {args.record}", file=sys.stderr)
        return 0

    if args.input == "-":  # raw PCM16 on stdin, 100 ms at a time
        block = max(1, args.rate // 10) * 2
        while data := sys.stdin.buffer.read(block):
            pcm = np.frombuffer(data[: len(data) - len(data) % 2], dtype="<i2").astype(np.float32) / 32768.0
            stream.accept_waveform(args.rate, pcm)
            drain()
        return finish()

    if args.input != "mic":
        try:
            audio, rate = load_audio(args.input, sr=None)
        except AudioError as e:
            raise SystemExit(f"edgessm listen: {e}") from None
        block = max(1, rate // 10)  # feed 100 ms at a time, as a microphone would
        start = time.monotonic()
        for pos in range(0, len(audio), block):
            if not args.fast:  # pace the file like a live microphone
                time.sleep(max(0.0, start + pos / rate - time.monotonic()))
            stream.accept_waveform(rate, audio[pos : pos + block])
            drain()
        return finish()

    import sounddevice as sd

    blocks: queue.Queue[np.ndarray] = queue.Queue()
    try:
        dev = sd.query_devices(args.device, "input")
    except (ValueError, sd.PortAudioError) as e:
        raise SystemExit(f"edgessm listen: no usable input device ({e}); try --list-devices or --input FILE") from None
    rate = int(dev["default_samplerate"])
    words = ", ".join(decider.labels[i] for i in np.flatnonzero(decider.active))
    print(f"listening on {dev['name']} at {rate} Hz for {words} (Ctrl-C to stop)", file=sys.stderr)
    with sd.InputStream(device=args.device, channels=1, samplerate=rate, dtype="float32", blocksize=rate // 20,
                        callback=lambda data, frames, t, status: blocks.put(data[:, 0].copy())):  # fmt: skip
        try:
            start = time.monotonic()
            while args.duration is None or time.monotonic() - start < args.duration:
                stream.accept_waveform(rate, blocks.get())
                drain()
        except KeyboardInterrupt:
            print("", file=sys.stderr)
    return finish()
