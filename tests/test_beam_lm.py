"""Word n-gram model (interpolated Kneser-Ney in back-off tables) and CTC prefix beam search with it."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from edgessm.runtime.beam import BeamDecoder
from edgessm.runtime.lexicon import log_softmax
from edgessm.runtime.ngram import WordLM

LABELS = ["_", " ", "'"] + [chr(ord("a") + i) for i in range(26)]
TEXT = ["the cat sat on the mat", "the dog sat on the log", "a cat ate the fish", "turn on the light",
        "turn off the light", "three cats ran", "the three cats", "three dogs sat"] * 3 + ["the bird sang"]  # fmt: skip


def posteriors(text: str, floor: float = -8.0) -> np.ndarray:
    """``(vocab, frames)`` log-probabilities that spell ``text``: two frames per character, then a blank."""
    seq = [c for ch in text for c in (LABELS.index(ch),) * 2 + (0,)]
    x = np.full((len(LABELS), len(seq)), floor)
    x[seq, np.arange(len(seq))] = 0.0
    return log_softmax(x)


@pytest.mark.parametrize("min_count", [1, 2])
def test_every_history_is_a_distribution_and_seen_text_is_likelier(min_count: int) -> None:
    lm = WordLM.build(TEXT, order=3, min_count=min_count)
    for history in [(), ("<s>",), ("the",), ("<s>", "the"), ("the", "cat"), ("zebra", "the"), ("on", "the")]:
        total = sum(np.exp(lm.logp(history, w)) for w in lm.vocab if w != "<s>")
        assert total == pytest.approx(1.0, abs=1e-6)
    assert lm.logp(("the", "cat"), "sat") > lm.logp(("the", "cat"), "fish") > lm.logp(("the", "cat"), "zebra")
    assert lm.perplexity(["the cat sat on the mat"]) < lm.perplexity(["mat the on sat cat the"])


def test_a_model_survives_its_file(tmp_path: Path) -> None:
    lm = WordLM.build(TEXT, order=3, min_count=1)
    lm.save(tmp_path / "lm.npz")
    back = WordLM.load(tmp_path / "lm.npz")
    assert back.vocab == lm.vocab and back.order == 3
    for s in ("the cat sat on the log", "turn on the fish", "unheard words here"):
        assert back.sentence_logp(s.split()) == pytest.approx(lm.sentence_logp(s.split()), abs=1e-4)
    with pytest.raises(ValueError, match="order"):
        WordLM.build(TEXT, order=4)


def test_beam_search_reads_clean_posteriors_and_the_lm_picks_the_word_it_knows() -> None:
    words = BeamDecoder(LABELS, None, beam=8, beta=0.0).decode(posteriors("turn off the light"))
    assert [w.text for w in words] == ["turn", "off", "the", "light"]
    assert [w.start for w in words] == [0, 15, 27, 39]  # 3 frames a character and all(w.end >= w.start for w in words)
    # the acoustics say "tree", with a trace of an "h" after the "t": the word model knows "three"
    x = posteriors("tree cats")
    x[LABELS.index("h"), 2] = -1.0
    x = log_softmax(x)
    lm = WordLM.build(TEXT, order=3, min_count=1)
    assert [w.text for w in BeamDecoder(LABELS, lm, alpha=0.0, beta=0.0, closed=False).decode(x)] == ["tree", "cats"]
    assert [w.text for w in BeamDecoder(LABELS, lm, alpha=1.0, beta=0.0, closed=False).decode(x)] == ["three", "cats"]


def test_a_closed_vocabulary_spells_only_words_the_model_knows() -> None:
    """Lexicon-constrained search: with the word model's vocabulary closed (the default), the acoustics'
    "tree" (not a word of TEXT) becomes the nearest word it knows even with the word model's weight at
    zero, a made-up word never comes out, and the open search still writes what it hears."""
    lm = WordLM.build(TEXT, order=3, min_count=1)
    x = posteriors("tree cats")
    x[LABELS.index("h"), 2] = -3.0  # a faint "h" after the "t"
    x = log_softmax(x)
    assert [w.text for w in BeamDecoder(LABELS, lm, alpha=0.0, beta=0.0, closed=False).decode(x)] == ["tree", "cats"]
    assert [w.text for w in BeamDecoder(LABELS, lm, alpha=0.0, beta=0.0).decode(x)] == ["three", "cats"]
    garbled = posteriors("the cat zat on the mat")
    closed = [w.text for w in BeamDecoder(LABELS, lm, beam=32, alpha=0.5, beta=0.0).decode(garbled)]
    assert set(closed) <= set(" ".join(TEXT).split()) and "zat" not in closed
    opened = BeamDecoder(LABELS, lm, beam=32, alpha=0.5, beta=0.0, closed=False)
    assert "zat" in [w.text for w in opened.decode(garbled)]
    # a word cut short at the end of the audio is completed only if a whole word fits; no lm: nothing closed
    assert [w.text for w in BeamDecoder(LABELS, None, beam=8, beta=0.0).decode(posteriors("zat"))] == ["zat"]
    with pytest.raises(ValueError, match="no word"):
        BeamDecoder(["_", " ", "x"], lm)


def test_transcribe_refuses_a_missing_or_foreign_lm_file(tmp_path: Path) -> None:
    from edgessm.cli import main

    (tmp_path / "x.wav").write_bytes(b"")
    with pytest.raises(SystemExit, match="no such file"):
        main(["transcribe", str(tmp_path / "x.wav"), "--lm", str(tmp_path / "none.npz")])
    np.savez(tmp_path / "other.npz", a=np.zeros(3))
    with pytest.raises(SystemExit, match="not a word model"):
        main(["transcribe", str(tmp_path / "x.wav"), "--lm", str(tmp_path / "other.npz")])


def test_a_recognizer_folder_ships_its_word_model_and_transcribe_picks_it_for_files(tmp_path: Path) -> None:
    import argparse
    import json

    from edgessm.runtime.registry import sha256, shipped_lm
    from edgessm.runtime.transcribe import word_model

    folder = tmp_path / "asr"
    folder.mkdir()
    graph = folder / "asr.onnx"
    graph.write_bytes(b"graph")
    assert shipped_lm(graph) is None  # no manifest: nothing shipped
    WordLM.build(TEXT, order=2, min_count=1).save(folder / "lm.npz")
    manifest = {"graph": "asr.onnx", "lm": "lm.npz", "files": {"lm.npz": sha256(folder / "lm.npz")}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert shipped_lm(graph) == folder / "lm.npz"

    def args(lm=None):
        return argparse.Namespace(lm=lm)

    assert word_model(args(), graph) == str(folder / "lm.npz")  # files: the shipped one
    assert word_model(args("none"), graph) is None  # greedy on request
    # live input: the same (graph is then the streaming graph, in the same folder)
    assert word_model(args(), graph, words=True) is None  # a word list is its own language model
    assert word_model(args("/x/other.npz"), graph) == "/x/other.npz"

    # the beam search settings: transcribe's flags, else what the folder ships with its word model, else defaults
    from edgessm.runtime.registry import LM_DEFAULTS, shipped_lm_settings
    from edgessm.runtime.transcribe import beam_decoder

    def flags(**kw):
        return argparse.Namespace(lm=str(folder / "lm.npz"), beam=None, lm_weight=None, word_bonus=None, **kw)

    assert shipped_lm_settings(graph) == LM_DEFAULTS
    dec = beam_decoder(LABELS, flags())
    assert (dec.beam, dec.alpha, dec.beta) == (16, 0.5, 1.0) and dec.words is not None  # closed by default
    (folder / "manifest.json").write_text(json.dumps({**manifest, "lm_decoder": {"beam": 48, "lm_weight": 0.7}}))
    dec = beam_decoder(LABELS, flags(), graph=graph)
    assert (dec.beam, dec.alpha, dec.beta) == (48, 0.7, 1.0)
    dec = beam_decoder(LABELS, flags(open_vocabulary=True), graph=graph)
    assert dec.words is None
    f = flags()
    f.beam, f.word_bonus = 4, 2.5
    dec = beam_decoder(LABELS, f, graph=graph)
    assert (dec.beam, dec.alpha, dec.beta) == (4, 0.7, 2.5)
    (folder / "lm.npz").write_bytes(b"tampered")
    with pytest.raises(ValueError, match="sha256"):
        shipped_lm(graph)


def test_export_ships_a_word_model_with_recognizers_only(tmp_path: Path) -> None:
    import torch

    from edgessm.deploy.package import package

    with pytest.raises(ValueError, match="--lm is for recognizers; this is a kws model"):
        package(torch.nn.Identity(), {"network": "kws"}, tmp_path / "m", "m", 320, lm=tmp_path / "lm.npz")
    with pytest.raises(ValueError, match="no such file"):
        package(torch.nn.Identity(), {"network": "asr"}, tmp_path / "m", "m", 320, lm=tmp_path / "lm.npz")
    assert not (tmp_path / "m").exists()  # refused before anything was written
    from edgessm.deploy.cli import _lm_decoder

    ns = argparse.Namespace(lm=None, beam=32, lm_weight=None, word_bonus=None)
    with pytest.raises(SystemExit, match="add --lm"):
        _lm_decoder(ns)
    ns.lm, ns.word_bonus = "lm.npz", 2.0
    assert _lm_decoder(ns) == {"beam": 32, "word_bonus": 2.0}
    ns.beam = 0
    with pytest.raises(SystemExit, match="at least 1"):
        _lm_decoder(ns)
