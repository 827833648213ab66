"""Stepwise ONNX export: every block kind and whole networks, several chunk sizes, vs PyTorch."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from conftest import randomize

from edgessm.deploy.onnx_export import NPU_FRIENDLY_OPS, export_onnx
from edgessm.nets import build_network
from edgessm.ssm import CentaurusBlock, StreamSequential

SMALL = {"channels": [4, 8, 16], "states": [4, 8, 16], "kinds": ["full", "bottleneck", "pointwise"], "pools": [4, 4, 4]}


def _signal(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (0.3 * rng.normal(size=n)).astype(np.float32)


@pytest.mark.parametrize("kind", ["depthwise", "pointwise", "bottleneck", "full", "rtf"])
@pytest.mark.parametrize("chunk", [1, 160])
def test_every_block_kind_exports_exactly(kind: str, chunk: int, tmp_path) -> None:
    torch.manual_seed(0)
    blocks = CentaurusBlock(kind, 1, 4, 8, pre_conv=0), CentaurusBlock(kind, 4, 4, 8, pre_conv=4)
    net = randomize(StreamSequential(*blocks), dynamics=False)
    report = export_onnx(net, tmp_path / "g.onnx", chunk, {"task": "test"}, [_signal(chunk * (4000 // chunk))])
    assert report.max_abs_error < 1e-4
    assert not report.unfriendly_ops, report.unfriendly_ops
    assert "DFT" not in report.op_census and "Loop" not in report.op_census and "Einsum" not in report.op_census


@pytest.mark.parametrize("chunk", [1, 3])
def test_step_graphs_avoid_the_ops_onnxruntime_runs_slowly(chunk: int, tmp_path) -> None:
    """The live graphs' shapes: the depthwise pre-convolution is never a grouped 1-D Conv (a weighted sum at
    one frame, a 2-D depthwise Conv otherwise) and a one-frame LayerNorm needs no transposes (the filterbank
    front's pooling is a ReduceMean: tests/test_filterbank.py); the graph stays exact."""
    torch.manual_seed(0)
    net = randomize(StreamSequential(CentaurusBlock("pointwise", 1, 6, 4, pre_conv=4)), dynamics=False)
    report = export_onnx(net, tmp_path / "g.onnx", chunk, {"task": "test"}, [_signal(chunk * 200)])
    kernels = [list(next(a.ints for a in n.attribute if a.name == "kernel_shape"))
               for n in onnx.load(str(tmp_path / "g.onnx")).graph.node if n.op_type == "Conv"]  # fmt: skip
    assert ([1, 4] in kernels) == (chunk > 1)  # the 2-D depthwise Conv, only for several frames
    assert all(k == [1] for k in kernels if len(k) == 1)  # 1-D Convs are 1x1 only (the grouped state products)
    assert ("Transpose" in report.op_census) == (chunk > 1)
    assert report.max_abs_error < 1e-4


@pytest.mark.parametrize("chunk", [64, 256, 1024])
def test_keyword_spotter_exports_at_several_chunk_sizes(chunk: int, tmp_path) -> None:
    torch.manual_seed(0)
    # dropout: the exporter must leave (and verify) the model in eval mode
    net = randomize(build_network("kws", **SMALL, window=12, dropout=0.5), seed=1)
    report = export_onnx(net, tmp_path / "kws.onnx", chunk, {"task": "kws", "labels": ["a", "b"]}, [_signal(64 * 96)])
    assert not net.training and not any(m.training for m in net.modules())
    assert report.max_abs_error < 1e-4
    proto = onnx.load(str(tmp_path / "kws.onnx"))
    meta = {p.key: p.value for p in proto.metadata_props}
    assert meta["chunk"] == str(chunk) and meta["stride"] == "64" and meta["task"] == "kws"
    assert len(proto.graph.input) == 1 + len(net.state_shapes())
    assert all(d.dim_value > 0 for i in proto.graph.input for d in i.type.tensor_type.shape.dim)  # static shapes
    assert set(report.op_census) <= NPU_FRIENDLY_OPS


def test_denoiser_and_recognizer_export(tmp_path) -> None:
    torch.manual_seed(0)
    den = randomize(build_network("denoise", **SMALL, bottleneck_states=8, n_bottleneck=1), seed=2)
    assert export_onnx(den, tmp_path / "d.onnx", 128, {"task": "denoise"}, [_signal(64 * 60)]).max_abs_error < 1e-4
    asr = randomize(build_network("asr", **{**SMALL, "pools": [4, 4, 20]}), seed=3)
    assert export_onnx(asr, tmp_path / "a.onnx", 320, {"task": "asr"}, [_signal(320 * 20)]).max_abs_error < 1e-4


def test_export_refuses_bad_chunks_and_mismatches(tmp_path) -> None:
    net = build_network("kws", **SMALL, window=12)
    with pytest.raises(ValueError, match="multiple of the network's total stride 64"):
        export_onnx(net, tmp_path / "x.onnx", 100)
    with pytest.raises(RuntimeError, match="disagrees"):
        export_onnx(net, tmp_path / "x.onnx", 64, verify_inputs=[_signal(64 * 10)], tolerance=-1.0)
    assert not (tmp_path / "x.onnx").exists()  # nothing written when verification fails


def test_int8_graph_keeps_the_state_path_float(tmp_path) -> None:
    import onnxruntime as ort

    from edgessm.deploy.onnx_export import run_stream
    from edgessm.deploy.quantize import (
        QUANTIZED_OPS,
        full_rate_nodes,
        quantize_int8,
        ssm_kernel_nodes,
        state_path_nodes,
    )

    torch.manual_seed(0)
    net = randomize(build_network("kws", **SMALL, window=12, dropout=0.0), seed=1, dynamics=False)
    export_onnx(net, tmp_path / "f.onnx", 128, {"task": "kws"})
    audio = [_signal(128 * 40, seed=s) for s in range(3)]
    kept = quantize_int8(tmp_path / "f.onnx", tmp_path / "q.onnx", audio).kept
    q = onnx.load(str(tmp_path / "q.onnx"))
    assert {p.key: p.value for p in q.metadata_props}["quantization"].startswith("int8")
    state_inputs = {i.name for i in q.graph.input if i.name.startswith("in.")}
    readers = [n for n in q.graph.node if state_inputs & set(n.input)]
    assert readers and not any(n.op_type == "QuantizeLinear" for n in readers)  # state stays float
    fmodel = onnx.load(str(tmp_path / "f.onnx"))
    first = full_rate_nodes(fmodel)
    ops = {n.name for n in fmodel.graph.node if n.op_type in QUANTIZED_OPS}
    assert first and ssm_kernel_nodes(fmodel)
    assert set(kept) == (set(state_path_nodes(fmodel)) | set(first) | set(ssm_kernel_nodes(fmodel))) & ops
    assert set(kept) < ops  # the projections and the head run in int8
    pool = next(i for i, n in enumerate(fmodel.graph.node) if n.op_type == "ReduceMean")
    order = {n.name: i for i, n in enumerate(fmodel.graph.node)}
    assert all(order[name] < pool for name in first)  # only the block that runs on the raw waveform
    producer = {o: n.op_type for n in q.graph.node for o in n.output}
    first_nodes = [n for n in q.graph.node if n.name in first]
    assert first_nodes and all(producer.get(i) != "DequantizeLinear" for n in first_nodes for i in n.input)
    assert any(n.op_type == "DequantizeLinear" for n in q.graph.node)
    x = _signal(128 * 30, seed=9)
    sf = ort.InferenceSession(str(tmp_path / "f.onnx"), providers=["CPUExecutionProvider"])
    sq = ort.InferenceSession(str(tmp_path / "q.onnx"), providers=["CPUExecutionProvider"])
    f, i8 = run_stream(sf, x, 128), run_stream(sq, x, 128)
    assert f.shape == i8.shape and np.isfinite(i8).all()
    assert np.corrcoef(f.ravel(), i8.ravel())[0, 1] > 0.9


def _hide_an_outlier_channel(model, name: str, factor: float = 3e3) -> None:
    """The same function with one input channel of projection ``name`` (``W @ x``, ``W`` a Constant)
    ``factor`` times louder and its weight column that much smaller: ``x``'s one per-tensor int8 scale
    then has to span the loud channel, and the others drown (what one ES block's spectral mixing did)."""
    from onnx import helper, numpy_helper

    node = next(n for n in model.graph.node if n.name == name)
    const = next(n for n in model.graph.node if n.op_type == "Constant" and n.output[0] == node.input[0])
    w = numpy_helper.to_array(const.attribute[0].t).copy()
    w[:, 0] /= factor
    const.attribute[0].t.CopyFrom(numpy_helper.from_array(w))
    scale = np.ones((w.shape[1], 1), np.float32)
    scale[0] = factor
    model.graph.initializer.append(numpy_helper.from_array(scale, name + "/outlier"))
    loud = name + "/loud_input"
    at = list(model.graph.node).index(node)
    model.graph.node.insert(at, helper.make_node("Mul", [node.input[1], name + "/outlier"], [loud], name=loud))
    node.input[1] = loud


def test_int8_sensitivity_search_keeps_the_projection_that_ruins_the_graph_float(tmp_path) -> None:
    from edgessm.deploy.quantize import quantize_int8

    torch.manual_seed(0)
    net = randomize(build_network("kws", **SMALL, window=12, dropout=0.0), seed=1, dynamics=False)
    export_onnx(net, tmp_path / "f.onnx", 128, {"task": "kws"})
    model = onnx.load(str(tmp_path / "f.onnx"))
    _hide_an_outlier_channel(model, "/MatMul_7")
    onnx.save(model, str(tmp_path / "f.onnx"))
    audio = [_signal(128 * 40, seed=s) for s in range(4)]
    check = [_signal(128 * 30, seed=9)]
    plain = quantize_int8(tmp_path / "f.onnx", tmp_path / "q0.onnx", audio, check_audio=check)
    assert plain.snr_db < 15 and not plain.sensitive and "/MatMul_7" in plain.quantized
    lines: list[str] = []
    plan = quantize_int8(tmp_path / "f.onnx", tmp_path / "q.onnx", audio, check_audio=check, min_snr_db=25.0,
                         log=lines.append)  # fmt: skip
    assert plan.sensitive[0] == "/MatMul_7" and "/MatMul_7" in plan.kept and plan.snr_db >= 25.0
    assert len(plan.quantized) == len(plain.quantized) - len(plan.sensitive)  # the rest stays int8
    assert "/MatMul_7" in lines[0] and "kept float" in lines[1]
    meta = {p.key: p.value for p in onnx.load(str(tmp_path / "q.onnx")).metadata_props}
    assert "sensitive to int8 (/MatMul_7" in meta["quantization"] and meta["task"] == "kws"
    again = quantize_int8(tmp_path / "f.onnx", tmp_path / "q2.onnx", audio, check_audio=check,
                          keep_float=plan.sensitive)  # fmt: skip
    assert again.sensitive == plan.sensitive and abs(again.snr_db - plan.snr_db) < 1e-6  # another budget's start


def test_openvino_runs_the_same_graph(tmp_path) -> None:
    pytest.importorskip("openvino", reason="openvino is part of the training/export extra")
    from edgessm.deploy.portability import compare_runtimes

    torch.manual_seed(0)
    net = randomize(build_network("kws", **SMALL, window=12, dropout=0.0), seed=1, dynamics=False)
    export_onnx(net, tmp_path / "f.onnx", 128, {"task": "kws"})
    assert compare_runtimes(tmp_path / "f.onnx", _signal(128 * 30)) < 1e-4


def test_model_folder_has_verified_graphs_weights_and_a_hash_manifest(tmp_path, monkeypatch) -> None:
    import json

    from edgessm.deploy import package as pkg
    from edgessm.deploy.load import load_trained
    from edgessm.runtime import registry

    monkeypatch.setattr(pkg, "shared_data_dir", lambda required=False: None)  # no held-out set needed here
    torch.manual_seed(0)
    net = randomize(build_network("kws", **SMALL, window=12, dropout=0.0), seed=1, dynamics=False).eval()
    desc = {"network": "kws", "config": {**SMALL, "window": 12, "dropout": 0.0}, "labels": [f"w{i}" for i in range(35)]}
    folder = tmp_path / "candidate"  # a folder named otherwise than its graphs (`export --name kws9`)
    calib = [_signal(128 * 40, seed=s) for s in range(2)]
    report, q = pkg.package(net, desc, folder, "kws9", 128, int8=True, verify_audio=[_signal(128 * 50, seed=3)],
                            metadata={"threshold": "0.8"}, calibration=calib)  # fmt: skip
    assert report.max_abs_error < 1e-4 and q["kept_float"] > 0 and q["output_snr_db"] > 10
    manifest = json.loads((folder / "manifest.json").read_text())
    assert set(manifest["files"]) == {"kws9.onnx", "kws9.int8.onnx", "model.json", "model.safetensors"}
    assert all(registry.sha256(folder / f) == h for f, h in manifest["files"].items())
    # the weights reload into the same network; the graph carries the default threshold
    net2, desc2 = load_trained(folder)
    assert desc2["labels"] == desc["labels"]
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), net2.state_dict().values(), strict=True))
    meta = {p.key: p.value for p in onnx.load(str(folder / "kws9.onnx")).metadata_props}
    assert meta["threshold"] == "0.8" and meta["weights_sha256"] == manifest["weights_sha256"]
    # the folder resolves to the graphs its manifest names
    assert registry.resolve_graph(folder) == folder / "kws9.onnx"
    assert registry.resolve_graph(folder, int8=True) == folder / "kws9.int8.onnx"
    # an altered graph is refused by the runtime
    registry.resolve_graph(folder / "kws9.int8.onnx")
    data = bytearray((folder / "kws9.int8.onnx").read_bytes())
    data[-10] ^= 0xFF
    (folder / "kws9.int8.onnx").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="sha256"):
        registry.resolve_graph(folder / "kws9.int8.onnx")


def test_int8_denoiser_quality_is_measured_on_held_out_mixtures(tmp_path, monkeypatch) -> None:
    from edgessm.data.corpora import shared_data_dir
    from edgessm.deploy import package as pkg

    if shared_data_dir(required=False) is None:
        pytest.skip("shared/data not present")
    monkeypatch.setattr(pkg, "shared_data_dir", lambda required=False: None)  # measured below on fewer clips
    torch.manual_seed(0)
    cfg = {**SMALL, "bottleneck_states": 8, "n_bottleneck": 1}
    den = randomize(build_network("denoise", **cfg), seed=2).eval()
    calib = [_signal(256 * 40, seed=s) for s in range(2)]
    pkg.package(den, {"network": "denoise", "config": cfg}, tmp_path / "dn", "dn", 256, int8=True, calibration=calib)
    q = pkg.denoise_int8_quality(tmp_path / "dn" / "dn.onnx", tmp_path / "dn" / "dn.int8.onnx", clips=3)
    assert q["clips"] == 3
    assert np.isfinite(q["fp32_si_sdr_improvement_db"]) and np.isfinite(q["int8_si_sdr_improvement_db"])
    assert q["fp32_si_sdr_improvement_db"] != q["int8_si_sdr_improvement_db"]  # two graphs really ran


def test_prepare_for_int8_keeps_the_function_and_makes_weights_per_channel(tmp_path) -> None:
    import onnxruntime as ort

    from edgessm.deploy.onnx_export import run_stream
    from edgessm.deploy.quantize import prepare_for_int8

    torch.manual_seed(0)
    net = randomize(build_network("kws", **SMALL, window=12, dropout=0.0), seed=1, dynamics=False)
    export_onnx(net, tmp_path / "f.onnx", 128, {"task": "kws"})
    model = onnx.load(str(tmp_path / "f.onnx"))
    prepared = prepare_for_int8(model)
    onnx.checker.check_model(prepared)
    inits = {i.name for i in prepared.graph.initializer}
    matmuls = [n for n in prepared.graph.node if n.op_type == "MatMul"]
    rescaled = [n for n in matmuls if n.output[0].endswith("/row_normalized")]
    assert rescaled and all(n.input[0] in inits for n in rescaled)  # left weights, rows normalised
    consts = {n.output[0] for n in prepared.graph.node if n.op_type == "Constant"}
    assert not any(i in consts for n in matmuls for i in n.input)  # every weight is an initializer
    onnx.save(prepared, str(tmp_path / "p.onnx"))
    x = _signal(128 * 20, seed=3)
    a = run_stream(ort.InferenceSession(str(tmp_path / "f.onnx"), providers=["CPUExecutionProvider"]), x, 128)
    b = run_stream(ort.InferenceSession(str(tmp_path / "p.onnx"), providers=["CPUExecutionProvider"]), x, 128)
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_full_rate_nodes_of_an_hourglass_are_its_waveform_ends(tmp_path) -> None:
    from edgessm.deploy.quantize import QUANTIZED_OPS, full_rate_nodes

    den = randomize(build_network("denoise", **SMALL, bottleneck_states=8, n_bottleneck=1), seed=2).eval()
    export_onnx(den, tmp_path / "d.onnx", 128, {"task": "denoise"})
    nodes = list(onnx.load(str(tmp_path / "d.onnx")).graph.node)
    order = {n.name: i for i, n in enumerate(nodes)}
    strided = [i for i, n in enumerate(nodes) if n.op_type in ("Conv", "ConvTranspose") and
               any(a.name == "strides" and max(a.ints) > 1 for a in n.attribute)]  # fmt: skip
    first_down, last_up = strided[0], strided[-1]
    assert nodes[first_down].op_type == "Conv" and nodes[last_up].op_type == "ConvTranspose"
    picked = full_rate_nodes(onnx.load(str(tmp_path / "d.onnx")))
    assert nodes[first_down].name in picked and nodes[last_up].name in picked
    assert all(order[p] <= first_down or order[p] >= last_up for p in picked)
    full_rate = [
        n.name for i, n in enumerate(nodes) if (i <= first_down or i >= last_up) and n.op_type in QUANTIZED_OPS
    ]
    assert picked == full_rate


def test_export_checks_the_graphs_on_openvino(tmp_path, monkeypatch) -> None:
    pytest.importorskip("openvino", reason="openvino is part of the training/export extra")
    from edgessm.deploy import package as pkg

    monkeypatch.setattr(pkg, "shared_data_dir", lambda required=False: None)  # no held-out accuracy run here
    torch.manual_seed(0)
    net = randomize(build_network("kws", **SMALL, window=12, dropout=0.0), seed=1, dynamics=False).eval()
    audio = [_signal(128 * 40, seed=s) for s in range(2)]
    desc = {"network": "kws", "config": {**SMALL, "window": 12, "dropout": 0.0}}
    report, q = pkg.package(net, desc, tmp_path / "k", "k", 128, int8=True, verify_audio=audio, calibration=audio)
    assert report.openvino_max_abs is not None and report.openvino_max_abs < 1e-4
    assert 10.0 < q["openvino_snr_db"] < 200.0  # int8 kernels differ between runtimes, but not by much


def test_int8_spectral_denoiser_keeps_its_dft_float_and_tracks_the_float_graph(tmp_path) -> None:
    """The analysis DFT, the band energies before the log and the inverse DFT stay float32: audio and
    powers do not fit 8 bits per tensor (quantized, the shipped denoiser's output was at -28 dB SNR
    from the float graph's)."""
    import onnxruntime as ort

    from edgessm.deploy.onnx_export import run_stream
    from edgessm.deploy.quantize import quantize_int8, waveform_domain_nodes

    torch.manual_seed(0)
    cfg = {"arch": "spectral", "hop": 32, "bands": 8, "fine_bins": 4, "channels": [8, 8], "states": [4, 4],
           "kinds": ["bottleneck", "pointwise"]}  # fmt: skip
    net = randomize(build_network("denoise", **cfg), seed=2, dynamics=False).eval()
    export_onnx(net, tmp_path / "f.onnx", 64, {"task": "denoise"})
    model = onnx.load(str(tmp_path / "f.onnx"))
    consts = {n.output[0]: onnx.numpy_helper.to_array(n.attribute[0].t) for n in model.graph.node
              if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"}  # fmt: skip
    dft = {n.name for n in model.graph.node if n.op_type == "MatMul"
           and any(i in consts and consts[i].shape in {(64, 66), (66, 64), (66, 12)} for i in n.input)}  # fmt: skip
    assert len(dft) == 3 and dft <= set(waveform_domain_nodes(model))  # analysis, synthesis, powers (bands + fine)
    speech = [0.1 * _signal(64 * 60, seed=s) for s in range(3)]
    plan = quantize_int8(tmp_path / "f.onnx", tmp_path / "q.onnx", speech)
    assert plan.quantized and dft <= set(plan.kept)
    x = 0.1 * _signal(64 * 40, seed=7)
    f, q = (run_stream(ort.InferenceSession(str(tmp_path / p), providers=["CPUExecutionProvider"]), x, 64)
            for p in ("f.onnx", "q.onnx"))  # fmt: skip
    assert 10 * np.log10(np.sum(f**2) / np.sum((f - q) ** 2)) > 10
