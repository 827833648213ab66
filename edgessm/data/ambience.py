"""Real recorded everyday noise for training: the ambient loops and foley of free-licensed game sound packages.

The denoiser's real noise was the Speech Commands background recordings (a few minutes); the rest was
procedural. These Debian packages hold about 55 minutes of recorded everyday sound (``make ambience``
installs them, 760 MB), each file's speech-like names left out (radio messages, news, schools, markets,
crowds, taverns, alerts, unit voices), and interface sounds (clicks, chimes, warnings):

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
``widelands-data``      ~95    9        birds, crickets, frogs, farm animals, saws,  GPL-2+ (per file: CC-BY-3,
                                        smithies, mills, furnaces, tree falls        CC-0, PD; its sound docu)
``searchandrescue-data`` ~55   5        helicopter and jet engines inside and out,   GPL
                                        thunder, doors, gear, skids, splashes
``minetest-data``       ~110   2        footsteps and digging on many materials,     CC-BY-SA-3.0, CC-BY-3.0
                                        water, lava, fire, doors, carts              (doors)
``simutrans-pak64``     ~20    1        forest, desert, arctic, tropic and water     Artistic-1.0
                                        ambiences, traffic, boats, jackhammer
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
_WIDELANDS = "/usr/share/games/widelands/data/sound"
_SAR = "/usr/share/games/searchandrescue/sounds"
_MINETEST = "/usr/share/games/minetest/games/minetest_game/mods"
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
    # interface sounds, chat, alerts and taverns (voices) out
    AudioPackage(
        "widelands-data",
        _WIDELANDS,
        "**/*.ogg",
        "GPL-2+ (per file: CC-BY-3.0 / CC-0 / PD, data/sound/wl-sound-docu.csv)",
        exclude=(
            "click*",
            "create_construction_site*",
            "lobby_*",
            "message_*",
            "site_occupied*",
            "under_attack*",
            "tavern*",
            "inn_*",
            "biginn*",
            "meal*",
            "ration*",
        ),
    ),
    AudioPackage(
        "searchandrescue-data", _SAR, "**/*.wav", "GPL", exclude=("screenshot*", "flir_*", "overspeed*", "stall*")
    ),
    AudioPackage("minetest-data", _MINETEST, "*/sounds/*.ogg", "CC-BY-SA-3.0 / CC-BY-3.0 (doors)"),
    AudioPackage(
        "simutrans-pak64",
        "/usr/share/games/simutrans/pak/sound",
        "*.wav",
        "Artistic-1.0",
        exclude=("click*", "cash*", "boing*"),
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
