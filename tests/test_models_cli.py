"""``edgessm models``: lists what ships, verifies the files by hash, and says so when one is damaged."""

from __future__ import annotations

import json
import shutil

import pytest

from edgessm.cli import main
from edgessm.runtime import models, registry

REPO_MODELS = registry.MODELS_DIR  # before any test points it elsewhere


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    if not (registry.MODELS_DIR / "kws35" / "kws35.onnx").is_file():
        pytest.skip("no shipped kws35 model in this checkout")
    root = tmp_path / "models"
    shutil.copytree(registry.MODELS_DIR / "kws35", root / "kws35")
    monkeypatch.setattr(registry, "MODELS_DIR", root)
    monkeypatch.setattr(models, "MODELS_DIR", root)
    return root


def test_table_detail_and_json(shipped, capsys) -> None:
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "kws35" in out and "keyword spotting" in out and "fp32, int8" in out
    assert main(["models", "kws35"]) == 0
    out = capsys.readouterr().out
    assert "labels         37:" in out and "_silence_" in out
    assert "threshold      0.6" in out and "contrast gate  6 dB" in out  # the shipped decision (kws35 v13)
    assert "speech after" not in out  # kws35 (v9 on) ships without the speech-after gate
    assert "level control  quiet input raised toward -20 dBFS" in out  # its graphs ask for the level control
    shutil.copytree(REPO_MODELS / "kws35-es", shipped / "kws35-es")  # an elastic spotter: its budgets
    assert main(["models", "kws35-es"]) == 0
    out = capsys.readouterr().out
    assert "threshold      0.6" in out and "budgets        2, 3, 4, 6, 8, 12, 16, 24, 32" in out
    assert "speech after" not in out  # kws35-es v6 ships without the speech-after gate (v2-v5 had it)
    assert main(["models", "--json"]) == 0
    facts, es = json.loads(capsys.readouterr().out)  # kws35, kws35-es
    assert facts["task"] == "kws" and facts["params"] > 10_000 and facts["chunk_ms"] > 0
    models._detail({**es, "speech_after": 0.5})  # a spotter exported with the gate (export --speech-after 0.5)
    assert "speech after   no running speech after the word (mean _unknown_ <= 0.5" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no shipped model 'nope' \\(shipped: kws35, kws35-es\\)"):
        main(["models", "nope"])


def test_verify_finds_a_damaged_file(shipped, capsys) -> None:
    assert main(["models", "--verify"]) == 0
    assert "match their sha256" in capsys.readouterr().err
    graph = shipped / "kws35" / "kws35.int8.onnx"
    graph.write_bytes(graph.read_bytes()[:-10] + b"0123456789")
    assert main(["models", "--verify"]) == 1
    captured = capsys.readouterr()
    assert "DAMAGED" in captured.out
    assert "kws35/kws35.int8.onnx: sha256 differs from manifest.json" in captured.err


def test_a_reader_that_goes_away_gets_no_traceback(shipped, tmp_path, monkeypatch) -> None:
    """`edgessm models kws35 | head -1`: writing to the closed pipe raises BrokenPipeError; the command
    ends quietly with 141 and points stdout at /dev/null so the interpreter's last flush cannot fail."""
    import sys

    class ClosedPipe:
        def __init__(self) -> None:
            self.file = open(tmp_path / "stdout", "w")  # its descriptor is what dup2 replaces

        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self) -> None:
            pass

        def fileno(self) -> int:
            return self.file.fileno()

    pipe = ClosedPipe()
    monkeypatch.setattr(sys, "stdout", pipe)
    assert main(["models", "kws35"]) == 141
    pipe.file.close()


def test_detail_shows_a_graphs_hold(shipped, capsys) -> None:
    import onnx

    graph = shipped / "kws35" / "kws35.onnx"
    proto = onnx.load(str(graph))
    onnx.helper.set_model_props(proto, {**{p.key: p.value for p in proto.metadata_props}, "hold_s": "0.4",
                                          "margin": "0.2"})  # fmt: skip
    onnx.save(proto, str(graph))
    assert main(["models", "kws35"]) == 0
    out = capsys.readouterr().out
    assert "hold           the strongest keyword within 0.4 s of a crossing fires" in out
    assert "margin         a keyword fires only 0.2 above every other keyword's posterior" in out


def test_detail_names_a_recognizers_word_model(shipped, capsys) -> None:
    if not (REPO_MODELS / "asr" / "lm.npz").is_file():
        pytest.skip("no shipped asr word model in this checkout")
    shutil.copytree(REPO_MODELS / "asr", shipped / "asr")
    assert main(["models", "asr"]) == 0
    out = capsys.readouterr().out
    assert "word model     lm.npz: final results by beam search with it (beam 32, lm weight 0.6, word bonus 2)" in out
    assert main(["models", "kws35"]) == 0
    assert "word model" not in capsys.readouterr().out
