"""Vocabulary-constrained CTC decoding recovers the words greedy decoding misspells."""

from __future__ import annotations

import numpy as np
import pytest

from edgessm.data.text import CHARS, CharTokenizer
from edgessm.runtime.lexicon import LexiconDecoder, log_softmax


def frames_for(spec: list[tuple[str, float]], seed: int = 0) -> np.ndarray:
    """Log-probabilities ``(vocab, frames)``: each ``(label, confidence)`` is one frame where ``label``
    ('_' = blank) gets ``confidence`` of the mass and the rest is spread with noise."""
    rng = np.random.default_rng(seed)
    out = []
    for label, conf in spec:
        p = rng.uniform(0.5, 1.5, len(CHARS))
        k = 0 if label == "_" else CHARS.index(label)
        p[k] = 0
        p = p / p.sum() * (1 - conf)
        p[k] = conf
        out.append(np.log(p))
    return np.stack(out, axis=1)


def spell(text: str, hold: int = 2) -> list[tuple[str, float]]:
    spec = [("_", 0.9)] * 3
    for ch in text:
        spec += [(ch, 0.8)] * hold + [("_", 0.9)]
    return spec + [("_", 0.9)] * 3


def greedy(lp: np.ndarray) -> str:
    return CharTokenizer().greedy(lp.argmax(0).tolist())


def test_clean_input_decodes_to_the_same_words_with_timings() -> None:
    lp = frames_for(spell("one two"))
    lex = LexiconDecoder(CHARS, ["zero", "one", "two", "three"])
    words = lex.decode(lp)
    assert [w.text for w in words] == ["one", "two"]
    assert words[0].start == 3 and words[0].end == 3 + 3 * 3 - 2  # first frame of 'o' .. last frame of 'e'
    assert words[1].start > words[0].end


def test_a_weak_letter_is_restored_by_the_vocabulary() -> None:
    spec = spell("three five")
    h = spec.index(("h", 0.8))
    lp = frames_for(spec)
    for t in (h, h + 1):  # 'h' loses to blank in both of its frames (0.4 vs 0.5): greedy says "tree"
        lp[:, t] = np.log(0.1 / (len(CHARS) - 2))
        lp[0, t], lp[CHARS.index("h"), t] = np.log(0.5), np.log(0.4)
    assert greedy(lp) == "tree five"
    digits = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    assert [w.text for w in LexiconDecoder(CHARS, digits).decode(lp)] == ["three", "five"]


def test_repeated_words_letters_and_silence() -> None:
    lex = LexiconDecoder(CHARS, ["see", "go", "stop"])
    assert [w.text for w in lex.decode(frames_for(spell("go go")))] == ["go", "go"]
    assert [w.text for w in lex.decode(frames_for(spell("see")))] == ["see"]  # "ee" needs the blank between
    assert lex.decode(frames_for([("_", 0.95)] * 20)) == []
    assert lex.decode(np.zeros((len(CHARS), 0))) == []


def test_log_softmax_and_errors() -> None:
    x = np.random.default_rng(1).normal(size=(29, 7))
    assert np.allclose(np.exp(log_softmax(x)).sum(0), 1.0)
    with pytest.raises(ValueError, match="cannot emit: '9'"):
        LexiconDecoder(CHARS, ["route9"])
    with pytest.raises(ValueError, match="vocabulary is empty"):
        LexiconDecoder(CHARS, [" "])


def test_one_word_decodes_a_single_word_of_the_list_or_nothing() -> None:
    """Commands: "go stop" spoken into one segment is one word (the better-scored one), never two."""
    words = ["go", "stop", "up"]
    two = frames_for(spell("go stop"))
    assert [w.text for w in LexiconDecoder(CHARS, words).decode(two)] == ["go", "stop"]
    one = LexiconDecoder(CHARS, words, one_word=True)
    found = one.decode(two)
    assert len(found) == 1 and found[0].text in ("go", "stop")
    assert [w.text for w in one.decode(frames_for(spell("up")))] == ["up"]
    assert one.decode(frames_for([("_", 0.95)] * 20)) == []
    # a word of the list wins over the misspelling greedy decoding makes
    spec = spell("stop")
    t = spec.index(("t", 0.8))
    lp = frames_for(spec)
    for f in (t, t + 1):
        lp[:, f] = np.log(0.1 / (len(CHARS) - 2))
        lp[0, f], lp[CHARS.index("t"), f] = np.log(0.5), np.log(0.4)
    assert greedy(lp) == "sop"
    assert [w.text for w in one.decode(lp)] == ["stop"]


def test_one_word_scores_are_the_ctc_sum_over_all_alignments() -> None:
    """Against brute force: every label path of 5 frames over blank and the letters, collapsed by the CTC rule;
    a word's score is the log of the summed probability of the paths that spell it, nothing's the all-blank one."""
    import itertools

    rng = np.random.default_rng(3)
    labels = ["_", " ", "a", "b"]
    lp = log_softmax(rng.normal(size=(4, 5)) * 2)
    lex = LexiconDecoder(labels, ["ab", "b", "aa", "bab"], blank=0, one_word=True)
    totals: dict[str, float] = {}
    for path in itertools.product([0, 2, 3], repeat=5):
        collapsed = [k for i, k in enumerate(path) if k != 0 and (i == 0 or k != path[i - 1])]
        text = "".join(labels[k] for k in collapsed)
        totals[text] = totals.get(text, 0.0) + float(np.exp(sum(lp[k, t] for t, k in enumerate(path))))
    scores, nothing = lex.word_scores(lp)
    for word, score in zip(lex.words, scores, strict=True):
        assert abs(score - np.log(totals[word])) < 1e-9
    assert abs(nothing - np.log(totals[""])) < 1e-9


def test_one_word_picks_the_word_of_most_probability_not_of_the_best_single_alignment() -> None:
    """Four frames where 'b' has the single most probable alignment (_ _ _ b) but 'a' the most probability
    over all its alignments (it is likely in three frames): the one-word decoder says 'a'."""
    labels = ["_", " ", "a", "b"]
    p = np.array([[0.449, 0.595, 0.518, 0.029], [1e-12] * 4, [0.462, 0.270, 0.329, 0.466],
                  [0.089, 0.136, 0.153, 0.504]])  # fmt: skip
    lp = np.log(p / p.sum(0))
    lex = LexiconDecoder(labels, ["a", "b"], blank=0, one_word=True)
    scores, nothing = lex.word_scores(lp)
    assert scores[0] > scores[1] > nothing
    (word,) = lex.decode(lp)
    assert word.text == "a" and 0 <= word.start <= word.end <= 3
    assert abs(word.confidence - np.exp(scores[0]) / (np.exp(scores).sum() + np.exp(nothing))) < 1e-12
    (only,) = LexiconDecoder(labels, ["b"], blank=0, one_word=True).decode(lp)  # one word: decided by the sum too
    assert only.text == "b" and 0 < only.confidence < 1
