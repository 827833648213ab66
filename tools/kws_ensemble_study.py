"""Output ensembles of keyword spotters on the validation streams of ``tools/kws_decision_study.py``: would
running two graphs side by side (or a second one as a verifier) beat one graph at the same false accepts?

    .venv/bin/python tools/kws_ensemble_study.py v12=models/kws35 k13=RUN/kws35 es=models/kws35-es \\
        --combos v12,k13,v12+k13,v12*k13,v12*es --thresholds 0.5,0.6,0.7,0.8,0.9

A combination ``a+b`` averages the models' posteriors (frame by frame), ``a*b`` takes their geometric mean
(renormalised; a keyword needs both to agree); a plain name is the model alone. Every row goes through the
shipped decision (smoothing, threshold, refractory period, the contrast gate at ``--gate`` dB) and is scored
as ``kws_decision_study`` scores it (the same line per row, the same validation data). The models'
frame logits are computed once per run; the graphs must share labels and frame rate.
"""

from __future__ import annotations

import argparse

import numpy as np
from kws_decision_study import row_summary, validation_data

from edgessm.eval.kws import stream_logits, stream_metrics
from edgessm.runtime.kws import DecisionConfig
from edgessm.runtime.lexicon import log_softmax
from edgessm.runtime.registry import resolve_graph
from edgessm.runtime.session import StepModel


def combine(combo: str, logp: dict[str, list[np.ndarray]]) -> list[np.ndarray]:
    """Per-stream log posteriors ``(classes, frames)`` of ``combo`` (``a``, ``a+b`` or ``a*b``)."""
    if "+" in combo:
        parts = [logp[p] for p in combo.split("+")]
        return [np.log(np.mean([np.exp(p[i]) for p in parts], axis=0) + 1e-12) for i in range(len(parts[0]))]
    if "*" in combo:
        parts = [logp[p] for p in combo.split("*")]
        return [log_softmax(np.mean([p[i] for p in parts], axis=0)) for i in range(len(parts[0]))]
    return logp[combo]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", help="NAME=MODEL: a shipped name, model folder or graph, named")
    ap.add_argument("--combos", required=True, help="comma-separated: NAME, NAME+NAME (mean), NAME*NAME (geometric)")
    ap.add_argument("--thresholds", default="0.5,0.6,0.7,0.8,0.9")
    ap.add_argument("--gate", type=float, default=6.0, help="the contrast gate in dB (0: none)")
    args = ap.parse_args()
    named = dict(m.split("=", 1) for m in args.models)
    for combo in args.combos.split(","):
        missing = set(combo.replace("+", "*").split("*")) - set(named)
        if missing:
            ap.error(f"--combos names {sorted(missing)}, which are not among the models {sorted(named)}")
    models = {name: StepModel(resolve_graph(path)) for name, path in named.items()}
    reference = next(iter(models.values()))
    for name, model in models.items():
        if model.info.labels != reference.info.labels or model.info.stride != reference.info.stride:
            raise SystemExit(f"{name} ({named[name]}) has other labels or another frame rate than the first model")
    streams, free, real, speech_hours = validation_data(reference.info.sample_rate)
    every = streams + free
    logp = {}
    for name, model in models.items():
        logits = stream_logits(model, every)
        logp[name] = [log_softmax(logits[id(s)]) for s in every]
        print(f"{name}: logits of {len(every)} streams", flush=True)
    thresholds = [float(t) for t in args.thresholds.split(",")]
    cfg = DecisionConfig(0.5, contrast_db=args.gate or None)
    for combo in args.combos.split(","):
        logits = {id(s): x for s, x in zip(every, combine(combo, logp), strict=True)}
        for row in stream_metrics(reference, streams, free, thresholds, cfg, logits=logits)["sweep"]:
            print(f"{combo} at {row['threshold']:g}: {row_summary(row, real, speech_hours)[0]}", flush=True)


if __name__ == "__main__":
    main()
