"""The ``edgessm`` command: one subcommand per user verb, thin wrappers over the library.

Heavy imports (torch, onnxruntime) happen inside the subcommand that needs them, so
``edgessm --help`` and the inference commands stay light.
"""

from __future__ import annotations

import argparse
import sys

from edgessm import __version__


def _bench(args: argparse.Namespace) -> int:
    from edgessm.bench import BENCHMARKS, run

    if args.name in BENCHMARKS:
        return run(args.name, args.rest)
    # `edgessm bench kws35 denoise ...`: the inference benchmark of shipped models or graphs
    return run("models", [args.name, *args.rest] if args.name else args.rest)


def _export(args: argparse.Namespace) -> int:
    from edgessm.deploy.cli import run

    return run(args)


def _synth(args: argparse.Namespace) -> int:
    from edgessm.data.synth.cli import run

    return run(args)


def _listen(args: argparse.Namespace) -> int:
    from edgessm.runtime.listen import run

    return run(args)


def _train(args: argparse.Namespace) -> int:
    from edgessm.train.cli import run

    return run(args)


def build_parser() -> argparse.ArgumentParser:
    from edgessm.bench import BENCHMARKS
    from edgessm.data.synth.cli import add_arguments as synth_arguments
    from edgessm.deploy.cli import add_arguments as export_arguments
    from edgessm.runtime.listen import add_arguments as listen_arguments
    from edgessm.train.cli import add_arguments as train_arguments

    ap = argparse.ArgumentParser(prog="edgessm", description="Streaming state-space models for speech on the edge.")
    ap.add_argument("--version", action="version", version=f"edgessm {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    b = sub.add_parser(
        "bench",
        help="benchmarks: edgessm bench [MODEL|GRAPH ...] (inference), edgessm bench fftconv (training)",
        add_help=False,
    )
    b.add_argument("name", nargs="?", help=f"a benchmark ({', '.join(sorted(BENCHMARKS))}) or a model/graph")
    b.add_argument("rest", nargs=argparse.REMAINDER, help="more models, or the benchmark's options")
    b.set_defaults(func=_bench)
    li = sub.add_parser("listen", help="live keyword spotting from the microphone or a file (no torch)")
    listen_arguments(li)
    li.set_defaults(func=_listen)
    y = sub.add_parser("synth", help="make the offline multi-voice synthetic speech corpus (cached, deterministic)")
    synth_arguments(y)
    y.set_defaults(func=_synth)
    t = sub.add_parser("train", help="train a model (shipped recipe or your config) on CPU or GPUs")
    train_arguments(t)
    t.set_defaults(func=_train)
    e = sub.add_parser("export", help="write and verify the stepwise ONNX graph of a trained model")
    export_arguments(e)
    e.set_defaults(func=_export)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if not getattr(args, "func", None):
        ap.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
