"""The README's setup: each checkout runs its own code through its own ``.venv`` (dependencies shared)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _deps_of_this_checkout() -> Path:
    """The shared dependencies' virtualenv this checkout's ``.venv`` was made over (skip when not made by make)."""
    marker = ROOT / ".venv" / "deps-path"
    if Path(sys.prefix).resolve() != (ROOT / ".venv").resolve() or not marker.is_file():
        pytest.skip("runs inside the .venv that `make setup` makes")
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    return Path(marker.read_text().strip())


def _copy_checkout(dest: Path) -> Path:
    """The files `make setup` needs, as a second clone would have them (same pins, so the same DEPS)."""
    for name in ("Makefile", "pyproject.toml", "constraints.txt", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(ROOT / "edgessm", dest / "edgessm", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _which_edgessm(checkout: Path) -> Path:
    out = subprocess.run(
        [str(checkout / ".venv" / "bin" / "python"), "-c", "import edgessm; print(edgessm.__file__)"],
        capture_output=True, text=True, check=True, cwd="/",
    )  # fmt: skip
    return Path(out.stdout.strip()).resolve()


def test_two_checkouts_each_run_their_own_code(tmp_path) -> None:
    deps = _deps_of_this_checkout()
    other = _copy_checkout(tmp_path)
    (other / "edgessm" / "__init__.py").write_text(
        (ROOT / "edgessm" / "__init__.py").read_text() + "\nSECOND_CHECKOUT = True\n"
    )
    proc = subprocess.run(
        ["make", "-s", "setup", f"DEPS={deps}"], cwd=other, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _which_edgessm(other).is_relative_to(other.resolve())
    assert _which_edgessm(ROOT).is_relative_to(ROOT)  # setting up the other clone did not take this one over
    # its `edgessm` command (what `source .venv/bin/activate` puts on PATH) runs its own code too
    cli = subprocess.run(
        [str(other / ".venv" / "bin" / "edgessm"), "--help"], capture_output=True, text=True, timeout=120, cwd="/"
    )
    assert cli.returncode == 0 and "edgessm" in cli.stdout
    probe = "import edgessm; print(getattr(edgessm, 'SECOND_CHECKOUT', False))"
    mine = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd="/", check=True)
    theirs = subprocess.run(
        [str(other / ".venv" / "bin" / "python"), "-c", probe], capture_output=True, text=True, cwd="/", check=True
    )
    assert (mine.stdout.strip(), theirs.stdout.strip()) == ("False", "True")
