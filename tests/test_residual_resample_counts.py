"""Residual block, resampling layers, whole-network streaming, and the Table 3 counter."""

from __future__ import annotations

import pytest
import torch
from conftest import random_chunks, randomize, rel_err

from edgessm.ssm import (
    AvgPool,
    BottleneckSSM,
    CausalDepthwiseConv,
    CentaurusBlock,
    DepthwiseSSM,
    DownConv,
    FullSSM,
    PointwiseBottleneckSSM,
    StreamSequential,
    UpConv,
    flops_per_second,
    run_chunked,
    trainable_parameters,
)


@pytest.mark.parametrize("pre_conv", [0, 4])
@pytest.mark.parametrize(
    "kind,h_in,h_out", [("full", 1, 4), ("bottleneck", 4, 8), ("pointwise", 8, 8), ("depthwise", 6, 3)]
)
def test_residual_block_streams_exactly(kind: str, h_in: int, h_out: int, pre_conv: int) -> None:
    torch.manual_seed(0)
    block = randomize(CentaurusBlock(kind, h_in, h_out, 8, pre_conv=pre_conv, dropout=0.1), seed=2).eval()
    u = torch.randn(2, h_in, 4096)
    with torch.no_grad():
        y_step, _ = run_chunked(block, u, random_chunks(4096, seed=4))
        assert rel_err(y_step, block(u)) < 1e-4


def test_single_channel_norm_is_identity_and_skip_projects() -> None:
    block = CentaurusBlock("full", 1, 1, 4, skip=False, activation=False)
    u = torch.randn(1, 1, 64)
    assert torch.allclose(block(u), block.ssm(u))
    assert CentaurusBlock("pointwise", 4, 8, 8).proj is not None
    assert CentaurusBlock("pointwise", 8, 8, 8).proj is None


def test_causal_conv_has_no_lookahead() -> None:
    conv = CausalDepthwiseConv(3, 4)
    u = torch.randn(1, 3, 50)
    v = u.clone()
    v[..., 30:] += 1.0
    assert torch.equal(conv(u)[..., :30], conv(v)[..., :30])


def _backbone(channels=(2, 4, 8, 16, 32, 64), states=(4, 4, 16, 32, 64, 128)) -> StreamSequential:
    """The paper's hybrid KWS backbone (Table 4; first row by default) with pooling 4,4,2,2,2,2."""
    kinds = ["full", "full", "bottleneck", "bottleneck", "pointwise", "pointwise"]
    pools = [4, 4, 2, 2, 2, 2]
    layers = []
    c_in = 1
    for i, (c, n, kind, r) in enumerate(zip(channels, states, kinds, pools, strict=True)):
        layers += [CentaurusBlock(kind, c_in, c, n, skip=i > 0), AvgPool(r)]
        c_in = c
    return StreamSequential(*layers)


def test_network_streams_in_chunks_of_its_stride() -> None:
    torch.manual_seed(0)
    net = randomize(_backbone(), seed=3).eval()
    assert net.chunk_multiple == 256
    u = torch.randn(1, 1, 256 * 24)
    sizes = [256 * s for s in random_chunks(24, seed=5, high=5)]
    with torch.no_grad():
        y_step, _ = run_chunked(net, u, sizes)
        y = net(u)
    assert y.shape == (1, 64, 24)
    assert rel_err(y_step, y) < 1e-4


def test_network_rejects_chunks_off_its_stride() -> None:
    net = _backbone()
    with pytest.raises(ValueError, match="multiple of 256"):
        net.step(torch.zeros(1, 1, 100), net.init_state(1))


def test_hourglass_pieces_stream() -> None:
    torch.manual_seed(0)
    net = StreamSequential(DownConv(1, 4, 4), CentaurusBlock("pointwise", 4, 4, 8), UpConv(4, 1, 4))
    u = torch.randn(1, 1, 4000)
    with torch.no_grad():
        y_step, _ = run_chunked(net, u, [4 * s for s in random_chunks(1000, seed=1, high=90)])
        assert rel_err(y_step, net(u)) < 1e-4
    assert net.rate == 1 and net.chunk_multiple == 4


def test_pooling_rejects_ragged_length() -> None:
    with pytest.raises(ValueError, match="multiple of 4"):
        AvgPool(4)(torch.zeros(1, 1, 10))


# Table 3 of the paper, evaluated by hand for concrete shapes: (params, FLOPs per step)
@pytest.mark.parametrize(
    "layer,params,flops",
    [
        (DepthwiseSSM(4, 8, 4), 3 * 4 * 4 + 32, 9 * 16 + 64),  # 3HN + HH', 9HN + 2HH'
        (DepthwiseSSM(16, 16, 8, mixer=False), 384, 1152),  # depthwise only: 3HN, 9HN
        (PointwiseBottleneckSSM(16, 32, 64), 16 * 64 + 128 + 32 * 64, 2 * 16 * 64 + 7 * 64 + 2 * 32 * 64),
        (BottleneckSSM(4, 8, 16, 4), 64 + 3 * 64 + 128, 128 + 9 * 64 + 256),
        (BottleneckSSM(8, 16, 32, 4), 256 + 384 + 512, 512 + 1152 + 1024),
        (FullSSM(1, 2, 4), 24, 72),
        (FullSSM(2, 4, 4), 96, 288),
    ],
)
def test_table3_counts(layer, params: int, flops: int) -> None:
    c = layer.counts()
    assert c.params == params
    assert c.flops == flops


def test_inference_params_fold_delta() -> None:
    # Δ is absorbed at inference: inference params = trainable params - Δ entries (App. D)
    for layer in [
        BottleneckSSM(4, 8, 16, 4),
        PointwiseBottleneckSSM(16, 32, 64),
        FullSSM(2, 4, 4),
        DepthwiseSSM(4, 8, 4),
    ]:
        a = layer.modes
        n_dt = a.dt_log.numel()
        # a_log and a_im are one complex A (2 numbers per mode); E and projections count once
        assert trainable_parameters(layer) - n_dt == layer.counts().params


def test_network_flops_per_second() -> None:
    net = _backbone()
    fps = flops_per_second(net, 16000)
    # first block alone: full 1->2, N=4 at 16 kHz: 9*1*2*4 FLOPs per sample
    first = net.layers[0].counts().flops * 16000
    assert first == 9 * 8 * 16000
    assert fps > first
    # each later block runs at its pooled rate, so the total stays far below 16000 * all-blocks
    naive = sum(layer.counts().flops for layer in net.layers) * 16000
    assert fps < naive


def test_paper_kws_hybrid_size_and_compute() -> None:
    """The largest hybrid KWS row of Table 4 counts as the paper reports: 0.378M params, 0.134 GFLOP/s."""
    net = _backbone((8, 16, 32, 64, 128, 256), (4, 4, 64, 128, 256, 512))
    c = 256
    head = c * c + c * 35  # 2-layer MLP head on the 256 backbone features (biases not counted, App. D)
    params = net.counts().params + head
    assert abs(params / 0.378e6 - 1) < 0.03
    assert abs(flops_per_second(net, 16000) / 0.134e9 - 1) < 0.03
