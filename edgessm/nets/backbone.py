"""The Centaurus classifier backbone shared by the keyword spotter and the recognizer: residual
SSM blocks (the first without a skip), each followed by average pooling (paper App. E.1).

Any block may be an elastic spectral SSM (``kind = "essm"``, :class:`~edgessm.ssm.ElasticSpectralSSM`):
its ``states`` entry is ``K̄``, the number of spectral channels, and its options come from the network
config's ``essm_*`` fields (:class:`ElasticOptions`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from torch.nn import Module

from edgessm.ssm import AvgPool, CentaurusBlock, Streamable, StreamSequential
from edgessm.ssm.discretize import DiagonalModes
from edgessm.ssm.filterbank import FilterbankFront
from edgessm.ssm.rtf import RationalSSM

from .spectrogram import SpectrogramFront

WAVEFORM_RATE = 16000.0  # Hz of every network's input; a block's rate is this divided by the resampling before it


@dataclass
class ElasticOptions:
    """Config fields of the ES-SSM blocks of a network (blocks whose kind is ``"essm"``).

    ``essm_length``: Hankel filter length ``L`` in samples at the block's own rate (frames after pooling).
    ``essm_mode``: ``fir`` (exact filters, receptive field ``L``), ``lds`` (distilled LDS) or ``auto``.
    ``essm_gate``: the input-adaptive gate; ``false``: uniform weights over the active channels (ablation).
    ``essm_budget_dropout``: train over sampled budgets (``true``, or a table of
    :class:`~edgessm.ssm.BudgetDropout` fields); ``false``: always at ``K̄`` (ablation).
    """

    essm_length: int = 64
    essm_mode: str = "fir"
    essm_gate: bool = True
    essm_budget_dropout: Any = True

    def essm_kwargs(self) -> dict[str, Any]:
        return {"length": self.essm_length, "mode": self.essm_mode, "gate": self.essm_gate,
                "budget_dropout": self.essm_budget_dropout}  # fmt: skip


@dataclass
class BlockOptions(ElasticOptions):
    """Config fields of a network's SSM blocks: the ES-SSM options, and ``full_init``, the initial modes of
    its full blocks: ``"s4d"`` (S4D-Lin, the paper's) or ``"auditory"`` (an ERB-spaced filterbank at the
    block's sample rate, :func:`~edgessm.ssm.discretize.auditory_modes`); ``front_norm``, whether blocks
    at the waveform's rate normalise their output over channels at every sample; ``memory_s``, a bound in
    seconds on the memory of every block's modes (0: unbounded; :class:`~edgessm.ssm.discretize.DiagonalModes`
    ``memory``), converted to steps at each block's own rate; ``rtf`` and ``hades``, keyword arguments of the
    RTF blocks (:class:`~edgessm.ssm.rtf.RationalSSM`: ``denominators``, ``init``) and HADES blocks
    (:class:`~edgessm.ssm.hades.HadesSSM`: ``shared``, ``experts``, ``top_q``, ``head_dim``, ``gamma``, ``mean``,
    ``mean_frames``, loss weights), e.g. ``[model.hades]`` tables in a recipe."""

    full_init: str = "s4d"
    front_norm: bool = True  # False: blocks at the waveform's own rate skip the per-sample LayerNorm over channels
    memory_s: float = 0.0
    rtf: dict[str, Any] = field(default_factory=dict)
    hades: dict[str, Any] = field(default_factory=dict)

    def bound_memory(self, block: Module, rate: float) -> None:
        """Give every diagonal mode set and RTF filter in ``block`` (at ``rate`` Hz) the ``memory_s`` bound."""
        if self.memory_s < 0:
            raise ValueError(f"memory_s must be 0 (unbounded) or positive seconds, got {self.memory_s}")
        for m in block.modules():
            if isinstance(m, DiagonalModes | RationalSSM):
                m.memory = max(1.0, self.memory_s * rate) if self.memory_s else 0.0

    def block_kwargs(self, kind: str, rate: float = WAVEFORM_RATE) -> dict[str, Any]:
        """Keyword arguments of a :class:`~edgessm.ssm.CentaurusBlock` of ``kind`` working at ``rate`` Hz:
        its ``norm``, the ES-SSM options of an ``essm`` block, the initialisation of a ``full`` one."""
        kw: dict[str, Any] = {"norm": self.front_norm or rate < WAVEFORM_RATE}
        if kind == "essm":
            kw.update(self.essm_kwargs())
        elif kind == "full" and self.full_init != "s4d":
            kw.update(init=self.full_init, rate=float(rate))
        elif kind in ("rtf", "hades"):
            kw.update(getattr(self, kind))
        return kw


FRONTS = ("waveform", "filterbank", "spectrogram")


@dataclass
class FrontOptions:
    """Config fields of what a classifier or recogniser puts before its first block.

    ``front = "waveform"``: nothing, the first block reads the waveform (the paper's networks).
    ``front = "filterbank"``: a :class:`~edgessm.ssm.filterbank.FilterbankFront`, the log energies of
    ``front_bands`` learnable SSM band-pass filters (``front_states`` modes each), one frame per
    ``front_pool`` samples; the blocks then start at ``16000 / front_pool`` Hz with ``front_bands`` channels.
    ``front = "spectrogram"``: a :class:`~edgessm.nets.spectrogram.SpectrogramFront`, the log energies of
    ``front_bands`` learnable band weightings of a fixed ``front_window``-sample short-time power spectrum,
    at the same frame rate and times (a fraction of the filterbank front's cost).
    """

    front: str = "waveform"
    front_bands: int = 40
    front_states: int = 1
    front_pool: int = 160
    front_window: int = 256  # the spectrogram front's frame (and DFT) length in samples

    def make_front(self, rate: float = WAVEFORM_RATE) -> tuple[list[Streamable], int, float]:
        """``(layers, channels out, rate out)`` of the front at input ``rate`` Hz."""
        if self.front not in FRONTS:
            raise ValueError(f"front must be one of {', '.join(FRONTS)}, got {self.front!r}")
        if self.front == "waveform":
            return [], 1, rate
        if self.front == "spectrogram":
            layer: Streamable = SpectrogramFront(self.front_bands, self.front_pool, self.front_window, rate)
        else:
            layer = FilterbankFront(self.front_bands, self.front_states, self.front_pool, rate)
        return [layer], self.front_bands, rate / self.front_pool


def centaurus_backbone(channels: Sequence[int], states: Sequence[int], kinds: Sequence[str], pools: Sequence[int],
                       n_sub: int = 4, dropout: float = 0.0, pre_conv: int = 0,
                       options: BlockOptions | None = None,
                       front: FrontOptions | None = None) -> StreamSequential:  # fmt: skip
    """``(B, 1, T) -> (B, channels[-1], T / (front pool * prod(pools)))``; a pool of 1 adds no layer.

    ``options``: the blocks' ES-SSM options, initialisation and front norm (:class:`BlockOptions`).
    ``front``: what reads the waveform before the first block (:class:`FrontOptions`; default: nothing).
    The first block has a skip only after a front (the waveform has one channel).
    """
    n = len(channels)
    if not (len(states) == len(kinds) == len(pools) == n):
        raise ValueError("channels, states, kinds and pools must have one entry per block")
    options = options or BlockOptions()
    layers, c_in, rate = (front or FrontOptions()).make_front()
    for i in range(n):
        block = CentaurusBlock(kinds[i], c_in, channels[i], states[i], n_sub, skip=i > 0 or c_in > 1,
                               dropout=dropout, pre_conv=pre_conv if c_in > 1 else 0,
                               **options.block_kwargs(kinds[i], rate))  # fmt: skip
        options.bound_memory(block, rate)
        layers.append(block)
        if pools[i] > 1:
            layers.append(AvgPool(pools[i]))
            rate /= pools[i]
        c_in = channels[i]
    return StreamSequential(*layers)
