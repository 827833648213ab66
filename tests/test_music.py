"""Real music from Debian soundtrack packages: stable splits by track, archives extracted once, a clear
message when none is installed, and the ``music:SPLIT`` noise source."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from edgessm.data import music
from edgessm.data.corpora import CorpusError


def test_tracks_split_80_10_10_by_package_and_name() -> None:
    splits = [music.track_split("pkg", f"track{i}.ogg") for i in range(3000)]
    assert 0.77 < splits.count("train") / 3000 < 0.83 and 0.08 < splits.count("test") / 3000 < 0.12
    assert splits == [music.track_split("pkg", f"track{i}.ogg") for i in range(3000)]
    assert splits != [music.track_split("other", f"track{i}.ogg") for i in range(3000)]


def test_folders_and_archives_give_their_tracks_each_in_one_split(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("EDGESSM_CACHE", str(tmp_path / "cache"))
    (tmp_path / "a" / "album").mkdir(parents=True)
    for i in range(20):
        (tmp_path / "a" / "album" / f"t{i}.ogg").write_bytes(b"ogg")
    with zipfile.ZipFile(tmp_path / "b.pk3", "w") as z:
        for i in range(20):
            z.writestr(f"music/s{i}.ogg", b"x" * (i + 1))
        z.writestr("maps/readme.txt", b"no")
    fake = (music.MusicPackage("a-music", str(tmp_path / "a"), "**/*.ogg", "GPL-2+"),
            music.MusicPackage("b-music", str(tmp_path / "b.pk3"), "music/*.ogg", "CC-BY-SA-3.0"))  # fmt: skip
    monkeypatch.setattr(music, "PACKAGES", fake)
    every = music.music_tracks("all")
    assert len(every) == 40 and all(p.suffix == ".ogg" for p in every)
    extracted = [p for p in every if "b-music" in str(p)]
    assert extracted[0].parent == tmp_path / "cache" / "music" / "b-music"
    assert sorted(p.stat().st_size for p in extracted) == list(range(1, 21))
    parts = [set(music.music_tracks(s)) for s in music.SPLITS]
    assert set().union(*parts) == set(every) and sum(map(len, parts)) == 40  # each track in one split

    from edgessm.train.tasks import noise_paths

    assert noise_paths(["music:validation"]) == [str(p) for p in music.music_tracks("validation")]


def test_without_the_packages_the_error_says_how_to_install_them(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(music, "PACKAGES", (music.MusicPackage("x-music", str(tmp_path / "none"), "*.ogg", "GPL"),))
    with pytest.raises(CorpusError, match="make music"):
        music.music_tracks()
    with pytest.raises(CorpusError, match="unknown music split"):
        music.music_tracks("dev")


def test_keyword_evaluation_music_is_recorded_tracks_of_its_split_or_procedural_without_them(
    monkeypatch, tmp_path: Path
) -> None:
    import numpy as np
    import soundfile as sf

    from edgessm.eval import backgrounds

    (tmp_path / "m").mkdir()
    for i in range(30):
        sf.write(tmp_path / "m" / f"t{i:02d}.wav", np.full(16000 * 40, 0.01 * (i + 1), np.float32), 16000)
    monkeypatch.setattr(music, "PACKAGES", (music.MusicPackage("m-music", str(tmp_path / "m"), "*.wav", "GPL"),))
    loaded: list[str] = []
    load = backgrounds.load_audio
    monkeypatch.setattr(backgrounds, "load_audio", lambda path: loaded.append(Path(path).name) or load(path))
    for split in ("test", "validation"):
        loaded.clear()
        x = backgrounds.music(90.0, np.random.default_rng(0), split)
        assert x.shape == (90 * 16000,) and music.music_source(split) == "recorded"
        assert all(np.allclose(p, p[0]) and p[0] > 0 for p in x.reshape(3, -1))  # one track per 30 s piece
        names = {p.name for p in music.music_tracks(split)}
        assert len(loaded) == 3 and set(loaded) <= names and len(names) < 30  # that split's tracks only
    loaded.clear()
    backgrounds.background("music", 30.0, np.random.default_rng(1))  # the test streams: test tracks
    backgrounds.background("music", 30.0, np.random.default_rng(1), speech_source="validation")  # calibration
    assert loaded[0] in {p.name for p in music.music_tracks("test")}
    assert loaded[1] in {p.name for p in music.music_tracks("validation")}
    monkeypatch.setattr(music, "PACKAGES", (music.MusicPackage("x-music", str(tmp_path / "none"), "*.ogg", "GPL"),))
    assert music.music_source("test") == "procedural" and music.installed_tracks("test") == []
    y = backgrounds.music(30.0, np.random.default_rng(0))
    assert y.shape == (30 * 16000,) and not np.allclose(y, y[0])  # procedural music instead
