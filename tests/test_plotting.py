"""Plots are optional: without matplotlib a report goes on without them, a plotting command says what to install."""

from __future__ import annotations

import sys

import pytest

from edgessm.plotting import pyplot


def test_pyplot_draws_to_files_or_reports_its_absence(monkeypatch) -> None:
    pytest.importorskip("matplotlib")
    plt = pyplot()
    import matplotlib

    assert plt is not None and matplotlib.get_backend().lower() == "agg"
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    assert pyplot() is None
    with pytest.raises(ImportError, match="edgessm runs --plot draws with matplotlib: pip install matplotlib"):
        pyplot("edgessm runs --plot")
