from __future__ import annotations

import math
import os

import pytest

# Triton kernels run on CPU tensors only under its interpreter, which must be on when Triton is first
# imported (tests/test_fused.py): CI has no GPU. Nothing else in the tests uses Triton.
os.environ.setdefault("TRITON_INTERPRET", "1")

torch = pytest.importorskip("torch")


def randomize(module: torch.nn.Module, seed: int = 0, dynamics: bool = True) -> torch.nn.Module:
    """Give every SSM parameter a random value in a sane range (not just the deterministic init).

    ``dynamics=False`` keeps A and Δ at their initialisation (as in a trained model's range) and
    randomises the projections only."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if not dynamics and leaf in ("dt_log", "a_log", "a_im"):
                continue
            if leaf == "dt_log":
                p.copy_(torch.empty(p.shape).uniform_(math.log(1e-3), math.log(1e-1), generator=g))
            elif leaf == "a_log":
                p.copy_(torch.empty(p.shape).uniform_(math.log(0.05), math.log(2.0), generator=g))
            elif leaf == "a_im":
                p.copy_(torch.empty(p.shape).uniform_(0.0, 3 * math.pi, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(max(1, p.shape[-1])))
    return module


def random_chunks(total: int, seed: int, low: int = 1, high: int = 700) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    sizes = []
    while sum(sizes) < total:
        sizes.append(int(torch.randint(low, high, (1,), generator=g)))
    sizes[-1] -= sum(sizes) - total
    return [s for s in sizes if s > 0]


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))
