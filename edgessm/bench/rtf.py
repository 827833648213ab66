"""Training speed of an RTF layer against a Centaurus layer of equal size (the RTF paper's Sec. 5 claim).

Both are depthwise blocks with ``N`` states per channel and the same ``H -> H`` mixer: the RTF layer
(:class:`~edgessm.ssm.rtf.RationalSSM`, order ``N``: its kernel by one FFT of the coefficients, ``O(L log L)``
whatever ``N``, plus the ``O(N^3 log L)`` periodisation correction) and the Centaurus depthwise (S4D) layer
(:class:`~edgessm.ssm.blocks.DepthwiseSSM`, ``N`` modes: its kernel ``Σ_n E Re(Ā_n^l)`` in ``O(N L)``).
Times forward + backward in the same run, reports ratios; sweeps the sequence length and the state size.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass

import torch

from edgessm.bench.fftconv import median_ms
from edgessm.ssm.blocks import DepthwiseSSM
from edgessm.ssm.rtf import RationalSSM
from edgessm.ssm.stream import Counts

BASE = {"batch": 16, "channels": 64, "n": 64, "length": 2048}
SWEEPS = {"length": [512, 1024, 2048, 4096, 8192, 16384], "states": [4, 16, 64, 256]}
QUICK_SWEEPS = {"length": [1024, 8192], "states": [16, 256]}
_KEY = {"length": "length", "states": "n"}


@dataclass
class Result:
    sweep: str
    batch: int
    channels: int
    n: int
    length: int
    rtf_ms: float
    centaurus_ms: float
    rtf_params: int
    centaurus_params: int

    @property
    def speedup(self) -> float:
        """Centaurus time over RTF time: above 1, RTF trains faster."""
        return self.centaurus_ms / self.rtf_ms


def _params(layer: torch.nn.Module) -> int:
    return sum(p.numel() for p in layer.parameters())


def run_case(sweep: str, shape: dict[str, int], repeats: int, device: str) -> Result:
    torch.manual_seed(0)
    b, h, n, length = (shape[k] for k in ("batch", "channels", "n", "length"))
    rtf = RationalSSM(h, h, n, init="xavier").to(device)
    s4d = DepthwiseSSM(h, h, n).to(device)
    u = torch.randn(b, h, length, device=device)
    weight = torch.randn(b, h, length, device=device)

    def step(layer: torch.nn.Module) -> None:
        layer.zero_grad(set_to_none=True)
        (layer(u) * weight).sum().backward()
        if device == "cuda":
            torch.cuda.synchronize()

    return Result(sweep, b, h, n, length, median_ms(lambda: step(rtf), repeats), median_ms(lambda: step(s4d), repeats),
                  _params(rtf), _params(s4d))  # fmt: skip


def print_table(results: list[Result], out=sys.stdout) -> None:
    head = (f"{'sweep':<7} {'B':>4} {'H':>4} {'N':>4} {'L':>6}  {'RTF ms':>8} {'Centaurus ms':>12}"
            f"  {'Centaurus/RTF':>13}  {'params RTF / Centaurus':>22}")  # fmt: skip
    print(head, file=out)
    print("-" * len(head), file=out)
    for r in results:
        shape = f"{r.sweep:<7} {r.batch:>4} {r.channels:>4} {r.n:>4} {r.length:>6}"
        print(f"{shape}  {r.rtf_ms:>8.1f} {r.centaurus_ms:>12.1f}  {r.speedup:>12.2f}x"
              f"  {r.rtf_params:>10} / {r.centaurus_params:<10}", file=out)  # fmt: skip


def streaming_counts(channels: int, n: int) -> tuple[Counts, Counts]:
    """Inference ``(params, FLOPs per sample)`` of the two layers (their step cost, not training)."""
    return RationalSSM(channels, channels, n).counts(), DepthwiseSSM(channels, channels, n).counts()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m edgessm.bench rtf", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", choices=[*SWEEPS, "all"], default="all", help="which dimension to sweep")
    ap.add_argument("--quick", action="store_true", help="two points per sweep, fewer repeats")
    ap.add_argument("--repeats", type=int, default=None, help="timed repetitions per measurement (median)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("edgessm bench rtf: --device cuda but no CUDA device is visible")
    if args.threads:
        torch.set_num_threads(args.threads)
    repeats = args.repeats or (2 if args.quick else 5)
    table = QUICK_SWEEPS if args.quick else SWEEPS
    names = list(SWEEPS) if args.sweep == "all" else [args.sweep]
    print(f"# rtf benchmark: torch {torch.__version__}, {args.device}, {torch.get_num_threads()} threads, "
          f"median of {repeats}; base {BASE}")  # fmt: skip
    results = []
    for sweep in names:
        for value in table[sweep]:
            results.append(run_case(sweep, dict(BASE, **{_KEY[sweep]: value}), repeats, args.device))
            print(f"  measured {sweep}={value}", file=sys.stderr, flush=True)
    print_table(results)
    rtf, s4d = streaming_counts(BASE["channels"], BASE["n"])
    print(f"\nstreaming step at H={BASE['channels']}, N={BASE['n']}: RTF {rtf.params} params, "
          f"{rtf.flops:.0f} FLOPs/sample; Centaurus {s4d.params} params, {s4d.flops:.0f} FLOPs/sample")  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) | {"speedup": r.speedup} for r in results], f, indent=1)
    return 0
