"""The training loop: one loop for every task, from this CPU to several GPUs.

AdamW (the SSM dynamics A and Δ in their own group: lower learning rate, no weight decay),
cosine schedule with linear warmup, gradient clipping, automatic mixed precision on CUDA (FFT
convolutions stay float32 inside the SSM layers), budget dropout for ES-SSM networks (one training
budget per update for the whole network, a pure function of ``(seed, step)``), optional ``torch.compile``, DDP through
``torchrun`` (NCCL on GPUs, gloo on CPUs), checkpoints every N steps written atomically, exact
resume, CSV + TensorBoard logs and a progress bar. Ctrl-C or SIGTERM saves a checkpoint first.

Run directory::

    out/config.json         the resolved config
    out/log.csv             step, loss, lr, throughput and validation metrics
    out/tb/                 TensorBoard events (when tensorboard is installed)
    out/checkpoints/last.pt latest checkpoint (resume from here); best.pt: best validation score
    out/model.safetensors   final weights, out/model.json: network kind and config
    out/snapshots/step_N/   with ``train.snapshot_every``: the weights every N steps as model folders
                            (average the schedule's tail with ``edgessm soup``)
"""

from __future__ import annotations

import contextlib
import csv
import datetime
import json
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor, nn

from edgessm.ssm.blocks import set_ssm_plan
from edgessm.ssm.essm import essm_layers, sample_train_budget
from edgessm.ssm.filterbank import set_front_plan
from edgessm.ssm.hades import auxiliary_loss

from .allocator import keep_freed_memory
from .config import TrainConfig, compile_mode
from .device_mix import DeviceMixer
from .graphed import StepGraph
from .machine import machine_plan, resolve_device
from .sampler import StepSampler
from .status import RunStatus
from .tasks import Task, build_task


class RunExistsError(RuntimeError):
    pass


def load_model_weights(path: str | os.PathLike, device: torch.device | str = "cpu") -> dict[str, Tensor]:
    """Model weights from a checkpoint (``.pt``), a ``.safetensors`` file or a run folder (safe loaders only)."""
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "model.safetensors" if (p / "model.safetensors").exists() else p / "checkpoints" / "last.pt"
    if not p.is_file():
        raise FileNotFoundError(f"no weights at {p}")
    if p.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(p), device=str(device))
    return torch.load(p, map_location=device, weights_only=True)["model"]


@contextlib.contextmanager
def _quiet_stdout():
    """Send what C++ code writes to this process's stdout (file descriptor 1) to /dev/null for a while;
    errors still raise, and stderr is untouched."""
    sys.stdout.flush()
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _dist_env() -> tuple[int, int, int]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return int(os.environ.get("RANK", "0")), world, int(os.environ.get("LOCAL_RANK", "0"))


def param_groups(model: nn.Module, cfg) -> list[dict[str, Any]]:
    """SSM dynamics (parameters tagged ``_optim``), no-decay (vectors: biases, norms) and decay groups."""
    ssm, no_decay, decay = [], [], []
    for p in model.parameters():
        if not p.requires_grad:
            continue
        if hasattr(p, "_optim"):
            ssm.append(p)
        elif p.ndim <= 1:
            no_decay.append(p)
        else:
            decay.append(p)
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay, "lr": cfg.lr},
        {"params": no_decay, "weight_decay": 0.0, "lr": cfg.lr},
        {"params": ssm, "weight_decay": 0.0, "lr": cfg.ssm_lr},
    ]
    return [g for g in groups if g["params"]]


def freeze(model: nn.Module, names: list[str]) -> int:
    """Stop training the modules ``names`` (module paths such as ``"backbone.layers.0"``; ``"front"``: every
    filterbank front): their parameters no longer require gradients, so the optimizer leaves them out and
    autograd builds no graph through a frozen first layer. Returns the number of parameters frozen."""
    from edgessm.ssm.filterbank import FilterbankFront

    modules = dict(model.named_modules())
    frozen = 0
    for name in names:
        if name == "front":
            found = [m for m in modules.values() if isinstance(m, FilterbankFront)]
            if not found:
                raise ValueError("train.freeze: 'front' names a filterbank front, and this network has none")
        elif name in modules and name:
            found = [modules[name]]
        else:
            top = ", ".join(n for n in modules if n and n.count(".") <= 2)
            raise ValueError(f"train.freeze: no module {name!r} in this network; its modules: front, {top}")
        for m in found:
            for p in m.parameters():
                frozen += p.numel() if p.requires_grad else 0
                p.requires_grad_(False)
    return frozen


class _TimeLimit:
    """``train.time_limit_min``: after a few steps (data-loader start-up excluded), the number of steps
    that fit in the time left at the measured rate, with 5% kept for validation and the final save;
    measured again every ``refit`` steps over the steps since the last fit, so a machine that slows
    down (or speeds up) mid-run still ends on time with its schedule complete. Step-based, so every
    process of a distributed run refits at the same steps."""

    def __init__(self, minutes: float, start_step: int, skip: int = 10, probe: int = 30, refit: int = 100) -> None:
        self.seconds, self.start = minutes * 60.0, time.perf_counter()
        self.first, self.last, self.refit = start_step + skip, start_step + skip + probe, refit
        self.mark_step, self.mark_time = self.first, 0.0
        self.rate = 0.0

    def fit(self, step: int) -> int | None:
        """Call after every step: the last step that fits at the end of the probe and at every ``refit``
        steps after it, else ``None``."""
        if self.seconds <= 0 or step < self.first:
            return None
        now = time.perf_counter()
        if step == self.first:
            self.mark_time = now
            return None
        if step < self.last or (step - self.last) % self.refit:
            return None
        self.rate = (step - self.mark_step) / max(1e-9, now - self.mark_time)
        self.mark_step, self.mark_time = step, now
        left = 0.95 * self.seconds - (now - self.start)
        return step + max(0, int(self.rate * left))


def cosine_with_warmup(step: int, total: int, warmup: float, min_ratio: float) -> float:
    """Learning-rate multiplier: linear warmup over ``warmup * total`` steps, then cosine decay."""
    w = max(1, round(warmup * total))
    if step < w:
        return (step + 1) / w
    progress = min(1.0, (step - w) / max(1, total - w))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def budget_generator(seed: int, step: int) -> torch.Generator:
    """The random generator of update ``step``'s ES-SSM training budget: a pure function of ``(seed, step)``."""
    hi, lo = np.random.SeedSequence([int(seed) % (1 << 64), int(step), 0x455353]).generate_state(2, np.uint32)
    return torch.Generator().manual_seed((int(hi) << 32) | int(lo))


def step_budget(model: nn.Module, seed: int, step: int, full_steps: int = 0) -> int | None:
    """Draw update ``step``'s training budget and set it on every ES-SSM layer of ``model`` (Alg. 2).

    ``K̄`` for the first ``full_steps`` updates (the LR warmup, as the official recipe), then one budget
    from the layers' budget-dropout sampler (:class:`~edgessm.ssm.BudgetDropout`) drawn with
    :func:`budget_generator`: resumed and distributed runs train every update at the same budget as an
    uninterrupted single-process run. ``None`` (and nothing touched) for a network without ES-SSM layers
    or without budget dropout (those train at their ``budget``, ``K̄`` by default).
    """
    layers = essm_layers(model)
    sampler = next((layer.budget_dropout for layer in layers if layer.budget_dropout is not None), None)
    if sampler is None:
        return None
    if step < full_steps:
        sampler = _full_budget
    return sample_train_budget(model, sampler, budget_generator(seed, step))


def _full_budget(k_max: int, generator: torch.Generator | None = None) -> int:
    return k_max


def graph_refusal(cfg: TrainConfig, device: torch.device, world: int, model: nn.Module, task: Task) -> str | None:
    """Why one recorded CUDA graph cannot be this run's training step (``train.cuda_graphs``), or ``None``."""
    if device.type != "cuda":
        return f"it needs a CUDA device (this run trains on {device.type})"
    if compile_mode(cfg.train.compile):
        return "train.compile records CUDA graphs its own way (reduce-overhead): choose one of the two"
    if world > 1:
        return "it records one process's step; distributed runs (torchrun) train without it"
    if cfg.train.amp == "fp16":
        return "fp16's loss scaling reads the gradients on the host every step: use train.amp = bf16"
    if any(layer.budget_dropout is not None for layer in essm_layers(model)):
        return "an ES-SSM network trains a new budget (a different network) every step"
    if not task.static_batches:
        return f"the {cfg.task} task's batches change shape from step to step"
    return None


class Trainer:
    """Train ``cfg`` into ``out_dir``.

    Args:
        cfg: the resolved training config.
        out_dir: run directory (created; refused if it holds a run and ``resume`` is false).
        device: ``auto`` (CUDA if present), ``cpu`` or ``cuda``.
        resume: continue from ``out_dir/checkpoints/last.pt``.
        progress: show a progress bar (rank 0 only).
        init: start from these model weights (a checkpoint ``.pt`` or a run folder's ``model.safetensors``)
            with a fresh optimizer and schedule: fine-tuning, or a new schedule for a run in progress.
        recipe: the recipe's name or config path, as the run's status says it (``edgessm runs``).
        resume_hint: the command that continues this run, as a stopped run says it (default: the recipe's).
    """

    def __init__(self, cfg: TrainConfig, out_dir: str | os.PathLike, device: str = "auto", resume: bool = False,
                 progress: bool = True, task: Task | None = None,
                 init: str | os.PathLike | None = None, init_partial: bool = False,
                 recipe: str = "", resume_hint: str = "") -> None:  # fmt: skip
        self.started = time.perf_counter()  # time to the first step is measured from here
        self.cfg = cfg
        self.out = Path(out_dir)
        self.rank, self.world, local = _dist_env()
        if self.world > 1 and not dist.is_initialized():
            backend = "nccl" if torch.cuda.is_available() and device != "cpu" else "gloo"
            # generous: the other processes wait at a barrier while rank 0 decodes the corpus once
            with _quiet_stdout():  # gloo prints each rank's connection count to stdout, interleaved
                dist.init_process_group(backend, timeout=datetime.timedelta(hours=2))
        device = resolve_device(device)
        if device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("--device cuda was asked for but no CUDA device is visible; use --device cpu")
        # processes, threads and loader workers on this machine (train.processes/threads/workers, "auto")
        self.plan = machine_plan(cfg.train, device, started=self.world)
        torch.set_num_threads(self.plan.threads)
        if device == "cuda":
            self.device = torch.device("cuda", local)
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
            keep_freed_memory()  # 2.4x faster CPU steps: no page faults on every step's activations
        self.progress = progress and self.rank == 0
        ckpt = self.out / "checkpoints" / "last.pt"
        if ckpt.exists() and not resume:
            raise RunExistsError(f"{self.out} already holds a run; pass --resume to continue it or choose a new --out")
        self.resume_from = ckpt if resume and ckpt.exists() else None
        for key in ("log_every", "eval_every", "checkpoint_every"):
            n = getattr(cfg.train, key)
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise ValueError(f"train.{key} must be a whole number of steps >= 1, got {n!r} (a run logs, "
                                 "validates and checkpoints at its last step in any case: a large value means "
                                 "only there)")  # fmt: skip
        snap = cfg.train.snapshot_every
        if not isinstance(snap, int) or isinstance(snap, bool) or snap < 0:
            raise ValueError(f"train.snapshot_every must be a whole number of steps >= 0 (0: none), got {snap!r}")

        torch.manual_seed(cfg.train.seed + self.rank)
        self.task = task or build_task(cfg)
        self.model = self.task.build_model().to(self.device)
        set_front_plan(self.model, cfg.train.front_plan)
        set_ssm_plan(self.model, cfg.train.ssm_plan)
        self.frozen = freeze(self.model, list(cfg.train.freeze))
        if self.frozen and not any(p.requires_grad for p in self.model.parameters()):
            raise ValueError(f"train.freeze {list(cfg.train.freeze)} leaves nothing to train")
        if self.frozen and self.rank == 0:
            total = sum(p.numel() for p in self.model.parameters())
            names = ", ".join(cfg.train.freeze)
            print(f"train.freeze {names}: {self.frozen:,} of {total:,} parameters keep their weights")
        self.graphed = bool(cfg.train.cuda_graphs)
        if self.graphed:
            self._check_graphable()
        # capturable: the optimizer's step counts and learning rates live on the device (a recorded step reads them)
        self.capturable = self.graphed and self.device.type == "cuda"
        self.optimizer = torch.optim.AdamW(param_groups(self.model, cfg.optim), betas=cfg.optim.betas,
                                           capturable=self.capturable)  # fmt: skip
        self._device_lr()
        self.total_steps = cfg.train.steps  # fewer under train.time_limit_min, once the step rate is known
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda s: cosine_with_warmup(s, self.total_steps, cfg.optim.warmup, cfg.optim.min_lr_ratio),
        )
        self.step = 0
        self.best: float | None = None
        amp = cfg.train.amp
        self.amp_dtype = None
        if self.device.type == "cuda" and amp != "off":
            self.amp_dtype = torch.float16 if amp == "fp16" else torch.bfloat16
        elif amp in ("bf16", "fp16") and self.device.type == "cpu":
            self.amp_dtype = torch.bfloat16
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_dtype == torch.float16)
        self._finite = torch.ones((), dtype=torch.bool, device=self.device)  # all losses since the last check
        self._progress = torch.zeros((), device=self.device)  # the schedule's progress, for a recorded step
        if self.resume_from:
            self._load(self.resume_from)
        elif init is not None:
            weights = load_model_weights(init, self.device)
            adapt = getattr(self.model, "adapt_weights", None)  # e.g. a deep filter grown to more bins
            if adapt is not None:
                grown = adapt(weights)
                changed = [k for k in grown if k in weights and grown[k].shape != weights[k].shape]
                if changed and self.rank == 0:
                    print(f"--init: {len(changed)} tensors grown to this network's sizes, the function kept "
                          f"({', '.join(changed[:4])}{', ...' if len(changed) > 4 else ''})")  # fmt: skip
                weights = grown
            if init_partial:
                weights = self._matching(weights)
            missing = sorted(set(self.model.state_dict()) - set(weights))
            if missing and not init_partial and set(weights) <= set(self.model.state_dict()):
                raise RuntimeError(
                    f"{init} lacks {len(missing)} tensors of this recipe's network ({', '.join(missing[:4])}"
                    f"{', ...' if len(missing) > 4 else ''}): a shipped model has no training-only heads; add "
                    "--init-partial to start them fresh"
                )
            self.model.load_state_dict(weights, strict=not init_partial)
        self.net: nn.Module = self.model
        mode = compile_mode(cfg.train.compile)
        if mode:
            self.net = torch.compile(self.net, mode=mode)
        if self.world > 1:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.net = nn.parallel.DistributedDataParallel(self.net, device_ids=ids)
        self._stop = False  # decided once per step, the same in every process
        self._signalled = False  # a Ctrl-C / SIGTERM arrived (at any moment: read only where the stop is decided)
        self.resume_hint = resume_hint
        self.status = self._start_status(recipe)

    def _start_status(self, recipe: str) -> RunStatus:
        """This run's ``status.json`` (:mod:`.status`): a resumed run goes on counting its wall time."""
        status = RunStatus()
        if self.resume_from is not None:
            with contextlib.suppress(FileNotFoundError, ValueError, TypeError):
                status = RunStatus.load(self.out)
                status.parts += 1
        status.recipe = recipe or status.recipe
        status.task, status.state, status.message = self.cfg.task, "starting", ""
        status.step, status.total_steps = self.step, self.total_steps
        status.device, status.threads = str(self.device), torch.get_num_threads()
        status.workers, status.batch_size = self.plan.workers, self.cfg.train.batch_size
        status.processes = self.world
        status.first_step_s = status.first_step_at = None
        self._wall_before = status.wall_s
        return status

    def _save_status(self, **values: Any) -> None:
        if self.rank != 0:
            return
        st = self.status
        for k, v in values.items():
            setattr(st, k, v)
        st.step, st.total_steps = self.step, self.total_steps
        st.examples = self.step * self.cfg.train.batch_size
        st.wall_s = self._wall_before + (time.perf_counter() - self.started)
        self.out.mkdir(parents=True, exist_ok=True)
        st.save(self.out)

    def _resume_command(self) -> str:
        if self.resume_hint:
            return self.resume_hint
        return f"edgessm train {self.status.recipe or 'RECIPE'} --out {self.out} --resume (and the same --set values)"

    def _first_step(self, t_batch: float, logger: _Logger) -> None:
        """Say (and keep in the status) how long the run took to start: set-up and data, then the first step."""
        now = time.perf_counter()
        self._save_status(state="training", first_step_s=now - self.started, first_step_at=time.time())
        if self.rank == 0:
            procs = f"{self.world} processes x " if self.world > 1 else ""
            print(f"first step after {now - self.started:.1f} s (data ready after {t_batch - self.started:.1f} s; "
                  f"{procs}{torch.get_num_threads()} threads, {self.plan.workers} loader workers, batch "
                  f"{self.cfg.train.batch_size})", flush=True)  # fmt: skip

    def _check_graphable(self) -> None:
        """Refuse ``train.cuda_graphs`` where one recorded step cannot be the training step (:func:`graph_refusal`)."""
        why = graph_refusal(self.cfg, self.device, self.world, self.model, self.task)
        if why:
            raise ValueError(f"train.cuda_graphs: {why}; set train.cuda_graphs = false")

    def _device_lr(self) -> None:
        """A recorded step reads each group's learning rate from a device tensor, which the schedule fills in
        place (``train.cuda_graphs``); after a checkpoint's state is loaded too."""
        if not self.capturable:
            return
        for group in self.optimizer.param_groups:
            if not torch.is_tensor(group["lr"]):
                group["lr"] = torch.tensor(float(group["lr"]), device=self.device)

    # -- checkpoints -------------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "step": self.step,
            "total_steps": self.total_steps,
            "best": self.best,
            "rng_cpu": torch.get_rng_state(),
            "config": json.dumps(self.cfg.to_dict()),
        }
        if torch.cuda.is_available():
            state["rng_cuda"] = torch.cuda.get_rng_state_all()
        return state

    def save_checkpoint(self, name: str = "last.pt") -> Path:
        path = self.out / "checkpoints" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save(self._state(), tmp)
        os.replace(tmp, path)
        return path

    def _load(self, path: Path) -> None:
        state = torch.load(path, map_location=self.device, weights_only=True)
        saved = json.loads(state["config"])
        if saved.get("task") != self.cfg.task or saved.get("model") != self.cfg.model:
            raise RuntimeError(f"{path} was trained with a different task or model config; resume with the same config")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self._device_lr()
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        self.step = int(state["step"])
        self.total_steps = int(state.get("total_steps", self.cfg.train.steps))
        self.best = state["best"]
        # each rank continues its own dropout stream: rank 0's state is saved, others re-derive
        torch.set_rng_state(state["rng_cpu"].cpu() if self.rank == 0 else torch.get_rng_state())
        if self.rank == 0 and "rng_cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.cpu() for s in state["rng_cuda"]])

    def export_weights(self, folder: Path | None = None) -> Path:
        """Write the weights (safetensors) and the network description beside them, as a model folder:
        the run folder (final weights) unless ``folder`` says otherwise (a snapshot)."""
        from safetensors.torch import save_file

        folder = self.out if folder is None else folder
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "model.safetensors"
        tensors = {k: v.detach().cpu().contiguous() for k, v in self.model.state_dict().items()}
        tmp = path.with_suffix(".tmp")
        save_file(tensors, str(tmp))
        os.replace(tmp, path)
        (folder / "model.json").write_text(json.dumps(self.task.describe(), indent=1))
        return path

    # -- the loop ------------------------------------------------------------------------------

    def _autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        # a recorded step must not keep autocast's cached casts of the weights across replays (PyTorch's CUDA
        # graphs notes): each replay casts the updated weights again
        return torch.autocast(self.device.type, dtype=self.amp_dtype, cache_enabled=not self.graphed)

    def _to_device(self, batch: dict[str, Any]) -> dict[str, Any]:
        return {k: v.to(self.device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}

    def _loader(self, dataset, sampler) -> torch.utils.data.DataLoader:
        return loader_for(self.task, dataset, sampler, self.plan.workers, pin_memory=self.device.type == "cuda")

    def _device_mixer(self) -> DeviceMixer | None:
        """The task's batched augmentation tail when ``train.device_augment`` asks for it (``auto``: on CUDA)."""
        mode, echo = self.cfg.train.device_augment, self.cfg.train.echo
        if mode not in ("auto", "on", "off"):
            raise ValueError(f"train.device_augment must be auto, on or off, got {mode!r}")
        if not isinstance(echo, int) or echo < 1:
            raise ValueError(f"train.echo must be a whole number >= 1, got {echo!r}")
        wanted = mode == "on" or (mode == "auto" and self.device.type == "cuda")
        mixer = self.task.device_mixer(self.device) if wanted else None
        if mode == "on" and mixer is None:
            what = f"this {self.cfg.task} recipe has no augmentation to run on the device"
            raise ValueError(f"train.device_augment = 'on': {what} (kws recipes with an [augment] section do); "
                             "use 'auto' or 'off'")  # fmt: skip
        if echo > 1 and mixer is None:
            raise ValueError("train.echo > 1 re-draws each repeat's noise and room on the device: it needs "
                             "train.device_augment 'on' (or 'auto' on CUDA) and a task that has it (kws)")  # fmt: skip
        return mixer

    def _batches(self, loader, mixer: DeviceMixer | None, echo: int):
        """The loader's batches on the device, augmented there (``mixer``), each ``echo`` times."""
        generator = None
        if mixer is not None:
            generator = torch.Generator(device=self.device)
            generator.manual_seed(self.cfg.train.seed * 1_000_003 + self.step * 7 + self.rank)
        for loaded in loader:
            loaded = self._to_device(loaded)
            for repeat in range(echo):
                yield loaded if mixer is None else mixer(loaded, generator, echo=repeat > 0)

    def _train_step(self, batch: dict[str, Any]) -> dict[str, Tensor]:
        """One update on ``batch`` (forward, loss, backward, clipping, optimizer; the schedule is the caller's):
        ``{"loss", "grad_norm", **the task's parts}``, tensors on the device (read at log steps only: reading
        them every step would make the host wait for the GPU). ``batch["_progress"]``: the schedule's progress,
        a float or (recorded steps) a device tensor. Free of host syncs, so it can be one CUDA graph."""
        progress = batch.pop("_progress")
        with self._autocast():
            loss, parts = self.task.loss(self.net, batch, progress)
            aux, aux_parts = auxiliary_loss(self.model)  # e.g. the HADES blocks' balance and diversity
            if aux is not None:
                loss = loss + aux
                parts = {**parts, **aux_parts}
        self.optimizer.zero_grad(set_to_none=True)  # inside: a recorded step's gradients live in its memory pool
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.optim.clip)
        loss = loss.detach()
        torch.logical_and(self._finite, torch.isfinite(loss), out=self._finite)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return {"loss": loss, "grad_norm": grad_norm, **parts}

    def _graphed_step(self) -> StepGraph:
        """:meth:`_train_step` recorded as one CUDA graph after three eager warm-up steps (``train.cuda_graphs``)."""
        return StepGraph(self._train_step, warmup=3, capture=self.capturable)

    def evaluate(self) -> dict[str, float]:
        """Validation metrics of the current weights (rank 0's view; ``score``: higher is better)."""
        self.model.eval()
        threads = torch.get_num_threads()
        if self.device.type == "cpu" and self.world > 1:  # the other processes wait: use their cores meanwhile
            torch.set_num_threads(max(threads, self.plan.cores))
        try:
            with torch.no_grad(), self._autocast():
                metrics = self.task.evaluate(self.model, self.device, self.cfg.train.eval_batches)
        finally:
            torch.set_num_threads(threads)
        self.model.train()
        return metrics

    def _request_stop(self, signum, frame) -> None:
        self._signalled = True

    def fit(self, stop_after: int | None = None) -> dict[str, float]:
        """Train until ``train.steps`` (or stop, with a checkpoint, after step ``stop_after``, as an
        interruption would); returns the last validation metrics (rank 0)."""
        cfg = self.cfg
        if self.rank == 0:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=1))
        if self.rank != 0:  # rank 0 decodes the corpus first (and caches it); the others then map its cache
            try:
                self._barrier()
            except RuntimeError:  # it stopped instead (a data error): its message says why
                raise SystemExit(f"edgessm train: process {self.rank}: process 0 stopped while it read the data"
                                 ) from None  # fmt: skip
        mixer = self._device_mixer()
        echo = cfg.train.echo
        train_set = self.task.train_set()
        if self.rank == 0:
            self._barrier()
        sampler = StepSampler(len(train_set), cfg.train.batch_size, cfg.train.steps, cfg.train.seed,
                              start_step=self.step // echo, rank=self.rank, world=self.world,
                              grouped=getattr(train_set, "grouped", False))  # fmt: skip
        logger = _Logger(self.out, enabled=self.rank == 0, resume_step=self.step)
        old = {s: signal.signal(s, self._request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
        bar = None
        if self.progress:
            from tqdm import tqdm

            bar = tqdm(
                total=self.total_steps, initial=self.step, desc=f"train {cfg.task}", unit="step", dynamic_ncols=True
            )
        metrics: dict[str, float] = {}
        t_last, items = time.perf_counter(), 0
        waited = 0.0  # seconds the step waited for the loader since the last log row
        t_ready = time.perf_counter()  # when the last step ended (the next batch is wanted from then on)
        clock = _TimeLimit(cfg.train.time_limit_min, self.step)
        if cfg.train.stop_after_min < 0:
            raise ValueError(f"train.stop_after_min must be >= 0 (0: no stop), got {cfg.train.stop_after_min}")
        stop_at = self.started + 60 * cfg.train.stop_after_min if cfg.train.stop_after_min else None
        full_budget_steps = max(1, round(cfg.optim.warmup * cfg.train.steps))  # the LR warmup
        checked = checked_start = self.step
        self.model.train()
        step_fn = self._graphed_step() if self.graphed else self._train_step
        try:
            for batch in self._batches(self._loader(train_set, sampler), mixer, echo):
                first = self.step == checked_start
                t_batch = time.perf_counter()
                waited += t_batch - t_ready
                if first:  # the loader's start-up is its own number, not the first row's data wait
                    waited = 0.0
                budget = step_budget(self.model, cfg.train.seed, self.step, full_budget_steps)
                progress = self.step / max(1, self.total_steps)
                if self.graphed:  # per-step values enter a recorded step as device tensors
                    self._progress.fill_(progress)
                    progress = self._progress
                out = step_fn({**batch, "_progress": progress})
                if self.graphed and step_fn.calls == step_fn.warmup + 1 and self.rank == 0:
                    where = "a CUDA graph" if step_fn.capture else "its replay buffers (no CUDA: not captured)"
                    print(f"\ntrain.cuda_graphs: the step is recorded as {where} after {step_fn.warmup} warm-up "
                          "steps; every later step replays it", flush=True)  # fmt: skip
                loss, grad_norm = out.pop("loss"), out.pop("grad_norm")
                parts = out
                self.scheduler.step()
                self.step += 1
                items += cfg.train.batch_size
                if first:
                    t_last, items = time.perf_counter(), 0  # rates count from the first step's end
                    self._first_step(t_batch, logger)
                if stop_after is not None and self.step >= stop_after:
                    self._stop = True  # at the same step in every process
                # A signal or the sitting's clock (train.stop_after_min) reach the processes at different moments
                # (a signal may land between any two lines of this loop): read only here, and agreed, so every
                # process takes the same branches after the same step.
                asked = self._signalled or (stop_at is not None and time.perf_counter() >= stop_at)
                if self.world == 1:
                    self._stop = self._stop or asked
                elif self.device.type == "cpu" or self.step % cfg.train.log_every == 0:  # free on gloo; a GPU
                    self._stop = self._any(self._stop or asked)  # agrees where it syncs anyway (log steps)
                fitted = clock.fit(self.step)  # every process at the same step: all reach _min together
                if fitted is not None:
                    fitted = min(cfg.train.steps, self._min(max(self.step + 1, fitted)))
                    shrunk = self.step == clock.last and fitted < cfg.train.steps  # the first fit
                    moved = abs(fitted - self.total_steps) > 0.05 * self.total_steps
                    self.total_steps = fitted  # the cosine schedule follows (it reads total_steps)
                    if self.rank == 0 and (shrunk or moved):
                        print(f"\ntrain.time_limit_min {cfg.train.time_limit_min:g}: {clock.rate:.2f} steps/s, the run "
                              f"ends at step {self.total_steps} (schedule included)", flush=True)  # fmt: skip
                    if bar is not None:
                        bar.total = self.total_steps
                        bar.refresh()
                last = self.step >= self.total_steps
                every = (cfg.train.log_every, cfg.train.eval_every, cfg.train.checkpoint_every)
                sync = last or self._stop or any(self.step % n == 0 for n in every)
                if sync:  # the host reads the GPU only here: every loss since the last check was finite?
                    if not bool(self._finite):
                        raise FloatingPointError(
                            f"the loss became non-finite between steps {checked + 1} and {self.step} (now "
                            f"{float(loss)}); lower optim.lr"
                        )
                    self._finite.fill_(True)
                    checked = self.step
                if self.step % cfg.train.log_every == 0 or last:
                    now = time.perf_counter()
                    lr = float(self.scheduler.get_last_lr()[0])
                    row = {"step": self.step, "loss": self._mean(float(loss)), "lr": lr, "grad_norm": float(grad_norm),
                           "items_per_s": items / max(1e-9, now - t_last),
                           "data_wait": waited / max(1e-9, now - t_last)}  # fmt: skip
                    row.update({k: self._mean(v) for k, v in parts.items()})
                    if budget is not None:  # the same on every process
                        row["budget"] = budget
                    t_last, items, waited = now, 0, 0.0
                    logger.log(row)
                    self._save_status(loss=row["loss"], items_per_s=row["items_per_s"], data_wait=row["data_wait"])
                    if bar is not None:
                        bar.set_postfix(loss=f"{row['loss']:.4f}", lr=f"{row['lr']:.2e}",
                                        ips=f"{row['items_per_s']:.0f}", wait=f"{row['data_wait']:.0%}")  # fmt: skip
                if self.step % cfg.train.eval_every == 0 or last:
                    metrics = self._eval_and_keep_best(logger)
                if self.step % cfg.train.checkpoint_every == 0 or last or self._stop:
                    if self.rank == 0:
                        ckpt = self.save_checkpoint()
                        self._save_status(checkpoint=str(ckpt))
                    self._barrier()
                snap = cfg.train.snapshot_every
                if snap > 0 and (self.step % snap == 0 or last) and self.rank == 0:
                    self.export_weights(self.out / "snapshots" / f"step_{self.step:07d}")
                if bar is not None:
                    bar.update(1)
                t_ready = time.perf_counter()
                if last:
                    break
                if self._stop:
                    if self.rank == 0:
                        print(f"\nstopped at step {self.step}; continue with: {self._resume_command()}", flush=True)
                    break
        except BaseException as e:
            self._save_status(state="failed", message=f"{type(e).__name__}: {e}".strip()[:500])
            raise
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            if bar is not None:
                bar.close()
            logger.close()
        if self.rank == 0 and self.step >= self.total_steps:
            self.export_weights()
            self._save_status(state="done", message=f"weights in {self.out / 'model.safetensors'}")
        elif self.rank == 0:
            self._save_status(state="stopped", message=f"continue with: {self._resume_command()}")
        self._barrier()
        return metrics

    def _eval_and_keep_best(self, logger: _Logger) -> dict[str, float]:
        metrics: dict[str, float] = {}
        if self.rank == 0 and self.task.has_validation():
            metrics = self.evaluate()
            logger.log({"step": self.step, **{f"val_{k}": v for k, v in metrics.items()}})
            score = metrics.get("score")
            if score is not None and (self.best is None or score > self.best):
                self.best = score
                self.save_checkpoint("best.pt")
            self._save_status(validation={k: float(v) for k, v in metrics.items()}, best=self.best)
        self._barrier()
        return metrics

    def _mean(self, value: float | Tensor) -> float:
        value = float(value)  # a loss part may stay a tensor until it is logged (no host sync per step)
        if self.world == 1:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return float(t) / self.world

    def _any(self, flag: bool) -> bool:
        """Whether ``flag`` is true in any process."""
        t = torch.tensor([int(flag)], dtype=torch.int64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t)

    def _min(self, value: int) -> int:
        """The smallest ``value`` over the processes (all agree on a run's length)."""
        if self.world == 1:
            return value
        t = torch.tensor([value], dtype=torch.int64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return int(t)

    def _barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def _matching(self, weights: dict[str, Tensor]) -> dict[str, Tensor]:
        """The tensors of ``weights`` this network has under the same name and shape (a partial ``--init``:
        e.g. the front and first blocks of a shipped model under new later blocks); says what was left out."""
        own = self.model.state_dict()
        kept = {k: v for k, v in weights.items() if k in own and tuple(own[k].shape) == tuple(v.shape)}
        fresh = sorted(k for k in own if k not in kept)
        if not kept:
            raise ValueError("--init-partial: no tensor of the weights matches this network by name and shape")
        if self.rank == 0:
            print(f"--init-partial: {len(kept)} of {len(own)} tensors from the weights; "
                  f"{len(fresh)} start fresh ({', '.join(fresh[:6])}{', ...' if len(fresh) > 6 else ''})")  # fmt: skip
        return kept


def loader_for(task, dataset, sampler, workers: int, pin_memory: bool = False) -> torch.utils.data.DataLoader:
    """The training loader: ``sampler``'s batches of ``dataset`` collated by ``task`` in ``workers`` processes
    (:func:`_worker_setup`), four batches ahead each; ``pin_memory`` (on CUDA) so the copy to the GPU does not
    block. ``python -m edgessm.bench loader`` measures it."""
    return torch.utils.data.DataLoader(
        dataset,
        batch_sampler=sampler,
        num_workers=workers,
        collate_fn=task.collate,
        generator=torch.Generator(),  # keep the global RNG (dropout) untouched by loader seeding
        worker_init_fn=_worker_setup,
        persistent_workers=False,
        pin_memory=pin_memory,
        prefetch_factor=4 if workers else None,
    )


def _worker_setup(worker_id: int) -> None:
    """Data-loader workers leave Ctrl-C / SIGTERM to the main process, which checkpoints first, and run their
    numeric libraries on one thread each (PyTorch sets its own to 1 in workers; NumPy's BLAS would otherwise
    start a thread per core in every worker: 14 workers x 16 threads on a 16-core GPU box)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with contextlib.suppress(ImportError):
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)


class _Logger:
    """CSV log (one row per event, union of columns) and TensorBoard scalars when available."""

    def __init__(self, out: Path, enabled: bool, resume_step: int = 0) -> None:
        self.enabled = enabled
        self.path = out / "log.csv"
        self.tb = None
        if enabled and self.path.exists():  # rows an interrupted run logged after its last checkpoint
            with open(self.path, newline="") as f:
                rows = [r for r in csv.DictReader(f) if int(float(r["step"])) <= resume_step]
            self._write(rows)
        if enabled:
            with contextlib.suppress(ImportError):
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(out / "tb"))

    def log(self, row: dict[str, float]) -> None:
        if not self.enabled:
            return
        rows = []
        if self.path.exists():
            with open(self.path, newline="") as f:
                rows = list(csv.DictReader(f))
        rows.append({k: f"{v:.6g}" if isinstance(v, float) else v for k, v in row.items()})
        self._write(rows)
        if self.tb is not None:
            for k, v in row.items():
                if k != "step" and isinstance(v, int | float):
                    self.tb.add_scalar(k, v, int(row["step"]))

    def _write(self, rows: list[dict]) -> None:
        cols = list(dict.fromkeys(k for r in rows for k in r)) or ["step"]
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            w.writerows(rows)
        os.replace(tmp, self.path)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
