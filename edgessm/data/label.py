"""``edgessm label``: transcripts with word times and a confidence for untranscribed recordings, by the
offline teacher (:mod:`edgessm.data.teacher`), written as a training manifest.

Files up to 30 s are labelled whole. Longer ones are cut at the speech regions Silero VAD finds into
pieces of at most 28 s. With ``--max-piece S`` every labelled piece longer than S seconds is cut again,
at the pauses between the teacher's words, into pieces of at most S seconds (training recipes leave out
utterances longer than their ``max_samples``). Cut pieces are written as FLAC beside the manifest
(``<out folder>/segments/``), so every row of the manifest is a file a training recipe can read
(``manifest:PATH`` in a recipe's ``[data] sources``).
Rows whose confidence is below ``--min-confidence`` (or that are no speech) go to ``<out>.rejected.csv``.
Results are kept as they arrive (``<out>.partial.jsonl``): an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from edgessm.atomic import atomic_path

SAMPLE_RATE = 16000
COLUMNS = ["path", "speaker", "label", "text", "split", "source", "start_s", "end_s", "confidence", "no_speech",
           "raw", "words", "audio"]  # fmt: skip
_EXAMPLES = """
examples:
  %(prog)s ~/recordings --out ~/recordings/labels.csv
  %(prog)s ../shared/data/real_read_speech --out runs/read.csv \
      --compare ../shared/data/real_read_speech/manifest.csv:transcript
  (train on it: [data] sources = ["manifest:runs/read.csv"])
"""


@dataclass
class Row:
    """One labelled piece of audio (a whole file, or a speech region of a long one)."""

    path: str  # the audio the row describes (the file itself, or its cut-out segment)
    audio: str  # the input file it came from
    start_s: float
    end_s: float
    text: str
    raw: str
    confidence: float
    no_speech: float
    words: list[list]  # [[word, start_s, end_s, prob], ...] relative to the row's own audio


def _inputs(items: Sequence[str]) -> list[Path]:
    from edgessm.data.corpora import AUDIO_EXTENSIONS, audio_files

    files: list[Path] = []
    for item in items:
        p = Path(item).expanduser()
        if p.is_dir():
            found = audio_files(p)
            if not found:
                raise ValueError(f"{p}: no audio files in this folder ({', '.join(AUDIO_EXTENSIONS)})")
            files += found
        elif p.is_file():
            files.append(p)
        else:
            raise ValueError(f"{p}: no such file or folder")
    return sorted({f.resolve() for f in files})


def split_at_pauses(words: Sequence[Sequence], duration_s: float, max_s: float) -> list[tuple[float, float, int, int]]:
    """Cut a labelled piece at the pauses between its words into spans of at most ``max_s`` seconds.

    Args:
        words: ``[[text, start_s, end_s, prob], ...]`` in time order (the teacher's word times).
        duration_s: the piece's length.
        max_s: the longest span wanted.

    Returns:
        ``(start_s, end_s, first_word, end_word)`` per span, covering every word once; a span is cut in the
        middle of the widest pause within the last half of the words that fit (so its words are whole even
        when the word times are a little off). A single word longer than ``max_s`` stays one span. One span
        of the whole piece when it already fits.
    """
    if duration_s <= max_s or len(words) < 2:
        return [(0.0, duration_s, 0, len(words))]
    spans = []
    start_s, i = 0.0, 0
    while i < len(words):
        if duration_s - start_s <= max_s:
            spans.append((start_s, duration_s, i, len(words)))
            break
        j = i + 1  # words[i:j] fit: their end is within max_s of the span's start (keep a little margin)
        while j < len(words) and float(words[j][2]) - start_s <= max_s - 0.1:
            j += 1
        if j == len(words):  # every word left fits; the silence after them is left out
            spans.append((start_s, min(duration_s, start_s + max_s), i, len(words)))
            break
        lo = i + 1 + (j - i - 1) // 2
        if j <= i + 1:
            k = i + 1
        else:
            k = max(range(lo, j + 1), key=lambda m: (float(words[m][1]) - float(words[m - 1][2]), m))
        gap_lo, gap_hi = float(words[k - 1][2]), float(words[k][1])
        cut = min(max((gap_lo + gap_hi) / 2, gap_lo), start_s + max_s) if gap_hi >= gap_lo else gap_lo
        spans.append((start_s, cut, i, k))
        start_s, i = cut, k
    return spans


def label_file(
    path: str, segments_dir: str, model_dir: str | None = None, max_piece_s: float | None = None
) -> list[Row] | str:
    """Label one file (runs in a worker). Returns its rows, or an error message for a file it cannot read.
    Pieces longer than ``max_piece_s`` are cut at word pauses (:func:`split_at_pauses`)."""
    from edgessm.data.audio import AudioError, load_audio, write_audio

    from .teacher import WINDOW_S, shared_teacher, speech_segments

    try:
        audio, _ = load_audio(path, SAMPLE_RATE)
    except AudioError as e:
        return str(e)
    teacher = shared_teacher(model_dir)
    if len(audio) <= WINDOW_S * SAMPLE_RATE:
        pieces = [(0, len(audio))]
    else:
        pieces = speech_segments(audio)
    rows = []
    for start, end in pieces:
        t = teacher.transcribe(audio[start:end])
        words = [[w.text, w.start, w.end, round(w.prob, 3)] for w in t.words]
        spans = [(0.0, (end - start) / SAMPLE_RATE, 0, len(words))]
        if max_piece_s is not None and t.text:
            spans = split_at_pauses(words, (end - start) / SAMPLE_RATE, max_piece_s)
        for s0, s1, w0, w1 in spans:
            a, b = start + round(s0 * SAMPLE_RATE), min(end, start + round(s1 * SAMPLE_RATE))
            target = path
            if (a, b) != (0, len(audio)):
                target = str(Path(segments_dir) / f"{Path(path).stem}_{a * 1000 // SAMPLE_RATE:08d}.flac")
                write_audio(target, audio[a:b], SAMPLE_RATE)
            piece = [[w, round(ws - s0, 3), round(we - s0, 3), p] for w, ws, we, p in words[w0:w1]]
            text = t.text if len(spans) == 1 else " ".join(w[0] for w in piece)
            # a cut piece keeps the teacher's confidence of the whole decode; its words keep their own
            rows.append(Row(target, path, a / SAMPLE_RATE, b / SAMPLE_RATE, text, t.raw if len(spans) == 1 else text,
                            round(t.confidence, 4), round(t.no_speech, 4), piece))  # fmt: skip
    return rows


def _key(path: Path) -> str:
    st = path.stat()
    return f"{path}|{st.st_size}|{int(st.st_mtime)}"


def _load_partial(partial: Path) -> dict[str, list[Row] | str]:
    done: dict[str, list[Row] | str] = {}
    if partial.is_file():
        for line in partial.read_text().splitlines():
            try:
                rec = json.loads(line)
                done[rec["key"]] = rec["error"] if "error" in rec else [Row(**r) for r in rec["rows"]]
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short by an interruption
    return done


def _label_all(
    files: list[Path], out: Path, jobs: int, model_dir: str | None, progress: bool, max_piece_s: float | None = None
) -> dict[str, object]:
    from tqdm import tqdm

    partial = out.with_name(out.name + ".partial.jsonl")
    done = _load_partial(partial)
    keys = {f: f"{_key(f)}|{max_piece_s}" for f in files}
    todo = [f for f in files if keys[f] not in done]
    segments_dir = str(out.parent / "segments")
    bar = tqdm(total=len(files), initial=len(files) - len(todo), unit="file", desc="labelling", disable=not progress)
    with open(partial, "a") as log:

        def record(f: Path, result: list[Row] | str) -> None:
            done[keys[f]] = result
            rec = {"key": keys[f], **({"error": result} if isinstance(result, str) else {})}
            if not isinstance(result, str):
                rec["rows"] = [asdict(r) for r in result]
            log.write(json.dumps(rec) + "\n")
            log.flush()
            bar.update(1)

        if jobs <= 1 or len(todo) <= 1:
            for f in todo:
                record(f, label_file(str(f), segments_dir, model_dir, max_piece_s))
        else:
            import multiprocessing

            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
                results = pool.map(label_file, [str(f) for f in todo], [segments_dir] * len(todo),
                                   [model_dir] * len(todo), [max_piece_s] * len(todo), chunksize=4)  # fmt: skip
                for f, result in zip(todo, results, strict=True):
                    record(f, result)
    bar.close()
    return {f: done[keys[f]] for f in files}


def _reference(spec: str) -> dict[str, str]:
    """``CSV[:COLUMN]`` -> resolved audio path -> reference text (column default: transcript, else text)."""
    csv_path, _, column = spec.partition(":")
    path = Path(csv_path).expanduser()
    if not path.is_file():
        raise ValueError(f"--compare: {path} not found")
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames or []
        column = column or next((c for c in ("transcript", "text") if c in fields), "")
        if column not in fields or "path" not in fields:
            raise ValueError(f"--compare: {path} needs a 'path' column and the text column {column or '?'} ({fields})")
        return {str((path.parent / r["path"]).resolve()): r[column] for r in reader}


def word_errors(hyp: str, ref: str) -> tuple[int, int]:
    """(word edits, reference words) of two texts after :func:`~edgessm.data.teacher.spoken_text`."""
    from edgessm.data.text import edit_distance

    from .teacher import spoken_text

    h, r = spoken_text(hyp).split(), spoken_text(ref).split()
    return edit_distance(h, r), len(r)


_LIBRISPEECH_NAME = re.compile(r"^(\d+)-\d+-\d+$")  # SPEAKER-CHAPTER-UTTERANCE


def speaker_of(path: str) -> str:
    """A speaker id for a labelled file, for speaker-disjoint splits: LibriSpeech-style names
    (``103-1240-0000.flac``) give ``librispeech-103``; otherwise the file's folder name (one folder per
    speaker, the common layout of recordings)."""
    m = _LIBRISPEECH_NAME.match(Path(path).stem)
    return f"librispeech-{m.group(1)}" if m else Path(path).parent.name


def run(args: argparse.Namespace) -> int:
    from .teacher import TeacherError, default_model_dir

    started = time.time()
    try:
        files = _inputs(args.inputs)
        out = Path(args.out).expanduser()
        if out.resolve() in files:
            raise ValueError(f"--out {out} is one of the inputs")
        reference = _reference(args.compare) if args.compare else {}
        out.parent.mkdir(parents=True, exist_ok=True)
        model_dir = args.model_dir or str(default_model_dir())
        if args.max_piece is not None and args.max_piece < 1.0:
            raise ValueError(f"--max-piece {args.max_piece}: give at least 1 second")
        results = _label_all(files, out, max(1, args.jobs), model_dir, not args.quiet, args.max_piece)
    except (ValueError, TeacherError) as e:
        print(f"edgessm label: {e}", file=sys.stderr)
        return 2
    kept, rejected, errors = [], [], []
    audio_s = 0.0
    for result in results.values():
        if isinstance(result, str):
            errors.append(result)
            continue
        for r in result:
            audio_s += r.end_s - r.start_s
            ok = r.text and r.confidence >= args.min_confidence and r.no_speech < args.max_no_speech
            (kept if ok else rejected).append(r)
    for name, rows in ((out, kept), (out.with_name(out.stem + ".rejected.csv"), rejected)):
        _write(name, rows, out.parent)
    wall = time.time() - started
    print(f"{len(files)} files, {len(kept) + len(rejected)} pieces, {audio_s / 3600:.2f} h of audio "
          f"in {wall:.0f} s ({audio_s / max(wall, 1e-9):.1f}x real time, {args.jobs} jobs)")  # fmt: skip
    print(f"kept {len(kept)} (confidence >= {args.min_confidence}), rejected {len(rejected)}, unreadable {len(errors)}")
    for e in errors[:5]:
        print(f"  unreadable: {e}")
    if reference:
        edits = words = 0
        for r in kept + rejected:
            if r.audio in reference and r.start_s == 0.0:
                e, n = word_errors(r.text, reference[r.audio])
                edits, words = edits + e, words + n
        if words:
            print(f"WER against {args.compare}: {100 * edits / words:.1f}% ({edits} edits / {words} words)")
    print(f"manifest: {out}")
    out.with_name(out.name + ".partial.jsonl").unlink(missing_ok=True)
    return 0 if kept or not errors else 1


def _write(path: Path, rows: list[Row], root: Path) -> None:
    root = root.resolve()
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({
                "path": os.path.relpath(r.path, root), "speaker": speaker_of(r.audio), "label": "", "text": r.text,
                "split": "", "source": "teacher", "start_s": f"{r.start_s:.3f}", "end_s": f"{r.end_s:.3f}",
                "confidence": r.confidence, "no_speech": r.no_speech, "raw": r.raw,
                "words": json.dumps(r.words, separators=(",", ":")), "audio": r.audio,
            })  # fmt: skip


def confidences(manifest: str | os.PathLike) -> dict[str, float]:
    """The teacher's confidence per row of a manifest this command wrote: resolved audio path -> confidence
    (exp mean token log-probability, 0-1). Empty for a manifest without a ``confidence`` column (a
    human-transcribed one); rows with an empty or unreadable value are left out.

    Raises:
        FileNotFoundError: no manifest at ``manifest``.
    """
    manifest = Path(manifest).expanduser()
    out: dict[str, float] = {}
    with open(manifest, newline="") as f:
        reader = csv.DictReader(f)
        if "confidence" not in (reader.fieldnames or ()):
            return out
        for r in reader:
            try:
                c = float(r["confidence"])
            except (TypeError, ValueError):
                continue
            if 0.0 <= c <= 1.0:
                out[str((manifest.parent / r["path"]).resolve())] = c
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Transcribe untranscribed recordings with the offline teacher (Whisper tiny.en, int8, CPU; Silero VAD "
        "for long files): text in our alphabet (numbers in words), word times and a confidence per piece."
    )
    parser.epilog = _EXAMPLES
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "inputs", nargs="+", metavar="DIR_OR_FILE", help="audio files or folders (searched recursively)"
    )
    parser.add_argument("--out", required=True, help="the manifest to write (CSV); segments of long files go beside it")
    parser.add_argument(
        "--min-confidence",
        type=float,
        default=0.4,
        help="keep pieces whose confidence (exp mean token log-prob) reaches this (default 0.4)",
    )
    parser.add_argument(
        "--max-no-speech",
        type=float,
        default=0.6,
        help="drop pieces the teacher calls no speech with at least this probability (default 0.6)",
    )
    parser.add_argument(
        "--compare",
        metavar="CSV[:COLUMN]",
        help="a manifest with reference transcripts of the same files: report the WER against it",
    )
    parser.add_argument(
        "--max-piece", type=float, metavar="S",
        help="cut labelled pieces longer than S seconds at the pauses between words (e.g. 8 for a recipe whose "
        "max_samples is 8 s; default: pieces up to 28 s)",
    )  # fmt: skip
    parser.add_argument("--jobs", "-j", type=int, default=2, help="worker processes, one model thread each (default 2)")
    parser.add_argument("--model-dir", help="another CTranslate2 Whisper model folder (default: Whisper tiny.en)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
