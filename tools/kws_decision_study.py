"""The keyword decision's gates on validation streams: detection rates and false accepts per hour of a keyword
graph at several thresholds, with and without the contrast gate, the speech-after gate, the hold and the
runner-up margin (how kws35's and kws35-es's decisions were chosen).

    .venv/bin/python tools/kws_decision_study.py models/kws35 --thresholds 0.95,0.9,0.85,0.8 --gates 0,3,6
    .venv/bin/python tools/kws_decision_study.py models/kws35 --thresholds 0.85,0.8,0.7 --gates 6 --after 0,0.5
    .venv/bin/python tools/kws_decision_study.py models/kws35 --thresholds 0.5,0.6 --gates 6 --hold 0,0.2,0.4
    .venv/bin/python tools/kws_decision_study.py models/kws35 --thresholds 0.3,0.4,0.5 --gates 6 --margin 0,0.2,0.4

Data (no test speaker): the keyword streams of ``edgessm eval --calibrate`` (seed 0: real validation
speakers in a quiet room and over keyword-free validation speech, music and noise) and keyword-free
validation audio, 1 h (seed 0) + 2 h (seed 1), a third each of speech, music and noise. Scored by
:func:`edgessm.eval.kws.stream_metrics`, as ``edgessm eval`` scores streams. ``--after-span A,B`` moves
the speech-after gate's span (``edgessm.runtime.kws.AFTER_S``) for a study; the runtime's stays.

Its keyword-free speech is a few minutes of held-out real speakers looped to fill the hours (the tool prints how
much): a false-accept rate of a few per hour on it is a few distinct moments. Low false-accept operating points
chosen on it did not hold on the test half (models/kws35/eval/NOTES.md, *Fewer false accepts*).

Words with fewer than 30 real validation clips are filled up with synthetic validation voices (the default
and Kokoro corpora on the machine), so a model trained on more synthetic speech looks better on them than it
is on people. Each row therefore also gives the rates over the words whose keywords are all real speakers
(``real speakers only``; the ten commands and the few other words with enough real clips).

The rule that picks a decision, when ``--max-speech-fa`` and/or ``--max-wrong`` are given: of the rows whose
false accepts per hour on speech and wrong-word rate (another keyword detected while one is said) stay within
those bounds, the one that detects the most keywords of real speakers over all backgrounds. Set the bounds
from the shipped decision's own row, so a new model or decision is chosen only where it is no worse on either.
"""

from __future__ import annotations

import argparse

from edgessm.eval.backgrounds import describe_pool, speech_pool
from edgessm.eval.calibrate import real_validation_words, validation_free, validation_keywords, validation_streams
from edgessm.eval.kws import StreamSet, stream_logits, stream_metrics
from edgessm.runtime import kws
from edgessm.runtime.kws import DecisionConfig
from edgessm.runtime.registry import resolve_graph
from edgessm.runtime.session import StepModel


def _rate(per_word: dict, words: set[str]) -> float:
    """Keywords detected among ``words`` of a ``per_word`` table: a sweep row's (``{word: {"hits", "keywords"}}``)
    or one stream's (``{word: (hits, keywords)}``)."""
    pairs = {w: (v["hits"], v["keywords"]) if isinstance(v, dict) else tuple(v) for w, v in per_word.items()}
    counts = [pairs[w] for w in words if w in pairs]
    return sum(h for h, _ in counts) / max(1, sum(n for _, n in counts))


def validation_data(sample_rate: int) -> tuple[list[StreamSet], list[StreamSet], set[str], float]:
    """The study's keyword streams, its keyword-free audio (1 h, seed 0, + 2 h, seed 1), the words whose keywords
    are all real speakers, and the hours of keyword-free speech (printing how few distinct recordings it holds)."""
    streams = validation_streams(validation_keywords(), seed=0)
    free = validation_free(1.0, 0) + validation_free(2.0, 1)
    hours = sum(len(s.audio) for s in free if s.kind == "speech") / sample_rate / 3600
    print(f"{describe_pool(speech_pool('validation'), hours)}; a false-accept rate on it counts few distinct moments",
          flush=True)  # fmt: skip
    return streams, free, real_validation_words(), hours


def row_summary(row: dict, real: set[str], speech_hours: float) -> tuple[str, float]:
    """A sweep row's rates as one line (per background, all keywords, wrong words, real speakers only, false
    accepts), and its false accepts per hour on speech."""
    rates = ", ".join(f"{k.removeprefix('validation-')} {v['detection_rate']:.1%}"
                      for k, v in row["by_background"].items())  # fmt: skip
    speech_fa = row["false_accepts_by_background"].get("speech", 0) / speech_hours
    session = _rate(row["by_background"]["validation-session"]["per_word"], real)
    return (f"{rates}; all {row['detection_rate']:.1%}, wrong word {row['wrong_word_rate']:.1%}; real speakers only: "
            f"session {session:.1%}, all {_rate(row['per_word'], real):.1%}; FA/h on speech {speech_fa:.0f}, on all "
            f"{row['false_accepts_per_hour']:.1f}"), speech_fa  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a keyword spotter: shipped name, model folder or graph")
    ap.add_argument("--thresholds", default="0.9,0.85,0.8")
    ap.add_argument("--gates", default="0,6", help="contrast gates in dB (0: none)")
    ap.add_argument("--after", default="0", help="speech-after gates: highest mean _unknown_ posterior (0: none)")
    ap.add_argument("--hold", default="0", help="holds in seconds: the hold's strongest keyword fires (0: none)")
    ap.add_argument("--margin", default="0", help="runner-up margins: a keyword leads every other by this (0: none)")
    ap.add_argument("--after-span", help="the speech-after gate's span in seconds after the crossing, e.g. 0.1,0.3")
    ap.add_argument("--max-speech-fa", type=float, help="the rule's bound on false accepts per hour on speech")
    ap.add_argument("--max-wrong", type=float, help="the rule's bound on the wrong-word rate, e.g. 0.07")
    args = ap.parse_args()
    if args.after_span:
        kws.AFTER_S = tuple(float(x) for x in args.after_span.split(","))
    model = StepModel(resolve_graph(args.model))
    streams, free, real, speech_hours = validation_data(model.info.sample_rate)
    logits = stream_logits(model, streams + free)
    thresholds = [float(t) for t in args.thresholds.split(",")]
    admissible = []  # (detection rate, description) of the rows within the rule's bounds
    for gate in (float(g) for g in args.gates.split(",")):
        combos = [(float(u), float(h), float(m)) for u in args.after.split(",") for h in args.hold.split(",")
                  for m in args.margin.split(",")]  # fmt: skip
        for after, hold, margin in combos:
            cfg = DecisionConfig(0.5, contrast_db=gate or None, speech_after=after or None, hold_s=hold,
                                 margin=margin or None)  # fmt: skip
            sweep = stream_metrics(model, streams, free, thresholds, cfg, logits=logits)["sweep"]
            for row in sweep:
                name = f"threshold {row['threshold']:g}, gate {gate:g} dB, speech after {after:g}, hold {hold:g} s"
                name += f", margin {margin:g}" if margin else ""
                line, speech_fa = row_summary(row, real, speech_hours)
                print(f"{name}: {line}", flush=True)
                if (args.max_speech_fa is None or speech_fa <= args.max_speech_fa) and (
                        args.max_wrong is None or row["wrong_word_rate"] <= args.max_wrong):  # fmt: skip
                    admissible.append((_rate(row["per_word"], real), name))
    if args.max_speech_fa is not None or args.max_wrong is not None:
        if admissible:
            rate, name = max(admissible)
            print(f"chosen (most keywords of real speakers within the bounds): {name} ({rate:.1%} of them)")
        else:
            print("chosen: none; no row stays within the bounds")


if __name__ == "__main__":
    main()
