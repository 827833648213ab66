"""Load a trained network for export: a run directory or a shipped model folder.

Both hold ``model.json`` (network kind, config, labels) and ``model.safetensors`` (weights).
Weights are read with safetensors (no pickle).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from torch import nn

from edgessm.nets import build_network

MODELS_DIR = Path(__file__).resolve().parents[2] / "models"


def resolve_model_dir(name_or_path: str | os.PathLike) -> Path:
    """A run/model folder path, or the name of a shipped model under ``models/``."""
    p = Path(name_or_path).expanduser()
    if p.is_dir():
        return p
    shipped = MODELS_DIR / str(name_or_path)
    if shipped.is_dir():
        return shipped
    raise FileNotFoundError(f"{name_or_path!r} is neither a model folder nor a shipped model in {MODELS_DIR}")


def load_trained(name_or_path: str | os.PathLike) -> tuple[nn.Module, dict[str, Any]]:
    """``(network in eval mode, description)`` from a folder with model.json + model.safetensors."""
    from safetensors.torch import load_file

    d = resolve_model_dir(name_or_path)
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
