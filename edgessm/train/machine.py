"""How a run uses the machine it is on: training processes, threads per process, data-loader workers.

``train.processes``, ``train.threads`` and ``train.workers`` default to ``"auto"``, resolved here from the
device and the cores this process may run on, so the documented ``edgessm train RECIPE --out DIR`` is the
fast command on a laptop, a 2-core VM and a GPU box alike:

* **CPU**, fixed-shape examples (keyword spotting, denoising): one training process per core (up to 8),
  one thread each, and each process makes its own examples between its steps (no loader workers). The
  processes average their gradients (DDP over gloo, :mod:`.trainer`): the same updates as one process with
  the whole batch. Measured on 2 cores (`python -m edgessm.bench train`): kws_v8 146 examples/s against 114
  for one process of 2 threads with 2 loader workers (the loader takes its core time from the step's
  threads, which then wait for each other); denoise_v3_df 37 against 33.
* **CPU**, batches of varying length (recognition): one process of ``cores`` threads with 2 loader workers:
  split over processes, each step waits for the process with the longest utterances (asr_v3: 13.4
  examples/s in one process, 9.9 in two; with batches of one shape, ``data.length_buckets``, the two are
  level: asr_v5 14.2 and 14.8).
* **CUDA**: one process per GPU (start several with ``torchrun``), ``cores - 1`` loader workers per
  process (at most 14) and the threads left to the process that feeds the GPU.

An explicit number in the config (or ``--set train.processes=1``) always wins.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

AUTO = "auto"
MAX_CPU_PROCESSES = 8
MAX_WORKERS = 14


@dataclass(frozen=True)
class MachinePlan:
    """What a run uses: ``processes`` training processes of ``threads`` threads and ``workers`` loader workers."""

    processes: int
    threads: int
    workers: int
    cores: int

    def describe(self) -> str:
        procs = f"{self.processes} processes x " if self.processes > 1 else ""
        return f"{procs}{self.threads} threads, {self.workers} loader workers ({self.cores} cores)"


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity; a container's limit where it sets one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``; ``cpu`` and ``cuda`` as they are."""
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, got {device!r}")
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _count(name: str, value: int | str, low: int) -> int | None:
    """``value`` as a whole number >= ``low``, or None for ``auto``; a clear error otherwise."""
    if value == AUTO:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"train.{name} must be 'auto' or a whole number >= {low}, got {value!r}")
    return value


def machine_plan(run, device: str, cores: int | None = None, started: int | None = None,
                 even: bool = True) -> MachinePlan:  # fmt: skip
    """The processes, threads and workers of a run (``run``: a :class:`~.config.RunConfig`) on ``device``
    (``cpu`` or ``cuda``) with ``cores`` cores (default: this process's). ``started``: the processes that
    already run it (a launcher's, or 1 for a trainer made in this process), which share the cores; None:
    the run is yet to start, as ``train.processes`` says. ``even``: every share of a batch costs the same
    (fixed-shape examples); a task whose batches vary (utterances of different lengths) trains in one CPU
    process, where the processes would wait for the one with the longest share at every step."""
    cores = cores or available_cores()
    processes = _count("processes", run.processes, 1)
    threads = _count("threads", run.threads, 1)
    workers = _count("workers", run.workers, 0)
    if started is not None:
        processes = started
    if device == "cpu":
        if processes is None:
            processes = min(cores, MAX_CPU_PROCESSES) if even else 1
            while processes > 1 and run.batch_size % processes:  # each process takes an equal share
                processes -= 1
        share = max(1, cores // processes)
        if workers is None:  # one process per core makes its own examples; a single one has a loader
            workers = 0 if processes > 1 or share == 1 else max(2, share // 4)
        if threads is None and processes == 1 and workers:
            threads = share  # measured: the step's threads beside the loader beat fewer threads
    else:
        processes = processes or 1
        share = max(1, cores // processes)
        workers = max(1, min(MAX_WORKERS, share - 1)) if workers is None else workers
    threads = threads or max(1, share - workers)
    return MachinePlan(processes=processes, threads=threads, workers=workers, cores=cores)
