"""Input level control: a causal, boost-only automatic gain control in front of a graph (numpy only).

The keyword spotter and the recognizer were trained on words at everyday recording levels (the Speech Commands
clips: -33..-14 dBFS over the spoken part, 5th to 95th percentile), the denoiser on mixtures at -35..-15 dBFS.
A quiet microphone or a talker across the room gives words at -45 dBFS and below, where their band energies
sink toward the front's log floor and into the room's own noise. Measured on kws35 v12's validation sessions
(real validation speakers, words at -30..-15 dBFS): 86.3% of the keywords detected as recorded, 79.7% 15 dB
quieter, 46.7% 25 dB quieter; the recognizer's word error on real validation Speech Commands words went from
9.2% to 26.7% at 20 dB quieter; the denoiser's SI-SDR improvement from +7.1 to +3.8 dB. This control raises
quiet input back to the level the models know and never lowers it (louder input already works: kws35 87.3%
at +8 dB).

Per 10 ms frame (``frame`` samples) of the graph-rate audio, with ``e`` the frame's level in dBFS:

- speech level ``S = max(e, S - release)``: the loudest recent frames, forgetting ``release_db_s`` per second;
- noise floor ``N = min(e, N + rise)``: the quietest recent frames, rising at most ``rise_db_s`` per second;
- wanted gain ``G* = clip(min(target - S, noise_cap - N), -max_cut, max_gain)`` dB: speech peaks brought up to
  ``target``, the room never above ``noise_cap``, never more than ``max_gain``; with ``max_cut`` > 0 loud
  speech is brought down toward ``target`` too (by at most ``max_cut``, deepening by at most ``cut_db_s``
  per second, so that one loud command keeps its shape while loud running speech is lowered; off by default);
- the gain follows ``G*`` down at once, in any frame, and up by at most ``attack_up_db_s`` per second only
  on frames that stand ``speech_margin_db`` out of the noise floor (someone speaking, not the room): it holds
  through pauses, so the room is not pumped up between words and a steady noise or music alone is left as
  it is. A frame whose peak would pass ``ceiling`` gives the next frame less gain.

The gain decided at the end of a frame is reached over the next one, sample by sample (no zipper noise), so
every output sample depends on the frames before it only: zero latency, and a stream gives the same samples
whatever its chunking. A loud onset after quiet input is boosted for at most one frame (and never past full
scale). The gain grows only while someone speaks, so a single quiet word at the start of a recording is
raised only partly (a first frame that set the gain at once raised the word's onset more than its peak and
cost the recognizer 2 points on normal-level words); from the second word on the level is known.

Chosen on validation speakers only (kws35's validation streams, the recognizer's validation words and read
sentences; ``tools/level_study.py``), settings as shipped: kws35 sessions 86.8% as recorded (86.3% without),
86.8% at -15 dB, 86.3% at -25 dB, wrong words 7.9% (9.1%), false accepts on 1 h of keyword-free validation
audio 9 (10); recognizer word error on Speech Commands words 9.2% as recorded (9.2%), 19.3% at -20 dB
(26.7%), read sentences 86.3% (87.1%) and 86.3% at -20 dB (92.0%). On the test sets the keyword spotter
kept its numbers at everyday levels and gained 11.5 points of commands at a quiet microphone (its card); the
recognizer, with the word model, lost 1.4-2.4 WER points on single utterances at everyday levels (real
sentences 83.5 -> 85.9%, Speech Commands words 27.8 -> 29.2%, digits 8.0 -> 9.3%) for 2-5 points on the
same 20 dB quieter (88.0 -> 85.9%, 36.8 -> 34.8%), so it ships without (``transcribe --agc on`` for quiet
recordings): the gain grows during an utterance's first word, and one-utterance files are what it reads.

A denoiser gets it with its own settings (:data:`DENOISER`) and divides its output by the same per-sample gain
(:class:`~edgessm.runtime.denoise.Denoiser`), so the output keeps the input's level.

The graph's metadata says whether its input goes through it (``input_agc``: these settings as JSON, written
by ``edgessm export``, on by default for keyword spotters and denoisers, :data:`TASK_DEFAULTS`;
``python -m edgessm.deploy.metadata`` changes a folder's graphs); :class:`~edgessm.runtime.session.StepModel`
applies it in ``process`` and in its streams; ``listen`` / ``transcribe`` / ``denoise --agc on|off`` overrule
the graph.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields

import numpy as np

FLOOR_DB = -100.0  # the level of digital silence


@dataclass(frozen=True)
class AgcConfig:
    """The level control's settings (dB, dBFS, dB per second; ``frame`` in samples)."""

    target: float = -20.0  # the level speech peaks (10 ms frames) are raised to
    noise_cap: float = -48.0  # the noise floor is never raised above this
    max_gain: float = 24.0
    max_cut: float = 0.0  # loud speech brought down toward ``target`` by at most this (0: boost only)
    cut_db_s: float = 6.0  # how fast a cut may deepen: a loud command keeps its shape, loud talk is lowered
    release_db_s: float = 0.5  # how fast the speech level forgets a loud moment
    rise_db_s: float = 3.0  # how fast the noise floor may rise (it falls at once)
    attack_up_db_s: float = 30.0  # how fast the applied gain may grow (on frames above the room only)
    speech_margin_db: float = 10.0  # a frame this far above the noise floor stands out of the room
    ceiling: float = 0.98  # peak amplitude the gain never pushes a sample past
    frame: int = 160

    def __post_init__(self) -> None:
        if self.frame < 1:
            raise ValueError(f"frame must be at least 1 sample, got {self.frame}")
        if not self.max_gain >= 0:
            raise ValueError(f"max_gain must be 0 dB or more, got {self.max_gain}")
        if not self.max_cut >= 0:
            raise ValueError(f"max_cut must be 0 dB or more, got {self.max_cut}")
        if min(self.release_db_s, self.rise_db_s, self.attack_up_db_s, self.cut_db_s) < 0:
            raise ValueError("release_db_s, rise_db_s, attack_up_db_s and cut_db_s must be >= 0")
        if not 0 < self.ceiling <= 1:
            raise ValueError(f"ceiling must be in (0, 1], got {self.ceiling}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> AgcConfig:
        """The settings of a graph's ``input_agc`` metadata; unknown keys are an error."""
        data = json.loads(text)
        known = {f.name for f in fields(cls)}
        if not isinstance(data, dict) or set(data) - known:
            raise ValueError(f"input_agc metadata: expected an object with keys among {sorted(known)}, got {text!r}")
        return cls(**data)


class LevelControl:
    """One stream's level control: ``process(chunk) -> chunk`` of the same length, the state kept inside.

    Args:
        config: the settings; the frame duration assumes they were made for the stream's sample rate.
        sample_rate: samples per second of the audio fed (for the per-second rates).
    """

    def __init__(self, config: AgcConfig | None = None, sample_rate: int = 16000) -> None:
        self.config = config or AgcConfig()
        per_frame = self.config.frame / sample_rate
        self._release = self.config.release_db_s * per_frame
        self._rise = self.config.rise_db_s * per_frame
        self._up = self.config.attack_up_db_s * per_frame
        self._deepen = self.config.cut_db_s * per_frame
        n = self.config.frame
        self._steps = (np.arange(n, dtype=np.float64) + 1) / n  # a frame's ramp, sample by sample
        self.reset()

    def reset(self) -> None:
        self._speech = FLOOR_DB
        self._noise: float | None = None  # set by the first frame
        self._from_db = self._to_db = 0.0  # the gain ramps from -> to over the frame in progress (dB)
        self._from = self._to = 1.0  # the same, linear
        self.max_gain_db = 0.0  # the most gain applied so far (dB): a quiet microphone shows here
        self._partial = np.zeros(0, np.float32)  # raw samples of the frame in progress (already output)

    def _next_gain(self, e: float, peak: float) -> float:
        """Update the trackers with a whole frame of level ``e`` (dBFS) and peak ``peak``; the gain (dB) for the
        next frame."""
        c = self.config
        self._noise = e if self._noise is None else min(e, self._noise + self._rise)
        self._speech = max(e, self._speech - self._release)
        want = max(-c.max_cut, min(c.target - self._speech, c.noise_cap - self._noise, c.max_gain))
        gain = self._to_db
        if want < gain:  # down at once to 0 dB, in any frame; a cut below it deepens at most cut_db_s
            gain = want if want >= 0 else max(want, min(gain, 0.0) - self._deepen)
        elif e > self._noise + c.speech_margin_db:  # up only while something stands out of the room: no pumping
            gain = min(want, gain + self._up)
        if peak > 0:
            gain = min(gain, max(0.0, 20.0 * math.log10(c.ceiling / peak)))
        return gain

    def _close(self, frames: np.ndarray) -> tuple[list[float], list[float]]:
        """Decide on whole frames ``(F, frame)`` in order; the linear gains each one ramped from and to."""
        power = (np.add.reduce(np.square(frames, dtype=np.float64), axis=1) / frames.shape[1]).tolist()  # mean
        peaks = np.maximum.reduce(np.abs(frames), axis=1).tolist()
        floor = 10 ** (FLOOR_DB / 10)
        start, end = [], []
        for p, peak in zip(power, peaks, strict=True):
            start.append(self._from)
            end.append(self._to)
            gain = self._next_gain(10.0 * math.log10(p) if p > floor else FLOOR_DB, peak)
            self._from_db, self._to_db = self._to_db, gain
            self.max_gain_db = max(self.max_gain_db, gain)
            self._from, self._to = self._to, 10.0 ** (gain / 20.0)
        return start, end

    def _ramped(self, x: np.ndarray, a: float | list[float], b: float | list[float], first: int) -> np.ndarray:
        """``x (m,)`` at positions ``first..first+m`` of one frame ramping from gain ``a`` to ``b``, or ``x (F, m)``
        of F frames with a gain pair each (lists): times the ramp, as float32."""
        changed = any(g != 1 for g in (*a, *b)) if isinstance(a, list) else a != 1 or b != 1
        if not changed:  # no gain anywhere: the samples as they are
            self._gains.append(np.ones(x.size))
            return x.copy()
        steps = self._steps[first : first + x.shape[-1]]
        if isinstance(a, list):
            a, b = np.asarray(a)[:, None], np.asarray(b)[:, None]
        ramp = a + (b - a) * steps
        limit = np.maximum(1.0, np.abs(x))  # a gain never pushes a sample past full scale (nor clips what was past)
        y = np.clip(x * ramp, -limit, limit)
        self._gains.append(ramp.reshape(-1))
        return y.astype(np.float32)

    def process(self, x: np.ndarray) -> np.ndarray:
        """``x (T,)`` float32 -> the same samples with the gain applied ``(T,)`` (a gain never takes one past +-1).
        ``self.last_gain``: the linear gain each of them got ``(T,)`` (float64; a denoiser divides its output by
        it, so its level follows the input's)."""
        x = np.asarray(x, np.float32).reshape(-1)
        n = self.config.frame
        self._gains: list[np.ndarray] = []
        if len(x) == n and not len(self._partial):  # one whole frame (a 10 ms graph's call): the short way
            y = self._ramped(x, self._from, self._to, 0)
            self._close(x[None, :])
            self.last_gain = self._gains[0]
            return y
        out = np.empty_like(x)
        pos = 0
        if len(self._partial):  # finish the frame in progress
            done = len(self._partial)
            pos = min(n - done, len(x))
            out[:pos] = self._ramped(x[:pos], self._from, self._to, done)
            frame = np.concatenate([self._partial, x[:pos]])
            self._partial = frame
            if len(frame) == n:
                self._close(frame[None, :])
                self._partial = np.zeros(0, np.float32)
        whole = (len(x) - pos) // n
        if whole:  # whole frames: each decided from itself and those before, used from the next one on
            frames = x[pos : pos + whole * n].reshape(whole, n)
            out[pos : pos + whole * n] = self._ramped(frames, *self._close(frames), 0).reshape(-1)
            pos += whole * n
        if pos < len(x):  # the start of the next frame
            out[pos:] = self._ramped(x[pos:], self._from, self._to, 0)
            self._partial = x[pos:].copy()
        self.last_gain = np.concatenate(self._gains) if self._gains else np.zeros(0)
        return out


# A denoiser's settings: its output is divided by the gain again (edgessm.runtime.denoise), so the room may be
# raised too (noise cap -30 dBFS, within its training mixtures' -35..-15 dBFS) and the gain grows on any frame.
# Chosen on 16 validation mixtures (denoise v6): SI-SDRi +7.07 / +3.76 / -2.17 dB as mixed (-25 dBFS) / 20 dB /
# 30 dB quieter without it, +7.01 / +7.23 / +6.45 dB with it; STOI 0.780 / 0.760 / 0.693 -> 0.778 / 0.777 / 0.778.
DENOISER = AgcConfig(noise_cap=-30.0, speech_margin_db=0.0)
TASK_DEFAULTS: dict[str, AgcConfig | None] = {"kws": AgcConfig(), "denoise": DENOISER, "asr": None}

AGC_CHOICES = ("graph", "on", "off")  # listen / transcribe / denoise --agc


def task_agc(task: str) -> AgcConfig:
    """The settings a graph of ``task`` gets when the control is asked for: :data:`TASK_DEFAULTS`' (a
    denoiser's differ from a keyword spotter's), else the defaults."""
    return TASK_DEFAULTS.get(task) or AgcConfig()


def resolve_agc(choice: bool | str | AgcConfig, graph: AgcConfig | None, task: str = "") -> AgcConfig | None:
    """The level control a stream gets: ``"graph"`` / ``True`` what the graph's metadata names (``graph``, or
    none), ``"off"`` / ``False`` none, ``"on"`` the graph's settings or, when it names none, the ``task``'s
    (:data:`TASK_DEFAULTS`) or the defaults; an :class:`AgcConfig` itself. ``ValueError`` for anything else."""
    if isinstance(choice, AgcConfig):
        return choice
    if choice is True or choice == "graph":
        return graph
    if choice is False or choice == "off":
        return None
    if choice == "on":
        return graph or task_agc(task)
    raise ValueError(f"--agc is one of {', '.join(AGC_CHOICES)}, got {choice!r}")


def apply_agc(audio: np.ndarray, config: AgcConfig | None = None, sample_rate: int = 16000) -> np.ndarray:
    """A whole recording through a fresh :class:`LevelControl` (what a stream of any chunking gives)."""
    return LevelControl(config, sample_rate).process(audio)
