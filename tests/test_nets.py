"""Whole networks: streaming step equals the parallel forward; clip logits equal the live head."""

from __future__ import annotations

import torch
from conftest import random_chunks, randomize, rel_err

from edgessm.nets import build_network
from edgessm.ssm import run_chunked

SMALL = {"channels": [4, 8, 16], "states": [4, 8, 16], "kinds": ["full", "bottleneck", "pointwise"], "pools": [4, 4, 4]}


def test_kws_streaming_equals_frame_logits_and_clip_logits() -> None:
    torch.manual_seed(0)
    net = randomize(build_network("kws", **SMALL, window=10, dropout=0.0), seed=1).eval()
    x = torch.randn(2, 1, 64 * 40)
    with torch.no_grad():
        frames = net.frame_logits(x)
        y, state = run_chunked(net, x, [64 * s for s in random_chunks(40, seed=2, high=7)])
        assert rel_err(y, frames) < 1e-4
        # the clip logit is the live head at the last frame
        assert rel_err(net(x), frames[..., -1]) < 1e-5
    assert float(state[-1][0, 0]) == 10.0  # the frame counter saturates at the window


def test_kws_global_pooling_window_matches_gap() -> None:
    net = build_network("kws", **SMALL, window=40, dropout=0.0).eval()
    x = torch.randn(1, 1, 64 * 40)
    with torch.no_grad():
        gap = net.head(net.frames(x).mean(-1))
        assert rel_err(net(x), gap) < 1e-5


def test_asr_streaming_equals_forward() -> None:
    torch.manual_seed(0)
    net = randomize(build_network("asr", **{**SMALL, "pools": [4, 4, 20]}), seed=3).eval()
    x = torch.randn(1, 1, 320 * 24)
    with torch.no_grad():
        y, _ = run_chunked(net, x, [320 * s for s in random_chunks(24, seed=4, high=5)])
        assert rel_err(y, net(x)) < 1e-4


def test_denoiser_streaming_equals_forward() -> None:
    torch.manual_seed(0)
    net = randomize(build_network("denoise", **SMALL, bottleneck_states=8, n_bottleneck=1), seed=5).eval()
    x = torch.randn(1, 1, 64 * 30)
    with torch.no_grad():
        y, _ = run_chunked(net, x, [64 * s for s in random_chunks(30, seed=6, high=6)])
        assert rel_err(y, net(x)) < 1e-4
