"""The one way this package draws: matplotlib's ``pyplot`` on its file-only ``Agg`` backend.

Plots are optional extras of reports and commands; matplotlib is imported only when one is drawn."""

from __future__ import annotations

from types import ModuleType


def pyplot(needed_by: str | None = None) -> ModuleType | None:
    """``matplotlib.pyplot`` drawing to files (no display needed), or ``None`` without matplotlib; with
    ``needed_by`` (a command that cannot do without the plot) an ``ImportError`` that says how to install it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        if needed_by:
            raise ImportError(f"{needed_by} draws with matplotlib: pip install matplotlib") from e
        return None
    return plt
