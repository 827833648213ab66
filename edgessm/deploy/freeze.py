"""Freeze a network's step constants for one chunk size.

An SSM layer's step needs powers of Ā, in-chunk Toeplitz kernels and the like; in training they
are recomputed from the parameters (in float64). For export they become fixed float32 tensors:
one streamed dummy chunk records them on every SSM layer, after which the step reads them back
and traces to plain MatMul/Mul/Add with the constants as initializers.
"""

from __future__ import annotations

import torch
from torch import nn

from edgessm.ssm.blocks import SSMLayer


def ssm_layers(model: nn.Module) -> list[SSMLayer]:
    return [m for m in model.modules() if isinstance(m, SSMLayer)]


@torch.no_grad()
def freeze(model: nn.Module, chunk: int) -> None:
    """Record the step constants every SSM layer of ``model`` needs for chunks of ``chunk`` samples."""
    layers = ssm_layers(model)
    for layer in layers:
        layer.frozen_constants = {}
    state = model.init_state(1)
    model.step(torch.zeros(1, 1, chunk), state)


def unfreeze(model: nn.Module) -> None:
    """Back to computing the step constants from the parameters (after the weights change)."""
    for layer in ssm_layers(model):
        layer.frozen_constants = None
