"""flite: CMU's small synthesizer with its four built-in 16 kHz English voices (one subprocess per utterance)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .base import Engine, EngineError, EngineStatus, Params, SynthResult, Voice, render_file, rounded, run_tool

# voice -> (gender, f0 target mean in Hz the voice uses by default, or 0 when the voice ignores the setting).
# Means were measured with pYIN on this build (flite 2.2); rms has its own F0 model and ignores the target.
VOICES: dict[str, tuple[str, float]] = {
    "kal16": ("m", 90.0),
    "awb": ("m", 130.0),
    "rms": ("m", 0.0),
    "slt": ("f", 172.0),
}
# flite -lv also lists kal (the 8 kHz build of kal16) and awb_time (a duplicate of awb): not used


class Flite(Engine):
    name = "flite"
    install_hint = "apt-get install flite"
    chunk_size = 96
    cost = 0.8

    def probe(self) -> EngineStatus:
        exe = shutil.which("flite")
        if exe is None:
            return EngineStatus(self.name, (), f"flite not found: install it with `{self.install_hint}`")
        try:
            listed = run_tool([exe, "-lv"], timeout=30).split(":", 1)[-1].split()
        except EngineError as e:
            return EngineStatus(self.name, (), f"flite does not run ({e}); reinstall with `{self.install_hint}`")
        voices = tuple(Voice(self.name, v, "", VOICES[v][0]) for v in sorted(VOICES) if v in listed)
        missing = sorted(set(VOICES) - set(listed))
        msg = f"{len(voices)} voices" + (f" (not in this flite build: {', '.join(missing)})" if missing else "")
        if not voices:
            msg = f"flite lists none of {sorted(VOICES)}; install the full build with `{self.install_hint}`"
        return EngineStatus(self.name, voices, msg)

    def sample_params(self, voice: Voice, rng: np.random.Generator) -> dict[str, float]:
        # duration_stretch > 1 speaks slower; f0 scales the voice's target mean pitch (where it has one)
        return rounded(stretch=rng.uniform(0.85, 1.3), f0=2.0 ** (rng.uniform(-3.0, 3.0) / 12.0))

    def controls_pitch(self, voice: Voice) -> bool:
        return VOICES.get(voice.name, ("", 0.0))[1] > 0

    def synthesize(self, voice: Voice, items: Sequence[tuple[str, Params]]) -> list[SynthResult]:
        exe = shutil.which("flite")
        if exe is None:
            return [EngineError(f"flite not found: install it with `{self.install_hint}`") for _ in items]
        base_f0 = VOICES.get(voice.name, ("", 0.0))[1]
        results: list[SynthResult] = []
        with tempfile.TemporaryDirectory(prefix="edgessm-flite-") as tmp:
            for i, (text, p) in enumerate(items):
                out = Path(tmp) / f"{i}.wav"
                cmd = [exe, "-voice", voice.name, "-t", text, "-o", str(out)]
                cmd += ["--setf", f"duration_stretch={p['stretch']:.4f}"]
                if base_f0:
                    cmd += ["--setf", f"int_f0_target_mean={base_f0 * p['f0']:.2f}"]
                results.append(render_file(cmd, out))
        return results
