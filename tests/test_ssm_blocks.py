"""Parallel (FFT) vs stepwise (recurrent) equivalence of every SSM block kind."""

from __future__ import annotations

import pytest
import torch
from conftest import random_chunks, randomize, rel_err

from edgessm.ssm import FullSSM, make_ssm, run_chunked
from edgessm.ssm.fftconv import PLANS

# (kind, h_in, h_out, n_states): channel counts in and out differ on purpose
SHAPES = [
    ("depthwise", 3, 5, 4),
    ("pointwise", 4, 6, 12),
    ("bottleneck", 5, 3, 8),
    ("full", 2, 3, 4),
]


def _make(kind: str, h_in: int, h_out: int, n: int, seed: int = 0, **kw):
    torch.manual_seed(seed)
    return randomize(make_ssm(kind, h_in, h_out, n, **kw), seed)


@pytest.mark.parametrize("kind,h_in,h_out,n", SHAPES)
def test_random_chunks_equal_parallel(kind: str, h_in: int, h_out: int, n: int) -> None:
    layer = _make(kind, h_in, h_out, n)
    u = torch.randn(2, h_in, 4608)
    with torch.no_grad():
        y_par = layer(u)
        y_step, state = run_chunked(layer, u, random_chunks(u.shape[-1], seed=1))
    assert y_par.shape == (2, h_out, 4608)
    assert rel_err(y_step, y_par) < 1e-4
    assert all(torch.isfinite(s).all() for s in state)


@pytest.mark.parametrize("kind,h_in,h_out,n", SHAPES)
def test_impulse_response_matches_single_steps(kind: str, h_in: int, h_out: int, n: int) -> None:
    layer = _make(kind, h_in, h_out, n).double()
    length = 300
    with torch.no_grad():
        k = layer.impulse_response(length)  # (H', H, L)
        for i in range(h_in):
            u = torch.zeros(1, h_in, length, dtype=torch.float64)
            u[0, i, 0] = 1.0
            y, _ = run_chunked(layer, u, [1] * length)
            assert rel_err(y[0], k[:, i]) < 1e-10


@pytest.mark.parametrize("kind,h_in,h_out,n", SHAPES)
def test_parallel_matches_time_domain_reference(kind: str, h_in: int, h_out: int, n: int) -> None:
    layer = _make(kind, h_in, h_out, n).double()
    u = torch.randn(2, h_in, 700, dtype=torch.float64)
    with torch.no_grad():
        k = layer.impulse_response(u.shape[-1])
        # direct causal convolution y_j[t] = Σ_i Σ_s k_ji[s] u_i[t-s]
        ref = torch.nn.functional.conv1d(torch.nn.functional.pad(u, (u.shape[-1] - 1, 0)), k.flip(-1))
        assert rel_err(layer(u), ref) < 1e-10


@pytest.mark.parametrize("kind", ["pointwise", "bottleneck"])
def test_every_contraction_plan_agrees(kind: str) -> None:
    torch.manual_seed(3)
    u = torch.randn(3, 4, 513, dtype=torch.float64)
    outs, grads = [], []
    for plan in PLANS:
        layer = _make(kind, 4, 6, 8, seed=5, plan=plan).double()
        y = layer(u)
        (y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)).sum().backward()
        outs.append(y.detach())
        grads.append(torch.cat([p.grad.flatten() for p in layer.parameters()]))
    for y, g in zip(outs[1:], grads[1:], strict=True):
        assert rel_err(y, outs[0]) < 1e-10
        assert rel_err(g, grads[0]) < 1e-8


@pytest.mark.parametrize("kind,h_in,h_out,n", SHAPES)
def test_float64_chunked_is_exact(kind: str, h_in: int, h_out: int, n: int) -> None:
    layer = _make(kind, h_in, h_out, n, seed=7).double()
    u = torch.randn(1, h_in, 2000, dtype=torch.float64)
    with torch.no_grad():
        y_step, _ = run_chunked(layer, u, random_chunks(2000, seed=9, high=300))
        assert rel_err(y_step, layer(u)) < 1e-9


@pytest.mark.parametrize("kind,h_in,h_out,n", SHAPES)
def test_long_chunks_take_the_chunked_scan_exactly(kind: str, h_in: int, h_out: int, n: int) -> None:
    layer = _make(kind, h_in, h_out, n, seed=13).double()
    assert layer.sub_chunk(1024) < 1024  # sub-chunks and three MatMuls, not one (1024 + 2M)^2 matrix
    u = torch.randn(2, h_in, 2 * 1024 + 7, dtype=torch.float64)
    with torch.no_grad():
        y_step, _ = run_chunked(layer, u, [1024, 1024, 7])
        assert rel_err(y_step, layer(u)) < 1e-9


@pytest.mark.parametrize("kind,h_in,h_out,n", SHAPES)
def test_state_stays_finite_for_a_million_steps(kind: str, h_in: int, h_out: int, n: int) -> None:
    layer = _make(kind, h_in, h_out, n, seed=11)
    with torch.no_grad():
        # the slowest modes: Δ at its minimum and the real part near its floor
        layer.modes.dt_log.fill_(-7.0)
        layer.modes.a_log.fill_(-6.0)
    layer.max_step_chunk = 500
    g = torch.Generator().manual_seed(0)
    state = layer.init_state(1)
    peak = 0.0
    with torch.no_grad():
        for _ in range(100):
            y, state = layer.step(torch.randn(1, h_in, 10_000, generator=g), state)
            peak = max(peak, float(y.abs().max()))
    assert all(torch.isfinite(s).all() for s in state)
    assert peak < 1e4


def test_zero_length_chunk_is_a_no_op() -> None:
    layer = _make("bottleneck", 2, 3, 4)
    state = layer.init_state(1)
    y, new = layer.step(torch.zeros(1, 2, 0), state)
    assert y.shape == (1, 3, 0)
    assert all(torch.equal(a, b) for a, b in zip(new, state, strict=True))


def test_state_is_real_and_named() -> None:
    layer = FullSSM(2, 3, 4)
    shapes = layer.state_shapes()
    assert [name for name, _ in shapes] == ["x"]
    assert all(s.dtype == torch.float32 for s in layer.init_state(2))
    assert layer.init_state(2)[0].shape == (2, 3, 2, 8)  # [Re x | Im x] on the last axis


def test_unknown_kind_and_plan_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown SSM kind"):
        make_ssm("lstm", 2, 2, 4)
    layer = make_ssm("pointwise", 2, 2, 4, plan="sideways")
    with pytest.raises(ValueError, match="unknown plan"):
        layer(torch.zeros(1, 2, 8))


def test_real_part_of_a_stays_negative() -> None:
    layer = make_ssm("depthwise", 2, 2, 4)
    with torch.no_grad():
        layer.modes.a_log.fill_(-50.0)  # exp -> 0: the floor keeps Re(A) < 0
    wr, _ = layer.modes.dtA()
    assert (wr < 0).all()


def test_gradients_reach_every_parameter() -> None:
    for kind, h_in, h_out, n in SHAPES:
        layer = _make(kind, h_in, h_out, n)
        layer(torch.randn(2, h_in, 256)).square().mean().backward()
        for name, p in layer.named_parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all(), (kind, name)
            assert p.grad.abs().sum() > 0, (kind, name)


def test_auditory_modes_are_an_erb_spaced_filterbank() -> None:
    import math

    from edgessm.ssm.discretize import auditory_modes

    omega, beta = auditory_modes(32, 16000.0)
    f = omega * 16000 / (2 * math.pi)
    assert torch.all(f[1:] > f[:-1]) and 45 < f[0] < 55 and 7000 < f[-1] < 7201
    erb = 24.7 * (4.37 * f / 1000 + 1)
    assert torch.allclose(2 * beta * 16000 / (2 * math.pi), torch.minimum(erb, f), rtol=1e-6)
    low, _ = auditory_modes(8, 4000.0)  # a level at a quarter of the rate spans its own band
    assert low[-1] * 4000 / (2 * math.pi) < 0.9 * 2000 + 1


def test_auditory_full_block_listens_across_the_band_and_streams() -> None:
    import math

    torch.manual_seed(0)
    s4d = FullSSM(1, 8, 4)
    ear = FullSSM(1, 8, 4, init="auditory", rate=16000.0)
    with torch.no_grad():

        def peaks(layer):  # the frequency (Hz) where each output channel's response peaks
            spectrum = torch.fft.rfft(layer.kernel(4096)[:, 0].double(), 16000).abs()
            return spectrum.argmax(-1).float()

        assert peaks(s4d).max() < 500  # S4D-Lin at one Δ: every resonance below ~300 Hz
        p = peaks(ear)
        assert p.min() < 300 and p.max() > 4000  # the bands spread from the low to the high frequencies
        u = torch.randn(2, 1, 4608)
        y_step, _ = run_chunked(ear, u, random_chunks(u.shape[-1], seed=2))
        assert rel_err(y_step, ear(u)) < 1e-4
        wr, wi = ear.modes.dtA()
        assert float(wi.max()) < math.pi and float(wr.max()) < 0
    with pytest.raises(ValueError, match="auditory"):
        FullSSM(1, 2, 4, init="mel")


@pytest.mark.parametrize("kind,h_in,h_out,n", SHAPES)
def test_bounded_memory_forgets_within_its_steps_and_streams_exactly(kind: str, h_in: int, h_out: int, n: int) -> None:
    """`DiagonalModes.memory = M`: every |Ā| <= exp(-1/M) (an impulse is forgotten by 1/e per M steps), and the
    bounded layer still streams exactly like its parallel form."""
    layer = _make(kind, h_in, h_out, n)
    with torch.no_grad():
        layer.modes.dt_log.fill_(-9.0)  # Δ ~ 1e-4: unbounded, these modes would remember for ~10^4 steps
        slow = layer.impulse_response(400).abs()
        layer.modes.memory = 20.0
        wr, _ = layer.modes.dtA()
        assert float(wr.max()) <= -1 / 20 + 1e-9
        fast = layer.impulse_response(400).abs()
        assert fast[..., 300:].max() < 1e-3 * fast.max()  # 15 memories later: e^-15 of the start
        assert slow[..., 300:].max() > 0.5 * slow.max()
        u = torch.randn(2, h_in, 2000)
        y_step, _ = run_chunked(layer, u, random_chunks(u.shape[-1], seed=2))
        assert rel_err(y_step, layer(u)) < 1e-4


def test_memory_must_be_zero_or_at_least_one_step() -> None:
    layer = _make("pointwise", 4, 6, 12)
    for bad in (0.5, -3.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="unbounded"):
            layer.modes.memory = bad
    layer.modes.memory = 0  # unbounded again
    assert layer.modes.memory == 0.0
