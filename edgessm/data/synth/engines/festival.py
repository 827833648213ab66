"""festival: the kal and ked diphone voices and the slt HTS voice, many utterances per festival process.

One generated Scheme script per batch selects the voice once, then sets the speaking rate and pitch and
saves a wav file for every utterance; a failing utterance is caught inside festival and reported alone.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .base import Engine, EngineError, EngineStatus, Params, SynthResult, Voice, read_wav, rounded, run_tool

# English voices Debian packages: voice -> (gender, kind, Debian package)
VOICES: dict[str, tuple[str, str, str]] = {
    "kal_diphone": ("m", "diphone", "festvox-kallpc16k"),
    "ked_diphone": ("m", "diphone", "festvox-kdlpc16k"),
    "cmu_us_slt_arctic_hts": ("f", "hts", "festvox-us-slt-hts"),
}

# Diphone voices: Duration_Stretch and a scaled linear-regression F0 target. HTS voices: the engine's own
# speed (-r, > 1 is faster) on top of the voice's parameters; festival 2.5's HTS module ignores -fm (pitch)
# and -a (warping) (measured: identical output), so their pitch varies only in the numpy perturbations.
_PRELUDE = """
(define (edg_lr scale std_scale)
  (set! int_lr_params
    (list (list 'target_f0_mean (* scale (cadr (assoc 'target_f0_mean edg_base_lr))))
          (list 'target_f0_std (* std_scale (cadr (assoc 'target_f0_std edg_base_lr))))
          (assoc 'model_f0_mean edg_base_lr)
          (assoc 'model_f0_std edg_base_lr))))
"""


def _scheme_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Festival(Engine):
    name = "festival"
    install_hint = "apt-get install festival festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts"
    chunk_size = 128
    cost = 1.0

    def probe(self) -> EngineStatus:
        exe = shutil.which("festival")
        if exe is None:
            return EngineStatus(self.name, (), f"festival not found: install it with `{self.install_hint}`")
        try:
            listed = run_tool([exe, "-b", "(print (voice.list))"], timeout=60).strip().strip("()").split()
        except EngineError as e:
            return EngineStatus(self.name, (), f"festival does not run ({e}); reinstall with `{self.install_hint}`")
        voices = tuple(Voice(self.name, v, "", VOICES[v][0]) for v in sorted(VOICES) if v in listed)
        missing = [VOICES[v][2] for v in sorted(VOICES) if v not in listed]
        msg = f"{len(voices)} voices"
        if missing:
            msg += f" (missing voices: `apt-get install {' '.join(missing)}`)"
        if not voices:
            msg = f"festival has none of its English voices: install them with `apt-get install {' '.join(missing)}`"
        return EngineStatus(self.name, voices, msg)

    def sample_params(self, voice: Voice, rng: np.random.Generator) -> dict[str, float]:
        if VOICES.get(voice.name, ("", "diphone"))[1] == "hts":
            return rounded(speed=rng.uniform(0.8, 1.15))
        return rounded(
            stretch=rng.uniform(0.85, 1.3), f0=2.0 ** (rng.uniform(-3.0, 3.0) / 12), f0_std=rng.uniform(0.7, 1.6)
        )

    def controls_pitch(self, voice: Voice) -> bool:
        return VOICES.get(voice.name, ("", "diphone"))[1] != "hts"

    def script(self, voice: Voice, items: Sequence[tuple[str, Params]], folder: Path) -> str:
        """The Scheme program that writes item ``i`` to ``folder/i.wav`` (``FAIL i`` on stdout if it fails)."""
        hts = VOICES.get(voice.name, ("", "diphone"))[1] == "hts"
        lines = [_PRELUDE, f"(voice_{voice.name})"]
        lines.append("(set! edg_base_hts hts_engine_params)" if hts else "(set! edg_base_lr int_lr_params)")
        for i, (text, p) in enumerate(items):
            out = _scheme_string(str(folder / f"{i}.wav"))
            if hts:
                setup = f'(set! hts_engine_params (append edg_base_hts (list (list "-r" {p["speed"]:.4f}))))'
            else:
                setup = f"(Parameter.set 'Duration_Stretch {p['stretch']:.4f}) (edg_lr {p['f0']:.4f} {p['f0_std']:.4f})"
            # Utterance does not evaluate its arguments: the text must be a literal string in the script
            say = f"(set! edg_utt (Utterance Text {_scheme_string(text)})) (utt.synth edg_utt)"
            save = f"(utt.save.wave edg_utt {out} 'riff)"
            lines.append(f'(unwind-protect (begin {setup} {say} {save}) (format t "FAIL {i}\\n"))')
        return "\n".join(lines) + "\n"

    def synthesize(self, voice: Voice, items: Sequence[tuple[str, Params]]) -> list[SynthResult]:
        exe = shutil.which("festival")
        if exe is None:
            return [EngineError(f"festival not found: install it with `{self.install_hint}`") for _ in items]
        with tempfile.TemporaryDirectory(prefix="edgessm-festival-") as tmp:
            folder = Path(tmp)
            (folder / "batch.scm").write_text(self.script(voice, items, folder))
            try:
                run_tool([exe, "-b", str(folder / "batch.scm")], timeout=60 + 10 * len(items))
            except EngineError as e:
                return [e for _ in items]
            results: list[SynthResult] = []
            for i in range(len(items)):
                try:
                    results.append(read_wav(folder / f"{i}.wav"))
                except EngineError as e:
                    results.append(EngineError(f"festival {voice.name} failed on {items[i][0]!r}: {e}"))
            return results
