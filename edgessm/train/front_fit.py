"""Give a trained network a new front end: fit the new front to the old one's outputs, keep everything after.

A network's blocks learnt to read their front's features (e.g. kws35-es: 40 log band energies every 10 ms from
the SSM filterbank). A cheaper front of the same shape (:class:`~edgessm.nets.spectrogram.SpectrogramFront`)
is first trained to reproduce those features on the recipe's own training audio (augmented keyword examples
in context),

    min over the new front's parameters   mean over batch, bands, frames of  (front_new(x) - front_old(x))²,

with the old network frozen, and the result -- the new front, the old blocks and head -- is written as a model
folder that ``edgessm train RECIPE --init FOLDER`` fine-tunes end to end (the fitted features are close to
the old ones, not equal, so the blocks need a short fine-tune to recover the old accuracy). The folder must be
new (:func:`~edgessm.deploy.load.write_model_folder`).

    python -m edgessm.train.front_fit models/kws35-es --recipe kws_es_v4 --out runs/es_spectrogram_fit
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Iterable, Iterator

import torch
from torch import Tensor, nn

TRUNKS = ("backbone", "encoder")  # where a network keeps its layers: keyword spotters, recognisers


def front_prefix(net: nn.Module) -> str:
    """The name prefix of ``net``'s front: the first layer of its trunk (``backbone.layers.0.`` in a keyword
    spotter, ``encoder.layers.0.`` in a recogniser)."""
    for trunk in TRUNKS:
        layers = getattr(getattr(net, trunk, None), "layers", None)
        if layers is not None and len(layers):
            if not hasattr(layers[0], "bands"):
                raise ValueError(f"{type(net).__name__} has no front to replace (its first layer is "
                                 f"{type(layers[0]).__name__})")  # fmt: skip
            return f"{trunk}.layers.0."
    raise ValueError(f"{type(net).__name__} has no trunk of layers ({' or '.join(TRUNKS)}) with a front")


def front_of(net: nn.Module) -> nn.Module:
    """The front layer of a keyword spotter or recogniser built with a ``front`` (its trunk's first layer)."""
    return net.get_submodule(front_prefix(net)[:-1])


def transplant(old: nn.Module, new: nn.Module) -> list[str]:
    """Copy every tensor of ``old`` outside its front into ``new`` (same names and shapes); returns the names of
    ``new``'s front tensors, the ones left to fit. Raises if anything else does not match."""
    front = front_prefix(new)
    own, theirs = new.state_dict(), old.state_dict()
    rest = {k: v for k, v in theirs.items() if not k.startswith(front)}
    fresh = sorted(k for k in own if k.startswith(front))
    missing = sorted(k for k in own if not k.startswith(front) and k not in rest)
    wrong = sorted(k for k, v in rest.items() if k in own and tuple(own[k].shape) != tuple(v.shape))
    if missing or wrong or len(rest) != len(own) - len(fresh):
        raise ValueError(f"the networks differ beyond their fronts: missing {missing[:4]}, shapes differ {wrong[:4]}")
    new.load_state_dict({**rest, **{k: own[k] for k in fresh}})
    return fresh


def fit_front(student: nn.Module, teacher: nn.Module, batches: Iterable[Tensor], steps: int, lr: float = 0.01,
              log_every: int = 50) -> list[float]:  # fmt: skip
    """Adam on ``student``'s parameters against ``mean (student(x) - teacher(x))²`` for ``steps`` batches
    ``x (B, 1, T)``, the learning rate falling to 0 by a cosine; returns the loss of every step."""
    teacher.eval()
    student.train()
    params = [p for p in student.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s / steps, 1.0))))
    losses: list[float] = []
    start = time.monotonic()
    it: Iterator[Tensor] = iter(batches)
    for step in range(steps):
        x = next(it)
        with torch.no_grad():
            target = teacher(x)
        loss = torch.mean((student(x) - target) ** 2)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if log_every and (step + 1) % log_every == 0:
            recent = sum(losses[-log_every:]) / log_every
            print(f"  step {step + 1}/{steps}: feature MSE {recent:.4f} ({time.monotonic() - start:.0f} s)", flush=True)
    return losses


def recipe_batches(recipe: str, batch: int, steps: int, workers: int, seed: int,
                   overrides: list[str]) -> Iterator[Tensor]:  # fmt: skip
    """``steps`` batches ``(B, 1, T)`` of the recipe's augmented training examples (its loader and sampler)."""
    from .config import load_config
    from .sampler import StepSampler
    from .tasks import build_task
    from .trainer import loader_for

    task = build_task(load_config(recipe, overrides))
    dataset = task.train_set()
    for b in loader_for(task, dataset, StepSampler(len(dataset), batch, steps, seed), workers):
        yield b["audio"].reshape(int(b["audio"].shape[0]), 1, -1).float()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m edgessm.train.front_fit", description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="the trained network (a model folder or a shipped model name)")
    ap.add_argument("--recipe", required=True, help="training recipe whose audio the front is fitted on")
    ap.add_argument("--out", required=True, help="model folder to write (model.json + model.safetensors)")
    ap.add_argument("--front", default="spectrogram", help="the new front (a FrontOptions front)")
    ap.add_argument("--window", type=int, default=256, help="spectrogram front: frame length in samples")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="recipe overrides")
    args = ap.parse_args(argv)

    from edgessm.deploy.load import load_trained, write_model_folder
    from edgessm.nets import build_network

    torch.manual_seed(args.seed)
    old, desc = load_trained(args.model)
    if "front" not in desc["config"]:
        print(f"error: {args.model} has no front to replace", file=sys.stderr)
        return 2
    config = {**desc["config"], "front": args.front, "front_window": args.window}
    new = build_network(desc["network"], **config)
    fresh = transplant(old, new)
    print(f"fitting {len(fresh)} front tensors ({', '.join(fresh)}) of {args.front} to {args.model}'s front "
          f"on recipe {args.recipe}: {args.steps} batches of {args.batch}", flush=True)  # fmt: skip
    batches = recipe_batches(args.recipe, args.batch, args.steps, args.workers, args.seed, args.set)
    losses = fit_front(front_of(new), front_of(old), batches, args.steps, args.lr)
    tail = losses[-max(1, args.steps // 10) :]
    extra = {"from": str(args.model), "recipe": args.recipe, "steps": args.steps, "batch": args.batch,
             "lr": args.lr, "first_mse": losses[0], "final_mse": sum(tail) / len(tail)}  # fmt: skip
    tensors = {k: v.detach().cpu().contiguous().numpy() for k, v in new.state_dict().items()}
    path = write_model_folder(args.out, tensors, {**desc, "config": config, "front_fit": extra})
    print(f"wrote {path} (feature MSE {losses[0]:.4f} -> {extra['final_mse']:.4f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
