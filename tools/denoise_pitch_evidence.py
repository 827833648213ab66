"""Would a pitch feature tell a mask denoiser's speech units from its noise units better than it already does?

RNNoise feeds its network a per-band pitch correlation: how much of a band repeats one pitch period back (high in
voiced speech, low in most noise). Before building such a feature into a graph, this measures what it could add on
validation mixtures (``edgessm eval --mixtures validation``'s; the test stays untouched). Per frame of the network,
the pitch lag is the one of highest normalised autocorrelation, ``--min-lag`` to ``--max-lag`` samples back (past
samples only, as a stream has them); per unit (ERB band or fine bin) the feature is the normalised correlation of the
frame's spectrum with the spectrum of the frame one lag back (``Re Σ X conj(P) / sqrt(Σ|X|² Σ|P|²)`` over the unit's
bins). Units are labelled by the ideal mask (the clean speech known): speech-dominated (above 0.7) or
noise-dominated (below 0.2), the rest left out.

It prints how well each quantity separates the two (the area under the ROC curve), over all units and where the
network's own gain is unsure, and a logistic regression fitted on half the units and scored on the other half: the
network's gain alone (as a logit), then with the pitch correlation and the frame's pitch strength added. A feature
worth building lowers the held-out log loss clearly.

    python tools/denoise_pitch_evidence.py models/denoise --mixtures 14

Prints a table; nothing is written.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
from mask_study import load_mask_denoiser, study_arguments, validation_pairs


def auc(score: np.ndarray, label: np.ndarray) -> float:
    """Area under the ROC curve of ``score`` for the boolean ``label`` (Mann-Whitney, ties averaged)."""
    from scipy.stats import rankdata

    ranks = rankdata(score)
    pos = int(label.sum())
    neg = len(label) - pos
    return float((ranks[label].sum() - pos * (pos + 1) / 2) / (pos * neg))


def logistic_fit(x: np.ndarray, y: np.ndarray, test: np.ndarray) -> tuple[float, float]:
    """A logistic regression of ``y`` on the features ``x (N, D)`` (standardised, L-BFGS), fitted on the units not
    in ``test`` and scored on those: ``(log loss, AUC)`` held out."""
    import torch

    mu, sd = x[~test].mean(0), x[~test].std(0) + 1e-9
    z = torch.as_tensor((x - mu) / sd, dtype=torch.float64)
    t = torch.as_tensor(y, dtype=torch.float64)
    w = torch.zeros(z.shape[1] + 1, dtype=torch.float64, requires_grad=True)
    train = torch.as_tensor(~test)
    opt = torch.optim.LBFGS([w], max_iter=200, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        logit = z[train] @ w[:-1] + w[-1]
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, t[train])
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        logit = z[~train] @ w[:-1] + w[-1]
        loss = float(torch.nn.functional.binary_cross_entropy_with_logits(logit, t[~train]))
    return loss, auc(logit.numpy(), y[test].astype(bool))


def main() -> None:
    ap = study_arguments(__doc__)
    ap.add_argument("--min-lag", type=int, default=40, help="shortest pitch period in samples (400 Hz)")
    ap.add_argument("--max-lag", type=int, default=320, help="longest pitch period in samples (50 Hz)")
    args = ap.parse_args()
    import torch

    net = load_mask_denoiser(args.model)
    hop, n_fft = net.hop, net.n_fft
    lags = torch.arange(args.min_lag, args.max_lag + 1)
    columns: list[np.ndarray] = []
    for _, x, c in validation_pairs(net, args.mixtures):
        with torch.no_grad():
            _, g = net(x, with_gains=True)
            t, valid = net.oracle_gains(x, c, exponent=args.exponent)
            # the network's frame f covers input samples [f hop - hop, f hop + hop) (zeros before the start)
            padded = torch.cat([torch.zeros(hop + args.max_lag), x[0, 0]])
            frames = int(x.shape[-1]) // hop
            idx = (torch.arange(frames) * hop + args.max_lag)[:, None] + torch.arange(n_fft)[None]
            now = padded[idx]  # (F, n_fft)
            back = padded[idx[:, None, :] - lags[None, :, None]]  # (F, lags, n_fft)
            r = (now[:, None] * back).sum(-1) / torch.sqrt((now * now).sum(-1)[:, None] * (back * back).sum(-1) + 1e-12)
            best = r.argmax(1)
            strength = r.gather(1, best[:, None])[:, 0]  # the frame's pitch strength
            spec, delayed = net._dft(now[None])[0], net._dft(back[torch.arange(frames), best][None])[0]
            cross = (spec * delayed) @ net.power_map  # Re Σ X conj(P) per unit
            corr = cross / torch.sqrt(((spec * spec) @ net.power_map) * ((delayed * delayed) @ net.power_map) + 1e-14)
        units = int(g.shape[-1])
        columns.append(np.stack([g[0].flatten().numpy(), t[0].flatten().numpy(), corr.flatten().numpy(),
                                 strength[:, None].expand(frames, units).flatten().numpy(),
                                 valid[0].flatten().numpy()], 1))  # fmt: skip
    data = np.concatenate(columns)
    g, t, corr, strength, valid = data.T
    keep = (valid > 0) & ((t > 0.7) | (t < 0.2))
    g, t, corr, strength = g[keep], t[keep], corr[keep], strength[keep]
    speech = t > 0.7
    print(f"{args.model}: {args.mixtures} validation mixtures, {keep.sum():,} labelled units "
          f"({speech.mean():.0%} speech-dominated)\n")  # fmt: skip
    print("| units | n | speech | AUC: network's gain | pitch correlation | frame's pitch strength |")
    print("|---|---:|---:|---:|---:|---:|")
    for lo, hi in ((0.0, 1.01), (0.03, 0.6), (0.1, 0.5)):
        s = (g >= lo) & (g < hi)
        print(f"| gain in [{lo}, {min(hi, 1.0)}) | {s.sum():,} | {speech[s].mean():.0%} | {auc(g[s], speech[s]):.3f} "
              f"| {auc(corr[s], speech[s]):.3f} | {auc(strength[s], speech[s]):.3f} |")  # fmt: skip
    logit = np.log(np.clip(g, 1e-4, 1 - 1e-4) / (1 - np.clip(g, 1e-4, 1 - 1e-4)))
    test = np.arange(len(g)) % 2 == 1
    print("\n| logistic regression, held-out half | log loss | AUC |\n|---|---:|---:|")
    for name, x in (("the network's gain", logit[:, None]),
                    ("+ pitch correlation", np.stack([logit, corr, logit * corr], 1)),
                    ("+ pitch correlation and strength",
                     np.stack([logit, corr, logit * corr, strength, logit * strength], 1))):  # fmt: skip
        loss, a = logistic_fit(x, speech.astype(np.float64), test)
        print(f"| {name} | {loss:.4f} | {a:.4f} |")


if __name__ == "__main__":
    main()
