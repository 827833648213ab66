"""Load a trained network for export: a run directory or a shipped model folder.

Both hold ``model.json`` (network kind, config, labels) and ``model.safetensors`` (weights).
Weights are read with safetensors (no pickle).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from torch import nn

from edgessm.nets import build_network
from edgessm.runtime.registry import MODELS_DIR


def resolve_model_dir(name_or_path: str | os.PathLike) -> Path:
    """A run/model folder path, or the name of a shipped model under ``models/``."""
    p = Path(name_or_path).expanduser()
    if p.is_dir():
        return p
    shipped = MODELS_DIR / str(name_or_path)
    if shipped.is_dir():
        return shipped
    raise FileNotFoundError(f"{name_or_path!r} is neither a model folder nor a shipped model in {MODELS_DIR}")


def load_checkpoint(run: Path, which: str) -> tuple[nn.Module, dict[str, Any]]:
    """``(network, description)`` from ``run/checkpoints/<which>.pt`` of a training run (finished or not)."""
    import torch

    from edgessm.train.config import TrainConfig
    from edgessm.train.tasks import build_task

    ckpt = run / "checkpoints" / f"{which}.pt"
    if not ckpt.is_file():
        raise FileNotFoundError(f"{ckpt} not found (checkpoints: best, last)")
    state = torch.load(ckpt, map_location="cpu", weights_only=True)
    task = build_task(TrainConfig.from_dict(json.loads(state["config"])))
    desc = {**task.describe(), "checkpoint": f"{which}.pt", "step": int(state["step"])}
    net = build_network(desc["network"], **desc["config"])
    net.load_state_dict(state["model"])
    return net.eval(), desc


def load_trained(name_or_path: str | os.PathLike, checkpoint: str | None = None) -> tuple[nn.Module, dict[str, Any]]:
    """``(network in eval mode, description)`` from a folder with model.json + model.safetensors,
    or from a run's ``checkpoint`` (``best`` / ``last``)."""
    from safetensors.torch import load_file

    d = resolve_model_dir(name_or_path)
    if checkpoint:
        return load_checkpoint(d, checkpoint)
    desc_path, weights = d / "model.json", d / "model.safetensors"
    for f in (desc_path, weights):
        if not f.is_file():
            raise FileNotFoundError(
                f"{d} has no {f.name}: is it a finished training run (edgessm train ... --out {d})?"
            )
    desc = json.loads(desc_path.read_text())
    net = build_network(desc["network"], **desc["config"])
    missing, unexpected = net.load_state_dict(load_file(str(weights)), strict=False)
    if missing or unexpected:
        raise ValueError(
            f"{weights} does not fit the {desc['network']} config: missing {missing}, unexpected {unexpected}"
        )
    return net.eval(), desc


def write_model_folder(dest: str | os.PathLike, tensors: dict[str, Any], desc: dict[str, Any]) -> Path:
    """Write a new model folder ``dest`` (``model.safetensors`` from ``tensors``, numpy arrays, and ``model.json``
    from ``desc``) atomically: it appears whole or not at all, and an existing folder is refused, never
    overwritten. Returns ``dest``."""
    from safetensors.numpy import save_file

    dest = Path(dest).expanduser()
    if dest.exists():
        raise FileExistsError(f"{dest} exists: give a new folder (a model folder is never overwritten)")
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    tmp.mkdir(parents=True)
    try:
        save_file(tensors, str(tmp / "model.safetensors"))
        (tmp / "model.json").write_text(json.dumps(desc, indent=1) + "\n")
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone after the rename; after a failure, nothing half-written stays
    return dest
