"""Offline TTS engines: discovery of engines and voices, and batch synthesis per voice."""

from __future__ import annotations

from collections.abc import Sequence

from ..config import DEFAULT_BLENDS, DEFAULT_ENGINES, DEFAULT_VARIANTS, ENGINE_NAMES
from .base import Engine, EngineError, EngineStatus, SynthResult, Voice
from .espeak import Espeak
from .festival import Festival
from .flite import Flite
from .kokoro import Kokoro
from .piper import Piper


def make_engines(
    names: Sequence[str] | None = None,
    espeak_variants: Sequence[str] | None = None,
    *,
    blends: int = DEFAULT_BLENDS,
    voice_dir: str | None = None,
    seed: int = 0,
) -> list[Engine]:
    """Engine adapters by name (``None``: :data:`DEFAULT_ENGINES`), in the fixed order of :data:`ENGINE_NAMES`.

    ``blends``, ``voice_dir`` and ``seed`` configure Kokoro: how many voice blends, the folder of base
    style vectors (default: the shared data's ``kokoro_voices``), the seed the blends are drawn from."""
    wanted = list(DEFAULT_ENGINES) if names is None else list(names)
    unknown = sorted(set(wanted) - set(ENGINE_NAMES))
    if unknown:
        raise ValueError(f"unknown TTS engine(s) {unknown}; choose from {list(ENGINE_NAMES)}")
    factories = {
        "espeak-ng": lambda: Espeak(espeak_variants), "flite": Flite, "festival": Festival, "piper": Piper,
        "kokoro": lambda: Kokoro(blends=blends, voice_dir=voice_dir, seed=seed),
    }  # fmt: skip
    return [factories[n]() for n in ENGINE_NAMES if n in wanted]


def discover(engines: Sequence[Engine]) -> dict[str, EngineStatus]:
    """Probe each engine: its voices, or a message saying what to install. Never raises for a missing engine."""
    return {e.name: e.probe() for e in engines}


__all__ = [
    "DEFAULT_ENGINES",
    "DEFAULT_VARIANTS",
    "ENGINE_NAMES",
    "Engine",
    "EngineError",
    "EngineStatus",
    "Espeak",
    "Festival",
    "Flite",
    "Kokoro",
    "Piper",
    "SynthResult",
    "Voice",
    "discover",
    "make_engines",
]
