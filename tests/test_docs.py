"""The README and docs/ stay true: their code runs, their links resolve, their commands exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MODELS = ("kws35", "kws35-es", "denoise", "asr")
CARDS = [ROOT / "models" / name / "README.md" for name in MODELS]
CHANGELOGS = [ROOT / "models" / name / "CHANGELOG.md" for name in MODELS]
PAGES = [README, *DOCS]
USER_PAGES = [*PAGES, *CARDS, *CHANGELOGS, ROOT / "models" / "README.md"]  # what users read

FENCE = re.compile(r"^[ \t]*```([\w-]*)\n(.*?)^[ \t]*```", flags=re.S | re.M)  # also inside list items
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# `edgessm VERB` as a command word: at a line start, after a pipe, `$(`, `&&`, or as `-m edgessm VERB`
VERB = re.compile(r"(?:^|[\s|;&(])(?:[\w./-]*/)?edgessm\s+([a-z][\w-]*)")
BENCH = re.compile(r"-m\s+edgessm\.bench\s+([^\s\\]+)")
# development-diary wording: the docs describe the project, not who ran what when
DIARY = [
    r"\bissues? \d+",
    r"\bissue notes\b",
    r"\bsessions? \d+(?![\d.]*\s*(?:%|dB))",  # not a user session's score ("sessions 84.5%")
    r"\blent (?:a |the )?GPU",
    r"\bborrowed\b",
    r"\bdevice tool\b",
    r"\bnext GPU session\b",
    r"\bdevelopment session\b",
    r"\bin the same session\b",
]


def _prose(text: str) -> str:
    """The text with fenced code blocks blanked (links inside code are not links)."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def _sh_lines(text: str) -> list[str]:
    """Command lines of the ```sh blocks: continuations joined, comments dropped."""
    lines = []
    for lang, body in FENCE.findall(text):
        if lang not in ("sh", "bash", "shell"):
            continue
        for line in body.replace("\\\n", " ").splitlines():
            lines.append(re.sub(r"(^|\s)#.*$", "", line).strip())
    return [line for line in lines if line]


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_readme_python_blocks_run(monkeypatch) -> None:
    monkeypatch.chdir(ROOT)  # the blocks use paths of a fresh clone (models/, demos/)
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


def test_docs_pages_exist_and_are_indexed() -> None:
    assert len(DOCS) > 1, "docs/ should hold the topic pages"
    index = (ROOT / "docs" / "README.md").read_text()
    readme = README.read_text()
    for page in DOCS:
        if page.name == "README.md":
            continue
        assert f"]({page.name})" in index, f"docs/README.md does not link {page.name}"
        assert f"](docs/{page.name}" in readme, f"README.md does not link docs/{page.name}"


def test_relative_links_resolve() -> None:
    broken = []
    for page in USER_PAGES:
        for n, line in enumerate(_prose(page.read_text()).splitlines(), 1):
            for target in LINK.findall(line):
                if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                    continue  # http(s)://, mailto:, anchors within the page
                path = target.split("#", 1)[0]
                if not (page.parent / path).exists():
                    broken.append(f"{_rel(page)}:{n}: {target}")
    assert not broken, "links to missing files:\n" + "\n".join(broken)


def _commands() -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    verbs: dict[str, list[str]] = {}
    benches: dict[str, list[str]] = {}
    for page in PAGES:
        for line in _sh_lines(page.read_text()):
            for verb in VERB.findall(line):
                verbs.setdefault(verb, []).append(f"{_rel(page)}: {line}")
            for name in BENCH.findall(line):
                benches.setdefault(name, []).append(f"{_rel(page)}: {line}")
    return verbs, benches


def test_documented_commands_exist() -> None:
    from edgessm.bench import BENCHMARKS
    from edgessm.cli import COMMANDS

    verbs, benches = _commands()
    assert "listen" in verbs and "train" in verbs, "the docs' sh blocks should show the command line"
    unknown = [where for verb, lines in verbs.items() if verb not in {*COMMANDS, "bench"} for where in lines]
    assert not unknown, "edgessm verbs that do not exist:\n" + "\n".join(unknown)
    unknown = [where for name, lines in benches.items() if name not in BENCHMARKS for where in lines]
    assert not unknown, "benchmarks that do not exist:\n" + "\n".join(unknown)


@pytest.mark.parametrize("verb", sorted(_commands()[0]))
def test_documented_verbs_answer_help(verb: str, capsys) -> None:
    from edgessm.cli import COMMANDS, main

    if verb == "bench":  # `bench` answers --help itself and returns
        assert main(["bench", "--help"]) == 0
    elif verb in COMMANDS:
        with pytest.raises(SystemExit) as stop:
            main([verb, "--help"])
        assert stop.value.code == 0
    else:
        pytest.fail(f"`edgessm {verb}` is not a command")
    assert f"edgessm {verb}" in capsys.readouterr().out


def test_model_cards_fit_a_screenful_and_keep_their_history_apart() -> None:
    """Each shipped model's card says what it does today in at most 250 lines; its release history is in its
    CHANGELOG, and the release notes as written are in eval/NOTES.md."""
    for card, changelog in zip(CARDS, CHANGELOGS, strict=True):
        lines = card.read_text().splitlines()
        assert len(lines) <= 250, f"{_rel(card)}: {len(lines)} lines (at most 250: history goes to CHANGELOG.md)"
        assert changelog.is_file() and (card.parent / "eval" / "NOTES.md").is_file(), _rel(card.parent)
        assert "CHANGELOG.md" in card.read_text(), f"{_rel(card)} links its CHANGELOG"


def test_no_development_diary_wording() -> None:
    found = []
    for page in USER_PAGES:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            for pattern in DIARY:
                if m := re.search(pattern, line, flags=re.I):
                    found.append(f"{_rel(page)}:{n}: {m.group(0)!r} in {line.strip()[:100]}")
    assert not found, "development-diary wording (say what is measured, not who ran it when):\n" + "\n".join(found)
