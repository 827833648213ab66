"""The generator's defaults (import-light: the CLI builds its help from these without loading numpy/scipy)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

KINDS: tuple[str, ...] = ("keywords", "unknown", "sentences")
ENGINE_NAMES: tuple[str, ...] = ("espeak-ng", "flite", "festival", "piper", "kokoro")
# what `edgessm synth` uses unless --engines says otherwise: Kokoro (neural, ~0.4 s of CPU per word) is
# asked for by name, so the default corpus (and the recipes built on it) stay as they were
DEFAULT_ENGINES: tuple[str, ...] = ("espeak-ng", "flite", "festival", "piper")
DEFAULT_BLENDS = 200  # Kokoro voice blends unless --blends says otherwise

# espeak-ng variants that sound like plausible speakers (the classic male/female sets, a few contributed
# voices and the Klatt-source voices); novelty variants (whisper, robots, "Demonic", announcers) are left out.
DEFAULT_VARIANTS: tuple[str, ...] = (
    "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "klatt", "adam", "edward",
    "f1", "f2", "f3", "f4", "f5", "Annie", "belinda", "linda", "steph",
)  # fmt: skip


@dataclass(frozen=True)
class PerVoice:
    """How much each voice says (multiplied by its engine's weight).

    Attributes:
        keyword_reps: renditions of every keyword.
        unknown: words from the unknown pool.
        sentences: sentences from its split's share of the sentence pool.
    """

    keyword_reps: int = 2
    unknown: int = 40
    sentences: int = 10


PRESETS: dict[str, PerVoice] = {
    "tiny": PerVoice(keyword_reps=1, unknown=2, sentences=1),
    "small": PerVoice(keyword_reps=1, unknown=10, sentences=3),
    "standard": PerVoice(),
}
# Few-voice engines say more per voice (their renditions differ by engine noise, rate and perturbations).
DEFAULT_WEIGHTS: dict[str, int] = {"espeak-ng": 1, "flite": 4, "festival": 4, "piper": 16, "kokoro": 1}


def default_dir(name: str = "default") -> Path:
    """Where corpora live unless told otherwise: ``~/.cache/edgessm/synth/<name>`` (outside any checkout)."""
    return Path("~/.cache/edgessm/synth").expanduser() / name
