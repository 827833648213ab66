"""What the mask-denoiser studies share (``denoise_gain_study.py``, ``denoise_pitch_evidence.py``): the network,
and validation mixtures as it takes them. Imported by those scripts (a script's own folder is on Python's path)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


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
