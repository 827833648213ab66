"""Does a keyword graph still hear a session after a long stretch of other sound? (the HADES block's
running mean.)

A HADES block routes its expert heads on the input minus a causal running mean. The paper's mean is cumulative
(``mean = "cumulative"``): after ten minutes of music it is the music's mean and moves by 0.2% per further second,
so a quiet session that follows is routed as if the music were still playing. The default exponential mean
(``mean = "ema"``, ``mean_frames`` frames) forgets it within seconds. This script measures the difference on
graphs trained each way:

    .venv/bin/python tools/running_mean_study.py graphs/hades_full graphs/hades_cumulative --minutes 10

Data (no test speaker): the validation session stream of ``edgessm eval --calibrate`` (real and synthetic
validation speakers with 1.5-2.5 s pauses in a quiet room), streamed from the graph's start state on its own and
after ``--minutes`` of keyword-free validation speech, music or noise (:func:`edgessm.eval.calibrate.validation_free`),
in one stream. Only the session part is scored (hits of the right word, wrong words), as ``edgessm eval`` scores
streams, at each ``--thresholds`` value with no gate.
"""

from __future__ import annotations

import argparse

import numpy as np

from edgessm.data.audio import SAMPLE_RATE
from edgessm.eval.calibrate import validation_free, validation_keywords, validation_streams
from edgessm.eval.kws import StreamSet, graph_logits, stream_metrics
from edgessm.runtime.kws import DecisionConfig
from edgessm.runtime.registry import resolve_graph
from edgessm.runtime.session import StepModel


def session_after(model: StepModel, session: StreamSet, prefix: np.ndarray | None) -> np.ndarray:
    """Frame logits ``(classes, frames)`` of ``session`` when the stream began with ``prefix`` (cut to whole
    chunks, so the session's frames are the same frames as on its own)."""
    if prefix is None:
        return graph_logits(model, session.audio)
    lead = prefix[: len(prefix) - len(prefix) % model.info.chunk]
    return graph_logits(model, np.concatenate([lead, session.audio]))[:, len(lead) // model.info.stride :]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("graphs", nargs="+", help="keyword spotters: shipped names, model folders or graphs")
    ap.add_argument("--minutes", type=float, default=10.0, help="keyword-free audio before the session")
    ap.add_argument("--thresholds", default="0.7,0.9")
    args = ap.parse_args()
    thresholds = [float(t) for t in args.thresholds.split(",")]
    session = next(s for s in validation_streams(validation_keywords(), seed=0) if s.kind == "validation-session")
    prefixes = {"none": None} | {s.kind: s.audio for s in validation_free(3 * args.minutes / 60, seed=2)}
    print(
        f"validation session: {len(session.placements)} keywords, {len(session.audio) / SAMPLE_RATE:.0f} s; "
        f"before it: nothing, or {args.minutes:g} min of keyword-free validation speech, music or noise"
    )
    for path in args.graphs:
        model = StepModel(resolve_graph(path))
        for kind, prefix in prefixes.items():
            logits = {id(session): session_after(model, session, prefix)}
            sweep = stream_metrics(model, [session], [], thresholds, DecisionConfig(0.5), logits=logits)["sweep"]
            cells = ", ".join(f"@{r['threshold']:g} {r['detection_rate']:.1%} (wrong {r['wrong_word_rate']:.1%})"
                              for r in sweep)  # fmt: skip
            print(f"{path}: after {kind}: {cells}", flush=True)


if __name__ == "__main__":
    main()
