"""Where a denoiser's DNSMOS goes: what it leaves in the pauses, band by band, and what DNSMOS says when those
pauses are lowered afterwards with the clean speech telling where they are (an oracle: how much BAK and OVRL
the pauses can be worth at all). Validation mixtures only (``edgessm eval --mixtures validation``'s), so the
test stays untouched.

    python tools/denoise_residual_study.py models/denoise                 # the shipped graph and RNNoise
    python tools/denoise_residual_study.py DIR/denoise --mixtures 7 --peers none --gate-db 10

Prints, per system: DNSMOS SIG/BAK/OVRL as it is and with its pauses lowered by ``--gate-db``, and its pause
residual per band in dB under the clean speech's power (``edgessm.eval.metrics.speech_frames`` decides the
pauses); then the same bands while the speech is there. Nothing is written.
"""

from __future__ import annotations

import argparse
import itertools
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

from edgessm.eval.denoise import SAMPLE_RATE, graph_system, mixtures
from edgessm.eval.metrics import speech_frames
from edgessm.runtime.registry import resolve_graph
from edgessm.runtime.session import StepModel

EDGES_HZ = (0, 250, 500, 1000, 2000, 4000, 8000)
HOP, N_FFT = 160, 512


def band_levels(x: np.ndarray, clean: np.ndarray, frames: np.ndarray) -> np.ndarray:
    """Power of ``x`` per band of :data:`EDGES_HZ` over the chosen ``frames`` (bool, one per hop), in dB
    relative to the clean speech's whole-band power while it speaks: ``(bands,)``."""

    def spectra(y: np.ndarray) -> np.ndarray:
        windows = np.lib.stride_tricks.sliding_window_view(np.pad(y, (0, N_FFT)), N_FFT)[::HOP][: len(y) // HOP]
        return np.abs(np.fft.rfft(windows * np.hanning(N_FFT), axis=1)) ** 2

    f = np.fft.rfftfreq(N_FFT, 1 / SAMPLE_RATE)
    s, c = spectra(x)[frames], spectra(clean)
    speech = speech_frames(clean, HOP)[: len(c)]
    ref = c[speech].sum(1).mean()
    return np.array([10 * np.log10(s[:, (f >= a) & (f < b)].sum(1).mean() / ref + 1e-20)
                     for a, b in itertools.pairwise(EDGES_HZ)])  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="denoiser: shipped name, model folder or .onnx")
    ap.add_argument("--mixtures", type=int, default=14, help="validation mixtures (one per speaker, kinds cycled)")
    ap.add_argument("--peers", default="rnnoise", help="rnnoise or none")
    ap.add_argument("--gate-db", type=float, default=20.0, help="how far the oracle lowers the pauses")
    args = ap.parse_args()
    from speechmos import dnsmos

    ms = mixtures("validation", per_speaker=1)[: args.mixtures]
    systems = {"clean": None, "denoiser": graph_system(StepModel(resolve_graph(args.model), threads=1))}
    if args.peers == "rnnoise":
        from edgessm.eval.peers import Peer

        systems["RNNoise"] = Peer("rnnoise", ms[0].noisy)
    mos = {k: [] for k in systems}
    pause_bands = {k: [] for k in systems if k != "clean"}
    speech_bands = {k: [] for k in systems}
    keep = 10 ** (-args.gate_db / 20)
    for m in ms:
        speech = speech_frames(m.clean, HOP)
        gain = np.repeat(np.where(speech, 1.0, keep), HOP)
        gain = np.pad(gain, (0, len(m.clean) - len(gain)), constant_values=1.0)
        gain = np.convolve(gain, np.hanning(2 * HOP + 1) / np.hanning(2 * HOP + 1).sum(), "same")  # no clicks
        for name, run in systems.items():
            y = m.clean if run is None else run(m.noisy)
            scores = []
            for z in (y, y * gain):
                r = dnsmos.run(np.clip(z, -1, 1), SAMPLE_RATE)
                scores.append([float(r["sig_mos"]), float(r["bak_mos"]), float(r["ovrl_mos"])])
            mos[name].append(scores)
            speech_bands[name].append(band_levels(y, m.clean, speech[: len(y) // HOP]))
            if run is not None:
                pause_bands[name].append(band_levels(y, m.clean, ~speech[: len(y) // HOP]))
    bands = ", ".join(f"{a / 1000:g}-{b / 1000:g}" for a, b in itertools.pairwise(EDGES_HZ))
    print(
        f"{len(ms)} validation mixtures; DNSMOS SIG / BAK / OVRL, as is and with the pauses {args.gate_db:g} dB lower"
    )
    for name, rows in mos.items():
        a = np.array(rows).mean(0)
        print(
            f"  {name:10s} {a[0, 0]:.2f} / {a[0, 1]:.2f} / {a[0, 2]:.2f}    "
            f"gated {a[1, 0]:.2f} / {a[1, 1]:.2f} / {a[1, 2]:.2f}"
        )
    print(f"in the pauses, dB under the speech, bands {bands} kHz")
    for name, rows in pause_bands.items():
        print(f"  {name:10s} " + " ".join(f"{v:6.1f}" for v in np.mean(rows, 0)))
    print("while the speech is there, the same bands")
    for name, rows in speech_bands.items():
        print(f"  {name:10s} " + " ".join(f"{v:6.1f}" for v in np.mean(rows, 0)))


if __name__ == "__main__":
    main()
