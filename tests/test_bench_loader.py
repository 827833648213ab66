"""``python -m edgessm.bench loader``: does the data keep up with the step?"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from fixtures import speech_commands_folder

from edgessm.bench import run
from edgessm.train.sampler import StepSampler
from edgessm.train.trainer import loader_for

KWS = """task = "kws"
[model]
channels = [4, 8]
states = [4, 8]
kinds = ["full", "pointwise"]
pools = [4, 4]
[data]
words = "sc10"
sources = ["speech_commands:{folder}"]
clip_samples = 8192
[train]
batch_size = 4
"""


def test_one_core_rate_and_a_row_per_worker_count(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "kws.toml"
    cfg.write_text(KWS.format(folder=speech_commands_folder(tmp_path / "sc", speakers=4)))
    assert run("loader", [str(cfg), "--workers", "0,2", "--batches", "3", "--items", "8"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"training examples, built in [\d.]+ s; batch 4;", text)
    assert re.search(r"one core, in this process: [\d,]+ examples/s", text)
    rows = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+([\d,]+)\s+([\d.]+)$", text, re.M)
    assert [int(r[0]) for r in rows] == [0, 2] and all(float(r[2].replace(",", "")) > 0 for r in rows)


def test_worker_counts_must_be_numbers(tmp_path: Path) -> None:
    cfg = tmp_path / "kws.toml"
    cfg.write_text(KWS.format(folder=tmp_path))
    with pytest.raises(SystemExit, match="--workers takes comma-separated counts, not 'two'"):
        run("loader", [str(cfg), "--workers", "two"])


class _BlasThreads(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, key) -> dict:
        from threadpoolctl import threadpool_info

        return {"threads": torch.tensor([max((p["num_threads"] for p in threadpool_info()), default=1)])}


class _Task:
    @staticmethod
    def collate(items: list[dict]) -> dict:
        return {"threads": torch.cat([it["threads"] for it in items])}


def test_loader_workers_run_numpy_on_one_thread() -> None:
    """Each worker's BLAS runs on one thread (without the limit: a thread per core in every worker)."""
    pytest.importorskip("threadpoolctl")
    loader = loader_for(_Task(), _BlasThreads(), StepSampler(4, 2, 2, seed=0), workers=2)
    assert [b["threads"].tolist() for b in loader] == [[1, 1], [1, 1]]


def test_device_augmentation_rows(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "kws.toml"
    folder = speech_commands_folder(tmp_path / "sc", speakers=4)
    cfg.write_text(KWS.format(folder=folder) + "[augment]\nmic_prob = 0.5\nnoise_prob = 0.0\n")
    args = [str(cfg), "--workers", "0", "--batches", "2", "--items", "8", "--device-augment", "--device", "cpu"]
    assert run("loader", args) == 0
    text = capsys.readouterr().out
    assert re.search(r"one core, planned examples \(train.device_augment\): [\d,]+ examples/s", text)
    assert re.search(r"device tail on cpu, batch 4: [\d.]+ ms \([\d,]+ examples/s\), echo [\d.]+ ms", text)
    cfg.write_text(KWS.format(folder=folder))  # no [augment]: nothing to move
    with pytest.raises(SystemExit, match="no augmentation to run on the device"):
        run("loader", [str(cfg), "--workers", "0", "--items", "4", "--device-augment", "--device", "cpu"])
