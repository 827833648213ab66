"""What every TTS engine adapter provides: voice discovery, per-utterance parameters, batch synthesis."""

from __future__ import annotations

import re
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import soundfile as sf

Params = Mapping[str, float]


class EngineError(RuntimeError):
    """An engine could not synthesize an utterance; the message says why (and what to install)."""


@dataclass(frozen=True, order=True)
class Voice:
    """One synthetic speaker: an engine, one of its voices and (espeak-ng) a voice variant.

    Attributes:
        engine: engine name (``espeak-ng``, ``flite``, ``festival``, ``piper``).
        name: the engine's voice name, e.g. ``en-gb-x-rp``, ``slt``, ``kal_diphone``, ``en_US-joe-medium``.
        variant: espeak-ng variant (``m3``, ``f2``, ...) or a multi-speaker model's speaker; empty otherwise.
        gender: ``m`` / ``f`` when known, else empty.
    """

    engine: str
    name: str
    variant: str = ""
    gender: str = field(default="", compare=False)

    @property
    def id(self) -> str:
        """Speaker id used in manifests, e.g. ``espeak-ng:en-gb-x-rp+f3``, ``flite:slt``."""
        return f"{self.engine}:{self.name}" + (f"+{self.variant}" if self.variant else "")

    @property
    def slug(self) -> str:
        """The id made safe for a folder name."""
        return re.sub(r"[^A-Za-z0-9._-]+", "_", self.id)


@dataclass(frozen=True)
class EngineStatus:
    """Outcome of probing an engine: its voices, or why it cannot run (with what to install)."""

    name: str
    voices: tuple[Voice, ...]
    message: str

    @property
    def available(self) -> bool:
        return bool(self.voices)


SynthResult = tuple[np.ndarray, int] | EngineError


class Engine(ABC):
    """An offline TTS engine.

    Subclasses are cheap to construct; heavy state (a loaded neural voice) is created lazily inside
    the worker process that synthesizes and kept for the life of that process.
    """

    name: ClassVar[str]
    install_hint: ClassVar[str]
    chunk_size: ClassVar[int] = 64  # utterances per worker task (one engine process per task where batched)
    cost: ClassVar[float] = 1.0  # relative time per utterance, to start slow work first

    @abstractmethod
    def probe(self) -> EngineStatus:
        """Find the engine and its voices; never raises (a missing engine gives a status with a message)."""

    @abstractmethod
    def sample_params(self, voice: Voice, rng: np.random.Generator) -> dict[str, float]:
        """Engine-side variation for one utterance (speaking rate, pitch, noise), rounded for stable hashing."""

    def controls_pitch(self, voice: Voice) -> bool:
        """Whether :meth:`sample_params` varies this voice's pitch (if not, the numpy perturbation varies it more)."""
        return True

    @abstractmethod
    def synthesize(self, voice: Voice, items: Sequence[tuple[str, Params]]) -> list[SynthResult]:
        """Synthesize ``(text, params)`` items with one voice.

        Returns:
            One entry per item: ``(audio, rate)`` with audio float32 ``(T,)`` in [-1, 1] at the engine's
            native rate in Hz, or an :class:`EngineError` for an item that failed.
        """


def run_tool(cmd: Sequence[str], timeout: float = 120.0, input_text: str | None = None) -> str:
    """Run an engine binary and return its stdout; raise :class:`EngineError` with its stderr on failure."""
    try:
        proc = subprocess.run(list(cmd), input=input_text, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError as e:
        raise EngineError(f"{cmd[0]} not found") from e
    except subprocess.TimeoutExpired as e:
        raise EngineError(f"{cmd[0]} timed out after {timeout:.0f} s") from e
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise EngineError(f"{' '.join(cmd[:3])} ... failed (exit {proc.returncode}): {' | '.join(err[-3:])}")
    return proc.stdout


def render_file(cmd: Sequence[str], out: Path, timeout: float = 60.0) -> SynthResult:
    """Run a command-line synthesizer that writes ``out`` and read it back (failures are returned, not raised)."""
    try:
        run_tool(cmd, timeout=timeout)
        return read_wav(out)
    except EngineError as e:
        return e


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """Read an engine's wav output as mono float32 ``(T,)`` and its rate; empty or missing output is an error."""
    if not path.is_file() or path.stat().st_size <= 44:
        raise EngineError(f"no audio written to {path.name}")
    data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    audio = data.mean(axis=1)
    if audio.size == 0 or not np.isfinite(audio).all():
        raise EngineError(f"{path.name}: empty or non-finite audio")
    return np.ascontiguousarray(audio), int(rate)


def rounded(**values: float) -> dict[str, float]:
    """Round parameter values (4 decimals) so their text form, and hence the cache key, is stable."""
    return {k: round(float(v), 4) for k, v in values.items()}
