"""Recorded everyday noise from Debian sound packages (edgessm.data.ambience, edgessm.data.packaged):
folders and archives read through one place, speech-like names left out, copies heard once, each
recording in one split, a clear message when none is installed, and the ``ambience:SPLIT`` noise source."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from edgessm.data import ambience
from edgessm.data.corpora import CorpusError
from edgessm.data.packaged import AudioPackage


def _fake_packages(tmp_path: Path) -> tuple[AudioPackage, ...]:
    for land in ("autumn", "winter"):
        (tmp_path / "glest" / "tilesets" / land / "sounds").mkdir(parents=True)
        for i in range(12):
            (tmp_path / "glest" / "tilesets" / land / "sounds" / f"{land}{i}.ogg").write_bytes(b"o" * (i + 1))
        (tmp_path / "glest" / "tilesets" / land / "sounds" / "rain.ogg").write_bytes(b"same rain")  # a copy
        (tmp_path / "glest" / "tilesets" / land / "sounds" / "readme.txt").write_bytes(b"not audio")
    (tmp_path / "glest" / "tilesets" / "hell" / "sounds").mkdir(parents=True)
    (tmp_path / "glest" / "tilesets" / "hell" / "sounds" / "good_morning.wav").write_bytes(b"a voice")
    with zipfile.ZipFile(tmp_path / "snd.pk3", "w") as z:
        for i in range(20):
            z.writestr(f"sound/ambience/wind{i}.ogg", b"w" * (i + 1))
        z.writestr("sound/ambience/radiomessage.ogg", b"speech")
        z.writestr("sound/soldiers/scream.ogg", b"voice")
    return (
        AudioPackage(
            "glest-data", str(tmp_path / "glest"), "tilesets/*/sounds/*", "CC-BY-SA-3.0", exclude=("good_morning*",)
        ),
        AudioPackage("snd", str(tmp_path / "snd.pk3"), "sound/ambience/*.ogg", "GPL-2+", exclude=("radiomessage*",)),
    )


def test_recordings_come_from_folders_and_archives_once_each_in_one_split(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("EDGESSM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(ambience, "PACKAGES", _fake_packages(tmp_path))
    every = ambience.ambience_files("all")
    names = [p.name for p in every]
    assert len(every) == 24 + 1 + 20 and names.count("rain.ogg") == 1  # the two landscapes' copy once
    assert not {"good_morning.wav", "radiomessage.ogg", "scream.ogg", "readme.txt"} & set(names)
    extracted = [p for p in every if p.name.startswith("wind")]
    assert all(p.parent == tmp_path / "cache" / "ambience" / "snd" / "sound_ambience" for p in extracted)
    assert sorted(p.stat().st_size for p in extracted) == list(range(1, 21))
    parts = [ambience.ambience_files(s) for s in ("train", "validation", "test")]
    assert sorted((p for part in parts for p in part), key=str) == sorted(
        every, key=str
    )  # each recording in exactly one split
    assert len(parts[0]) > len(parts[1]) and len(parts[0]) > len(parts[2])

    from edgessm.train.tasks import noise_paths

    assert noise_paths(["ambience:validation"]) == [str(p) for p in parts[1]]
    assert noise_paths(["ambience:"]) == [str(p) for p in parts[0]]  # the training split by default
    with pytest.raises(ValueError, match="ambience:SPLIT"):
        noise_paths(["sounds:train"])


def test_without_the_packages_the_error_says_how_to_install_them(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(ambience, "PACKAGES", (AudioPackage("x-data", str(tmp_path / "none"), "*.ogg", "GPL"),))
    with pytest.raises(CorpusError, match="make ambience"):
        ambience.ambience_files()
    with pytest.raises(CorpusError, match="unknown ambience split"):
        ambience.ambience_files("dev")


def test_the_shipped_package_list_leaves_out_speech_like_recordings() -> None:
    spoken = ["radiomessage.ogg", "tv_newswav.ogg", "good_morning.wav", "School1.wav", "SportsCroud2.wav",
              "MarketFull1.wav", "Residential3.wav", "Click.wav", "tavern_00.ogg", "biginn_01.ogg", "lobby_chat.ogg",
              "under_attack.ogg", "stall.wav", "cash.wav"]  # fmt: skip
    for name in spoken:
        pkgs = [p for p in ambience.PACKAGES if p.exclude]
        assert any(p.excludes(name) for p in pkgs), name
    assert not any(p.excludes("arcticwind.ogg") or p.excludes("TraficHigh1.wav") for p in ambience.PACKAGES)
