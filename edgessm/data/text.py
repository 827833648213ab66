"""Character vocabulary for CTC: blank, space, apostrophe and the 26 letters (no torch)."""

from __future__ import annotations

BLANK = "<blank>"
CHARS: tuple[str, ...] = (BLANK, " ", "'", *"abcdefghijklmnopqrstuvwxyz")


class CharTokenizer:
    """Maps normalised text (see :func:`edgessm.data.corpora.normalize_text`) to CTC label ids; blank is 0."""

    def __init__(self, chars: tuple[str, ...] = CHARS) -> None:
        self.chars = chars
        self.index = {c: i for i, c in enumerate(chars)}

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        try:
            return [self.index[c] for c in text]
        except KeyError as e:
            raise ValueError(
                f"character {e.args[0]!r} is not in the CTC vocabulary; normalise the text first"
            ) from None

    def decode(self, ids: list[int]) -> str:
        return "".join(self.chars[i] for i in ids if i != 0)

    def greedy(self, frame_ids: list[int]) -> str:
        """Collapse repeats, drop blanks: the best-path CTC transcript of per-frame argmax ids."""
        out, prev = [], -1
        for i in frame_ids:
            if i != prev and i != 0:
                out.append(i)
            prev = i
        return self.decode(out).strip()


def edit_distance(a: list[str] | str, b: list[str] | str) -> int:
    """Levenshtein distance between two sequences."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]
