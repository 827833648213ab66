"""Roofline estimate of a recipe's training step: operations, FLOPs and bytes per block, eager and fused.

    python -m edgessm.bench roofline kws_v7 --batch 256
    python -m edgessm.bench roofline asr_v4_gpu --batch 64 --seconds 4 --json roofline.json
    python -m edgessm.bench roofline kws_v7 --batch 256 --set train.front_plan=chunked
    python -m edgessm.bench roofline kws_v7 --batch 256 --fused-front

One training step (forward, backward, AdamW) of the recipe's network runs on PyTorch's ``meta`` device (shapes
only, no arithmetic: a batch of 256 costs nothing to trace) under a dispatch recorder: every ATen operation is
counted with the block it belongs to, its FLOPs (matrix products by PyTorch's own flop formulas, FFTs as
5 n log2 n per complex transform, everything else one per output element) and the bytes it reads and writes
(its tensor arguments and results; views are free). Off the CPU the networks take their device code paths,
so the trace is the GPU's step; a step that reads a device value on the host (a sync, which no CUDA graph
can hold) fails on ``meta`` and is reported as such.

Two costs on a target GPU (default: an H100 SXM in float32 without TF32; ``--bandwidth``, ``--vector-tflops``,
``--tensor-tflops``):

* **eager**: each operation is a kernel that reads its inputs from and writes its outputs to device memory;
  the step takes the larger of the device time (per kernel max(bytes / bandwidth, FLOPs / peak) plus a
  fixed ``--kernel-us``) and the host's dispatch time (``--host-us`` per operation; 31 µs is what the
  measured H100 step of kws_v7 at batch 256 gives: 31.5 ms for 1,021 kernels, the device busy 13.9 ms).
* **fused**: each block is three kernels (forward, input gradient, parameter gradient) that move only the
  block's input, output and parameters (forward: input + output + parameters; backward: the input again,
  the output's gradient, the input's gradient, the parameters and their gradients), and AdamW is one
  multi-tensor kernel (parameters, gradients and two moments read, three written). A lower bound for
  hand-fused kernels whose intermediates stay on chip, with the host out of the way (a CUDA graph).

``--fused-front`` traces the chunked front as the GPU runs it, through its fused Triton kernel
(:func:`edgessm.ssm.fused.row_energy`): one operator forward and one backward (its two kernels), FLOPs counted
on the kernels' padded tiles, bytes as its arguments and results (the backward's second kernel reads the
rows again: ~20% more than counted).

The counts are measured; the times are a model (bandwidth and peak rates, no caches, no overlap), for
planning fused kernels and for saying what a step could cost where no GPU is at hand.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry
from torch.utils.module_tracker import ModuleTracker

from edgessm.ssm.filterbank import FilterbankFront, set_front_plan
from edgessm.train.config import load_config
from edgessm.train.tasks import build_task

from .trainstep import example_samples

# H100 SXM5: HBM3 bandwidth, dense FP32 on the CUDA cores; float32 matrix products run there too unless TF32 is
# allowed (torch.backends.cuda.matmul.allow_tf32, off by default and in the trainer): then ~494 TFLOP/s
H100 = {"bandwidth_tbs": 3.35, "vector_tflops": 67.0, "tensor_tflops": 67.0}
TENSOR_OPS = {"mm", "addmm", "bmm", "baddbmm", "convolution", "_convolution", "convolution_backward"}
FFT_OPS = {"_fft_r2c": 2.5, "_fft_c2r": 2.5, "_fft_c2c": 5.0}  # FLOPs per element and log2 of the length
SYNC_OPS = {"_local_scalar_dense", "item", "is_nonzero", "equal"}  # the host waits for the device
FUSED_FRONT = {"front_row_energy": 1, "front_row_energy_backward": 6}  # the Triton front's products per operator
GLUE = "(loss and glue)"
OPTIMIZER = "(optimizer)"


@dataclass
class Cost:
    """What one block (or the glue around blocks) costs in one training step."""

    ops: int = 0
    tensor_ops: int = 0
    flops: float = 0.0
    tensor_flops: float = 0.0
    bytes: float = 0.0
    device_s: float = 0.0  # eager: the sum over its kernels of max(bytes / bandwidth, FLOPs / peak)
    fused_bytes: float = 0.0
    fused_kernels: int = 0
    syncs: int = 0


def group_of(path: str) -> str:
    """A module path's block: up to its first numbered part (``backbone.layers.3.ssm`` -> ``backbone.layers.3``),
    else its first part (``head.1`` -> ``head.1``, ``hidden`` -> ``hidden``)."""
    parts = path.split(".")
    for i, p in enumerate(parts):
        if p.isdigit():
            return ".".join(parts[: i + 1])
    return parts[0]


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def op_flops(func: Any, args: tuple, kwargs: dict, out: Any) -> tuple[float, bool]:
    """FLOPs of one ATen call and whether it runs on tensor cores (matrix products, convolutions)."""
    packet = func.overloadpacket
    name = packet.__name__
    if packet in flop_registry:
        return float(flop_registry[packet](*args, **kwargs, out_val=out)), name in TENSOR_OPS
    if name in FUSED_FRONT:  # edgessm::front_row_energy(x (R, S), h (R, F, K), ...): products on padded tiles
        from edgessm.ssm.fused.front import tile_flops

        x, h = args[0], args[1]
        return FUSED_FRONT[name] * tile_flops(x.shape[0], h.shape[1], x.shape[1], h.shape[2]), True
    if name in FFT_OPS:
        x = args[0]
        dims = [d % x.dim() for d in args[1]]
        if name == "_fft_c2r":  # the length is the real output's
            n, elems = math.prod(out.shape[d] for d in dims), out.numel()
        else:
            n, elems = math.prod(x.shape[d] for d in dims), x.numel()
        return FFT_OPS[name] * elems * math.log2(max(2, n)), False
    outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
    return float(sum(t.numel() * (2 if t.is_complex() else 1) for t in outs)), False


class RecentModuleTracker(ModuleTracker):
    """PyTorch's :class:`ModuleTracker`, remembering when each module was last entered. In the backward pass it
    can leave behind a module it did not see exit (one that returns its input, such as a dropout of rate 0:
    the exit hook fires before the entry hook), so "the deepest module listed" can name a finished one. The
    one running is the most recently entered of the innermost modules listed (a module and its parent enter
    together in the backward pass, when their shared output's gradient arrives)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered: dict[str, int] = {}
        self._clock = itertools.count(1)

    def _get_append_fn(self, name, is_bw):
        append = super()._get_append_fn(name, is_bw)

        def fn(*args):
            append(*args)
            self.entered[name] = next(self._clock)

        return fn

    def running(self) -> str:
        """The module running now (its qualified name, ``Global`` outside every module)."""
        listed = self.parents
        inner = [n for n in listed if not any(o.startswith(n + ".") for o in listed)]
        return max(inner, key=lambda n: self.entered.get(n, 0))


class StepRecorder(TorchDispatchMode):
    """Counts every ATen call of a training step by block and phase (forward, backward, optimizer)."""

    def __init__(self, tracker: RecentModuleTracker, root: str, target: dict[str, float]) -> None:
        super().__init__()
        self.tracker, self.root, self.target = tracker, root, target
        self.costs: dict[str, Cost] = defaultdict(Cost)
        self.phase_ops: dict[str, int] = defaultdict(int)
        self.optimizer = False
        self.by_op: dict[str, int] = defaultdict(int)

    def _group(self) -> str:
        if self.optimizer:
            return OPTIMIZER
        running = self.tracker.running()
        if not running.startswith(self.root + "."):
            return GLUE
        return group_of(running[len(self.root) + 1 :])

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if func.is_view or name in ("detach", "lift_fresh", "alias"):
            return out  # a view of memory, no kernel
        cost = self.costs[self._group()]
        if name in SYNC_OPS:  # on a host tensor (the optimizer's step counts) it costs the device nothing
            cost.syncs += int(any(t.device.type != "cpu" for t in tree_leaves(args) if isinstance(t, torch.Tensor)))
            return out
        seen: set[int] = set()
        moved = 0
        for t in tree_leaves((args, kwargs, out)):
            if isinstance(t, torch.Tensor) and id(t) not in seen:
                seen.add(id(t))
                moved += _nbytes(t)
        flops, tensor = op_flops(func, args, kwargs, out)
        peak = self.target["tensor_tflops" if tensor else "vector_tflops"] * 1e12
        cost.ops += 1
        cost.tensor_ops += int(tensor)
        cost.flops += flops
        cost.tensor_flops += flops if tensor else 0.0
        cost.bytes += moved
        cost.device_s += max(moved / (self.target["bandwidth_tbs"] * 1e12), flops / peak)
        phase = "optimizer" if self.optimizer else ("backward" if self.tracker.is_bw else "forward")
        self.phase_ops[phase] += 1
        self.by_op[name] += 1
        return out


def _tensor_bytes(obj: Any) -> int:
    return sum(_nbytes(t) for t in tree_leaves(obj) if isinstance(t, torch.Tensor))


def trace_step(net: torch.nn.Module, x: torch.Tensor, target: dict[str, float]) -> StepRecorder:
    """Run one forward + backward + AdamW step of ``net`` on ``x`` under a :class:`StepRecorder`; the fused
    bytes of each block come from its boundary tensors (forward hooks) and its parameters."""
    groups = {group_of(n) for n, _ in net.named_modules() if n}
    modules = dict(net.named_modules())
    io: dict[str, int] = defaultdict(int)  # a block's input + output bytes, summed over its calls

    def hook(name: str):
        def record(module, inputs, output) -> None:
            io[name] += _tensor_bytes(inputs) + _tensor_bytes(output)

        return record

    opt = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=1e-4, foreach=True)
    net.train()
    net(x).float().pow(2).mean().backward()  # a first step outside the trace: the optimizer's state, plan caches
    opt.step()
    opt.zero_grad(set_to_none=True)
    handles = [modules[g].register_forward_hook(hook(g)) for g in groups if g in modules]
    try:
        with RecentModuleTracker() as tracker:
            recorder = StepRecorder(tracker, type(net).__name__, target)
            with recorder:
                y = net(x)
                loss = y.float().pow(2).mean()
                loss.backward()
                recorder.optimizer = True
                opt.step()
    finally:
        for h in handles:
            h.remove()
    params: dict[str, int] = defaultdict(int)
    for name, p in net.named_parameters():
        if p.requires_grad:
            params[group_of(name)] += _nbytes(p)
    for g, cost in recorder.costs.items():
        if g == OPTIMIZER:
            cost.fused_bytes, cost.fused_kernels = 7.0 * sum(params.values()), 1
        elif g == GLUE:  # the loss and what joins blocks: as traced, fused into its neighbours' kernels
            cost.fused_bytes, cost.fused_kernels = 0.0, 0
        else:
            # io holds input + output: forward moves io + P, backward ~ io (input again, output's gradient)
            # + the input's gradient (~ half of io) + 2P
            cost.fused_bytes, cost.fused_kernels = 2.5 * io[g] + 3.0 * params[g], 3
    return recorder


def fused_seconds(cost: Cost, target: dict[str, float], kernel_us: float) -> float:
    """A fused block's time: its bytes at full bandwidth or its FLOPs at the peaks, plus its kernels' fixed cost."""
    compute = (cost.flops - cost.tensor_flops) / (target["vector_tflops"] * 1e12)
    compute += cost.tensor_flops / (target["tensor_tflops"] * 1e12)
    return max(cost.fused_bytes / (target["bandwidth_tbs"] * 1e12), compute) + cost.fused_kernels * kernel_us * 1e-6


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m edgessm.bench roofline", description=__doc__.split("\n\n")[0])
    ap.add_argument("recipe", help="a shipped recipe (kws_v7, denoise_v3, asr_v4_gpu, ...) or a TOML config")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="recipe override")
    ap.add_argument("--batch", type=int, help="examples per step (default: the recipe's)")
    ap.add_argument("--seconds", type=float, help="audio per example (default: the recipe's segment length)")
    ap.add_argument("--bandwidth", type=float, default=H100["bandwidth_tbs"], help="device memory TB/s")
    ap.add_argument("--vector-tflops", type=float, default=H100["vector_tflops"], help="fp32 TFLOP/s, CUDA cores")
    ap.add_argument("--tensor-tflops", type=float, default=H100["tensor_tflops"],
                    help="TFLOP/s of float32 matrix products (67 on an H100's CUDA cores; ~494 with TF32)")  # fmt: skip
    ap.add_argument("--host-us", type=float, default=31.0, help="host dispatch time per eager operation, µs")
    ap.add_argument("--kernel-us", type=float, default=2.0, help="fixed device time per kernel, µs")
    ap.add_argument("--fused-front", action="store_true",
                    help="the filterbank front as its fused Triton kernel (sets train.front_plan=chunked)")  # fmt: skip
    ap.add_argument("--json", metavar="PATH", help="also write the table as JSON")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if min(args.bandwidth, args.vector_tflops, args.tensor_tflops) <= 0 or min(args.host_us, args.kernel_us) < 0:
        raise SystemExit("roofline: the rates must be positive and the per-operation times non-negative")
    try:
        cfg = load_config(args.recipe, list(args.set))
        net = build_task(cfg).build_model()
    except (ValueError, TypeError, KeyError, FileNotFoundError) as e:
        raise SystemExit(f"roofline: {e}") from None
    samples = example_samples(cfg, net, args.seconds)
    batch = args.batch or cfg.train.batch_size
    target = {"bandwidth_tbs": args.bandwidth, "vector_tflops": args.vector_tflops, "tensor_tflops": args.tensor_tflops}
    plan = "chunked" if args.fused_front else cfg.train.front_plan
    if plan == "measure":
        raise SystemExit("roofline: train.front_plan=measure times the plans on a device; trace fft or chunked")
    fronts = set_front_plan(net, plan)
    if args.fused_front and not fronts:
        raise SystemExit(f"roofline: --fused-front: {args.recipe}'s network has no filterbank front")
    for front in (m for m in net.modules() if isinstance(m, FilterbankFront)):
        front.fused = True if args.fused_front else None
    net = net.to("meta")
    x = torch.empty(batch, 1, samples, device="meta")
    try:
        rec = trace_step(net, x, target)
    except (NotImplementedError, RuntimeError) as e:
        if "meta" not in str(e):
            raise
        raise SystemExit(f"roofline: the step reads a value of the device on the host (a sync): {e}") from None

    def order(g: str) -> tuple:
        return (g in (GLUE, OPTIMIZER), g == OPTIMIZER, [int(p) if p.isdigit() else p for p in re.split(r"\.", g)])

    rows = []
    for g in sorted(rec.costs, key=order):
        c = rec.costs[g]
        device = c.device_s + c.ops * args.kernel_us * 1e-6
        rows.append({"block": g, **asdict(c), "eager_device_ms": 1e3 * device,
                     "fused_ms": 1e3 * fused_seconds(c, target, args.kernel_us)})  # fmt: skip
    ops = sum(r["ops"] for r in rows)
    device_ms = sum(r["eager_device_ms"] for r in rows)
    host_ms = ops * args.host_us * 1e-3
    fused_ms = sum(r["fused_ms"] for r in rows)
    kernels = sum(r["fused_kernels"] for r in rows)
    syncs = sum(r["syncs"] for r in rows)
    front = f", front {plan}{' (fused kernel)' if args.fused_front else ''}" if fronts else ""
    print(f"# roofline of one training step: {args.recipe}, batch {batch} x {samples / 16000:.2f} s{front} "
          f"(forward, backward, AdamW; traced on the meta device in fp32)")  # fmt: skip
    print(f"# target: {args.bandwidth:g} TB/s, {args.vector_tflops:g} TFLOP/s vector, {args.tensor_tflops:g} TFLOP/s "
          f"tensor; eager {args.host_us:g} µs host per op, {args.kernel_us:g} µs per kernel")  # fmt: skip
    width = max(16, *(len(r["block"]) for r in rows))
    print(f"{'block':<{width}} {'ops':>6} {'GFLOP':>8} {'MB eager':>9} {'MB fused':>9} {'eager ms':>9} {'fused ms':>9}")
    for r in rows:
        print(f"{r['block']:<{width}} {r['ops']:>6,} {r['flops'] / 1e9:>8.2f} {r['bytes'] / 1e6:>9.1f} "
              f"{r['fused_bytes'] / 1e6:>9.1f} {r['eager_device_ms']:>9.3f} {r['fused_ms']:>9.3f}")  # fmt: skip
    total_bytes = sum(r["bytes"] for r in rows)
    fused_bytes = sum(r["fused_bytes"] for r in rows)
    print(f"{'total':<{width}} {ops:>6,} {sum(r['flops'] for r in rows) / 1e9:>8.2f} {total_bytes / 1e6:>9.1f} "
          f"{fused_bytes / 1e6:>9.1f} {device_ms:>9.3f} {fused_ms:>9.3f}")  # fmt: skip
    phases = ", ".join(f"{k} {v:,}" for k, v in rec.phase_ops.items())
    top = ", ".join(f"{k} {v}" for k, v in sorted(rec.by_op.items(), key=lambda kv: -kv[1])[:8])
    print(f"\noperations by phase: {phases}; commonest: {top}")
    print(f"eager step: host {host_ms:.1f} ms, device {device_ms:.1f} ms -> ~{max(host_ms, device_ms):.1f} ms "
          f"({ops:,} kernels); with the host out of the way (a CUDA graph) {device_ms:.1f} ms")  # fmt: skip
    print(f"fused blocks: {kernels} kernels, {fused_bytes / 1e6:.1f} MB -> ~{fused_ms:.2f} ms "
          f"({max(host_ms, device_ms) / max(fused_ms, 1e-9):.0f}x below eager)")  # fmt: skip
    print(f"host syncs in the step: {syncs}" + (" (the step cannot be captured as one CUDA graph)" if syncs else ""))
    if args.json:
        from edgessm.atomic import write_text

        summary = {"ops": ops, "host_ms": host_ms, "eager_device_ms": device_ms, "fused_ms": fused_ms,
                   "fused_kernels": kernels, "syncs": syncs, "phases": dict(rec.phase_ops)}  # fmt: skip
        write_text(args.json, json.dumps({"recipe": args.recipe, "shape": list(x.shape), "target": target,
                                          "summary": summary, "rows": rows}, indent=1))  # fmt: skip
    return 0
