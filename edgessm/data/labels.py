"""Label sets of the Speech Commands tasks.

SC35 is the 35-word v0.02 vocabulary; SC12 is the standard 12-class protocol (10 commands plus
``_unknown_`` and ``_silence_``); SC10 is the 10 commands alone.
"""

from __future__ import annotations

SC35_WORDS: tuple[str, ...] = (
    "backward", "bed", "bird", "cat", "dog", "down", "eight", "five", "follow", "forward",
    "four", "go", "happy", "house", "learn", "left", "marvin", "nine", "no", "off",
    "on", "one", "right", "seven", "sheila", "six", "stop", "three", "tree", "two",
    "up", "visual", "wow", "yes", "zero",
)  # fmt: skip
SC10_WORDS: tuple[str, ...] = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
DIGITS: tuple[str, ...] = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
UNKNOWN = "_unknown_"
SILENCE = "_silence_"
SC12_LABELS: tuple[str, ...] = (*SC10_WORDS, UNKNOWN, SILENCE)

TASKS: dict[str, tuple[str, ...]] = {
    "sc35": SC35_WORDS,
    "sc12": SC12_LABELS,
    "sc10": SC10_WORDS,
}


def task_labels(task: str) -> tuple[str, ...]:
    """Class labels of ``task`` (``sc35``, ``sc12`` or ``sc10``) in their fixed order."""
    try:
        return TASKS[task]
    except KeyError:
        raise ValueError(f"unknown keyword task {task!r}; choose one of {sorted(TASKS)}") from None


def map_word(word: str, task: str) -> str | None:
    """The class a spoken word belongs to in ``task`` (``None``: not part of the task)."""
    labels = task_labels(task)
    if word in labels:
        return word
    if task == "sc12" and word in SC35_WORDS:
        return UNKNOWN
    return None
