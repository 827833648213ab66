"""Streaming CTC recognizer: a fully state-space Centaurus encoder (paper Sec. 5.3, App. E.3, Table 7).

Stage ``i`` (one row of Table 7): a residual SSM block of kind ``kinds[i]`` with ``states[i]`` states
taking ``channels[i-1]`` to ``channels[i]`` (the first from the waveform, or from the bands of the
``front``), then the stage's downsampling by ``pools[i]``, then ``repeats[i] - 1`` more blocks at the
new rate ("only the first occurrence of the block contains the downsampling layer"). The downsampling
is a learned strided projection (``downsample = "conv"``, kernel = stride = ``pools[i]``, as Table 7's
"downsampling layer projecting the temporal and channel dimension") or causal average pooling
(``"pool"``, as in the keyword spotter).

``module`` appends a feed-forward (``"ffn"``) or causal convolution (``"conv"``) module after every block
(the Table 2 variants, :mod:`edgessm.nets.modules`). The head is a per-frame linear layer, or a 2-layer
MLP (``head_hidden > 0``, the paper's character head), to the CTC vocabulary (blank = 0). With total
stride 320 at 16 kHz one CTC frame is 20 ms. No attention, no LSTM, nothing looks ahead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch.nn.functional as F
from torch import Tensor, nn

from edgessm.ssm import AvgPool, CentaurusBlock, Counts, DownConv, StreamSequential
from edgessm.ssm.essm import ElasticBudget
from edgessm.ssm.stream import State

from .backbone import BlockOptions, FrontOptions
from .modules import MODULE_KINDS, make_module
from .widen import widen_weights


@dataclass
class CtcRecognizerConfig(FrontOptions, BlockOptions):
    vocab_size: int = 29  # blank + space + apostrophe + a..z
    channels: list[int] = field(default_factory=lambda: [8, 16, 64, 96, 128, 128])
    states: list[int] = field(default_factory=lambda: [4, 4, 32, 64, 128, 128])
    kinds: list[str] = field(
        default_factory=lambda: ["full", "full", "bottleneck", "bottleneck", "pointwise", "pointwise"]
    )
    pools: list[int] = field(default_factory=lambda: [4, 4, 4, 5, 1, 1])
    repeats: list[int] | None = None  # blocks per stage (default: one each)
    downsample: str = "pool"  # "pool" | "conv" (see the module docstring)
    module: str = "none"  # "none" | "ffn" | "conv": appended after every block (Table 2 variants)
    module_kernel: int = 7  # conv module: causal depthwise kernel (frames at the block's rate)
    ffn_mult: int = 2  # ffn module: hidden width = ffn_mult * channels
    head_hidden: int = 0  # > 0: a 2-layer MLP head with this hidden width
    n_sub: int = 4
    dropout: float = 0.0
    pre_conv: int = 0
    distill_dim: int = 0  # > 0: a training-only linear head to the teacher's frames (edgessm.train.distill)


def recognizer_encoder(cfg: CtcRecognizerConfig) -> StreamSequential:
    """``(B, 1, T) -> (B, channels[-1], T / prod(pools))`` (see the module docstring)."""
    n = len(cfg.channels)
    repeats = cfg.repeats or [1] * n
    if not (len(cfg.states) == len(cfg.kinds) == len(cfg.pools) == len(repeats) == n):
        raise ValueError("channels, states, kinds, pools and repeats must have one entry per stage")
    if cfg.downsample not in ("pool", "conv"):
        raise ValueError(f"downsample must be 'pool' or 'conv', got {cfg.downsample!r}")
    if cfg.module not in MODULE_KINDS:
        raise ValueError(f"module must be one of {', '.join(MODULE_KINDS)}, got {cfg.module!r}")
    if any(r < 1 for r in repeats):
        raise ValueError(f"every stage needs at least one block, got repeats {repeats}")
    layers, c_in, rate = cfg.make_front()  # rate: Hz at the current block

    def block(kind: str, h_in: int, h_out: int, states: int, first: bool) -> None:
        blk = CentaurusBlock(kind, h_in, h_out, states, cfg.n_sub, skip=not first, dropout=cfg.dropout,
                             pre_conv=cfg.pre_conv if h_in > 1 else 0, **cfg.block_kwargs(kind, rate))  # fmt: skip
        cfg.bound_memory(blk, rate)
        layers.append(blk)
        module = make_module(cfg.module, h_out, kernel_size=cfg.module_kernel, mult=cfg.ffn_mult, dropout=cfg.dropout)
        if module is not None and h_out > 1:
            layers.append(module)

    for i in range(n):
        c, r, kind = cfg.channels[i], cfg.pools[i], cfg.kinds[i]
        block(kind, c_in, c, cfg.states[i], first=i == 0 and c_in == 1)
        if r > 1:
            layers.append(DownConv(c, c, r) if cfg.downsample == "conv" else AvgPool(r))
            rate /= r
        for _ in range(repeats[i] - 1):
            block(kind, c, c, cfg.states[i], first=False)
        c_in = c
    return StreamSequential(*layers)


class CtcRecognizer(ElasticBudget, nn.Module):
    """``(B, 1, T) -> (B, vocab, T // stride)`` CTC logits."""

    def __init__(self, cfg: CtcRecognizerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoder = recognizer_encoder(cfg)
        c = cfg.channels[-1]
        self.hidden = nn.Conv1d(c, cfg.head_hidden, 1) if cfg.head_hidden > 0 else None
        self.classifier = nn.Conv1d(cfg.head_hidden or c, cfg.vocab_size, 1)
        self.distill = nn.Conv1d(c, cfg.distill_dim, 1) if cfg.distill_dim > 0 else None

    def adapt_weights(self, weights: dict[str, Tensor]) -> dict[str, Tensor]:
        """``weights`` of a narrower recogniser grown to this one's channels (each channel of the encoder's stream
        repeated, the weights that read it split, the strided downsampling projections both:
        :func:`~edgessm.nets.widen.widen_weights`): the grown network gives the same CTC logits, and fine-tuning
        (``edgessm train ... --init OLD --set "model.channels=[256, 384, 512]"``) starts there. The head's hidden
        layer keeps its width. Weights already of this size pass unchanged."""
        first = "hidden.weight" if self.hidden is not None else "classifier.weight"
        return widen_weights(self, weights, readers={first: 1, "distill.weight": 1})

    @property
    def stride(self) -> int:
        return self.encoder.chunk_multiple

    @property
    def frame_seconds(self) -> float:
        return self.stride / 16000

    def head(self, h: Tensor) -> Tensor:
        """Encoder features ``(B, C, F)`` -> CTC logits ``(B, vocab, F)``."""
        if self.hidden is not None:
            h = F.silu(self.hidden(h))
        return self.classifier(h)

    def forward(self, x: Tensor, distill: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """CTC logits ``(B, vocab, F)``; with ``distill`` also the teacher-frame predictions ``(B, distill_dim, F)``."""
        t = x.shape[-1] - x.shape[-1] % self.stride
        h = self.encoder(x[..., :t])
        if not distill:
            return self.head(h)
        if self.distill is None:
            raise ValueError("this recognizer has no distillation head (config distill_dim = 0)")
        return self.head(h), self.distill(h)

    def without_training_heads(self) -> dict[str, int]:
        """Drop the training-only distillation head (before export); returns the config change to record."""
        self.distill = None
        self.cfg.distill_dim = 0
        return {"distill_dim": 0}

    def state_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        return [(f"encoder.{n}", s) for n, s in self.encoder.state_shapes()]

    def init_state(self, batch: int, *, device=None, dtype=None) -> State:
        return self.encoder.init_state(batch, device=device, dtype=dtype)

    def step(self, x: Tensor, state: State) -> tuple[Tensor, State]:
        """One chunk ``(B, 1, T)`` (``T`` a multiple of the stride) -> CTC logits ``(B, vocab, T/stride)``."""
        h, state = self.encoder.step(x, state)
        return self.head(h), state

    def counts(self) -> Counts:
        """Inference parameters and FLOPs per input sample (encoder + per-frame head)."""
        c, v, m = self.cfg.channels[-1], self.cfg.vocab_size, self.cfg.head_hidden
        head = Counts(c * m + m + m * v + v, 2.0 * (c * m + m * v)) if m else Counts(c * v + v, 2.0 * c * v)
        return self.encoder.counts() + Counts(head.params, head.flops / self.stride)
