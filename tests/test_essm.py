"""ES-SSM: the Hankel basis, the gate and budgets, FIR and distilled-LDS streaming, export."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import torch
from conftest import random_chunks, rel_err

from edgessm.ssm.distill import cascade_basis, distill_hankel, realization
from edgessm.ssm.essm import BudgetDropout, ElasticSpectralSSM, sample_train_budget, set_budget
from edgessm.ssm.hankel import hankel_basis, hankel_matrix
from edgessm.ssm.stream import StreamSequential, run_chunked

L, KMAX = 256, 16  # small enough for fast tests; every filter is above the float64 floor of a dense solver


@pytest.fixture(autouse=True, scope="module")
def _private_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EDGESSM_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield


def _layer(h_in: int = 3, h_out: int = 4, seed: int = 0, skip: bool = False, **kw) -> ElasticSpectralSSM:
    torch.manual_seed(seed)
    layer = ElasticSpectralSSM(h_in, h_out, length=L, k_max=KMAX, **kw)
    with torch.no_grad():  # random gate (the default bias is constant) and, unless asked, no skip term
        layer.gate_out.weight.normal_()
        layer.gate_out.bias.normal_()
        if not skip:
            layer.D.zero_()
    return layer


def test_hankel_basis_matches_dense_eigendecomposition() -> None:
    n, k = 128, 16
    basis = hankel_basis(n, k, cache=False)
    z = hankel_matrix(n)
    assert z[0, 0] == pytest.approx(2 / (2**3 - 2)) and z[3, 5] == pytest.approx(2 / (10**3 - 10))
    w, v = scipy.linalg.eigh(z, subset_by_index=[n - k, n - 1])
    w, v = w[::-1], v[:, ::-1]
    good = w / w[0] > 1e-9  # where the dense solver itself is accurate
    assert good.sum() >= 12
    assert np.allclose(basis.sigma[good], w[good], rtol=1e-7, atol=0)
    cos = np.abs(np.sum(basis.phi * v, axis=0))
    assert np.all(1 - cos[good] < 1e-9)
    # past the dense solver's floor the factored solver still solves Z φ = σ φ to float64 precision
    residual = np.linalg.norm(z @ basis.phi - basis.phi * basis.sigma, axis=0)
    assert residual.max() < 1e-13 * basis.sigma[0]
    assert np.all(np.diff(basis.sigma) < 0) and np.allclose(np.linalg.norm(basis.phi, axis=0), 1)
    idx = np.argmax(np.abs(basis.phi), axis=0)
    assert np.all(basis.phi[idx, np.arange(k)] > 0)  # sign convention


def test_hankel_basis_is_cached_atomically(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EDGESSM_CACHE", str(tmp_path))
    first = hankel_basis(96, 8)
    files = sorted(p.name for p in (tmp_path / "hankel").iterdir())
    assert files == ["basis_L96_K8_v1.npz"]  # no temporary file left behind
    with np.load(tmp_path / "hankel" / files[0]) as data:
        assert np.array_equal(data["phi"], first.phi) and np.array_equal(data["sigma"], first.sigma)


def test_gate_weights_sum_to_one_over_active_channels_and_vanish_above() -> None:
    layer = _layer().eval()
    u = torch.randn(2, 3, 50)
    for k in (1, 3, 16):
        a = layer.gate_weights(u, k)
        assert a.shape == (2, KMAX, 50)
        assert torch.allclose(a[:, :k].sum(1), torch.ones(2, 50), atol=1e-6)
        assert torch.all(a[:, :k] > 0) and torch.all(a[:, k:] == 0)


def test_budget_dropout_distribution() -> None:
    g = torch.Generator().manual_seed(0)
    draws = [BudgetDropout()(32, g) for _ in range(2000)]
    assert set(draws) <= {2, 3, 4, 6, 8, 12, 16, 24, 32}
    assert 0.15 < draws.count(32) / len(draws) < 0.35 and draws.count(2) > 0  # full budget ≈ 1/8 + snapped
    assert set(BudgetDropout()(12, g) for _ in range(300)) <= {2, 3, 4, 6, 8, 12}


def test_eval_at_budget_equals_training_at_that_sampled_budget() -> None:
    layer = _layer(skip=True)
    u = torch.randn(2, 3, 300)
    layer.train()
    layer.budget_dropout = lambda k_max, generator=None: 5  # control the sampling
    y_train = layer(u)
    assert layer.last_budget == 5
    layer.eval()
    layer.budget = 5
    assert torch.equal(layer(u), y_train)
    assert not torch.allclose(layer(u, budget=6), y_train)
    layer.train()
    layer.budget_dropout = BudgetDropout()
    seen = set()
    for _ in range(20):
        layer(u[..., :8])
        seen.add(layer.last_budget)
    assert len(seen) > 1  # sampled per forward in training
    net = StreamSequential(layer, _layer(4, 3, seed=1))
    k = sample_train_budget(net, BudgetDropout(), torch.Generator().manual_seed(3))  # one budget per update
    net(u[..., :8])
    assert [m.last_budget for m in net.layers] == [k, k]


def test_no_gradient_reaches_channels_above_the_training_budget() -> None:
    layer = _layer(skip=True).train()
    layer.budget_dropout = lambda k_max, generator=None: 6
    layer(torch.randn(2, 3, 200)).square().mean().backward()
    assert torch.all(layer.M.grad[6:] == 0) and torch.all(layer.M.grad[:6].abs().sum((1, 2)) > 0)
    assert torch.all(layer.gate_out.weight.grad[6:] == 0) and torch.all(layer.gate_out.bias.grad[6:] == 0)
    assert layer.gate_out.weight.grad[:6].abs().sum() > 0
    assert layer.D.grad.abs().sum() > 0 and layer.gate_in.weight.grad.abs().sum() > 0  # shared by every budget


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_fir_stream_equals_fft_forward(dtype: torch.dtype, tol: float) -> None:
    layer = _layer(skip=True).to(dtype).eval()
    u = torch.randn(2, 3, 3 * L + 17, dtype=dtype)  # longer than L: the window slides
    with torch.no_grad():
        for k in (16, 7, 1):
            layer.budget = k
            y, state = run_chunked(layer, u, random_chunks(u.shape[-1], seed=k, high=300))
            assert rel_err(y, layer(u)) < tol
            assert state[0].shape == (2, 3, L - 1)
        y_tm, _ = layer.step_tm(u[..., :100].transpose(1, 2), layer.init_state(2, dtype=dtype))  # time-major form
        assert rel_err(y_tm.transpose(1, 2), layer(u[..., :100])) < tol


def test_distilled_lds_stream_matches_the_fft_layer_in_float32() -> None:
    layer = _layer().eval()
    u = torch.randn(2, 3, L)
    with torch.no_grad():
        for k in (16, 8, 3):
            layer.budget = k
            layer.mode = "fir"
            y_fir = layer(u)
            layer.mode = "lds"
            y_lds, state = run_chunked(layer, u, random_chunks(L, seed=k, high=100))
            assert rel_err(y_lds, y_fir) < 1e-3  # the distillation error (tol 3e-4 per filter)
            assert state[0].shape == (2, 3, layer.bank.states(k))
        # past L the LDS continues its filters: forward and step compute that same function
        v = torch.randn(1, 3, 4 * L)
        y, _ = run_chunked(layer, v, random_chunks(v.shape[-1], seed=5, high=400))
        assert rel_err(y, layer(v)) < 1e-5


def test_distilled_bank_is_nested_orthonormal_and_well_conditioned() -> None:
    bank = distill_hankel(L, KMAX)
    s = bank.n_states
    assert np.all(np.diff(s) >= 0) and s[0] >= 1 and len(bank.poles) == s[-1]
    for k in range(KMAX):
        assert np.all(bank.readout[s[k] :, k] == 0)  # filter k reads only the first S_k states
    assert np.all(bank.error <= bank.tol * 1.001)
    assert np.all(bank.poles >= 0) and bank.poles.max() <= 1 - 1 / L
    assert np.abs(bank.readout).max() < 1e3  # plain least squares in the modal basis: |C| ~ 1e4..1e9
    a, b = realization(bank.poles)
    assert np.allclose(np.triu(a, 1), 0) and np.allclose(a @ a.T + np.outer(b, b), np.eye(len(b)), atol=1e-13)
    v, x = bank.basis(40), b.copy()
    for t in range(40):  # the cascade's impulse response is the state recurrence's
        assert np.allclose(v[t], x, atol=1e-14)
        x = a @ x
    phi = hankel_basis(L, KMAX).phi
    fit = bank.kernels(L)
    assert np.all(np.linalg.norm(fit - phi, axis=0) <= bank.tol * 1.001)
    # negative (alternating) poles realise the same way
    a, b = realization(np.array([0.5, -0.7, 0.0, 0.99]))
    assert np.allclose(a @ a.T + np.outer(b, b), np.eye(4), atol=1e-15)
    v = cascade_basis(np.array([0.5, -0.7, 0.0, 0.99]), 3000)
    assert np.allclose(v.T @ v, np.eye(4), atol=1e-10)  # orthonormal over all lags


def test_budget_switch_mid_stream_is_exact() -> None:
    layer = _layer(mode="lds").eval()
    u = torch.randn(1, 3, 900)
    cuts = [(0, 300, 12), (300, 520, 4), (520, 700, 16), (700, 900, 2)]
    with torch.no_grad():
        refs = {k: layer(u, budget=k) for _, _, k in cuts}
        layer.state_budget = KMAX  # carry every state: any budget can be read at any time
        state = layer.init_state(1)
        for a, b, k in cuts:
            layer.budget = k
            y, state = run_chunked(layer, u[..., a:b], random_chunks(b - a, seed=a, high=90), state)
            assert rel_err(y, refs[k][..., a:b]) < 1e-5
        # without the spare states: lowering the budget keeps a prefix of the state, exactly
        layer.state_budget = None
        layer.budget = 12
        _, state = run_chunked(layer, u[..., :400], [400])
        layer.budget = 3
        state = layer.resize_state(state)
        assert state[0].shape[-1] == layer.bank.states(3) < layer.bank.states(12)
        y1, _ = run_chunked(layer, u[..., 400:], [250, 250], state)
        assert rel_err(y1, layer(u, budget=3)[..., 400:]) < 1e-5
        layer.budget = 12
        with pytest.raises(ValueError, match="state_budget"):
            layer.step(u[..., :10], layer.resize_state(state, 3))


def test_fir_budget_switch_is_exact() -> None:
    layer = _layer().eval()
    u = torch.randn(1, 3, 700)
    with torch.no_grad():
        state = layer.init_state(1)
        for a, b, k in [(0, 333, 16), (333, 700, 5)]:
            layer.budget = k
            y, state = layer.step(u[..., a:b], state)
            assert rel_err(y, layer(u, budget=k)[..., a:b]) < 1e-5


def test_smaller_budget_streams_fewer_states_and_flops() -> None:
    layer = _layer(mode="lds")
    counts = {}
    for k in (2, 4, 8, 16):
        layer.budget = k
        counts[k] = layer.counts()
        assert layer.state_shapes() == [("x", (3, layer.bank.states(k)))]
        assert layer.filter_flops("lds") < layer.filter_flops("fir")
    assert [layer.bank.states(k) for k in (2, 4, 8, 16)] == sorted({layer.bank.states(k) for k in (2, 4, 8, 16)})
    assert counts[2].flops < counts[4].flops < counts[8].flops < counts[16].flops
    assert counts[2].params < counts[16].params
    assert layer.choose_mode() == "lds" and layer.choose_mode(max_error=1e-9) == "fir"
    fir = _layer(mode="fir")
    assert fir.counts().flops > counts[16].flops
    net = StreamSequential(_layer(), _layer(4, 2, mode="lds"))
    set_budget(net, 3)
    assert [m.budget for m in net.layers] == [3, 3]


@pytest.mark.parametrize("mode", ["fir", "lds"])
def test_stepwise_layer_exports_to_onnx_at_two_budgets(mode: str, tmp_path) -> None:
    from edgessm.deploy.onnx_export import NPU_FRIENDLY_OPS, export_onnx

    layer = _layer(1, 3, skip=True, mode=mode)
    x = (0.3 * np.random.default_rng(0).normal(size=64 * 10)).astype(np.float32)
    for k in (4, 12):
        layer.budget = k
        report = export_onnx(layer, tmp_path / f"essm{k}.onnx", 64, {"task": "test"}, [x])
        assert report.max_abs_error < 1e-4
        assert set(report.op_census) <= NPU_FRIENDLY_OPS, report.unfriendly_ops
        assert report.metadata["states"] == f'[["{layer.state_shapes()[0][0]}", [1, {layer.n_states(k)}]]]'


def test_distill_benchmark_runs(capsys) -> None:
    from edgessm.bench.distill import main

    assert main(["--lengths", "128", "--kmax", "8", "--tols", "1e-3"]) == 0
    out = capsys.readouterr().out
    assert "L=128" in out and "states per budget" in out
