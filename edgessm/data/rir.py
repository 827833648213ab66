"""Room impulse responses: simulated shoebox rooms, measured RIR files, and time-aligned FFT reverb.

Simulation uses pyroomacoustics (imported only when RIRs are generated); everything else is
numpy/scipy, so reverb runs in DataLoader workers without torch. RIRs are float32 ``(K,)`` at
16 kHz, trimmed to start 2.5 ms before the direct path and normalised to unit energy
(``sum(h**2) == 1``), so reverberation keeps a clip's level roughly unchanged.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

import numpy as np
from scipy import fft as sfft

from edgessm.atomic import atomic_path

from .audio import SAMPLE_RATE, load_audio
from .corpora import audio_files

#: Bumped whenever the generation procedure changes, so stale caches are not reused.
SIM_VERSION = 1

_PRE_DIRECT_S = 0.0025  # kept before the direct path (pyroomacoustics' fractional-delay filter is 81 taps)


@dataclass
class RoomSimConfig:
    """Ranges of the shoebox-room simulation (all uniform). Lengths in metres, times in seconds.

    Attributes:
        sr: sample rate of the RIRs (Hz).
        rt60_s: target reverberation time range; the absorption is tuned (Sabine, then corrected by
            the measured decay) so each RIR's measured RT60 lands within ``rt60_tolerance`` of its target.
        room_min_m / room_max_m: (length, width, height) ranges of the room.
        wall_margin_m: minimum distance of source and microphone from every wall.
        mic_height_m / source_height_m: height ranges (clipped to the room).
        distance_m: source-to-microphone distance range.
        rt60_tolerance: relative tolerance on the measured RT60.
        tail_db: the RIR is cut where the energy still to come is this far below the total.
    """

    sr: int = SAMPLE_RATE
    rt60_s: tuple[float, float] = (0.15, 1.0)
    room_min_m: tuple[float, float, float] = (3.0, 3.0, 2.4)
    room_max_m: tuple[float, float, float] = (10.0, 8.0, 4.0)
    wall_margin_m: float = 0.5
    mic_height_m: tuple[float, float] = (0.6, 1.8)
    source_height_m: tuple[float, float] = (1.0, 1.9)
    distance_m: tuple[float, float] = (0.5, 4.0)
    rt60_tolerance: float = 0.15
    tail_db: float = 60.0


@dataclass
class SimulatedRir:
    """One simulated RIR and how it was made (``rir`` is ``(K,)`` float32, unit energy)."""

    rir: np.ndarray
    rt60_s: float
    target_rt60_s: float
    room_m: tuple[float, float, float]
    absorption: float
    source_m: tuple[float, float, float]
    mic_m: tuple[float, float, float]


def direct_path_index(rir: np.ndarray, sr: int = SAMPLE_RATE, rel: float = 0.5, window_s: float = 0.001) -> int:
    """Index of the direct-path peak of ``rir (K,)``.

    The direct path is the first arrival that is strong: the largest ``|h|`` within ``window_s``
    after the first sample reaching ``rel`` times the global peak. This is the global peak for
    simulated RIRs, and it avoids picking a strong early reflection in measured ones.
    """
    a = np.abs(np.asarray(rir, dtype=np.float64))
    if a.size == 0 or not a.max() > 0:
        raise ValueError("an impulse response must have at least one non-zero sample")
    first = int(np.argmax(a >= rel * a.max()))
    w = max(1, round(window_s * sr))
    return first + int(np.argmax(a[first : first + w]))


def rt60_schroeder(rir: np.ndarray, sr: int = SAMPLE_RATE, fit_db: tuple[float, float] = (-5.0, -25.0)) -> float:
    """Reverberation time (s) from Schroeder backward integration (a T20 estimate by default).

    The energy decay curve ``EDC(t) = sum_{k>=t} h[k]^2`` (in dB re its start) is fit with a line
    between ``fit_db[0]`` and ``fit_db[1]``; RT60 is the time that line takes to fall 60 dB.

    Raises:
        ValueError: the decay never reaches ``fit_db[1]`` (too short or silent response).
    """
    h = np.asarray(rir, dtype=np.float64)
    edc = np.cumsum((h**2)[::-1])[::-1]
    if edc.size == 0 or edc[0] <= 0:
        raise ValueError("cannot measure RT60 of a silent impulse response")
    edc_db = 10.0 * np.log10(np.maximum(edc / edc[0], 1e-300))
    hi, lo = fit_db
    start = int(np.argmax(edc_db <= hi))
    if not (edc_db <= lo).any():
        raise ValueError(f"the energy decay never reaches {lo} dB")
    stop = int(np.argmax(edc_db <= lo))
    if stop - start < 2:
        raise ValueError("the energy decay is too steep to fit")
    t = np.arange(start, stop + 1) / sr
    slope = np.polyfit(t, edc_db[start : stop + 1], 1)[0]
    return float(-60.0 / slope)


def prepare_rir(rir: np.ndarray, sr: int = SAMPLE_RATE, tail_db: float = 60.0) -> np.ndarray:
    """Trim ``rir (K,)`` to start 2.5 ms before its direct path and end where the energy still to
    come is ``tail_db`` below the total; normalise to unit energy. Returns float32 ``(K',)``."""
    h = np.asarray(rir, dtype=np.float64).reshape(-1)
    if not np.isfinite(h).all():
        raise ValueError("the impulse response contains NaN or infinite samples")
    start = max(0, direct_path_index(h, sr) - round(_PRE_DIRECT_S * sr))
    h = h[start:]
    remaining = np.cumsum((h**2)[::-1])[::-1]
    end = int(np.argmax(remaining < remaining[0] * 10.0 ** (-tail_db / 10.0))) or h.shape[0]
    h = h[:end]
    return (h / np.sqrt(np.sum(h**2))).astype(np.float32)


def reverb(x: np.ndarray, rir: np.ndarray, direct: int | None = None) -> np.ndarray:
    """Convolve ``x (..., T)`` with ``rir (K,)`` (FFT), time-aligned with the dry input.

    The output is shifted back by the RIR's direct-path index (``direct``, found with
    :func:`direct_path_index` when not given) and cut to ``T`` samples, so an impulse at ``t``
    in ``x`` keeps its direct-path peak at ``t`` and the reverberant clip lines up with the dry one.

    Returns:
        float32 ``(..., T)``.
    """
    return _aligned_convolve(x, [rir], direct)[0]


def reverb_pair(
    x: np.ndarray, rir: np.ndarray, early_s: float = 0.05, sr: int = SAMPLE_RATE, direct: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Reverberant and early-reflection versions of ``x (..., T)``, both aligned with ``x``.

    The early version uses the RIR up to ``early_s`` after the direct path (a hard cut): a common
    denoising/dereverberation target that keeps the direct sound and early reflections.

    Returns:
        ``(reverberant, early)``, float32 ``(..., T)`` each (one FFT of ``x`` serves both).
    """
    rir = np.asarray(rir, dtype=np.float64)
    d = direct_path_index(rir, sr) if direct is None else int(direct)
    early = rir[: d + max(1, round(early_s * sr))]
    rev, ear = _aligned_convolve(x, [rir, early], d)
    return rev, ear


def _aligned_convolve(x: np.ndarray, rirs: Sequence[np.ndarray], direct: int | None) -> list[np.ndarray]:
    # float32 FFTs: the outputs are float32, and the float64 transforms took twice the time for errors
    # (~1e-7 of the peak) below what float32 output keeps anyway
    x = np.asarray(x, dtype=np.float32)
    rirs = [np.asarray(h, dtype=np.float32).reshape(-1) for h in rirs]
    d = direct_path_index(rirs[0]) if direct is None else int(direct)
    t = x.shape[-1]
    n = sfft.next_fast_len(t + max(h.shape[0] for h in rirs) - 1, real=True)
    spec = sfft.rfft(x, n=n, axis=-1)
    return [sfft.irfft(spec * sfft.rfft(h, n=n), n=n, axis=-1)[..., d : d + t].astype(np.float32) for h in rirs]


# --- simulation ------------------------------------------------------------------------------------


def _pyroomacoustics():
    try:
        import pyroomacoustics
    except ImportError as e:
        raise ImportError("simulated room impulse responses need pyroomacoustics: pip install pyroomacoustics") from e
    return pyroomacoustics


def simulate_rir(rng: np.random.Generator, config: RoomSimConfig | None = None) -> SimulatedRir:
    """Simulate one shoebox-room RIR with random room, RT60, source and microphone.

    Draws an RT60 target and a room; the wall absorption comes from Sabine's formula and is then
    corrected (up to 3 simulations) because the image-source decay is usually slower than Sabine
    predicts. Draws again if the room cannot reach the target or the positions do not fit.

    Returns:
        a :class:`SimulatedRir` whose ``rir`` went through :func:`prepare_rir` and whose
        ``rt60_s`` is the Schroeder (T20) estimate.
    """
    cfg = config or RoomSimConfig()
    pra = _pyroomacoustics()
    lo, hi = cfg.rt60_s
    tol = cfg.rt60_tolerance
    for _ in range(100):
        target = float(rng.uniform(lo, hi))
        room = tuple(float(v) for v in rng.uniform(cfg.room_min_m, cfg.room_max_m))
        pos = _positions(room, rng, cfg)
        if pos is None:
            continue
        src, mic = pos
        want, best = target, None
        for _ in range(3):
            try:
                absorption, max_order = pra.inverse_sabine(want, list(room))
            except ValueError:  # the room is too large to decay that fast
                break
            shoebox = pra.ShoeBox(
                list(room), fs=cfg.sr, materials=pra.Material(float(absorption)), max_order=int(max_order)
            )
            shoebox.add_source(list(src))
            shoebox.add_microphone(list(mic))
            shoebox.compute_rir()
            h = np.asarray(shoebox.rir[0][0], dtype=np.float64)
            try:
                rt = rt60_schroeder(h, cfg.sr)
            except ValueError:
                break
            if best is None or abs(rt / target - 1) < abs(best[1] / target - 1):
                best = (h, rt, float(absorption))
            if abs(rt / target - 1) <= tol:
                break
            want *= target / rt
        if best is not None and lo * (1 - tol) <= best[1] <= hi * (1 + tol):
            h, rt, absorption = best
            return SimulatedRir(prepare_rir(h, cfg.sr, cfg.tail_db), rt, target, room, absorption, src, mic)
    raise RuntimeError(f"could not simulate a room with RT60 in {cfg.rt60_s} s within 100 draws; check {cfg}")


def _positions(room, rng: np.random.Generator, cfg: RoomSimConfig):
    m = cfg.wall_margin_m
    if min(room) <= 2 * m:
        return None

    def height(rng_range):
        return float(np.clip(rng.uniform(*rng_range), m, room[2] - m))

    mic = (float(rng.uniform(m, room[0] - m)), float(rng.uniform(m, room[1] - m)), height(cfg.mic_height_m))
    for _ in range(100):
        src = (float(rng.uniform(m, room[0] - m)), float(rng.uniform(m, room[1] - m)), height(cfg.source_height_m))
        if cfg.distance_m[0] <= float(np.linalg.norm(np.subtract(src, mic))) <= cfg.distance_m[1]:
            return src, mic
    return None


# --- banks -----------------------------------------------------------------------------------------


def default_rir_cache_dir() -> Path:
    """``$EDGESSM_CACHE/rir`` if set, else ``~/.cache/edgessm/rir``."""
    base = os.environ.get("EDGESSM_CACHE")
    return (Path(base) if base else Path.home() / ".cache" / "edgessm") / "rir"


class RirBank:
    """A set of room impulse responses (float32 ``(K_i,)``, 16 kHz, unit energy) to draw from.

    Make one with :meth:`simulated` (pyroomacoustics shoebox rooms, cached on disk),
    :meth:`from_folder` (measured RIR files, e.g. ``shared/data/rirs_real``) or from arrays, and
    join banks with ``+``.
    """

    def __init__(
        self, rirs: Sequence[np.ndarray], names: Sequence[str] | None = None, rt60_s: Sequence[float] | None = None
    ) -> None:
        """``rirs``: impulse responses, used as given apart from unit-energy normalisation."""
        if len(rirs) == 0:
            raise ValueError("a RirBank needs at least one impulse response")
        self.rirs: list[np.ndarray] = []
        for i, h in enumerate(rirs):
            h = np.asarray(h, dtype=np.float64).reshape(-1)
            energy = float(np.sum(h**2))
            if not np.isfinite(energy) or energy <= 0:
                raise ValueError(f"impulse response {i} is empty, silent or not finite")
            self.rirs.append((h / np.sqrt(energy)).astype(np.float32))
        self.names: list[str] = list(names) if names is not None else [f"rir{i}" for i in range(len(rirs))]
        self.rt60_s: np.ndarray = (
            np.asarray(rt60_s, dtype=np.float64) if rt60_s is not None else np.full(len(self.rirs), np.nan)
        )
        if len(self.names) != len(self.rirs) or self.rt60_s.shape != (len(self.rirs),):
            raise ValueError("names and rt60_s must have one entry per impulse response")
        self.directs: list[int] = [direct_path_index(h) for h in self.rirs]

    def __len__(self) -> int:
        return len(self.rirs)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.rirs[i]

    def __add__(self, other: RirBank) -> RirBank:
        return RirBank(self.rirs + other.rirs, self.names + other.names, np.concatenate([self.rt60_s, other.rt60_s]))

    def __repr__(self) -> str:
        rt = self.rt60_s[np.isfinite(self.rt60_s)]
        span = f", RT60 {rt.min():.2f}-{rt.max():.2f} s" if rt.size else ""
        return f"RirBank({len(self)} RIRs{span})"

    def sample_index(self, rng: np.random.Generator) -> int:
        return int(rng.integers(len(self.rirs)))

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """A uniformly chosen RIR ``(K,)``."""
        return self.rirs[self.sample_index(rng)]

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Reverberate ``x (..., T)`` with a random RIR of the bank (time-aligned, see :func:`reverb`)."""
        i = self.sample_index(rng)
        return reverb(x, self.rirs[i], self.directs[i])

    def apply_pair(
        self, x: np.ndarray, rng: np.random.Generator, early_s: float = 0.05
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(reverberant, early)`` versions of ``x (..., T)`` with one random RIR (see :func:`reverb_pair`)."""
        i = self.sample_index(rng)
        return reverb_pair(x, self.rirs[i], early_s, direct=self.directs[i])

    @classmethod
    def from_folder(cls, root: str | os.PathLike, sr: int = SAMPLE_RATE) -> RirBank:
        """Measured RIRs: every audio file under ``root``, mixed down, resampled to ``sr``
        (soxr), trimmed and normalised with :func:`prepare_rir`.

        Raises:
            ValueError: the folder is missing or holds no audio files.
        """
        root = Path(root).expanduser()
        files = audio_files(root)
        if not files:
            raise ValueError(f"RIR folder {root} holds no audio files (wav, flac, ...)")
        rirs, rts = [], []
        for p in files:
            h = prepare_rir(load_audio(p, sr=sr)[0], sr)
            rirs.append(h)
            try:
                rts.append(rt60_schroeder(h, sr))
            except ValueError:
                rts.append(float("nan"))
        return cls(rirs, [p.relative_to(root).as_posix() for p in files], rts)

    @classmethod
    def simulated(
        cls,
        n: int,
        seed: int = 0,
        config: RoomSimConfig | None = None,
        cache_dir: str | os.PathLike | None = None,
    ) -> RirBank:
        """``n`` shoebox-room RIRs, deterministic in ``seed``, cached as ``.npz`` in ``cache_dir``.

        RIR ``i`` is simulated with ``numpy.random.default_rng([seed, i])``, so the first ``k``
        RIRs do not depend on ``n``. The cache file is keyed by the config, the seed, the
        pyroomacoustics version and :data:`SIM_VERSION`; it holds the RIRs made so far, and a
        request for more extends it. ``cache_dir=None`` uses :func:`default_rir_cache_dir`.
        Simulating takes about 0.1-3 s per RIR on one core (longer RT60, longer time).
        """
        cfg = config or RoomSimConfig()
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        params = {"config": asdict(cfg), "seed": int(seed), "pyroomacoustics": _pra_version(), "sim": SIM_VERSION}
        key = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:16]
        path = Path(cache_dir).expanduser() if cache_dir is not None else default_rir_cache_dir()
        path = path / f"shoebox-{key}.npz"
        rirs, rts = _load_cache(path, params)
        if len(rirs) < n:
            todo = range(len(rirs), n)
            # minutes on a fresh machine (then cached): say so, and show progress where someone is watching
            print(f"simulating {len(todo)} room responses once (cached in {path})", file=sys.stderr, flush=True)
            if sys.stderr.isatty():
                from tqdm import tqdm

                todo = tqdm(todo, desc="room responses", unit="rir", leave=False)
            for i in todo:
                sim = simulate_rir(np.random.default_rng([int(seed), i]), cfg)
                rirs.append(sim.rir)
                rts.append(sim.rt60_s)
            _save_cache(path, params, rirs, rts)
        return cls(rirs[:n], [f"shoebox-{seed}-{i}" for i in range(n)], rts[:n])


def _pra_version() -> str:
    try:
        return metadata.version("pyroomacoustics")
    except metadata.PackageNotFoundError:
        _pyroomacoustics()  # raises the install hint
        raise


def _load_cache(path: Path, params: dict) -> tuple[list[np.ndarray], list[float]]:
    if not path.is_file():
        return [], []
    try:
        with np.load(path, allow_pickle=False) as z:
            if json.loads(str(z["params"])) != json.loads(json.dumps(params)):
                return [], []
            flat, offsets, rts = z["rirs"], z["offsets"], z["rt60_s"]
    except (OSError, ValueError, KeyError):  # unreadable or from another layout: regenerate
        return [], []
    return [flat[a:b].copy() for a, b in itertools.pairwise(offsets.tolist())], [float(r) for r in rts]


def _save_cache(path: Path, params: dict, rirs: list[np.ndarray], rts: list[float]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    offsets = np.cumsum([0] + [h.shape[0] for h in rirs])
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(
            f,
            rirs=np.concatenate(rirs).astype(np.float32),
            offsets=offsets,
            rt60_s=np.asarray(rts, dtype=np.float64),
            params=np.array(json.dumps(params, sort_keys=True)),
        )
