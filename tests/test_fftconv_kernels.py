"""Kernel generator, causal FFT convolution, and the contraction planner with its FLOP model."""

from __future__ import annotations

import math

import pytest
import torch

from edgessm.ssm import kernels
from edgessm.ssm.blocks import BottleneckSSM, PointwiseBottleneckSSM, set_ssm_plan
from edgessm.ssm.fftconv import (
    PLANS,
    Plan,
    bottleneck_conv,
    bottleneck_flops,
    causal_conv,
    cheapest_plan,
    fft_size,
    plan_bottleneck,
    rfft,
)
from edgessm.ssm.kernels import modal_kernel, modal_kernel_reference


def _modes(shape, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    wr = -torch.empty(shape, dtype=dtype).uniform_(1e-4, 0.05, generator=g)
    wi = torch.empty(shape, dtype=dtype).uniform_(0, 2.0, generator=g)
    c = torch.randn(shape, dtype=dtype, generator=g)
    return wr, wi, c


def test_fft_size_is_smallest_fast_length() -> None:
    for n in [1, 2, 7, 97, 1000, 4095, 4097, 32001]:
        m = fft_size(n)
        assert m >= n
        r = m
        for p in (2, 3, 5):
            while r % p == 0:
                r //= p
        assert r == 1
        assert all(not _is_fast(k) for k in range(n, m))


def _is_fast(k: int) -> bool:
    for p in (2, 3, 5):
        while k % p == 0:
            k //= p
    return k == 1


def test_modal_kernel_matches_materialised_basis() -> None:
    wr, wi, c = _modes((3, 5, 4))
    assert torch.allclose(modal_kernel(wr, wi, c, 1000), modal_kernel_reference(wr, wi, c, 1000), atol=1e-12)


def test_modal_kernel_gradients(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "_SLAB", 24)  # force many time blocks in forward and backward
    wr, wi, c = (x.requires_grad_() for x in _modes((2, 3)))
    assert torch.autograd.gradcheck(lambda a, b, d: modal_kernel(a, b, d, 40), (wr, wi, c))


def test_modal_kernel_blocks_bound_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "_SLAB", 64)
    wr, wi, c = _modes((4, 4))
    assert kernels._block_len(16, 1000) == 4
    assert torch.allclose(modal_kernel(wr, wi, c, 1000), modal_kernel_reference(wr, wi, c, 1000), atol=1e-12)


def test_long_kernel_phase_is_accurate_in_float32() -> None:
    # a slowly decaying fast oscillation: the phase l*wi reaches ~3e4 rad at l = 16000
    wr = torch.tensor([[-1e-5]], dtype=torch.float64)
    wi = torch.tensor([[2.0]], dtype=torch.float64)
    c = torch.ones(1, 1, dtype=torch.float64)
    exact = modal_kernel(wr, wi, c, 16000)
    approx = modal_kernel(wr.float(), wi.float(), c.float(), 16000)
    # float32 input rounding of wi itself is part of the model; compare against that rounded wi
    exact32 = modal_kernel(wr.float().double(), wi.float().double(), c, 16000)
    assert (approx.double() - exact32).abs().max() < 1e-5
    assert exact.abs().max() <= 1.0 + 1e-12


@pytest.mark.parametrize("mode", ["depthwise", "full"])
def test_causal_conv_equals_direct_sum(mode: str) -> None:
    torch.manual_seed(0)
    u = torch.randn(2, 3, 100, dtype=torch.float64)
    k = torch.randn(3, 100, dtype=torch.float64) if mode == "depthwise" else torch.randn(4, 3, 100, dtype=torch.float64)
    y = causal_conv(u, k, mode)
    ref = torch.zeros_like(y)
    for t in range(100):
        for s in range(t + 1):
            if mode == "depthwise":
                ref[..., t] += k[:, t - s] * u[..., s]
            else:
                ref[..., t] += torch.einsum("ji,bi->bj", k[..., t - s], u[..., s])
    assert torch.allclose(y, ref, atol=1e-10)


def test_causal_conv_rejects_unknown_mode() -> None:
    with pytest.raises(ValueError, match="unknown convolution mode"):
        causal_conv(torch.zeros(1, 1, 4), torch.zeros(1, 4), "grouped")  # type: ignore[arg-type]


def test_bottleneck_plans_agree_with_each_other_and_a_time_domain_reference() -> None:
    torch.manual_seed(1)
    b, h, j, n, L = 2, 3, 5, 7, 64
    u = torch.randn(b, h, L, dtype=torch.float64)
    k = torch.randn(n, L, dtype=torch.float64)
    bb = torch.randn(n, h, dtype=torch.float64)
    c = torch.randn(j, n, dtype=torch.float64)
    full = torch.einsum("jn,ni,nt->jit", c, bb, k)
    ref = torch.nn.functional.conv1d(torch.nn.functional.pad(u, (L - 1, 0)), full.flip(-1))
    for plan in PLANS:
        assert torch.allclose(bottleneck_conv(u, k, bb, c, plan), ref, atol=1e-10), plan


@pytest.mark.parametrize(
    "batch,h_in,h_out,n,expected",
    [
        (256, 16, 32, 256, Plan("full", "freq")),  # paper App. C baseline: small H, large B and N
        (64, 16, 32, 512, Plan("full", "time")),  # H H' = 512 <= N: build the full kernel in time
        (4, 128, 128, 64, Plan("natural", "time")),  # wide channels, few states: project first
        (2, 64, 64, 128, Plan("natural", "freq")),  # N > H: transform the input, project in frequency
        (1, 1, 2, 4, Plan("full", "time")),
    ],
)
def test_paper_rule(batch: int, h_in: int, h_out: int, n: int, expected: Plan) -> None:
    plan = plan_bottleneck(batch, h_in, h_out, n)
    assert plan == expected
    natural = 1 / batch + 1 / n > 1 / h_in + 1 / h_out
    assert (plan.order == "natural") == natural


def test_flop_model_agrees_with_the_rule_when_the_gap_is_clear() -> None:
    """Counting contractions only (the paper's App. B model, with real/complex constants), the FLOP
    model prefers the order the rule picks whenever the two sides differ by 4x or more."""
    checked = 0
    for batch in (1, 4, 16, 64, 256):
        for h in (1, 4, 16, 64, 256):
            for j in (1, 4, 16, 64, 256):
                for n in (4, 16, 64, 256, 1024):
                    lhs, rhs = 1 / batch + 1 / n, 1 / h + 1 / j
                    if max(lhs, rhs) < 4 * min(lhs, rhs):
                        continue  # near the boundary FFT and complex-arithmetic constants decide
                    rule = plan_bottleneck(batch, h, j, n).order
                    best = {
                        o: min(
                            bottleneck_flops(p, batch, h, j, n, 2048, include_fft=False) for p in PLANS if p.order == o
                        )
                        for o in ("natural", "full")
                    }
                    assert min(best, key=best.get) == rule, (batch, h, j, n)
                    checked += 1
    assert checked > 200


def test_fft_count_can_overturn_the_rule() -> None:
    """With FFTs counted, few states and many outputs favour the natural order although the
    contraction rule says 'full' (it transforms N signals instead of H'); ``plan='flops'`` sees it."""
    batch, h, j, n = 16, 1, 64, 16
    assert plan_bottleneck(batch, h, j, n).order == "full"
    assert cheapest_plan(batch, h, j, n, 2048).order == "natural"


def test_flop_model_leading_terms() -> None:
    # natural order ≈ 2 B N L (H + H') in the projections; full ≈ 8 B H H' F in the full product
    b, h, j, n, L = 64, 8, 16, 256, 4096
    nat = bottleneck_flops(Plan("natural", "time"), b, h, j, n, L)
    assert nat > 2 * b * n * L * (h + j)
    full = bottleneck_flops(Plan("full", "freq"), b, h, j, n, L)
    assert full > 8 * b * h * j * (fft_size(2 * L - 1) // 2)
    assert full < nat
    assert cheapest_plan(b, h, j, n, L).order == "full"
    assert math.isfinite(nat) and math.isfinite(full)


def test_measured_plan_times_every_order_once_and_caches_the_fastest(monkeypatch) -> None:
    from edgessm.ssm import fftconv

    monkeypatch.setattr(fftconv, "MEASURED", {})
    calls = []

    def timer(plan, *args):
        calls.append(plan)
        return {"full-freq": 1.0, "natural-time": 3.0}.get(plan.name, 2.0)

    got = fftconv.measured_plan(8, 4, 6, 16, 100, timer=timer)
    assert got.name == "full-freq" and len(calls) == len(fftconv.PLANS)
    assert fftconv.measured_plan(8, 4, 6, 16, 100, timer=timer) is got and len(calls) == len(fftconv.PLANS)
    fftconv.measured_plan(8, 4, 6, 16, 100, backward=False, timer=timer)  # inference is another shape
    assert len(calls) == 2 * len(fftconv.PLANS)


def test_measured_plan_times_natural_freq_with_and_without_the_fused_contraction(monkeypatch) -> None:
    """Where the fused contraction may run, natural-freq is a candidate twice (the H100 measured the fused one
    4x slower at some sizes): an unfused win is kept, and that plan then never calls the fused kernel."""
    from edgessm.ssm import fftconv, fused

    monkeypatch.setattr(fftconv, "MEASURED", {})
    monkeypatch.setattr(fftconv, "_fused", lambda t: True)
    calls, fused_calls = [], []

    def timer(plan, *args):
        calls.append(plan.name)
        return 1.0 if plan == fftconv.UNFUSED else 2.0

    got = fftconv.measured_plan(8, 4, 6, 16, 100, timer=timer)
    assert got == fftconv.UNFUSED and got.name == "natural-freq-unfused"
    assert sorted(calls) == sorted([p.name for p in fftconv.PLANS] + ["natural-freq-unfused"])

    def fake(uf, kf, b, c):
        fused_calls.append(1)
        return fftconv._project_complex(fftconv._project_complex(uf, b) * kf, c)

    monkeypatch.setattr(fused, "project_convolve", fake, raising=False)
    torch.manual_seed(0)
    u, k, b, c = torch.randn(2, 4, 30), torch.randn(5, 30), torch.randn(5, 4), torch.randn(3, 5)
    y_fused = fftconv.bottleneck_conv(u, k, b, c, fftconv.Plan("natural", "freq"))
    assert fused_calls == [1]
    y_unfused = fftconv.bottleneck_conv(u, k, b, c, fftconv.UNFUSED)
    assert fused_calls == [1] and torch.allclose(y_fused, y_unfused, atol=1e-5)
    ref = fftconv.bottleneck_conv(u, k, b, c, fftconv.Plan("natural", "time"))
    assert torch.allclose(y_unfused, ref, atol=1e-4)


def test_blocks_measure_their_plan_when_asked_and_keep_the_rule_on_cpu(monkeypatch) -> None:
    """plan='measure' times the four orders on this CPU (real timings) and computes the same function;
    'auto' on a CPU is the paper's rule and measures nothing."""
    from edgessm.ssm import fftconv
    from edgessm.ssm.blocks import BottleneckSSM

    monkeypatch.setattr(fftconv, "MEASURED", {})
    torch.manual_seed(0)
    layer = BottleneckSSM(4, 6, 8, 2, plan="measure")
    u = torch.randn(3, 4, 50)
    y = layer(u)
    ((key, plan),) = fftconv.MEASURED.items()
    assert key[:5] == (3, 4, 6, 8, 50) and key[-1] is True and plan in fftconv.PLANS
    layer.plan = "natural-time"
    assert torch.allclose(y, layer(u), atol=1e-5)
    assert 0 < fftconv.time_plan(plan, 3, 4, 6, 8, 50, repeats=1) < 10
    layer.plan = "auto"
    layer(u)
    assert len(fftconv.MEASURED) == 1


def test_bench_fftconv_gpu_table_and_a_clear_line_without_cuda(capsys, monkeypatch) -> None:
    import io

    from edgessm.bench import fftconv as bench

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench.main(["--device", "cuda"]) == 1
    assert capsys.readouterr().out.strip() == "fftconv: no CUDA device is visible on this machine (--device cuda)"
    gpu = {"measured_plan": "natural-time", "measured_ms": 5.0, "unfused_ms": 12.0, "peak_mib": 600, "kernels": 90}
    row = bench.Result("batch", 256, 16, 32, 256, 16, 2048, "full-freq", 10.0, 22.0, None, 2.0, **gpu)
    out = io.StringIO()
    bench.print_table([row], out)
    line = out.getvalue().splitlines()[-1]
    assert "natural-time" in line and "4.40x" in line and "1.20x" in line and line.rstrip().endswith("90")


def test_bench_fftconv_cpu_row_times_both_orders_and_checks_they_agree() -> None:
    from edgessm.bench import fftconv as bench

    shape = {"batch": 2, "h_in": 3, "h_out": 4, "n": 8, "m": 2, "length": 40}
    row = bench.run_case("batch", shape, repeats=1, scan=True)
    assert row.chosen_ms > 0 and row.naive_ms > 0 and row.scan_ms > 0 and row.flop_ratio > 0
    assert row.measured_ms is None and row.kernels is None  # the GPU columns stay empty on a CPU


@pytest.mark.parametrize("length,n", [(5, 8), (5, 9), (7, 7), (6, 16), (150, 300), (151, 375)])
def test_rfft_gradient_is_torchs(length: int, n: int) -> None:
    """The real FFT's cheaper backward (one inverse real FFT) gives PyTorch's gradient, even and odd sizes,
    zero-padded input, both parts of the output used."""
    x = torch.randn(3, 4, length, dtype=torch.float64, requires_grad=True)
    g = torch.randn(3, 4, n // 2 + 1, dtype=torch.complex128)

    def loss(f) -> torch.Tensor:
        y = f(x)
        return (y * g).real.sum() + (y * g.conj()).imag.sum()

    assert rfft(x, n).grad_fn is not None and "RealFFT" in type(rfft(x, n).grad_fn).__name__
    (ours,) = torch.autograd.grad(loss(lambda t: rfft(t, n)), x)
    (theirs,) = torch.autograd.grad(loss(lambda t: torch.fft.rfft(t, n=n)), x)
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradcheck(lambda t: rfft(t, n), (x,))


def test_cpu_auto_plan_is_the_flop_models() -> None:
    """On a CPU ``auto`` follows the FLOP model with the FFTs counted: with more states than inputs it
    projects in time where the paper's rule projects in frequency; ``rule`` keeps the paper's choice, and
    every plan gives the same output."""
    block = PointwiseBottleneckSSM(64, 128, 128)
    assert block.choose_plan(48, 150) == cheapest_plan(48, 64, 128, 128, 150) == Plan("natural", "time")
    assert plan_bottleneck(48, 64, 128, 128) == Plan("natural", "freq")
    u = torch.randn(2, 64, 50)
    y_auto = block(u)
    assert set_ssm_plan(torch.nn.Sequential(block, BottleneckSSM(128, 8, 4)), "rule") == 2
    assert block.choose_plan(48, 150) == Plan("natural", "freq")
    torch.testing.assert_close(block(u), y_auto, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"train\.ssm_plan must be one of .*natural-time.*got 'fastest'"):
        set_ssm_plan(block, "fastest")
