"""``edgessm train``: train a shipped recipe or your own config.

edgessm train kws --out runs/kws                       # the shipped kws recipe, CUDA if present
edgessm train kws --out runs/kws --resume              # continue after an interruption
edgessm train kws_v8 --out runs/k --stop-after-min 100  # a long run in sittings: the same command with --resume later
edgessm runs                                           # where every run under ./runs stands
edgessm train kws --out runs/kws-ft --init runs/kws    # fine-tune from trained weights
edgessm train my.toml --out runs/x --set train.steps=2000 --set optim.lr=3e-3
edgessm train kws_v5 --out runs/k --pack kws-pack       # from a data pack (`edgessm pack`), e.g. on a GPU box
edgessm train asr_v3 --init runs/soup --validate       # score weights on the recipe's validation set, no training
torchrun --nproc_per_node 4 -m edgessm train kws --out runs/kws --device cuda   # 4 GPUs (DDP)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("config", help="a shipped recipe (kws, denoise, asr, ...) or a TOML config file")
    ap.add_argument("--config", dest="config_file", metavar="TOML", help="config file (overrides the positional name)")
    ap.add_argument("--out", help="run directory (checkpoints, logs, final weights); not with --validate")
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    ap.add_argument(
        "--init", metavar="WEIGHTS", help="start from these weights (run folder, .pt or .safetensors); fresh optimizer"
    )
    ap.add_argument("--init-partial", action="store_true",
                    help="with --init: take only the tensors whose names and shapes match (e.g. a shipped model's "
                         "front and first blocks under other later blocks); the rest start fresh")  # fmt: skip
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="override a config value, e.g. --set train.steps=500 (repeatable)")  # fmt: skip
    ap.add_argument("--steps", type=int, help="shortcut for --set train.steps=N")
    ap.add_argument("--batch-size", type=int, help="shortcut for --set train.batch_size=N (global batch)")
    ap.add_argument("--pack", metavar="DIR",
                    help="train on a data pack (edgessm pack), not the recipe's sources, noises and RIRs")  # fmt: skip
    ap.add_argument("--stop-after", type=int, metavar="STEP", help="checkpoint and stop at this step (resume later)")
    ap.add_argument("--stop-after-min", type=float, metavar="MIN",
                    help="checkpoint and stop after MIN minutes, the schedule unchanged (resume later with the "
                         "same command and --resume): a long run in sittings (--set train.stop_after_min)")  # fmt: skip
    ap.add_argument("--no-progress", action="store_true", help="no progress bar (logs still go to log.csv)")
    ap.add_argument("--validate", action="store_true",
                    help="train nothing: print the recipe's validation metrics of the --init weights (the same "
                         "utterances and scores as a run's log, e.g. to compare a soup with its sources)")  # fmt: skip


ERROR_FILE = "EDGESSM_TRAIN_ERROR_FILE"  # a launched process writes why it stopped here (_launch reads it)


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except SystemExit as e:
        if isinstance(e.code, str) and os.environ.get(ERROR_FILE):  # one of _launch's processes: say why
            Path(os.environ[ERROR_FILE]).write_text(e.code)
        raise


def _run(args: argparse.Namespace) -> int:
    from .config import load_config
    from .machine import machine_plan, resolve_device
    from .tasks import TASKS
    from .trainer import RunExistsError, Trainer

    overrides = list(args.overrides)
    if args.steps:
        overrides.append(f"train.steps={args.steps}")
    if args.batch_size:
        overrides.append(f"train.batch_size={args.batch_size}")
    if args.stop_after_min is not None:
        overrides.append(f"train.stop_after_min={args.stop_after_min}")
    if args.validate:
        if not args.init or args.out or args.resume:
            raise SystemExit("edgessm train --validate: give the weights with --init (no --out, no --resume)")
    elif not args.out:
        raise SystemExit("edgessm train: --out is required (the run directory)")
    try:
        device = resolve_device(args.device)  # the recipe's [cpu.*] or [cuda.*] tables apply
        cfg = load_config(args.config_file or args.config, overrides, device=device)
        if args.pack:
            cfg = load_config(args.config_file or args.config, overrides + pack_overrides(cfg, args.pack), device)
        if args.validate:
            return _validate(cfg, args)
        launched = "WORLD_SIZE" in os.environ  # one of several processes (torchrun, or started below)
        even = TASKS[cfg.task].static_batches if cfg.task in TASKS else True  # equal shares of a batch
        plan = machine_plan(cfg.train, device, started=int(os.environ["WORLD_SIZE"]) if launched else None, even=even)
        if plan.processes > 1 and not launched:
            return _launch(getattr(args, "argv", None), plan)
        trainer = Trainer(cfg, args.out, device=args.device, resume=args.resume, progress=not args.no_progress,
                          init=args.init, init_partial=args.init_partial,
                          recipe=args.config_file or args.config,
                          resume_hint=resume_command(getattr(args, "argv", None)))  # fmt: skip
    except (FileNotFoundError, ValueError, RunExistsError, RuntimeError) as e:
        raise SystemExit(f"edgessm train: {e}") from None
    try:
        metrics = trainer.fit(stop_after=args.stop_after)
    except (FileNotFoundError, ValueError) as e:  # data problems surface when the datasets are built
        raise SystemExit(f"edgessm train: {e}") from None
    if trainer.rank == 0 and trainer.step >= trainer.total_steps:  # (an interrupted run has said where it stopped)
        shown = ", ".join(f"{k} {v:.4g}" for k, v in metrics.items())
        print(f"done: step {trainer.step} of {trainer.total_steps}; {shown or 'no validation set'}; run in {args.out}")
    return 0


def _validate(cfg, args: argparse.Namespace) -> int:
    """Print the validation metrics of the ``--init`` weights under the recipe ``cfg`` (nothing is written)."""
    import json
    import tempfile

    from .trainer import Trainer

    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(cfg, tmp, device=args.device, progress=False, init=args.init, init_partial=args.init_partial)
        if not trainer.task.has_validation():
            raise SystemExit(f"edgessm train --validate: recipe {args.config} has no validation set")
        metrics = trainer.evaluate()
    print(json.dumps({"weights": str(args.init), **{k: round(v, 5) for k, v in metrics.items()}}))
    return 0


def resume_command(argv: list[str] | None) -> str:
    """The command line that continues the run of ``edgessm ARGV``: the same with ``--resume``, without what
    only a start does (``--init``, ``--init-partial``) or what stopped it (``--stop-after``)."""
    if not argv:
        return ""
    out, skip = ["edgessm"], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in ("--init", "--stop-after"):
            skip = True
            continue
        if a in ("--init-partial", "--resume") or a.startswith(("--init=", "--stop-after=")):
            continue
        out.append(a)
    return shlex.join([*out, "--resume"])


def launch_commands(argv: list[str], plan, port: int) -> list[tuple[list[str], dict[str, str]]]:
    """The command and environment of each of ``plan.processes`` training processes that run ``edgessm ARGV``
    (a ``train`` command line) together on this machine: ranks of one gloo/NCCL group on ``port``, each of
    ``plan.threads`` threads."""
    cmd = [sys.executable, "-m", "edgessm", *argv]
    n = plan.processes
    common = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(n), "LOCAL_WORLD_SIZE": str(n),
              "OMP_NUM_THREADS": str(plan.threads)}  # fmt: skip
    return [(cmd, {**os.environ, **common, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(n)]


def _errors(folder: Path, n: int) -> list[str]:
    """What the launched processes said when they stopped with an error (rank order)."""
    return [f.read_text().strip() for r in range(n) if (f := folder / f"rank{r}.txt").is_file()]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _launch(argv: list[str] | None, plan) -> int:
    """Run this training command as ``plan.processes`` processes (one per core on a CPU) and wait for them.
    A Ctrl-C or SIGTERM is passed to every process: each saves a checkpoint after the same step and stops
    (resume with --resume). If one process fails, the others are stopped. Returns the worst exit status."""
    if argv is None:  # called as a library function, not from the command line: train in this process
        raise SystemExit("edgessm train: this run wants several processes (train.processes); call it from the "
                         "command line, or set train.processes=1")  # fmt: skip
    print(f"edgessm train: {plan.describe()} (train.processes=1 for a single process)", flush=True)
    errors = Path(tempfile.mkdtemp(prefix="edgessm-train-"))
    procs = [subprocess.Popen(cmd, env={**env, ERROR_FILE: str(errors / f"rank{r}.txt")},
                              start_new_session=True)  # signals come from here, once
             for r, (cmd, env) in enumerate(launch_commands(argv, plan, _free_port()))]  # fmt: skip

    def stop_all(signum=signal.SIGTERM, frame=None) -> None:
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)

    old = {s: signal.signal(s, stop_all) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        failed_at = None
        while any(p.poll() is None for p in procs):
            if failed_at is None and any(p.poll() not in (None, 0) for p in procs):
                failed_at = time.monotonic()  # one failed: the others would wait for it forever
                stop_all()
            if failed_at is not None and time.monotonic() - failed_at > 60:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
            time.sleep(0.2)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    said = _errors(errors, len(procs))
    shutil.rmtree(errors, ignore_errors=True)
    status = max(abs(p.returncode) for p in procs)
    if status and said:
        raise SystemExit(said[0])  # the first process's reason (the others stopped because it did)
    return status


def pack_overrides(cfg, folder: str) -> list[str]:
    """Overrides that point a recipe's data sources, noises and measured RIRs at a data pack."""
    import json
    from pathlib import Path

    from edgessm.data.pack import read_pack

    root = Path(folder).expanduser().resolve()
    read_pack(root)  # a clear error now if it is not a pack
    roles = json.loads((root / "pack.json").read_text()).get("roles") if (root / "pack.json").is_file() else None
    if roles:  # a denoise pack: each recipe key reads its own sources of the pack
        out = [f"data.{key}={[f'pack:{root}@' + ','.join(names)]!r}" for key, names in roles.items()]
    else:
        out = [f"data.sources={[f'pack:{root}']!r}"]
    if cfg.data.get("noise"):
        out.append(f"data.noise={[f'pack:{root}']!r}")
    if (root / "mined.csv").is_file():  # the recipe's mined negatives, packed with their recordings
        out.append(f"data.mined_negatives={str(root / 'mined.csv')!r}")
    rirs = cfg.augment.get("rirs")
    if isinstance(rirs, dict) and (rirs.get("measured") or rirs.get("simulated")):  # all of them are in the pack
        out += [f"augment.rirs.measured={str(root / 'rirs')!r}", "augment.rirs.simulated=0"]
    return out
