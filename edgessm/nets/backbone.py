"""The Centaurus classifier backbone shared by the keyword spotter and the recognizer: residual
SSM blocks (the first without a skip), each followed by average pooling (paper App. E.1)."""

from __future__ import annotations

from collections.abc import Sequence

from edgessm.ssm import AvgPool, CentaurusBlock, StreamSequential


def centaurus_backbone(channels: Sequence[int], states: Sequence[int], kinds: Sequence[str], pools: Sequence[int],
                       n_sub: int = 4, dropout: float = 0.0, pre_conv: int = 0) -> StreamSequential:  # fmt: skip
    """``(B, 1, T) -> (B, channels[-1], T / prod(pools))``; a pool of 1 adds no layer."""
    n = len(channels)
    if not (len(states) == len(kinds) == len(pools) == n):
        raise ValueError("channels, states, kinds and pools must have one entry per block")
    layers = []
    c_in = 1
    for i in range(n):
        layers.append(
            CentaurusBlock(kinds[i], c_in, channels[i], states[i], n_sub, skip=i > 0, dropout=dropout,
                           pre_conv=pre_conv if c_in > 1 else 0)
        )  # fmt: skip
        if pools[i] > 1:
            layers.append(AvgPool(pools[i]))
        c_in = channels[i]
    return StreamSequential(*layers)
