"""Mixed precision: what CUDA autocast hands an SSM layer (bfloat16 activations, float32 parameters)
works for every block kind and contraction plan, forward and backward, close to float32 (the layers
compute in float32 islands, :mod:`edgessm.ssm.precision`). CPU-only: CI has no GPU."""

from __future__ import annotations

import pytest
import torch
from conftest import randomize

from edgessm.ssm import make_ssm
from edgessm.ssm.fftconv import PLANS

CASES = [("depthwise", None), ("full", None), ("essm", None), ("rtf", None), ("hades", None)] + [
    (kind, p.name) for kind in ("pointwise", "bottleneck") for p in PLANS
]


def _layer(kind: str, plan: str | None) -> torch.nn.Module:
    torch.manual_seed(0)
    kwargs = {"plan": plan} if plan else {"length": 64} if kind == "essm" else {}
    layer = make_ssm(kind, 6, 5, 8, 2, **kwargs)
    return randomize(layer, dynamics=False) if kind not in ("essm", "hades") else layer


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max().detach() / b.float().abs().max().clamp_min(1e-12).detach())


@pytest.mark.parametrize(("kind", "plan"), CASES)
@pytest.mark.parametrize(
    ("autocast", "low"),
    [(False, torch.bfloat16), (True, torch.bfloat16), (False, torch.float16)],
    ids=["bf16-input", "cpu-autocast", "fp16-input"],
)
def test_half_activations_with_fp32_parameters(kind: str, plan: str | None, autocast: bool, low: torch.dtype) -> None:
    """bf16 as CUDA's autocast hands it over, and fp16 (``train.amp = "fp16"``): cuFFT takes float16 only
    at power-of-two sizes, so the island must catch the 150 samples here as it does the bf16 ones."""
    layer = _layer(kind, plan).train(False)
    x = torch.randn(3, 6, 150).to(low)
    ref_in = x.float().requires_grad_()
    ref = layer(ref_in)
    ref.square().sum().backward()
    ref_grads = {n: p.grad.clone() for n, p in layer.named_parameters() if p.grad is not None}
    layer.zero_grad()
    low_in = x.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        y = layer(low_in)
    assert y.dtype == low and y.shape == ref.shape
    assert _rel(y, ref) < 1e-2  # only the output's rounding to 8 (bf16) or 11 (fp16) bits separates them
    y.float().square().sum().backward()
    assert low_in.grad is not None and low_in.grad.dtype == low
    assert _rel(low_in.grad, ref_in.grad) < 3e-2
    for name, p in layer.named_parameters():
        if name in ref_grads:
            assert p.dtype == torch.float32 and torch.isfinite(p.grad).all()
            assert _rel(p.grad, ref_grads[name]) < 3e-2, name


def test_float32_input_is_untouched_by_the_island() -> None:
    layer = _layer("bottleneck", "full-freq")
    x = torch.randn(2, 6, 100)
    assert torch.equal(layer(x), layer(x.clone())) and layer(x).dtype == torch.float32
    assert layer(x.double()).dtype == torch.float64  # float64 checks keep their precision


RECIPES = [
    "kws",
    "denoise",
    "asr",
    "asr_v4_gpu",
    "kws_es",
    "kws_es_v4",
    "kws_v5_rtf",
    "kws_v5_hades",
    "denoise_v3_df",
    "kws_v8",
    "denoise_v5",  # the gated deep filter
    "kws_v11",
]


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_networks_train_a_step_under_cpu_autocast(recipe: str) -> None:
    from edgessm.nets import build_network
    from edgessm.train.config import load_config

    cfg = load_config(recipe)
    torch.manual_seed(0)
    extra = {"kws": {"num_classes": 37}, "asr": {"vocab_size": 29}}.get(cfg.task, {})  # what the task adds
    net = build_network(cfg.task, **cfg.model, **extra)
    samples = 16000 if recipe.startswith("kws") else 8000
    x = 0.1 * torch.randn(2, 1, samples)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = net(x)
    out = out[0] if isinstance(out, tuple) else out
    loss = out.float().square().mean()
    loss.backward()
    grads = [p.grad for p in net.parameters() if p.requires_grad]
    assert torch.isfinite(loss) and all(g is not None and torch.isfinite(g).all() for g in grads)
