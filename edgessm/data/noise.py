"""Noise sources for augmentation: real recordings (:class:`NoiseBank`), colored noise, babble,
procedural music, mains hum with clicks, tonal events (sirens, beeps, chirps, calls) and drifting
ambience (wind, rain, fans).

numpy only (no torch), so it runs in DataLoader workers. Every random choice comes from the
``numpy.random.Generator`` passed in: the same generator state gives the same samples.
Audio is float32 mono ``(T,)`` at 16 kHz unless said otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from .audio import SAMPLE_RATE, load_audio
from .corpora import audio_files

#: Spectral exponents β of the named noise colors: the power spectral density goes as ``f**β``.
COLORS: dict[str, float] = {"white": 0.0, "pink": -1.0, "brown": -2.0, "blue": 1.0, "violet": 2.0}

#: A source of speech for babble: a list of clips, or a callable that returns one clip per call.
SpeechSource = Sequence[np.ndarray] | Callable[[np.random.Generator], np.ndarray]

_SILENT_POWER = 1e-10  # mean square below this (-100 dBFS) counts as silence


def colored_noise(
    length: int, rng: np.random.Generator, exponent: float | str = "white", level_dbfs: float = -20.0
) -> np.ndarray:
    """Gaussian noise whose power spectral density goes as ``f**exponent``.

    Args:
        length: number of samples (the output has exactly this many).
        rng: the random generator.
        exponent: spectral exponent β (0 white, -1 pink, -2 brown, +1 blue, +2 violet) or one of
            those color names. Any real β works; the DC bin is set to zero.
        level_dbfs: RMS level of the result in dB relative to 1.0.

    Returns:
        ``(length,)`` float32 noise at ``level_dbfs``. The shaping is done on one FFT of the whole
        length, so the noise is periodic with period ``length`` (no onset transient).
    """
    if isinstance(exponent, str):
        if exponent not in COLORS:
            raise ValueError(f"unknown noise color {exponent!r}; choose one of {sorted(COLORS)} or give a number")
        exponent = COLORS[exponent]
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    if length < 2:
        return np.zeros(length, np.float32)
    spec = np.fft.rfft(rng.standard_normal(length))
    f = np.arange(spec.shape[0], dtype=np.float64)
    f[0] = 1.0
    spec *= f ** (exponent / 2.0)  # amplitude goes as f**(β/2), power as f**β
    spec[0] = 0.0
    x = np.fft.irfft(spec, n=length)
    return _to_level(x, level_dbfs)


def babble(
    speech: SpeechSource,
    length: int,
    rng: np.random.Generator,
    talkers: int | tuple[int, int] = (3, 6),
    gain_db: tuple[float, float] = (-6.0, 0.0),
    level_dbfs: float = -20.0,
) -> np.ndarray:
    """Babble noise: several talkers, each a stream of speech clips laid end to end, summed.

    Each talker starts at a random offset into its first clip, so the talkers do not line up,
    and gets a random gain; each clip is first normalised to unit RMS so loud and quiet
    recordings weigh the same.

    Args:
        speech: the clips to draw from (a sequence of ``(T_i,)`` float arrays at the output rate,
            drawn with replacement) or a callable ``rng -> (T_i,)`` that returns one clip per call.
        length: output length in samples.
        rng: the random generator.
        talkers: number of talkers, or an inclusive ``(low, high)`` range to draw it from.
        gain_db: range of the per-talker gain in dB (uniform).
        level_dbfs: RMS level of the result in dB relative to 1.0.

    Returns:
        ``(length,)`` float32 babble at ``level_dbfs``.

    Raises:
        ValueError: no speech clips, or only silent ones.
    """
    draw = _speech_drawer(speech)
    n = int(talkers) if isinstance(talkers, int) else int(rng.integers(talkers[0], talkers[1] + 1))
    if n < 1:
        raise ValueError(f"babble needs at least one talker, got {talkers}")
    out = np.zeros(length, np.float64)
    for _ in range(n):
        first = _loud_clip(draw, rng)
        pieces = [first[int(rng.integers(first.shape[0])) :]]
        filled = pieces[0].shape[0]
        while filled < length:
            pieces.append(_loud_clip(draw, rng))
            filled += pieces[-1].shape[0]
        out += np.concatenate(pieces)[:length] * 10.0 ** (rng.uniform(*gain_db) / 20.0)
    return _to_level(out, level_dbfs)


_TABLE = 4096  # wavetable size of music_like's tones (interpolation error < -80 dB)


def music_like(length: int, rng: np.random.Generator, sr: int = SAMPLE_RATE, level_dbfs: float = -20.0) -> np.ndarray:
    """Procedural music: a melody and chords of harmonic tones over a drum pattern.

    A random tempo (70-160 BPM) and key; each beat the melody plays a note of the key's major or
    minor scale (harmonics 1-8 with a random spectral tilt, vibrato, attack/decay envelope), a
    chord of three scale notes changes every bar, and kick/snare/hi-hat hits are shaped noise and
    sine bursts. Sustained pitched sounds with onsets are what keyword spotters confuse with
    speech, and no licensed music recordings are at hand offline.

    Returns:
        ``(length,)`` float32 at ``level_dbfs`` RMS.
    """
    if length < 2:
        return np.zeros(max(0, length), np.float32)
    out = np.zeros(length, np.float64)
    beat = int(sr * 60.0 / rng.uniform(70, 160))
    root = 110.0 * 2 ** (rng.integers(0, 12) / 12)
    scale = np.array([0, 2, 4, 5, 7, 9, 11] if rng.random() < 0.5 else [0, 2, 3, 5, 7, 8, 10])
    tilt = rng.uniform(0.5, 1.5)  # harmonic k has amplitude k**-tilt
    harmonics = np.arange(1, 9)

    grid = np.arange(_TABLE + 1) / _TABLE  # one period, for the wavetable of each note's harmonics

    def tone(f0: float, n: int, gain: float) -> np.ndarray:
        t = np.arange(n) / sr
        vib = 1 + 0.004 * np.sin(2 * np.pi * rng.uniform(4, 7) * t)
        cycles = f0 * np.cumsum(vib) / sr  # the phase, in periods
        amps = harmonics**-tilt * (harmonics * f0 < sr / 2 - 500)
        table = amps @ np.sin(2 * np.pi * harmonics[:, None] * grid[None])  # (TABLE + 1,)
        pos = (cycles % 1.0) * _TABLE  # linear interpolation in the table: ~8x fewer sines per sample
        i = pos.astype(np.int64)
        wave = table[i] + (pos - i) * (table[i + 1] - table[i])
        env = np.minimum(1.0, t / 0.01) * np.exp(-t / rng.uniform(0.15, 0.8))
        return gain * wave * env

    def note(degree: int) -> float:
        octave, step = divmod(int(degree), len(scale))
        return root * 2 ** (octave + scale[step] / 12)

    for i, pos in enumerate(range(0, length, beat)):
        n = min(length - pos, 2 * beat)
        if rng.random() < 0.85:  # melody, two octaves above the root
            out[pos : pos + n] += tone(note(14 + rng.integers(-4, 8)), n, 0.5)
        if i % 4 == 0:  # a chord per bar
            m = min(length - pos, 4 * beat)
            base = int(rng.integers(0, 7))
            for d in (base, base + 2, base + 4):
                out[pos : pos + m] += tone(note(7 + d), m, 0.25)
        t = np.arange(min(length - pos, beat)) / sr
        if i % 2 == 0:  # kick
            out[pos : pos + len(t)] += 0.8 * np.sin(2 * np.pi * 55 * t * (1 + np.exp(-t / 0.02))) * np.exp(-t / 0.08)
        else:  # snare
            out[pos : pos + len(t)] += 0.3 * rng.standard_normal(len(t)) * np.exp(-t / 0.05)
        h = pos + beat // 2  # off-beat hi-hat: high-passed noise
        if h < length:
            k = min(length - h, sr // 20)
            hat = np.diff(rng.standard_normal(k + 1)) * np.exp(-np.arange(k) / (0.01 * sr))
            out[h : h + k] += 0.1 * hat
    return _to_level(out, level_dbfs)


def hum_clicks(length: int, rng: np.random.Generator, sr: int = SAMPLE_RATE, level_dbfs: float = -20.0) -> np.ndarray:
    """Electrical and mechanical interference: mains hum (50 or 60 Hz, slightly off, with odd and
    even harmonics up to ~1 kHz and a slow amplitude wobble), a faint buzz floor, and clicks
    (decaying impulses at random times) with bursts of crackle. What bad cables, cheap headsets
    and old recordings add, and none of the real noise recordings cover.

    Returns:
        ``(length,)`` float32 at ``level_dbfs`` RMS.
    """
    if length < 2:
        return np.zeros(max(0, length), np.float32)
    t = np.arange(length) / sr
    f0 = (50.0 if rng.random() < 0.5 else 60.0) * (1 + rng.uniform(-0.01, 0.01))
    coefs = []  # harmonic k: amp_k sin(2 pi k f0 t + phase_k), the imaginary part of c_k z^k, z = e^(2 pi i f0 t)
    for k in range(1, int(1000 // f0) + 1):
        amp = rng.uniform(0.1, 1.0) * k ** -rng.uniform(0.3, 1.5) * (1.0 if k % 2 else rng.uniform(0.2, 1.0))
        coefs.append(amp * np.exp(1j * rng.uniform(0, 2 * np.pi)))
    phase = 2 * np.pi * f0 * t
    z = np.empty(length, np.complex128)  # e^(i phase) as cos + i sin: the same values, half np.exp's time
    z.real, z.imag = np.cos(phase), np.sin(phase)
    acc = np.full(length, coefs[-1])  # Horner: one complex multiply-add per harmonic instead of a sine
    for c in coefs[-2::-1]:
        acc *= z
        acc += c
    out = (acc * z).imag
    out *= 1 + 0.2 * np.sin(2 * np.pi * rng.uniform(0.1, 1.0) * t)
    out = out / (np.sqrt(np.mean(out**2)) + 1e-12)
    out += 10 ** (rng.uniform(-40, -20) / 20) * rng.standard_normal(length)
    clicks = np.zeros(length, np.float64)
    n_clicks = int(rng.poisson(rng.uniform(0.5, 8.0) * length / sr))
    for pos in rng.integers(0, length, n_clicks):
        n = min(length - int(pos), int(sr * rng.uniform(0.001, 0.01)))
        decay = np.exp(-np.arange(n) / (n / 4 + 1))
        clicks[pos : pos + n] += rng.uniform(1, 10) * rng.choice([-1, 1]) * decay * rng.standard_normal(n)
    if rng.random() < 0.5:  # crackle: a sparse burst of tiny impulses
        start, n = int(rng.integers(0, length)), int(sr * rng.uniform(0.2, 1.0))
        n = min(n, length - start)
        clicks[start : start + n] += (rng.random(n) < 0.01) * rng.standard_normal(n) * rng.uniform(2, 8)
    return _to_level(out * rng.uniform(0.3, 1.0) + clicks, level_dbfs)


def tonal_events(length: int, rng: np.random.Generator, sr: int = SAMPLE_RATE, level_dbfs: float = -20.0) -> np.ndarray:
    """Tonal sound events with pitch contours over a faint floor: sirens (slow sweeps), alarm and
    phone beeps, whistles, bird-like chirps (fast sweeps at 2-6 kHz) and animal-like harmonic calls
    (a rise-fall pitch contour at 250-900 Hz with harmonics). Everyday interferers that, like
    voiced speech, are harmonic and move in pitch, which the stationary and broadband recordings of
    the noise bank never show a mask network.

    Returns:
        ``(length,)`` float32 at ``level_dbfs`` RMS.
    """
    if length < 2:
        return np.zeros(max(0, length), np.float32)
    out = 10 ** (rng.uniform(-45, -25) / 20) * rng.standard_normal(length)

    def voice(contour: np.ndarray, harmonics: int, tilt: float) -> np.ndarray:
        """A harmonic tone following the pitch ``contour`` (Hz per sample), harmonics above 7.5 kHz dropped."""
        phase = 2 * np.pi * np.cumsum(contour) / sr
        k = np.arange(1, harmonics + 1)[:, None]
        amps = k**-tilt * (k * contour.max() < sr / 2 - 500)
        return (amps * np.sin(k * phase[None] + rng.uniform(0, 2 * np.pi, (harmonics, 1)))).sum(0)

    def envelope(n: int, attack: float) -> np.ndarray:
        t = np.arange(n) / sr
        return np.minimum(1.0, t / attack) * np.minimum(1.0, (n / sr - t) / attack)

    pos = int(rng.integers(-sr // 2, sr // 2))
    while pos < length:
        kind = rng.choice(["siren", "beeps", "whistle", "chirps", "call"])
        n = int(sr * rng.uniform(0.3, 2.5))
        t = np.arange(n) / sr
        if kind == "siren":  # wailing or yelping sweep between two pitches
            lo, hi = sorted(rng.uniform(400, 1800, 2))
            contour = lo + (hi - lo) * 0.5 * (1 - np.cos(2 * np.pi * rng.uniform(0.3, 4.0) * t))
            x = voice(contour, 4, rng.uniform(0.8, 2.0))
        elif kind == "beeps":  # on/off tone, one or two pitches
            f = rng.uniform(800, 4000, 2)
            period = rng.uniform(0.1, 0.6)
            on = (t % period) < period * rng.uniform(0.3, 0.7)
            which = (t // period).astype(int) % 2 if rng.random() < 0.5 else np.zeros(n, int)
            x = np.sin(2 * np.pi * np.cumsum(f[which]) / sr) * on
        elif kind == "whistle":  # a pure tone gliding slowly, with vibrato
            f0 = rng.uniform(1000, 3000)
            contour = f0 * (1 + rng.uniform(-0.3, 0.3) * t / t[-1] + 0.01 * np.sin(2 * np.pi * 5 * t))
            x = voice(contour, 1, 1.0)
        elif kind == "chirps":  # a burst of short fast sweeps
            x = np.zeros(n)
            for start in np.sort(rng.integers(0, n, int(rng.integers(2, 12)))):
                m = min(n - int(start), int(sr * rng.uniform(0.02, 0.15)))
                f = np.linspace(*rng.uniform(2000, 6000, 2), m)
                x[start : start + m] += np.sin(2 * np.pi * np.cumsum(f) / sr) * np.hanning(m)
        else:  # an animal-like call: rise-fall pitch, several harmonics, a little roughness
            f0 = rng.uniform(250, 900)
            rise_fall = np.clip(np.sin(np.pi * t / t[-1]), 0.0, 1.0)  # sin(pi) rounds to -1e-16: clip before the power
            contour = f0 * (1 + rng.uniform(0.1, 0.6) * rise_fall ** rng.uniform(0.5, 2))
            contour *= 1 + 0.02 * rng.standard_normal(n).cumsum() / np.sqrt(n)
            x = voice(contour, int(rng.integers(3, 10)), rng.uniform(0.3, 1.5))
        x = x * envelope(n, rng.uniform(0.005, 0.05)) * 10 ** (rng.uniform(-10, 0) / 20)
        a, b = max(pos, 0), min(pos + n, length)
        if b > a:
            out[a:b] += x[a - pos : b - pos] / (np.sqrt(np.mean(x**2)) + 1e-12)
        pos += n + int(sr * rng.exponential(0.5))
    return _to_level(out, level_dbfs)


def ambience(length: int, rng: np.random.Generator, sr: int = SAMPLE_RATE, level_dbfs: float = -20.0) -> np.ndarray:
    """Non-stationary broadband background: wind or traffic (red-to-pink noise through a low-pass
    whose cutoff and level drift over seconds), rain (a dense stream of tiny filtered drops), or a
    fan or engine (broadband noise plus a blade/motor tone with harmonics and a slow wobble). The
    drifting level and colour is what a mask must track and the looped bank recordings do not show.

    Returns:
        ``(length,)`` float32 at ``level_dbfs`` RMS.
    """
    if length < 2:
        return np.zeros(max(0, length), np.float32)
    t = np.arange(length) / sr

    def drift(rate_hz: float, depth_db: float) -> np.ndarray:
        """A smooth random gain curve: low-passed noise, ``depth_db`` peak to peak-ish."""
        knots = max(2, int(length / sr * rate_hz) + 2)
        curve = np.interp(t, np.linspace(0, t[-1], knots), rng.standard_normal(knots))
        return 10 ** (depth_db / 20 * curve / 2)

    kind = rng.choice(["wind", "rain", "fan"])
    if kind == "wind":
        base = colored_noise(length, rng, rng.uniform(-2.0, -1.0), 0.0).astype(np.float64)
        spec = np.fft.rfft(base)
        cutoff = rng.uniform(200, 2000)
        spec /= np.sqrt(1 + (np.fft.rfftfreq(length, 1 / sr) / cutoff) ** 4)
        out = np.fft.irfft(spec, n=length) * drift(rng.uniform(0.2, 2.0), rng.uniform(6, 20))
    elif kind == "rain":
        drops = (rng.random(length) < rng.uniform(0.002, 0.05)) * rng.standard_normal(length) ** 3
        kernel = np.exp(-np.arange(int(sr * 0.002)) / (sr * rng.uniform(0.0002, 0.001)))
        out = np.convolve(drops, kernel, mode="same")
        out = np.diff(out, prepend=0.0) if rng.random() < 0.5 else out  # brighter or duller drops
        out = out / (np.sqrt(np.mean(out**2)) + 1e-12) + 0.3 * colored_noise(length, rng, -1.0, 0.0)
        out *= drift(rng.uniform(0.1, 0.5), rng.uniform(3, 10))
    else:
        f0 = rng.uniform(30, 250) * (1 + 0.01 * np.sin(2 * np.pi * rng.uniform(0.1, 1) * t))
        phase = 2 * np.pi * np.cumsum(f0) / sr
        tone = sum(k ** -rng.uniform(0.5, 1.5) * np.sin(k * phase + rng.uniform(0, 6.3)) for k in range(1, 12))
        tone = tone / (np.sqrt(np.mean(tone**2)) + 1e-12)
        floor = colored_noise(length, rng, rng.uniform(-1.5, 0.0), 0.0)
        out = floor + 10 ** (rng.uniform(-15, 5) / 20) * tone
        out *= drift(rng.uniform(0.05, 0.5), rng.uniform(1, 6))
    return _to_level(out, level_dbfs)


class NoiseBank:
    """Noise recordings held in memory; hands out random crops of any length.

    Files are picked uniformly (each recording, not each second, is equally likely). A crop of a
    recording shorter than the requested length loops the recording (with a hard seam).

    Build it from a folder tree with :meth:`from_folder` (e.g. the Speech Commands
    ``_background_noise_`` folder, passed in by the caller) or from arrays.
    """

    def __init__(self, clips: Mapping[str, np.ndarray], held_out: Iterable[str] = ()) -> None:
        """``clips``: name -> ``(T,)`` float audio at 16 kHz. ``held_out``: names kept out (for reference)."""
        if not clips:
            raise ValueError("a NoiseBank needs at least one noise clip")
        self.names: list[str] = list(clips)
        self.clips: list[np.ndarray] = []
        for name, x in clips.items():
            x = np.asarray(x, dtype=np.float32)
            if x.ndim != 1 or x.shape[0] == 0:
                raise ValueError(f"noise clip {name!r} must be a non-empty 1-D array, got shape {x.shape}")
            if not np.isfinite(x).all():
                raise ValueError(f"noise clip {name!r} contains NaN or infinite samples")
            self.clips.append(x)
        self.held_out: list[str] = list(held_out)

    @classmethod
    def wrap(cls, clips: Sequence[np.ndarray], names: Sequence[str] | None = None) -> NoiseBank:
        """A bank over an indexable collection of ``(T_i,)`` float clips without copying it (e.g. an
        :class:`~edgessm.data.store.AudioStore`); clips are read on each crop and not validated."""
        if len(clips) == 0:
            raise ValueError("a NoiseBank needs at least one noise clip")
        bank = cls.__new__(cls)
        bank.clips = clips  # type: ignore[assignment]
        bank.names = list(names) if names is not None else [str(i) for i in range(len(clips))]
        bank.held_out = []
        return bank

    @classmethod
    def from_folder(
        cls,
        root: str | os.PathLike,
        holdout: Iterable[str] = (),
        subset: Literal["train", "holdout", "all"] = "train",
        sr: int = SAMPLE_RATE,
    ) -> NoiseBank:
        """Load every audio file under ``root`` (recursively, sorted), mixed down and resampled to ``sr``.

        Args:
            root: folder tree of noise recordings (wav, flac, ...).
            holdout: files to keep for validation, by file name (``running_tap.wav``), stem
                (``running_tap``) or path relative to ``root``.
            subset: ``train`` loads all but the held-out files, ``holdout`` only them, ``all`` every file.
            sr: sample rate of the loaded audio.

        Raises:
            ValueError: ``root`` is missing or holds no audio, a ``holdout`` name matches no file,
                or the subset is empty.
        """
        root = Path(root).expanduser()
        files = audio_files(root)
        if not files:
            raise ValueError(f"noise folder {root} holds no audio files (wav, flac, ...)")
        names = {p: p.relative_to(root).as_posix() for p in files}
        wanted = list(holdout)
        unmatched = [h for h in wanted if not any(_matches(p, names[p], h) for p in files)]
        if unmatched:
            raise ValueError(f"holdout names {unmatched} match no file under {root}; files: {sorted(names.values())}")
        is_held = {p: any(_matches(p, names[p], h) for h in wanted) for p in files}
        if subset == "train":
            chosen = [p for p in files if not is_held[p]]
        elif subset == "holdout":
            chosen = [p for p in files if is_held[p]]
        elif subset == "all":
            chosen = files
        else:
            raise ValueError(f"subset must be 'train', 'holdout' or 'all', got {subset!r}")
        if not chosen:
            raise ValueError(f"the {subset!r} subset of {root} is empty ({len(files)} files, holdout={wanted})")
        clips = {names[p]: load_audio(p, sr=sr)[0] for p in chosen}
        return cls(clips, held_out=[names[p] for p in files if is_held[p]])

    def __len__(self) -> int:
        return len(self.clips)

    def crop(self, index: int, length: int, rng: np.random.Generator) -> np.ndarray:
        """A random ``(length,)`` float32 crop of clip ``index`` (looped if the clip is shorter)."""
        if hasattr(self.clips, "slice"):  # a store: convert only the window, not a minutes-long recording
            n = self.clips.length(index)
            if length <= n:
                start = int(rng.integers(0, n - length + 1))
                return self.clips.slice(index, start, start + length)
        x = np.asarray(self.clips[index], dtype=np.float32)
        n = x.shape[0]
        if n == 0:
            raise ValueError(f"noise clip {self.names[index]!r} is empty")
        if length <= n:
            start = int(rng.integers(0, n - length + 1))
            return x[start : start + length].copy()
        start = int(rng.integers(0, n))
        return x[(start + np.arange(length)) % n]

    def sample(self, length: int, rng: np.random.Generator) -> np.ndarray:
        """A random ``(length,)`` float32 crop of a uniformly chosen clip."""
        return self.crop(int(rng.integers(len(self.clips))), length, rng)

    def __repr__(self) -> str:
        return f"NoiseBank({len(self)} clips: {self.names}, held out: {self.held_out})"


def _matches(path: Path, rel: str, name: str) -> bool:
    return name in (path.name, path.stem, rel)


def _speech_drawer(speech: SpeechSource) -> Callable[[np.random.Generator], np.ndarray]:
    if callable(speech):
        return speech
    clips = list(speech)
    if not clips:
        raise ValueError("babble needs at least one speech clip")
    return lambda rng: clips[int(rng.integers(len(clips)))]


def _loud_clip(draw: Callable[[np.random.Generator], np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """Draw clips until one is not silent; return it as float64 at unit RMS."""
    for _ in range(100):
        x = np.asarray(draw(rng), dtype=np.float64).reshape(-1)
        power = float(np.mean(x**2)) if x.size else 0.0
        if power > _SILENT_POWER:
            return x / np.sqrt(power)
    raise ValueError("babble: 100 speech clips in a row were empty or silent")


class MusicBank:
    """Procedural music rendered once and cropped at random: ``pieces`` pieces of ``seconds`` each
    (:func:`music_like`, piece ``i`` from seed ``[seed, i]``), held as int16.

    ``bank(length, rng, level_dbfs)`` costs a crop instead of a rendering: for a training loader that
    draws music for many examples (a KWS example's music context took ~60% of its CPU time). Longer
    requests join pieces end to end. ``cache``: keep the rendered bank on disk (``<cache_dir>/music/``, keyed
    by the settings and this module's code) and map it back next time (256 pieces: ~10 s to render)."""

    def __init__(self, pieces: int = 256, seconds: float = 8.0, seed: int = 0, sr: int = SAMPLE_RATE,
                 cache: bool = False) -> None:  # fmt: skip
        if pieces < 1 or seconds <= 0:
            raise ValueError(f"a music bank needs pieces >= 1 and seconds > 0, got {pieces} and {seconds}")
        path = _bank_path(pieces, seconds, seed, sr) if cache else None
        if path is not None and path.is_file():
            self.data = np.load(path, mmap_mode="r")
            return
        n = int(seconds * sr)
        pieces_f = (music_like(n, np.random.default_rng([seed, i]), sr, -20.0) for i in range(pieces))
        self.data = np.stack([np.round(np.clip(x, -1, 1) * 32767).astype(np.int16) for x in pieces_f])
        if path is not None:
            from edgessm.atomic import atomic_path

            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(path) as tmp, open(tmp, "wb") as f:
                np.save(f, self.data)

    def __len__(self) -> int:
        return self.data.shape[0]

    def __call__(self, length: int, rng: np.random.Generator, level_dbfs: float = -20.0) -> np.ndarray:
        """``(length,)`` float32 of a random piece (more joined when longer) at ``level_dbfs`` RMS."""
        parts, filled = [], 0
        while filled < length:
            piece = self.data[int(rng.integers(len(self)))]
            start = int(rng.integers(0, piece.shape[0])) if not parts else 0
            parts.append(piece[start : start + length - filled])
            filled += parts[-1].shape[0]
        return _to_level(np.concatenate(parts).astype(np.float32) / 32767.0, level_dbfs)


def _bank_path(pieces: int, seconds: float, seed: int, sr: int):
    """Where a rendered :class:`MusicBank` is cached: its settings and a digest of this module (the renderer)."""
    import hashlib
    from pathlib import Path

    from .corpora import cache_dir

    code = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    return cache_dir() / "music" / f"bank-{pieces}x{seconds:g}s-{seed}-{sr}-{code}.npy"


def _to_level(x: np.ndarray, level_dbfs: float) -> np.ndarray:
    power = float(np.mean(np.square(x, dtype=np.float64))) if x.size else 0.0
    if power <= _SILENT_POWER:
        return np.zeros(x.shape, np.float32)
    return (x * (10.0 ** (level_dbfs / 20.0) / np.sqrt(power))).astype(np.float32)
