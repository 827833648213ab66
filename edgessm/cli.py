"""The ``edgessm`` command: one subcommand per user verb, thin wrappers over the library.

Each verb lives in a module with ``add_arguments(parser)`` and ``run(args) -> int``; heavy imports
(torch, onnxruntime) happen inside ``run``, so ``edgessm --help`` and the inference verbs stay light.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from edgessm import __version__

# verb -> (module with add_arguments/run, help)
COMMANDS = {
    "listen": ("edgessm.runtime.listen", "live keyword spotting from the microphone or a file (no torch)"),
    "denoise": ("edgessm.runtime.denoise", "remove noise from a recording or live from the microphone (no torch)"),
    "transcribe": ("edgessm.runtime.transcribe", "speech to text from recordings or live captions (no torch)"),
    "models": ("edgessm.runtime.models", "the shipped models: task, size, compute, graphs; --verify their files"),
    "synth": ("edgessm.data.synth.cli", "make the offline multi-voice synthetic speech corpus (cached, deterministic)"),
    "label": (
        "edgessm.data.label",
        "transcribe untranscribed recordings with the offline teacher (word times, confidence)",
    ),
    "mine": (
        "edgessm.train.mine",
        "where a keyword model fires in keyword-free training speech: hard negatives for a fine-tune",
    ),
    "soup": ("edgessm.train.soup", "average the weights of fine-tunes of one network into one model (a model soup)"),
    "pack": ("edgessm.train.pack", "a recipe's training data compressed into one folder, to train on another machine"),
    "train": ("edgessm.train.cli", "train a model (shipped recipe or your config) on CPU or GPUs"),
    "runs": ("edgessm.train.status", "where training runs stand: steps, examples, speed, scores, how to resume"),
    "lm": ("edgessm.train.lm", "a word n-gram model for transcribe --lm (licensed text, training transcripts)"),
    "export": ("edgessm.deploy.cli", "write and verify the stepwise ONNX graph of a trained model"),
    "eval": ("edgessm.eval.cli", "measure a model on held-out clips and long test streams (no torch)"),
}


def _bench(args: argparse.Namespace) -> int:
    from edgessm.bench import BENCHMARKS, run

    if args.help and not args.name:
        print(
            "usage: edgessm bench [MODEL|GRAPH ...] [options]   inference benchmark of shipped models or graphs\n"
            f"       edgessm bench {{{','.join(BENCHMARKS)}}} [options]\n"
            "--help after a benchmark's name (e.g. `edgessm bench models --help`) lists its options"
        )
        return 0
    if args.name in BENCHMARKS:
        return run(args.name, args.rest)
    # `edgessm bench kws35 denoise ...`: the inference benchmark of shipped models or graphs
    return run("models", [args.name, *args.rest] if args.name else args.rest)


def build_parser() -> argparse.ArgumentParser:
    from edgessm.bench import BENCHMARKS

    ap = argparse.ArgumentParser(prog="edgessm", description="Streaming state-space models for speech on the edge.")
    ap.add_argument("--version", action="version", version=f"edgessm {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    for verb, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(verb, help=help_text)
        module.add_arguments(p)
        p.set_defaults(func=module.run)
    b = sub.add_parser(
        "bench",
        help="benchmarks: edgessm bench [MODEL|GRAPH ...] (inference), edgessm bench fftconv (training)",
        add_help=False,
    )
    b.add_argument("-h", "--help", action="store_true", help="show the benchmarks and how to get their options")
    b.add_argument("name", nargs="?", help=f"a benchmark ({', '.join(sorted(BENCHMARKS))}) or a model/graph")
    b.add_argument("rest", nargs=argparse.REMAINDER, help="more models, or the benchmark's options")
    b.set_defaults(func=_bench)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # a verb may start itself again (train: processes)
    if not getattr(args, "func", None):
        ap.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # the reader went away (`edgessm models kws35 | head -3`): no traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's last flush must not fail again
        return 141  # 128 + SIGPIPE, as a shell reports a process killed by it


if __name__ == "__main__":
    sys.exit(main())
