"""Training-speed benchmark of one bottleneck SSM block (after the paper's App. C, Fig. 4).

Times forward + backward of a ``BottleneckSSM`` along three evaluation strategies, measured in
the same run and reported as ratios:

* ``chosen``  - the contraction order picked by the paper's rule (``plan="auto"``);
* ``naive``   - the natural order, as most SSM code does it: project the input, convolve each
  state with its kernel, project the output (``natural-time``);
* ``scan``    - the recurrence itself, one time step after another (what training without the
  convolutional view would do).

With ``--device cuda`` every row also has: the order the block measures on a GPU
(``plan="auto"`` there: :func:`~edgessm.ssm.fftconv.measured_plan`) and its time, the chosen order with the
PyTorch modal-kernel generator instead of the fused Triton one (``unfused``), the peak memory of a step
and the CUDA kernels it launches (torch.profiler). Times there come from CUDA-synchronised wall clocks.

The paper's baseline (batch 256, H 16, H' 32, N 256, M 16, L 2048 on an A100) is scaled down for a
small CPU (batch 32, L 512); each sweep varies one of batch, states and length around it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass

import torch

from edgessm.plotting import pyplot
from edgessm.ssm.blocks import BottleneckSSM
from edgessm.ssm.fftconv import Plan, bottleneck_flops, measured_plan, plan_bottleneck

BASE = {"batch": 32, "h_in": 16, "h_out": 32, "n": 256, "m": 16, "length": 512}
SWEEPS = {
    "batch": [8, 16, 32, 64, 128],
    "states": [32, 64, 128, 256, 512],
    "length": [128, 256, 512, 1024, 2048],
}
QUICK_SWEEPS = {"batch": [16, 64], "states": [64, 256], "length": [256, 1024]}
# On a GPU the paper's own base case (App. C); the sweeps scale with it (batch and length x 8 / x 4).
GPU_BASE = {"batch": 256, "h_in": 16, "h_out": 32, "n": 256, "m": 16, "length": 2048}
_SWEEP_KEY = {"batch": "batch", "states": "n", "length": "length"}
NAIVE = Plan("natural", "time")


@dataclass
class Result:
    sweep: str
    batch: int
    h_in: int
    h_out: int
    n: int
    m: int
    length: int
    plan: str
    chosen_ms: float
    naive_ms: float
    scan_ms: float | None
    flop_ratio: float  # naive / chosen, forward FLOPs from the FLOP model
    measured_plan: str | None = None  # GPU rows: the order the block measures, its time
    measured_ms: float | None = None
    unfused_ms: float | None = None  # GPU rows: chosen order, PyTorch modal-kernel generation
    peak_mib: float | None = None  # GPU rows: peak memory of one chosen-order step
    kernels: int | None = None  # GPU rows: CUDA kernels launched by one chosen-order step

    @property
    def speedup(self) -> float:
        return self.naive_ms / self.chosen_ms

    @property
    def scan_ratio(self) -> float | None:
        return None if self.scan_ms is None else self.scan_ms / self.chosen_ms


def scan_forward(layer: BottleneckSSM, u: torch.Tensor) -> torch.Tensor:
    """The recurrence of eq. 8 evaluated step by step (complex state, autograd through time)."""
    wr, wi = layer.modes.dtA()
    a_bar = torch.exp(torch.complex(wr, wi))  # (N, M)
    v = torch.einsum("bit,ni->bnt", u, layer.b_bar())
    e = layer._sub_weights()
    x = torch.zeros(u.shape[0], *a_bar.shape, dtype=a_bar.dtype)
    outs = []
    for t in range(u.shape[-1]):
        x = a_bar * x + v[:, :, None, t]
        outs.append(torch.einsum("bnm,nm->bn", x.real, e))
    return torch.einsum("bnt,jn->bjt", torch.stack(outs, -1), layer.C)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(fn, repeats: int, device: torch.device | None = None) -> float:
    """Median wall time of ``fn()`` in ms over ``repeats`` calls, after one warm-up call (synchronised
    with the GPU on CUDA)."""
    device = device or torch.device("cpu")
    fn()  # warm-up (allocator, FFT plans)
    times = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def cuda_kernels(fn) -> int:
    """CUDA kernels launched by one call of ``fn`` (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def _unfused(fn):
    import os

    def run() -> None:
        old = os.environ.get("EDGESSM_FUSED")
        os.environ["EDGESSM_FUSED"] = "0"
        try:
            fn()
        finally:
            if old is None:
                del os.environ["EDGESSM_FUSED"]
            else:
                os.environ["EDGESSM_FUSED"] = old

    return run


def run_case(sweep: str, shape: dict[str, int], repeats: int, scan: bool, device: torch.device | None = None) -> Result:
    device = device or torch.device("cpu")
    torch.manual_seed(0)
    b, h, j, n, m, length = (shape[k] for k in ("batch", "h_in", "h_out", "n", "m", "length"))
    layer = BottleneckSSM(h, j, n, m).to(device)
    u = torch.randn(b, h, length, device=device)
    weight = torch.randn(b, j, length, device=device)

    def fwd_bwd(forward) -> None:
        layer.zero_grad(set_to_none=True)
        (forward(u) * weight).sum().backward()

    chosen = plan_bottleneck(b, h, j, n)
    layer.plan = chosen
    y_chosen = layer(u).detach()
    t_chosen = median_ms(lambda: fwd_bwd(layer), repeats, device)
    layer.plan = NAIVE
    y_naive = layer(u).detach()
    t_naive = median_ms(lambda: fwd_bwd(layer), repeats, device)
    err = float((y_chosen - y_naive).abs().max() / y_naive.abs().max())
    if err > 1e-3:
        raise RuntimeError(f"contraction orders disagree (relative error {err:.2e}) for {shape}")
    t_scan = (
        median_ms(lambda: fwd_bwd(lambda x: scan_forward(layer, x)), max(1, repeats // 3), device) if scan else None
    )
    flops = bottleneck_flops(NAIVE, b, h, j, n, length) / bottleneck_flops(chosen, b, h, j, n, length)
    result = Result(sweep, b, h, j, n, m, length, chosen.name, t_chosen, t_naive, t_scan, flops)
    if device.type == "cuda":
        measured = measured_plan(b, h, j, n, length, layer.modes.live_length(length), device)
        layer.plan = measured
        result.measured_plan, result.measured_ms = measured.name, median_ms(lambda: fwd_bwd(layer), repeats, device)
        layer.plan = chosen
        result.unfused_ms = median_ms(_unfused(lambda: fwd_bwd(layer)), repeats, device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fwd_bwd(layer)
        result.peak_mib = (torch.cuda.max_memory_allocated(device) - base) / 2**20
        result.kernels = cuda_kernels(lambda: fwd_bwd(layer))
    return result


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def print_table(results: list[Result], out=sys.stdout) -> None:
    if any(r.measured_ms is not None for r in results):
        return _print_gpu_table(results, out)
    head = (
        f"{'sweep':<7} {'B':>4} {'H':>3} {'H´':>3} {'N':>4} {'M':>3} {'L':>5}  {'chosen plan':<13}"
        f" {'chosen ms':>9} {'naive ms':>9} {'scan ms':>9}  {'naive/chosen':>12} {'scan/chosen':>11} {'FLOP ratio':>10}"
    )
    print(head, file=out)
    print("-" * len(head), file=out)
    for r in results:
        print(
            f"{r.sweep:<7} {r.batch:>4} {r.h_in:>3} {r.h_out:>3} {r.n:>4} {r.m:>3} {r.length:>5}  {r.plan:<13}"
            f" {r.chosen_ms:>9.1f} {r.naive_ms:>9.1f} {_fmt(r.scan_ms, '9.1f'):>9}  {r.speedup:>11.2f}x"
            f" {_fmt(r.scan_ratio, '10.1f'):>10}x {r.flop_ratio:>9.2f}x",
            file=out,
        )


def _print_gpu_table(results: list[Result], out) -> None:
    head = (
        f"{'sweep':<7} {'B':>4} {'N':>4} {'L':>5}  {'rule plan':<13} {'rule ms':>8} {'measured plan':<14}"
        f" {'meas. ms':>8} {'naive ms':>8} {'unfused ms':>10}  {'naive/meas.':>11} {'unfused/fused':>13}"
        f" {'peak MiB':>8} {'kernels':>7}"
    )
    print(head, file=out)
    print("-" * len(head), file=out)
    for r in results:
        print(
            f"{r.sweep:<7} {r.batch:>4} {r.n:>4} {r.length:>5}  {r.plan:<13} {r.chosen_ms:>8.2f}"
            f" {r.measured_plan:<14} {r.measured_ms:>8.2f} {r.naive_ms:>8.2f} {r.unfused_ms:>10.2f}"
            f"  {r.naive_ms / r.measured_ms:>10.2f}x {r.unfused_ms / r.chosen_ms:>12.2f}x"
            f" {r.peak_mib:>8.0f} {r.kernels:>7}",
            file=out,
        )


def plot(results: list[Result], path: str) -> None:
    plt = pyplot("python -m edgessm.bench fftconv --plot")

    sweeps = [s for s in SWEEPS if any(r.sweep == s for r in results)]
    fig, axes = plt.subplots(1, len(sweeps), figsize=(4.2 * len(sweeps), 3.6), squeeze=False)
    for ax, sweep in zip(axes[0], sweeps, strict=True):
        rs = [r for r in results if r.sweep == sweep]
        xs = [getattr(r, _SWEEP_KEY[sweep]) for r in rs]
        ax.plot(xs, [r.chosen_ms for r in rs], "o-", label="chosen order")
        ax.plot(xs, [r.naive_ms for r in rs], "s--", label="naive natural order")
        if any(r.scan_ms is not None for r in rs):
            ax.plot(xs, [r.scan_ms for r in rs], "^:", label="recurrent scan")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(sweep)
        ax.set_ylabel("forward + backward (ms)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle("Bottleneck SSM block training step, " + ", ".join(f"{k}={v}" for k, v in BASE.items()), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m edgessm.bench fftconv", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", choices=[*SWEEPS, "all"], default="all", help="which dimension to sweep")
    ap.add_argument("--quick", action="store_true", help="two points per sweep, fewer repeats")
    ap.add_argument("--repeats", type=int, default=None, help="timed repetitions per measurement (median)")
    ap.add_argument("--no-scan", action="store_true", help="skip the (slow) recurrent-scan baseline")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: the paper's full-size base case, plus measured plans, fused vs unfused, memory "
                    "and kernel counts")  # fmt: skip
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    ap.add_argument("--plot", metavar="PNG", help="also draw the three sweeps (like the paper's Fig. 4)")
    args = ap.parse_args(argv)

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("fftconv: no CUDA device is visible on this machine (--device cuda)")
        return 1
    device = torch.device(args.device)
    repeats = args.repeats or (2 if args.quick else 5)
    table = QUICK_SWEEPS if args.quick else SWEEPS
    base = BASE if device.type == "cpu" else GPU_BASE
    if device.type == "cuda":
        table = {k: [v * base[_SWEEP_KEY[k]] // BASE[_SWEEP_KEY[k]] for v in vs] for k, vs in table.items()}
    names = list(SWEEPS) if args.sweep == "all" else [args.sweep]
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} threads"
    print(f"# fftconv benchmark: torch {torch.__version__}, {where}, median of {repeats}")
    results = []
    for sweep in names:
        for value in table[sweep]:
            shape = dict(base, **{_SWEEP_KEY[sweep]: value})
            scan = not args.no_scan and device.type == "cpu"
            results.append(run_case(sweep, shape, repeats, scan=scan, device=device))
            print(f"  measured {sweep}={value}", file=sys.stderr, flush=True)
    print_table(results)
    gains = [r for r in results if r.plan.startswith("full")]
    if gains:
        speedups = sorted(r.speedup for r in gains)
        print(
            f"\nwhere the paper predicts a gain (full-kernel order chosen, {len(gains)} shapes): "
            f"naive/chosen from {speedups[0]:.2f}x to {speedups[-1]:.2f}x, median {statistics.median(speedups):.2f}x"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) | {"speedup": r.speedup} for r in results], f, indent=1)
    if args.plot:
        plot(results, args.plot)
        print(f"plot written to {args.plot}")
    return 0
