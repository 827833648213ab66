"""Whole networks built from the SSM blocks; each is configured by a plain dataclass (configs as data)."""

from __future__ import annotations

from .asr import CtcRecognizer, CtcRecognizerConfig
from .denoise import Hourglass, HourglassConfig
from .kws import KeywordSpotter, KeywordSpotterConfig
from .spectral import SpectralDenoiser, SpectralDenoiserConfig

NETWORKS = {
    "kws": (KeywordSpotter, KeywordSpotterConfig),
    "denoise": (Hourglass, HourglassConfig),
    "asr": (CtcRecognizer, CtcRecognizerConfig),
}
# networks of one task that differ in architecture: the config's ``arch`` picks one (default first)
ARCHS = {"denoise": {"hourglass": (Hourglass, HourglassConfig), "spectral": (SpectralDenoiser, SpectralDenoiserConfig)}}


def build_network(kind: str, **config):
    """Build network ``kind`` (``kws``, ``denoise``, ``asr``) from config keys of its dataclass; a denoiser's
    ``arch`` (``hourglass``, the default, or ``spectral``) picks its architecture."""
    if kind not in NETWORKS:
        raise ValueError(f"unknown network {kind!r}; choose one of {sorted(NETWORKS)}")
    cls, cfg_cls = NETWORKS[kind]
    if kind in ARCHS:
        arch = config.get("arch", next(iter(ARCHS[kind])))
        if arch not in ARCHS[kind]:
            raise ValueError(f"unknown {kind} arch {arch!r}; choose one of {', '.join(ARCHS[kind])}")
        cls, cfg_cls = ARCHS[kind][arch]
    known = set(cfg_cls.__dataclass_fields__)
    unknown = set(config) - known
    if unknown:
        raise ValueError(f"unknown {kind} config keys {sorted(unknown)}; known: {sorted(known)}")
    return cls(cfg_cls(**config))


__all__ = [
    "ARCHS",
    "NETWORKS",
    "CtcRecognizer",
    "CtcRecognizerConfig",
    "Hourglass",
    "HourglassConfig",
    "KeywordSpotter",
    "KeywordSpotterConfig",
    "SpectralDenoiser",
    "SpectralDenoiserConfig",
    "build_network",
]
