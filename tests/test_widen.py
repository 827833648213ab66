"""Growing a trained network to more channels (``edgessm.nets.widen``): the same function, then free to move."""

from __future__ import annotations

import pytest
import torch
from conftest import randomize

from edgessm.nets import build_network
from edgessm.nets.widen import widen_weights
from edgessm.ssm.stream import run_chunked

SMALL = {"arch": "spectral", "hop": 32, "bands": 8, "fine_bins": 4, "channels": [8, 8, 8], "states": [4, 4, 6],
         "kinds": ["bottleneck", "bottleneck", "pointwise"], "pre_conv": 4, "df_order": 3, "df_bins": 4}  # fmt: skip


def _net(**over):
    torch.manual_seed(0)
    return randomize(build_network("denoise", **{**SMALL, **over}), seed=1, dynamics=False).eval()


@pytest.mark.parametrize("channels", [[16, 16, 16], [24, 24, 24]])
def test_a_widened_denoiser_computes_what_the_narrow_one_did(channels: list[int]) -> None:
    """Each stream channel repeated, the weights that read the stream split: the wider network's output equals
    the trained one's, on the whole signal and streamed in chunks."""
    small = _net()
    with torch.no_grad():  # a trained deep filter: its heads non-zero
        for conv in (small.df_head, small.df_in):
            conv.weight.normal_(0, 0.3)
            conv.bias.normal_(0, 0.3)
    big = build_network("denoise", **{**SMALL, "channels": channels}).eval()
    weights = big.adapt_weights(small.state_dict())
    big.load_state_dict(weights)  # strict: every tensor fits
    x = 0.1 * torch.randn(2, 1, 32 * 30)
    with torch.no_grad():
        ref = small(x)
        assert torch.allclose(big(x), ref, atol=1e-6)
        y, _ = run_chunked(big, x, [32, 96, 320, 32 * 30 - 448])
        assert torch.allclose(y, ref, atol=1e-6)
    assert big.adapt_weights(weights) is weights  # already this size: unchanged


def test_the_copies_are_not_tied() -> None:
    """The split weights differ between copies (summing to the original), so training can pull the copies
    apart; the same seed grows the same network."""
    small = _net()
    big = build_network("denoise", **{**SMALL, "channels": [16, 16, 16]})
    a, b = big.adapt_weights(small.state_dict()), big.adapt_weights(small.state_dict())
    for name in ("blocks.1.ssm.B", "head.weight"):
        w = a[name]
        first, second = w[:, :8], w[:, 8:]
        assert not torch.allclose(first, second)
        assert torch.allclose(first + second, small.state_dict()[name], atol=1e-6)
        assert torch.equal(w, b[name])
    c = a["blocks.1.ssm.C"]
    assert torch.equal(c[:8], c[8:])  # what a block writes is repeated


def test_a_wider_net_trains_its_copies_apart() -> None:
    """One optimiser step on the grown network moves the two copies of a channel differently."""
    small = _net()
    big = build_network("denoise", **{**SMALL, "channels": [16, 16, 16]})
    big.load_state_dict(big.adapt_weights(small.state_dict()))
    big.train()
    x = 0.1 * torch.randn(2, 1, 32 * 20)
    loss = (big(x) - x.roll(32, dims=-1)).pow(2).mean()
    loss.backward()
    g = big.blocks[1].ssm.C.grad
    assert not torch.allclose(g[:8], g[8:])


def test_a_widened_keyword_spotter_gives_the_same_logits() -> None:
    """The keyword spotter's stream (front, blocks, pooling) and its head's hidden layer grow together: the same
    clip logits, the same streamed frame logits."""
    cfg = {"front": "spectrogram", "front_bands": 20, "channels": [8, 8, 12], "states": [4, 4, 6],
           "kinds": ["bottleneck", "bottleneck", "pointwise"], "pools": [1, 2, 1], "window": 8,
           "num_classes": 5}  # fmt: skip
    torch.manual_seed(0)
    small = randomize(build_network("kws", **cfg), seed=1, dynamics=False).eval()
    big = build_network("kws", **{**cfg, "channels": [16, 16, 24]}).eval()
    big.load_state_dict(big.adapt_weights(small.state_dict()))
    x = 0.1 * torch.randn(2, 1, 16000)
    with torch.no_grad():
        assert torch.allclose(big(x), small(x), atol=1e-5)
        assert torch.allclose(big(x, all_frames=True), small(x, all_frames=True), atol=1e-5)
        t = 16000 - 16000 % big.stride
        streamed, _ = big.step(x[..., :t], big.init_state(2))
        assert torch.allclose(streamed, small.step(x[..., :t], small.init_state(2))[0], atol=1e-5)


def test_widening_refuses_what_it_cannot_grow_exactly() -> None:
    small = _net()
    weights = small.state_dict()
    with pytest.raises(ValueError, match="a 4-channel network cannot start from 8-channel weights"):
        build_network("denoise", **{**SMALL, "channels": [4, 4, 4]}).adapt_weights(weights)
    with pytest.raises(ValueError, match="multiple of the old one"):
        build_network("denoise", **{**SMALL, "channels": [12, 12, 12]}).adapt_weights(weights)
    with pytest.raises(ValueError, match="identity skip"):  # 8 -> 8 (identity skip) grown to 16 -> 24
        build_network("denoise", **{**SMALL, "channels": [16, 24, 24]}).adapt_weights(weights)
    other = {"other.weight": torch.zeros(1)}
    assert widen_weights(small, other) is other  # another layout: left to the loader to report
    depthwise = {**SMALL, "kinds": ["depthwise", "bottleneck", "pointwise"]}
    narrow = build_network("denoise", **depthwise).state_dict()
    with pytest.raises(ValueError, match="'depthwise' block"):
        build_network("denoise", **{**depthwise, "channels": [16, 16, 16]}).adapt_weights(narrow)


def test_a_widened_recogniser_gives_the_same_ctc_logits() -> None:
    """The recogniser's stream grows through its strided downsampling projections too (their inputs split, their
    outputs repeated): the same CTC logits on the whole signal and streamed, and the distillation head's frames."""
    cfg = {"front": "spectrogram", "front_bands": 20, "channels": [8, 12, 16], "states": [4, 6, 8],
           "kinds": ["bottleneck", "pointwise", "pointwise"], "pools": [2, 1, 1], "repeats": [2, 2, 1],
           "downsample": "conv", "head_hidden": 12, "distill_dim": 6}  # fmt: skip
    torch.manual_seed(0)
    small = randomize(build_network("asr", **cfg), seed=1, dynamics=False).eval()
    big = build_network("asr", **{**cfg, "channels": [16, 24, 32]}).eval()
    weights = big.adapt_weights(small.state_dict())
    big.load_state_dict(weights)  # strict: every tensor fits
    down = weights["encoder.layers.2.conv.weight"]
    assert down.shape == (16, 16, 2) and torch.equal(down[:8], down[8:])  # outputs repeated
    assert torch.allclose(down[:8, :8] + down[:8, 8:], small.state_dict()["encoder.layers.2.conv.weight"], atol=1e-6)
    x = 0.1 * torch.randn(2, 1, 16000)
    with torch.no_grad():
        ref, ref_distill = small(x, distill=True)
        logits, distill = big(x, distill=True)
        assert torch.allclose(logits, ref, atol=1e-5) and torch.allclose(distill, ref_distill, atol=1e-5)
        t = 16000 - 16000 % big.stride
        streamed, _ = big.step(x[..., :t], big.init_state(2))
        assert torch.allclose(streamed, ref[..., : streamed.shape[-1]], atol=1e-5)
    assert big.adapt_weights(weights) is weights
    with pytest.raises(ValueError, match="multiple of the old one"):
        build_network("asr", **{**cfg, "channels": [12, 18, 24]}).adapt_weights(small.state_dict())
