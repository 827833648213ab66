"""``edgessm pack``: a recipe's training data in one small folder, to train where the data is not.

edgessm pack kws_v5 --out kws-pack                          # every clip the recipe trains on
edgessm pack kws_v5 --out kws-pack --keep 'synth:*=0.25'    # a quarter of the synthetic clips
edgessm train kws_v5 --pack kws-pack --out runs/k --device cuda   # on the other machine

Keyword clips are cut to their speech (plus a margin); sentences and noises stay whole; the room
responses (simulated ones included) become files. A recipe with mined hard negatives
(``data.mined_negatives``, ``edgessm mine``) packs their recordings whole (source ``mined``) and a
``mined.csv`` naming them; ``edgessm train --pack`` reads it. The audio is Opus-encoded (``--level``: 0.96 is
~15 kb/s; see :mod:`edgessm.data.pack`). The clips keep the split
they had here, so validation speakers stay out of training there.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from edgessm.data.audio import SAMPLE_RATE, speech_bounds
from edgessm.data.manifest import Clip
from edgessm.data.pack import DEFAULT_LEVEL
from edgessm.data.store import loudest_window


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("config", help="a shipped recipe (kws_v5, ...) or a TOML config file")
    ap.add_argument("--out", required=True, help="a new folder for the pack")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="override a config value before the clips are chosen (repeatable)")  # fmt: skip
    ap.add_argument("--keep", action="append", default=[], metavar="SOURCE=FRACTION",
                    help="keep this fraction of a source's clips (a stable choice by file); SOURCE may be a "
                         "pattern such as 'synth:*' (repeatable)")  # fmt: skip
    ap.add_argument("--keep-seed", type=int, default=0,
                    help="another seed keeps another subset at the same fractions (e.g. a second pack)")  # fmt: skip
    ap.add_argument("--margin", type=float, default=0.15, help="seconds kept around a keyword clip's speech")
    ap.add_argument("--level", type=float, default=DEFAULT_LEVEL, help="Opus compression level, 0 (best) to 1")
    ap.add_argument("--shards", type=int, default=16, help="shard files (decoded in parallel when training)")
    ap.add_argument("--noise-max-s", type=float, default=0.0,
                    help="keep at most this many seconds of each noise recording, its middle (0: whole)")  # fmt: skip


def parse_keep(items: list[str]) -> list[tuple[str, float]]:
    """``["synth:*=0.25"]`` -> ``[("synth:*", 0.25)]``, with a clear error for a malformed item."""
    out = []
    for item in items:
        pattern, sep, value = item.rpartition("=")
        try:
            fraction = float(value)
        except ValueError:
            fraction = -1.0
        if not sep or not pattern or not 0.0 <= fraction <= 1.0:
            raise ValueError(f"--keep {item!r}: expected SOURCE=FRACTION with a fraction in [0, 1]")
        out.append((pattern, fraction))
    return out


def kept(clip: Clip, keep: list[tuple[str, float]], seed: int = 0) -> bool:
    """Whether ``clip`` survives ``keep`` (the last matching pattern decides; a stable hash of the file
    and ``seed``)."""
    fraction = 1.0
    for pattern, f in keep:
        if fnmatch.fnmatchcase(clip.source, pattern):
            fraction = f
    key = clip.path if not seed else f"{seed}:{clip.path}"
    h = int.from_bytes(hashlib.sha1(key.encode()).digest()[:8], "big") / 2**64
    return h < fraction


def trim_keyword(margin_s: float, max_samples: int):
    """``(clip, audio) -> audio``: a labelled clip cut to its speech +- ``margin_s`` (at most ``max_samples``,
    its loudest window); unlabelled speech (sentences) is kept whole."""

    def prepare(clip: Clip, x: np.ndarray) -> np.ndarray:
        if not clip.label:
            return x
        start, end = speech_bounds(x, margin=int(margin_s * SAMPLE_RATE))
        return loudest_window(x[start:end], max_samples)

    return prepare


def pack_roles(
    roles: dict[str, list[Clip]], packed: list[Clip], takes_as_clean: Callable[[Clip], bool] = lambda clip: True
) -> dict[str, list[str]]:
    """``{recipe key: [source names]}`` for a denoise pack: the training machine's recipe reads each key's
    clips as ``pack:DIR@SOURCE,...``. Refused where a source name of the clean speech would also pick up
    a clip packed for another key only that the recipe takes as clean speech (``takes_as_clean``)."""
    kept_paths = {c.path for c in packed}
    out = {key: sorted({c.source for c in clips if c.path in kept_paths}) for key, clips in roles.items() if clips}
    emptied = [key for key, names in out.items() if not names]
    if emptied:
        raise ValueError(f"--keep left no clips for data.{', data.'.join(emptied)}; keep a share of them")
    clean = {c.path for c in roles["sources"]}
    stray = sorted({c.source for c in packed
                    if c.source in out.get("sources", []) and c.path not in clean and takes_as_clean(c)})  # fmt: skip
    if stray:
        raise ValueError(f"cannot pack: sources {stray} serve as clean speech and, with other clips, as another "
                         "key's data; give them distinct sources")  # fmt: skip
    return out


def recipe_rirs(cfg) -> list[np.ndarray]:
    """The room impulse responses of the recipe's ``[augment.rirs]`` (simulated and measured), prepared."""
    from edgessm.data.augment import RirSourceConfig, build_rir_bank, config_from_dict

    from .tasks import _resolve

    settings = _resolve(cfg.augment).get("rirs")
    bank = build_rir_bank(config_from_dict(RirSourceConfig, settings)) if settings else None
    return list(bank.rirs) if bank is not None else []


def packed_mined(task) -> list[Clip]:
    """The recordings of a keyword recipe's mined negatives (``data.mined_negatives``) as clips to pack whole
    (source ``mined``, no label or text: the recipe uses them only through the pack's ``mined.csv``)."""
    from .mined import read_mined_lists
    from .tasks import MINED_SOURCE

    if not getattr(getattr(task, "data", None), "mined_negatives", ""):
        return []
    splits, sentences = task.select_clips()
    known = {c.path: c for c in task.keyword_free_training(sentences, splits["train"])}
    paths = sorted({m.path for m in read_mined_lists(task.data.mined_negatives)})
    strange = [p for p in paths if p not in known]
    if strange:
        raise ValueError(f"{task.data.mined_negatives}: {len(strange)} recordings are not keyword-free training "
                         f"speech of this recipe (e.g. {strange[0]})")  # fmt: skip
    return [Clip(p, speaker=known[p].speaker, split="train", source=MINED_SOURCE) for p in paths]


def write_packed_mined(out, mined_csv: str | Sequence[str], clips: list[Clip]) -> None:
    """``out/mined.csv``: the rows of ``mined_csv`` (one CSV or several) naming the packed recordings (``clips``,
    in pack order)."""
    from edgessm.data.pack import read_pack

    from .mined import read_mined_lists, write_mined

    refs = {c.path: ref.path for c, ref in zip(clips, read_pack(out)[-len(clips) :], strict=True)}
    root = Path(out).expanduser().resolve()
    rows = [replace(m, path=str(Path(refs[m.path]).relative_to(root))) for m in read_mined_lists(mined_csv)]
    write_mined(root / "mined.csv", rows)


def run(args: argparse.Namespace) -> int:
    from edgessm.data.corpora import CorpusError
    from edgessm.data.pack import write_pack

    from .config import load_config
    from .tasks import build_task, noise_paths

    try:
        keep = parse_keep(args.keep)
        cfg = load_config(args.config, args.overrides)
        task = build_task(cfg)
        if not hasattr(task, "packed_clips"):
            raise ValueError(
                f"{task.name} recipes cannot be packed yet (keyword spotting, recognition and denoising can)"
            )
        clips = [c for c in task.packed_clips() if kept(c, keep, args.keep_seed)]
        noises = noise_paths(list(task.data.noise)) if getattr(task.data, "noise", None) else []
        rirs = recipe_rirs(cfg)
        max_samples = 2 * int(getattr(task.data, "clip_samples", SAMPLE_RATE))
        info = {"recipe": args.config, "overrides": args.overrides, "keep": args.keep, "keep_seed": args.keep_seed,
                "margin_s": args.margin, "noise_max_s": args.noise_max_s}  # fmt: skip
        prepare = trim_keyword(args.margin, max_samples)
        if hasattr(task, "packed_roles"):  # a denoise recipe: which packed sources serve which recipe key
            info["roles"] = pack_roles(task.packed_roles(), clips, task.takes_as_clean)
            music = int(task.data.music_max_s * SAMPLE_RATE)
            trim = prepare
            prepare = lambda c, x: loudest_window(x, music) if c.source == "music" else trim(c, x)  # noqa: E731
        mined = packed_mined(task)
        clips += mined
        info["mined"] = len(mined)
        summary = write_pack(args.out, clips, prepare, noises, rirs, args.level, args.shards, info=info,
                             noise_max_s=args.noise_max_s)  # fmt: skip
        if mined:
            write_packed_mined(args.out, task.data.mined_negatives, clips[-len(mined) :])
    except (FileNotFoundError, FileExistsError, ValueError, CorpusError) as e:
        raise SystemExit(f"edgessm pack: {e}") from None
    hours = sum(summary["hours"].values())
    print(f"packed {summary['clips']} clips ({hours:.2f} h) and {summary['noises']} noises into {args.out}: "
          f"{summary['megabytes']} MB")  # fmt: skip
    return 0
