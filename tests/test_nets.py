"""Whole networks: streaming step equals the parallel forward; clip logits equal the live head."""

from __future__ import annotations

import pytest
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


@pytest.mark.parametrize(
    "variant",
    [
        {"downsample": "conv", "repeats": [1, 2, 2]},
        {"module": "ffn", "repeats": [1, 1, 2], "head_hidden": 12},
        {"module": "conv", "module_kernel": 5, "downsample": "conv"},
    ],
    ids=["table7-conv-downsampling", "ffn-module-mlp-head", "conv-module"],
)
def test_asr_variants_stream_like_forward(variant: dict) -> None:
    """Table 7's stage layout and the Table 2 module variants stream exactly like the parallel forward."""
    net = randomize(build_network("asr", **{**SMALL, "pools": [4, 4, 20]}, **variant), seed=7).eval()
    assert net.stride == 320
    x = torch.randn(1, 1, 320 * 20)
    with torch.no_grad():
        y, state = run_chunked(net, x, [320 * s for s in random_chunks(20, seed=8, high=4)])
        assert y.shape == (1, 29, 20)
        assert rel_err(y, net(x)) < 1e-4
    assert len(state) == len(net.state_shapes())
    c = net.counts()
    assert c.params <= sum(p.numel() for p in net.parameters())  # counts leave out only Δ-style training scalars
    assert c.params > 0.8 * sum(p.numel() for p in net.parameters())


def test_asr_config_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match="module must be one of none, ffn, conv"):
        build_network("asr", **SMALL, module="lstm")
    with pytest.raises(ValueError, match="repeats must have one entry per stage"):
        build_network("asr", **SMALL, repeats=[1, 1])
    with pytest.raises(ValueError, match="downsample must be 'pool' or 'conv'"):
        build_network("asr", **SMALL, downsample="max")


def test_denoiser_streaming_equals_forward() -> None:
    torch.manual_seed(0)
    net = randomize(build_network("denoise", **SMALL, bottleneck_states=8, n_bottleneck=1), seed=5).eval()
    x = torch.randn(1, 1, 64 * 30)
    with torch.no_grad():
        y, _ = run_chunked(net, x, [64 * s for s in random_chunks(30, seed=6, high=6)])
        assert rel_err(y, net(x)) < 1e-4


@pytest.mark.parametrize("name", ["kws", "asr", "denoise"])
def test_auditory_full_init_tunes_each_full_block_to_its_rate_and_streams(name: str) -> None:
    import math

    extra = {"pools": [4, 4, 20]} if name == "asr" else {}
    extra |= {"bottleneck_states": 8, "n_bottleneck": 1} if name == "denoise" else {}
    torch.manual_seed(0)
    net = build_network(name, **{**SMALL, **extra}, full_init="auditory").eval()
    full = [m for m in net.modules() if type(m).__name__ == "FullSSM"]
    assert full
    for layer in full:  # the lowest mode sits at 50 Hz of the block's own rate (16 kHz here: every full block
        _, wi = layer.modes.dtA()  # of SMALL is at the waveform's rate, the denoiser's output blocks too)
        assert abs(float(wi.detach().min()) - 2 * math.pi * 50 / 16000) < 1e-4
        assert float(wi.detach().max()) > 2.5  # and the highest near 0.9 x Nyquist
    _assert_streams_like_forward(name, net)


def test_auditory_init_follows_the_denoiser_levels() -> None:
    import math

    cfg = {"channels": [4, 8], "states": [4, 4], "kinds": ["full", "full"], "pools": [4, 4], "n_bottleneck": 1,
           "bottleneck_states": 8, "full_init": "auditory"}  # fmt: skip
    net = build_network("denoise", **cfg)
    for level, rate in ((0, 16000), (1, 4000)):
        for block in (net.enc[level], net.dec[level]):
            _, wi = block.ssm.modes.dtA()
            assert abs(float(wi.detach().min()) - 2 * math.pi * 50 / rate) < 1e-4
    with pytest.raises(ValueError, match="auditory"):
        build_network("denoise", **{**cfg, "full_init": "gammatone"})


@pytest.mark.parametrize("name", ["kws", "asr", "denoise"])
def test_front_norm_off_drops_only_the_waveform_rate_norms_and_streams(name: str) -> None:
    extra = {"pools": [4, 4, 20]} if name == "asr" else {}
    extra |= {"bottleneck_states": 8, "n_bottleneck": 1} if name == "denoise" else {}
    cfg = {**SMALL, **extra}
    torch.manual_seed(0)
    on, off = (randomize(build_network(name, **cfg, front_norm=f), seed=4).eval() for f in (True, False))
    normed = lambda net: sum(m.norm is not None for m in net.modules() if type(m).__name__ == "ChannelNorm")  # noqa: E731
    widths = {"kws": 1, "asr": 1, "denoise": 0}[name]  # blocks at 16 kHz with more than one channel
    assert normed(on) - normed(off) == widths
    _assert_streams_like_forward(name, off)


def _assert_streams_like_forward(name: str, net) -> None:
    """Random chunks of a network's whole-stride multiples give its parallel output (kws: frame logits)."""
    stride = net.stride if name != "denoise" else 64
    x = torch.randn(1, 1, stride * 12)
    with torch.no_grad():
        y, _ = run_chunked(net, x, [stride * s for s in random_chunks(12, seed=9, high=4)])
        ref = net.frame_logits(x) if name == "kws" else net(x)
        assert rel_err(y, ref) < 1e-4


def test_memory_s_bounds_every_block_at_its_own_rate() -> None:
    """`memory_s` in seconds becomes each block's memory in steps at that block's frame rate."""
    from edgessm.nets import build_network
    from edgessm.ssm.discretize import DiagonalModes

    cfg = dict(front="filterbank", front_bands=8, front_pool=160, channels=[8, 8, 8], states=[4, 4, 4],
               kinds=["bottleneck", "pointwise", "pointwise"], pools=[1, 2, 1], window=10, num_classes=5)  # fmt: skip
    net = build_network("kws", **cfg, memory_s=0.5)
    memories = [[m.memory for m in block.modules() if isinstance(m, DiagonalModes)] for block in net.backbone.layers[1:]
                if any(isinstance(m, DiagonalModes) for m in block.modules())]  # fmt: skip
    assert memories == [[50.0], [50.0], [25.0]]  # 100 frames/s until the pool of 2 after the second block, then 50
    front = [m.memory for m in net.backbone.layers[0].modules() if isinstance(m, DiagonalModes)]
    assert front == [0.0]  # the filterbank's band-pass modes are not blocks: unbounded
    assert all(m.memory == 0 for m in build_network("kws", **cfg).modules() if isinstance(m, DiagonalModes))
    with pytest.raises(ValueError, match="memory_s"):
        build_network("kws", **cfg, memory_s=-1.0)


def test_kernel_length_reads_no_parameter_off_the_cpu() -> None:
    """live_length syncs with the parameters on a CPU only: on a GPU that read would stall every layer
    of every step and stop CUDA graphs."""
    from edgessm.ssm.blocks import DepthwiseSSM

    layer = DepthwiseSSM(4, 4, 8)
    assert layer.modes.live_length(100_000) < 100_000  # CPU: the modes' ringing, shorter than the input
    assert layer.to("meta").modes.live_length(100_000) == 100_000  # any other device: the whole length


@pytest.mark.parametrize("recipe", ["kws_v5", "denoise", "asr"])
def test_recipe_networks_compile_into_one_graph(recipe) -> None:
    """No graph breaks (host syncs, data-dependent shapes) in the shipped networks' forward: torch.compile
    makes one graph of it and the step can be captured."""
    import torch._dynamo

    from edgessm.train.config import load_config
    from edgessm.train.tasks import build_task

    net = build_task(load_config(recipe)).build_model()
    try:
        explained = torch._dynamo.explain(net)(torch.randn(2, 1, 16000))
    finally:
        torch._dynamo.reset()
    assert explained.graph_break_count == 0, [str(b.reason)[:200] for b in explained.break_reasons]
    assert explained.graph_count == 1
