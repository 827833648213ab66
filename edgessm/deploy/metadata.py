"""Change what a model folder's graphs say about their input and decision, without exporting them again.

    python -m edgessm.deploy.metadata models/kws35 --agc on     # its graphs ask for the input level control
    python -m edgessm.deploy.metadata models/kws35 --agc on --agc-cut 12   # loud input brought down too
    python -m edgessm.deploy.metadata models/kws35 --agc off
    python -m edgessm.deploy.metadata models/kws35-es --threshold 0.6   # a keyword spotter's default threshold

Only the graphs' metadata (``input_agc``, :mod:`edgessm.runtime.level`; ``threshold``, as ``edgessm export
--threshold`` writes it) changes: their nodes and weights stay byte for byte, so the exported numbers (PyTorch
agreement, int8 calibration) still hold. Each graph is rewritten atomically and the manifest's sha256 list is
brought up to date (its other fields kept).
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import replace
from pathlib import Path

from edgessm.atomic import atomic_path, write_text
from edgessm.runtime.level import AgcConfig, task_agc
from edgessm.runtime.registry import sha256

KEY = "input_agc"


def set_graph_metadata(path: str | os.PathLike, key: str, value: str | None) -> None:
    """Set (``None``: remove) one metadata entry of the ONNX graph at ``path``, in place, atomically."""
    import onnx

    proto = onnx.load(str(path))
    kept = [(p.key, p.value) for p in proto.metadata_props if p.key != key]
    del proto.metadata_props[:]
    for k, v in kept + ([(key, value)] if value is not None else []):
        proto.metadata_props.add(key=k, value=v)
    with atomic_path(path) as tmp:
        onnx.save(proto, str(tmp))


def set_folder_metadata(folder: str | os.PathLike, key: str, value: str | None) -> list[Path]:
    """Set (``None``: remove) metadata ``key`` in every graph of the model folder; the manifest's hashes follow.
    Returns the graphs changed. ``FileNotFoundError`` without a manifest."""
    folder = Path(folder)
    manifest_path = folder / "manifest.json"
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{folder} has no manifest.json: not a model folder (edgessm export writes one)")
    manifest = json.loads(manifest_path.read_text())
    graphs = [folder / f for f in manifest["files"] if f.endswith(".onnx")]
    for g in graphs:
        set_graph_metadata(g, key, value)
    manifest["files"] = {f: sha256(folder / f) for f in sorted(manifest["files"])}
    write_text(manifest_path, json.dumps(manifest, indent=1) + "\n")
    return graphs


def set_input_agc(folder: str | os.PathLike, config: AgcConfig | None) -> list[Path]:
    """Every graph of the model folder asks for the level control ``config`` (``None``: none)."""
    return set_folder_metadata(folder, KEY, config.to_json() if config is not None else None)


def folder_agc(folder: str | os.PathLike) -> AgcConfig:
    """The level control settings of the folder's task (:func:`~edgessm.runtime.level.task_agc`), the task read
    from its model.json."""
    desc = Path(folder) / "model.json"
    return task_agc(json.loads(desc.read_text()).get("network", "") if desc.is_file() else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", help="a model folder (graphs + manifest.json)")
    ap.add_argument("--agc", choices=("on", "off"), help="the input level control (the task's settings)")
    ap.add_argument("--agc-cut", type=float, metavar="DB",
                    help="with --agc on: loud input is also brought down toward the control's target, by at most "
                         "DB (default 0: boost only)")  # fmt: skip
    ap.add_argument("--threshold", type=float, help="keyword spotters: the default decision threshold (0..1)")
    args = ap.parse_args(argv)
    if args.agc_cut is not None and args.agc != "on":
        ap.error("--agc-cut goes with --agc on")
    if args.agc_cut is not None and not args.agc_cut >= 0:
        ap.error(f"--agc-cut is 0 dB or more, got {args.agc_cut:g}")
    if args.agc is None and args.threshold is None:
        ap.error("nothing to change: give --agc and/or --threshold")
    if args.threshold is not None and not 0 < args.threshold < 1:
        ap.error(f"--threshold is a posterior between 0 and 1, got {args.threshold:g}")
    try:
        if args.agc is not None:
            config = folder_agc(args.folder) if args.agc == "on" else None
            if config is not None and args.agc_cut is not None:
                config = replace(config, max_cut=args.agc_cut)
            changed = set_input_agc(args.folder, config)
            cut = f" (loud input cut by up to {config.max_cut:g} dB)" if config is not None and config.max_cut else ""
            print(f"{len(changed)} graphs: input_agc {args.agc}{cut}; manifest updated")
        if args.threshold is not None:
            changed = set_folder_metadata(args.folder, "threshold", str(args.threshold))
            print(f"{len(changed)} graphs: threshold {args.threshold:g}; manifest updated")
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(f"edgessm.deploy.metadata: {e}") from None
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
