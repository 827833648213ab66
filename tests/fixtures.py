"""Tiny on-disk corpora in the layouts users have (made at test time, a few hundred kB)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgessm.data.audio import write_audio

SR = 16000


def _tone_word(freq: float, rng: np.random.Generator, seconds: float = 0.6) -> np.ndarray:
    """A 'word': a harmonic tone with a syllable-like envelope, speaker-dependent pitch jitter."""
    n = int(seconds * SR)
    t = np.arange(n) / SR
    f = freq * rng.uniform(0.9, 1.1)
    x = sum(np.sin(2 * np.pi * f * k * t + rng.uniform(0, 6)) / k for k in range(1, 4))
    env = np.sin(np.pi * np.arange(n) / n) ** 2
    return (0.3 * env * x + 0.01 * rng.normal(size=n)).astype(np.float32)


def speech_commands_folder(root: Path, words=("yes", "no", "up"), speakers: int = 12, seed: int = 0) -> Path:
    """A Speech Commands v2 layout: word folders, split lists and _background_noise_."""
    rng = np.random.default_rng(seed)
    freqs = {w: 200.0 * (i + 1) for i, w in enumerate(words)}
    val, test = [], []
    for w in words:
        for s in range(speakers):
            name = f"{s:08x}_nohash_0.wav"
            write_audio(root / w / name, _tone_word(freqs[w], rng), SR)
            if s == 0:
                val.append(f"{w}/{name}")
            elif s == 1:
                test.append(f"{w}/{name}")
    (root / "validation_list.txt").write_text("\n".join(val) + "\n")
    (root / "testing_list.txt").write_text("\n".join(test) + "\n")
    write_audio(root / "_background_noise_" / "white.wav", 0.1 * rng.normal(size=SR * 3).astype(np.float32), SR)
    return root


def clean_and_noise_folders(root: Path, n_clean: int = 8, seed: int = 0) -> tuple[Path, Path]:
    """Clean 'speech' (harmonic tones with varying pitch) in speaker folders, and a noise folder."""
    rng = np.random.default_rng(seed)
    for i in range(n_clean):
        x = np.concatenate([_tone_word(rng.uniform(120, 300), rng, 0.5) for _ in range(4)])
        write_audio(root / "clean" / f"spk{i % 3}" / f"utt{i}.wav", x, SR)
    for name in ("hum", "hiss"):
        t = np.arange(SR * 4) / SR
        x = 0.1 * np.sin(2 * np.pi * 60 * t) if name == "hum" else 0.05 * rng.normal(size=t.size)
        write_audio(root / "noise" / f"{name}.wav", x.astype(np.float32), SR)
    return root / "clean", root / "noise"


def librispeech_folder(root: Path, speakers: int = 6, per_speaker: int = 4, seed: int = 0) -> Path:
    """A LibriSpeech layout whose 'speech' spells letters as distinct tones (learnable by CTC)."""
    rng = np.random.default_rng(seed)
    letters = {"a": 300.0, "b": 500.0, "c": 700.0}
    for spk in range(speakers):
        d = root / str(100 + spk) / "1"
        lines = []
        for u in range(per_speaker):
            word = "".join(rng.choice(list(letters), size=3))
            x = np.concatenate([_tone_word(letters[ch], rng, 0.25) for ch in word] + [np.zeros(1600, np.float32)])
            uid = f"{100 + spk}-1-{u:04d}"
            write_audio(d / f"{uid}.flac", x, SR)
            lines.append(f"{uid} {word.upper()}")
        (d / f"{100 + spk}-1.trans.txt").write_text("\n".join(lines) + "\n")
    return root


DEMOS = Path(__file__).resolve().parents[1] / "demos"


def demo_script(name: str):
    """The module of ``demos/<name>.py`` (the demos folder is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, DEMOS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shared_standin(root: Path, speakers: int = 300, seed: int = 0) -> Path:
    """A tiny stand-in for ``../shared/data`` (what a fresh clone lacks): ``real_read_speech`` with one
    short 'utterance' (harmonic tones, speaker-dependent pitch) per speaker and the two real noise
    recordings the denoiser evaluation reads, in the shared layout and manifest format."""
    rng = np.random.default_rng(seed)
    rows = ["path,speaker,duration_s,transcript,source_repo,licence"]
    for s in range(speakers):
        x = np.concatenate([_tone_word(rng.uniform(100, 280), rng, 0.3) for _ in range(2)])
        rel = f"audio/standin/spk{s:03d}_0.flac"
        write_audio(root / "real_read_speech" / rel, x, SR)
        rows.append(f"{rel},standin-{s:03d},{len(x) / SR:.3f},TONES OF SPEAKER {s},tests,CC0")
    (root / "real_read_speech" / "manifest.csv").write_text("\n".join(rows) + "\n")
    t = np.arange(SR * 5) / SR
    noises = {
        "dude_miaowing": 0.1 * np.sin(2 * np.pi * (600 + 200 * np.sin(2 * np.pi * 0.5 * t)) * t),
        "running_tap": 0.05 * rng.normal(size=t.size),
    }
    for name, x in noises.items():
        write_audio(root / "speech_commands_background_noise" / f"{name}.wav", x.astype(np.float32), SR)
    return root


def shared_or_standin(tmp_factory, monkeypatch, *folders: str) -> Path:
    """The real shared data folder when it has ``folders``; otherwise a :func:`shared_standin` made once
    per session, with ``EDGESSM_SHARED_DATA`` pointed at it for the test."""
    from edgessm.data.corpora import shared_data_dir

    real = shared_data_dir(required=False)
    if real is not None and all((real / f).is_dir() for f in folders):
        return real
    standin = tmp_factory.getbasetemp() / "shared-standin"
    if not (standin / "real_read_speech" / "manifest.csv").is_file():
        shared_standin(standin)
    monkeypatch.setenv("EDGESSM_SHARED_DATA", str(standin))
    return standin


def skip_without_shared(*folders: str) -> Path:
    """The shared data folder, or skip the test (with the reason) when it or one of ``folders`` is absent."""
    import pytest

    from edgessm.data.corpora import shared_data_dir

    real = shared_data_dir(required=False)
    missing = [f for f in folders if real is None or not (real / f).is_dir()]
    if real is None or missing:
        pytest.skip(f"needs ../shared/data ({', '.join(missing) or 'the folder'}), absent on this machine")
    return real


# --- unusable audio for the products' bad-input tests ----------------------------------------------------------


def noise(seconds: float, rate: int = 16000, channels: int = 1, seed: int = 0) -> np.ndarray:
    """``(n,)`` or ``(n, channels)`` float32 noise at -26 dBFS."""
    shape = (round(seconds * rate), channels) if channels > 1 else round(seconds * rate)
    return (0.05 * np.random.default_rng(seed).standard_normal(shape)).astype(np.float32)


def wav_bytes(x: np.ndarray, rate: int, subtype: str = "PCM_16", fmt: str = "WAV") -> bytes:
    """``x`` encoded as a complete audio file in memory."""
    import io

    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, x, rate, subtype=subtype, format=fmt)
    return buf.getvalue()


def make_bad(folder: Path, case: str) -> Path:
    """A file for each kind of unusable input (:data:`BAD_FILES`); ``missing`` is not created."""
    import soundfile as sf

    path = folder / f"{case}.wav"
    if case == "nan":
        x = noise(3.0)
        x[24000] = np.nan  # 1.5 s in: found after the first blocks were already processed
        sf.write(path, x, 16000, subtype="FLOAT")
    elif case == "empty":
        sf.write(path, np.zeros(0, np.float32), 16000)
    elif case == "text":
        path.write_text("these are not samples\n" * 100)
    elif case == "zero":  # a download or copy that never wrote a byte
        path.write_bytes(b"")
    elif case == "cut":  # a copy that stopped early: the header promises 3 s
        path.write_bytes(wav_bytes(noise(3.0), 16000)[:20000])
    elif case == "folder":
        path.mkdir()
    return path


# what every product says about each unusable file (after its "edgessm VERB: " prefix)
BAD_FILES = {
    "nan": r"nan\.wav: NaN or infinite sample at 1\.500 s; .*re-export it, e\.g\. as 16-bit PCM wav",
    "empty": r"empty\.wav: the file holds no samples; record or export it again",
    "text": r"text\.wav: not a readable audio file \(it holds text\); convert it to wav or flac",
    "zero": r"zero\.wav: the file is empty \(0 bytes\); was the recording saved or copied completely\?",
    "missing": r"missing\.wav: no such file \(check the path\)",
    "cut": r"cut\.wav ends early: its header promises 3\.00 s of audio but it holds 0\.62 s .*get the whole file again",
}


def tiny_kws_toml(path: Path, sc_folder: Path, steps: int, extra: str = "") -> Path:
    """A tiny keyword-spotting config over a :func:`speech_commands_folder` (``extra``: more TOML tables)."""
    path.write_text(
        f"""task = "kws"
[model]
channels = [4, 8]
states = [4, 8]
kinds = ["full", "pointwise"]
pools = [4, 4]
[data]
words = "sc10"
sources = ["speech_commands:{sc_folder}"]
noise = ["noise:{sc_folder / "_background_noise_"}"]
clip_samples = 8192
{extra}[train]
steps = {steps}
batch_size = 4
workers = 0
processes = 1
"""
    )
    return path
