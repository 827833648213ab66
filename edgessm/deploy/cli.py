"""``edgessm export``: write a model folder -- verified stepwise ONNX graph(s), weights, manifest.

edgessm export runs/kws --out models/kws35 --chunk 256 --int8
edgessm export kws35 --out /tmp/kws35-1024 --chunk 1024      # re-export a shipped model
edgessm export runs/kws_es --out models/kws35-es --budget all  # elastic model: a graph per compute budget
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from edgessm.runtime.level import TASK_DEFAULTS, task_agc

from .quantize import INT8_MIN_SNR_DB


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("model", help="a training run folder (model.json + model.safetensors) or a shipped model name")
    ap.add_argument("--out", required=True, help="folder for the graph (created)")
    ap.add_argument("--name", help="file name stem of the graph (default: the model folder's name)")
    ap.add_argument(
        "--chunk", type=int, help="samples per graph call (a multiple of the total stride; default: the stride)"
    )
    ap.add_argument(
        "--file-chunk",
        type=int,
        metavar="N",
        help="also write NAME.cN.onnx, the graph `edgessm denoise`/`transcribe` use for files: N-sample chunks "
        "(a multiple of --chunk), fewer calls, the same output",
    )
    ap.add_argument("--tolerance", type=float, default=1e-4, help="max abs error allowed against PyTorch")
    ap.add_argument(
        "--checkpoint", choices=["best", "last"], help="export a run's checkpoint instead of its final weights"
    )
    ap.add_argument("--int8", action="store_true", help="also write the int8 graph and report its quality change")
    ap.add_argument("--int8-min-snr", type=float, default=INT8_MIN_SNR_DB, metavar="DB",
                    help="an int8 graph further than this from the fp32 graph's outputs (on real speech in noise) "
                         "keeps its most sensitive projections float, found by quantizing each alone "
                         f"(default {INT8_MIN_SNR_DB:g}; 0: no search)")  # fmt: skip
    ap.add_argument("--threshold", type=float, help="keyword spotters: the default decision threshold of the graph")
    ap.add_argument("--contrast-db", type=float, metavar="DB",
                    help="keyword spotters: the graph's contrast gate (listen --contrast; a keyword must stand DB "
                         "above the second before it)")  # fmt: skip
    ap.add_argument("--speech-after", type=float, metavar="P",
                    help="keyword spotters: the graph's speech-after gate (listen --speech-after; a keyword fires "
                         "only if the mean _unknown_ posterior 0.1-0.4 s after it is at most P)")  # fmt: skip
    ap.add_argument("--hold", type=float, metavar="S",
                    help="keyword spotters: the graph's hold (listen --hold; the strongest keyword within S seconds "
                         "of a crossing fires)")  # fmt: skip
    ap.add_argument("--margin", type=float, metavar="P",
                    help="keyword spotters: the graph's runner-up margin (listen --margin; a keyword fires only "
                         "where it stands P above every other keyword's posterior)")  # fmt: skip
    ap.add_argument("--class-thresholds", metavar="CALIBRATION_JSON",
                    help="keyword spotters: per-keyword thresholds from `edgessm eval MODEL --calibrate --out DIR` "
                         "(DIR/calibration.json), stored in the graph; --threshold stays the fallback")  # fmt: skip
    ap.add_argument("--agc", choices=("auto", "on", "off"), default="auto",
                    help="the input level control the graph asks for (edgessm.runtime.level: quiet input raised "
                         "to the level the model was trained on, lowered only with --agc-cut; a denoiser's output "
                         "gets its level back); auto: on for keyword spotters and denoisers, off for "
                         "recognizers")  # fmt: skip
    ap.add_argument("--agc-cut", type=float, metavar="DB",
                    help="with the level control: loud running speech is also brought down toward its target, by "
                         "at most DB (a close microphone; default 0: boost only)")  # fmt: skip
    ap.add_argument("--lm", metavar="NPZ",
                    help="recognizers: ship this word model (edgessm lm) as lm.npz; transcribe then decodes files "
                    "with it by beam search (--lm none there for greedy)")  # fmt: skip
    ap.add_argument("--beam", type=int, help="with --lm: the beam search's hypotheses per frame to record with it "
                    "(transcribe's default for this model; choose on validation speech)")  # fmt: skip
    ap.add_argument("--lm-weight", type=float, help="with --lm: the word model's weight to record with it")
    ap.add_argument("--word-bonus", type=float, help="with --lm: the log-score per word to record with it")
    ap.add_argument(
        "--budget",
        metavar="K",
        help="elastic (ES-SSM) models: also write NAME.kK.onnx at compute budget K (a list K1,K2,... or 'all': "
        "2,3,4,6,8,12,16,24,32 up to K̄); NAME.onnx is always the full budget K̄",
    )


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


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
    from edgessm.runtime.kws import check_gates

    from .load import load_trained
    from .onnx_export import model_stride
    from .package import package

    lm_decoder = _lm_decoder(args)
    try:
        # before the slow part
        check_gates(args.contrast_db, args.speech_after, "--contrast-db", args.hold, args.margin)
        net, desc = load_trained(args.model, args.checkpoint)
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(f"edgessm export: {e}") from None
    from edgessm.runtime.registry import NOT_ELASTIC, parse_budgets

    stride = model_stride(net)
    chunk = args.chunk or stride
    name = args.name or Path(args.out).name or Path(args.model).name
    meta = {"threshold": str(args.threshold)} if args.threshold is not None else {}
    if args.contrast_db is not None:
        meta["contrast_db"] = f"{args.contrast_db:g}"
    if args.speech_after is not None:
        meta["speech_after"] = f"{args.speech_after:g}"
    if args.hold:
        meta["hold_s"] = f"{args.hold:g}"
    if args.margin:
        meta["margin"] = f"{args.margin:g}"
    if args.class_thresholds:
        meta["class_thresholds"] = json.dumps(_class_thresholds(args.class_thresholds, desc))
    agc = {"auto": TASK_DEFAULTS.get(desc["network"]), "on": task_agc(desc["network"]), "off": None}[args.agc]
    if args.agc_cut is not None:
        if agc is None:
            raise SystemExit("edgessm export: --agc-cut needs the level control (--agc on, or auto for this task)")
        if not args.agc_cut >= 0:
            raise SystemExit(f"edgessm export: --agc-cut is 0 dB or more, got {args.agc_cut:g}")
        agc = replace(agc, max_cut=args.agc_cut)
    if agc is not None:
        meta["input_agc"] = agc.to_json()
    k_max = getattr(net, "k_max", None)
    budgets = None
    if args.budget is not None:
        if k_max is None:
            raise SystemExit(f"edgessm export: {NOT_ELASTIC}; {args.model} has no ES-SSM layers")
        try:
            budgets = parse_budgets(args.budget, k_max)
        except ValueError as e:
            raise SystemExit(f"edgessm export: --budget: {e}") from None
    try:
        report, q = package(net, desc, args.out, name, chunk, args.int8, verification_audio(), args.tolerance, meta,
                            budgets=budgets, file_chunk=args.file_chunk, lm=args.lm, lm_decoder=lm_decoder,
                            int8_min_snr_db=args.int8_min_snr or None, log=_stderr)  # fmt: skip
    except (ValueError, RuntimeError) as e:
        raise SystemExit(f"edgessm export: {e}") from None
    at = f", budget K̄ = {k_max}" if k_max is not None else ""
    print(f"wrote {report.path} (chunk {chunk} samples = {1000 * chunk / 16000:.1f} ms, stride {stride}{at})")
    print(f"verified against PyTorch: max abs error {report.max_abs_error:.2e}")
    if report.file_graph is not None:
        r = report.file_graph
        print(f"wrote {r.path} (for files: chunk {args.file_chunk} samples); max abs error {r.max_abs_error:.2e}")
    for k, r in sorted(report.budgets.items()):
        mflops = int(r.metadata["flops_per_second"]) / 1e6
        print(f"wrote {r.path} (budget {k}: {int(r.metadata['params']):,} params, {mflops:.1f} MFLOP/s); "
              f"max abs error {r.max_abs_error:.2e}")  # fmt: skip
    if report.openvino_max_abs is not None:
        print(f"OpenVINO (CPU) runs the graph: max abs difference from ONNX Runtime {report.openvino_max_abs:.2e}")
    print("op census: " + ", ".join(f"{op} {n}" for op, n in report.op_census.items()))
    if report.unfriendly_ops:
        print("warning: ops outside the conservative NPU list: " + ", ".join(report.unfriendly_ops))
    if q:
        print(f"int8: {q['quantized']} MatMul/Conv nodes in int8, {q['kept_float']} kept float32 (state path, "
              "first block, waveform-domain transforms, SSM kernels); "
              f"output SNR vs fp32 {q.get('output_snr_db', float('nan')):.1f} dB")  # fmt: skip
        if q.get("check_snr_db") is not None:
            names = ", ".join(q["sensitive_nodes"])
            kept = f"; kept float by the sensitivity search: {names}" if names else ""
            print(f"int8 on 30 s of real speech in noise: output SNR vs fp32 {q['check_snr_db']:.1f} dB{kept}")
        if "openvino_snr_db" in q:
            snr = q["openvino_snr_db"]
            print(f"OpenVINO (CPU) runs the int8 graph: its outputs are at {snr:.1f} dB SNR from ONNX Runtime's")
        if "int8_accuracy" in q:
            print(f"int8 on {q['clips']} held-out Speech Commands test clips: accuracy {q['fp32_accuracy']:.2%} (fp32) "
                  f"-> {q['int8_accuracy']:.2%} (int8), predictions agree on {q['agreement']:.2%}")  # fmt: skip
        if "int8_wer" in q:
            print(f"int8 on {q['clips']} held-out sentences: WER {q['fp32_wer']:.1%} (fp32) -> {q['int8_wer']:.1%} "
                  f"(int8), identical transcripts {q['agreement']:.0%}")  # fmt: skip
        if "int8_si_sdr_improvement_db" in q:
            a, b = q["fp32_si_sdr_improvement_db"], q["int8_si_sdr_improvement_db"]
            print(f"int8 on {q['clips']} held-out noisy sentences: SI-SDR improvement {a:.2f} dB (fp32) -> {b:.2f} dB")
    print(f"model folder {args.out}: model.json, model.safetensors, graphs and manifest.json (sha256)")
    return 0


def _class_thresholds(path: str, desc: dict) -> dict[str, float]:
    """The chosen per-keyword thresholds of a calibration report, checked against the model's labels."""
    try:
        chosen = json.loads(Path(path).read_text())["chosen"]
    except (OSError, ValueError, KeyError) as e:
        raise SystemExit(f"edgessm export: --class-thresholds {path}: not a calibration report ({e})") from None
    labels = desc.get("labels") or []
    strange = sorted(set(chosen) - set(labels))
    if strange or not all(isinstance(v, (int, float)) and 0 < v <= 1 for v in chosen.values()):
        raise SystemExit(f"edgessm export: --class-thresholds {path} does not fit this model "
                         f"(labels {strange} unknown, or thresholds outside (0, 1])")  # fmt: skip
    return {k: float(v) for k, v in chosen.items()}


def _lm_decoder(args: argparse.Namespace) -> dict[str, float] | None:
    """``--beam``, ``--lm-weight``, ``--word-bonus``: the beam search settings shipped with ``--lm``."""
    from edgessm.runtime.registry import LM_DEFAULTS

    given = {k: getattr(args, k) for k in LM_DEFAULTS if getattr(args, k, None) is not None}
    if given and not args.lm:
        raise SystemExit("edgessm export: --beam, --lm-weight and --word-bonus are settings of a word model: add --lm")
    if given.get("beam", 1) < 1:
        raise SystemExit(f"edgessm export: --beam must be at least 1, got {given['beam']}")
    return given or None
