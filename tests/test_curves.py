"""Training curves from a run's log (``edgessm runs --plot``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgessm.train.curves import Curves, plot_curves, read_curves, running_mean


def _run(folder: Path, rows: str, batch: int = 8) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"train": {"batch_size": batch}}))
    (folder / "log.csv").write_text(rows)
    return folder


def test_loss_and_validation_rows_are_read_against_examples(tmp_path: Path) -> None:
    rows = "step,loss,lr,val_score\n10,2.0,0.1,\n20,1.5,0.1,\n20,,,0.5\n30,1.0,0.1,\n30,,,0.75\n"
    c = read_curves(_run(tmp_path / "r", rows, batch=8))
    assert c.name == "r"
    assert c.loss == [(80.0, 2.0), (160.0, 1.5), (240.0, 1.0)]
    assert c.score == [(160.0, 0.5), (240.0, 0.75)]


def test_a_run_that_has_not_logged_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "r"
    folder.mkdir()
    with pytest.raises(ValueError, match=r"no log\.csv yet"):
        read_curves(folder)
    (folder / "log.csv").write_text("step,loss\n")
    with pytest.raises(ValueError, match=r"no batch size in config\.json"):
        read_curves(folder)


def test_running_mean() -> None:
    assert running_mean([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    assert running_mean([], 3) == []


def test_the_picture_is_written_and_an_empty_one_refused(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    c = read_curves(_run(tmp_path / "r", "step,loss,val_score\n1,2.0,\n2,1.0,\n2,,0.5\n"))
    path = plot_curves([c], tmp_path / "c.png", smooth=2)
    assert path.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="nothing to plot"):
        plot_curves([Curves(name="empty")], tmp_path / "d.png")
    assert not (tmp_path / "d.png").exists()
