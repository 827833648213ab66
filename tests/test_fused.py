"""The fused Triton kernels (edgessm.ssm.fused) against the PyTorch paths, on CPU under Triton's interpreter.

CI has no GPU: ``TRITON_INTERPRET=1`` runs the very kernels the GPU compiles, one program at a time in
numpy. Every test here also checks that the fused path was taken (``fused.CALLS``), so a silent fallback to
PyTorch fails it.
"""

from __future__ import annotations

import pytest
import torch

from edgessm.ssm import fused
from edgessm.ssm.kernels import modal_kernel, modal_kernel_reference

pytestmark = [
    pytest.mark.skipif(fused.triton_version() is None, reason="Triton is not installed here"),
    pytest.mark.skipif(
        fused.triton_version() is not None and not fused.interpreting(),
        reason="Triton was imported without TRITON_INTERPRET=1 (tests/conftest.py sets it before any import)",
    ),
]


@pytest.fixture
def interpret(monkeypatch):
    monkeypatch.delenv("EDGESSM_FUSED", raising=False)
    fused.CALLS.clear()
    return fused


def _modes(r: int, m: int, seed: int = 0, radius: float = 0.999):
    g = torch.Generator().manual_seed(seed)
    wr = torch.log(torch.empty(r, m).uniform_(0.5, radius, generator=g))  # |Ā| in [0.5, radius)
    wi = torch.empty(r, m).uniform_(-3.1, 3.1, generator=g)
    c = torch.randn(r, m, generator=g)
    return wr, wi, c


@pytest.mark.parametrize(("r", "m", "length"), [(1, 1, 1), (1, 1, 7), (5, 3, 37), (17, 16, 129), (3, 2, 3001)])
def test_fused_modal_kernel_and_its_gradients_match_float64(interpret, r, m, length) -> None:
    """Odd row counts and lengths (partial tiles), N = M = 1, one tap, and a long kernel whose phases
    l·wi reach thousands of radians (reduced in float64 in the kernel, as in PyTorch)."""
    wr, wi, c = (t.requires_grad_() for t in _modes(r, m))
    k = modal_kernel(wr, wi, c, length, fused=True)
    assert interpret.CALLS["modal_fwd"] == 1 and k.shape == (r, length) and k.dtype == torch.float32
    g = torch.randn(r, length, generator=torch.Generator().manual_seed(1))
    grads = torch.autograd.grad((k * g).sum(), (wr, wi, c))
    assert interpret.CALLS["modal_bwd"] == 1
    ref_in = [t.detach().double().requires_grad_() for t in (wr, wi, c)]
    ref = modal_kernel_reference(*ref_in, length)
    ref_grads = torch.autograd.grad((ref * g.double()).sum(), ref_in)
    scale = ref.abs().max().clamp_min(1e-30)
    assert (k.double() - ref).abs().max() / scale < 2e-6
    for got, want in zip(grads, ref_grads, strict=True):
        assert (got.double() - want).abs().max() <= 2e-5 * want.abs().max() + 1e-7 * length


def test_fused_kernel_broadcasts_like_the_pytorch_path(interpret) -> None:
    """(..., M) leading shapes and a broadcast weight, as the blocks call it."""
    wr, wi, _ = _modes(6, 4)
    wr, wi = wr.reshape(2, 3, 4), wi.reshape(2, 3, 4)
    ones = torch.ones(())
    got = modal_kernel(wr, wi, ones, 50, fused=True)
    want = modal_kernel(wr, wi, ones, 50, fused=False)
    assert got.shape == (2, 3, 50) and torch.allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["depthwise", "pointwise", "bottleneck", "full"])
def test_blocks_take_the_fused_path_and_match_pytorch(interpret, monkeypatch, kind) -> None:
    """A whole SSM layer, forward and backward, with EDGESSM_FUSED=1 (demanded) vs =0 (never)."""
    from edgessm.ssm.factory import make_ssm

    torch.manual_seed(0)
    layer = make_ssm(kind, 6, 6, 8, n_sub=3)
    u = torch.randn(2, 6, 45)
    results = {}
    for mode in ("0", "1"):
        monkeypatch.setenv("EDGESSM_FUSED", mode)
        layer.zero_grad()
        y = layer(u)
        (y * torch.linspace(-1, 1, y.numel()).reshape(y.shape)).sum().backward()
        results[mode] = (y.detach(), [p.grad.clone() for p in layer.parameters() if p.grad is not None])
    assert interpret.CALLS["modal_fwd"] >= 1 and interpret.CALLS["modal_bwd"] >= 1
    (y0, g0), (y1, g1) = results["0"], results["1"]
    assert torch.allclose(y1, y0, rtol=1e-4, atol=1e-5)
    assert len(g0) == len(g1) > 0
    for a, b in zip(g1, g0, strict=True):
        assert torch.allclose(a, b, rtol=1e-3, atol=1e-5 * (1 + b.abs().max()))


def test_a_demanded_fused_path_never_falls_back_in_silence(monkeypatch) -> None:
    monkeypatch.setattr("edgessm.ssm.fused.launch.interpreting", lambda: False)  # as on a CPU without the interpreter
    wr, wi, c = _modes(2, 2)
    with pytest.raises(fused.FusedUnavailable, match="CUDA tensors"):
        modal_kernel(wr, wi, c, 10, fused=True)
    monkeypatch.setenv("EDGESSM_FUSED", "1")
    with pytest.raises(fused.FusedUnavailable, match="EDGESSM_FUSED=1"):
        modal_kernel(wr, wi, c, 10)
    monkeypatch.undo()
    monkeypatch.setenv("EDGESSM_FUSED", "1")
    with pytest.raises(fused.FusedUnavailable, match="float32"):
        modal_kernel(wr.double(), wi.double(), c.double(), 10)


def test_cpu_default_is_the_pytorch_path(monkeypatch) -> None:
    monkeypatch.delenv("EDGESSM_FUSED", raising=False)  # the interpreter could run it: still PyTorch on CPU
    fused.CALLS.clear()
    modal_kernel(*_modes(2, 2), 10)
    assert not fused.CALLS and not fused.use_fused(torch.zeros(1))


@pytest.mark.parametrize(("b", "h", "n", "j", "f"), [(1, 1, 1, 1, 1), (2, 5, 7, 3, 33), (3, 16, 40, 20, 70)])
def test_fused_contraction_and_its_gradients_match_complex128(interpret, b, h, n, j, f) -> None:
    """ŷ = C (k̂ ⊙ B̄ û) and all four gradients, against an einsum in complex128; sizes below, at and above
    the 16-wide tiles (padding and masks)."""
    g = torch.Generator().manual_seed(0)
    uf = torch.randn(b, h, f, dtype=torch.complex128, generator=g).requires_grad_()
    kf = torch.randn(n, f, dtype=torch.complex128, generator=g).requires_grad_()
    bb = torch.randn(n, h, dtype=torch.float64, generator=g).requires_grad_()
    cc = torch.randn(j, n, dtype=torch.float64, generator=g).requires_grad_()
    y = fused.project_convolve(uf.to(torch.complex64), kf.to(torch.complex64), bb.float(), cc.float())
    assert y.dtype == torch.complex64 and y.shape == (b, j, f) and interpret.CALLS["project_convolve_fwd"] == 1
    ref = torch.einsum("jn,nf,ni,bif->bjf", cc.to(uf.dtype), kf, bb.to(uf.dtype), uf)
    assert (y - ref).abs().max() <= 1e-6 * ref.abs().max()
    gy = torch.randn(b, j, f, dtype=torch.complex128, generator=g)
    got = torch.autograd.grad((y * gy.conj()).real.sum(), (uf, kf, bb, cc))
    want = torch.autograd.grad((ref * gy.conj()).real.sum(), (uf, kf, bb, cc))
    assert interpret.CALLS["project_convolve_bwd"] == 1
    for a, w in zip(got, want, strict=True):
        assert (a - w).abs().max() <= 2e-6 * w.abs().max() + 1e-6  # terms are O(1): float32 rounding


def test_bottleneck_natural_frequency_order_takes_the_fused_contraction(interpret, monkeypatch) -> None:
    from edgessm.ssm.blocks import BottleneckSSM

    torch.manual_seed(0)
    layer = BottleneckSSM(6, 5, 20, 3, plan="natural-freq")
    u = torch.randn(2, 6, 37)
    out = {}
    for mode in ("0", "1"):
        monkeypatch.setenv("EDGESSM_FUSED", mode)
        layer.zero_grad()
        y = layer(u)
        y.square().mean().backward()
        out[mode] = (y.detach(), [p.grad.clone() for p in layer.parameters()])
    assert interpret.CALLS["project_convolve_fwd"] == 1 and interpret.CALLS["project_convolve_bwd"] == 1
    assert torch.allclose(out["1"][0], out["0"][0], rtol=1e-4, atol=1e-6)
    for a, b in zip(out["1"][1], out["0"][1], strict=True):
        assert torch.allclose(a, b, rtol=1e-3, atol=1e-6 * (1 + b.abs().max()))


@pytest.mark.parametrize(("r", "s", "f", "k"), [(1, 7, 1, 2), (5, 32, 3, 2), (130, 40, 2, 4), (64 * 65 + 3, 16, 1, 2)])
def test_fused_front_row_energy_and_its_gradients_match_float64(interpret, r, s, f, k) -> None:
    """q[r, f] = Σ_t (x wx[f] + h[:, f] wh[f])² and all four gradients against float64 einsums: one row, a chunk
    that is no power of two (masked tiles), and more row blocks than the weight gradient's splits (each split
    walks several blocks, the last ones past the end)."""
    from edgessm.ssm.fused.front import BLOCK_R, SPLITS

    assert -(-(64 * 65 + 3) // BLOCK_R) > SPLITS  # the last case still has more row blocks than splits
    g = torch.Generator().manual_seed(0)
    ref_in = [torch.randn(*shape, dtype=torch.float64, generator=g).requires_grad_()
              for shape in ((r, s), (r, f, k), (f, s, s), (f, k, s))]  # fmt: skip
    x, h, wx, wh = ref_in
    ref = (torch.einsum("rs,fst->rft", x, wx) + torch.einsum("rfk,fkt->rft", h, wh)).square().sum(-1)
    got_in = [t.detach().float().requires_grad_() for t in ref_in]
    q = fused.row_energy(*got_in)
    assert q.shape == (r, f) and q.dtype == torch.float32 and interpret.CALLS["front_energy_fwd"] == 1
    assert (q.double() - ref).abs().max() <= 1e-6 * ref.abs().max()
    gq = torch.randn(r, f, dtype=torch.float64, generator=g)
    got = torch.autograd.grad((q * gq.float()).sum(), got_in)
    want = torch.autograd.grad((ref * gq).sum(), ref_in)
    assert interpret.CALLS["front_energy_bwd"] == 1
    for a, w in zip(got, want, strict=True):
        assert (a.double() - w).abs().max() <= 2e-6 * w.abs().max()
    with pytest.raises(ValueError, match=r"wx \(F, S, S\)"):
        fused.row_energy(got_in[0], got_in[1], got_in[2][:, :1], got_in[3])


def test_filterbank_front_chunked_plan_takes_the_fused_kernel_and_matches_the_fft_path(interpret, monkeypatch) -> None:
    """The front's `chunked` plan with EDGESSM_FUSED=1 (32-sample chunks, the kernel) against the default FFT
    path with EDGESSM_FUSED=0: log energies, and the gradients of the input and every filter parameter."""
    from conftest import randomize

    from edgessm.ssm.filterbank import FilterbankFront, chunk_samples

    assert chunk_samples(160, fused=True) == 32 and chunk_samples(160) == 40  # power-of-two tiles when fused
    assert chunk_samples(192, fused=True) == 64 and chunk_samples(100, fused=True) == 50  # 4 is too small a tile
    torch.manual_seed(0)
    front = randomize(FilterbankFront(bands=5, states=2, pool=160), dynamics=False)
    x = (0.1 * torch.randn(2, 1, 160 * 7)).requires_grad_()
    out = {}
    for plan, mode in (("fft", "0"), ("chunked", "1")):
        monkeypatch.setenv("EDGESSM_FUSED", mode)
        front.plan = plan
        front.zero_grad()
        x.grad = None
        e = front(x)
        (e * torch.linspace(-1, 1, e.numel()).reshape(e.shape)).sum().backward()
        out[plan] = (e.detach(), [x.grad.clone(), *(p.grad.clone() for p in front.parameters())])
    assert interpret.CALLS["front_energy_fwd"] == 1 and interpret.CALLS["front_energy_bwd"] == 1
    (e0, g0), (e1, g1) = out["fft"], out["chunked"]
    assert torch.allclose(e1, e0, rtol=1e-5, atol=1e-5)
    for a, b in zip(g1, g0, strict=True):
        assert torch.allclose(a, b, rtol=1e-3, atol=1e-5 * (1 + b.abs().max()))


def test_fused_front_traces_into_one_graph(interpret) -> None:
    """The fused front is a PyTorch operator (torch.library): torch.compile sees the front whole, no graph break."""
    from edgessm.ssm.filterbank import FilterbankFront

    front = FilterbankFront(bands=4, pool=160)
    front.plan, front.fused = "chunked", True
    explained = torch._dynamo.explain(front)(torch.randn(2, 1, 1600))
    assert explained.graph_break_count == 0, [str(b.reason)[:200] for b in explained.break_reasons]
    assert explained.graph_count == 1


def test_fused_front_multiplies_in_tf32_inside_a_half_precision_network(interpret, monkeypatch) -> None:
    """Under bf16 autocast (or with bf16 activations) the float32 island of the front asks its kernel for TF32
    products; in float32 training it does not (the interpreter multiplies in float32 either way)."""
    from edgessm.ssm.filterbank import FilterbankFront
    from edgessm.ssm.fused import front as fused_front

    seen, real = [], fused_front.row_energy
    monkeypatch.setattr(fused_front, "row_energy", lambda *a, tf32=False: seen.append(tf32) or real(*a, tf32=tf32))
    front = FilterbankFront(bands=3, pool=160)
    front.plan, front.fused = "chunked", True
    x = torch.randn(1, 1, 320)
    front(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        front(x)
    assert front(x.bfloat16()).dtype == torch.bfloat16
    assert seen == [False, True, True]
