"""``edgessm export``: write the stepwise ONNX graph of a trained model and verify it.

edgessm export runs/kws --out models/kws35 --chunk 256
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("model", help="a training run folder (model.json + model.safetensors) or a shipped model name")
    ap.add_argument("--out", required=True, help="folder for the graph (created)")
    ap.add_argument("--name", help="file name stem of the graph (default: the model folder's name)")
    ap.add_argument(
        "--chunk", type=int, help="samples per graph call (a multiple of the total stride; default: the stride)"
    )
    ap.add_argument("--tolerance", type=float, default=1e-4, help="max abs error allowed against PyTorch")
    ap.add_argument(
        "--checkpoint", choices=["best", "last"], help="export a run's checkpoint instead of its final weights"
    )


def verification_audio(seconds: float = 8.0) -> list:
    """A long random input and, when one is at hand, real speech."""
    import numpy as np

    from edgessm.data.audio import load_audio
    from edgessm.data.corpora import shared_data_dir

    rng = np.random.default_rng(0)
    inputs = [(0.3 * rng.normal(size=int(16000 * seconds))).astype(np.float32)]
    shared = shared_data_dir(required=False)
    demo = sorted((Path(__file__).resolve().parents[2] / "demos").glob("*speech*.wav"))
    speech = demo[0] if demo else None
    if speech is None and shared is not None:
        speech = next(iter(sorted((shared / "real_read_speech" / "audio").rglob("*.flac"))), None)
    if speech is not None:
        inputs.append(load_audio(speech)[0])
    return inputs


def run(args: argparse.Namespace) -> int:
    from .load import load_trained
    from .onnx_export import export_onnx, model_stride

    try:
        net, desc = load_trained(args.model, args.checkpoint)
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(f"edgessm export: {e}") from None
    stride = model_stride(net)
    chunk = args.chunk or stride
    name = args.name or Path(args.model).name
    meta = {"task": desc["network"], "labels": desc.get("labels", []), "model_name": name}
    out = Path(args.out) / f"{name}.onnx"
    try:
        report = export_onnx(net, out, chunk, meta, verification_audio(), args.tolerance)
    except (ValueError, RuntimeError) as e:
        raise SystemExit(f"edgessm export: {e}") from None
    print(f"wrote {out} (chunk {chunk} samples = {1000 * chunk / 16000:.1f} ms, stride {stride})")
    print(f"verified against PyTorch: max abs error {report.max_abs_error:.2e}")
    print("op census: " + ", ".join(f"{op} {n}" for op, n in report.op_census.items()))
    if report.unfriendly_ops:
        print("warning: ops outside the conservative NPU list: " + ", ".join(report.unfriendly_ops))
    return 0
