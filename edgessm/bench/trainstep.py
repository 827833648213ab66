"""Training-step time of a recipe and its variants, measured side by side in one run.

    python -m edgessm.bench trainstep denoise
    python -m edgessm.bench trainstep denoise --vs "model.channels=[16,32,64,96,128,256]"
    python -m edgessm.bench trainstep asr --vs "model.full_init=s4d" --batch 8 --seconds 4
    python -m edgessm.bench trainstep kws_v7 --device cuda --batch 256 --vs train.compile=reduce-overhead
    python -m edgessm.bench trainstep kws_v7 --device cuda --batch 256 --vs train.front_plan=chunked
    python -m edgessm.bench trainstep kws_v7 --device cuda --batch 256 --vs train.cuda_graphs=true

Each row builds the recipe's network (with the row's ``--set``-style overrides), feeds random audio of
the recipe's batch and segment length and times forward + backward + AdamW step. Rows are timed in
turns (one step of each, ``--repeats`` times) so that a busy machine slows all of them alike; the
table gives the median and the ratio to the first row, with parameters and the streaming MFLOP/s of
each network. Data loading and the task's own loss are left out: the loss is the mean square of the
output, so the numbers are the network's cost.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch

from edgessm.ssm.blocks import set_ssm_plan
from edgessm.ssm.filterbank import set_front_plan
from edgessm.train.allocator import keep_freed_memory
from edgessm.train.config import compile_mode, load_config
from edgessm.train.graphed import StepGraph
from edgessm.train.tasks import build_task
from edgessm.train.trainer import freeze, graph_refusal

# the input length of a training example, per task: its config field, or a default in samples
LENGTH_FIELD = {"denoise": ("segment_samples", 32768), "kws": ("clip_samples", 16000), "asr": (None, 64000)}


def example_samples(cfg, net: torch.nn.Module, seconds: float | None) -> int:
    """Samples of one training example of recipe ``cfg`` (``seconds`` if given), a multiple of ``net``'s stride."""
    field, default = LENGTH_FIELD.get(cfg.task, (None, 32000))
    samples = round(seconds * 16000) if seconds else int(cfg.data.get(field, default) if field else default)
    stride = int(getattr(net, "stride", 0) or getattr(net, "chunk_multiple", 1))
    return max(stride, samples - samples % stride)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m edgessm.bench trainstep", description=__doc__.split("\n\n")[0])
    ap.add_argument("recipe", help="a shipped recipe (kws, kws_es, denoise, denoise_hourglass, asr) or a TOML config")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every row")
    ap.add_argument("--vs", action="append", default=[], metavar="KEY=VALUE[;KEY=VALUE]",
                    help="another row: the recipe with these overrides (repeatable)")  # fmt: skip
    ap.add_argument("--batch", type=int, help="examples per step (default: the recipe's)")
    ap.add_argument("--seconds", type=float, help="audio per example (default: the recipe's segment length)")
    ap.add_argument("--page-faults", action="store_true",
                    help="leave glibc's default malloc thresholds (freed activations go back to the kernel and "
                    "fault in again every step), to measure what edgessm.train.allocator saves")  # fmt: skip
    ap.add_argument("--repeats", type=int, default=5, help="timed steps per row (after one warm-up step)")
    ap.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="where to train (cuda: timed with synchronisation; a row's train.amp=bf16 runs it under "
                         "bf16 autocast)")  # fmt: skip
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="time steps by the wall clock (default) or by this process's CPU time: steady on a "
                         "machine that is busy with other work, where the wall clock is not (CPU only)")  # fmt: skip
    ap.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    return ap


def _row(recipe: str, overrides: list[str], label: str, batch: int | None, seconds: float | None,
         device: torch.device) -> dict[str, Any]:  # fmt: skip
    try:
        cfg = load_config(recipe, overrides, device=device.type)  # the recipe's [cpu.*] / [cuda.*] tables
        task = build_task(cfg)
        net = task.build_model()
        freeze(net, list(cfg.train.freeze))  # a row with train.freeze=[front] times a fine-tune's step
        set_front_plan(net, cfg.train.front_plan)  # a row with train.front_plan=chunked times the chunked front
        set_ssm_plan(net, cfg.train.ssm_plan)  # a row with train.ssm_plan=rule times the paper's contraction rule
    except (ValueError, TypeError, KeyError, FileNotFoundError) as e:
        raise SystemExit(f"trainstep: {label}: {e}") from None
    samples = example_samples(cfg, net, seconds)
    counts = net.counts()
    net = net.to(device)
    mode = compile_mode(cfg.train.compile)
    if mode:  # a row with train.compile=MODE times the compiled network (compilation in the warm-up step)
        net = torch.compile(net, mode=mode)
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.train.amp) if device.type == "cuda" else None
    x = 0.05 * torch.randn(batch or cfg.train.batch_size, 1, samples, generator=torch.Generator().manual_seed(0))
    graphed = bool(cfg.train.cuda_graphs)
    if graphed and (why := graph_refusal(cfg, device, 1, net, task)):
        raise SystemExit(f"trainstep: {label}: train.cuda_graphs: {why}")
    # a row with train.cuda_graphs=true replays the step recorded as one CUDA graph (train/graphed.py)
    lr = torch.tensor(1e-4, device=device) if graphed else 1e-4
    row = {
        "label": label,
        "net": net,
        "opt": torch.optim.AdamW(net.parameters(), lr=lr, capturable=graphed),
        "x": x.to(device),
        "amp": amp,
        "compiled": mode is not None or graphed,
        "params": int(counts.params),
        "mflops": counts.flops * 16000 / 1e6,
        "times": [],
    }
    if graphed:
        row["graph"] = StepGraph(lambda batch: _update(row, batch["x"]), warmup=3)
    return row


def _update(row: dict[str, Any], x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Forward, the mean-square loss, backward and AdamW: one training step of the row's network on ``x``."""
    amp = row["amp"] is not None  # a recorded step keeps no cached casts of the weights (CUDA graphs notes)
    with torch.autocast("cuda", dtype=row["amp"], enabled=amp, cache_enabled="graph" not in row):
        y = row["net"](x)
    loss = y.float().pow(2).mean()
    row["opt"].zero_grad(set_to_none=True)
    loss.backward()
    row["opt"].step()
    return {"loss": loss.detach()}


def _step(row: dict[str, Any], clock=time.perf_counter) -> float:
    cuda = row["x"].is_cuda
    if cuda:
        torch.cuda.synchronize()
    t0 = clock()
    if "graph" in row:
        row["graph"]({"x": row["x"]})
    else:
        _update(row, row["x"])
    if cuda:
        torch.cuda.synchronize()
    return clock() - t0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.repeats < 1:
        raise SystemExit("trainstep: --repeats must be at least 1")
    if args.clock == "cpu" and args.device != "cpu":
        raise SystemExit("trainstep: --clock cpu times this process's CPU work; on CUDA use the wall clock")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("trainstep: no CUDA device is visible on this machine (--device cuda)")
        return 1
    device = torch.device(args.device)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    if not args.page_faults:
        keep_freed_memory()  # as `edgessm train` does
    specs = [("recipe", list(args.set))]
    specs += [(vs, [*args.set, *(o.strip() for o in vs.split(";") if o.strip())]) for vs in args.vs]
    rows = [_row(args.recipe, overrides, label, args.batch, args.seconds, device) for label, overrides in specs]
    for row in rows:  # warm-up: allocations, plan caches (compiled rows: compilation, CUDA-graph recording)
        row["net"].train()
        for _ in range(4 if row["compiled"] else 1):
            _step(row)
    for _ in range(args.repeats):
        for row in rows:
            row["times"].append(_step(row, clock))
    base = statistics.median(rows[0]["times"])
    x = rows[0]["x"]
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} thread(s)"
    print(f"# {args.recipe}: batch {x.shape[0]} x {x.shape[-1] / 16000:.2f} s, {where}, "
          f"median of {args.repeats} steps per row, timed in turns"
          + (" in CPU time" if args.clock == "cpu" else ""))  # fmt: skip
    width = max(12, *(len(r["label"]) for r in rows))
    print(f"{'row':<{width}} {'params':>10} {'MFLOP/s':>9} {'step s':>8} {'ratio':>6}")
    out = []
    for row in rows:
        med = statistics.median(row["times"])
        print(f"{row['label']:<{width}} {row['params']:>10,} {row['mflops']:>9.1f} {med:>8.3f} {med / base:>6.2f}")
        out.append({k: row[k] for k in ("label", "params", "mflops", "times")} | {"median_s": med, "ratio": med / base})
    if args.json:
        from edgessm.atomic import write_text

        write_text(args.json, json.dumps({"recipe": args.recipe, "shape": list(x.shape), "rows": out}, indent=1))
    return 0
