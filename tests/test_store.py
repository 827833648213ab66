"""The decoded-audio store's on-disk cache: reused when the files are unchanged, rebuilt when one changes."""

from __future__ import annotations

import os

import numpy as np
import pytest

from edgessm.data import store as store_mod
from edgessm.data.audio import write_audio
from edgessm.data.store import AudioStore


def test_cache_is_reused_and_invalidated(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EDGESSM_CACHE", str(tmp_path / "cache"))
    paths = []
    for i in range(3):
        write_audio(tmp_path / f"{i}.wav", 0.1 * (i + 1) * np.ones(800 * (i + 1), np.float32), 16000)
        paths.append(str(tmp_path / f"{i}.wav"))
    first = AudioStore(paths, cache=True)
    folders = [f for f in (tmp_path / "cache" / "stores").iterdir() if f.is_dir()]
    assert len(folders) == 1 and sorted(f.name for f in folders[0].iterdir()) == ["data.npy", "offsets.npy"]

    def no_decoding(*args, **kwargs):
        raise AssertionError("decoded again although the cache is valid")

    monkeypatch.setattr(store_mod, "load_audio", no_decoding)
    again = AudioStore(paths, cache=True)
    assert len(again) == 3 and np.array_equal(again[2], first[2]) and again.length(1) == 1600
    assert isinstance(again.data, np.memmap)  # mapped, not read: a large cache opens at once
    write_audio(tmp_path / "1.wav", np.zeros(400, np.float32), 16000)  # a changed file: a new key
    os.utime(tmp_path / "1.wav", ns=(1, 1))
    with pytest.raises(AssertionError, match="decoded again"):
        AudioStore(paths, cache=True)


def _clips(folder, n: int = 3) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        write_audio(folder / f"{i}.wav", 0.1 * (i + 1) * np.ones(800 * (i + 1), np.float32), 16000)
    return [str(folder / f"{i}.wav") for i in range(n)]


def _no_decoding(*args, **kwargs):
    raise AssertionError("decoded again")


def test_cache_survives_new_modification_times_but_not_new_bytes(tmp_path, monkeypatch) -> None:
    """A corpus copied or mounted again (same bytes, new times) keeps its store; the same sizes with other
    bytes do not."""
    monkeypatch.setenv("EDGESSM_CACHE", str(tmp_path / "cache"))
    paths = _clips(tmp_path / "clips")
    first = AudioStore(paths, cache=True)
    for p in paths:
        os.utime(p, ns=(10**18, 10**18))  # touched, as a fresh copy of the corpus would be
    monkeypatch.setattr(store_mod, "load_audio", _no_decoding)
    again = AudioStore(paths, cache=True)
    assert np.array_equal(again.data, first.data)
    write_audio(paths[0], -0.1 * np.ones(800, np.float32), 16000)  # the same size, other samples
    with pytest.raises(AssertionError, match="decoded again"):
        AudioStore(paths, cache=True)


def test_store_cached_by_modification_times_is_taken_over(tmp_path, monkeypatch) -> None:
    """A store made before content keys is renamed to its content key, not decoded again."""
    import hashlib

    monkeypatch.setenv("EDGESSM_CACHE", str(tmp_path / "cache"))
    paths = _clips(tmp_path / "clips")
    built = AudioStore(paths, cache=True)
    stores = tmp_path / "cache" / "stores"
    (folder,) = [f for f in stores.iterdir() if f.is_dir()]
    h = hashlib.sha256(b"16000:0")
    for p in paths:
        st = os.stat(p)
        h.update(f"\n{os.path.abspath(p)}:{st.st_size}:{st.st_mtime_ns}".encode())
    folder.rename(stores / h.hexdigest()[:24])  # where the old key put it
    monkeypatch.setattr(store_mod, "load_audio", _no_decoding)
    again = AudioStore(paths, cache=True)
    assert np.array_equal(again.data, built.data)
    assert [f.name for f in stores.iterdir() if f.is_dir()] == [folder.name]


def test_making_a_store_removes_the_ones_unused_for_days(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EDGESSM_CACHE", str(tmp_path / "cache"))
    stores = tmp_path / "cache" / "stores"
    old, recent = _clips(tmp_path / "old"), _clips(tmp_path / "recent")
    AudioStore(old, cache=True)
    AudioStore(recent, cache=True)
    folders = {f for f in stores.iterdir() if f.is_dir()}
    assert len(folders) == 2
    month_ago = 1e9 * (os.path.getmtime(stores) - 30 * 86400)
    for f in folders:
        os.utime(f, ns=(int(month_ago), int(month_ago)))
    AudioStore(recent, cache=True)  # used again: its time renewed
    AudioStore(_clips(tmp_path / "new"), cache=True)  # a new store: the one unused for a month goes
    left = {f for f in stores.iterdir() if f.is_dir()}
    assert len(left) == 2 and len(left & folders) == 1
    monkeypatch.setattr(store_mod, "load_audio", _no_decoding)
    AudioStore(recent, cache=True)  # the kept one is the recently used one
    with pytest.raises(AssertionError, match="decoded again"):
        AudioStore(old, cache=True)


def test_rms_is_the_whole_clips_and_computed_once(tmp_path, monkeypatch) -> None:
    """``rms(i)`` is the level of all of clip ``i`` (what a crop is scaled by), the same float32 as computing it
    from the clip, and a second call does not convert the clip again."""
    rng = np.random.default_rng(0)
    paths = []
    for i in range(2):
        write_audio(tmp_path / f"{i}.wav", (0.05 * (i + 1) * rng.standard_normal(4000)).astype(np.float32), 16000)
        paths.append(str(tmp_path / f"{i}.wav"))
    store = AudioStore(paths)
    for i in range(2):
        x = store[i]
        assert store.rms(i) == np.sqrt(np.mean(x**2)) and store.rms(i).dtype == np.float32
        assert store.rms(i) != np.sqrt(np.mean(store.slice(i, 0, 100) ** 2))  # not a crop's level
    monkeypatch.setattr(AudioStore, "__getitem__", _no_decoding)
    assert store.rms(1) > store.rms(0) > 0
