"""The code in the README runs as written."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_blocks_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "the README should show the library in use"
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})


def test_cli_help_and_bench_listing(capsys) -> None:
    from edgessm.cli import main

    assert main([]) == 2
    assert "bench" in capsys.readouterr().out
    for flag in ("-h", "--help"):  # `bench` parses its own options, so its help is answered by hand
        assert main(["bench", flag]) == 0
        out = capsys.readouterr().out
        assert "fftconv" in out and "edgessm bench models --help" in out


def test_cli_import_does_not_load_torch() -> None:
    import subprocess
    import sys

    code = "import sys, edgessm.cli; edgessm.cli.build_parser(); assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
