"""Shipped models: ``models/<name>/`` folders with their graphs and a hash manifest (torch-free).

``resolve_graph("kws35")`` finds ``models/kws35/kws35.onnx`` (``int8=True``: ``kws35.int8.onnx``),
checks it against ``models/kws35/manifest.json`` (sha256 of every shipped file) and returns its
path; a path to an ``.onnx`` file is returned as it is.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parents[2] / "models"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def shipped_models() -> list[str]:
    """Names of the models under ``models/`` that ship a graph."""
    if not MODELS_DIR.is_dir():
        return []
    return sorted(d.name for d in MODELS_DIR.iterdir() if d.is_dir() and any(d.glob("*.onnx")))


def verify_file(path: Path) -> None:
    """Check a shipped file against its folder's manifest; raise if it was altered."""
    manifest = path.parent / "manifest.json"
    if not manifest.is_file():
        return
    expected = json.loads(manifest.read_text()).get("files", {}).get(path.name)
    if expected and sha256(path) != expected:
        raise ValueError(
            f"{path} does not match its recorded sha256 (damaged or altered); restore it from the repository"
        )


def resolve_graph(name_or_path: str | os.PathLike, int8: bool = False) -> Path:
    """The ``.onnx`` graph for a shipped model name or a path."""
    p = Path(name_or_path).expanduser()
    if p.suffix == ".onnx":
        if not p.is_file():
            raise FileNotFoundError(f"{p} not found")
        verify_file(p)
        return p
    folder = MODELS_DIR / str(name_or_path)
    graph = folder / (f"{folder.name}.int8.onnx" if int8 else f"{folder.name}.onnx")
    if not graph.is_file():
        known = ", ".join(shipped_models()) or "none yet"
        raise FileNotFoundError(
            f"no model {str(name_or_path)!r} (shipped models: {known}; or give a path to an .onnx graph)"
        )
    verify_file(graph)
    return graph
