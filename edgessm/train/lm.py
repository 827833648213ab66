"""``edgessm lm``: a word n-gram model for ``edgessm transcribe --lm`` from licensed text and transcripts.

edgessm lm --out lm.npz                                   # the text sources + generated sentences + asr's transcripts
edgessm lm --out lm.npz --text-sources wordnet --recipe ""   # WordNet's examples only (with the generated sentences)
edgessm lm --out lm.npz --recipe asr_v3 --set 'data.sources=[...]'   # the transcripts of the data a model saw

The text: the sentences of ``--text-sources`` (:mod:`edgessm.data.text_sources`) and ``--generated``
sentences of the synthetic corpus's generator (commands, digits, everyday phrases), both only from
the training share that ``edgessm synth`` gives its training voices, and the transcripts of the
``--recipe``'s *training* utterances (never its validation or test speakers). No sentence that a
held-out speaker of the recipe reads enters the model.
The model is interpolated Kneser-Ney (:mod:`edgessm.runtime.ngram`).
"""

from __future__ import annotations

import argparse
import time


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--out", required=True, help="where to write the model (.npz)")
    ap.add_argument("--text-sources", default="wordnet,bible,gcide", help="comma-separated (empty: none)")
    ap.add_argument("--generated", type=int, default=20000, help="generated sentences (commands, digits, ...)")
    ap.add_argument("--recipe", default="asr", help="add the transcripts of this recipe's training utterances")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a value of the recipe, as in edgessm train (e.g. the data.sources a model was "
                         "trained on)")  # fmt: skip
    ap.add_argument("--order", type=int, default=3, help="n-gram order (1-3)")
    ap.add_argument("--vocab", type=int, default=20000, help="most frequent words kept (others are <unk>)")
    ap.add_argument("--min-count", type=int, default=2, help="n-grams (n >= 2) seen fewer times are pruned")


def training_transcripts(recipe: str, overrides: list[str] | None = None) -> tuple[list[str], set[str]]:
    """The transcripts of a recognizer recipe's training split, less any sentence that a held-out (test)
    speaker also reads (prompts read by many speakers); and those held-out sentences (single words,
    such as the commands every speaker says, stay)."""
    from .config import load_config
    from .tasks import CtcTask, build_task

    task = build_task(load_config(recipe, overrides))
    if not isinstance(task, CtcTask):
        raise ValueError(f"recipe {recipe!r} is not a recognizer recipe")
    every = task.utterances()
    held_out = {c.text for c in every if task.split(c) not in ("train", "validation") and " " in c.text}
    return [c.text for c in every if task.split(c) == "train" and c.text not in held_out], held_out


def training_pool(texts: list[str], seed: int = 0) -> list[str]:
    """The texts the synthetic corpus gives its training voices (``edgessm synth`` splits sentences
    80/10/10 by a hash of the text: validation and test voices read the others)."""
    from edgessm.data.synth.texts import stable_unit

    return [t for t in texts if stable_unit(seed, "sentence-split", t) < 0.8]


def run(args: argparse.Namespace) -> int:
    from edgessm.data.corpora import CorpusError
    from edgessm.data.synth.texts import generate_sentences, normalize_transcript
    from edgessm.data.text_sources import read_sentences
    from edgessm.runtime.ngram import WordLM

    started = time.time()
    parts: dict[str, list[str]] = {}
    try:
        held_out: set[str] = set()
        if args.recipe:
            parts[f"{args.recipe} transcripts"], held_out = training_transcripts(args.recipe, args.set)
        for name in [n for n in args.text_sources.split(",") if n]:
            parts[name] = training_pool([normalize_transcript(s) for s in read_sentences(name)])
        if args.generated > 0:
            parts["generated"] = training_pool([s.text for s in generate_sentences(args.generated)])
        text = [s for p in parts.values() for s in p if s and s not in held_out]
        lm = WordLM.build(text, order=args.order, vocab_size=args.vocab, min_count=args.min_count)
        lm.save(args.out)
    except (CorpusError, ValueError, FileNotFoundError) as e:
        raise SystemExit(f"edgessm lm: {e}") from None
    for name, p in parts.items():
        print(f"  {name:<22} {len(p):>7} sentences {sum(len(s.split()) for s in p):>9} words")
    sizes = {n: sum(len(k) == n for k in lm.logp_table) for n in range(1, lm.order + 1)}
    print(f"wrote {args.out}: order {lm.order}, vocabulary {len(lm.vocab)}, n-grams {sizes} "
          f"({time.time() - started:.0f} s)")  # fmt: skip
    return 0
