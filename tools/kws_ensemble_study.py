"""Output ensembles of keyword spotters on the validation streams of ``tools/kws_decision_study.py``: would
running two graphs side by side (or a second one as a verifier) beat one graph at the same false accepts?

    .venv/bin/python tools/kws_ensemble_study.py v12=models/kws35 k13=RUN/kws35 es=models/kws35-es \\
        --combos v12,k13,v12+k13,v12*k13,v12*es --thresholds 0.5,0.6,0.7,0.8,0.9

A combination ``a+b`` averages the models' posteriors (frame by frame), ``a*b`` takes their geometric mean
(renormalised; a keyword needs both to agree); a plain name is the model alone. Every row goes through the
shipped decision (smoothing, threshold, refractory period, the contrast gate at ``--gate`` dB) and is scored
as ``kws_decision_study`` scores it, including the rates over real validation speakers only. The models'
frame logits are computed once per run; the graphs must share labels and frame rate.
"""

from __future__ import annotations

import argparse

import numpy as np
from kws_decision_study import _rate

from edgessm.eval.backgrounds import describe_pool, speech_pool
from edgessm.eval.calibrate import real_validation_words, validation_free, validation_keywords, validation_streams
from edgessm.eval.kws import stream_logits, stream_metrics
from edgessm.runtime.kws import DecisionConfig
from edgessm.runtime.registry import resolve_graph
from edgessm.runtime.session import StepModel


def log_posteriors(logits: np.ndarray) -> np.ndarray:
    """Log-softmax over classes of ``(classes, frames)`` logits."""
    x = logits - logits.max(axis=0, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=0, keepdims=True))


def combine(combo: str, logp: dict[str, list[np.ndarray]]) -> list[np.ndarray]:
    """Per-stream log posteriors ``(classes, frames)`` of ``combo`` (``a``, ``a+b`` or ``a*b``)."""
    if "+" in combo:
        parts = [logp[p] for p in combo.split("+")]
        return [np.log(np.mean([np.exp(p[i]) for p in parts], axis=0) + 1e-12) for i in range(len(parts[0]))]
    if "*" in combo:
        parts = [logp[p] for p in combo.split("*")]
        return [log_posteriors(np.mean([p[i] for p in parts], axis=0)) for i in range(len(parts[0]))]
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
    streams = validation_streams(validation_keywords(), seed=0)
    free = validation_free(1.0, 0) + validation_free(2.0, 1)
    every = streams + free
    logp, reference = {}, None
    for name, path in named.items():
        model = StepModel(resolve_graph(path))
        if reference is None:
            reference = model
        elif model.info.labels != reference.info.labels or model.info.stride != reference.info.stride:
            raise SystemExit(f"{name} ({path}) has other labels or another frame rate than the first model")
        logits = stream_logits(model, every)
        logp[name] = [log_posteriors(logits[id(s)]) for s in every]
        print(f"{name}: logits of {len(every)} streams", flush=True)
    assert reference is not None
    real = real_validation_words()
    speech_hours = sum(len(s.audio) for s in free if s.kind == "speech") / reference.info.sample_rate / 3600
    pool = describe_pool(speech_pool("validation"), speech_hours)
    print(f"{pool}; a false-accept rate on it counts few distinct moments", flush=True)
    thresholds = [float(t) for t in args.thresholds.split(",")]
    for combo in args.combos.split(","):
        logits = {id(s): x for s, x in zip(every, combine(combo, logp), strict=True)}
        cfg = DecisionConfig(0.5, contrast_db=args.gate or None)
        for row in stream_metrics(reference, streams, free, thresholds, cfg, logits=logits)["sweep"]:
            speech_fa = row["false_accepts_by_background"].get("speech", 0) / speech_hours
            session = _rate(row["by_background"]["validation-session"]["per_word"], real)
            print(f"{combo} at {row['threshold']:g}: all {row['detection_rate']:.1%}, wrong word "
                  f"{row['wrong_word_rate']:.1%}; real speakers only: session {session:.1%}, all "
                  f"{_rate(row['per_word'], real):.1%}; FA/h on speech {speech_fa:.0f}, on all "
                  f"{row['false_accepts_per_hour']:.1f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
