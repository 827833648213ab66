"""The RTF block: exact state-free kernel (the periodisation corrected), stepwise = parallel, stability."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import random_chunks, randomize, rel_err

from edgessm.ssm import CentaurusBlock, RationalSSM, make_ssm, run_chunked
from edgessm.ssm.rtf import MARGIN, _companion, _recurrence, modal_error, power_mod, unperiodise


def _slow(h_in: int = 3, h_out: int = 5, n: int = 8, seed: int = 0, slack: float = 0.01) -> RationalSSM:
    """A layer whose poles sit close to the unit circle (small Montel slack): long, slowly decaying kernels."""
    torch.manual_seed(seed)
    layer = RationalSSM(h_in, h_out, n, init="xavier")
    with torch.no_grad():
        layer.a_raw.normal_()
        layer.b.normal_()
        layer.a_slack.fill_(slack)
    return layer


@pytest.mark.parametrize("n", [1, 3, 16])
@pytest.mark.parametrize("length", [2, 50, 700, 3000])
def test_state_free_kernel_is_the_exact_impulse_response_in_float64(n: int, length: int) -> None:
    layer = _slow(n=n).double()
    assert layer.poles().abs().max() > 0.9  # the periodised kernel would be visibly wrong without the correction
    with torch.no_grad():
        ref = _recurrence(layer.denominator(), layer.b, length)
        ref[:, 0] = layer.h0
        assert rel_err(layer.kernel(length), ref) < 1e-9


@pytest.mark.parametrize("period", [17, 64, 1000])
def test_unperiodised_numerator_makes_the_fft_kernel_exact_and_the_plain_one_is_aliased(period: int) -> None:
    layer = _slow(n=16, slack=1e-3).double()
    a, b = layer.denominator().detach(), layer.b.detach()
    ref = _recurrence(a, b, period)

    def fft_kernel(num: torch.Tensor) -> torch.Tensor:
        one = torch.ones_like(a[:, :1])
        spec = torch.fft.rfft(torch.cat([one * 0, num], -1), period) / torch.fft.rfft(torch.cat([one, a], -1), period)
        return torch.fft.irfft(spec, period)[:, 1:]

    assert rel_err(fft_kernel(unperiodise(a, b, period)), ref[:, 1:]) < 1e-9
    if float(layer.poles().abs().max()) ** period > 1e-2:  # the tail past one period still matters
        assert rel_err(fft_kernel(b), ref[:, 1:]) > 1e-3  # and the uncorrected numerator aliases it


@pytest.mark.parametrize("order", [1, 2, 7, 33])
def test_power_mod_is_the_first_row_of_the_companion_power(order: int) -> None:
    torch.manual_seed(order)
    a = torch.randn(4, order, dtype=torch.float64)
    a = 0.999 * a / a.abs().sum(-1, keepdim=True)
    for n in (1, 2, 5, 64, 1000, 4097):
        ref = torch.linalg.matrix_power(_companion(a), n)[:, 0, :]
        assert (power_mod(a, n) - ref).abs().max() < 1e-12


def test_montel_keeps_every_pole_inside_the_unit_circle() -> None:
    torch.manual_seed(1)
    for scale in (1e-3, 1.0, 100.0):
        layer = RationalSSM(6, 6, 12, denominators=3)
        with torch.no_grad():
            layer.a_raw.normal_().mul_(scale)
            layer.a_slack.fill_(0.0)  # the tightest the constraint gets
        a = layer.denominator().detach()
        assert float(a.abs().sum(-1).max()) < 1 - MARGIN / 2  # float32 rounding aside
        assert float(layer.poles().abs().max()) < 1 - MARGIN / 12 / 2
    assert torch.equal(a[0], a[1]) and not torch.equal(a[1], a[2])  # two channels per denominator


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.float64, 1e-9)])
def test_random_chunks_equal_parallel(dtype: torch.dtype, tol: float) -> None:
    layer = _slow().to(dtype)
    u = torch.randn(2, 3, 4608, dtype=dtype)
    with torch.no_grad():
        y_par = layer(u)
        y_step, state = run_chunked(layer, u, random_chunks(u.shape[-1], seed=1))
    assert y_par.shape == (2, 5, 4608)
    assert rel_err(y_step, y_par) < tol
    assert all(torch.isfinite(s).all() for s in state)


def test_long_chunks_take_the_chunked_scan_exactly() -> None:
    layer = _slow(seed=4).double()
    assert layer.sub_chunk(1024) < 1024
    u = torch.randn(2, 3, 2 * 1024 + 7, dtype=torch.float64)
    with torch.no_grad():
        y_step, _ = run_chunked(layer, u, [1024, 1024, 7])
        assert rel_err(y_step, layer(u)) < 1e-9


def test_impulse_response_matches_single_steps() -> None:
    layer = _slow(2, 3, 4, seed=2).double()
    with torch.no_grad():
        k = layer.impulse_response(200)
        for i in range(2):
            u = torch.zeros(1, 2, 200, dtype=torch.float64)
            u[0, i, 0] = 1.0
            y, _ = run_chunked(layer, u, [1] * 200)
            assert rel_err(y[0], k[:, i]) < 1e-10


def test_zero_init_is_a_scaled_identity_and_every_parameter_learns() -> None:
    torch.manual_seed(0)
    layer = RationalSSM(4, 4, 8, mixer=False)
    u = torch.randn(2, 4, 300)
    with torch.no_grad():
        assert rel_err(layer(u), layer.h0[:, None] * u) < 1e-6  # a = b = 0: H(z) = h0
    for _ in range(3):  # b learns first, then â (once b is off zero), then the slack (once â is)
        layer.zero_grad()
        layer(u).sin().sum().backward()
        with torch.no_grad():
            for p in layer.parameters():
                assert p.grad is not None and torch.isfinite(p.grad).all()
                p -= 0.01 * p.grad
    assert all(p.grad.abs().sum() > 0 for p in layer.parameters())


def test_gradients_are_exact_in_float64() -> None:
    layer = _slow(2, 2, 3, seed=5, slack=0.3).double()
    u = torch.randn(1, 2, 40, dtype=torch.float64)
    params = [layer.a_raw, layer.a_slack, layer.b, layer.h0]

    def f(*ps: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(layer, dict(zip(["a_raw", "a_slack", "b", "h0"], ps, strict=True)), (u,))

    assert torch.autograd.gradcheck(f, [p.detach().clone().requires_grad_() for p in params])


def test_block_kind_in_a_residual_block_streams_and_counts() -> None:
    torch.manual_seed(3)
    block = randomize(CentaurusBlock("rtf", 4, 6, 8, pre_conv=3))
    assert isinstance(make_ssm("rtf", 4, 6, 8), RationalSSM)
    x = torch.randn(1, 4, 900)
    with torch.no_grad():
        y, _ = run_chunked(block, x, random_chunks(900, seed=3, high=200))
        assert rel_err(y, block(x)) < 1e-4
    counts = RationalSSM(4, 6, 8).counts()
    assert counts.params == 4 * 8 + 4 * 8 + 4 + 4 * 6
    assert counts.flops == 4 * (4 * 8 + 2) + 2 * 4 * 6


def test_bad_options_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="must divide"):
        RationalSSM(6, 6, 4, denominators=4)
    with pytest.raises(ValueError, match="unknown RTF init"):
        RationalSSM(2, 2, 4, init="montel")
    with pytest.raises(ValueError, match="keeps its channel count"):
        RationalSSM(2, 3, 4, mixer=False)


def test_direct_form_stays_accurate_where_the_modal_form_does_not() -> None:
    torch.manual_seed(0)
    layer = RationalSSM(8, 8, 16)
    with torch.no_grad():
        layer.a_raw.normal_().mul_(1e-6)  # a just off the zero init: poles on a small circle, clustered
        layer.b.normal_()
    err = modal_error(layer, 500)
    assert err["direct_f32"] < 1e-6
    assert err["modal_f32"] > 1e3 * err["direct_f32"] and err["max_residue"] > 1e5


def test_memory_bound_shrinks_every_pole_and_still_streams_exactly() -> None:
    layer = _slow(seed=6, slack=1e-4).double()
    free = float(layer.poles().abs().max())
    layer.memory = 20.0
    bounded = layer.poles().abs()
    assert float(bounded.max()) < math.exp(-1 / 20) * free + 1e-12
    u = torch.randn(1, 3, 900, dtype=torch.float64)
    with torch.no_grad():
        y, _ = run_chunked(layer, u, random_chunks(900, seed=2, high=300))
        assert rel_err(y, layer(u)) < 1e-9
    with pytest.raises(ValueError, match="memory bound"):
        layer.memory = 0.5


def test_kws_backbone_takes_rtf_blocks_with_their_memory_bound() -> None:
    from edgessm.nets.backbone import BlockOptions, centaurus_backbone

    net = centaurus_backbone([8, 8], [4, 6], ["bottleneck", "rtf"], [1, 1], options=BlockOptions(memory_s=0.5))
    rtf = [m for m in net.modules() if isinstance(m, RationalSSM)]
    assert len(rtf) == 1 and rtf[0].memory == 0.5 * 16000
