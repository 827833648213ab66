"""``edgessm soup``: one model from the averaged weights of several fine-tunes of the same network.

    edgessm soup models/kws35 runs/kws_v10 runs/kws_v11 --out runs/kws_soup
    edgessm soup runs/a runs/b --weights 2,1 --out runs/ab      # a weighted average
    edgessm export runs/kws_soup --out models/kws35-soup --chunk 1280

A *model soup* (Wortsman et al., "Model soups: averaging weights of multiple fine-tuned models improves
accuracy without increasing inference time", ICML 2022): fine-tunes that start from one parent stay in one
basin of the loss, and the average of their weights is often better than each of them, with the cost of one
model at run time. It only makes sense for models that share an ancestor; this command checks that they
are the same network (kind, config, labels) and that every tensor matches in name and shape, not that they
share a parent: that is for the user to know (a folder's history is in its card). Choose a soup on
validation data like any other model (``edgessm train RECIPE --init SOUP --validate``).

The snapshots of one run's schedule tail (``train.snapshot_every``) are the same kind of family: their soup is
checkpoint averaging, ``edgessm soup $(ls -d RUN/snapshots/step_* | tail -4) --out DIR``.

Weights are read with safetensors (no pickle) and averaged in float64; integer tensors (counters, index
buffers) must be equal in every source. The result is a model folder (``model.json`` of the first source
with a ``soup`` record of the sources, their weights and their files' sha256, and ``model.safetensors``),
written atomically into a new folder: a source is never overwritten.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

from edgessm.runtime.registry import sha256

# model.json fields that must agree between the sources (the rest, e.g. a previous ``soup`` record, may differ)
SAME_FIELDS = ("network", "config", "labels", "clip_samples", "warmup_samples")


def average_weights(states: list[dict[str, np.ndarray]], weights: list[float] | None = None) -> dict[str, np.ndarray]:
    """The weighted mean of ``states`` (name -> array, every state with the same names and shapes).

    ``weights``: one non-negative number per state (normalised to sum 1; default: equal). Floating tensors
    are averaged in float64 and returned in their own dtype; integer and boolean tensors must be equal in
    every state and are returned as they are.
    """
    if not states:
        raise ValueError("no weights to average")
    w = np.ones(len(states)) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (len(states),):
        raise ValueError(f"{len(w)} weights for {len(states)} models: give one weight per model")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"weights must be finite, non-negative and not all zero, got {list(weights or [])}")
    w = w / w.sum()
    names = set(states[0])
    for i, s in enumerate(states[1:], start=2):
        if set(s) != names:
            extra, missing = sorted(set(s) - names), sorted(names - set(s))
            raise ValueError(f"model {i} has other tensors than model 1 (extra {extra[:3]}, missing {missing[:3]})")
    out = {}
    for name in states[0]:
        arrays = [s[name] for s in states]
        shapes = {a.shape for a in arrays}
        if len(shapes) > 1:
            raise ValueError(f"tensor {name} has different shapes in the models: {sorted(shapes)}")
        first = arrays[0]
        if np.issubdtype(first.dtype, np.floating):
            stack = np.stack([a.astype(np.float64) for a in arrays])
            if not np.all(np.isfinite(stack)):
                raise ValueError(f"tensor {name} holds NaN or infinity in a model: retrain or drop that model")
            out[name] = np.tensordot(w, stack, axes=1).astype(first.dtype)
        else:
            if any(not np.array_equal(first, a) for a in arrays[1:]):
                raise ValueError(f"integer tensor {name} differs between the models: they cannot be averaged")
            out[name] = first.copy()
    return out


def _source(name_or_path: str) -> tuple[Path, dict]:
    from edgessm.deploy.load import resolve_model_dir

    d = resolve_model_dir(name_or_path)
    for f in ("model.json", "model.safetensors"):
        if not (d / f).is_file():
            raise FileNotFoundError(f"{d} has no {f}: give finished training runs or model folders")
    return d, json.loads((d / "model.json").read_text())


def make_soup(sources: list[str], out: str | os.PathLike, weights: list[float] | None = None) -> Path:
    """Average the model folders ``sources`` into the new folder ``out``; returns its path."""
    from safetensors.numpy import load_file

    if len(sources) < 2:
        raise ValueError("a soup needs at least two models")
    found = [_source(s) for s in sources]
    dirs = [d.resolve() for d, _ in found]
    if len(set(dirs)) < len(dirs):
        raise ValueError("a model is given twice: use --weights to weigh one model more")
    first = found[0][1]
    for d, desc in found[1:]:
        for key in SAME_FIELDS:
            if desc.get(key) != first.get(key):
                raise ValueError(f"{d} is another network than {found[0][0]} ({key} differs): only fine-tunes "
                                 "of one network can be averaged")  # fmt: skip
    from edgessm.deploy.load import write_model_folder

    dest = Path(out).expanduser()
    if dest.exists():  # before the averaging: say it at once
        raise FileExistsError(f"{dest} exists: give a new folder (a soup never overwrites a model)")
    averaged = average_weights([load_file(str(d / "model.safetensors")) for d in dirs], weights)
    w = [1.0] * len(dirs) if weights is None else [float(x) for x in weights]
    desc = {k: v for k, v in first.items() if k not in ("soup", "checkpoint", "step")}  # (the first source's)
    desc["soup"] = [  # the sources as the user named them, with their weights' hashes
        {"source": str(s), "weight": x / sum(w), "sha256": sha256(d / "model.safetensors")}
        for s, d, x in zip(sources, dirs, w, strict=True)
    ]
    return write_model_folder(dest, averaged, desc)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("models", nargs="+", help="fine-tunes of one network: run folders, model folders or shipped names")
    ap.add_argument("--out", required=True, help="the new model folder (must not exist)")
    ap.add_argument("--weights", help="one weight per model, comma-separated (default: equal)")


def run(args: argparse.Namespace) -> int:
    try:
        weights = [float(x) for x in args.weights.split(",")] if args.weights else None
    except ValueError:
        raise SystemExit(f"edgessm soup: --weights takes numbers separated by commas, got {args.weights!r}") from None
    try:
        dest = make_soup(args.models, args.out, weights)
    except (OSError, ValueError) as e:  # missing or existing folders, a full disk, mismatched models
        raise SystemExit(f"edgessm soup: {e}") from None
    print(f"soup of {len(args.models)} models in {dest} (export it: edgessm export {dest} --out DIR)")
    return 0
