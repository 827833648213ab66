#!/usr/bin/env python3
"""Stream a wav file through any edgessm stepwise ONNX graph, chunk by chunk.

Needs only onnxruntime and numpy (``pip install onnxruntime numpy``); copy this file into your
app as a starting point. Usage::

    python stream_wav.py MODEL.onnx INPUT.wav [--out OUT.wav|OUT.npy] [--threads 1]

The wav must be mono or stereo PCM16 at the graph's sample rate (16 kHz); stereo is mixed down.
What is printed depends on the graph's task: keyword-spotting frames with their best label,
CTC transcripts, or (denoising) the path of the written audio.

A graph with ``input_agc`` metadata wants its input through the level control of
``edgessm/runtime/level.py`` (numpy only: copy it beside this file, or have edgessm installed); without it
the audio goes in as it is and a note says so (quiet recordings then score lower).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import wave

import numpy as np
import onnxruntime as ort


def read_wav(path: str) -> tuple[np.ndarray, int]:
    with wave.open(path, "rb") as w:
        if w.getsampwidth() != 2:
            raise SystemExit(f"{path}: only 16-bit PCM wav is supported by this runner")
        rate, channels = w.getframerate(), w.getnchannels()
        data = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0
    return data.reshape(-1, channels).mean(axis=1), rate


def write_wav(path: str, audio: np.ndarray, rate: int) -> None:
    pcm = (np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2")
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("wav")
    ap.add_argument("--out", help="write the outputs: .wav (denoising) or .npy (any task)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    session = ort.InferenceSession(args.model, opts, providers=["CPUExecutionProvider"])
    meta = session.get_modelmeta().custom_metadata_map
    chunk, rate, task = int(meta["chunk"]), int(meta.get("sample_rate", 16000)), meta.get("task", "")
    labels = json.loads(meta.get("labels", "[]"))

    audio, file_rate = read_wav(args.wav)
    if file_rate != rate:
        raise SystemExit(f"{args.wav} is {file_rate} Hz; the graph wants {rate} Hz (resample it first, e.g. with sox)")
    gains = None  # the level control's gain of each input sample (a denoiser's output is divided by it)
    if meta.get("input_agc"):  # quiet input raised to the level the model was trained on (causal, boost-only)
        try:
            from edgessm.runtime.level import AgcConfig, LevelControl
        except ImportError:
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # a copy of level.py beside this file
            try:
                from level import AgcConfig, LevelControl
            except ImportError:
                AgcConfig = None
        if AgcConfig is None:
            print("note: the graph asks for the input level control (input_agc) and level.py is not here; "
                  "feeding the audio as it is", file=sys.stderr)  # fmt: skip
        else:
            control = LevelControl(AgcConfig.from_json(meta["input_agc"]), rate)
            audio = control.process(audio)
            gains = control.last_gain
    n = len(audio)
    # A graph whose output runs `delay_samples` behind its input (the spectral denoiser: one hop) gets
    # that many zeros more, and its output is read from `delay` on: the file stays aligned.
    delay = int(meta.get("delay_samples", 0))
    audio = np.concatenate([audio, np.zeros(delay + (-(n + delay) % chunk), np.float32)])  # pad the last chunk

    # The state: one zero tensor per state input, fed back after every call. A graph with
    # `warmup_samples` starts from the state after that much silence (its outputs are discarded).
    inputs = session.get_inputs()
    state = [np.zeros(i.shape, np.float32) for i in inputs[1:]]
    for _ in range(-(-int(meta.get("warmup_samples", 0)) // chunk)):
        feed = {inputs[0].name: np.zeros((1, 1, chunk), np.float32)}
        feed.update({i.name: s for i, s in zip(inputs[1:], state, strict=True)})
        state = session.run(None, feed)[1:]
    outputs, t0 = [], time.perf_counter()
    for pos in range(0, len(audio), chunk):
        feed = {inputs[0].name: audio[pos : pos + chunk].reshape(1, 1, chunk)}
        feed.update({i.name: s for i, s in zip(inputs[1:], state, strict=True)})
        result = session.run(None, feed)
        outputs.append(result[0][0])
        state = result[1:]
    elapsed = time.perf_counter() - t0
    out = np.concatenate(outputs, axis=-1)
    print(f"{len(outputs)} chunks of {chunk} samples, real-time factor {elapsed / (n / rate):.4f}", file=sys.stderr)

    if task == "kws" and labels:
        probs = np.exp(out - out.max(axis=0)) / np.exp(out - out.max(axis=0)).sum(axis=0)
        frame_s = int(meta["stride"]) / rate
        for f in range(probs.shape[1]):
            best = int(probs[:, f].argmax())
            if labels[best] not in ("_silence_", "_unknown_") and probs[best, f] > 0.8:
                print(f"{f * frame_s:7.2f} s  {labels[best]:<10} {probs[best, f]:.2f}")
    elif task == "asr":
        alphabet = json.loads(meta.get("alphabet", "[]")) or ["", " ", "'", *"abcdefghijklmnopqrstuvwxyz"]
        ids = out.argmax(axis=0)
        text = [alphabet[i] for k, i in enumerate(ids) if i != 0 and (k == 0 or i != ids[k - 1])]
        print("".join(text).strip())
    if args.out:
        if args.out.endswith(".wav") and out.ndim == 2 and out.shape[0] == 1:
            clean = out[0, delay : delay + n]
            write_wav(args.out, clean / gains if gains is not None else clean, rate)  # the input's level again
        else:
            np.save(args.out, out)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
