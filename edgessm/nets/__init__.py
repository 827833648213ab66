"""Whole networks built from the SSM blocks; each is configured by a plain dataclass (configs as data)."""

from __future__ import annotations

from .asr import CtcRecognizer, CtcRecognizerConfig
from .denoise import Hourglass, HourglassConfig
from .kws import KeywordSpotter, KeywordSpotterConfig

NETWORKS = {
    "kws": (KeywordSpotter, KeywordSpotterConfig),
    "denoise": (Hourglass, HourglassConfig),
    "asr": (CtcRecognizer, CtcRecognizerConfig),
}


def build_network(kind: str, **config):
    """Build network ``kind`` (``kws``, ``denoise``, ``asr``) from config keys of its dataclass."""
    if kind not in NETWORKS:
        raise ValueError(f"unknown network {kind!r}; choose one of {sorted(NETWORKS)}")
    cls, cfg_cls = NETWORKS[kind]
    known = set(cfg_cls.__dataclass_fields__)
    unknown = set(config) - known
    if unknown:
        raise ValueError(f"unknown {kind} config keys {sorted(unknown)}; known: {sorted(known)}")
    return cls(cfg_cls(**config))


__all__ = [
    "NETWORKS",
    "CtcRecognizer",
    "CtcRecognizerConfig",
    "Hourglass",
    "HourglassConfig",
    "KeywordSpotter",
    "KeywordSpotterConfig",
    "build_network",
]
