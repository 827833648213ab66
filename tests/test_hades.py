"""The HADES block: the chunked scan is the recurrence, streaming = parallel, routing, losses, export."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import random_chunks, rel_err

from edgessm.ssm import CentaurusBlock, HadesSSM, StreamSequential, auxiliary_loss, make_ssm, run_chunked
from edgessm.ssm.hades import _softplus


def _layer(seed: int = 0, **kw) -> HadesSSM:
    torch.manual_seed(seed)
    options = {"shared": 2, "experts": 4, "top_q": 2, "head_dim": 3, "chunk": 16} | kw
    layer = HadesSSM(6, 5, 4, **options)
    with torch.no_grad():
        for p in layer.parameters():  # move off the initialisation, into the range training reaches
            p.add_(0.3 * torch.randn_like(p))
    return layer


def _reference(layer: HadesSSM, u: torch.Tensor) -> torch.Tensor:
    """The recurrence frame by frame (eq. 4, 6, 13, 14) with explicit top-Q routing, float64."""
    b, _, length = u.shape
    m, p, n, s = layer.heads, layer.head_dim, layer.n_states, layer.shared
    h = torch.zeros(b, m, n, p, dtype=u.dtype)
    mu = torch.zeros(b, layer.h_in, dtype=u.dtype)
    total, outs = torch.zeros_like(mu), []
    for t in range(length):
        ut = u[:, :, t]
        if layer.mean == "ema":
            mu = layer.decay * mu + (1 - layer.decay) * ut
        else:
            total = total + ut
            mu = total / (t + 1)
        x, bm, cm, base = layer.in_proj(ut).split([m * p, n, n, m], dim=-1)
        x = x.reshape(b, m, p)
        weights = torch.ones(b, m, dtype=u.dtype)
        bias = torch.zeros(b, m, dtype=u.dtype)
        if layer.experts:
            scores, eb = layer.router(torch.cat([base, ut - mu], -1)).split(layer.experts, -1)
            bias[:, s:] = layer.gamma * eb
            probs = torch.softmax(scores, -1)
            top = torch.zeros_like(probs).scatter(-1, scores.topk(layer.top_q, -1).indices, 1.0)
            weights[:, s:] = layer.top_q * top * probs / (top * probs).sum(-1, keepdim=True)
        dt = torch.nn.functional.softplus(base + layer.dt_bias + bias)
        a = torch.exp(-dt * torch.exp(layer.A_log))
        h = a[..., None, None] * h + (dt[..., None] * x)[:, :, None, :] * bm[:, None, :, None]
        y = (cm[:, None, None, :] @ h).squeeze(-2) + layer.D[:, None] * x
        outs.append(layer.out_proj((y * weights[..., None]).reshape(b, m * p)))
    return torch.stack(outs, -1)


@pytest.mark.parametrize("kw", [{}, {"mean": "cumulative"}, {"experts": 0}, {"shared": 0}, {"chunk": 5}])
def test_chunked_scan_is_the_recurrence(kw: dict) -> None:
    layer = _layer(**kw).double()
    u = torch.randn(2, 6, 70, dtype=torch.float64)
    with torch.no_grad():
        assert rel_err(layer(u), _reference(layer, u)) < 1e-9


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.float64, 1e-9)])
def test_random_chunks_equal_parallel(dtype: torch.dtype, tol: float) -> None:
    layer = _layer(seed=1).to(dtype)
    u = torch.randn(2, 6, 900, dtype=dtype)
    with torch.no_grad():
        y = layer(u)
        ys, state = run_chunked(layer, u, random_chunks(900, seed=4, high=120))
    assert rel_err(ys, y) < tol
    assert all(torch.isfinite(s).all() for s in state)


def test_router_weighs_exactly_q_experts_and_every_shared_head() -> None:
    layer = _layer(seed=2, experts=6, top_q=3)
    base = torch.randn(2, 50, layer.heads)
    r = torch.randn(2, 50, layer.h_in)
    with torch.no_grad():
        bias, weights, probs = layer._route(base, r)
    assert torch.equal(weights[..., : layer.shared], torch.ones(2, 50, layer.shared))
    experts = weights[..., layer.shared :]
    assert torch.equal((experts > 0).sum(-1), torch.full((2, 50), 3))
    assert torch.allclose(experts.sum(-1), torch.full((2, 50), 3.0))
    assert torch.allclose(probs.sum(-1), torch.ones(2, 50))
    assert bias[..., : layer.shared].abs().max() == 0  # shared heads run on the base Δ


def test_losses_train_the_router_and_the_experts() -> None:
    layer = _layer(seed=3)
    block = StreamSequential(CentaurusBlock("hades", 6, 6, 4, shared=2, experts=4, top_q=1, head_dim=3))
    block.train()
    u = torch.randn(3, 6, 40)
    task = (block(u) ** 2).mean()
    aux, parts = auxiliary_loss(block)
    assert aux is not None and set(parts) == {"balance", "diversity"} and torch.isfinite(aux)
    (task + aux).backward()
    for name, p in block.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert block.layers[0].ssm.router.weight.grad.abs().sum() > 0
    layer.eval()
    layer(u)
    assert auxiliary_loss(layer) == (None, {})  # inference leaves nothing behind


def test_running_means_for_live_streams() -> None:
    """The exponential mean keeps following the input after a long stream; the cumulative one freezes."""
    u = torch.ones(1, 6, 3000)
    u[..., 2000:] = -1.0
    for mean, moved in (("ema", True), ("cumulative", False)):
        layer = _layer(mean=mean, mean_frames=50)
        lower = torch.tril(torch.ones(3000, 3000))
        mu, _ = layer._running_mean(u.transpose(1, 2), layer.init_state(1)[:-1], lower)
        assert (float(mu[0, -1, 0]) < -0.99) is moved, mean


def test_softplus_without_a_softplus_node() -> None:
    x = torch.linspace(-60, 60, 1001, dtype=torch.float64)
    assert rel_err(_softplus(x), torch.logaddexp(x, torch.zeros_like(x))) < 1e-12  # F.softplus cuts at 20


def test_bad_options_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="top_q"):
        make_ssm("hades", 4, 4, 8, experts=2, top_q=3)
    with pytest.raises(ValueError, match="at least one head"):
        make_ssm("hades", 4, 4, 8, shared=0, experts=0)
    with pytest.raises(ValueError, match="running mean"):
        make_ssm("hades", 4, 4, 8, mean="median")


def test_exports_exactly_with_npu_friendly_ops(tmp_path) -> None:
    from edgessm.deploy.onnx_export import export_onnx

    torch.manual_seed(0)
    net = StreamSequential(CentaurusBlock("rtf", 1, 6, 4), CentaurusBlock("hades", 6, 6, 4, pre_conv=3, chunk=8))
    x = (0.3 * np.random.default_rng(0).normal(size=64 * 20)).astype(np.float32)
    report = export_onnx(net.eval(), tmp_path / "h.onnx", 64, {"task": "test"}, [x])
    assert report.max_abs_error < 1e-4
    assert not report.unfriendly_ops, report.unfriendly_ops
    assert not {"TopK", "CumSum", "Softplus", "Einsum", "Loop", "Scan"} & set(report.op_census)
