"""Soak test: an hour of speech and noise piped through listen, denoise and transcribe, in constant memory.

    edgessm bench soak                          # 60 minutes of audio
    edgessm bench soak --minutes 10 --out runs/soak

The audio: real read speech from the shared data folder (``shared_read_speech``; without it the two
demo recordings, repeated) with pauses between the sentences, mixed with noise (the shared background
recordings at 5-20 dB SNR, else white noise), 16 kHz 16-bit; and one fixed segment S (the demo
keywords, then the demo's noisy speech: 20 s, ``--segment``) put in at minute 1 and again at minute
``minutes - 1`` (for shorter runs: a third of the way in, and as far from the end). It is made a block
at a time into a temporary raw file (the benchmark never holds it whole either) while the denoise and
kws graphs run over it in this process (:class:`~edgessm.runtime.session.StepModel` streams: the
largest magnitude of their recurrent state, which must not drift). Then each command gets it piped
as a 16-bit wav stream of unknown length, as streaming writers send it, one command at a time:

    edgessm listen --model kws35 --input - --fast --json
    edgessm denoise - OUT --subtype FLOAT
    edgessm transcribe - --json

For each: wall time and real-time factor (startup included; it must be below 1), the child's VmRSS from
``/proc/PID/status`` after 1, 10, 30 and 60 minutes of audio were fed (the same fractions of a shorter
run), its peak RSS, and what it made of the two copies of S: denoise must give back every sample and
the same output for both copies once its state has settled (the last 15 s of S: from a quarter of
``--segment``, at most 5 s, to the graph's 10 ms lookahead before its end, which hears what follows S):
the largest difference, and from where in S on the copies agree within float round-off; listen's
detections and transcribe's words within the two copies, the same or not. A Markdown table goes to
stdout, the numbers to ``--out DIR/soak.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

RATE = 16000
BLOCK = RATE // 10  # frames made, fed to the graphs and written to a pipe at a time
SPEECH_DBFS, WHITE_NOISE_DBFS = -26.0, -45.0
SNRS_DB = (20.0, 10.0, 5.0, 15.0)  # the shared noise recordings' levels under the speech, in turn
TOLERANCE = 1e-4  # float32 round-off between two runs of a graph over the same samples from different states
DEMOS = Path(__file__).resolve().parents[2] / "demos"
CHECKPOINTS_MIN = (1, 10, 30, 60)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="edgessm bench soak", description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=60.0, help="minutes of audio piped into each command")
    ap.add_argument("--out", metavar="DIR", help="also write the report to DIR/soak.json")
    ap.add_argument("--segment", type=float, default=20.0, help=argparse.SUPPRESS)  # seconds of S (short runs)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    return ap


# --- the audio -------------------------------------------------------------------------------------------------


def _level(x: np.ndarray, dbfs: float) -> np.ndarray:
    rms = float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if len(x) else 0.0
    return (x * (10 ** (dbfs / 20) / rms)).astype(np.float32) if rms > 0 else x.astype(np.float32)


def _read(path: str | os.PathLike) -> np.ndarray:
    """A short recording as 16 kHz mono float32."""
    import soundfile as sf
    import soxr

    x, rate = sf.read(path, dtype="float32", always_2d=True)
    x = x.mean(axis=1)
    return soxr.resample(x, rate, RATE, quality="HQ").astype(np.float32) if rate != RATE else x


class _Speech:
    """Sentences one after another with pauses between them, each at the same level; in a fixed order."""

    def __init__(self, paths: list[str], seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.paths = [paths[i] for i in self.rng.permutation(len(paths))]
        self.next, self.buf = 0, np.zeros(0, np.float32)

    def take(self, n: int) -> np.ndarray:
        while len(self.buf) < n:
            clip = _level(_read(self.paths[self.next % len(self.paths)]), SPEECH_DBFS)
            pause = np.zeros(int(self.rng.uniform(0.2, 1.2) * RATE), np.float32)
            self.buf = np.concatenate([self.buf, clip, pause])
            self.next += 1
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


class _Noise:
    """The noise recordings read a block at a time in turn (each at the next of :data:`SNRS_DB` under
    the speech), or seeded white noise."""

    def __init__(self, paths: list[Path], seed: int) -> None:
        self.paths, self.turn, self.file, self.gain = paths, 0, None, 1.0
        self.rng = np.random.default_rng(seed + 1)

    def _open_next(self) -> None:
        import soundfile as sf

        path = self.paths[self.turn % len(self.paths)]
        self.file = sf.SoundFile(path)
        probe = self.file.read(10 * self.file.samplerate, dtype="float32", always_2d=True).mean(axis=1)
        self.file.seek(0)
        rms = float(np.sqrt(np.mean(np.square(probe, dtype=np.float64)))) or 1.0
        self.gain = 10 ** ((SPEECH_DBFS - SNRS_DB[self.turn % len(SNRS_DB)]) / 20) / rms
        self.resampler = None
        if self.file.samplerate != RATE:
            import soxr

            self.resampler = soxr.ResampleStream(self.file.samplerate, RATE, 1, dtype="float32", quality="HQ")
        self.turn += 1
        self.buf = np.zeros(0, np.float32)

    def take(self, n: int) -> np.ndarray:
        if not self.paths:
            return (10 ** (WHITE_NOISE_DBFS / 20) * self.rng.standard_normal(n)).astype(np.float32)
        if self.file is None:
            self._open_next()
        while len(self.buf) < n:
            x = self.file.read(n, dtype="float32", always_2d=True).mean(axis=1)
            if self.resampler is not None:
                x = self.resampler.resample_chunk(x)
            self.buf = np.concatenate([self.buf, self.gain * x.astype(np.float32)])
            if self.file.tell() >= self.file.frames:
                self.file.close()
                rest = self.buf
                self._open_next()
                self.buf = rest
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


def segment_audio(seconds: float) -> np.ndarray:
    """S: the demo keywords, then the demo's noisy speech, ``seconds`` long, with a fixed faint white noise
    (16-bit values as float32)."""
    x = np.concatenate([_read(DEMOS / "keywords.wav"), _read(DEMOS / "noisy_speech.wav")])
    n = round(seconds * RATE)
    x = np.pad(x, (0, max(0, n - len(x))))[:n]
    x = x + 10 ** (WHITE_NOISE_DBFS / 20) * np.random.default_rng(1234).standard_normal(n).astype(np.float32)
    return _quantize(x).astype(np.float32) / 32768.0


def _frames(path: Path) -> int:
    import soundfile as sf

    try:
        return sf.info(str(path)).frames
    except RuntimeError:
        return 0


def _quantize(x: np.ndarray) -> np.ndarray:
    return np.clip(np.round(x * 32768.0), -32768, 32767).astype("<i2")


class Program:
    """The soak audio: ``minutes`` of speech + noise with S at :attr:`starts` (frames), made block by block."""

    def __init__(self, minutes: float, segment_s: float, seed: int = 0) -> None:
        from edgessm.data.corpora import shared_data_dir, shared_noises, shared_read_speech

        if not (DEMOS / "keywords.wav").is_file() or not (DEMOS / "noisy_speech.wav").is_file():
            raise SystemExit(f"soak: S is made of the demo recordings, which are not in {DEMOS} (a source checkout)")
        self.frames = round(minutes * 60 * RATE)
        lead = min(60.0, minutes * 60 / 3)
        if not 0 < segment_s <= lead:
            raise SystemExit(f"soak: --segment must be in (0, {lead:g}] s for --minutes {minutes:g}")
        self.segment = segment_audio(segment_s)
        self.starts = [round(lead * RATE), self.frames - round(lead * RATE)]
        self.settle = round(min(5.0, segment_s / 4) * RATE)  # S's first seconds: the models' state settles
        shared = shared_data_dir(required=False)
        clips = shared_read_speech(shared) if shared is not None and (shared / "real_read_speech").is_dir() else []
        noises = shared_noises(shared) if shared is not None else []
        noises = [p for p in noises if p.is_file() and _frames(p) > 0]
        if clips:
            self.speech_from = f"real read speech ({len(clips)} sentences, shared data)"
            paths = [c.path for c in clips]
        else:
            self.speech_from = "demos/keywords.wav and demos/noisy_speech.wav, repeated (no shared data)"
            paths = [str(DEMOS / "keywords.wav"), str(DEMOS / "noisy_speech.wav")]
        self.noise_from = f"{len(noises)} background recordings at 5-20 dB SNR" if noises else "white noise"
        self._paths, self._noises, self._seed = paths, noises, seed

    def blocks(self):
        """int16 blocks of :data:`BLOCK` frames (the last one shorter), made as they are asked for."""
        speech, noise = _Speech(self._paths, self._seed), _Noise(self._noises, self._seed)
        seg = len(self.segment)
        for pos in range(0, self.frames, BLOCK):
            n = min(BLOCK, self.frames - pos)
            x = speech.take(n) + noise.take(n)
            y = _quantize(x)
            for start in self.starts:  # S over what would be there
                lo, hi = max(pos, start), min(pos + n, start + seg)
                if lo < hi:
                    y[lo - pos : hi - pos] = _quantize(self.segment[lo - start : hi - start])
            yield y


def checkpoints(minutes: float) -> list[int]:
    """Frames fed at which memory and state are looked at: 1, 10, 30, 60 minutes (and the end of a longer
    run), or the same fractions of a shorter one; on block boundaries."""
    total = minutes * 60
    marks = [60.0 * m for m in CHECKPOINTS_MIN] if minutes >= 60 else [total * m / 60 for m in CHECKPOINTS_MIN]
    if minutes > 60:
        marks.append(total)
    frames = [min(round(minutes * 60 * RATE), max(BLOCK, round(t * RATE / BLOCK) * BLOCK)) for t in marks]
    return sorted(set(frames))


# --- in this process: the graphs' state over the audio ---------------------------------------------------------


class _StateWatch:
    """One graph streaming the audio in this process: the largest |value| of its recurrent SSM states
    (``*.ssm.x``; histories of inputs and counters are bounded by construction) at the checkpoints and
    in between, and of every state tensor at the checkpoints."""

    def __init__(self, name: str, graph: Path) -> None:
        from edgessm.runtime.session import StepModel

        self.name, self.model = name, StepModel(graph)
        self.graph = graph.name
        self.stream = self.model.create_stream()
        names = [n for n, _ in self.model.info.states]
        self.recurrent = [i for i, n in enumerate(names) if n.endswith("ssm.x")] or list(range(len(names)))
        self.names = names
        self.at: list[float] = []  # max |recurrent state| at each checkpoint
        self.peak: list[float] = []  # the largest since the previous checkpoint
        self.tensors: list[dict[str, float]] = []  # max |value| of every state tensor at each checkpoint
        self._peak = 0.0

    def feed(self, x: np.ndarray) -> None:
        self.stream.accept_waveform(RATE, x)
        for _ in self.stream.outputs():
            pass
        self._peak = max(self._peak, self.now())

    def now(self) -> float:
        return max((float(np.abs(self.stream.state[i]).max()) for i in self.recurrent), default=0.0)

    def checkpoint(self) -> None:
        self.at.append(self.now())
        self.peak.append(self._peak)
        self.tensors.append({n: float(np.abs(v).max()) for n, v in zip(self.names, self.stream.state, strict=True)})
        self._peak = 0.0

    def report(self) -> dict[str, Any]:
        recurrent = [self.names[i] for i in self.recurrent]
        return {"graph": self.graph, "recurrent": recurrent, "max_abs": self.at, "peak": self.peak,
                "tensors": self.tensors}  # fmt: skip


def make_audio(program: Program, path: Path, marks: list[int]) -> list[_StateWatch]:
    """Write the program to ``path`` (raw int16) block by block while the denoise and kws graphs stream it."""
    from edgessm.runtime.registry import resolve_graph

    watches = [
        _StateWatch("denoise", resolve_graph("denoise", files=True)),  # the graph `edgessm denoise` uses on files
        _StateWatch("kws35", resolve_graph("kws35")),
    ]
    fed, todo = 0, list(marks)
    with open(path, "wb") as f:
        for block in program.blocks():
            f.write(block.tobytes())
            x = block.astype(np.float32) / 32768.0
            for w in watches:
                w.feed(x)
            fed += len(block)
            while todo and fed >= todo[0]:
                todo.pop(0)
                for w in watches:
                    w.checkpoint()
    return watches


# --- the commands, fed through a pipe --------------------------------------------------------------------------


def wav_stream_header(rate: int = RATE, channels: int = 1) -> bytes:
    """A 16-bit PCM wav header whose sizes say "unknown length", as streaming writers send it."""
    unknown = 0xFFFFFFFF
    fmt = struct.pack("<HHIIHH", 1, channels, rate, rate * 2 * channels, 2 * channels, 16)
    return (
        struct.pack("<4sI4s4sI", b"RIFF", unknown, b"WAVE", b"fmt ", 16) + fmt + struct.pack("<4sI", b"data", unknown)
    )


def _memory_mb(pid: int) -> tuple[float, float] | None:
    """``(VmRSS, VmHWM)`` of a process in MB from ``/proc/PID/status`` (``None`` without /proc)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    try:
        return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024
    except (KeyError, ValueError):
        return None


def _small_pipe(pipe) -> None:
    """Shrink a pipe's buffer to one page (Linux), so that the audio written is the audio the command has
    read, give or take that page and its own read-ahead: memory is looked at where it says."""
    import fcntl

    try:
        fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, 4096)
    except (AttributeError, OSError):
        pass


def run_command(args: list[str], pcm: Path, frames: int, marks: list[int], folder: Path) -> dict[str, Any]:
    """Pipe the audio in ``pcm`` into ``edgessm ARGS`` as a wav stream of unknown length, a block at a time;
    its wall time, memory at the checkpoints, peak memory, exit status and the paths of its stdout/stderr."""
    name = args[0]
    out, err = folder / f"{name}.stdout", folder / f"{name}.stderr"
    shown = " ".join("OUT.wav" if a.startswith(str(folder)) else a for a in args)
    result: dict[str, Any] = {"command": f"edgessm {shown}", "rss_mb": [], "hwm_mb": []}
    with open(out, "wb") as stdout, open(err, "wb") as stderr, open(pcm, "rb") as audio:
        t0 = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-m", "edgessm", *args], stdin=subprocess.PIPE,
                                 stdout=stdout, stderr=stderr)  # fmt: skip
        _small_pipe(child.stdin)
        fed, todo, broken, high = 0, list(marks), False, 0.0
        try:
            child.stdin.write(wav_stream_header())
            while data := audio.read(2 * BLOCK):
                child.stdin.write(data)
                fed += len(data) // 2
                if fed % RATE < BLOCK and (mem := _memory_mb(child.pid)) is not None:  # once a second of audio
                    high = max(high, mem[1])
                while todo and fed >= todo[0]:
                    todo.pop(0)
                    child.stdin.flush()
                    mem = _memory_mb(child.pid)
                    result["rss_mb"].append(None if mem is None else round(mem[0], 1))
                    result["hwm_mb"].append(None if mem is None else round(mem[1], 1))
            child.stdin.close()
        except BrokenPipeError:  # the command stopped early: its stderr says why
            broken = True
            try:
                child.stdin.close()
            except BrokenPipeError:
                pass
        peak = high or None
        while child.poll() is None:  # its high-water mark until it exits (after exec: its own pages only)
            mem = _memory_mb(child.pid)
            peak = peak if mem is None else max(peak or 0.0, mem[1])
            time.sleep(0.01)
        wall = time.perf_counter() - t0
    seconds = frames / RATE
    result.update(
        returncode=child.returncode,
        wall_s=round(wall, 2),
        real_time_factor=round(wall / seconds, 4),
        faster_than_real_time=wall < seconds,
        peak_rss_mb=None if peak is None else round(peak, 1),
        fed_frames=fed,
    )
    rss = [r for r in result["rss_mb"] if r]
    result["rss_growth_pct"] = round(100 * (rss[-1] / rss[0] - 1), 1) if len(rss) >= 2 else None
    if child.returncode != 0 or broken:
        lines = err.read_text(errors="replace").strip().splitlines()
        result["error"] = lines[-1] if lines else f"exit status {child.returncode}"
    result["stdout"], result["stderr"] = str(out), str(err)
    return result


# --- what the commands made of the two copies of S ------------------------------------------------------------


def _json_lines(path: Path) -> list[dict]:
    events = []
    for line in Path(path).read_text(errors="replace").splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def denoise_checks(path: Path, program: Program, lookahead: int) -> dict[str, Any]:
    """Samples in and out, and the output over the two copies of S: from where its state settled to
    ``lookahead`` samples before its end (the graph's ``delay_samples``: the last outputs of S depend on
    what follows it), and over all of S."""
    import soundfile as sf

    found: dict[str, Any] = {"samples_in": program.frames}
    try:
        info = sf.info(str(path))
    except (RuntimeError, OSError):
        return found | {"samples_out": None, "samples_match": False}
    found |= {"samples_out": info.frames, "samples_match": info.frames == program.frames}
    seg, settle = len(program.segment), program.settle
    copies = [sf.read(str(path), start=s, stop=s + seg, dtype="float32", always_2d=True)[0][:, 0]
              for s in program.starts]  # fmt: skip
    if any(len(c) < seg for c in copies):
        return found
    diff = np.abs(copies[0] - copies[1])
    end = seg - lookahead
    settled = float(diff[settle:end].max())
    apart = np.flatnonzero(diff[:end] > TOLERANCE)  # where the copies differ by more than round-off
    converged = 0.0 if not len(apart) else None if apart[-1] == end - 1 else (apart[-1] + 1) / RATE
    found["segment"] = {
        "compared_s": [settle / RATE, end / RATE],  # the part of S compared, from its start
        "lookahead_s": lookahead / RATE,
        "max_abs_diff": settled,
        "identical": settled == 0.0,
        "within_tolerance": settled <= TOLERANCE,
        "tolerance": TOLERANCE,
        "max_abs_diff_whole_segment": float(diff.max()),
        "within_tolerance_from_s": converged,  # from this time in S on the copies agree (None: never)
        "max_abs_diff_per_second": [float(diff[i : i + RATE].max()) for i in range(0, seg, RATE)],
    }
    return found


def _windows(program: Program) -> list[tuple[float, float]]:
    seg = len(program.segment) / RATE
    return [(s / RATE, s / RATE + seg) for s in program.starts]


def listen_checks(path: Path, program: Program) -> dict[str, Any]:
    """listen's detections within each copy of S (times from the copy's start), the same or not: all of them,
    and those after the state settled."""
    events = [e for e in _json_lines(path) if "keyword" in e and "time" in e]
    copies = [[(e["keyword"], round(e["time"] - a, 2)) for e in events if a <= e["time"] < b]
              for a, b in _windows(program)]  # fmt: skip
    same = [k for k, _ in copies[0]] == [k for k, _ in copies[1]]
    shift = max((abs(x[1] - y[1]) for x, y in zip(*copies, strict=True)), default=0.0) if same else None
    settle = program.settle / RATE
    later = [[k for k, t in c if t >= settle] for c in copies]
    return {
        "detections": len(events),
        "segment": {
            "copies": copies,
            "same": same,
            "max_time_diff_s": shift,
            "same_after_settle": later[0] == later[1],
        },
    }


def transcribe_checks(path: Path, program: Program) -> dict[str, Any]:
    """transcribe's words lying wholly within each copy of S, the same or not: all of them, and those that
    start after the state settled."""
    segs = [e for e in _json_lines(path) if "words" in e]
    words = [w for s in segs for w in s["words"]]
    copies = [[w for w in words if a <= w["start"] and w["end"] <= b] for a, b in _windows(program)]
    text = [[w["word"] for w in c] for c in copies]
    settle = program.settle / RATE
    later = [
        [w["word"] for w in c if w["start"] - a >= settle] for c, (a, _) in zip(copies, _windows(program), strict=True)
    ]
    return {
        "segments": len(segs),
        "words": len(words),
        "segment": {
            "copies": [" ".join(c) for c in text],
            "same": text[0] == text[1],
            "same_after_settle": later[0] == later[1],
        },
    }


# --- the report --------------------------------------------------------------------------------------------------


def _clock(frames: int) -> str:
    s = frames / RATE
    return f"{int(s // 60)}:{s % 60:04.1f}" if s % 1 else f"{int(s // 60)}:{int(s % 60):02d}"


def _mb(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def _same(found: dict[str, Any]) -> str:
    if found["same"]:
        return "same"
    return "DIFFERENT" + (" (the same after the first seconds)" if found["same_after_settle"] else "")


def table(report: dict[str, Any]) -> str:
    marks = [_clock(f) for f in report["checkpoint_frames"]]
    seg = report["segment"]
    lines = [
        f"## soak: {report['minutes']:g} min of speech + noise at 16 kHz, piped as a 16-bit wav stream "
        "of unknown length",
        "",
        f"speech: {report['speech']}; noise: {report['noise']}; S: {seg['seconds']:g} s at "
        + " and ".join(_clock(s) for s in seg["starts"])
        + f" (compared after {seg['settle_s']:g} s)",
        "",
        f"| command | wall s | real-time factor | {' | '.join(f'VmRSS MB at {m}' for m in marks)} | growth "
        "| peak RSS MB | exit |",
        "|---|---:|---:|" + "---:|" * len(marks) + "---:|---:|---|",
    ]
    for name in ("listen", "denoise", "transcribe"):
        r = report["commands"][name]
        rss = " | ".join(_mb(x) for x in r["rss_mb"]) + " | n/a" * (len(marks) - len(r["rss_mb"]))
        growth = "n/a" if r["rss_growth_pct"] is None else f"{r['rss_growth_pct']:+.1f}%"
        rtf = f"{r['real_time_factor']:.4f}" + ("" if r["faster_than_real_time"] else " (SLOWER than real time)")
        status = "ok" if r["returncode"] == 0 else f"{r['returncode']}: {r.get('error', '')}"
        lines.append(f"| `{r['command']}` | {r['wall_s']:.1f} | {rtf} | {rss} | {growth} | {_mb(r['peak_rss_mb'])} "
                     f"| {status} |")  # fmt: skip
    dn, kw, tr = (report["commands"][k] for k in ("denoise", "listen", "transcribe"))
    lines += ["", "| check | result |", "|---|---|"]
    n_in, n_out = dn["samples_in"], dn.get("samples_out")
    lines.append(f"| denoise: samples in = samples out | {n_in:,} in, {'n/a' if n_out is None else f'{n_out:,}'} "
                 f"out: {'yes' if dn.get('samples_match') else 'NO'} |")  # fmt: skip
    if "segment" in dn:
        d = dn["segment"]
        verdict = "identical" if d["identical"] else ("within" if d["within_tolerance"] else "NOT within")
        tol = "" if d["identical"] else f" tolerance {d['tolerance']:g}"
        since = d["within_tolerance_from_s"]
        agree = "never within tolerance" if since is None else f"within tolerance from {since:.2f} s into S on"
        a, b = d["compared_s"]
        lines.append(f"| denoise: the two copies of S, {a:g}-{b:g} s into it | max abs difference "
                     f"{d['max_abs_diff']:.3g} ({verdict}{tol}); over all of S {d['max_abs_diff_whole_segment']:.3g}; "
                     f"{agree} |")  # fmt: skip
    k = kw["segment"]
    shown = [", ".join(f"{w} {t:.2f}" for w, t in c) or "none" for c in k["copies"]]
    shift = "" if k["max_time_diff_s"] is None else f", times within {k['max_time_diff_s']:.2f} s"
    lines.append(f"| listen: detections in S (s from its start) | {shown[0]} / {shown[1]}: "
                 f"{_same(k)}{shift} |")  # fmt: skip
    t = tr["segment"]
    lines.append(f'| transcribe: words wholly in S | "{t["copies"][0]}" / "{t["copies"][1]}": {_same(t)} |')
    lines += ["", "| graph (in process): recurrent state | " + " | ".join(f"max abs at {m}" for m in marks)
              + " | largest in between |", "|---|" + "---:|" * (len(marks) + 1)]  # fmt: skip
    for name, s in report["state"].items():
        lines.append(f"| {name} ({s['graph']}) | " + " | ".join(f"{v:.4g}" for v in s["max_abs"])
                     + f" | {max(s['peak']):.4g} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.minutes > 0:
        raise SystemExit("soak: --minutes must be positive")
    program = Program(args.minutes, args.segment, args.seed)
    marks = checkpoints(args.minutes)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="edgessm-soak-") as tmp:
        folder = Path(tmp)
        pcm = folder / "audio.s16"
        print(f"soak: making {args.minutes:g} min of audio (and streaming the graphs over it)", file=sys.stderr)
        watches = make_audio(program, pcm, marks)
        commands = {
            "listen": ["listen", "--model", "kws35", "--input", "-", "--fast", "--json"],
            "denoise": ["denoise", "-", str(folder / "denoised.wav"), "--subtype", "FLOAT"],
            "transcribe": ["transcribe", "-", "--json"],
        }
        results = {}
        for name, command in commands.items():
            print(f"soak: edgessm {' '.join(command)}", file=sys.stderr)
            results[name] = run_command(command, pcm, program.frames, marks, folder)
        results["listen"] |= listen_checks(Path(results["listen"]["stdout"]), program)
        lookahead = watches[0].model.info.delay_samples  # the graph `edgessm denoise` used
        results["denoise"] |= denoise_checks(folder / "denoised.wav", program, lookahead)
        results["transcribe"] |= transcribe_checks(Path(results["transcribe"]["stdout"]), program)
        for r in results.values():
            del r["stdout"], r["stderr"]
    report = {
        "minutes": args.minutes,
        "audio_s": program.frames / RATE,
        "rate": RATE,
        "speech": program.speech_from,
        "noise": program.noise_from,
        "segment": {
            "seconds": len(program.segment) / RATE,
            "starts": program.starts,
            "starts_s": [s / RATE for s in program.starts],
            "settle_s": program.settle / RATE,
        },
        "checkpoint_frames": marks,
        "checkpoints_min": [round(f / RATE / 60, 4) for f in marks],
        "commands": results,
        "state": {w.name: w.report() for w in watches},
        "bench_s": round(time.perf_counter() - t0, 1),
    }
    print(table(report))
    if args.out:
        from edgessm.atomic import write_text

        Path(args.out).mkdir(parents=True, exist_ok=True)
        write_text(Path(args.out) / "soak.json", json.dumps(report, indent=1))
    failed = any(r["returncode"] != 0 for r in results.values())
    return 1 if failed else 0
