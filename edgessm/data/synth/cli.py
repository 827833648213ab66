"""Command line of the synthetic corpus generator: ``edgessm synth ...`` / ``python -m edgessm.data.synth``."""

from __future__ import annotations

import argparse
import sys

from .config import DEFAULT_VARIANTS, DEFAULT_WEIGHTS, ENGINE_NAMES, KINDS, PRESETS, PerVoice, default_dir

_EXAMPLES = """
examples:
  %(prog)s --list-voices
  %(prog)s --preset tiny --name tiny
  %(prog)s --engines espeak-ng flite --kinds keywords unknown --out /data/synth-kws
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
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), metavar="KIND", help=f"any of {', '.join(KINDS)}")
    parser.add_argument("--engines", nargs="+", metavar="ENGINE", help=f"default: all of {', '.join(ENGINE_NAMES)}")
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
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    """Run the generator with parsed ``args``; 0 on success, 1 if nothing could be made or clips failed."""
    from .corpus import describe_inventory, generate_corpus
    from .engines import discover, make_engines

    engines = _csv_or_list(args.engines) if args.engines else None
    variants = _csv_or_list(args.espeak_variants) if args.espeak_variants else None
    try:
        weights = _weights(args.weights)
        if args.list_voices:
            statuses = discover(make_engines(engines, variants))
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
        report = generate_corpus(
            args.out if args.out else default_dir(args.name),
            kinds=_csv_or_list(args.kinds),
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
        )
    except (ValueError, argparse.ArgumentTypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0 if report.clips and not report.failed else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m edgessm.data.synth",
        description="Generate a deterministic synthetic speech corpus with every offline TTS voice installed.",
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))
