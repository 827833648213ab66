"""The RTF layers of a trained network: pole radii, float32 streaming error and the modal form's error.

    .venv/bin/python tools/rtf_layer_report.py runs/rtf [--audio demos/keywords.wav] [--chunks 10]

For every :class:`~edgessm.ssm.rtf.RationalSSM` of the model folder or run: the largest and median pole radius
(companion eigenvalues of its denominators, float64), the float32 direct form's and a float32 modal
(partial-fraction) form's relative error against the float64 impulse response
(:func:`~edgessm.ssm.rtf.modal_error`), and the relative error of ``step`` over ``--chunks`` random chunks
against ``forward`` on the layer's real input: what the layer sees when the network hears ``--audio``.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from edgessm.data.audio import load_audio
from edgessm.deploy.load import load_trained
from edgessm.ssm.rtf import RationalSSM, modal_error
from edgessm.ssm.stream import run_chunked


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a model folder or training run with RTF blocks")
    ap.add_argument("--audio", default="demos/keywords.wav", help="what the network hears (16 kHz)")
    ap.add_argument("--chunks", type=int, default=10, help="random chunks of the streaming check")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    net, _ = load_trained(args.model)
    layers = [(name, m) for name, m in net.named_modules() if isinstance(m, RationalSSM)]
    if not layers:
        raise SystemExit(f"{args.model} has no RTF layer")
    inputs: dict[str, torch.Tensor] = {}

    def keep_input(name: str):
        def hook(module, args, output) -> None:  # returns None: the output stays the layer's own
            inputs[name] = args[0].detach()

        return hook

    hooks = [m.register_forward_hook(keep_input(name)) for name, m in layers]
    audio, _ = load_audio(args.audio)
    with torch.no_grad():
        net(torch.from_numpy(np.asarray(audio, dtype=np.float32))[None, None])
    for h in hooks:
        h.remove()
    rng = np.random.default_rng(args.seed)
    for name, layer in layers:
        u = inputs[name]
        cuts = np.sort(rng.choice(np.arange(1, u.shape[-1]), args.chunks - 1, replace=False))
        sizes = np.diff(np.concatenate([[0], cuts, [u.shape[-1]]])).tolist()
        with torch.no_grad():
            y = layer(u)
            ys, _ = run_chunked(layer, u, sizes)
        radii = layer.poles().abs()
        err = modal_error(layer)
        stream_error = float((ys - y).norm() / y.norm())
        print(f"{name}: order {layer.n_states}, {radii.shape[0]} denominators; "
              f"pole radius max {radii.max():.3f}, median {radii.median():.3f}; "
              f"step vs forward (float32, {args.chunks} chunks of {u.shape[-1]} frames) {stream_error:.1e}; "
              f"impulse response vs float64: direct form {err['direct_f32']:.1e}, "
              f"modal form {err['modal_f32']:.1e} (largest residue {err['max_residue']:.3g})")  # fmt: skip


if __name__ == "__main__":
    main()
