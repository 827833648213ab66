"""Licensed offline English text: sentences for synthetic training speech and the recognizer's word model.

Each source is a Debian package that ``make`` installs (``SYSTEM_PACKAGES``); nothing is downloaded.
Only clearly free texts are used (each source's licence is in :data:`SOURCES`; the ``fortunes``
packages were left out because their quotations carry no licence of their own):

================  ======================  ==========================================  =========================
name              package                 what                                        licence
================  ======================  ==========================================  =========================
``wordnet``       ``wordnet-base``        WordNet 3.0 usage examples, modern English  WordNet 3.0 (permissive)
``bible``         ``sword-text-web``      World English Bible (2015), modern wording  public domain
``gcide``         ``dict-gcide``          quotations of the GNU dictionary (GCIDE)    GPL-2+
================  ======================  ==========================================  =========================

:func:`read_sentences` yields what a TTS engine is given (``spoken``: capitalised, final punctuation);
the transcript is its :func:`edgessm.data.synth.texts.normalize_transcript`.
"""

from __future__ import annotations

import gzip
import re
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .corpora import CorpusError


@dataclass(frozen=True)
class TextSource:
    name: str
    package: str
    path: str
    licence: str
    records: Callable[[Path], Iterator[str]]  # raw text records (a verse, an example, a quotation)


def _wordnet_examples(root: Path) -> Iterator[str]:
    """The quoted usage examples after ``|`` in WordNet's ``data.*`` files."""
    for part in ("noun", "verb", "adj", "adv"):
        with open(root / f"data.{part}", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("  ") or "|" not in line:  # the licence header, or no gloss
                    continue
                yield from re.findall(r'"([^"]+)"', line.split("|", 1)[1])


def _gcide_quotations(path: Path) -> Iterator[str]:
    """GCIDE's quotations: runs of lines indented by 10 or more spaces, without the ``--Author`` tail."""
    run: list[str] = []
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
        for line in f:
            text = line.strip()
            if re.match(r" {10,}\S", line) and not text.startswith(("[", "--")):
                run.append(text)
                continue
            if run:
                yield re.sub(r"\s*--\s*[A-Z].*$", "", " ".join(run))
                run = []
    if run:
        yield re.sub(r"\s*--\s*[A-Z].*$", "", " ".join(run))


def _sword_ztext(root: Path) -> Iterator[str]:
    """The verses of a SWORD zText module: zlib blocks (``.bzs`` index: offset, size, size unpacked as
    uint32; ``.bzz`` data) and a verse index (``.bzv``: block uint32, offset uint32, size uint16), in
    OSIS markup whose notes and titles are dropped."""
    for testament in ("ot", "nt"):
        index = (root / f"{testament}.bzs").read_bytes()
        data = (root / f"{testament}.bzz").read_bytes()
        blocks = []
        for i in range(0, len(index) - 11, 12):
            offset, size, _ = struct.unpack("<III", index[i : i + 12])
            blocks.append(zlib.decompress(data[offset : offset + size]) if size else b"")
        verses = (root / f"{testament}.bzv").read_bytes()
        for i in range(0, len(verses) - 9, 10):
            block, offset, size = struct.unpack("<IIH", verses[i : i + 10])
            if size and block < len(blocks):
                text = blocks[block][offset : offset + size].decode("utf-8", errors="replace")
                text = re.sub(r"<(note|title)\b.*?</\1>", " ", text, flags=re.S)
                yield re.sub(r"<[^>]+>", "", text)


_WEB = "/usr/share/sword/modules/texts/ztext/engWEB2015eb"
SOURCES: dict[str, TextSource] = {
    s.name: s
    for s in (
        TextSource("wordnet", "wordnet-base", "/usr/share/wordnet", "WordNet 3.0 licence", _wordnet_examples),
        TextSource("bible", "sword-text-web", _WEB, "public domain", _sword_ztext),
        TextSource("gcide", "dict-gcide", "/usr/share/dictd/gcide.dict.dz", "GPL-2+", _gcide_quotations),
    )
}

_ABBREVIATION = re.compile(r"\b(Mr|Mrs|Ms|Dr|St|Mt|Jr|Sr|Prof|Capt|Col|Gen|Lt|vs|etc)\.")
_BOUNDARY = re.compile(r"(?<=[.!?])[\"')]?\s+(?=[\"'(]?[A-Z])")
_ALLOWED = re.compile(r"^[A-Za-z][A-Za-z ,.'!?;:-]*$")
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": "", "\u201d": "", '"': "", "_": ""})
_DASH = re.compile(r"\s*(--|\u2014)\s*")
_INNER_DOT = re.compile(r"\.\w")  # web addresses, file names, initials run together


def sentences_of(record: str, min_words: int = 3, max_words: int = 20) -> Iterator[str]:
    """The speakable sentences of a text record: split at sentence ends, quotes and dashes simplified,
    kept when made of letters and plain punctuation only (no digits, symbols, URLs), ``min_words`` to
    ``max_words`` long; capitalised, with final punctuation."""
    record = " ".join(_DASH.sub(", ", record.translate(_QUOTES)).split())
    record = _ABBREVIATION.sub(lambda m: m.group(1) + "<dot>", record)
    for s in _BOUNDARY.split(record):
        s = s.replace("<dot>", ".").strip(" ,;:'()")
        if not s or not _ALLOWED.match(s) or _INNER_DOT.search(s) or not min_words <= len(s.split()) <= max_words:
            continue
        s = s[0].upper() + s[1:]
        yield s if s[-1] in ".!?" else s.rstrip(",;:-") + "."


def read_sentences(name: str, min_words: int = 3, max_words: int = 20) -> list[str]:
    """The distinct sentences of source ``name`` (see :data:`SOURCES`), in the source's order.

    Raises:
        CorpusError: unknown source, or its package is not installed (says which one).
    """
    if name not in SOURCES:
        raise CorpusError(f"unknown text source {name!r}; choose from {sorted(SOURCES)}")
    src = SOURCES[name]
    if not Path(src.path).exists():
        raise CorpusError(f"text source {name!r} needs the Debian package {src.package} ({src.path} is missing): "
                          f"run `make` or `apt-get install {src.package}`")  # fmt: skip
    out: dict[str, None] = {}
    for record in src.records(Path(src.path)):
        for s in sentences_of(record, min_words, max_words):
            out.setdefault(s, None)
    return list(out)
