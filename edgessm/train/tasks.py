"""The training tasks by name: ``kws`` (:mod:`.kws_task`), ``denoise`` (:mod:`.denoise_task`) and ``asr``
(:mod:`.asr_task`), built from a config by :func:`build_task`; what they share is in :mod:`.task`.

The names below are also importable from here (``from edgessm.train.tasks import KwsTask, load_sources``).
"""

from __future__ import annotations

from .asr_task import AsrData, CtcTask, source_draw_weights
from .config import TrainConfig
from .denoise_task import DenoiseData, DenoiseTask, _aligned, _compressed_error
from .kws_task import KwsData, KwsTask, classify_dataset, frame_targets
from .task import (
    MINED_SOURCE,
    Task,
    _resolve,
    build_augment,
    build_denoise_mixer,
    data_config,
    load_sources,
    noise_paths,
    ramp,
)

__all__ = [
    "MINED_SOURCE",
    "TASKS",
    "AsrData",
    "CtcTask",
    "DenoiseData",
    "DenoiseTask",
    "KwsData",
    "KwsTask",
    "Task",
    "_aligned",
    "_compressed_error",
    "_resolve",
    "build_augment",
    "build_denoise_mixer",
    "build_task",
    "classify_dataset",
    "data_config",
    "frame_targets",
    "load_sources",
    "noise_paths",
    "ramp",
    "source_draw_weights",
]

TASKS: dict[str, type[Task]] = {"kws": KwsTask, "denoise": DenoiseTask, "asr": CtcTask}


def build_task(cfg: TrainConfig) -> Task:
    """The task of ``cfg`` (``cfg.task``: ``kws``, ``denoise`` or ``asr``)."""
    if cfg.task not in TASKS:
        raise ValueError(f"unknown task {cfg.task!r}; choose one of {sorted(TASKS)}")
    return TASKS[cfg.task](cfg)
