"""Speaker-disjoint splits: every voice goes wholly into train, validation or test."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .engines import Voice
from .texts import stable_unit

SPLITS: tuple[str, ...] = ("train", "validation", "test")


def assign_splits(voices: Sequence[Voice], seed: int, held_out: tuple[float, float] = (0.1, 0.1)) -> dict[str, str]:
    """Voice id -> split, decided per engine family from ``seed``.

    Within each engine, ``round(n * (validation + test))`` voices are held out (at least one when the
    engine has two or more voices, and never all of them), shared between validation and test in
    proportion. An engine with a single held-out voice gives it to validation or test, alternating over
    such engines from a seeded start, so both splits get voices of several families. A single-voice
    engine stays in train. Which voices are held out is a seeded shuffle of the engine's sorted voices.
    """
    f_val, f_test = held_out
    if min(f_val, f_test) < 0 or f_val + f_test >= 1:
        raise ValueError(f"held-out fractions {held_out} must be >= 0 and sum to less than 1")
    by_engine: dict[str, list[Voice]] = {}
    for v in voices:
        by_engine.setdefault(v.engine, []).append(v)
    out: dict[str, str] = {}
    single = int(stable_unit(seed, "single-held-out") < 0.5)  # which split the next lone held-out voice gets
    for engine in sorted(by_engine):
        members = sorted(set(by_engine[engine]))
        n = len(members)
        n_held = min(n - 1, max(1 if n >= 2 else 0, round(n * (f_val + f_test))))
        if n_held == 1:
            n_val, single = (1, 0) if single else (0, 1)
        else:
            n_val = round(n_held * f_val / (f_val + f_test)) if f_val + f_test > 0 else 0
        n_test = n_held - n_val
        rng = np.random.default_rng([seed, int(stable_unit(engine) * 2**32)])
        for rank, i in enumerate(rng.permutation(n)):
            split = "validation" if rank < n_val else "test" if rank < n_val + n_test else "train"
            out[members[int(i)].id] = split
    return out
