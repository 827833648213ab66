"""Licensed offline text for synthetic sentences: extraction rules, the package hint, and the real sources
where the setup installed them."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgessm.data import text_sources
from edgessm.data.corpora import CorpusError
from edgessm.data.synth.texts import normalize_transcript
from edgessm.data.text_sources import SOURCES, read_sentences, sentences_of


def test_records_become_speakable_sentences() -> None:
    record = ('He said, \u201cCome here.\u201d Mr. Smith came -- slowly. Call 555-1234 now! '
              "See www.example.org today. Oh. A dog\u2019s life is good; it sleeps")  # fmt: skip
    assert list(sentences_of(record)) == ["He said, Come here.", "Mr. Smith came, slowly.",
                                          "A dog's life is good; it sleeps."]  # fmt: skip
    assert list(sentences_of("one two", min_words=3)) == []
    assert list(sentences_of(" ".join(["word"] * 30), max_words=20)) == []
    assert normalize_transcript("Mr. Smith came, slowly.") == "mr smith came slowly"


def test_a_missing_package_is_named_in_the_error(monkeypatch, tmp_path: Path) -> None:
    missing = text_sources.TextSource("wordnet", "wordnet-base", str(tmp_path / "none"), "x", lambda p: iter(()))
    monkeypatch.setitem(SOURCES, "wordnet", missing)
    with pytest.raises(CorpusError, match="apt-get install wordnet-base"):
        read_sentences("wordnet")
    with pytest.raises(CorpusError, match="unknown text source 'books'"):
        read_sentences("books")


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_installed_sources_give_thousands_of_distinct_sentences(name: str) -> None:
    if not Path(SOURCES[name].path).exists():
        pytest.skip(f"the Debian package {SOURCES[name].package} is not installed (make installs it)")
    found = read_sentences(name)
    assert len(found) > 20_000 and len(set(found)) == len(found)
    assert all(s[0].isupper() and s[-1] in ".!?" and 3 <= len(s.split()) <= 20 for s in found)
    assert all(normalize_transcript(s) for s in found[:2000])


def test_text_sources_join_the_synthetic_sentence_pools(monkeypatch) -> None:
    from edgessm.data.synth import corpus

    book = [f"The {w} sat by the fire." for w in ("cat", "dog", "king", "queen", "child")] * 40
    book += [f"A {a} {b} walked home." for a in ("tall", "short", "old", "young") for b in ("man", "woman", "boy")]
    monkeypatch.setattr(corpus, "read_sentences", lambda name: book if name == "book" else [])
    plain = corpus.sentence_pools(50, seed=0)
    pools = corpus.sentence_pools(50, seed=0, text_sources=["book"])
    added = [s for split in pools.values() for s in split if s.domain == "book"]
    assert len(added) == 17 and {s.text for s in added} >= {"the cat sat by the fire", "a tall man walked home"}
    assert all(s.spoken[0].isupper() for s in added)
    # the generated sentences keep their splits; the book's are shared out by the same hash
    assert all({s.text for s in plain[k]} <= {s.text for s in pools[k]} for k in plain)
    assert sum(len(v) for v in pools.values()) == sum(len(v) for v in plain.values()) + 17
