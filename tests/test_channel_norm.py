"""The channel LayerNorm's training path (a written-out gradient) against the plain formula autograd differentiates."""

from __future__ import annotations

import pytest
import torch

from edgessm.ssm.residual import ChannelNorm


def _plain(norm: ChannelNorm, x: torch.Tensor) -> torch.Tensor:
    n = norm.norm
    d = x - x.mean(1, keepdim=True)
    return d * torch.rsqrt((d * d).mean(1, keepdim=True) + n.eps) * n.weight[:, None] + n.bias[:, None]


@pytest.mark.parametrize("shape", [(3, 5, 7), (2, 64, 40), (1, 2, 1)])
def test_training_path_matches_the_formula_and_its_autograd_gradient(shape: tuple[int, int, int]) -> None:
    torch.manual_seed(0)
    norm = ChannelNorm(shape[1])
    with torch.no_grad():
        norm.norm.weight.normal_()
        norm.norm.bias.normal_()
    x = (3.0 * torch.randn(shape) + 1.0).requires_grad_()
    g = torch.randn(shape)
    y = norm(x)
    grads = torch.autograd.grad(y, [x, norm.norm.weight, norm.norm.bias], g)
    y_ref = _plain(norm, x)
    ref = torch.autograd.grad(y_ref, [x, norm.norm.weight, norm.norm.bias], g)
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, ref, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    with torch.no_grad():  # inference (and export) take the plain formula
        torch.testing.assert_close(norm(x), y_ref, rtol=1e-5, atol=1e-5)


def test_gradcheck_in_float64() -> None:
    norm = ChannelNorm(4).double()
    with torch.no_grad():
        norm.norm.weight.normal_()
    x = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w, b: norm(x), (x, norm.norm.weight, norm.norm.bias))


def test_frozen_input_and_weights() -> None:
    """Only what needs a gradient gets one (a frozen front's input, a frozen norm)."""
    norm = ChannelNorm(6)
    norm.norm.weight.requires_grad_(False)
    norm.norm.bias.requires_grad_(False)
    x = torch.randn(2, 6, 5, requires_grad=True)
    (gx,) = torch.autograd.grad(norm(x).square().sum(), [x])
    assert gx.shape == x.shape and torch.isfinite(gx).all()
