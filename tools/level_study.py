"""How a keyword spotter or a recognizer holds up when its input is quieter or louder, with and without the
input level control (``edgessm.runtime.level``), on validation speakers only (how its settings were chosen).

    .venv/bin/python tools/level_study.py kws kws35 --gains=-25,-15,0,8
    .venv/bin/python tools/level_study.py kws kws35 --gains=-15,0 --agc 'slow={"release_db_s":0.25}'
    .venv/bin/python tools/level_study.py asr models/asr/asr.c3200.onnx --set sc --limit 600 --gains=-20,0
    .venv/bin/python tools/level_study.py asr models/asr/asr.c3200.onnx --set read --gains=-20,0

Each row plays the whole validation audio ``gain`` dB louder (clipped to [-1, 1]) and runs it through the
graph without the control (``off``), with the default settings (``on``) and with every ``--agc NAME=JSON``
(settings that differ from the defaults). Keyword spotters: the streams of
``tools/kws_decision_study.py`` (real validation speakers in a quiet room, over keyword-free validation
speech, music and noise) at the graph's own decision, with false accepts on 1 h of keyword-free validation
audio for gains 0 and -15; recognizers: the validation utterances of ``tools/lm_study.py``, greedy and
with the shipped word model. Nothing is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from edgessm.runtime.level import AgcConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _louder(audio: np.ndarray, gain_db: float) -> np.ndarray:
    return np.clip(audio * 10 ** (gain_db / 20), -1.0, 1.0).astype(np.float32)


def _settings(specs: list[str]) -> dict[str, AgcConfig | None]:
    out: dict[str, AgcConfig | None] = {"off": None, "on": AgcConfig()}
    for spec in specs:
        name, _, text = spec.partition("=")
        out[name] = AgcConfig(**json.loads(text or "{}"))
    return out


def kws(args: argparse.Namespace) -> None:
    from kws_decision_study import _rate

    from edgessm.eval.calibrate import real_validation_words, validation_free, validation_keywords, validation_streams
    from edgessm.eval.kws import StreamSet, stream_metrics
    from edgessm.runtime import kws as decision
    from edgessm.runtime.registry import resolve_graph
    from edgessm.runtime.session import StepModel

    streams = validation_streams(validation_keywords(), seed=0)
    free = validation_free(1.0, 0)
    real = real_validation_words()
    for name, agc in _settings(args.agc).items():
        model = StepModel(resolve_graph(args.model), agc=agc or False)
        cfg = decision.graph_decision(model.info.extra)
        for g in args.gains:
            ss = [StreamSet(s.kind, _louder(s.audio, g), s.placements) for s in streams]
            ff = [StreamSet(s.kind, _louder(s.audio, g), []) for s in free] if g in (0, -15) else []
            r = stream_metrics(model, ss, ff, [cfg.threshold], cfg)["sweep"][0]
            kinds = ", ".join(f"{k.removeprefix('validation-')} {v['detection_rate']:.1%}"
                              for k, v in r["by_background"].items())  # fmt: skip
            fa = f"; false accepts {r['false_accepts_by_background']}" if ff else ""
            print(f"{name:>8} {g:+4.0f} dB: {kinds}; real speakers {_rate(r['per_word'], real):.1%}; wrong word "
                  f"{r['wrong_word_rate']:.1%}{fa}", flush=True)  # fmt: skip


def asr_study(args: argparse.Namespace) -> None:
    from lm_study import validation_utterances

    from edgessm.eval import asr
    from edgessm.runtime.beam import BeamDecoder
    from edgessm.runtime.ngram import WordLM
    from edgessm.runtime.registry import shipped_lm, shipped_lm_settings
    from edgessm.runtime.session import StepModel

    utts = validation_utterances(args.set, args.limit)
    if not utts:
        raise SystemExit(f"no validation utterances in {args.set!r} (is ../shared/data there?)")
    lm_path = shipped_lm(args.graph)
    lm = WordLM.load(lm_path) if lm_path else None
    knobs = shipped_lm_settings(args.graph)
    print(f"{len(utts)} validation utterances of {args.set!r}, {sum(len(u.text.split()) for u in utts)} words")
    for name, agc in _settings(args.agc).items():
        model = StepModel(args.graph, agc=agc or False)
        systems = {"greedy": asr.GraphRecognizer(model)}
        if lm is not None:
            dec = BeamDecoder(model.info.labels, lm, beam=int(knobs.get("beam", 32)),
                              alpha=knobs.get("lm_weight", 0.6), beta=knobs.get("word_bonus", 2.0))  # fmt: skip
            systems["word model"] = asr.GraphRecognizer(model, rescorer=dec)
        for g in args.gains:
            quiet = [replace(u, audio=_louder(u.audio, g)) for u in utts]
            res = asr.evaluate(systems, quiet, args.set)
            cells = "; ".join(f"{n} WER {100 * r.summary()['wer']:.1f}% CER {100 * r.summary()['cer']:.1f}%"
                              for n, r in res.items())  # fmt: skip
            print(f"{name:>8} {g:+4.0f} dB: {cells}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="task", required=True)
    for task in ("kws", "asr"):
        p = sub.add_parser(task)
        p.add_argument("model" if task == "kws" else "graph", help="a keyword spotter (name, folder or graph)"
                       if task == "kws" else "a recognizer's .onnx graph (its folder's lm.npz is used)")  # fmt: skip
        p.add_argument("--gains", default="-15,0", help="comma-separated dB")
        p.add_argument("--agc", action="append", default=[], metavar="NAME=JSON", help="more settings to try")
        if task == "asr":
            p.add_argument("--set", choices=("read", "sc", "sentences", "fsdd"), default="sc")
            p.add_argument("--limit", type=int, default=150)
    args = ap.parse_args()
    args.gains = [float(x) for x in args.gains.split(",") if x.strip()]
    kws(args) if args.task == "kws" else asr_study(args)


if __name__ == "__main__":
    main()
