"""Real recorded music for training: free-licensed game soundtracks from Debian packages.

Procedural music (:func:`edgessm.data.noise.music_like`) is what the denoiser and the keyword spotter
heard so far; on real music the denoiser scored below the noisy input. These packages hold about
12.7 hours of real music (149 tracks, 44.1/48 kHz; ``make music`` installs them, 585 MB):

======================  ======  =======  =====================================  ==================================
package                 tracks  minutes  what                                   licence (music files)
======================  ======  =======  =====================================  ==================================
``warzone2100-music``   30      243      sci-fi ambient, electronic (Opus)      GPL-2+; albums CC-BY-SA-3.0 or GPL-2+
``ufoai-music``         64      240      orchestral, techno, military, ambient  per file: CC-BY-SA-3.0, CC-BY-3.0,
                                                                                GPL-2, public domain
``wesnoth-1.16-music``  41      128      orchestral fantasy, celtic, choir      GPL-2+
``nexuiz-music``        18      84       electronic, techno, industrial         GPL-2+
``singularity-music``   16      64       ambient electronic, piano              CC-BY-SA-3.0 (Max McCracken)
======================  ======  =======  =====================================  ==================================

Attribution (CC-BY, CC-BY-SA): the composers are named in each package's ``/usr/share/doc/*/copyright``.
Telephony hold-music packages (``asterisk-moh-opsound-*`` and the like) are **never** used: they are
held-out test material.

Tracks are split train / validation / test by a stable hash of the package and file name (80/10/10), so
a recording is never heard in two splits. Tracks inside zip archives (``.pk3``) are extracted once
into ``$EDGESSM_CACHE/music``.
"""

from __future__ import annotations

import hashlib
import zipfile
from dataclasses import dataclass
from pathlib import Path

from edgessm.atomic import atomic_path

from .corpora import CorpusError, cache_dir

SPLITS = ("train", "validation", "test")


@dataclass(frozen=True)
class MusicPackage:
    package: str
    root: str  # a folder, or a zip archive (.pk3)
    pattern: str  # glob of the tracks (in the archive: a member-name prefix and suffix, "dir/*.ogg")
    licence: str


PACKAGES: tuple[MusicPackage, ...] = (
    MusicPackage("warzone2100-music", "/usr/share/games/warzone2100/music", "**/*.opus", "GPL-2+ / CC-BY-SA-3.0"),
    MusicPackage("ufoai-music", "/usr/share/games/ufoai/base/0music.pk3", "music/*.ogg", "per file, free"),
    MusicPackage("wesnoth-1.16-music", "/usr/share/games/wesnoth/1.16/data/core/music", "*.ogg", "GPL-2+"),
    MusicPackage("nexuiz-music", "/usr/share/games/nexuiz/data/music.pk3", "sound/cdtracks/*.ogg", "GPL-2+"),
    MusicPackage("singularity-music", "/usr/share/games/singularity/music", "**/*.ogg", "CC-BY-SA-3.0"),
)


def track_split(package: str, name: str) -> str:
    """``train`` / ``validation`` / ``test`` for a track (80/10/10 by a stable hash of package and name)."""
    u = int.from_bytes(hashlib.sha1(f"{package}/{name}".encode()).digest()[:8], "big") / 2**64
    return "train" if u < 0.8 else "validation" if u < 0.9 else "test"


def _extract(pkg: MusicPackage) -> list[Path]:
    """The archive's tracks, extracted once into the cache (a file appears only when whole)."""
    prefix, _, suffix = pkg.pattern.partition("*")
    out_dir = cache_dir() / "music" / pkg.package
    tracks = []
    with zipfile.ZipFile(pkg.root) as z:
        for member in sorted(z.namelist()):
            if not (member.startswith(prefix) and member.endswith(suffix)) or member.endswith("/"):
                continue
            target = out_dir / Path(member).name
            if not target.is_file() or target.stat().st_size != z.getinfo(member).file_size:
                with atomic_path(target) as tmp:
                    tmp.write_bytes(z.read(member))
            tracks.append(target)
    return tracks


def installed() -> list[MusicPackage]:
    return [p for p in PACKAGES if Path(p.root).exists()]


def music_tracks(split: str = "train") -> list[Path]:
    """The tracks of ``split`` (``train``, ``validation``, ``test`` or ``all``) of every installed package.

    Raises:
        CorpusError: no package installed (says how to install them), or an unknown split.
    """
    if split not in (*SPLITS, "all"):
        raise CorpusError(f"unknown music split {split!r}; choose from {', '.join(SPLITS)} or all")
    found = installed()
    if not found:
        names = " ".join(p.package for p in PACKAGES)
        raise CorpusError(f"no free-licensed music is installed: run `make music` (apt-get install {names})")
    tracks = []
    for pkg in found:
        files = _extract(pkg) if zipfile.is_zipfile(pkg.root) else sorted(Path(pkg.root).glob(pkg.pattern))
        tracks += [f for f in files if split == "all" or track_split(pkg.package, f.name) == split]
    return tracks


def installed_tracks(split: str) -> list[Path]:
    """The tracks of ``split`` where the soundtracks are installed, else ``[]`` (evaluations fall back
    to procedural music and say so, :func:`music_source`)."""
    return music_tracks(split) if installed() else []


def music_source(split: str = "test") -> str:
    """What an evaluation's music is here: ``"recorded"`` (the soundtracks' tracks of ``split``) or
    ``"procedural"`` (where they are not installed)."""
    return "recorded" if installed_tracks(split) else "procedural"
