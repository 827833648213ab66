"""Training configs as data: TOML files with sections, plus ``section.key=value`` overrides.

A config has a ``task`` (``kws``, ``denoise`` or ``asr``) and sections:

* ``[model]``  keys of the network's config dataclass (:mod:`edgessm.nets`);
* ``[data]``   task-specific data sources and clip lengths;
* ``[augment]`` augmentation settings (see :mod:`edgessm.data.augment`);
* ``[optim]``  :class:`OptimConfig`;
* ``[train]``  :class:`RunConfig`.

A recipe may also say what changes on a CPU or a GPU: tables ``[cpu.SECTION]`` and ``[cuda.SECTION]``
(e.g. ``[cpu.train] batch_size = 32``, ``[cpu.optim] lr = 1e-3``) are laid over the config when the run
trains on that device, before the ``--set`` overrides (which always win). A GPU recipe keeps its batch of
256 and a CPU run of it its cache-friendly batch of 32, with one command.

Shipped configs live in ``edgessm/train/configs/`` and are addressed by name (``kws``, ``denoise``...).
"""

from __future__ import annotations

import ast
import copy
import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

CONFIG_DIR = Path(__file__).parent / "configs"


@dataclass
class OptimConfig:
    """AdamW with a cosine schedule and linear warmup (paper App. E)."""

    lr: float = 0.01
    weight_decay: float = 0.05
    ssm_lr: float = 0.001  # learning rate of the SSM dynamics (A, Δ); no weight decay on them
    betas: tuple[float, float] = (0.9, 0.999)
    warmup: float = 0.01  # fraction of the total steps
    min_lr_ratio: float = 0.0  # the cosine decays to lr * min_lr_ratio
    clip: float = 1.0  # gradient-norm clipping


@dataclass
class RunConfig:
    steps: int = 1000
    batch_size: int = 32  # global batch: split evenly across distributed processes
    eval_every: int = 500
    checkpoint_every: int = 200
    # every N steps (and at the last) the weights as a model folder snapshots/step_NNNNNNN/ (0: none), for
    # checkpoint averaging with `edgessm soup` (it helps runs cut off at a high LR; after a cosine to zero the
    # asr tail's soups tied the last step, README *Model soups*)
    snapshot_every: int = 0
    log_every: int = 10
    seed: int = 0
    amp: str = "auto"  # auto (on for CUDA), off, bf16, fp16
    # torch.compile the network: false, true (= "default") or a mode: "reduce-overhead" (CUDA graphs: the
    # launch-bound GPU step), "max-autotune", "max-autotune-no-cudagraphs"
    compile: bool | str = False
    # record the whole training step (forward, loss, backward, clipping, AdamW) once as a CUDA graph and replay
    # it (train/graphed.py): the host out of the way of a launch-bound GPU step; CUDA, fixed-shape tasks (kws,
    # denoise), one process, bf16 or fp32, not with train.compile
    cuda_graphs: bool = False
    # how the run uses the machine (edgessm.train.machine): "auto" or a number. On a CPU: one process per core
    # (DDP over gloo), one thread each, examples made in each process; on CUDA: one process per GPU, cores - 1
    # loader workers
    processes: int | str = "auto"
    threads: int | str = "auto"  # intra-op threads of each process
    workers: int | str = "auto"  # data-loader processes of each training process
    eval_batches: int = 0  # 0: the whole validation set
    time_limit_min: float = 0.0  # fit the run into this wall time: steps (and schedule) shrink to the measured rate
    # stop (with a checkpoint) after this many minutes of this process, the schedule unchanged: a long run in
    # sittings, each continued later with --resume (0: no such stop)
    stop_after_min: float = 0.0
    # the augmentation's tail (reverb, noise mixing, microphone, gain) batched on the training device
    # (train/device_mix.py): "auto" (on CUDA, for tasks that have it), "on", "off"
    device_augment: str = "auto"
    # each loaded batch trains this many steps, its noise, room, microphone, SNR and gain re-drawn on the
    # device for every repeat (needs device_augment): for a GPU the loader cannot keep busy
    echo: int = 1
    # how a filterbank front computes its band energies (the same numbers): "fft", "chunked" (matrix products
    # inside 40-sample chunks, ~2x less memory traffic on a GPU; edgessm.ssm.filterbank) or "measure"
    front_plan: str = "fft"
    # the contraction order of the bottleneck blocks (the same numbers): "auto" (the FLOP model on a CPU, the
    # fastest measured on a GPU), "measure", "flops", "rule" (the paper's) or a plan's name (edgessm.ssm.fftconv)
    ssm_plan: str = "auto"
    # parts of the network that keep their (initial) weights: module names, e.g. "backbone.layers.0", or
    # "front" for a filterbank front; a fine-tune with a frozen front trains ~2x faster on a CPU
    freeze: list[str] = field(default_factory=list)


@dataclass
class TrainConfig:
    task: str
    model: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    augment: dict[str, Any] = field(default_factory=dict)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: RunConfig = field(default_factory=RunConfig)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        d = apply_profile(d, None)  # device tables are laid over by load_config; left over here, they go
        if "task" not in d:
            raise ValueError("a training config needs a top-level 'task' (kws, denoise or asr)")
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown config sections {sorted(unknown)}")
        optim = _dataclass_from(OptimConfig, d.pop("optim", {}), "optim")
        run = _dataclass_from(RunConfig, d.pop("train", {}), "train")
        return cls(optim=optim, train=run, **d)


def _dataclass_from(cls, values: dict[str, Any], section: str):
    known = {f.name for f in fields(cls)}
    unknown = set(values) - known
    if unknown:
        raise ValueError(f"unknown keys in [{section}]: {sorted(unknown)}; known: {sorted(known)}")
    values = dict(values)
    if "compile" in values:
        values["compile"] = compile_mode(values["compile"]) or False
    if "betas" in values:
        values["betas"] = tuple(values["betas"])
    return cls(**values)


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def compile_mode(value: bool | str) -> str | None:
    """``train.compile`` as a ``torch.compile`` mode, None when off (false, "off", "none")."""
    if value is True:
        return "default"
    if value is False or (isinstance(value, str) and value.lower() in ("off", "none", "false")):
        return None
    if isinstance(value, str) and value.lower() in ("on", "true"):
        return "default"
    if value in COMPILE_MODES:
        return str(value)
    raise ValueError(f"train.compile = {value!r}: use true/false or one of {', '.join(COMPILE_MODES)}")


def resolve_config_path(name_or_path: str) -> Path:
    """A shipped config by name (``kws``) or a path to a TOML file."""
    p = Path(name_or_path).expanduser()
    if p.is_file():
        return p
    shipped = CONFIG_DIR / f"{name_or_path}.toml"
    if shipped.is_file():
        return shipped
    names = sorted(q.stem for q in CONFIG_DIR.glob("*.toml"))
    raise FileNotFoundError(f"config {name_or_path!r} is neither a file nor a shipped config ({', '.join(names)})")


def parse_value(text: str) -> Any:
    """An override value: a TOML/Python literal (number, bool, list, quoted string) or a bare string."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def apply_overrides(d: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``section.key=value`` (or ``task=kws``) overrides to a config dictionary."""
    d = copy.deepcopy(d)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"override {item!r} is not of the form section.key=value")
        parts = key.strip().split(".")
        node = d
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"override {item!r}: {part} is not a section")
        node[parts[-1]] = parse_value(value)
    return d


DEVICE_PROFILES = ("cpu", "cuda")


def apply_profile(d: dict[str, Any], device: str | None) -> dict[str, Any]:
    """The config dictionary ``d`` without its device tables, with the one of ``device`` laid over it."""
    d = copy.deepcopy(d)
    profiles = {k: d.pop(k) for k in DEVICE_PROFILES if k in d}
    for name, profile in profiles.items():
        if not isinstance(profile, dict) or any(not isinstance(v, dict) for v in profile.values()):
            raise ValueError(f"[{name}] holds tables of a section's values, e.g. [{name}.train] batch_size = 32")
        if "model" in profile:
            raise ValueError(f"[{name}.model]: a network is the same on every device (its weights move between them)")
    for section, values in profiles.get(device or "", {}).items():
        d.setdefault(section, {}).update(values)
    return d


def load_config(name_or_path: str, overrides: list[str] | None = None, device: str | None = None) -> TrainConfig:
    """Load a TOML config (shipped name or path), lay its ``[DEVICE.*]`` tables over it for ``device``
    (``cpu`` or ``cuda``; None: neither) and apply overrides."""
    path = resolve_config_path(name_or_path)
    with open(path, "rb") as f:
        d = tomllib.load(f)
    return TrainConfig.from_dict(apply_overrides(apply_profile(d, device), overrides or []))
