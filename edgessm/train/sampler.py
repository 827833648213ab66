"""Deterministic, step-indexed sampling: the batch of global step ``s`` is a pure function of
``(seed, s)``. Every item carries its own augmentation seed, so workers, restarts and the number
of distributed processes do not change what the model sees (exact resume; DDP with k processes
sees the same global batches as one process). A grouped sampler also gives every item the seed of its step
(the same for the whole global batch), for tasks that draw one shape per batch (a recognizer's batches of
utterances of similar length).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch


class StepSampler(torch.utils.data.Sampler[list[tuple[int, int]]]):
    """Yields per-process batches of ``(item index, item seed)`` from ``start_step`` to ``steps``.

    The global batch of a step is ``global_batch`` consecutive positions of an epoch-wise random
    permutation of the items; process ``rank`` of ``world`` takes its contiguous share.

    Args:
        n_items: dataset size.
        global_batch: items per optimiser step over all processes (a multiple of ``world``).
        steps: total steps; ``start_step``: first step to produce (resume).
        seed: run seed.
        rank, world: this process and the number of processes.
        grouped: yield ``(index, seed, step seed)`` triples instead (see :func:`group_rng`).
    """

    def __init__(self, n_items: int, global_batch: int, steps: int, seed: int, start_step: int = 0,
                 rank: int = 0, world: int = 1, grouped: bool = False) -> None:  # fmt: skip
        if n_items <= 0:
            raise ValueError("the training set is empty")
        if global_batch % world:
            raise ValueError(f"batch size {global_batch} is not divisible by the {world} processes")
        self.n, self.g, self.steps, self.seed = n_items, global_batch, steps, seed
        self.start, self.rank, self.world, self.grouped = start_step, rank, world, grouped

    def __len__(self) -> int:
        return max(0, self.steps - self.start)

    def _perm(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(self.n)

    def global_batch(self, step: int) -> list[tuple[int, ...]]:
        """All ``(index, seed)`` pairs (grouped: ``(index, seed, step seed)``) of global step ``step``."""
        out: list[tuple[int, ...]] = []
        group = (self.seed * 1_000_003 + step) % (2**63)
        for pos in range(step * self.g, (step + 1) * self.g):
            epoch, offset = divmod(pos, self.n)
            item = (int(self._cached(epoch)[offset]), (self.seed * 1_000_003 + pos) % (2**63))
            out.append((*item, group) if self.grouped else item)
        return out

    def _cached(self, epoch: int) -> np.ndarray:
        if getattr(self, "_cache_epoch", None) != epoch:
            self._cache_epoch, self._cache_perm = epoch, self._perm(epoch)
        return self._cache_perm

    def __iter__(self) -> Iterator[list[tuple[int, ...]]]:
        share = self.g // self.world
        for step in range(self.start, self.steps):
            batch = self.global_batch(step)
            yield batch[self.rank * share : (self.rank + 1) * share]


def item_rng(seed: int) -> np.random.Generator:
    """The random generator of one item draw (augmentation, crops)."""
    return np.random.default_rng(seed)


def group_rng(seed: int) -> np.random.Generator:
    """The random generator of a step's shared draws (a grouped sampler's step seed); a stream apart from
    :func:`item_rng`'s."""
    return np.random.default_rng([0x5EED, seed])
