"""Vocabulary-constrained CTC decoding: the best sequence of words from a closed list (torch-free).

For commands and digit strings the user knows the words that can occur. Best-path (greedy) CTC can
spell anything ("tree" for "three"); this decoder finds the most probable *word sequence* instead:
a Viterbi search over a word loop built from each word's CTC topology (blank, c1, blank, c2, ...,
cL, blank; a repeated letter needs a blank between), joined by an optional space and leading or
trailing silence (blank). ``word_bonus`` (log-probability per word) trades insertions for deletions.
With ``one_word`` the loop is cut: a segment is one word of the list or nothing (one command per utterance).

    lex = LexiconDecoder(labels, ["yes", "no", "up", "down"])
    words = lex.decode(log_probs)          # (vocab, frames) log-softmax of the recognizer's logits
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

NEG = -1e30


@dataclass(frozen=True)
class DecodedWord:
    text: str
    start: int  # first frame of its first character
    end: int  # last frame of its last character (inclusive)
    confidence: float | None = None  # one-word decoding: P(this word) / P(any word of the list or nothing)


def log_softmax(logits: np.ndarray, axis: int = 0) -> np.ndarray:
    z = logits - logits.max(axis=axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))


class LexiconDecoder:
    """Viterbi decoding of CTC log-probabilities into words of ``vocabulary``.

    Args:
        labels: the CTC output labels in logit order (``labels[blank]`` is the blank).
        vocabulary: the words that may occur (their characters must all be labels).
        word_bonus: added per decoded word (> 0 favours more words).
        blank: index of the blank; ``space``: the label between words.
        one_word: decode at most one word (silence, the word, silence).
    """

    def __init__(self, labels: Sequence[str], vocabulary: Sequence[str], word_bonus: float = 0.0, blank: int = 0,
                 space: str = " ", one_word: bool = False) -> None:  # fmt: skip
        index = {lab: i for i, lab in enumerate(labels)}
        words = sorted({w.strip().lower() for w in vocabulary if w.strip()})
        if not words:
            raise ValueError("the vocabulary is empty: give at least one word")
        bad = sorted({c for w in words for c in w if c not in index or index[c] == blank})
        if bad:
            raise ValueError(f"the vocabulary uses characters the recognizer cannot emit: {''.join(bad)!r}")
        if space not in index:
            raise ValueError(f"the labels have no word separator {space!r}")
        self.words, self.blank, self.space, self.word_bonus = words, blank, index[space], word_bonus
        self.one_word = one_word
        # states: 0 = silence (blank before any word), 1 = space, then every word's 2L + 1 CTC states
        emit, word_of, pos_of, starts = [blank, self.space], [-1, -1], [-1, -1], []
        for k, w in enumerate(words):
            starts.append(len(emit))
            for p in range(2 * len(w) + 1):
                emit.append(blank if p % 2 == 0 else index[w[p // 2]])
                word_of.append(k)
                pos_of.append(p)
        self.emit = np.array(emit)
        self.word_of, self.pos_of = np.array(word_of), np.array(pos_of)
        self.starts = np.array(starts)
        self.lengths = np.array([2 * len(w) + 1 for w in words])
        n = len(emit)
        # within-word predecessors: s - 1 always, s - 2 for a letter unlike the one two states back
        self.prev1 = np.full(n, -1)
        self.prev2 = np.full(n, -1)
        for s in range(2, n):
            p = self.pos_of[s]
            if p >= 1:
                self.prev1[s] = s - 1
            if p >= 2 and p % 2 == 1 and self.emit[s] != self.emit[s - 2]:
                self.prev2[s] = s - 2
        self.entries = np.concatenate([self.starts, self.starts + 1])  # a word starts at its blank or letter
        self.trailing = self.starts + self.lengths - 1  # its final blank
        self.last_letter = self.trailing - 1

    def decode(self, log_probs: np.ndarray) -> list[DecodedWord]:
        """``log_probs (vocab, frames)`` (log-softmax over the vocabulary) -> the best word sequence.

        With ``one_word`` the word is the one of highest total probability over all its alignments (the CTC
        forward sum: what the network says of the word, not of its single best alignment), or nothing when
        all-blank is more probable; its frames come from its best alignment, its ``confidence`` is its share of
        the probability of all the words and of nothing."""
        lp = np.asarray(log_probs, np.float64)
        if lp.shape[1] == 0:
            return []
        if not self.one_word:
            return self._viterbi(lp)
        scores, nothing = self.word_scores(lp)
        k = int(np.argmax(scores))
        if scores[k] <= nothing:
            return []
        share = float(np.exp(scores[k] - np.logaddexp.reduce(np.append(scores, nothing))))
        return [replace(w, confidence=share) for w in self._viterbi(lp, word=k)]

    def _viterbi(self, lp: np.ndarray, word: int | None = None) -> list[DecodedWord]:
        """The best path through the word loop (``word``: through that word only, which it must contain)."""
        frames, n = lp.shape[1], len(self.emit)
        entries = self.entries if word is None else np.array([self.starts[word], self.starts[word] + 1])
        score = np.full(n, NEG)
        score[0] = lp[self.blank, 0]
        score[entries] = lp[self.emit[entries], 0] + self.word_bonus
        back = np.zeros((frames, n), np.int32)
        back[0] = np.arange(n)
        idx = np.arange(n)
        for t in range(1, frames):
            best, arg = score.copy(), idx.copy()  # stay
            for prev in (self.prev1, self.prev2):
                ok = prev >= 0
                cand = np.where(ok, score[np.maximum(prev, 0)], NEG)
                better = cand > best
                best[better], arg[better] = cand[better], prev[better]
            if not self.one_word:  # the space follows a word's last letter or final blank (or another space)
                ends = np.concatenate([self.last_letter, self.trailing])
                j = int(ends[np.argmax(score[ends])])
                if score[j] > best[1]:
                    best[1], arg[1] = score[j], j
            # a word starts after silence, a space, or another word's final blank (one word: after silence)
            gates = np.array([0]) if self.one_word else np.concatenate([[0, 1], self.trailing])
            g = int(gates[np.argmax(score[gates])])
            enter = score[g] + self.word_bonus
            better = enter > best[entries]
            best[entries[better]], arg[entries[better]] = enter, g
            score = best + lp[self.emit, t]
            back[t] = arg
        if word is None:
            finals = np.concatenate([[0, 1], self.last_letter, self.trailing])
        else:
            finals = np.array([self.last_letter[word], self.trailing[word]])
        s = int(finals[np.argmax(score[finals])])
        path = np.empty(frames, np.int64)
        for t in range(frames - 1, -1, -1):
            path[t] = s
            s = int(back[t, s])
        return self._words(path)

    def word_scores(self, log_probs: np.ndarray) -> tuple[np.ndarray, float]:
        """One word per utterance: ``(log P(word) for every word of the list, log P(all blank))`` by the CTC
        forward algorithm over ``log_probs (vocab, frames)``, silence allowed before and after the word
        (``word_bonus`` added once)."""
        lp = np.asarray(log_probs, np.float64)
        frames = lp.shape[1]
        first = self.starts + 1  # a word is entered at its first letter: silence is its leading blank (each
        alpha = np.full(len(self.emit), NEG)  # labelling of the frames is then counted once)
        alpha[0] = lp[self.blank, 0]
        alpha[first] = lp[self.emit[first], 0] + self.word_bonus
        for t in range(1, frames):
            new = alpha.copy()  # stay
            for prev in (self.prev1, self.prev2):
                ok = prev >= 0
                new[ok] = np.logaddexp(new[ok], alpha[prev[ok]])
            new[first] = np.logaddexp(new[first], alpha[0] + self.word_bonus)  # after silence
            alpha = new + lp[self.emit, t]
        return np.logaddexp(alpha[self.last_letter], alpha[self.trailing]), float(alpha[0])

    def _words(self, path: np.ndarray) -> list[DecodedWord]:
        out: list[DecodedWord] = []
        cur, start, last, prev = -1, -1, -1, -1
        for t, s in enumerate(path.tolist()):
            k = int(self.word_of[s])
            entered = k >= 0 and (prev < 0 or self.word_of[prev] != k or self.pos_of[s] < self.pos_of[prev])
            if entered:
                if cur >= 0:
                    out.append(DecodedWord(self.words[cur], start, last))
                cur, start, last = k, -1, -1
            if k >= 0 and self.pos_of[s] % 2 == 1:
                start = t if start < 0 else start
                last = t
            prev = s
        if cur >= 0:
            out.append(DecodedWord(self.words[cur], start, last))
        return [w for w in out if w.start >= 0]
