"""``edgessm train``: train a shipped recipe or your own config.

edgessm train kws --out runs/kws                       # the shipped kws recipe, CUDA if present
edgessm train kws --out runs/kws --resume              # continue after an interruption
edgessm train kws --out runs/kws-ft --init runs/kws    # fine-tune from trained weights
edgessm train my.toml --out runs/x --set train.steps=2000 --set optim.lr=3e-3
edgessm train kws_v5 --out runs/k --pack kws-pack       # from a data pack (`edgessm pack`), e.g. on a GPU box
edgessm train asr_v3 --init runs/soup --validate       # score weights on the recipe's validation set, no training
torchrun --nproc_per_node 4 -m edgessm train kws --out runs/kws --device cuda   # 4 GPUs (DDP)
"""

from __future__ import annotations

import argparse


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
    ap.add_argument("--no-progress", action="store_true", help="no progress bar (logs still go to log.csv)")
    ap.add_argument("--validate", action="store_true",
                    help="train nothing: print the recipe's validation metrics of the --init weights (the same "
                         "utterances and scores as a run's log, e.g. to compare a soup with its sources)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from .config import load_config
    from .trainer import RunExistsError, Trainer

    overrides = list(args.overrides)
    if args.steps:
        overrides.append(f"train.steps={args.steps}")
    if args.batch_size:
        overrides.append(f"train.batch_size={args.batch_size}")
    if args.validate:
        if not args.init or args.out or args.resume:
            raise SystemExit("edgessm train --validate: give the weights with --init (no --out, no --resume)")
    elif not args.out:
        raise SystemExit("edgessm train: --out is required (the run directory)")
    try:
        cfg = load_config(args.config_file or args.config, overrides)
        if args.pack:
            cfg = load_config(args.config_file or args.config, overrides + pack_overrides(cfg, args.pack))
        if args.validate:
            return _validate(cfg, args)
        trainer = Trainer(cfg, args.out, device=args.device, resume=args.resume, progress=not args.no_progress,
                          init=args.init, init_partial=args.init_partial)  # fmt: skip
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
