"""Streaming CTC recognizer: a fully state-space Centaurus encoder (paper Sec. 5.3, Table 7).

Residual SSM blocks with average pooling down to 20 ms frames (total stride 320 at 16 kHz),
then a per-frame linear layer to the CTC vocabulary (blank first). No attention, no LSTM.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor, nn

from edgessm.ssm.essm import ElasticBudget
from edgessm.ssm.stream import Counts, State

from .backbone import ElasticOptions, centaurus_backbone


@dataclass
class CtcRecognizerConfig(ElasticOptions):
    vocab_size: int = 29  # blank + space + apostrophe + a..z
    channels: list[int] = field(default_factory=lambda: [8, 16, 64, 96, 128, 128])
    states: list[int] = field(default_factory=lambda: [4, 4, 32, 64, 128, 128])
    kinds: list[str] = field(
        default_factory=lambda: ["full", "full", "bottleneck", "bottleneck", "pointwise", "pointwise"]
    )
    pools: list[int] = field(default_factory=lambda: [4, 4, 4, 5, 1, 1])
    n_sub: int = 4
    dropout: float = 0.0
    pre_conv: int = 0


class CtcRecognizer(ElasticBudget, nn.Module):
    """``(B, 1, T) -> (B, vocab, T // stride)`` CTC logits."""

    def __init__(self, cfg: CtcRecognizerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoder = centaurus_backbone(cfg.channels, cfg.states, cfg.kinds, cfg.pools, cfg.n_sub, cfg.dropout,
                                        cfg.pre_conv, cfg.essm_kwargs())  # fmt: skip
        self.classifier = nn.Conv1d(cfg.channels[-1], cfg.vocab_size, 1)

    @property
    def stride(self) -> int:
        return self.encoder.chunk_multiple

    def forward(self, x: Tensor) -> Tensor:
        t = x.shape[-1] - x.shape[-1] % self.stride
        return self.classifier(self.encoder(x[..., :t]))

    def state_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        return [(f"encoder.{n}", s) for n, s in self.encoder.state_shapes()]

    def init_state(self, batch: int, *, device=None, dtype=None) -> State:
        return self.encoder.init_state(batch, device=device, dtype=dtype)

    def step(self, x: Tensor, state: State) -> tuple[Tensor, State]:
        """One chunk ``(B, 1, T)`` (``T`` a multiple of the stride) -> CTC logits ``(B, vocab, T/stride)``."""
        h, state = self.encoder.step(x, state)
        return self.classifier(h), state

    def counts(self) -> Counts:
        """Inference parameters and FLOPs per input sample (encoder + per-frame classifier)."""
        c, v = self.cfg.channels[-1], self.cfg.vocab_size
        return self.encoder.counts() + Counts(c * v, 2.0 * c * v / self.stride)
