"""``edgessm mine``: where a keyword graph fires in keyword-free training speech (hard negatives).

A live keyword spotter's false accepts are keyword-like moments of running speech (kws35 v8: 33 of its
34 false accepts per hour on the test streams are on speech). A recipe's random sentence crops
(``[data] sentence_negatives``) rarely hit those moments. This command streams each keyword-free
training recording of a recipe (its sentences and ``_unknown_`` clips, training split only; recorded
ones unless ``--synthetic``) through an exported graph from the graph's start state, decides as
``edgessm listen`` does (smoothing, refractory) at a low threshold and without gates, and writes every
detection as a row ``path,time_s,word,score`` of a CSV. A recipe reads it with ``[data]
mined_negatives`` (and ``mined_fraction``): the seconds of that recording up to just after the
detection, labelled "no keyword" at every frame (:class:`edgessm.train.kws_task.KwsTask`)::

    edgessm mine kws_v7 --model models/kws35 --out mined.csv
    edgessm train kws_v7 --init models/kws35 --out runs/hn --set data.mined_negatives=mined.csv \\
        --set data.mined_fraction=0.2

Validation and test speakers are never read, so a model chosen on validation streams after training on
its mined negatives is still chosen on speech it never heard.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from .mined import FIELDS, Mined, read_mined, write_mined  # noqa: F401  (the command's data, re-exported)


def mine_recordings(model, paths: Sequence[str], config, progress: Callable[[Iterable], Iterable] = iter,
                    level_dbfs: float | None = None) -> tuple[list[Mined], float]:  # fmt: skip
    """Every detection of ``model`` (:class:`edgessm.runtime.session.StepModel`) under ``config``
    (:class:`edgessm.runtime.kws.DecisionConfig`) in each recording, each streamed alone from the
    graph's start state, at its own level or with its speech at ``level_dbfs``
    (:func:`~edgessm.data.augment.active_level_dbfs`; samples past full scale clipped, as a microphone
    does). Returns the detections and the seconds of audio heard."""
    import numpy as np

    from edgessm.data.audio import load_audio
    from edgessm.data.augment import set_active_level
    from edgessm.eval.kws import covered, graph_logits
    from edgessm.runtime.kws import KeywordDecider

    info = model.info
    frame_s = info.stride / info.sample_rate
    out: list[Mined] = []
    seconds = 0.0
    for path in progress(paths):
        audio = load_audio(path, info.sample_rate)[0]
        if level_dbfs is not None:
            audio = np.clip(set_active_level(audio, level_dbfs), -1.0, 1.0)
        seconds += len(audio) / info.sample_rate
        logits = graph_logits(model, audio)
        decider = KeywordDecider(info.labels, frame_s, config)
        dets = [*decider.process(logits, covered(audio, logits, info.stride)), *decider.flush()]
        out += [Mined(str(path), round(d.time_s, 3), d.label, round(d.score, 4)) for d in dets]
    return out, seconds


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("config", help="the keyword recipe (e.g. kws_v7) or TOML whose training speech is searched")
    ap.add_argument("--model", default="kws35", help="the keyword graph: shipped name, model folder or .onnx")
    ap.add_argument("--out", required=True, help="the CSV to write (path,time_s,word,score)")
    ap.add_argument("--threshold", type=float, default=0.5,
                    help="detection threshold, below the shipped one so near misses count too (default 0.5); "
                         "no contrast or speech-after gate")  # fmt: skip
    ap.add_argument("--synthetic", action="store_true", help="search the synthetic sentences too (default: recorded)")
    ap.add_argument("--level-dbfs", type=float, default=None, metavar="DB",
                    help="stream each recording with its speech at this level (e.g. -12: a close microphone, "
                         "where running speech is louder than most commands); default: as recorded")  # fmt: skip
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="override a recipe value, e.g. --set 'data.sources=[\"shared:read_speech\"]'")  # fmt: skip
    ap.add_argument("--no-progress", action="store_true")


def keyword_free_training_speech(task, synthetic: bool = False) -> list[str]:
    """The recordings a :class:`~edgessm.train.kws_task.KwsTask` treats as keyword-free training speech: its
    sentences and its ``_unknown_`` training clips (recorded ones only unless ``synthetic``)."""
    splits, sentences = task.select_clips()
    clips = task.keyword_free_training(sentences, splits["train"])
    return sorted({c.path for c in clips if synthetic or not c.source.startswith("synth")})


def run(args: argparse.Namespace) -> int:
    from edgessm.runtime.kws import DecisionConfig
    from edgessm.runtime.registry import resolve_graph
    from edgessm.runtime.session import StepModel

    from .config import load_config
    from .tasks import KwsTask, build_task

    if not 0 < args.threshold < 1:
        raise SystemExit(f"edgessm mine: --threshold must be between 0 and 1, got {args.threshold}")
    if args.level_dbfs is not None and not -80 <= args.level_dbfs <= 0:
        raise SystemExit(f"edgessm mine: --level-dbfs must be between -80 and 0 dBFS, got {args.level_dbfs}")
    try:
        cfg = load_config(args.config, list(args.overrides))
        task = build_task(cfg)
        if not isinstance(task, KwsTask):
            raise ValueError(f"{args.config} is a {cfg.task} recipe; mining needs a keyword recipe")
        model = StepModel(resolve_graph(args.model))
        missing = sorted(set(task.labels) - set(model.info.labels))
        if missing:
            raise ValueError(f"the recipe's classes {missing} are not classes of {model.path.name}")
        paths = keyword_free_training_speech(task, args.synthetic)
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        raise SystemExit(f"edgessm mine: {e}") from None
    if not paths:
        raise SystemExit("edgessm mine: the recipe has no keyword-free training recordings (sentences or _unknown_ "
                         "clips); add a source such as shared:sentences_pseudolabeled")  # fmt: skip
    config = DecisionConfig(args.threshold)

    def progress(items: Iterable) -> Iterable:
        if args.no_progress or not sys.stderr.isatty():
            return items
        from tqdm import tqdm

        return tqdm(items, total=len(paths), desc="mining", unit="file", leave=False)

    rows, seconds = mine_recordings(model, paths, config, progress, args.level_dbfs)
    write_mined(args.out, rows)
    hours = seconds / 3600
    words = Counter(r.word for r in rows)
    summary = {
        "model": str(model.path),
        "recipe": args.config,
        "threshold": args.threshold,
        "level_dbfs": args.level_dbfs,
        "recordings": len(paths),
        "hours": round(hours, 3),
        "detections": len(rows),
        "per_hour": round(len(rows) / max(hours, 1e-9), 1),
        "words": dict(words.most_common()),
    }
    from edgessm.atomic import write_text

    write_text(Path(args.out).with_suffix(".json"), json.dumps(summary, indent=2) + "\n")
    top = ", ".join(f"{w} {n}" for w, n in words.most_common(8))
    print(f"{len(rows)} detections in {hours:.2f} h of keyword-free training speech ({len(paths)} recordings, "
          f"{summary['per_hour']}/h at {args.threshold:g}){': ' + top if rows else ''}; wrote {args.out}")  # fmt: skip
    return 0
