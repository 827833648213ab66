"""``python -m edgessm.data.synth``: see :mod:`edgessm.data.synth.cli`."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
