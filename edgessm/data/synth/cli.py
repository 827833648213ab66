"""Command line of the synthetic corpus generator: ``edgessm synth ...`` / ``python -m edgessm.data.synth``."""

from __future__ import annotations

import argparse
import sys

from .config import (
    DEFAULT_BLENDS,
    DEFAULT_ENGINES,
    DEFAULT_VARIANTS,
    DEFAULT_WEIGHTS,
    ENGINE_NAMES,
    KINDS,
    PRESETS,
    PerVoice,
    default_dir,
)

_EXAMPLES = """
examples:
  %(prog)s --list-voices
  %(prog)s --preset tiny --name tiny
  %(prog)s --engines espeak-ng flite --kinds keywords unknown --out /data/synth-kws
  %(prog)s --engine kokoro --words marvin,sheila,visual --blends 500 --teacher-gate --out /data/kokoro-words
"""


def _csv_or_list(values: list[str]) -> list[str]:
    return [v for item in values for v in item.split(",") if v]


def _weights(values: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in _csv_or_list(values):
        engine, _, n = item.partition("=")
        if engine not in ENGINE_NAMES or not n.isdigit():
            raise argparse.ArgumentTypeError(f"--weights takes ENGINE=N with ENGINE in {list(ENGINE_NAMES)}: {item!r}")
        out[engine] = int(n)
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the generator's options to ``parser`` (used by ``edgessm synth`` and ``python -m``)."""
    parser.epilog = _EXAMPLES
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--out", help="corpus folder (default: ~/.cache/edgessm/synth/NAME)")
    where.add_argument("--name", default="default", help="corpus name under ~/.cache/edgessm/synth (default: default)")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="standard", help="amounts per voice")
    parser.add_argument("--keyword-reps", type=int, help="renditions of each keyword per voice (overrides the preset)")
    parser.add_argument("--unknown", type=int, help="unknown-class words per voice (overrides the preset)")
    parser.add_argument("--sentences", type=int, help="sentences per voice (overrides the preset)")
    parser.add_argument("--sentence-pool", type=int, default=1000, help="distinct generated sentences (default: 1000)")
    parser.add_argument("--text-sources", metavar="NAMES",
                        help="licensed text whose sentences join the generated ones, e.g. wordnet,bible,gcide "
                             "(Debian packages that make installs; edgessm.data.text_sources)")  # fmt: skip
    parser.add_argument("--kinds", nargs="+", metavar="KIND",
                        help=f"any of {', '.join(KINDS)} (default: all; only keywords with --words)")  # fmt: skip
    parser.add_argument(
        "--engines", nargs="+", metavar="ENGINE",
        help=f"any of {', '.join(ENGINE_NAMES)} (default: {' '.join(DEFAULT_ENGINES)}; kokoro when named)",
    )  # fmt: skip
    parser.add_argument("--words", nargs="+", metavar="WORD",
                        help="say these words (comma or space separated) instead of the 35 keywords")  # fmt: skip
    parser.add_argument("--blends", type=int, default=DEFAULT_BLENDS,
                        help=f"Kokoro: voice blends (convex mixes of 2-3 base voices; default {DEFAULT_BLENDS}), "
                        "each a speaker of its own besides the base voices")  # fmt: skip
    parser.add_argument("--voice-dir", help="Kokoro: folder of base style vectors (*.npy; default: the shared "
                        "data's kokoro_voices or $EDGESSM_KOKORO_VOICES)")  # fmt: skip
    parser.add_argument("--teacher-gate", action="store_true",
                        help="score every word clip with the offline teacher (Whisper tiny.en) and leave out "
                        "those it cannot hear as their word")  # fmt: skip
    parser.add_argument("--gate-threshold", type=float, default=0.1,
                        help="teacher score below which a word clip is left out (default 0.1)")  # fmt: skip
    parser.add_argument(
        "--espeak-variants", nargs="+", metavar="VARIANT",
        help=f"espeak-ng variants per accent ('all' for every installed one; default: {' '.join(DEFAULT_VARIANTS)})",
    )  # fmt: skip
    parser.add_argument("--voices", nargs="+", metavar="PATTERN", help="keep voices whose id matches, e.g. 'flite:*'")
    parser.add_argument(
        "--weights", nargs="+", default=[], metavar="ENGINE=N",
        help="per-engine multiplier of the amounts (default: "
        + " ".join(f"{k}={v}" for k, v in DEFAULT_WEIGHTS.items()) + ")",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="seed of everything (default: 0)")
    parser.add_argument("--jobs", "-j", type=int, default=2, help="worker processes (default: 2)")
    parser.add_argument("--prune", action="store_true", help="delete corpus wav files this plan does not contain")
    parser.add_argument("--list-voices", action="store_true", help="only list the engines and voices found")
    parser.add_argument(
        "--report", action="store_true",
        help="only print the data report (every corpus in the cache, or --out; real vs synthetic per keyword)",
    )  # fmt: skip
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--time-limit", type=float, metavar="MIN",
        help="start no new batch after MIN minutes and write the manifest of what is rendered so far "
        "(a usable partial corpus; the same command later goes on where it stopped)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Run the generator with parsed ``args``; 0 on success, 1 if nothing could be made or clips failed."""
    from .corpus import describe_inventory, generate_corpus
    from .engines import discover, make_engines

    engines = _csv_or_list(args.engines) if args.engines else None
    variants = _csv_or_list(args.espeak_variants) if args.espeak_variants else None
    if args.report:
        from pathlib import Path

        from .report import corpus_report

        print(corpus_report([Path(args.out).expanduser()] if args.out else None), end="")
        return 0
    try:
        weights = _weights(args.weights)
        if args.list_voices:
            statuses = discover(
                make_engines(engines, variants, blends=args.blends, voice_dir=args.voice_dir, seed=args.seed)
            )
            for line in describe_inventory(statuses):
                print(line)
            for st in statuses.values():
                if st.voices:
                    print(f"{st.name}: " + " ".join(v.id.split(":", 1)[1] for v in st.voices))
            return 0 if any(st.available for st in statuses.values()) else 1
        base = PRESETS[args.preset]
        amounts = PerVoice(
            keyword_reps=base.keyword_reps if args.keyword_reps is None else args.keyword_reps,
            unknown=base.unknown if args.unknown is None else args.unknown,
            sentences=base.sentences if args.sentences is None else args.sentences,
        )
        words = _csv_or_list(args.words) if args.words else None
        kinds = _csv_or_list(args.kinds) if args.kinds else (["keywords"] if words else list(KINDS))
        if args.blends < 0:
            raise ValueError("--blends must be >= 0")
        if args.time_limit is not None and args.time_limit < 0:
            raise ValueError("--time-limit must be >= 0 minutes")
        report = generate_corpus(
            args.out if args.out else default_dir(args.name),
            kinds=kinds,
            per_voice=amounts,
            seed=args.seed,
            engines=engines,
            jobs=args.jobs,
            progress=not args.quiet,
            n_sentences=args.sentence_pool,
            weights=weights,
            espeak_variants=variants,
            voices=args.voices,
            prune=args.prune,
            blends=args.blends,
            voice_dir=args.voice_dir,
            teacher_gate=args.teacher_gate,
            gate_threshold=args.gate_threshold,
            text_sources=_csv_or_list([args.text_sources]) if args.text_sources else (),
            time_limit_min=args.time_limit,
            **({"keywords": words} if words else {}),
        )
    except (ValueError, argparse.ArgumentTypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0 if report.clips and not report.failed else 1  # a partial corpus (time limit) is a success


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m edgessm.data.synth",
        description="Generate a deterministic synthetic speech corpus with every offline TTS voice installed.",
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))
