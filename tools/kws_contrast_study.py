"""The contrast gate on validation streams: detection rates and false accepts per hour of a keyword graph
with and without the gate, at several thresholds (how kws35's and kws35-es's decisions were chosen).

    .venv/bin/python tools/kws_contrast_study.py models/kws35 --thresholds 0.95,0.9,0.85,0.8 --gates 0,3,6

Data (no test speaker): the keyword streams of ``edgessm eval --calibrate`` (seed 0: real validation
speakers in a quiet room and over keyword-free validation speech, music and noise) and keyword-free
validation audio, 1 h (seed 0) + 2 h (seed 1), a third each of speech, music and noise.
"""

from __future__ import annotations

import argparse

from edgessm.eval.calibrate import validation_free, validation_keywords, validation_streams
from edgessm.eval.kws import covered, detect, graph_logits
from edgessm.eval.streams import score_stream
from edgessm.runtime.kws import DecisionConfig
from edgessm.runtime.registry import resolve_graph
from edgessm.runtime.session import StepModel


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a keyword spotter: shipped name, model folder or graph")
    ap.add_argument("--thresholds", default="0.9,0.85,0.8")
    ap.add_argument("--gates", default="0,6", help="contrast gates in dB (0: none)")
    args = ap.parse_args()
    model = StepModel(resolve_graph(args.model))
    info = model.info
    streams = validation_streams(validation_keywords(), seed=0) + validation_free(1.0, 0) + validation_free(2.0, 1)
    logits = [graph_logits(model, s.audio) for s in streams]
    frame_s = info.stride / info.sample_rate
    for th in (float(t) for t in args.thresholds.split(",")):
        for gate in (float(g) for g in args.gates.split(",")):
            cfg = DecisionConfig(th, contrast_db=gate or None)
            rates, fa, hours, speech_fa, speech_hours = [], 0, 0.0, 0, 0.0
            for s, lg in zip(streams, logits, strict=True):
                sc = score_stream(detect(lg, info.labels, frame_s, cfg, covered(s.audio, lg, info.stride)),
                                  s.placements, len(s.audio) / info.sample_rate)  # fmt: skip
                if s.placements:
                    rates.append(f"{s.kind.removeprefix('validation-')} {sc.detection_rate:.1%}")
                else:
                    fa, hours = fa + sc.false_accepts, hours + sc.duration_s / 3600
                    if s.kind == "speech":
                        speech_fa, speech_hours = speech_fa + sc.false_accepts, speech_hours + sc.duration_s / 3600
            per_hour = f"FA/h on speech {speech_fa / speech_hours:.0f}, on all {fa / hours:.1f}"
            print(f"threshold {th:g}, gate {gate:g} dB: " + ", ".join(rates) + "; " + per_hour, flush=True)


if __name__ == "__main__":
    main()
