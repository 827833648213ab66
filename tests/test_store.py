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
    folders = list((tmp_path / "cache" / "stores").iterdir())
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
