"""Build ``demos/noisy_speech.wav``: real read sentences over a real noise recording, for ``edgessm denoise``.

    python demos/make_noisy_speech.py            # rewrites demos/noisy_speech.wav
    python demos/make_noisy_speech.py --out DIR  # somewhere else (the test compares the two)

The speech is one of the read-speech speakers that the denoise recipe holds out for testing (never
trained or validated on; speechocean762), its sentences joined with short pauses; the noise is the
``dude_miaowing`` background recording (a cat and a room, held out of training and validation),
mixed at 5 dB SNR and -25 dBFS: one of ``edgessm eval``'s own test mixtures. Deterministic: the
same bytes on every run.

numpy, soundfile and edgessm only (no torch).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from edgessm.data.audio import write_audio
from edgessm.eval.denoise import _crop, _join, _real_noise, mix, speakers_of

RATE = 16000
SPEAKER_INDEX = 0  # the first held-out test speaker (sorted by id)
SNR_DB = 5.0
SECONDS = 10.0


def build(out: Path) -> Path:
    import numpy as np

    speakers = speakers_of("test")
    speaker = sorted(speakers)[SPEAKER_INDEX]
    clean = _join(speakers[speaker], SECONDS)
    noise = _crop(_real_noise("dude_miaowing"), len(clean), np.random.default_rng(0))
    _, noisy = mix(clean, noise, SNR_DB)
    path = out / "noisy_speech.wav"
    write_audio(path, noisy, RATE, subtype="PCM_16")
    print(f"wrote {path}: speaker {speaker}, {len(noisy) / RATE:.2f} s, dude_miaowing at {SNR_DB:+.0f} dB SNR")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent, help="output folder")
    build(ap.parse_args(argv).out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
