"""Where one keyword model fires in keyword-free speech, what do other models say?

Reads a list of mined spots (``edgessm mine``: ``path,time_s,word,score``, the moments a model's graph fired in
keyword-free training speech) and runs each given model (PyTorch weights: a shipped name, a model folder or a
finished run) over the same recordings from a 2 s silent start, as the training context does. At each spot it takes
the model's highest smoothed posterior (4 frames, as ``listen``) of the spot's word from 0.3 s before to 0.1 s after
it, and prints how those scores are spread. A teacher that scores the student's spots near zero says "no keyword"
there: a student still firing has not learnt it (capacity, or too little weight on those moments), rather than
been taught to fire.

    .venv/bin/python tools/kws_spot_study.py ~/.cache/edgessm/mined/kws_es_v6-t03.csv \\
        runs/kws_es_v6 models/kws35 models/kws35-es --recordings 300

Prints a table; nothing is written. The spots are training speech (no test speaker).
"""

from __future__ import annotations

import argparse
import collections
import csv
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

SMOOTH = 4  # frames, as ``edgessm listen`` smooths
WARMUP = 32000  # samples of silence before each recording (the training context's length)


def smoothed_posteriors(net, audio: np.ndarray) -> np.ndarray:
    """``(classes, frames)`` posteriors of ``net`` on ``audio`` after ``WARMUP`` silent samples, each frame the mean
    of the last ``SMOOTH`` frames."""
    import torch

    x = np.concatenate([np.zeros(WARMUP, np.float32), audio.astype(np.float32)])
    stride = int(net.stride)
    x = torch.as_tensor(x[: len(x) // stride * stride])[None, None]
    with torch.no_grad():
        p = torch.softmax(net(x, all_frames=True).float()[0], dim=0).numpy()
    c = np.cumsum(np.pad(p, ((0, 0), (SMOOTH, 0))), axis=1)
    return (c[:, SMOOTH:] - c[:, :-SMOOTH]) / SMOOTH


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("spots", help="a mined list (edgessm mine --out)")
    ap.add_argument("models", nargs="+", help="keyword models with the same labels: shipped names, folders, runs")
    ap.add_argument("--recordings", type=int, default=300, help="recordings drawn from the list (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import torch

    from edgessm.data.audio import SAMPLE_RATE, load_audio
    from edgessm.deploy.load import load_trained

    torch.set_num_threads(1)
    nets = [load_trained(m) for m in args.models]
    labels = nets[0][1]["labels"]
    for m, (_, desc) in zip(args.models, nets, strict=True):
        if desc.get("labels") != labels:
            raise SystemExit(f"{m} has other labels than {args.models[0]}: the spots' words would not compare")
    with open(os.path.expanduser(args.spots)) as f:
        rows = list(csv.DictReader(f))
    by_path: dict[str, list[dict[str, str]]] = collections.defaultdict(list)
    for r in rows:
        by_path[r["path"]].append(r)
    paths = sorted(by_path)
    np.random.default_rng(args.seed).shuffle(paths)
    paths = paths[: args.recordings] if args.recordings else paths
    scores: list[list[float]] = []
    for path in paths:
        audio, _ = load_audio(path)
        posts = [(smoothed_posteriors(net, audio), int(net.stride)) for net, _ in nets]
        for r in by_path[path]:
            word, t = labels.index(r["word"]), float(r["time_s"])
            row = [float(r["score"])]
            for p, stride in posts:
                f = int((WARMUP + t * SAMPLE_RATE) / stride) - 1
                lo = max(0, f - int(0.3 * SAMPLE_RATE / stride))
                hi = max(lo + 1, min(p.shape[1], f + int(0.1 * SAMPLE_RATE / stride)))
                row.append(float(p[word, lo:hi].max()))
            scores.append(row)
    s = np.array(scores)
    print(f"{len(s)} spots in {len(paths)} recordings of {args.spots}\n")
    print("| model | median | > 0.6 | > 0.3 | < 0.1 |\n|---|---:|---:|---:|---:|")
    for i, name in enumerate(["the mined list's own scores (its graph)", *args.models]):
        v = s[:, i]
        shares = " | ".join(f"{x:.1%}" for x in (np.mean(v > 0.6), np.mean(v > 0.3), np.mean(v < 0.1)))
        print(f"| {name} | {np.median(v):.3f} | {shares} |")


if __name__ == "__main__":
    main()
