"""Corpus loaders: folders users already have on disk, and the real recordings shipped beside the
project in ``shared/data``. Nothing is downloaded; every loader returns a list of :class:`Clip`.

Loaders check the layout and fail with a message that says what was expected.
"""

from __future__ import annotations

import csv
import hashlib
import os
import re
from pathlib import Path

from .labels import DIGITS, SC35_WORDS, UNKNOWN, map_word
from .manifest import Clip

AUDIO_EXTENSIONS = (".wav", ".flac", ".ogg", ".mp3", ".m4a", ".opus")


class CorpusError(ValueError):
    """A corpus folder that is missing or not laid out as expected."""


def _require_dir(path: str | os.PathLike, what: str) -> Path:
    p = Path(path).expanduser()
    if not p.is_dir():
        raise CorpusError(f"{what}: folder {p} does not exist")
    return p


def audio_files(root: str | os.PathLike) -> list[Path]:
    """All audio files under ``root`` (recursively), sorted."""
    root = _require_dir(root, "audio folder")
    return sorted(p for p in root.rglob("*") if p.suffix.lower() in AUDIO_EXTENSIONS and p.is_file())


def cache_dir() -> Path:
    """Where generated data lives (synthetic corpora, simulated RIRs): ``$EDGESSM_CACHE`` or ``~/.cache/edgessm``."""
    return Path(os.environ.get("EDGESSM_CACHE") or "~/.cache/edgessm").expanduser()


#: How the recipes' named synthetic corpora are made (the README's and the recipes' commands): the error for a
#: missing one says how to build it rather than a bare `--name`, which would make a default-engine corpus.
SYNTH_COMMANDS = {
    "default": "edgessm synth",
    "kokoro-words": "edgessm synth --engines kokoro --words marvin,sheila,visual --blends 500 --keyword-reps 1 "
                    "--voices 'kokoro:mix-*' --teacher-gate --name kokoro-words",
    "kokoro-kws": f"edgessm synth --engines kokoro --words {','.join(sorted(SC35_WORDS))} --blends 150 "
                  "--keyword-reps 1 --teacher-gate --name kokoro-kws",  # the 54 base voices and 150 blends
    "kokoro-rare": "edgessm synth --engines kokoro --words bird,dog,house,marvin,sheila,tree,wow,backward,forward,"
                   "follow,learn,visual --blends 100 --keyword-reps 1 --teacher-gate --name kokoro-rare",
    "kokoro-sentences": "edgessm synth --engines kokoro --kinds sentences --sentences 20 --blends 150 "
                        "--text-sources wordnet,bible,gcide --name kokoro-sentences --time-limit 240",
}  # fmt: skip


def synth_manifest(name: str) -> Path:
    """The manifest of the synthetic corpus ``name`` (made by ``edgessm synth --name NAME``)."""
    path = cache_dir() / "synth" / name / "manifest.csv"
    if not path.is_file():
        command = SYNTH_COMMANDS.get(name, f"edgessm synth --name {name}")
        raise CorpusError(
            f"synthetic corpus {name!r} not found ({path}); generate it with `{command}` "
            "(or set EDGESSM_CACHE to where it lives)"
        )
    return path


def shared_data_dir(required: bool = True) -> Path | None:
    """The project's real-recordings folder: ``$EDGESSM_SHARED_DATA`` when it is set (then only there:
    pointing it at a missing folder runs everything as on a machine without the recordings), else
    ``../shared/data`` beside the repo."""
    env = os.environ.get("EDGESSM_SHARED_DATA")
    candidates = [Path(env).expanduser()] if env else [Path(__file__).resolve().parents[3] / "shared" / "data"]
    for c in candidates:
        if c.is_dir():
            return c
    if required:
        raise CorpusError(
            "the shared data folder was not found: set EDGESSM_SHARED_DATA to the folder that holds "
            "speech_commands_train_subset/, fsdd/, ... (looked in: " + ", ".join(map(str, candidates)) + ")"
        )
    return None


# --- Google Speech Commands v2 (the user's full copy) ------------------------------------------


def _sc_split_by_hash(name: str, validation_pct: float = 10.0, testing_pct: float = 10.0) -> str:
    """The dataset's own fallback assignment: a stable hash of the speaker part of the file name."""
    base = re.sub(r"_nohash_.*$", "", name)
    max_per_class = 2**27 - 1
    h = int(hashlib.sha1(base.encode()).hexdigest(), 16)
    pct = (h % (max_per_class + 1)) * (100.0 / max_per_class)
    if pct < validation_pct:
        return "validation"
    if pct < validation_pct + testing_pct:
        return "test"
    return "train"


def speech_commands(root: str | os.PathLike, task: str = "sc35") -> list[Clip]:
    """Google Speech Commands v2 folder: ``root/<word>/<speaker>_nohash_<n>.wav``.

    Splits come from the dataset's ``validation_list.txt`` and ``testing_list.txt``; without them
    the dataset's documented speaker-hash rule is used. Words outside ``task`` are dropped, except
    that ``sc12`` maps the other keywords to ``_unknown_``. ``_background_noise_`` is not a class
    (see :func:`speech_commands_noise`); ``_silence_`` examples are cut from it by the datasets.
    """
    root = _require_dir(root, "Speech Commands")
    words = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("_"))
    if not words:
        raise CorpusError(f"Speech Commands: {root} has no word folders (expected e.g. {root}/yes/*.wav)")
    lists = {}
    for split, fname in (("validation", "validation_list.txt"), ("test", "testing_list.txt")):
        f = root / fname
        if f.is_file():
            lists.update({line.strip(): split for line in f.read_text().splitlines() if line.strip()})
    clips = []
    for word in words:
        label = map_word(word, task)
        if label is None:
            continue
        for p in sorted((root / word).glob("*.wav")):
            rel = f"{word}/{p.name}"
            split = lists.get(rel) or ("train" if lists else _sc_split_by_hash(p.name))
            speaker = p.name.split("_nohash_")[0]
            clips.append(Clip(str(p), speaker=speaker, label=label, text=word, split=split, source="speech_commands"))
    if not clips:
        raise CorpusError(f"Speech Commands: no .wav clips of task {task!r} found under {root}")
    return clips


def speech_commands_noise(root: str | os.PathLike) -> list[Path]:
    """The ``_background_noise_`` recordings of a Speech Commands folder."""
    return audio_files(_require_dir(Path(root) / "_background_noise_", "Speech Commands background noise"))


# --- LibriSpeech-style transcribed folders ------------------------------------------------------


def librispeech(root: str | os.PathLike) -> list[Clip]:
    """LibriSpeech layout: ``<speaker>/<chapter>/<speaker>-<chapter>.trans.txt`` with lines
    ``<utterance-id> TRANSCRIPT`` next to ``<utterance-id>.flac`` (or .wav)."""
    root = _require_dir(root, "LibriSpeech-style corpus")
    trans = sorted(root.rglob("*.trans.txt"))
    if not trans:
        raise CorpusError(f"LibriSpeech-style corpus: no *.trans.txt transcript files under {root}")
    clips = []
    for t in trans:
        for line in t.read_text().splitlines():
            if not line.strip():
                continue
            uid, _, text = line.strip().partition(" ")
            audio = next(
                (t.parent / f"{uid}{ext}" for ext in (".flac", ".wav") if (t.parent / f"{uid}{ext}").is_file()), None
            )
            if audio is None:
                raise CorpusError(f"{t}: utterance {uid} has no {uid}.flac or {uid}.wav beside it")
            clips.append(Clip(str(audio), speaker=uid.split("-")[0], text=normalize_text(text), source="librispeech"))
    return clips


def normalize_text(text: str) -> str:
    """Lower-case words of letters and apostrophes, single-spaced (the CTC label alphabet)."""
    text = text.lower().replace("’", "'")
    text = re.sub(r"[^a-z' ]+", " ", text)
    return " ".join(w.strip("'") for w in text.split() if w.strip("'"))


# --- clean + noise folders for denoising --------------------------------------------------------


def clean_noise_folders(clean: str | os.PathLike, noise: str | os.PathLike) -> tuple[list[Clip], list[Clip]]:
    """Any two folder trees of audio (DNS / VCTK style): clean speech and noise recordings."""
    clean_files = audio_files(clean)
    noise_files = audio_files(noise)
    if not clean_files:
        raise CorpusError(f"clean speech folder {clean} holds no audio files ({', '.join(AUDIO_EXTENSIONS)})")
    if not noise_files:
        raise CorpusError(f"noise folder {noise} holds no audio files ({', '.join(AUDIO_EXTENSIONS)})")
    speaker = lambda p: p.parent.name  # noqa: E731 - VCTK/DNS keep one folder per speaker
    return (
        [Clip(str(p), speaker=speaker(p), source="clean") for p in clean_files],
        [Clip(str(p), source="noise") for p in noise_files],
    )


# --- the real recordings in shared/data ---------------------------------------------------------


def _rows(manifest: Path) -> list[dict[str, str]]:
    if not manifest.is_file():
        raise CorpusError(f"{manifest} not found: the shared data folder is incomplete")
    with open(manifest, newline="") as f:
        return list(csv.DictReader(f))


def shared_sc_train(shared: Path | None = None) -> list[Clip]:
    """Real Speech Commands training clips, test-set speakers excluded (20,951 clips of 30 words, 1,663
    speakers, Ogg Opus: the ten commands and bed/cat/happy with hundreds to thousands each, a handful of
    17 more). Speaker ids are the dataset's, shared across words, so a split by speaker keeps every
    word of a speaker on one side."""
    d = (shared or shared_data_dir()) / "speech_commands_train_subset"
    return [
        Clip(str(d / r["path"]), speaker=r["speaker"], label=r["word"], text=r["word"], source="sc_train_subset")
        for r in _rows(d / "manifest.csv")
    ]


def shared_sc_test(shared: Path | None = None) -> list[Clip]:
    """The Speech Commands v0.02 test clips of 118 speakers: EVALUATION ONLY, never for training.

    ``label`` is the 12-class label, ``text`` the spoken word (or ``_silence_``).
    """
    d = (shared or shared_data_dir()) / "speech_commands_test_v0.02"
    return [
        Clip(str(d / r["path"]), speaker=r["speaker"], label=r["label"], text=r["word"], split="test",
             source="sc_test")
        for r in _rows(d / "manifest.csv")
    ]  # fmt: skip


def shared_fsdd(shared: Path | None = None) -> list[Clip]:
    """Free Spoken Digit Dataset: 3,000 real digit recordings (8 kHz, 6 speakers); label = the digit word."""
    d = (shared or shared_data_dir()) / "fsdd"
    return [
        Clip(str(d / r["path"]), speaker=r["speaker"], label=DIGITS[int(r["label"])], text=DIGITS[int(r["label"])],
             split=r["split"], source="fsdd")
        for r in _rows(d / "manifest.csv")
    ]  # fmt: skip


def shared_sc_digits(shared: Path | None = None) -> list[Clip]:
    """30 Speech Commands digit clips outside the test set."""
    d = (shared or shared_data_dir()) / "speech_commands_digit_samples"
    return [
        Clip(str(d / r["path"]), speaker=r["speaker"], label=r["word"], text=r["word"], source="sc_digits")
        for r in _rows(d / "manifest.csv")
    ]


def shared_negative_phrases(shared: Path | None = None) -> list[Clip]:
    """2,279 crowd-sourced wake phrases that are not keywords (label ``_unknown_``; >50 speakers without ids,
    so each clip is its own speaker)."""
    d = (shared or shared_data_dir()) / "picovoice_wake_word_phrases"
    return [
        Clip(str(d / r["path"]), speaker=f"pv_{r['phrase']}_{i}", label=UNKNOWN, text=r["phrase"].replace("_", " "),
             source="picovoice")
        for i, r in enumerate(_rows(d / "manifest.csv"))
    ]  # fmt: skip


def shared_read_speech(shared: Path | None = None) -> list[Clip]:
    """0.78 h of real read sentences with transcripts (257 speakers)."""
    d = (shared or shared_data_dir()) / "real_read_speech"
    return [
        Clip(str(d / r["path"]), speaker=r["speaker"], text=normalize_text(r["transcript"]), source="real_read_speech")
        for r in _rows(d / "manifest.csv")
    ]


def shared_librispeech_5(shared: Path | None = None) -> list[Clip]:
    """4.3 h of real read English (Mini LibriSpeech ``train-clean-5``: 1,237 utterances, 23 speakers) with
    LibriSpeech's human transcripts. Its speakers also read other chapters in ``real_sentences_pseudolabeled``
    under the same speaker ids, so a split by speaker keeps each reader on one side across both folders."""
    d = (shared or shared_data_dir()) / "librispeech_train_clean_5"
    return [
        Clip(str(d / r["path"]), speaker=r["speaker"], text=normalize_text(r["transcript"]), source="librispeech_5")
        for r in _rows(d / "manifest.csv")
    ]


def shared_pseudolabeled_sentences(shared: Path | None = None, labels: str | os.PathLike | None = None) -> list[Clip]:
    """2.6 h of real English sentences (351 LibriSpeech utterances of 261 speakers, 619 spoken coffee orders)
    with machine transcripts: the folder's own Whisper tiny.en text, spelled out in our alphabet, or the
    ``text`` of an ``edgessm label`` manifest of the same files (``labels``; its rejected files are left out).
    Where ``edgessm label --max-piece`` cut a file into pieces, each piece is a clip (its audio is the
    piece), with the speaker of the file it came from.

    The coffee orders carry no speaker ids: each is its own speaker (``coffee-<file>``), so a split by
    speaker may put one person on both sides for this source.
    """
    from .teacher import spoken_text

    d = (shared or shared_data_dir()) / "real_sentences_pseudolabeled"
    relabelled: dict[str, list[tuple[str, str]]] | None = None
    if labels is not None:
        labels = Path(labels).expanduser()
        relabelled = {}
        with open(labels, newline="") as f:  # the label manifest: path (the piece), text, audio (its file)
            for r in csv.DictReader(f):
                piece = str((labels.parent / r["path"]).resolve())
                origin = str(Path(r.get("audio") or piece).resolve())
                relabelled.setdefault(origin, []).append((piece, r["text"]))
    clips = []
    for r in _rows(d / "manifest.csv"):
        path = d / r["path"]
        speaker = r["speaker"] or f"coffee-{Path(r['path']).stem}"
        if relabelled is not None:
            for piece, text in relabelled.get(str(path.resolve()), []):
                if text:
                    clips.append(Clip(piece, speaker=speaker, text=text, source="real_sentences_pseudolabeled"))
            continue
        text = spoken_text(r["whisper_tiny_en_text"])
        clips.append(Clip(str(path), speaker=speaker, text=text, source="real_sentences_pseudolabeled"))
    return clips


def shared_noises(shared: Path | None = None) -> list[Path]:
    """The Speech Commands background-noise recordings (4 real, 2 synthetic)."""
    return audio_files((shared or shared_data_dir()) / "speech_commands_background_noise")


def shared_rirs(shared: Path | None = None) -> list[Path]:
    """Three measured room impulse responses."""
    return audio_files((shared or shared_data_dir()) / "rirs_real")


__all__ = [
    "AUDIO_EXTENSIONS",
    "CorpusError",
    "audio_files",
    "cache_dir",
    "clean_noise_folders",
    "librispeech",
    "normalize_text",
    "shared_data_dir",
    "shared_fsdd",
    "shared_negative_phrases",
    "shared_noises",
    "shared_pseudolabeled_sentences",
    "shared_read_speech",
    "shared_rirs",
    "shared_sc_digits",
    "shared_sc_test",
    "shared_sc_train",
    "speech_commands",
    "speech_commands_noise",
    "synth_manifest",
]
