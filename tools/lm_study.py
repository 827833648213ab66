"""Choose a recognizer's beam search settings on validation speakers: greedy against every combination of
beam width, word-model weight and word bonus, on real speech the recipe never trained on.

    python tools/lm_study.py models/asr/asr.onnx lm.npz --set read     # 39 real read sentences
    python tools/lm_study.py models/asr/asr.onnx lm.npz --set sc       # 150 real Speech Commands words
    python tools/lm_study.py models/asr/asr.onnx lm.npz --set sentences   # 150 real sentences (teacher's text)
    python tools/lm_study.py models/asr/asr.onnx lm.npz --set libri   # Mini LibriSpeech readers (human text)
    python tools/lm_study.py GRAPH LM --beams 32,64 --weights 0.4,0.6,0.8 --bonuses 1,2,3 --open

The utterances are those of the recognizer recipes' *validation* speakers (``assign_split`` with their
10% validation / 10% test shares; ``edgessm eval asr`` reads the test share), streamed through the graph
and decoded as ``edgessm transcribe`` decodes files. Prints WER and CER per setting; nothing is written.
"""

from __future__ import annotations

import argparse
import itertools
import random

from edgessm.data.corpora import (
    shared_fsdd,
    shared_librispeech_5,
    shared_pseudolabeled_sentences,
    shared_read_speech,
    shared_sc_train,
)
from edgessm.data.manifest import assign_split
from edgessm.eval import asr
from edgessm.runtime.beam import BeamDecoder
from edgessm.runtime.ngram import WordLM
from edgessm.runtime.session import StepModel

# ``sentences``: the shared real sentences with the teacher's (Whisper tiny.en's) transcripts as references,
# whole files (LibriSpeech readers, spoken coffee orders): more sentences than ``read``, machine references;
# ``libri``: Mini LibriSpeech's native readers of audiobooks, human transcripts, utterances up to 20 s
SOURCES = {"read": shared_read_speech, "sc": shared_sc_train, "fsdd": shared_fsdd,
           "sentences": shared_pseudolabeled_sentences, "libri": shared_librispeech_5}  # fmt: skip


def validation_utterances(name: str, limit: int, seed: int = 0) -> list[asr.Utterance]:
    """At most ``limit`` utterances of set ``name``'s validation speakers, a fixed random choice."""
    clips = sorted((c for c in SOURCES[name]() if c.text and assign_split(c, 10.0, 10.0) == "validation"),
                   key=lambda c: c.path)  # fmt: skip
    random.Random(seed).shuffle(clips)
    return asr._clips(clips[:limit])


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("graph", help="the recognizer's .onnx graph")
    ap.add_argument("lm", help="the word model (edgessm lm)")
    ap.add_argument("--set", choices=sorted(SOURCES), default="read")
    ap.add_argument("--limit", type=int, default=150, help="utterances at most")
    ap.add_argument("--beams", default="32", help="comma-separated beam widths")
    ap.add_argument("--weights", default="0.4,0.6,0.8", help="comma-separated word-model weights")
    ap.add_argument("--bonuses", default="1,2,3", help="comma-separated word bonuses")
    ap.add_argument("--open", action="store_true", help="the open-vocabulary search (any spelling)")
    args = ap.parse_args()

    utts = validation_utterances(args.set, args.limit)
    if not utts:
        raise SystemExit(f"no validation utterances in {args.set!r} (is ../shared/data there?)")
    model, lm = StepModel(args.graph, threads=1), WordLM.load(args.lm)
    systems = {"greedy": asr.GraphRecognizer(model)}
    for beam, alpha, beta in itertools.product(
        map(int, floats(args.beams)), floats(args.weights), floats(args.bonuses)
    ):
        dec = BeamDecoder(model.info.labels, lm, beam=beam, alpha=alpha, beta=beta, closed=not args.open)
        systems[f"beam {beam} weight {alpha:g} bonus {beta:g}"] = asr.GraphRecognizer(model, rescorer=dec)
    print(f"{len(utts)} validation utterances of {args.set!r}, {sum(len(u.text.split()) for u in utts)} words")
    for name, result in asr.evaluate(systems, utts, args.set).items():
        s = result.summary()
        print(f"{name:<32} WER {100 * s['wer']:6.1f}%  CER {100 * s['cer']:5.1f}%")


if __name__ == "__main__":
    main()
