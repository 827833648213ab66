"""Real recorded everyday noise for training: the ambient loops and foley of free-licensed game sound packages.

The denoiser's real noise was the Speech Commands background recordings (a few minutes); the rest was
procedural. These Debian packages hold about half an hour of recorded everyday sound (``make ambience``
installs them, 306 MB), each file's speech-like names left out (radio messages, news, schools, markets,
crowds, unit voices):

======================  =====  =======  ===========================================  ==========================
package                 files  minutes  what                                         licence (sound files)
======================  =====  =======  ===========================================  ==========================
``ufoai-sound``         ~130   17       wind, thunder, fire, water, pumps, hum,      per file: CC-BY-SA-3.0,
                                        crickets, city and night atmospheres,        CC-BY-3.0, GPL-2(+)
                                        footsteps on many floors, doors, breaking
``megaglest-data``      ~30    13       day / night / rain / wind loops of 19        CC-BY-SA-3.0
                                        landscapes (birds, insects, rain), water
``lincity-ng-data``     ~110   6        traffic, trains, industry, mines, harbour,   GPL-2+ / CC-BY-SA-2
                                        fire, water, windmills, farms (11 kHz)
======================  =====  =======  ===========================================  ==========================

Attribution (CC-BY, CC-BY-SA): the authors are named in each package's ``/usr/share/doc/*/copyright``.
Files are split train / validation / test by a stable hash of package and file name (80/10/10,
:func:`edgessm.data.packaged.file_split`); copies of one file in several folders (the landscapes share
some) are heard once. The ``ambience:SPLIT`` noise source (``[data] noise``) adds a split's files to a
recipe's noise bank.
"""

from __future__ import annotations

from pathlib import Path

from .corpora import cache_dir
from .packaged import AudioPackage, file_split, installed_packages

__all__ = ["PACKAGES", "ambience_files"]

_UFOAI = "/usr/share/games/ufoai/base/0snd.pk3"
_UFOAI_LICENCE = "per file: CC-BY-SA-3.0 / CC-BY-3.0 / GPL-2(+)"
_MEGAGLEST = "/usr/share/games/megaglest"
_SPOKEN = ("*[Ss]chool*", "*[Ss]ports*", "*[Mm]arket*", "*[Rr]esidential*", "*[Hh]ealth*", "*[Cc]ommune*")

PACKAGES: tuple[AudioPackage, ...] = (
    AudioPackage(
        "ufoai-sound",
        _UFOAI,
        "sound/ambience/*.ogg",
        _UFOAI_LICENCE,
        exclude=("radiomessage*", "tv_news*", "disco*", "jingle*"),
    ),
    AudioPackage("ufoai-sound", _UFOAI, "sound/footsteps/*.ogg", _UFOAI_LICENCE),
    AudioPackage("ufoai-sound", _UFOAI, "sound/doors/*.ogg", _UFOAI_LICENCE),
    AudioPackage("ufoai-sound", _UFOAI, "sound/misc/break*.ogg", _UFOAI_LICENCE),
    AudioPackage("megaglest-data", _MEGAGLEST, "tilesets/*/sounds/*", "CC-BY-SA-3.0", exclude=("good_morning*",)),
    AudioPackage("megaglest-data", _MEGAGLEST, "data/core/water_sounds/*.wav", "CC-BY-SA-3.0"),
    AudioPackage(
        "lincity-ng-data",
        "/usr/share/games/lincity-ng/sounds",
        "*.wav",
        "GPL-2+ / CC-BY-SA-2",
        exclude=("Click*", "Window*", *_SPOKEN),
    ),
)


def ambience_files(split: str = "train") -> list[Path]:
    """The recordings of ``split`` (``train``, ``validation``, ``test`` or ``all``) of every installed
    package, each recording once (files of one package with the same name and size are copies).

    Raises:
        CorpusError: no package installed (says how to install them), or an unknown split.
    """
    files: list[Path] = []
    seen: set[tuple[str, str, int]] = set()
    for pkg in installed_packages(PACKAGES, split, "recorded everyday noise", "ambience"):
        cache = cache_dir() / "ambience" / pkg.package / pkg.pattern.split("*")[0].strip("/").replace("/", "_")
        for f in pkg.files(cache):
            key = (pkg.package, f.name, f.stat().st_size)
            if key in seen or (split != "all" and file_split(pkg.package, f.name) != split):
                continue
            seen.add(key)
            files.append(f)
    return files
