"""espeak-ng: formant synthesis, 8 English accents x voice variants (one fast subprocess per utterance)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..config import DEFAULT_VARIANTS
from .base import Engine, EngineError, EngineStatus, Params, SynthResult, Voice, render_file, rounded, run_tool


def _parse_voice_table(text: str) -> list[tuple[str, str, str]]:
    """``espeak-ng --voices=...`` rows as ``(language, gender m/f, file)`` (a file name may hold spaces)."""
    rows = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 5:
            rest = parts[5:]
            n_file = next((i for i, p in enumerate(rest) if p.startswith("(")), len(rest))  # "(en 2)": other languages
            rows.append((parts[1], parts[2].rsplit("/", 1)[-1][:1].lower(), " ".join(parts[4 : 5 + n_file])))
    return rows


class Espeak(Engine):
    name = "espeak-ng"
    install_hint = "apt-get install espeak-ng"
    chunk_size = 96
    cost = 0.5

    def __init__(self, variants: Sequence[str] | None = None) -> None:
        """``variants``: variant names to combine with every accent (``None``: :data:`DEFAULT_VARIANTS`,
        ``("all",)``: every installed variant)."""
        self.variants = tuple(variants) if variants is not None else DEFAULT_VARIANTS
        self._files: dict[str, str] = {}

    def probe(self) -> EngineStatus:
        exe = shutil.which("espeak-ng")
        if exe is None:
            return EngineStatus(self.name, (), f"espeak-ng not found: install it with `{self.install_hint}`")
        try:
            accents = _parse_voice_table(run_tool([exe, "--voices=en"], timeout=30))
            variant_rows = _parse_voice_table(run_tool([exe, "--voices=variant"], timeout=30))
        except EngineError as e:
            return EngineStatus(self.name, (), f"espeak-ng does not run ({e}); reinstall with `{self.install_hint}`")
        # gmw/ files are espeak-ng's own English voices; mb/ ones need MBROLA, which Debian does not ship here
        self._files = {lang: f for lang, _, f in accents if f.startswith("gmw/") and lang != "variant"}
        # "+name" selects a variant by file name; names with spaces cannot be passed that way
        genders = {Path(f).name: g for _, g, f in variant_rows if " " not in f}
        installed = sorted(genders)
        chosen = installed if self.variants == ("all",) else [v for v in self.variants if v in installed]
        unknown = [v for v in self.variants if v != "all" and v not in installed]
        voices = tuple(Voice(self.name, lang, var, genders[var]) for lang in sorted(self._files) for var in chosen)
        msg = f"{len(self._files)} accents x {len(chosen)} variants"
        if unknown:
            msg += f" (variants not installed, skipped: {', '.join(unknown)})"
        if not voices:
            msg = f"espeak-ng found no English voices or variants; reinstall with `{self.install_hint}`"
        return EngineStatus(self.name, voices, msg)

    def sample_params(self, voice: Voice, rng: np.random.Generator) -> dict[str, float]:
        # words per minute (default 175) and pitch 0..99 (default 50)
        return rounded(rate=int(rng.integers(125, 211)), pitch=int(rng.integers(25, 76)))

    def synthesize(self, voice: Voice, items: Sequence[tuple[str, Params]]) -> list[SynthResult]:
        exe = shutil.which("espeak-ng")
        if exe is None:
            err = EngineError(f"espeak-ng not found: install it with `{self.install_hint}`")
            return [err for _ in items]
        results: list[SynthResult] = []
        with tempfile.TemporaryDirectory(prefix="edgessm-espeak-") as tmp:
            for i, (text, p) in enumerate(items):
                out = Path(tmp) / f"{i}.wav"
                base = self._files.get(voice.name, voice.name)  # the voice file is unambiguous; the language is not
                cmd = [exe, "-v", f"{base}+{voice.variant}" if voice.variant else base]
                cmd += ["-s", str(int(p["rate"])), "-p", str(int(p["pitch"])), "-w", str(out), text]
                results.append(render_file(cmd, out))
        return results
