"""CTC prefix beam search with a word n-gram language model (torch-free).

The search of Hannun et al. (2014, "First-pass large vocabulary continuous speech recognition using
bi-directional recurrent DNNs", Algorithm 1): every hypothesis is a character prefix with two
probabilities, ending in blank (``pb``) or in its last character (``pnb``); a repeated character
needs a blank between. Each completed word adds ``alpha * log p_LM(word | previous words) + beta``
(shallow fusion with a word insertion bonus); the end of the utterance adds the last word and
``</s>``. Only characters within ``prune`` nats of a frame's best are expanded.

With a word model the search is *lexicon-constrained* by default (``closed=True``, the first pass of
Hannun et al. with a dictionary, as flashlight's lexicon decoder): a character extends a prefix only if
the word being spelled stays a prefix of some word of the model's vocabulary, and a space only ends a
word of it; a weak acoustic model then writes real words instead of letter strings that the model can
only score as ``<unk>``. ``closed=False``: any spelling, out-of-vocabulary words scored as ``<unk>``.

    dec = BeamDecoder(labels, WordLM.load("lm.npz"), beam=16, alpha=0.6, beta=1.5)
    words = dec.decode(log_probs)          # (vocab, frames) log-softmax of the recognizer's logits
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .lexicon import DecodedWord
from .ngram import BOS, EOS, WordLM

NEG = -math.inf


def _lse(a: float, b: float) -> float:
    if a == NEG:
        return b
    if b == NEG:
        return a
    m = max(a, b)
    return m + math.log1p(math.exp(-abs(a - b)))


@dataclass
class _Hyp:
    pb: float = NEG  # log P(prefix, the last frame a blank)
    pnb: float = NEG  # log P(prefix, the last frame its last character)
    lm: float = 0.0  # alpha * log p_LM of its completed words + beta per word
    history: tuple[int, ...] = ()  # LM ids of the completed words (<s> first)
    frames: tuple[int, ...] = ()  # the frame each character of the prefix was first emitted
    words: tuple[DecodedWord, ...] = field(default_factory=tuple)
    partial: str = ""  # the word being spelled (since the last space)

    def total(self) -> float:
        return _lse(self.pb, self.pnb) + self.lm


class BeamDecoder:
    """Prefix beam search over CTC log-probabilities, with an optional word LM.

    Args:
        labels: the CTC labels in logit order (``labels[blank]`` the blank, ``space`` between words).
        lm: the word model (``None``: beam search on the acoustics alone, ``beta`` still per word).
        beam: hypotheses kept per frame.
        alpha: language-model weight; ``beta``: bonus per word (> 0 favours more words).
        prune: characters more than this many nats below a frame's best are not expanded.
        closed: with ``lm``, spell only words of its vocabulary (see the module docstring).
    """

    def __init__(self, labels: Sequence[str], lm: WordLM | None = None, beam: int = 16, alpha: float = 0.5,
                 beta: float = 1.0, blank: int = 0, space: str = " ", prune: float = 10.0,
                 closed: bool = True) -> None:  # fmt: skip
        if beam < 1:
            raise ValueError(f"beam must be at least 1, got {beam}")
        if space not in labels:
            raise ValueError(f"the labels have no word separator {space!r}")
        self.labels, self.lm, self.beam, self.alpha, self.beta = list(labels), lm, beam, alpha, beta
        self.blank, self.space, self.prune = blank, self.labels.index(space), prune
        self.words: frozenset[str] | None = None  # closed vocabulary: its words and every prefix of them
        self.prefixes: frozenset[str] = frozenset()
        if closed and lm is not None:
            spellable = set(self.labels) - {self.labels[blank], space}
            self.words = frozenset(w for w in lm.vocab if w and set(w) <= spellable)
            self.prefixes = frozenset(w[:i] for w in self.words for i in range(1, len(w) + 1))
            if not self.words:
                raise ValueError("the word model has no word these labels can spell")

    def _word_score(self, history: tuple[int, ...], word: str) -> tuple[float, tuple[int, ...]]:
        if self.lm is None:
            return self.beta, history
        wid = self.lm.index.get(word, self.lm.unk)
        return self.alpha * self.lm.score_ids(history, wid) + self.beta, (*history, wid)

    def _close_word(self, prefix: tuple[int, ...], hyp: _Hyp, end: int) -> tuple[float, tuple[int, ...], DecodedWord]:
        """The LM score and history after the word that ends ``prefix``, and that word."""
        start = len(prefix)
        while start > 0 and prefix[start - 1] != self.space:
            start -= 1
        text = "".join(self.labels[c] for c in prefix[start:])
        score, history = self._word_score(hyp.history, text)
        return score, history, DecodedWord(text, hyp.frames[start], end)

    def _slot(self, nxt: dict[tuple[int, ...], _Hyp], t: int, prefix: tuple[int, ...], parent_key: tuple[int, ...],
              parent: _Hyp, c: int) -> _Hyp:  # fmt: skip
        """The hypothesis of ``prefix`` at frame ``t`` in ``nxt``, made from ``parent`` the first time."""
        h = nxt.get(prefix)
        if h is not None:  # its words and LM state are a function of the prefix: already set
            return h
        if prefix == parent_key:
            h = _Hyp(lm=parent.lm, history=parent.history, frames=parent.frames, words=parent.words,
                     partial=parent.partial)  # fmt: skip
        elif c == self.space:  # a word ends: score it
            score, history, word = self._close_word(parent_key, parent, t - 1)
            h = _Hyp(lm=parent.lm + score, history=history, frames=(*parent.frames, t), words=(*parent.words, word))
        else:
            h = _Hyp(lm=parent.lm, history=parent.history, frames=(*parent.frames, t), words=parent.words,
                     partial=parent.partial + self.labels[c])  # fmt: skip
        nxt[prefix] = h
        return h

    def decode(self, log_probs: np.ndarray) -> list[DecodedWord]:
        """The best word sequence of ``log_probs`` ``(vocab, frames)`` (log-softmax over the vocabulary)."""
        lp = np.asarray(log_probs, np.float64)
        start_history = (self.lm.index[BOS],) if self.lm is not None else ()
        beams: dict[tuple[int, ...], _Hyp] = {(): _Hyp(pb=0.0, history=start_history)}
        for t in range(lp.shape[1]):
            col = lp[:, t]
            chars = np.flatnonzero(col >= col.max() - self.prune)
            if self.words is not None and self.blank not in chars:  # a closed vocabulary may spell none of
                chars = np.append(chars, self.blank)  # these: the blank keeps its hypotheses alive
            nxt: dict[tuple[int, ...], _Hyp] = {}

            for parent_key, hyp in beams.items():
                last = parent_key[-1] if parent_key else None
                for c in chars.tolist():
                    p = float(col[c])
                    if c == self.blank:
                        h = self._slot(nxt, t, parent_key, parent_key, hyp, c)
                        h.pb = _lse(h.pb, _lse(hyp.pb, hyp.pnb) + p)
                        continue
                    spellable = self._spellable(hyp.partial, c)
                    if c == last:
                        same = self._slot(nxt, t, parent_key, parent_key, hyp, c)  # the character continued
                        same.pnb = _lse(same.pnb, hyp.pnb + p)
                        if c != self.space and spellable:  # the character again, after a blank (never a second space)
                            h = self._slot(nxt, t, (*parent_key, c), parent_key, hyp, c)
                            h.pnb = _lse(h.pnb, hyp.pb + p)
                    elif (c != self.space or last is not None) and spellable:  # no leading space
                        h = self._slot(nxt, t, (*parent_key, c), parent_key, hyp, c)
                        h.pnb = _lse(h.pnb, _lse(hyp.pb, hyp.pnb) + p)
            beams = dict(sorted(nxt.items(), key=lambda kv: kv[1].total(), reverse=True)[: self.beam])
        return self._finish(beams, lp.shape[1])

    def _spellable(self, partial: str, c: int) -> bool:
        """Whether character ``c`` may follow the word being spelled (always, unless the vocabulary is closed)."""
        if self.words is None:
            return True
        if c == self.space:
            return partial in self.words
        return partial + self.labels[c] in self.prefixes

    def _finish(self, beams: dict[tuple[int, ...], _Hyp], frames: int) -> list[DecodedWord]:
        if self.words is not None:  # a closed vocabulary: the last word must be whole, if any hypothesis has one
            whole = {k: h for k, h in beams.items() if not h.partial or h.partial in self.words}
            beams = whole or beams
        best, best_words = NEG, []
        for prefix, hyp in beams.items():
            score, words, history = hyp.total(), list(hyp.words), hyp.history
            if prefix and prefix[-1] != self.space:  # the last word, unfinished
                s, history, word = self._close_word(prefix, hyp, frames - 1)
                score, words = score + s, [*words, word]
            if self.lm is not None:
                score += self.alpha * self.lm.score_ids(history, self.lm.index[EOS])
            if score > best:
                best, best_words = score, words
        return best_words
