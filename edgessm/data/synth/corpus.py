"""Plan and render the synthetic corpus: voices x texts -> perturbed 16 kHz clips, manifest and summary.

Every clip is determined by (seed, voice, kind, text, rendition): the engine parameters and the
perturbation are drawn from a generator seeded with a hash of those, and the file name carries a hash of
everything that shapes the audio. A file that exists is therefore already right and is skipped, and
files are written atomically, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import multiprocessing
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import soundfile as sf

from edgessm.data.audio import SAMPLE_RATE, write_audio
from edgessm.data.labels import UNKNOWN
from edgessm.data.manifest import Clip, write_manifest
from edgessm.data.text_sources import read_sentences

from .config import DEFAULT_BLENDS, DEFAULT_WEIGHTS, KINDS, PRESETS, PerVoice, default_dir
from .engines import Engine, EngineError, EngineStatus, Voice, discover, make_engines
from .gate import DEFAULT_THRESHOLD, GATED_KINDS, GateReport
from .gate import teacher_gate as run_gate
from .perturb import Perturbation, render, sample_perturbation
from .splits import SPLITS, assign_splits
from .texts import KEYWORDS, Sentence, generate_sentences, normalize_transcript, stable_unit, unknown_words

GENERATOR_VERSION = 1  # bump when a change to the code alters the audio of an unchanged plan


@dataclass(frozen=True)
class Utterance:
    """One planned clip.

    Attributes:
        voice: who says it; ``split`` is the voice's split.
        kind: ``keywords``, ``unknown`` or ``sentences``.
        label: the keyword, ``_unknown_``, or empty for sentences.
        text: normalised transcript; ``spoken`` is what the engine gets.
        rep: rendition number of this text by this voice.
        engine_params / perturbation: the variation drawn for this clip.
        key: hash of everything that shapes the audio; ``relpath`` is the file below the corpus folder.
    """

    voice: Voice
    split: str
    kind: str
    label: str
    text: str
    spoken: str
    rep: int
    engine_params: dict[str, float]
    perturbation: Perturbation
    key: str
    relpath: str


def _seed_of(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8], "big")


def _make_utterance(
    engine: Engine, voice: Voice, split: str, kind: str, label: str, text: str, spoken: str, rep: int, seed: int
) -> Utterance:
    rng = np.random.default_rng(_seed_of(seed, voice.id, kind, text, rep))
    params = engine.sample_params(voice, rng)
    perturbation = sample_perturbation(rng, pitch_range=2.0 if engine.controls_pitch(voice) else 3.0)
    content = [GENERATOR_VERSION, SAMPLE_RATE, voice.id, spoken, sorted(params.items()), repr(perturbation)]
    key = hashlib.sha256(json.dumps(content).encode()).hexdigest()[:16]
    stem = re.sub(r"[^a-z0-9]+", "-", text)[:40].strip("-") if kind != "sentences" else "s"
    relpath = f"wav/{voice.engine}/{voice.slug}/{kind}/{stem}_{key[:12]}.wav"
    return Utterance(voice, split, kind, label, text, spoken, rep, params, perturbation, key, relpath)


def sentence_pools(n_sentences: int, seed: int, text_sources: Sequence[str] = ()) -> dict[str, list[Sentence]]:
    """The generated sentences, and those of ``text_sources`` (:mod:`edgessm.data.text_sources`), shared
    out to splits (80/10/10 by a hash of the text): test voices read sentences no training voice reads."""
    pools: dict[str, list[Sentence]] = {s: [] for s in SPLITS}
    found = generate_sentences(n_sentences, seed)
    seen = {s.text for s in found}
    for name in text_sources:
        for spoken in read_sentences(name):
            text = normalize_transcript(spoken)
            if text and text not in seen:
                seen.add(text)
                found.append(Sentence(text=text, spoken=spoken, domain=name))
    for s in found:
        u = stable_unit(seed, "sentence-split", s.text)
        pools["train" if u < 0.8 else "validation" if u < 0.9 else "test"].append(s)
    return pools


def _cycle(items: Sequence, count: int, rng: np.random.Generator) -> list[tuple[int, object]]:
    """``count`` picks from a seeded shuffle of ``items``, cycling (rep = pass number) if more are asked."""
    if not items:
        return []
    order = rng.permutation(len(items))
    return [(i // len(items), items[int(order[i % len(items)])]) for i in range(count)]


def plan_corpus(
    engines: Sequence[Engine],
    voices: Sequence[Voice],
    splits: dict[str, str],
    kinds: Sequence[str] = KINDS,
    per_voice: PerVoice | None = None,
    weights: dict[str, int] | None = None,
    seed: int = 0,
    n_sentences: int = 1000,
    keywords: Sequence[str] = KEYWORDS,
    text_sources: Sequence[str] = (),
) -> list[Utterance]:
    """Every clip of the corpus, in a fixed order (voice, kind, text, rendition); ``per_voice`` defaults to
    the ``standard`` preset."""
    per_voice = per_voice or PRESETS["standard"]
    bad = sorted(set(kinds) - set(KINDS))
    if bad:
        raise ValueError(f"unknown kind(s) {bad}; choose from {list(KINDS)}")
    weights = {**DEFAULT_WEIGHTS, **(weights or {})}
    by_name = {e.name: e for e in engines}
    keywords = [normalize_transcript(k) for k in keywords]
    if not all(keywords):
        raise ValueError("every keyword needs at least one letter or digit")
    pool = [w for w in unknown_words() if w not in keywords]
    pools = sentence_pools(n_sentences, seed, text_sources) if "sentences" in kinds else {}
    plan: list[Utterance] = []
    for voice in sorted(voices):
        engine, split, w = by_name[voice.engine], splits[voice.id], int(weights.get(voice.engine, 1))
        if "keywords" in kinds:
            for word in keywords:
                for rep in range(per_voice.keyword_reps * w):
                    plan.append(_make_utterance(engine, voice, split, "keywords", word, word, f"{word}.", rep, seed))
        if "unknown" in kinds:
            rng = np.random.default_rng(_seed_of(seed, voice.id, "unknown-draw"))
            for rep, word in _cycle(pool, per_voice.unknown * w, rng):
                plan.append(_make_utterance(engine, voice, split, "unknown", UNKNOWN, word, f"{word}.", rep, seed))
        if "sentences" in kinds:
            rng = np.random.default_rng(_seed_of(seed, voice.id, "sentence-draw"))
            for rep, s in _cycle(pools[split], per_voice.sentences * w, rng):
                plan.append(_make_utterance(engine, voice, split, "sentences", "", s.text, s.spoken, rep, seed))
    return plan


# ---- rendering (runs in worker processes) ----


@dataclass(frozen=True)
class _Result:
    relpath: str
    seconds: float  # duration of the written clip, 0 if it failed
    error: str = ""


def render_batch(engine: Engine, voice: Voice, items: list[Utterance], root: str) -> list[_Result]:
    """Synthesize ``items`` (all of ``voice``) in one engine batch, perturb and write each clip."""
    try:
        audio = engine.synthesize(voice, [(u.spoken, u.engine_params) for u in items])
    except Exception as e:  # an engine bug must not take the other engines down
        audio = [EngineError(f"{engine.name} {voice.id}: {type(e).__name__}: {e}") for _ in items]
    results = []
    for u, res in zip(items, audio, strict=True):
        if isinstance(res, EngineError):
            results.append(_Result(u.relpath, 0.0, str(res)))
            continue
        try:
            clip = render(res[0], res[1], u.perturbation)
            write_audio(Path(root) / u.relpath, clip, SAMPLE_RATE)
            results.append(_Result(u.relpath, len(clip) / SAMPLE_RATE))
        except (ValueError, OSError) as e:
            results.append(_Result(u.relpath, 0.0, f"{voice.id} {u.text!r}: {e}"))
    return results


# ---- the whole run ----


def wav_seconds(path: Path) -> float:
    """Duration of a wav file from its RIFF header (a cheap read; libsndfile for anything unusual)."""
    with open(path, "rb") as f:
        head = f.read(512)
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        pos, rate, block = 12, 0, 0
        while pos + 8 <= len(head):
            chunk, size = head[pos : pos + 4], int.from_bytes(head[pos + 4 : pos + 8], "little")
            if chunk == b"fmt ":
                rate = int.from_bytes(head[pos + 12 : pos + 16], "little")
                block = int.from_bytes(head[pos + 20 : pos + 22], "little")
            elif chunk == b"data" and rate and block:
                return size // block / rate
            pos += 8 + size + (size & 1)
    info = sf.info(str(path))
    return info.frames / info.samplerate


@dataclass
class CorpusReport:
    """What a generation run produced.

    Attributes:
        out_dir: corpus folder; ``manifest`` its manifest.csv.
        voices: voices used per engine; ``missing``: engine -> why it was skipped (what to install).
        clips: clips in the manifest; ``synthesized`` new this run; ``cached`` already present;
            ``failed`` could not be made (first messages in ``errors``).
        hours: audio in the manifest; ``seconds``: wall time of this run.
        counts: kind -> split -> clips.
        missing_clips: planned clips not rendered (a run stopped by its time limit); the manifest omits them.
    """

    out_dir: Path
    manifest: Path
    voices: dict[str, int]
    missing: dict[str, str]
    clips: int = 0
    synthesized: int = 0
    cached: int = 0
    failed: int = 0
    hours: float = 0.0
    seconds: float = 0.0
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    stale: int = 0
    gate: GateReport | None = None
    missing_clips: int = 0

    def summary(self) -> str:
        lines = [f"corpus: {self.out_dir}"]
        for kind, by_split in self.counts.items():
            parts = ", ".join(f"{s} {n}" for s, n in by_split.items())
            lines.append(f"  {kind:<10} {sum(by_split.values()):>7} clips ({parts})")
        lines.append(
            f"  total      {self.clips:>7} clips, {self.hours:.2f} h of audio, {sum(self.voices.values())} voices; "
            f"{self.synthesized} synthesized, {self.cached} cached, {self.failed} failed in {self.seconds:.0f} s"
        )
        if self.missing_clips:
            lines.append(f"  partial: {self.missing_clips} planned clips not rendered yet (rerun the same command)")
        if self.stale:
            lines.append(f"  {self.stale} files from other parameters are not in the manifest (--prune deletes them)")
        if self.gate is not None:
            lines += self.gate.lines()
        lines += [f"  error: {e}" for e in self.errors[:5]]
        return "\n".join(lines)


def describe_inventory(statuses: dict[str, EngineStatus]) -> list[str]:
    """One line per engine: its voice count, or why it is missing and what to install."""
    return [
        f"  {name:<10} {len(st.voices):>4} voices  {st.message}"
        if st.available
        else f"  {name:<10} missing   {st.message}"
        for name, st in statuses.items()
    ]


def _run_batches(
    engines: dict[str, Engine],
    todo: list[Utterance],
    root: Path,
    jobs: int,
    progress: bool,
    deadline: float | None = None,
) -> list[_Result]:
    """Render ``todo`` in voice batches; after ``deadline`` (``time.time()``) no new batch starts."""
    batches: list[tuple[Engine, Voice, list[Utterance]]] = []
    by_voice: dict[Voice, list[Utterance]] = {}
    for u in todo:
        by_voice.setdefault(u.voice, []).append(u)
    for voice, items in by_voice.items():
        engine = engines[voice.engine]
        batches += [(engine, voice, items[i : i + engine.chunk_size]) for i in range(0, len(items), engine.chunk_size)]
    batches.sort(key=lambda b: -b[0].cost * len(b[2]))  # slow work first: better packing on few cores
    from tqdm import tqdm

    results: list[_Result] = []
    bar = tqdm(total=len(todo), unit="clip", desc="synthesizing", disable=not progress, smoothing=0.05)
    try:
        if jobs <= 1:
            for engine, voice, items in batches:
                if deadline is not None and time.time() > deadline:
                    break
                results += render_batch(engine, voice, items, str(root))
                bar.update(len(items))
        else:
            ctx = multiprocessing.get_context("spawn")  # no fork: engines hold ONNX Runtime threads
            with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
                pending = {pool.submit(render_batch, e, v, items, str(root)): items for e, v, items in batches}
                try:
                    while pending:
                        if deadline is not None and time.time() > deadline:
                            for fut in [f for f in pending if f.cancel()]:
                                pending.pop(fut)  # not started: left for the next run
                            if not pending:
                                break
                        done, _ = wait(pending, return_when=FIRST_COMPLETED)
                        for fut in done:
                            items = pending.pop(fut)
                            try:
                                results += fut.result()
                            except Exception as e:  # a crashed worker fails its batch, not the run
                                results += [_Result(u.relpath, 0.0, f"worker failed: {e!r}") for u in items]
                            bar.update(len(items))
                except BaseException:
                    for fut in pending:
                        fut.cancel()
                    raise
    finally:
        bar.close()
    return results


def generate_corpus(
    out_dir: str | os.PathLike | None = None,
    kinds: Sequence[str] = KINDS,
    per_voice: PerVoice | str = "standard",
    seed: int = 0,
    engines: Sequence[str] | None = None,
    jobs: int = 2,
    progress: bool = True,
    *,
    name: str = "default",
    n_sentences: int = 1000,
    keywords: Sequence[str] = KEYWORDS,
    weights: dict[str, int] | None = None,
    espeak_variants: Sequence[str] | None = None,
    voices: Sequence[str] | None = None,
    prune: bool = False,
    log: Callable[[str], None] | None = print,
    blends: int = DEFAULT_BLENDS,
    voice_dir: str | os.PathLike | None = None,
    teacher_gate: bool = False,
    gate_threshold: float = DEFAULT_THRESHOLD,
    text_sources: Sequence[str] = (),
    time_limit_min: float | None = None,
) -> CorpusReport:
    """Generate (or complete) a synthetic corpus and write its ``manifest.csv`` and ``corpus.json``.

    Args:
        out_dir: corpus folder (default :func:`default_dir` of ``name``).
        kinds: any of ``keywords`` (the 35 Speech Commands words, or ``keywords``), ``unknown`` (other
            common words, label ``_unknown_``), ``sentences`` (generated ASR sentences with transcripts).
        per_voice: amounts per voice, or a preset name (``tiny``, ``small``, ``standard``).
        seed: everything (parameters, perturbations, texts, splits) follows from it.
        engines: engine names to use (default: all; absent ones are reported and skipped).
        jobs: worker processes (1: render in this process).
        progress: show a progress bar.
        n_sentences: size of the generated sentence pool (shared 80/10/10 between the splits).
        text_sources: licensed text whose sentences join the pool (``wordnet``, ``bible``, ``gcide``:
            :mod:`edgessm.data.text_sources`).
        weights: per-engine multipliers of ``per_voice`` (default :data:`DEFAULT_WEIGHTS`).
        espeak_variants: espeak-ng variants to pair with each accent (default ``DEFAULT_VARIANTS``).
        voices: keep only voices whose id matches one of these shell patterns (``"espeak-ng:en-us+*"``);
            splits are still assigned over the full inventory, so they do not change.
        prune: delete wav files under the corpus that this plan does not contain.
        log: where the inventory and summary lines go (``None``: silent).
        blends: Kokoro voice blends (with ``engines`` naming ``kokoro``); ``voice_dir`` its base voices.
        teacher_gate: score every word clip with the offline teacher and leave out of the manifest those
            it cannot hear as their word (below ``gate_threshold``; see :mod:`.gate`).
        time_limit_min: start no new batch after this many minutes; the manifest then lists the clips
            present so far (``report.missing_clips`` says how many are still to render; rerun to go on).

    Returns:
        A :class:`CorpusReport`; the same arguments always give byte-identical wav files and manifest.
    """
    started = time.time()
    say = log or (lambda _: None)
    root = Path(out_dir).expanduser() if out_dir is not None else default_dir(name)
    amounts = PRESETS[per_voice] if isinstance(per_voice, str) else per_voice
    adapters = make_engines(engines, espeak_variants, blends=blends, voice_dir=voice_dir, seed=seed)
    statuses = discover(adapters)
    say("TTS engines:")
    for line in describe_inventory(statuses):
        say(line)
    inventory = [v for st in statuses.values() for v in st.voices]
    splits = assign_splits(inventory, seed)
    chosen = [v for v in inventory if not voices or any(fnmatch.fnmatchcase(v.id, p) for p in voices)]
    report = CorpusReport(
        out_dir=root,
        manifest=root / "manifest.csv",
        voices={name: sum(v.engine == name for v in chosen) for name, st in statuses.items() if st.available},
        missing={name: st.message for name, st in statuses.items() if not st.available},
    )
    if not chosen:
        report.errors.append("no voices to synthesize with: install an engine (see the messages above)")
        say(report.errors[-1])
        return report
    weights = {**DEFAULT_WEIGHTS, **(weights or {})}
    plan = plan_corpus(adapters, chosen, splits, kinds, amounts, weights, seed, n_sentences, keywords, text_sources)
    todo = [u for u in plan if not (root / u.relpath).is_file()]
    say(f"{len(plan)} clips planned over {len(chosen)} voices; {len(plan) - len(todo)} already present in {root}")
    deadline = started + 60.0 * time_limit_min if time_limit_min is not None else None
    results = _run_batches({e.name: e for e in adapters}, todo, root, jobs, progress, deadline) if todo else []

    made = {r.relpath: r.seconds for r in results if not r.error}
    report.errors = [r.error for r in results if r.error]
    report.failed, report.synthesized, report.cached = len(report.errors), len(made), len(plan) - len(todo)
    if teacher_gate:
        words = [(u.relpath, u.text, u.voice.id, u.text if u.kind == "keywords" else UNKNOWN) for u in plan
                 if u.kind in GATED_KINDS and (u.relpath in made or (root / u.relpath).is_file())]  # fmt: skip
        report.gate = run_gate(root, words, gate_threshold, jobs, progress)
    clips: list[Clip] = []
    seconds_by_engine: dict[str, float] = {}
    clips_by_engine: dict[str, int] = {}
    counts: dict[str, dict[str, int]] = {}
    for u in plan:
        path = root / u.relpath
        if report.gate is not None and u.relpath in report.gate.rejected:
            continue
        if u.relpath in made:
            secs = made[u.relpath]
        elif path.is_file():
            secs = wav_seconds(path)
        else:
            report.missing_clips += 1
            continue
        clips.append(Clip(str(path), u.voice.id, u.label, u.text, u.split, f"synth:{u.voice.engine}"))
        seconds_by_engine[u.voice.engine] = seconds_by_engine.get(u.voice.engine, 0.0) + secs
        clips_by_engine[u.voice.engine] = clips_by_engine.get(u.voice.engine, 0) + 1
        by_split = counts.setdefault(u.kind, {s: 0 for s in SPLITS})
        by_split[u.split] += 1
    write_manifest(report.manifest, clips)
    report.clips, report.counts = len(clips), counts
    report.hours = sum(seconds_by_engine.values()) / 3600
    report.stale = _stale_files(root, {u.relpath for u in plan}, prune)
    report.seconds = time.time() - started
    params = {
        "generator_version": GENERATOR_VERSION,
        "seed": seed,
        "kinds": list(kinds),
        "per_voice": asdict(amounts),
        "engine_weights": weights,
        "n_sentences": n_sentences,
        "text_sources": list(text_sources),
        "keywords": list(keywords),
        "espeak_variants": list(espeak_variants) if espeak_variants is not None else "default",
        "voice_patterns": list(voices or []),
        "engines_requested": list(engines) if engines is not None else "all",
        "jobs": jobs,
        "sample_rate": SAMPLE_RATE,
        "kokoro_blends": blends,
        "teacher_gate": gate_threshold if teacher_gate else None,
    }
    _write_summary(root, report, statuses, splits, chosen, plan, clips_by_engine, seconds_by_engine, params)
    say(report.summary())
    return report


def _stale_files(root: Path, planned: set[str], prune: bool) -> int:
    wav_root = root / "wav"
    if not wav_root.is_dir():
        return 0
    stale = [p for p in wav_root.rglob("*") if p.is_file() and p.relative_to(root).as_posix() not in planned]
    if prune:
        for p in stale:
            p.unlink()
        return 0
    return len(stale)


def _write_summary(
    root: Path,
    report: CorpusReport,
    statuses: dict[str, EngineStatus],
    splits: dict[str, str],
    chosen: Sequence[Voice],
    plan: Sequence[Utterance],
    clips_by_engine: dict[str, int],
    seconds_by_engine: dict[str, float],
    params: dict,
) -> None:
    used = {v.id for v in chosen}
    doc = {
        "parameters": params,
        "engines": {
            name: {
                "available": st.available,
                "message": st.message,
                "voices": [
                    {"id": v.id, "gender": v.gender, "split": splits[v.id], "used": v.id in used} for v in st.voices
                ],
            }
            for name, st in statuses.items()
        },
        "counts": {
            "clips": report.clips,
            "hours": round(report.hours, 4),
            "by_kind_and_split": report.counts,
            "by_engine": {
                e: {"clips": clips_by_engine[e], "hours": round(s / 3600, 4)} for e, s in seconds_by_engine.items()
            },
            "voices_by_split": {s: sum(splits[v.id] == s for v in chosen) for s in SPLITS},
            "distinct_sentences": len({u.text for u in plan if u.kind == "sentences"}),
            "distinct_unknown_words": len({u.text for u in plan if u.kind == "unknown"}),
        },
        "generation": {
            "seconds": round(report.seconds, 1),
            "synthesized": report.synthesized,
            "cached": report.cached,
            "failed": report.failed,
            "errors": report.errors[:20],
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "python": sys.version.split()[0],
        },
    }
    if report.gate is not None:
        g = report.gate
        doc["teacher_gate"] = {
            "threshold": g.threshold,
            "scored": len(g.scores),
            "rejected": len(g.rejected),
            "rejection_rate": round(g.rate, 4),
            "by_word": {w: {"rejected": r, "scored": n} for w, (r, n) in sorted(g.by_word.items())},
            "by_voice": {v: {"rejected": r, "scored": n} for v, (r, n) in sorted(g.by_voice.items())},
        }
    doc["history"] = _previous_runs(root / "corpus.json")  # earlier runs into this folder, oldest first
    tmp = root / ".corpus.json.tmp"
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, root / "corpus.json")


def _previous_runs(path: Path, keep: int = 50) -> list[dict]:
    """The generation records of the runs before this one (from an existing corpus.json), the last ``keep``."""
    try:
        old = json.loads(path.read_text())
        runs = [*old.get("history", []), {**old["generation"], "clips": old["counts"]["clips"]}]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return runs[-keep:]
