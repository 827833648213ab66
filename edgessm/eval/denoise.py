"""Denoiser evaluation: held-out real speech in unseen noise, scored for our graph, the peers and the
noisy input in one run (torch-free).

Test set (:func:`mixtures`): the read-speech speakers that the denoise recipe keeps for test
(``data.test_pct``; never trained on, never validated on), each speaker's utterances joined with short
pauses into one ~10 s recording, mixed at a fixed level with noises the model never heard:

- ``dude_miaowing``: a real recording held out of training and validation (``test_noise_holdout``);
- ``running_tap``: the real recording used for validation only;
- ``babble``: 3-6 talkers drawn from the *other* test speakers (unseen voices);
- ``music``: recorded music, the test tracks of the free game soundtracks (``edgessm.data.music``, split
  by track: never in training or validation; ``make music`` installs them), or, where they are not
  installed, fresh draws of the procedural music generator (:func:`edgessm.data.music.music_source` says which);
- ``hum``: fresh draws of the hum/click generator (its kind is in training, these draws are not);
- ``pink`` and ``white``: Gaussian noise with a 1/f and a flat spectrum;
- ``everyday`` (not in the default set, ``kinds=``): recorded everyday sound of the ambience packages' test
  recordings (``edgessm.data.ambience``, split by recording; ``make ambience`` installs them): wind, rain,
  water, traffic, machines, footsteps, doors, joined into a soundscape of the mixture's length;
- ``music-phone`` (not in the default set): the ``music`` tracks as a phone line carries them
  (:func:`~edgessm.data.augment.phone_line`: 300-3400 Hz and 8-bit μ-law), the way hold music reaches a call.

Noise kind and SNR (-5, 0, 5, 10, 15 dB) cycle together over the mixtures, so every (noise, SNR)
pair is covered evenly. Metrics (:func:`score`): wideband PESQ, STOI, SI-SDR and its improvement,
DNSMOS P.835 (SIG/BAK/OVRL, the ``speechmos`` package's ONNX models). Real-time factors are measured
in the same run, single thread, on the same audio.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from edgessm.data.audio import SAMPLE_RATE, load_audio
from edgessm.data.augment import phone_line
from edgessm.data.corpora import shared_noises, shared_read_speech
from edgessm.data.manifest import Clip, assign_split
from edgessm.data.noise import babble, colored_noise, hum_clicks, music_like

from .metrics import pause_residual_db, si_sdr

NOISE_KINDS = ("dude_miaowing", "running_tap", "babble", "music", "hum", "pink", "white")
#: Kinds a run may add to (or put in place of) the default set: every earlier report used NOISE_KINDS alone.
EXTRA_KINDS = ("everyday", "music-phone")
SNRS_DB = (-5.0, 0.0, 5.0, 10.0, 15.0)
METRICS = ("pesq", "stoi", "si_sdr", "si_sdr_i", "dnsmos_sig", "dnsmos_bak", "dnsmos_ovrl", "pause_db")


@dataclass
class Mixture:
    """One test item: ``clean`` and ``noisy`` ``(T,)`` float32 at 16 kHz."""

    name: str
    speaker: str
    noise: str
    snr_db: float
    clean: np.ndarray
    noisy: np.ndarray


@dataclass
class SystemResult:
    """Per-mixture metric rows and the processing time of one system."""

    name: str
    rows: list[dict] = field(default_factory=list)
    busy_s: float = 0.0
    audio_s: float = 0.0
    latency_ms: float | None = None

    @property
    def rtf(self) -> float:
        return self.busy_s / self.audio_s if self.audio_s else float("nan")

    def mean(self, metric: str, **where) -> float:
        vals = [r[metric] for r in self.rows if all(r[k] == v for k, v in where.items())]
        vals = [v for v in vals if np.isfinite(v)]
        return float(np.mean(vals)) if vals else float("nan")


def speakers_of(split: str = "test", validation_pct: float = 10.0, test_pct: float = 10.0) -> dict[str, list[Clip]]:
    """Read-speech clips of the speakers in ``split`` (``"test"`` or ``"validation"``: the denoise
    recipe's split, never trained on), by speaker."""
    if split not in ("test", "validation"):
        raise ValueError(f"mixtures come from the held-out 'test' or 'validation' speakers, not {split!r}")
    out: dict[str, list[Clip]] = {}
    for c in shared_read_speech():
        if assign_split(c, validation_pct, test_pct) == split:
            out.setdefault(c.speaker, []).append(c)
    if not out:
        raise FileNotFoundError(f"no read-speech {split} speakers found (is ../shared/data/real_read_speech there?)")
    return dict(sorted(out.items()))


def _join(clips: Sequence[Clip], max_s: float, gap_s: float = 0.3) -> np.ndarray:
    pieces, total = [], 0
    gap = np.zeros(int(gap_s * SAMPLE_RATE), np.float32)
    for c in clips:
        x, _ = load_audio(c.path, SAMPLE_RATE)
        pieces += [x, gap]
        total += len(x) + len(gap)
        if total >= max_s * SAMPLE_RATE:
            break
    return np.concatenate(pieces[:-1])[: int(max_s * SAMPLE_RATE)].astype(np.float32)


def _real_noise(name: str) -> np.ndarray:
    for p in shared_noises():
        if p.stem == name:
            return load_audio(p, SAMPLE_RATE)[0]
    raise FileNotFoundError(f"noise recording {name}.wav not found in the shared background noises")


def _split_music(
    mixtures: int, rng: np.random.Generator, split: str = "test", n_kinds: int = len(NOISE_KINDS)
) -> list[np.ndarray]:
    """One recorded track of ``split`` per ``music`` mixture (``mixtures`` cycle over ``n_kinds`` noise kinds;
    drawn without replacement while they last), decoded only for the mixtures that use one; empty where the
    soundtracks are not installed."""
    from edgessm.data.music import installed_tracks

    tracks = installed_tracks(split)
    if not tracks:
        return []
    count = -(-mixtures // n_kinds)
    order = [tracks[i] for i in rng.permutation(len(tracks))]
    return [load_audio(order[i % len(order)], SAMPLE_RATE)[0] for i in range(count)]


def _split_ambience(split: str) -> list[np.ndarray]:
    """The recorded everyday sounds of ``split`` (decoded, 16 kHz), for the ``everyday`` kind.

    Raises:
        FileNotFoundError: the ambience packages are not installed (says how to install them)."""
    from edgessm.data.ambience import ambience_files
    from edgessm.data.corpora import CorpusError

    try:
        files = ambience_files(split)
    except CorpusError as e:
        raise FileNotFoundError(f"the 'everyday' noise kind needs the recorded everyday noise: {e}") from None
    return [load_audio(f, SAMPLE_RATE)[0] for f in files]


def _soundscape(sounds: Sequence[np.ndarray], n: int, rng: np.random.Generator) -> np.ndarray:
    """``(n,)``: recordings of ``sounds`` in a random order, each from a random offset, joined end to end
    (one long recording is simply cropped); every piece at the same RMS so a short loud one does not rule."""
    out, filled = [], 0
    order = rng.permutation(len(sounds))
    i = 0
    while filled < n:
        x = sounds[order[i % len(order)]]
        i += 1
        need = n - filled
        start = int(rng.integers(0, len(x) - need + 1)) if len(x) > need else 0
        piece = x[start : start + need].astype(np.float64)
        rms = np.sqrt(np.mean(piece**2))
        if rms < 1e-6:  # a silent file (or stretch) adds nothing
            if i > 4 * len(order):
                raise ValueError("the everyday recordings are silent")
            continue
        out.append(piece / rms)
        filled += len(piece)
    return np.concatenate(out)[:n].astype(np.float32)


def _crop(x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    if len(x) < n:
        x = np.tile(x, n // len(x) + 2)
    start = int(rng.integers(0, len(x) - n + 1))
    return x[start : start + n]


MIXTURE_LEVEL_DBFS = -25.0  # the mixtures' RMS level: the middle of the denoiser recipes' training levels


def mix(
    clean: np.ndarray, noise: np.ndarray, snr_db: float, level_dbfs: float = MIXTURE_LEVEL_DBFS
) -> tuple[np.ndarray, np.ndarray]:
    """Noise scaled to ``snr_db`` under the clean power, the sum scaled to ``level_dbfs`` RMS (the clean
    reference gets the same gain). Returns ``(clean, noisy)`` float32, peaks kept below 1."""
    c, n = clean.astype(np.float64), noise.astype(np.float64)
    pc, pn = np.mean(c**2), np.mean(n**2) + 1e-20
    noisy = c + n * np.sqrt(pc / pn / 10 ** (snr_db / 10))
    gain = 10 ** (level_dbfs / 20) / np.sqrt(np.mean(noisy**2) + 1e-20)
    gain = min(gain, 0.99 / (np.max(np.abs(noisy)) + 1e-20))
    return (c * gain).astype(np.float32), (noisy * gain).astype(np.float32)


def mixtures(
    split: str = "test",
    per_speaker: int = 2,
    seed: int = 0,
    max_s: float = 10.0,
    kinds: Sequence[str] = NOISE_KINDS,
    level_dbfs: float = MIXTURE_LEVEL_DBFS,
) -> list[Mixture]:
    """The held-out mixtures (see the module docstring), deterministic for a ``seed`` and ``kinds``
    (noise kinds, cycled over the mixtures with the SNRs; :data:`NOISE_KINDS` and :data:`EXTRA_KINDS`), each
    scaled to ``level_dbfs`` RMS (-45: what a quiet microphone records; clean references alike).

    ``split="validation"`` builds the same kinds from what validation may see, to tune choices on
    (e.g. the post-filter) without touching the test: the validation speakers, babble of the other
    validation speakers, the soundtracks' validation tracks, and the validation noise recording
    (``running_tap``) in place of the test-only one."""
    kinds = tuple(kinds)
    unknown = [k for k in kinds if k not in NOISE_KINDS + EXTRA_KINDS]
    if unknown or not kinds:
        known = ", ".join(NOISE_KINDS + EXTRA_KINDS)
        raise ValueError(f"unknown noise kind(s) {unknown or '(none given)'}: use {known}")
    speakers = speakers_of(split)
    everyday = _split_ambience(split) if "everyday" in kinds else []
    rng = np.random.default_rng(seed)
    tap = _real_noise("running_tap")  # the test-only recording is never read outside the test:
    real = {"dude_miaowing": _real_noise("dude_miaowing") if split == "test" else tap, "running_tap": tap}
    n_music = sum(k in ("music", "music-phone") for k in kinds)  # one list, so a run with "music" alone is as before
    music = _split_music(len(speakers) * per_speaker * n_music, rng, split, len(kinds)) if n_music else []
    clean_of = {s: _join(clips, max_s) for s, clips in speakers.items()}
    out: list[Mixture] = []
    k = 0
    for spk, clean in clean_of.items():
        others = [x for s, x in clean_of.items() if s != spk] or [clean]
        for _ in range(per_speaker):
            kind = kinds[k % len(kinds)]
            snr = SNRS_DB[k % len(SNRS_DB)]  # 7 kinds, 5 SNRs: every pair within 35 mixtures
            n = len(clean)
            if kind in real:
                noise = _crop(real[kind], n, rng)
            elif kind == "babble":
                noise = babble(others, n, rng)
            elif kind in ("music", "music-phone"):
                noise = _crop(music.pop(0), n, rng) if music else music_like(n, rng)
                if kind == "music-phone":  # as a phone line carries it (hold music)
                    noise = phone_line(noise)
            elif kind in ("pink", "white"):
                noise = colored_noise(n, rng, kind)
            elif kind == "everyday":
                noise = _soundscape(everyday, n, rng)
            else:
                noise = hum_clicks(n, rng)
            c, noisy = mix(clean, noise, snr, level_dbfs)
            out.append(Mixture(f"{spk}-{kind}-{snr:+.0f}dB", spk, kind, snr, c, noisy))
            k += 1
    return out


def score(clean: np.ndarray, est: np.ndarray, noisy: np.ndarray) -> dict[str, float]:
    """Every metric of ``est`` against ``clean`` (all ``(T,)`` at 16 kHz); NaN where a metric fails."""
    from pesq import pesq
    from pystoi import stoi
    from speechmos import dnsmos

    est = np.nan_to_num(np.asarray(est, np.float32))
    row = {"si_sdr": si_sdr(est, clean)}
    row["si_sdr_i"] = row["si_sdr"] - si_sdr(noisy, clean)
    try:
        row["pesq"] = float(pesq(SAMPLE_RATE, clean.astype(np.float64), est.astype(np.float64), "wb"))
    except Exception:  # pesq refuses inputs where it finds no utterance
        row["pesq"] = float("nan")
    row["stoi"] = float(stoi(clean, est, SAMPLE_RATE, extended=False))
    mos = dnsmos.run(np.clip(est, -1.0, 1.0), SAMPLE_RATE)
    row.update(dnsmos_sig=float(mos["sig_mos"]), dnsmos_bak=float(mos["bak_mos"]), dnsmos_ovrl=float(mos["ovrl_mos"]))
    row["pause_db"] = pause_residual_db(est, clean)
    return row


def evaluate(
    systems: dict[str, Callable[[np.ndarray], np.ndarray]],
    mixtures: Sequence[Mixture],
    progress: Callable[[Iterable, str], Iterable] = lambda items, desc: items,
) -> dict[str, SystemResult]:
    """Run every system over every mixture and score it. ``systems``: name -> ``noisy (T,) -> (T,)``
    time-aligned output. Processing time is measured around each call (scoring excluded)."""
    results = {name: SystemResult(name) for name in systems}
    for m in progress(mixtures, "denoise test"):
        for name, fn in systems.items():
            t0 = time.perf_counter()
            est = fn(m.noisy)
            results[name].busy_s += time.perf_counter() - t0
            results[name].audio_s += len(m.noisy) / SAMPLE_RATE
            if est.shape != m.noisy.shape:
                raise RuntimeError(f"{name} returned {est.shape} samples for a {m.noisy.shape} input")
            results[name].rows.append({"mixture": m.name, "noise": m.noise, "snr_db": m.snr_db,
                                       **score(m.clean, est, m.noisy)})  # fmt: skip
    return results


def graph_system(model, atten_lim_db: float | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """A denoising :class:`~edgessm.runtime.session.StepModel` as a system: each call streams the input
    through a fresh :class:`~edgessm.runtime.denoise.Denoiser` (zero state, time-aligned output)."""
    from edgessm.runtime.denoise import Denoiser

    def run(x: np.ndarray) -> np.ndarray:
        d = Denoiser(model, SAMPLE_RATE, 1, atten_lim_db)
        y = np.concatenate([d.feed(x[None]), d.finish()], axis=1)
        return y[0]

    return run


def oracle_system(
    mixtures: Sequence[Mixture], exponent: float = 0.5, exact_bins: int = 0
) -> Callable[[np.ndarray], np.ndarray]:
    """A diagnostic system: the ideal ratio mask ``(S / (S + N)) ** exponent`` at the shipped spectral
    network's resolution (32 ERB bands and 32 fine bins of a 20 ms DFT), computed from each mixture's
    clean speech and applied through the network's own DFT and overlap-add. What a perfect gain
    estimator of that layout would score; knows only ``mixtures`` (needs torch).

    ``exact_bins``: the lowest bins get the clean spectrum itself (a perfect deep filter there, the ceiling
    of ``model.df_order`` with ``df_bins = exact_bins``)."""
    import hashlib

    import torch

    from edgessm.nets.spectral import SpectralDenoiser, SpectralDenoiserConfig

    net = SpectralDenoiser(SpectralDenoiserConfig()).eval()
    clean = {hashlib.sha1(m.noisy.tobytes()).hexdigest(): m.clean for m in mixtures}

    def run(x: np.ndarray) -> np.ndarray:
        c = clean[hashlib.sha1(np.asarray(x, np.float32).tobytes()).hexdigest()]
        pad = (-len(x)) % net.hop + net.hop  # whole frames, and one more hop for the output delay
        xt = torch.nn.functional.pad(torch.as_tensor(x, dtype=torch.float32)[None, None], (0, pad))
        ct = torch.nn.functional.pad(torch.as_tensor(c, dtype=torch.float32)[None, None], (0, pad))
        with torch.no_grad():
            gains, _ = net.oracle_gains(xt, ct, exponent=exponent)
            if exact_bins:
                out, ref, f, b = net._masked(net.spectra(xt), gains), net.spectra(ct), exact_bins, net.bins
                out = torch.cat([ref[..., :f], out[..., f:b], ref[..., b : b + f], out[..., b + f :]], -1)
                y = net._overlap_add(out @ net.synthesis, xt.new_zeros(1, 1, net.hop))[0]
            else:
                y = net.apply_gains(xt, gains)
        return y[0, 0, net.delay : net.delay + len(x)].numpy()

    return run


def summary(results: dict[str, SystemResult]) -> dict:
    """JSON-ready means per system, per SNR and per noise kind."""
    out = {}
    for name, r in results.items():
        snrs = sorted({row["snr_db"] for row in r.rows})
        noises = list(dict.fromkeys(row["noise"] for row in r.rows))
        out[name] = {
            "mean": {m: r.mean(m) for m in METRICS},
            "by_snr": {f"{s:g}": {m: r.mean(m, snr_db=s) for m in METRICS} for s in snrs},
            "by_noise": {n: {m: r.mean(m, noise=n) for m in METRICS} for n in noises},
            "rtf": r.rtf,
            "latency_ms": r.latency_ms,
            "mixtures": len(r.rows),
            "audio_s": r.audio_s,
        }
    return out
