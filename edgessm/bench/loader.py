"""Data-loader throughput of a recipe: does the data keep up with the step?

    python -m edgessm.bench loader kws_v7 --pack PACK --workers 1,2 --batch 64
    python -m edgessm.bench loader kws_v7 --pack PACK --workers 4,8,14 --batch 256 --profile   # a GPU box

First the training set is built as ``edgessm train`` builds it (``--pack`` as there), then one core makes
``--items`` examples in this process (collated as batches): the examples/s one worker could give at
best, and with ``--profile`` where that time goes. Then, for each ``--workers`` count, the trainer's own
loader (:meth:`Trainer.loader_for`: the same sampler, collate, worker set-up and prefetch) delivers
``--batches`` batches, timed from the first batch on (the start-up is its own column). ``efficiency`` is
the loader's examples/s over ``workers x`` the single-core rate: well below 1 means the loader, not the
example making, is the limit (the main process, memory copies, too few cores). Compare the ``loader
examples/s`` with ``batch / step s`` of ``bench trainstep`` for the same recipe and batch.

``--device-augment`` measures ``train.device_augment`` too: the one-core rate of examples that stop at the
augmentation's plan (the loader's share), the batched tail's time per batch on ``--device`` (first use and
an echo), and the loader rows with planned examples.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import time

import torch

from edgessm.train.config import load_config
from edgessm.train.machine import resolve_device
from edgessm.train.sampler import StepSampler
from edgessm.train.tasks import build_task


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m edgessm.bench loader", description=__doc__.split("\n\n")[0])
    ap.add_argument("recipe", help="a shipped recipe or a TOML config")
    ap.add_argument("--pack", metavar="DIR", help="train on a data pack (edgessm pack), as `edgessm train --pack`")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="recipe override")
    ap.add_argument("--workers", default="1,2", help="comma-separated loader worker counts (default 1,2)")
    ap.add_argument("--batch", type=int, help="examples per batch (default: the recipe's)")
    ap.add_argument("--batches", type=int, default=10, help="timed batches per worker count (after the first)")
    ap.add_argument("--items", type=int, default=200, help="examples made in this process for the one-core rate")
    ap.add_argument("--profile", action="store_true", help="where the one-core time goes (cProfile, top 15)")
    ap.add_argument(
        "--device-augment",
        action="store_true",
        help="also measure train.device_augment: planned examples and the batched tail on --device",
    )
    ap.add_argument("--device", default="auto", help="where --device-augment mixes: auto (CUDA if present), cpu, cuda")
    return ap


def _device_stage(mixer, batch: dict, device: torch.device, repeats: int = 5) -> tuple[float, float]:
    """Seconds per batch of the device tail: first use and an echo (best of ``repeats``, device synced)."""
    batch = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
    generator = torch.Generator(device=device).manual_seed(0)
    times = []
    for echo in (False, True):
        best = float("inf")
        for _ in range(repeats + 1):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            mixer(batch, generator, echo=echo)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            best = min(best, time.perf_counter() - t0)
        times.append(best)
    return times[0], times[1]


def _one_core(task, dataset, batch: int, items: int, profile: bool) -> tuple[float, str]:
    """Examples/s of this process making and collating examples, and the profile's top lines if asked."""
    for i in range(min(8, len(dataset))):  # first touches: caches, lazy tables
        dataset[(i, i)]
    prof = cProfile.Profile() if profile else None
    t0 = time.perf_counter()
    if prof:
        prof.enable()
    done = 0
    while done < items:
        n = min(batch, items - done)
        task.collate([dataset[((done + k) * 7919 % len(dataset), done + k)] for k in range(n)])
        done += n
    if prof:
        prof.disable()
    rate = items / (time.perf_counter() - t0)
    text = ""
    if prof:
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(15)
        text = out.getvalue()
    return rate, text


def _through_loader(loader_for, dataset, batch: int, batches: int, workers: int) -> dict[str, float]:
    sampler = StepSampler(len(dataset), batch, batches + 1, seed=0)
    t0 = time.perf_counter()
    it = iter(loader_for(dataset, sampler, workers))
    next(it)
    t1 = time.perf_counter()
    n = sum(1 for _ in it)
    t2 = time.perf_counter()
    return {"workers": workers, "startup_s": t1 - t0, "examples_per_s": n * batch / max(1e-9, t2 - t1)}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from edgessm.train.trainer import loader_for

    try:
        workers = [int(w) for w in args.workers.split(",") if w.strip()]
    except ValueError:
        raise SystemExit(f"loader: --workers takes comma-separated counts, not {args.workers!r}") from None
    if not workers or min(workers) < 0:
        raise SystemExit("loader: --workers needs counts of 0 or more")
    overrides = list(args.set)
    if args.pack:
        from edgessm.train.cli import pack_overrides

        overrides += pack_overrides(load_config(args.recipe, overrides), args.pack)
    try:
        cfg = load_config(args.recipe, overrides, device=resolve_device(args.device))  # its [cpu.*] or [cuda.*]
    except (ValueError, TypeError, KeyError, FileNotFoundError) as e:
        raise SystemExit(f"loader: {e}") from None
    batch = args.batch or cfg.train.batch_size
    t0 = time.perf_counter()
    task = build_task(cfg)
    dataset = task.train_set()
    built = time.perf_counter() - t0
    print(f"# {args.recipe}: {len(dataset):,} training examples, built in {built:.1f} s; batch {batch}; "
          f"{os.cpu_count()} CPUs, torch {torch.__version__}")  # fmt: skip
    rate, profile = _one_core(task, dataset, batch, args.items, args.profile)
    print(f"one core, in this process: {rate:,.0f} examples/s ({1e3 / rate:.2f} ms each)")
    if profile:
        print(profile)
    if args.device_augment:
        device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                              "cpu" if args.device == "auto" else args.device)  # fmt: skip
        mixer = task.device_mixer(device)
        if mixer is None:
            raise SystemExit(f"loader: the {cfg.task} recipe has no augmentation to run on the device")
        full = rate
        rate, profile = _one_core(task, dataset, batch, args.items, args.profile)
        print(f"one core, planned examples (train.device_augment): {rate:,.0f} examples/s ({1e3 / rate:.2f} ms "
              f"each, {rate / full:.2f}x)")  # fmt: skip
        if profile:
            print(profile)
        sample = task.collate([dataset[(k * 7919 % len(dataset), k)] for k in range(batch)])
        first, again = _device_stage(mixer, sample, device)
        print(f"device tail on {device}, batch {batch}: {1e3 * first:.2f} ms ({batch / first:,.0f} examples/s), "
              f"echo {1e3 * again:.2f} ms")  # fmt: skip
    print(f"{'workers':>7} {'start s':>8} {'loader examples/s':>18} {'efficiency':>10}")
    for w in workers:
        row = _through_loader(lambda d, s, n: loader_for(task, d, s, n), dataset, batch, args.batches, w)
        ideal = rate * max(1, w)
        print(f"{w:>7} {row['startup_s']:>8.1f} {row['examples_per_s']:>18,.0f} {row['examples_per_s'] / ideal:>10.2f}")
    return 0
