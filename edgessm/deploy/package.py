"""A model folder: everything the runtime and an embedded app need for one trained model.

    models/<name>/
      model.json          network kind, config, labels, where the weights came from
      model.safetensors   the weights (to re-export at another chunk size, or fine-tune)
      <name>.onnx         stepwise fp32 graph, verified against the PyTorch forward
      <name>.int8.onnx    int8 QDQ graph with the state path in float32 (``int8=True``)
      <name>.k<K>.onnx    elastic (ES-SSM) models: the graph at compute budget K (``<name>.onnx`` is at K̄),
                          with ``<name>.k<K>.int8.onnx`` beside it when ``int8=True``
      <name>.c<N>.onnx    optional file graph: the same network for N-sample chunks (``file_chunk``), which
                          commands processing files use (fewer, larger calls: the per-call cost of a
                          graph's hundreds of nodes is paid less often); its int8 twin beside it
      manifest.json       sha256 of each file above; the runtime refuses a graph that does not match;
                          ``budgets`` maps each budget to its graph, ``k_max`` is K̄; ``file_graph`` and
                          ``file_chunk`` name the file graph

Calibration audio for int8 is real speech that no evaluation uses (Speech Commands training clips
and read sentences) mixed with noise; the int8 graph's quality change is measured on held-out data.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from edgessm import __version__
from edgessm.atomic import atomic_path, write_text
from edgessm.data.corpora import shared_data_dir
from edgessm.runtime.registry import sha256
from edgessm.runtime.session import StepModel

from .onnx_export import ExportReport, export_onnx
from .portability import openvino_available, runtime_agreement
from .quantize import INT8_MIN_SNR_DB, quantize_int8


def calibration_audio(seconds: float = 300.0, seed: int = 0) -> list[np.ndarray]:
    """Ten-second streams of real training speech (SC training words, read sentences) over noise.

    Five minutes by default: the activation ranges are min/max over what the calibration sees, and with one
    minute (400 chunks) they depended on the draw: kws35-es's int8 graph agreed with fp32 on 89-92% of 400
    held-out clips over three draws, with five minutes (3,000 chunks) on 92.5-94%."""
    from edgessm.data.audio import load_audio
    from edgessm.data.corpora import shared_noises, shared_read_speech, shared_sc_train

    rng = np.random.default_rng(seed)
    words = shared_sc_train()
    sentences = shared_read_speech()
    noises = [load_audio(p)[0] for p in shared_noises()]
    out = []
    for _ in range(max(1, int(seconds // 10))):
        x = np.zeros(160000, np.float32)
        pos = 0
        while pos < len(x):
            source = sentences if rng.random() < 0.3 else words
            clip = source[int(rng.integers(len(source)))]
            y = load_audio(clip.path)[0][: len(x) - pos] * 10 ** (rng.uniform(-10, 6) / 20)
            x[pos : pos + len(y)] += y
            pos += len(y) + int(rng.uniform(0.1, 1.0) * 16000)
        n = noises[int(rng.integers(len(noises)))]
        start = int(rng.integers(0, max(1, len(n) - len(x))))
        x += np.resize(n[start:], len(x)) * 10 ** (rng.uniform(-30, -10) / 20)
        out.append(np.clip(x, -1, 1))
    return out


def kws_int8_quality(fp32: Path, int8: Path, clips: int = 400, seed: int = 0) -> dict[str, float]:
    """Clip accuracy of both graphs on a fixed sample of the Speech Commands test clips (held out)."""
    from edgessm.data.audio import load_audio
    from edgessm.data.corpora import shared_sc_test
    from edgessm.eval.kws import clip_logits

    pool = shared_sc_test()
    pick = np.random.default_rng(seed).permutation(len(pool))[:clips]
    a, b = StepModel(fp32), StepModel(int8)
    labels = a.info.labels
    right_a = right_b = agree = 0
    for i in pick:
        clip = pool[int(i)]
        x = load_audio(clip.path)[0]
        pa, pb = labels[int(np.argmax(clip_logits(a, x)))], labels[int(np.argmax(clip_logits(b, x)))]
        ref = clip.text if clip.text in labels else "_unknown_"
        right_a += pa == ref
        right_b += pb == ref
        agree += pa == pb
    n = len(pick)
    return {"clips": n, "fp32_accuracy": right_a / n, "int8_accuracy": right_b / n, "agreement": agree / n}


def denoise_int8_quality(fp32: Path, int8: Path, clips: int = 24, seed: int = 0) -> dict[str, float]:
    """SI-SDR improvement of both graphs on held-out mixtures: validation-split read sentences over
    the noise recording the denoising recipe holds out of training, at 0, 5 and 10 dB SNR."""
    from edgessm.data.audio import load_audio
    from edgessm.data.corpora import shared_noises, shared_read_speech
    from edgessm.data.manifest import assign_split
    from edgessm.eval.denoise import graph_system
    from edgessm.eval.metrics import si_sdr

    rng = np.random.default_rng(seed)
    speech = [c for c in shared_read_speech() if assign_split(c) == "validation"][:clips]
    noise = load_audio(next(p for p in shared_noises() if p.name == "running_tap.wav"))[0]
    a, b = StepModel(fp32), StepModel(int8)
    run_a, run_b = graph_system(a), graph_system(b)
    gains_a, gains_b = [], []
    for k, clip in enumerate(speech):
        clean = load_audio(clip.path)[0]
        clean = clean[: len(clean) - len(clean) % a.info.chunk]
        start = int(rng.integers(0, len(noise) - len(clean)))
        n = noise[start : start + len(clean)]
        snr = (0.0, 5.0, 10.0)[k % 3]
        noisy = clean + n * np.sqrt(np.mean(clean**2) / (np.mean(n**2) + 1e-12)) * 10 ** (-snr / 20)
        base = si_sdr(noisy, clean)
        gains_a.append(si_sdr(run_a(noisy), clean) - base)  # streamed as `edgessm denoise` does: aligned
        gains_b.append(si_sdr(run_b(noisy), clean) - base)
    return {"clips": len(speech), "fp32_si_sdr_improvement_db": float(np.mean(gains_a)),
            "int8_si_sdr_improvement_db": float(np.mean(gains_b))}  # fmt: skip


def asr_int8_quality(fp32: Path, int8: Path, clips: int = 40) -> dict[str, float]:
    """WER of both graphs (streamed, greedy) on the held-out read sentences and synthetic test sentences."""
    from edgessm.eval.asr import GraphRecognizer, SetResult, test_set

    utts = []
    for name in ("real-sentences", "synth-sentences"):
        try:
            utts += test_set(name, limit=clips // 2)
        except (FileNotFoundError, ValueError):
            continue
    a, b = GraphRecognizer(StepModel(fp32)), GraphRecognizer(StepModel(int8))
    ra, rb = SetResult("fp32", "held-out"), SetResult("int8", "held-out")
    agree = 0
    for u in utts:
        ha, hb = a(u.audio), b(u.audio)
        ra.add(u.text, ha, 0.0, 0.0)
        rb.add(u.text, hb, 0.0, 0.0)
        agree += ha == hb
    n = max(1, len(utts))
    return {"clips": len(utts), "fp32_wer": ra.wer, "int8_wer": rb.wer, "agreement": agree / n}


def output_snr_db(fp32: Path, int8: Path, audio: np.ndarray) -> float:
    """How close the int8 graph's outputs stay to the fp32 graph's on ``audio`` (dB)."""
    from edgessm.eval.metrics import snr_db

    return snr_db(StepModel(fp32).process(audio), StepModel(int8).process(audio))


def write_manifest(folder: Path, files: list[str], extra: dict[str, Any]) -> Path:
    manifest = {
        "name": folder.name,
        "edgessm_version": __version__,
        **extra,
        "files": {f: sha256(folder / f) for f in sorted(files)},
    }
    path = folder / "manifest.json"
    write_text(path, json.dumps(manifest, indent=1) + "\n")
    return path


def package(net: nn.Module, desc: dict[str, Any], out: str | os.PathLike, name: str, chunk: int,
            int8: bool = False, verify_audio: list[np.ndarray] | None = None, tolerance: float = 1e-4,
            metadata: dict[str, Any] | None = None, calibration: list[np.ndarray] | None = None,
            budgets: list[int] | None = None,
            file_chunk: int | None = None,
            lm: str | os.PathLike | None = None,
            lm_decoder: dict[str, float] | None = None,
            int8_min_snr_db: float | None = INT8_MIN_SNR_DB,
            log=None) -> tuple[ExportReport, dict[str, Any]]:  # fmt: skip
    """Write the model folder ``out`` (see the module docstring); returns the fp32 export report and
    the int8 report (nodes kept float, quality change) or ``{}``. ``metadata`` adds graph metadata
    (e.g. a keyword spotter's default ``threshold``); ``calibration`` replaces :func:`calibration_audio`.
    The held-out KWS accuracy check runs when the shared data is present.

    Elastic (ES-SSM) networks: ``name.onnx`` runs at the full budget ``K̄`` and every other budget of
    ``budgets`` gets its own graph ``name.kK.onnx``, each verified against PyTorch at its budget
    (``report.budgets`` holds their reports); graph metadata ``budget`` and ``k_max``. Refused (``ValueError``)
    for a network without ES-SSM layers.

    ``file_chunk``: also write ``name.c<file_chunk>.onnx``, the graph for files (at ``K̄``), verified
    against PyTorch like the others (``report.file_graph`` holds its report).

    ``lm`` (recognizers): a word model (``edgessm lm``) copied in as ``lm.npz`` and named in the manifest
    (``"lm"``): ``edgessm transcribe`` decodes files with it by beam search unless told ``--lm none``;
    ``lm_decoder`` (``beam``, ``lm_weight``, ``word_bonus``): that search's settings, recorded as the manifest's
    ``"lm_decoder"`` (transcribe's defaults for this model).

    ``int8_min_snr_db``: an int8 graph whose outputs fall further than this from its float graph's (on 30 s of
    real speech in noise apart from the calibration's) keeps its most sensitive projections float
    (:func:`~edgessm.deploy.quantize.quantize_int8`); ``None``: no search. The other budgets' graphs start
    from the projections kept for ``K̄``'s. ``log(str)`` hears about it."""
    from safetensors.torch import save_file

    if hasattr(net, "without_training_heads"):  # e.g. a recognizer's distillation head: not shipped
        desc = {**desc, "config": {**desc["config"], **net.without_training_heads()}}
    k_max = getattr(net, "k_max", None)
    if lm is not None and desc["network"] != "asr":
        raise ValueError(f"--lm is for recognizers; this is a {desc['network']} model")
    if lm is not None and not Path(lm).expanduser().is_file():
        raise ValueError(f"--lm {lm}: no such file (build one: edgessm lm --help)")
    if budgets and k_max is None:
        raise ValueError(f"--budget applies to ES-SSM models only; this {desc['network']} model has no ES-SSM layers")
    bad = [k for k in budgets or [] if not 1 <= k <= k_max]
    if bad:
        raise ValueError(f"budget {bad[0]} is outside 1..{k_max} (the model's K̄)")
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"task": desc["network"], "labels": desc.get("labels", []), "model_name": name, **(metadata or {})}
    if desc.get("warmup_samples"):  # streams start from the state after this much silence (trained that way)
        meta["warmup_samples"] = str(desc["warmup_samples"])
    graph = folder / f"{name}.onnx"
    graphs = {graph: k_max}  # graph -> budget (None: not elastic)
    graphs.update({folder / f"{name}.k{k}.onnx": k for k in sorted(set(budgets or [])) if k != k_max})
    if file_chunk is not None and (file_chunk <= chunk or file_chunk % chunk):
        raise ValueError(f"the file chunk ({file_chunk}) must be a multiple of the chunk ({chunk}) and larger")
    file_graph = folder / f"{name}.c{file_chunk}.onnx" if file_chunk else None
    reports: dict[Path, ExportReport] = {}
    try:
        for path, k in graphs.items():
            extra = {}
            if k is not None:
                net.set_budget(k)
                extra = {"budget": str(k), "k_max": str(k_max)}
            reports[path] = export_onnx(net, path, chunk, {**meta, **extra}, verify_audio, tolerance)
    finally:
        if k_max is not None:
            net.set_budget(k_max)
    report = reports[graph]
    report.budgets = {graphs[p]: r for p, r in reports.items() if p != graph}
    if file_graph is not None:
        extra = {"budget": str(k_max), "k_max": str(k_max)} if k_max is not None else {}
        report.file_graph = export_onnx(net, file_graph, file_chunk, {**meta, **extra}, verify_audio, tolerance)
        graphs[file_graph] = k_max
    files = [p.name for p in graphs] + ["model.json", "model.safetensors"]
    tensors = {k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
    with atomic_path(folder / "model.safetensors") as tmp:
        save_file(tensors, str(tmp))
    write_text(folder / "model.json", json.dumps(desc, indent=1) + "\n")
    speech = verify_audio[-1][: len(verify_audio[-1]) - len(verify_audio[-1]) % chunk] if verify_audio else None
    if speech is not None and openvino_available():  # the second runtime (issue: portability)
        report.openvino_max_abs, _ = runtime_agreement(graph, speech)
    q: dict[str, Any] = {}
    if int8:
        calib = calibration if calibration is not None else calibration_audio()
        check = calibration_audio(30.0, seed=1) if calibration is None else calib[-3:]
        qpath = folder / f"{name}.int8.onnx"
        sensitive: tuple[str, ...] = ()
        for path in graphs:  # every budget graph gets its int8 twin; the quality checks below use K̄'s
            qp = path.with_name(path.name[: -len(".onnx")] + ".int8.onnx")
            plan = quantize_int8(path, qp, calib, check_audio=check, min_snr_db=int8_min_snr_db,
                                 keep_float=sensitive, log=log)  # fmt: skip
            files.append(qp.name)
            if path == graph:
                sensitive = plan.sensitive
                q = {"quantized": len(plan.quantized), "kept_float": len(plan.kept), "kept_float_nodes": plan.kept,
                     "sensitive_nodes": list(plan.sensitive), "check_snr_db": plan.snr_db}  # fmt: skip
        if verify_audio:
            q["output_snr_db"] = min(output_snr_db(graph, qpath, x[: len(x) - len(x) % chunk]) for x in verify_audio)
        if speech is not None and openvino_available():
            q["openvino_snr_db"] = runtime_agreement(qpath, speech)[1]
        if shared_data_dir(required=False) is not None:
            if desc["network"] == "kws":
                q.update(kws_int8_quality(graph, qpath))
            elif desc["network"] == "denoise":
                q.update(denoise_int8_quality(graph, qpath))
            elif desc["network"] == "asr":
                q.update(asr_int8_quality(graph, qpath))
    digest = hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()[:16]
    extra = {"weights_sha256": report.metadata["weights_sha256"], "description_sha256": digest, "chunk": chunk,
             "graph": f"{name}.onnx"}  # fmt: skip
    if k_max is not None:
        by_budget = sorted(((k, p) for p, k in graphs.items() if p != file_graph), key=lambda i: i[0])
        extra.update(k_max=k_max, budgets={str(k): p.name for k, p in by_budget})
    if file_graph is not None:
        extra.update(file_graph=file_graph.name, file_chunk=file_chunk)
    if lm is not None:
        with atomic_path(folder / "lm.npz") as tmp:
            shutil.copyfile(Path(lm).expanduser(), tmp)
        files.append("lm.npz")
        extra["lm"] = "lm.npz"
        if lm_decoder:
            extra["lm_decoder"] = dict(lm_decoder)
    write_manifest(folder, files, extra)
    return report, q
