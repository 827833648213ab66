"""``edgessm models``: the shipped models, what each does and costs, and whether their files are intact
(torch-free).

edgessm models                 # a table: task, parameters, compute, chunk, graphs
edgessm models kws35           # one model in detail: labels, graphs, budgets, card
edgessm models --verify        # check every shipped file against its manifest's sha256
edgessm models --json          # the same facts as JSON
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .registry import MODELS_DIR, sha256, shipped_models

TASKS = {"kws": "keyword spotting", "denoise": "denoising", "asr": "speech recognition"}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("name", nargs="?", help="one shipped model to describe in detail")
    ap.add_argument("--verify", action="store_true", help="check every shipped file against its recorded sha256")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")


def describe(folder: Path) -> dict:
    """Facts about one model folder: its manifest, and the metadata of its main graph."""
    import onnxruntime as ort

    manifest = json.loads((folder / "manifest.json").read_text()) if (folder / "manifest.json").is_file() else {}
    graphs = sorted(p.name for p in folder.glob("*.onnx"))
    main = folder / f"{folder.name}.onnx"
    meta: dict[str, str] = {}
    if main.is_file():
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        meta = dict(ort.InferenceSession(str(main), opts, providers=["CPUExecutionProvider"])
                    .get_modelmeta().custom_metadata_map)  # fmt: skip
    chunk = int(meta.get("chunk", manifest.get("chunk", 0)) or 0)
    rate = int(meta.get("sample_rate", 16000))
    return {
        "name": folder.name,
        "task": meta.get("task", ""),
        "params": int(meta["params"]) if "params" in meta else None,
        "mflops_per_second": float(meta["flops_per_second"]) / 1e6 if "flops_per_second" in meta else None,
        "chunk_ms": 1000 * chunk / rate if chunk else None,
        "latency_ms": 1000 * int(meta.get("latency_samples", chunk)) / rate if chunk else None,
        "labels": json.loads(meta["labels"]) if "labels" in meta else [],
        "threshold": float(meta["threshold"]) if "threshold" in meta else None,
        "class_thresholds": json.loads(meta["class_thresholds"]) if "class_thresholds" in meta else {},
        "contrast_db": float(meta["contrast_db"]) if float(meta.get("contrast_db", 0) or 0) else None,
        "speech_after": float(meta["speech_after"]) if float(meta.get("speech_after", 0) or 0) else None,
        "hold_s": float(meta["hold_s"]) if float(meta.get("hold_s", 0) or 0) else None,
        "margin": float(meta["margin"]) if float(meta.get("margin", 0) or 0) else None,
        "input_agc": json.loads(meta["input_agc"]) if meta.get("input_agc") else None,
        "graphs": graphs,
        "budgets": manifest.get("budgets", {}),
        "lm": manifest.get("lm"),
        "lm_decoder": manifest.get("lm_decoder", {}),
        "card": str(folder / "README.md") if (folder / "README.md").is_file() else None,
        "files": manifest.get("files", {}),
    }


def verify(folder: Path, files: dict[str, str]) -> list[str]:
    """Problems with a model folder's files: missing, or not matching the manifest's sha256."""
    problems = []
    for name, digest in sorted(files.items()):
        path = folder / name
        if not path.is_file():
            problems.append(f"{folder.name}/{name}: missing")
        elif sha256(path) != digest:
            problems.append(f"{folder.name}/{name}: sha256 differs from manifest.json (damaged or altered)")
    return problems


def _fmt(x, fmt: str) -> str:
    return "-" if x is None else fmt.format(x)


def run(args: argparse.Namespace) -> int:
    names = shipped_models()
    if args.name is not None:
        if args.name not in names:
            raise SystemExit(f"edgessm models: no shipped model {args.name!r} (shipped: {', '.join(names) or 'none'})")
        names = [args.name]
    try:
        facts = [describe(MODELS_DIR / n) for n in names]
    except (OSError, ValueError) as e:
        raise SystemExit(f"edgessm models: cannot read a model folder ({e})") from None
    problems: list[str] = []
    if args.verify:
        for f in facts:
            found = verify(MODELS_DIR / f["name"], f["files"])
            f["verified"] = not found
            problems += found
    if args.json:
        print(json.dumps([{k: v for k, v in f.items() if k != "files"} for f in facts], indent=1))
    elif args.name is not None:
        _detail(facts[0])
    else:
        _table(facts, args.verify)
    for p in problems:
        print(f"edgessm models: {p}", file=sys.stderr)
    if args.verify and not problems:
        n = sum(len(f["files"]) for f in facts)
        print(f"all {n} shipped files match their sha256", file=sys.stderr)
    return 1 if problems else 0


def _table(facts: list[dict], verified: bool) -> None:
    head = f"{'model':<12} {'task':<19} {'params':>9} {'MFLOP/s':>8} {'chunk':>7}  graphs"
    print(head + ("  files" if verified else ""))
    for f in facts:
        task = TASKS.get(f["task"], f["task"] or "?")
        graphs = f"{len(f['graphs'])} (" + ", ".join(_kinds(f)) + ")"
        params, mflops = _fmt(f["params"], "{:,}"), _fmt(f["mflops_per_second"], "{:.1f}")
        line = f"{f['name']:<12} {task:<19} {params:>9} {mflops:>8} {_fmt(f['chunk_ms'], '{:.0f} ms'):>7}  {graphs}"
        print(line + (("  ok" if f["verified"] else "  DAMAGED") if verified else ""))
    print("\nedgessm models NAME: details; --verify: check the files; cards: models/NAME/README.md")


def _kinds(f: dict) -> list[str]:
    kinds = ["fp32"]
    if any(g.endswith(".int8.onnx") for g in f["graphs"]):
        kinds.append("int8")
    if f["budgets"]:
        kinds.append("budgets " + ",".join(sorted(f["budgets"], key=int)))
    return kinds


def _detail(f: dict) -> None:
    print(f"{f['name']}: {TASKS.get(f['task'], f['task'])}")
    print(f"  parameters     {_fmt(f['params'], '{:,}')}")
    print(f"  compute        {_fmt(f['mflops_per_second'], '{:.1f}')} MFLOP per second of audio")
    latency = _fmt(f["latency_ms"], "{:.0f} ms")
    print(f"  chunk          {_fmt(f['chunk_ms'], '{:.0f} ms')} per graph call (latency {latency})")
    if f["labels"]:
        shown = ", ".join(f["labels"][:40]) + (" ..." if len(f["labels"]) > 40 else "")
        print(f"  labels         {len(f['labels'])}: {shown}")
    if f["class_thresholds"]:
        values = sorted(f["class_thresholds"].values())
        span = f"{values[0]:g}-{values[-1]:g}"
        print(f"  thresholds     per keyword, {span} (calibrated; listen --threshold X overrides)")
    elif f["threshold"] is not None:
        print(f"  threshold      {f['threshold']}")
    if f.get("contrast_db") is not None:
        print(f"  contrast gate  {f['contrast_db']:g} dB above the second before the word (listen --contrast 0: off)")
    if f.get("speech_after") is not None:
        print(f"  speech after   no running speech after the word (mean _unknown_ <= {f['speech_after']:g} over "
              "0.1-0.4 s; reported 0.4 s later; listen --speech-after 0: off)")  # fmt: skip
    if f.get("hold_s") is not None:
        print(f"  hold           the strongest keyword within {f['hold_s']:g} s of a crossing fires (reported "
              f"{f['hold_s']:g} s later; listen --hold 0: off)")  # fmt: skip
    if f.get("margin") is not None:
        print(f"  margin         a keyword fires only {f['margin']:g} above every other keyword's posterior "
              "(listen --margin 0: off)")  # fmt: skip
    agc = f.get("input_agc")
    if agc:
        cut = f", loud input lowered by at most {agc['max_cut']:g} dB" if agc.get("max_cut") else ""
        print(f"  level control  quiet input raised toward {agc['target']:g} dBFS, at most {agc['max_gain']:g} dB"
              f"{cut} (--agc off: the audio as it is)")  # fmt: skip
    elif f["task"] in ("kws", "asr"):
        print("  level control  off (--agc on: quiet input raised to the level the model was trained on)")
    print(f"  graphs         {', '.join(f['graphs'])}")
    if f["budgets"]:
        print(f"  budgets        {', '.join(sorted(f['budgets'], key=int))}")
    if f.get("lm"):
        settings = ", ".join(f"{k.replace('_', ' ')} {v:g}" for k, v in f.get("lm_decoder", {}).items())
        settings = f" ({settings})" if settings else ""
        print(
            f"  word model     {f['lm']}: final results by beam search with it{settings}; transcribe --lm none: greedy"
        )
    if f["card"]:
        print(f"  model card     {f['card']}")
    if "verified" in f:
        print(f"  files          {'match their sha256' if f['verified'] else 'DAMAGED (see below)'}")
