"""Shipped models: ``models/<name>/`` folders with their graphs and a hash manifest (torch-free).

``resolve_graph("kws35")`` finds ``models/kws35/kws35.onnx`` (``int8=True``: ``kws35.int8.onnx``),
checks it against ``models/kws35/manifest.json`` (sha256 of every shipped file) and returns its
path; a path to an ``.onnx`` file is returned as it is, and so is the graph of a model folder path.

Elastic (ES-SSM) models have one graph per compute budget ``K``: ``NAME.onnx`` at the full budget
``K̄`` and ``NAME.kK.onnx`` for the others (``NAME.kK.int8.onnx`` in int8), listed in the manifest's
``budgets``; ``resolve_graph("kws35-es", budget=4)`` returns ``kws35-es.k4.onnx``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parents[2] / "models"
SWEEP_BUDGETS = (2, 3, 4, 6, 8, 12, 16, 24, 32)  # the budgets `--budget all` exports (those <= K̄, and K̄)
NOT_ELASTIC = "--budget applies to ES-SSM models only"


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


def shipped_lm(graph: str | os.PathLike) -> Path | None:
    """The word model a recognizer's folder ships (its manifest's ``lm``), hash-checked; ``None`` if none."""
    folder = Path(graph).parent
    name = _manifest(folder).get("lm") if (folder / "manifest.json").is_file() else None
    if not name:
        return None
    path = folder / name
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found (listed in {folder / 'manifest.json'})")
    verify_file(path)
    return path


LM_DEFAULTS = {"beam": 16, "lm_weight": 0.5, "word_bonus": 1.0}  # beam search settings when none are shipped


def shipped_lm_settings(graph: str | os.PathLike) -> dict[str, float]:
    """The beam search settings a recognizer's folder ships with its word model (manifest ``lm_decoder``,
    chosen on validation speech at export), over :data:`LM_DEFAULTS`."""
    folder = Path(graph).parent
    found = _manifest(folder).get("lm_decoder", {}) if (folder / "manifest.json").is_file() else {}
    return {**LM_DEFAULTS, **{k: v for k, v in found.items() if k in LM_DEFAULTS}}


def parse_budget(value: int | str) -> int:
    """A compute budget ``K``: a whole number of spectral channels, at least 1."""
    try:
        k = int(str(value).strip())
    except ValueError:
        k = 0
    if k < 1:
        raise ValueError(f"a budget is a whole number of ES-SSM spectral channels K >= 1, got {value!r}")
    return k


def parse_budgets(spec: str | int, k_max: int) -> list[int]:
    """Budgets from ``K``, ``K1,K2,...`` or ``all`` (:data:`SWEEP_BUDGETS` up to ``k_max``, and ``k_max``)."""
    if str(spec).strip() == "all":
        return sorted({k for k in SWEEP_BUDGETS if k <= k_max} | {k_max})
    budgets = sorted({parse_budget(item) for item in str(spec).split(",") if item.strip()})
    if not budgets:
        raise ValueError(f"no budgets in {spec!r}")
    over = [k for k in budgets if k > k_max]
    if over:
        raise ValueError(f"budget {over[0]} is above the model's K̄ = {k_max}; budgets are 1..{k_max}")
    return budgets


def _manifest(folder: Path) -> dict:
    path = folder / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _int8_name(graph: str) -> str:
    return graph[: -len(".onnx")] + ".int8.onnx"


def graph_budgets(folder: Path) -> dict[int, str]:
    """``{K: graph file name}`` of a model folder's budget graphs (its manifest's ``budgets``; ``{}`` if none)."""
    return {int(k): v for k, v in _manifest(folder).get("budgets", {}).items()}


def budget_graphs(name_or_path: str | os.PathLike, int8: bool = False) -> dict[int, Path]:
    """Every budget graph of an elastic model (shipped name, model folder or one of its graphs), checked."""
    folder = model_folder(name_or_path)
    budgets = graph_budgets(folder)
    if not budgets:
        raise ValueError(f"{NOT_ELASTIC}; {folder.name} has no compute budgets")
    out = {}
    for k, name in sorted(budgets.items()):
        graph = folder / (_int8_name(name) if int8 else name)
        if not graph.is_file():
            raise FileNotFoundError(f"{graph} not found (listed in {folder / 'manifest.json'})")
        verify_file(graph)
        out[k] = graph
    return out


def model_folder(name_or_path: str | os.PathLike) -> Path:
    """The model folder of a shipped name, a folder path or a graph path."""
    p = Path(name_or_path).expanduser()
    if p.suffix == ".onnx":
        return p.parent
    if p.is_dir() and (any(p.glob("*.onnx")) or (p / "manifest.json").is_file()):
        return p
    folder = MODELS_DIR / str(name_or_path)
    if not folder.is_dir():
        known = ", ".join(shipped_models()) or "none yet"
        raise FileNotFoundError(
            f"no model {str(name_or_path)!r} (shipped models: {known}; or give a path to an .onnx graph)"
        )
    return folder


def _budget_graph(folder: Path, budget: int | str, int8: bool, name: str) -> Path:
    budgets = graph_budgets(folder)
    if not budgets:
        raise ValueError(f"{NOT_ELASTIC}; {name} has no compute budgets")
    k = parse_budget(budget)
    if k not in budgets:
        have = ", ".join(str(b) for b in sorted(budgets))
        raise FileNotFoundError(
            f"{name} has no graph at budget {k} (exported budgets: {have}); write one with "
            f"`edgessm export {name} --out DIR --budget {k}`"
        )
    return folder / (_int8_name(budgets[k]) if int8 else budgets[k])


def resolve_graph(
    name_or_path: str | os.PathLike, int8: bool = False, budget: int | str | None = None, files: bool = False
) -> Path:
    """The ``.onnx`` graph for a shipped model name, a model folder or a graph path.

    ``files``: the folder's graph for files (larger chunks, manifest ``file_graph``) when it has one and
    no budget is asked for; a graph path is taken as it is.

    ``budget``: the graph exported at that compute budget (elastic ES-SSM models; see the module
    docstring). A graph path given with a budget is swapped for its folder's graph at that budget when
    the folder's manifest lists it; otherwise it is returned as it is (callers check its metadata with
    :func:`check_budget`). A model without budgets refuses one with a ``ValueError``.
    """
    p = Path(name_or_path).expanduser()
    if p.suffix == ".onnx":
        if not p.is_file():
            raise FileNotFoundError(f"{p} not found")
        if budget is not None:
            budgets = graph_budgets(p.parent)
            names = {*budgets.values(), *map(_int8_name, budgets.values())}
            if p.name in names:
                p = _budget_graph(p.parent, budget, ".int8." in p.name, str(p.parent))
        verify_file(p)
        return p
    folder = model_folder(name_or_path)
    file_graph = _manifest(folder).get("file_graph") if files else None
    if budget is not None:
        graph = _budget_graph(folder, budget, int8, str(name_or_path))
    elif file_graph:
        graph = folder / (_int8_name(file_graph) if int8 else file_graph)
    else:  # the graph the manifest names (`edgessm export --name`), else the folder's name
        main = _manifest(folder).get("graph") or f"{folder.name}.onnx"
        graph = folder / (_int8_name(main) if int8 else main)
    if not graph.is_file():
        if folder.parent == MODELS_DIR:
            known = ", ".join(shipped_models()) or "none yet"
            raise FileNotFoundError(
                f"no model {str(name_or_path)!r} (shipped models: {known}; or give a path to an .onnx graph)"
            )
        raise FileNotFoundError(f"{graph} not found")
    verify_file(graph)
    return graph


def check_budget(metadata: dict[str, str], budget: int | str | None, name: str) -> None:
    """Refuse a graph whose compute budget (its ``budget`` metadata) is not the ``budget`` asked for."""
    if budget is None:
        return
    have = metadata.get("budget")
    if have is None:
        raise ValueError(f"{NOT_ELASTIC}; {name} has no compute budget")
    k = parse_budget(budget)
    if int(have) != k:
        raise ValueError(
            f"{name} was exported at budget {have}: the budget is fixed at export; export the model at budget {k} "
            f"(`edgessm export MODEL --out DIR --budget {k}`) and pass its folder or graph"
        )
