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

from pathlib import Path

from .corpora import cache_dir
from .packaged import SPLITS, AudioPackage, installed_packages
from .packaged import file_split as track_split

MusicPackage = AudioPackage  # a soundtrack package: its tracks under root (a folder or a .pk3 archive)

__all__ = ["PACKAGES", "SPLITS", "MusicPackage", "installed", "installed_tracks", "music_source", "music_tracks",
           "track_split"]  # fmt: skip

PACKAGES: tuple[MusicPackage, ...] = (
    MusicPackage("warzone2100-music", "/usr/share/games/warzone2100/music", "**/*.opus", "GPL-2+ / CC-BY-SA-3.0"),
    MusicPackage("ufoai-music", "/usr/share/games/ufoai/base/0music.pk3", "music/*.ogg", "per file, free"),
    MusicPackage("wesnoth-1.16-music", "/usr/share/games/wesnoth/1.16/data/core/music", "*.ogg", "GPL-2+"),
    MusicPackage("nexuiz-music", "/usr/share/games/nexuiz/data/music.pk3", "sound/cdtracks/*.ogg", "GPL-2+"),
    MusicPackage("singularity-music", "/usr/share/games/singularity/music", "**/*.ogg", "CC-BY-SA-3.0"),
)


def installed() -> list[MusicPackage]:
    return [p for p in PACKAGES if p.installed()]


def music_tracks(split: str = "train") -> list[Path]:
    """The tracks of ``split`` (``train``, ``validation``, ``test`` or ``all``) of every installed package.

    Raises:
        CorpusError: no package installed (says how to install them), or an unknown split.
    """
    tracks = []
    for pkg in installed_packages(PACKAGES, split, "free-licensed music", "music"):
        files = pkg.files(cache_dir() / "music" / pkg.package)
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
