"""A word n-gram language model for CTC beam search (torch-free, numpy only).

Interpolated Kneser-Ney (Chen & Goodman 1998, one discount per order, ``D = n1 / (n1 + 2 n2)``),
stored as back-off tables like an ARPA file: for a seen n-gram its interpolated log-probability,
for a seen context its back-off weight ``log γ(context)``, so that

    log p(w | u v) = L3[u v w]                     if u v w was seen
                   = B2[u v] + log p(w | v)        otherwise (B2 = 0 for an unseen context)

and likewise down to the unigrams, which are continuation probabilities interpolated with a uniform
distribution over the vocabulary plus ``<unk>``. Sentences are wrapped in ``<s> ... </s>``. Words are
ids into :attr:`WordLM.vocab`; words outside it score as ``<unk>``.

    lm = WordLM.build(sentences, order=3, vocab_size=20000)
    lm.save("lm.npz"); lm = WordLM.load("lm.npz")
    lm.logp(("the", "cat"), "sat")         # natural log
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

BOS, EOS, UNK = "<s>", "</s>", "<unk>"


class WordLM:
    """Back-off tables of an interpolated Kneser-Ney model (see the module docstring)."""

    def __init__(self, vocab: Sequence[str], logp: dict[tuple[int, ...], float],
                 backoff: dict[tuple[int, ...], float], order: int) -> None:  # fmt: skip
        self.vocab = list(vocab)
        self.index = {w: i for i, w in enumerate(self.vocab)}
        self.logp_table, self.backoff_table, self.order = logp, backoff, order
        self.unk = self.index[UNK]

    # -- scoring ---------------------------------------------------------------------------------

    def ids(self, words: Iterable[str]) -> tuple[int, ...]:
        return tuple(self.index.get(w, self.unk) for w in words)

    def score_ids(self, history: tuple[int, ...], word: int) -> float:
        """Natural-log ``p(word | history)`` with the last ``order - 1`` ids of ``history``."""
        history = history[len(history) - self.order + 1 :] if self.order > 1 else ()
        total = 0.0
        while True:
            p = self.logp_table.get((*history, word))
            if p is not None:
                return total + p
            if not history:  # cannot happen for a word of the vocabulary (every unigram is stored)
                return total + self.logp_table[(self.unk,)]
            total += self.backoff_table.get(history, 0.0)
            history = history[1:]

    def logp(self, history: Sequence[str], word: str) -> float:
        return self.score_ids(self.ids(history), self.index.get(word, self.unk))

    def sentence_logp(self, words: Sequence[str]) -> float:
        """``log p(<s> words </s>)``."""
        ids = (self.index[BOS], *self.ids(words), self.index[EOS])
        return sum(self.score_ids(ids[:i], ids[i]) for i in range(1, len(ids)))

    def perplexity(self, sentences: Iterable[str]) -> float:
        total, n = 0.0, 0
        for s in sentences:
            words = s.split()
            total += self.sentence_logp(words)
            n += len(words) + 1
        return float(np.exp(-total / max(1, n)))

    # -- estimation -----------------------------------------------------------------------------

    @classmethod
    def build(cls, sentences: Iterable[str], order: int = 3, vocab_size: int = 20000, min_count: int = 2) -> WordLM:
        """Estimate from normalised sentences (words separated by spaces).

        Args:
            order: 1 to 3.
            vocab_size: the most frequent words kept (the rest map to ``<unk>``).
            min_count: n-grams of order >= 2 seen fewer times are not stored (pruned after estimation,
                their mass going to the back-off: the tables stay normalised).
        """
        if not 1 <= order <= 3:
            raise ValueError(f"order must be 1, 2 or 3, got {order}")
        sents = [s.split() for s in sentences if s.split()]
        if not sents:
            raise ValueError("no sentences to build a language model from")
        freq = Counter(w for s in sents for w in s)
        vocab = [BOS, EOS, UNK] + [w for w, _ in freq.most_common(vocab_size) if w not in (BOS, EOS, UNK)]
        index = {w: i for i, w in enumerate(vocab)}
        bos, unk = index[BOS], index[UNK]
        raw: list[Counter] = [Counter() for _ in range(order + 1)]  # raw[n][n-gram]: times seen
        for s in sents:
            ids = [bos, *(index.get(w, unk) for w in s), index[EOS]]
            for n in range(1, order + 1):
                for i in range(max(1, n - 1), len(ids)):
                    raw[n][tuple(ids[i - n + 1 : i + 1])] += 1
        # Kneser-Ney counts: below the top order, the number of distinct words seen before an n-gram
        # (n-grams that start a sentence have none: they keep their own count)
        kn: list[Counter] = [Counter() for _ in range(order + 1)]
        kn[order] = raw[order]
        for n in range(order - 1, 0, -1):
            kn[n] = Counter(g[1:] for g in raw[n + 1])
            for g, c in raw[n].items():
                if g[0] == bos or g not in kn[n]:
                    kn[n][g] = max(kn[n][g], c if g[0] == bos else 1)
        logp: dict[tuple[int, ...], float] = {}
        backoff: dict[tuple[int, ...], float] = {}
        # unigrams: continuation probabilities, discounted, interpolated with a uniform distribution
        d = _discount(kn[1])
        total = sum(kn[1].values())
        p_uni = np.full(len(vocab), d * len(kn[1]) / total / (len(vocab) - 1))
        for (w,), c in kn[1].items():
            p_uni[w] += max(c - d, 0.0) / total
        p_uni[bos] = 0.0
        p_uni /= p_uni.sum()
        logp.update({(w,): float(np.log(p_uni[w])) for w in range(len(vocab)) if w != bos})
        model = cls(vocab, logp, backoff, 1)
        for n in range(2, order + 1):
            d = _discount(kn[n])
            by_context: dict[tuple[int, ...], list[tuple[int, int]]] = defaultdict(list)
            for g, c in kn[n].items():
                by_context[g[:-1]].append((g[-1], c))
            for ctx, items in by_context.items():
                denom = sum(c for _, c in items)
                gamma = d * len(items) / denom
                kept, lower_kept = 0.0, 0.0
                for w, c in items:
                    if raw[n][(*ctx, w)] < min_count and ctx[0] != bos:
                        continue
                    lower = float(np.exp(model.score_ids(ctx[1:], w)))
                    p = max(c - d, 0.0) / denom + gamma * lower
                    logp[(*ctx, w)] = float(np.log(p))
                    kept, lower_kept = kept + p, lower_kept + lower
                # the back-off weight that keeps p(. | ctx) normalised over the stored words
                backoff[ctx] = float(np.log(max(1e-12, 1.0 - kept) / max(1e-12, 1.0 - lower_kept)))
            model.order = n
        return model

    # -- files ----------------------------------------------------------------------------------

    def save(self, path: str | os.PathLike) -> None:
        """Write the tables to ``path`` (``.npz``), atomically."""
        from edgessm.atomic import atomic_path

        arrays: dict[str, np.ndarray] = {"vocab": np.array(json.dumps(self.vocab)), "order": np.array(self.order)}
        for name, table in (("logp", self.logp_table), ("backoff", self.backoff_table)):
            for n in range(1, self.order + 1):
                keys = [k for k in table if len(k) == n]
                arrays[f"{name}{n}_ids"] = np.array(keys, np.int32).reshape(-1, n)
                arrays[f"{name}{n}_val"] = np.array([table[k] for k in keys], np.float32)
        with atomic_path(Path(path)) as tmp, open(tmp, "wb") as f:
            np.savez_compressed(f, **arrays)

    @classmethod
    def load(cls, path: str | os.PathLike) -> WordLM:
        with np.load(path, allow_pickle=False) as z:
            vocab, order = json.loads(str(z["vocab"])), int(z["order"])
            tables: list[dict[tuple[int, ...], float]] = [{}, {}]
            for t, name in enumerate(("logp", "backoff")):
                for n in range(1, order + 1):
                    ids, vals = z[f"{name}{n}_ids"], z[f"{name}{n}_val"]
                    tables[t].update(zip(map(tuple, ids.tolist()), vals.tolist(), strict=True))
        return cls(vocab, tables[0], tables[1], order)


def _discount(counts: Counter) -> float:
    """Kneser-Ney's ``D = n1 / (n1 + 2 n2)`` from the counts of counts (0.5 when undefined), kept within
    [0.1, 0.9]: a tiny text with no singletons would give ``D = 0``, no mass for unseen words, ``log 0``."""
    n1 = sum(1 for c in counts.values() if c == 1)
    n2 = sum(1 for c in counts.values() if c == 2)
    return min(max(n1 / (n1 + 2 * n2), 0.1), 0.9) if n1 + n2 else 0.5
