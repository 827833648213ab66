"""Deterministic offline synthetic speech corpus: every installed TTS voice says the Speech Commands
keywords, "unknown" words and generated sentences, with speaker-like perturbations.

Engines: espeak-ng (8 English accents x variants), flite (kal16, awb, rms, slt), festival (kal and ked
diphones, slt HTS) and Piper voice packages. Missing engines are reported with what to install and skipped.

    from edgessm.data.synth import generate_corpus
    report = generate_corpus("/tmp/synth", per_voice="tiny")   # manifest.csv + corpus.json + wav/
    print(report.summary())

Names are imported on first use, so ``import edgessm.data.synth`` (and the CLI's help) stay light.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DEFAULT_VARIANTS": "config",
    "DEFAULT_WEIGHTS": "config",
    "ENGINE_NAMES": "config",
    "KINDS": "config",
    "PRESETS": "config",
    "PerVoice": "config",
    "default_dir": "config",
    "CorpusReport": "corpus",
    "Utterance": "corpus",
    "generate_corpus": "corpus",
    "plan_corpus": "corpus",
    "EngineStatus": "engines",
    "Voice": "engines",
    "discover": "engines",
    "make_engines": "engines",
    "SPLITS": "splits",
    "assign_splits": "splits",
    "KEYWORDS": "texts",
    "generate_sentences": "texts",
    "normalize_transcript": "texts",
    "unknown_words": "texts",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
