"""How far a pitch comb filter could lift the spectral denoiser: ideal-coefficient ceilings.

The mask of ``nets/spectral.py`` has one real gain per ERB band above 1.6 kHz, so it cannot pass a
harmonic and remove the noise beside it in the same band; its ideal (``eval --peers oracle``) stops near
RNNoise's DNSMOS. RNNoise adds a pitch comb filter: the frame delayed by one pitch period, ``P``, is added
to the frame ``X`` with a per-band strength; speech repeats after a period and adds up, noise does not.

This study measures the ceiling of that idea in our layout on the validation mixtures, all systems in one
run: per frame the pitch lag ``τ`` (normalised autocorrelation of the last ``n_fft`` samples against the
same samples ``τ`` earlier, 2.5-20 ms), ``P`` the windowed DFT of the input ``τ`` samples back (only past
and present samples: no added latency), and per ERB band the real pair ``(a, c)`` that best maps
``a X + c P`` onto the clean spectrum (least squares over the band's bins, the band filter as weights),
clipped to ``[0, 1]`` as a network's sigmoid outputs would be. Rows:

- ``oracle``: the shipped ideal mask (``(S / (S + N)) ** 0.5`` per ERB band and fine bin);
- ``ls-gain``: the least-squares band gain alone (``c = 0``): the comb rows' gain, without the comb;
- ``comb-clean-pitch``: ``(a, c)`` with the pitch lag taken from the clean speech (the pitch ceiling);
- ``comb``: ``(a, c)`` with the lag estimated from the noisy input, as a streaming network would.

The fine bins (0-1.6 kHz) keep the mask's own gains in every row. Usage::

    .venv/bin/python tools/denoise_comb_study.py [--split validation] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from edgessm.eval import denoise as dn
from edgessm.nets.spectral import SpectralDenoiser, SpectralDenoiserConfig

LAG_MIN, LAG_MAX = 40, 320  # 2.5-20 ms at 16 kHz: pitch 50-400 Hz


def frames_at(x: torch.Tensor, hop: int, n: int, lag: torch.Tensor | int = 0) -> torch.Tensor:
    """Frames ``(m, n)`` of ``x (T,)`` as the network frames it (frame ``t`` ends at sample ``(t + 1) hop``,
    zeros before the start), each taken ``lag`` samples earlier (``lag (m,)`` per frame, or one int)."""
    m = len(x) // hop
    padded = torch.nn.functional.pad(x, (n + LAG_MAX, 0))
    end = torch.arange(1, m + 1) * hop + n + LAG_MAX - torch.as_tensor(lag)
    return padded[end[:, None] - n + torch.arange(n)[None, :]]


def pitch_lags(x: torch.Tensor, hop: int, n: int) -> torch.Tensor:
    """Per frame, the lag in ``[LAG_MIN, LAG_MAX]`` of the highest normalised correlation between the frame
    and the samples that lag earlier; the shortest lag within 0.9 of the best (no octave-down choices)."""
    m = len(x) // hop
    cur = frames_at(x, hop, n)
    lags = torch.arange(LAG_MIN, LAG_MAX + 1)
    corr = torch.empty(m, len(lags), dtype=x.dtype)
    energy = (cur * cur).sum(-1)
    for i, lag in enumerate(lags.tolist()):
        past = frames_at(x, hop, n, lag)
        corr[:, i] = (cur * past).sum(-1) / torch.sqrt(energy * (past * past).sum(-1) + 1e-12)
    best = corr.max(-1, keepdim=True).values
    first = (corr >= 0.9 * best).float().argmax(-1)
    return lags[first]


def comb_system(mixtures, mode: str):
    """``mode``: ``ls-gain``, ``comb-clean-pitch`` or ``comb`` (see the module docstring)."""
    import hashlib

    net = SpectralDenoiser(SpectralDenoiserConfig()).double().eval()
    mask_net = SpectralDenoiser(SpectralDenoiserConfig()).eval()  # float32, as the shipped oracle runs
    hop, n, bins, fine = net.hop, net.n_fft, net.bins, net.cfg.fine_bins
    weights = net.band_power  # (bins, bands): each band's filter over the bins
    spread = net.gain_map[: net.cfg.bands, :bins]  # (bands, bins): band values to bins, fine bins 0
    clean_of = {hashlib.sha1(m.noisy.tobytes()).hexdigest(): m.clean for m in mixtures}

    def spectrum(frames: torch.Tensor) -> torch.Tensor:
        ri = frames @ net.analysis
        return torch.complex(ri[..., :bins], ri[..., bins:])

    def run(x: np.ndarray) -> np.ndarray:
        c = clean_of[hashlib.sha1(np.asarray(x, np.float32).tobytes()).hexdigest()]
        pad = (-len(x)) % hop + hop
        xt = torch.nn.functional.pad(torch.as_tensor(x, dtype=torch.float64), (0, pad))
        ct = torch.nn.functional.pad(torch.as_tensor(c, dtype=torch.float64), (0, pad))
        with torch.no_grad():
            X, S = spectrum(frames_at(xt, hop, n)), spectrum(frames_at(ct, hop, n))
            if mode == "ls-gain":
                P = torch.zeros_like(X)
            else:
                lag = pitch_lags(ct if mode == "comb-clean-pitch" else xt, hop, n)
                P = spectrum(frames_at(xt, hop, n, lag))
            # per band: [[<X,X> <X,P>] [<P,X> <P,P>]] (a c)' = (<X,S> <P,S>)', real parts, band-weighted
            xx, pp = (X.abs() ** 2) @ weights, (P.abs() ** 2) @ weights
            xp = (X * P.conj()).real @ weights
            xs, ps = (S * X.conj()).real @ weights, (S * P.conj()).real @ weights
            ridge = 1e-6 * (xx + pp) + 1e-12
            if mode == "ls-gain":
                a, cc = xs / (xx + ridge), torch.zeros_like(xs)
            else:  # Cramer's rule for the 2x2 system of every band and frame
                det = (xx + ridge) * (pp + ridge) - xp * xp
                a = ((pp + ridge) * xs - xp * ps) / det
                cc = ((xx + ridge) * ps - xp * xs) / det
            a, cc = a.clamp(0, 1) @ spread, cc.clamp(0, 1) @ spread  # (m, bins)
            mask, _ = mask_net.oracle_gains(xt.float()[None, None], ct.float()[None, None])
            a[:, :fine] = mask[0, :, net.cfg.bands :].double()  # the fine bins: the mask's own gains
            cc[:, :fine] = 0.0
            Y = a * X + cc * P
            ri = torch.cat([Y.real, Y.imag], -1)
            zeros = xt.new_zeros(1, 1, hop)
            y = net._overlap_add((ri @ net.synthesis)[None], zeros)[0]
        return y[0, 0, net.delay : net.delay + len(x)].float().numpy()

    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", default="validation", choices=["validation", "test"])
    ap.add_argument("--out", type=Path, help="write report.json / report.md here")
    args = ap.parse_args(argv)
    mixtures = dn.mixtures(args.split)
    systems = {"noisy": lambda x: np.asarray(x, np.float32), "oracle": dn.oracle_system(mixtures)}
    for mode in ("ls-gain", "comb-clean-pitch", "comb"):
        systems[mode] = comb_system(mixtures, mode)
    from tqdm import tqdm

    results = dn.evaluate(systems, mixtures, lambda items, desc: tqdm(items, desc=desc))
    summary = dn.summary(results)
    head = "| system | PESQ | STOI | SI-SDRi | SIG | BAK | OVRL | music OVRL | babble OVRL |"
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, s in summary.items():
        mean, by = s["mean"], s["by_noise"]
        cells = [f"{mean['pesq']:.2f}", f"{mean['stoi']:.3f}", f"{mean['si_sdr_i']:+.1f}"]
        cells += [f"{mean[k]:.2f}" for k in ("dnsmos_sig", "dnsmos_bak", "dnsmos_ovrl")]
        cells += [f"{by[kind]['dnsmos_ovrl']:.2f}" for kind in ("music", "babble")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print(f"{len(mixtures)} {args.split} mixtures\n{table}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "report.json").write_text(json.dumps(summary, indent=1))
        (args.out / "report.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
