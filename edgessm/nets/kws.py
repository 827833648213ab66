"""Centaurus keyword spotter on raw 16 kHz waveforms (paper Sec. 5.1, App. E.1, Table 4).

Six residual SSM blocks (full x2, bottleneck x2, pointwise x2 in the hybrid) each followed by
average pooling (4, 4, 2, 2, 2, 2), then a head on the backbone features. The head averages the
features over a causal window of ``window`` frames and applies a 2-layer MLP; clip training uses
the window's output at the last frame, so a window as long as the clip is the paper's global
average pooling, and the streaming model (``step``) evaluates exactly the same function at every
frame: its state is the backbone's plus the last ``window - 1`` frames and a frame counter.

``front = "filterbank"`` puts the SSM filterbank front end (:mod:`edgessm.ssm.filterbank`: pooled log
band energies) before the blocks, which then start at its frame rate with its bands as channels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from edgessm.ssm.essm import ElasticBudget
from edgessm.ssm.stream import Counts, State

from .backbone import BlockOptions, FrontOptions, centaurus_backbone
from .widen import widen_weights


@dataclass
class KeywordSpotterConfig(FrontOptions, BlockOptions):
    num_classes: int = 35
    channels: list[int] = field(default_factory=lambda: [4, 8, 16, 32, 64, 128])
    states: list[int] = field(default_factory=lambda: [4, 4, 32, 64, 128, 256])
    kinds: list[str] = field(
        default_factory=lambda: ["full", "full", "bottleneck", "bottleneck", "pointwise", "pointwise"]
    )
    pools: list[int] = field(default_factory=lambda: [4, 4, 2, 2, 2, 2])
    n_sub: int = 4
    dropout: float = 0.1
    pre_conv: int = 0
    window: int = 62  # head window in frames (62 x 256 samples ~ 1 s: GAP over a training clip)


class KeywordSpotter(ElasticBudget, nn.Module):
    """``(B, 1, T) -> (B, num_classes)`` logits; ``frames(x)`` gives the backbone ``(B, C, T/stride)``.

    With ES-SSM blocks (``kinds`` entries ``"essm"``), ``net.budget = K`` sets the compute budget of all of them.
    """

    def __init__(self, cfg: KeywordSpotterConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.backbone = centaurus_backbone(cfg.channels, cfg.states, cfg.kinds, cfg.pools, cfg.n_sub, cfg.dropout,
                                        cfg.pre_conv, cfg, cfg)  # fmt: skip
        c = cfg.channels[-1]
        self.head = nn.Sequential(nn.Linear(c, c), nn.SiLU(), nn.Linear(c, cfg.num_classes))

    def adapt_weights(self, weights: dict[str, Tensor]) -> dict[str, Tensor]:
        """``weights`` of a narrower keyword spotter grown to this one's channels (each channel repeated, the
        weights that read them split: :func:`~edgessm.nets.widen.widen_weights`): the grown network gives the
        same logits, and fine-tuning (``edgessm train ... --init OLD --set "model.channels=[128, ...]"``) starts
        there. Weights already of this size pass unchanged."""
        return widen_weights(self, weights, readers={"head.0.weight": 1, "head.2.weight": 1},
                             writers={"head.0.weight": 0, "head.0.bias": 0})  # fmt: skip

    @property
    def stride(self) -> int:
        return self.backbone.chunk_multiple

    def frames(self, x: Tensor) -> Tensor:
        """Backbone features ``(B, C, T // stride)``; ``x`` is cropped to a multiple of the stride."""
        t = x.shape[-1] - x.shape[-1] % self.stride
        return self.backbone(x[..., :t])

    def pooled(self, h: Tensor) -> Tensor:
        """Causal window mean over frames: ``(B, C, F) -> (B, C, F)`` (frame t averages ``max(0, t-w+1)..t``)."""
        w = self.cfg.window
        if w <= 0 or w >= h.shape[-1]:
            return torch.cumsum(h, -1) / torch.arange(1, h.shape[-1] + 1, device=h.device, dtype=h.dtype)
        c = F.pad(torch.cumsum(h, -1), (w, 0))
        counts = torch.clamp(torch.arange(1, h.shape[-1] + 1, device=h.device), max=w).to(h.dtype)
        return (c[..., w:] - c[..., : h.shape[-1]]) / counts

    # -- streaming ---------------------------------------------------------------------------

    def state_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        c, w = self.cfg.channels[-1], self.cfg.window
        if w <= 0:
            raise ValueError("streaming needs a finite head window (model.window > 0)")
        head = [("head.history", (c, w - 1)), ("head.count", (1,))]
        return [(f"backbone.{n}", s) for n, s in self.backbone.state_shapes()] + head

    def init_state(self, batch: int, *, device=None, dtype=None) -> State:
        dtype = dtype or torch.get_default_dtype()
        return [torch.zeros(batch, *s, device=device, dtype=dtype) for _, s in self.state_shapes()]

    def step(self, x: Tensor, state: State) -> tuple[Tensor, State]:
        """One chunk ``(B, 1, T)`` (``T`` a multiple of the stride) -> frame logits ``(B, classes, T/stride)``."""
        n = len(self.backbone.state_shapes())
        h, bstate = self.backbone.step(x, state[:n])
        hist, count = state[n], state[n + 1]
        w, frames = self.cfg.window, int(h.shape[-1])
        full = torch.cat([hist, h], dim=-1)  # (B, C, w - 1 + F)
        # window sums ending at each new frame: one MatMul with a constant band of ones
        pos = torch.arange(w - 1 + frames, device=h.device)[:, None] - torch.arange(frames, device=h.device)[None, :]
        sums = full @ ((pos >= 0) & (pos < w)).to(h.dtype)  # (B, C, F)
        k = torch.arange(1, frames + 1, dtype=h.dtype, device=h.device)
        counts = torch.clamp(count.unsqueeze(-1) + k, max=float(w))  # (B, 1, F)
        lin0, lin1 = self.head[0], self.head[2]  # the head on (B, C, F) directly: no transposes
        z = F.silu(lin0.weight @ (sums / counts) + lin0.bias[:, None])
        logits = lin1.weight @ z + lin1.bias[:, None]
        return logits, [*bstate, full[..., frames:], torch.clamp(count + frames, max=float(w))]

    def frame_logits(self, x: Tensor) -> Tensor:
        """Logits at every frame ``(B, classes, F)``: what the live listener evaluates."""
        return self.head(self.pooled(self.frames(x)).transpose(1, 2)).transpose(1, 2)

    def forward(self, x: Tensor, all_frames: bool = False) -> Tensor:
        """Clip logits ``(B, classes)``: the head at the last frame; with ``all_frames`` the logits at
        every frame ``(B, classes, F)`` (:meth:`frame_logits`, through ``forward`` so DDP sees the call)."""
        if all_frames:
            return self.frame_logits(x)
        h = self.pooled(self.frames(x))[..., -1]
        return self.head(h)

    def counts(self) -> Counts:
        """Inference parameters and FLOPs per input sample (backbone + per-frame head, App. D conventions)."""
        c, k = self.cfg.channels[-1], self.cfg.num_classes
        head = Counts(c * c + c * k, (2.0 * c * c + 2.0 * c * k) / self.stride)
        return self.backbone.counts() + head
