"""Audio in and out: what is refused, and what writing guarantees."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from edgessm.data.audio import AudioError, load_audio, write_audio


def test_write_is_atomic_keeps_usual_permissions_and_round_trips(tmp_path) -> None:
    x = (0.5 * np.sin(np.arange(16000) / 10)).astype(np.float32)
    out = tmp_path / "a.wav"
    old = os.umask(0o022)
    try:
        write_audio(out, x, 16000)
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["a.wav"]  # no temporary left behind
    y, sr = load_audio(out, sr=None)
    assert sr == 16000 and np.abs(y - x).max() < 1e-4


def test_refuses_non_finite_audio_and_keeps_the_existing_file(tmp_path) -> None:
    out = tmp_path / "keep.wav"
    write_audio(out, np.zeros(100, np.float32), 16000)
    before = out.read_bytes()
    with pytest.raises(AudioError, match="NaN"):
        write_audio(out, np.array([0.0, np.nan], np.float32), 16000)
    assert out.read_bytes() == before


def test_refuses_what_is_not_audio(tmp_path) -> None:
    junk = tmp_path / "notes.wav"
    junk.write_text("this is not a recording")
    with pytest.raises(AudioError):
        load_audio(junk)
    with pytest.raises(AudioError, match="no such file"):
        load_audio(tmp_path / "missing.wav")
    (tmp_path / "zero.wav").write_bytes(b"")
    with pytest.raises(AudioError, match=r"the file is empty \(0 bytes\)"):
        load_audio(tmp_path / "zero.wav")


def test_atomic_path_leaves_the_old_file_and_no_temporary_on_error(tmp_path) -> None:
    from edgessm.atomic import atomic_path, write_text

    target = tmp_path / "report.json"
    write_text(target, "old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("interrupted")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["report.json"]
