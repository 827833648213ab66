"""The corpus report: what the training data holds, real and synthetic, per engine and per keyword.

``edgessm synth --report`` reads every synthetic corpus in the cache (their ``manifest.csv`` and
``corpus.json``) and the real keyword clips of the shared data folder, and prints a Markdown report:
clips, hours, voices and build time per corpus and engine, the teacher gate's rejection rates, and for
each of the 35 keywords how many real speakers and clips stand beside how many synthetic voices.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

from edgessm.data.manifest import read_manifest

from .config import default_dir
from .texts import KEYWORDS


def _corpora(dirs: list[Path] | None) -> list[Path]:
    if dirs:
        return [d for d in dirs if (d / "manifest.csv").is_file()]
    root = default_dir("x").parent
    return sorted(d for d in root.iterdir() if (d / "manifest.csv").is_file()) if root.is_dir() else []


def corpus_report(dirs: list[Path] | None = None, real: bool = True) -> str:
    """The Markdown report of the synthetic corpora in ``dirs`` (default: all under the cache) and, with
    ``real``, of the shared real keyword clips (left out with a note when the folder is absent)."""
    lines = ["# Training data report", ""]
    corpora = _corpora(dirs)
    synth_voices: dict[str, set[str]] = defaultdict(set)
    synth_clips: Counter[str] = Counter()
    rows = []
    for d in corpora:
        clips = read_manifest(d / "manifest.csv")
        meta = json.loads((d / "corpus.json").read_text()) if (d / "corpus.json").is_file() else {}
        by_engine = meta.get("counts", {}).get("by_engine", {})
        build_s = sum(r.get("seconds", 0) for r in meta.get("history", [])) + meta.get("generation", {}).get(
            "seconds", 0
        )
        engines: dict[str, set[str]] = defaultdict(set)
        for c in clips:
            engines[c.source.removeprefix("synth:")].add(c.speaker)
            if c.label in KEYWORDS:
                synth_voices[c.label].add(c.speaker)
                synth_clips[c.label] += 1
        for engine, voices in sorted(engines.items()):
            info = by_engine.get(engine, {})
            rows.append(f"| {d.name} | {engine} | {info.get('clips', '?')} | {info.get('hours', 0):.2f} | "
                        f"{len(voices)} | {build_s / 60:.0f} |")  # fmt: skip
        gate = meta.get("teacher_gate")
        if gate:
            worst = sorted(gate["by_word"].items(), key=lambda kv: -kv[1]["rejected"] / max(1, kv[1]["scored"]))
            lines.append(
                f"- `{d.name}`: teacher gate (score < {gate['threshold']}) rejected {gate['rejected']} of "
                f"{gate['scored']} word clips ({100 * gate['rejection_rate']:.1f}%); by word: "
                + ", ".join(f"{w} {100 * v['rejected'] / max(1, v['scored']):.0f}%" for w, v in worst[:10])
            )
    if rows:
        header = "| corpus | engine | clips | hours | voices | build min (all runs) |"
        lines[2:2] = [header, "|---|---|---:|---:|---:|---:|", *rows, ""]
    else:
        lines.append("No synthetic corpus in the cache yet (`edgessm synth`).")
    lines += ["", "## Keywords: real speakers beside synthetic voices", ""]
    real_clips: Counter[str] = Counter()
    real_speakers: dict[str, set[str]] = defaultdict(set)
    if real:
        from edgessm.data.corpora import CorpusError, shared_sc_train

        try:
            for c in shared_sc_train():
                real_clips[c.label] += 1
                real_speakers[c.label].add(c.speaker)
        except CorpusError as e:
            lines.append(f"(real clips left out: {e})")
    lines += ["| word | real clips | real speakers | synthetic clips | synthetic voices |", "|---|---:|---:|---:|---:|"]
    for w in KEYWORDS:
        lines.append(f"| {w} | {real_clips[w]} | {len(real_speakers[w])} | {synth_clips[w]} | {len(synth_voices[w])} |")
    return "\n".join(lines) + "\n"
