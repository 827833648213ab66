"""What the mask-denoiser studies share (``denoise_gain_study.py``, ``denoise_pitch_evidence.py``): the network,
and validation mixtures as it takes them. Imported by those scripts (a script's own folder is on Python's path)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any


def study_arguments(doc: str) -> argparse.ArgumentParser:
    """A study's command line with what every mask study takes: the model, how many validation mixtures, the ideal
    mask's exponent; the study adds its own options."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("model", help="a spectral denoiser: shipped name, model folder or training run")
    ap.add_argument("--mixtures", type=int, default=14, help="validation mixtures (one per speaker, kinds cycled)")
    ap.add_argument("--exponent", type=float, default=0.75, help="the ideal mask exponent (irm_exponent)")
    return ap


def load_mask_denoiser(model: str) -> Any:
    """A spectral mask denoiser (``model.arch = 'spectral'``) in eval mode, one thread; exits with a message for
    any other model."""
    import torch

    from edgessm.deploy.load import load_trained

    torch.set_num_threads(1)
    net, _ = load_trained(model)
    if not hasattr(net, "oracle_gains"):
        raise SystemExit(f"{model} is not a spectral mask denoiser (model.arch = 'spectral')")
    return net.eval()


def validation_pairs(net: Any, count: int) -> Iterator[tuple[Any, Any, Any]]:
    """The first ``count`` validation mixtures (one per speaker, noise kinds cycled) as ``(mixture, noisy, clean)``,
    the signals ``(1, 1, T)`` tensors padded to whole frames of ``net`` plus one hop (its delay)."""
    import torch

    from edgessm.eval.denoise import mixtures

    for m in mixtures("validation", per_speaker=1)[:count]:
        pad = (-len(m.noisy)) % net.hop + net.hop
        noisy, clean = (torch.nn.functional.pad(torch.as_tensor(s, dtype=torch.float32)[None, None], (0, pad))
                        for s in (m.noisy, m.clean))  # fmt: skip
        yield m, noisy, clean
