"""Where a mask denoiser's speech quality goes: its gains set against the ideal ones, one side at a time.

On validation mixtures (``edgessm eval --mixtures validation``'s; the test stays untouched), a spectral denoiser's
own gains ``g`` and the ideal ratio mask ``t`` at its resolution (``SpectralDenoiser.oracle_gains``, the clean
speech known) are combined and applied through the network's own DFT and overlap-add, the deep filter left out:

- ``g``: the network's gains alone (what the deep filter adds is the difference to the network as it runs);
- ``max(g, t)``: never below the ideal gain: the network's over-suppression undone, its residual noise kept;
- ``min(g, t)``: never above it: the residual noise removed, the over-suppression kept;
- ``g, t above F``: the ideal gains in the bands above ``--split-hz``, the network's below.

DNSMOS SIG / BAK / OVRL and PESQ of each say which side of the gains costs the speech (SIG) and which the
background (BAK), and where in frequency. The mean gain on speech-dominated units (ideal above 0.8) and on
noise-dominated ones (below 0.2) follows, for the network's gains and, as the ratio of output to input magnitude
at the same resolution, for the network as it runs and for RNNoise (``--peers rnnoise``).

    python tools/denoise_gain_study.py models/denoise --mixtures 14
    python tools/denoise_gain_study.py runs/denoise_v6 --exponent 0.75 --split-hz 2000

Prints a table; nothing is written.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
from mask_study import load_mask_denoiser, study_arguments, validation_pairs


def main() -> None:
    ap = study_arguments(__doc__)
    ap.add_argument("--split-hz", type=float, default=2000.0, help="the last row's edge")
    ap.add_argument("--peers", default="rnnoise", help="rnnoise or none")
    args = ap.parse_args()
    import torch
    from pesq import pesq
    from speechmos import dnsmos

    from edgessm.eval.denoise import SAMPLE_RATE

    net = load_mask_denoiser(args.model)
    # which gains lie above the split: ERB bands by centre (the gain map spreads each over its bins), fine bins
    # by their own frequency
    spread = net.gain_map[:, : net.bins]  # (bands + fine, bins): each gain's weight on each bin
    bin_hz = torch.arange(net.bins) * SAMPLE_RATE / (2 * (net.bins - 1))
    centre = (spread * bin_hz).sum(1) / spread.sum(1).clamp_min(1e-9)
    high = (centre >= args.split_hz).float()

    pairs = list(validation_pairs(net, args.mixtures))
    peer = None
    if args.peers == "rnnoise":
        from edgessm.eval.peers import Peer

        peer = Peer("rnnoise", pairs[0][0].noisy)

    def units(y: torch.Tensor) -> torch.Tensor:
        """Magnitudes of ``y (1, 1, T)`` at the gains' resolution, in the frames the network masks."""
        return net._powers(net.spectra(y)).clamp_min(1e-12).sqrt()

    def effective(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Output over input magnitude per unit, the output ``y`` advanced by the network's delay."""
        ahead = torch.nn.functional.pad(y[..., net.delay :], (0, net.delay))
        return (units(ahead) / units(x)).clamp(0, 2)

    rows: dict[str, list[dict[str, float]]] = {}
    for m, x, c in pairs:
        with torch.no_grad():
            y, g = net(x, with_gains=True)
            t, _ = net.oracle_gains(x, c, exponent=args.exponent)
            systems = {
                "network as it runs": y,
                "g (no deep filter)": net.apply_gains(x, g),
                "ideal t": net.apply_gains(x, t),
                "max(g, t)": net.apply_gains(x, torch.maximum(g, t)),
                "min(g, t)": net.apply_gains(x, torch.minimum(g, t)),
                f"g, t above {args.split_hz:.0f} Hz": net.apply_gains(x, g * (1 - high) + t * high),
            }
            if peer is not None:  # aligned to the input: placed ``delay`` late as the network's outputs are
                z = torch.as_tensor(peer(m.noisy), dtype=torch.float32)[None, None]
                systems["RNNoise"] = torch.nn.functional.pad(z, (net.delay, x.shape[-1] - net.delay - z.shape[-1]))

            gains = {"network's gains": g, "network as it runs (out / in)": effective(y, x)}
            if peer is not None:
                gains["RNNoise (out / in)"] = effective(systems["RNNoise"], x)
        clean = m.clean.astype(np.float32)
        for name, out in systems.items():
            est = out[0, 0, net.delay : net.delay + len(clean)].numpy()
            mos = dnsmos.run(np.clip(est, -1, 1), SAMPLE_RATE)
            rows.setdefault(name, []).append({
                "pesq": pesq(SAMPLE_RATE, clean, est, "wb"),
                "sig": mos["sig_mos"], "bak": mos["bak_mos"], "ovrl": mos["ovrl_mos"],
            })  # fmt: skip
        # mean gains on speech-dominated units (ideal > 0.8) and on noise-dominated ones (ideal < 0.2)
        for name, e in {**gains, "ideal": t}.items():
            rows.setdefault(f"gain: {name}", []).append({
                "speech": float(e[t > 0.8].mean()), "noise": float(e[t < 0.2].mean()),
                "noise_db": 20 * torch.log10(e[t < 0.2].clamp_min(1e-3)),  # floored at -60 dB
            })  # fmt: skip

    print(f"{args.model}, {args.mixtures} validation mixtures, ideal exponent {args.exponent}")
    print(f"| {'system':<28} | PESQ | SIG | BAK | OVRL |\n|---|---:|---:|---:|---:|")
    for name, rs in rows.items():
        if name.startswith("gain: "):
            continue
        mean = {k: float(np.mean([r[k] for r in rs])) for k in rs[0]}
        print(f"| {name:<28} | {mean['pesq']:.2f} | {mean['sig']:.2f} | {mean['bak']:.2f} | {mean['ovrl']:.2f} |")
    print("\n| mean gain | speech units (ideal > 0.8) | noise units (ideal < 0.2) | noise units in dB: mean (median) |")
    print("|---|---:|---:|---:|")
    for name, rs in rows.items():
        if name.startswith("gain: "):
            speech, noise = np.mean([r["speech"] for r in rs]), np.mean([r["noise"] for r in rs])
            db = torch.cat([r["noise_db"] for r in rs])  # every noise-dominated unit of every mixture
            print(f"| {name[6:]} | {speech:.3f} | {noise:.3f} | {float(db.mean()):.1f} ({float(db.median()):.1f}) |")


if __name__ == "__main__":
    main()
