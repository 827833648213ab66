"""Hard-negative mining: `edgessm mine` finds where a keyword graph fires in keyword-free training speech,
and a recipe's `mined_negatives` trains on those moments as "no keyword"."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from fixtures import speech_commands_folder

from edgessm.data.audio import load_audio, write_audio
from edgessm.data.manifest import Clip, write_manifest
from edgessm.runtime.kws import DecisionConfig
from edgessm.train.config import TrainConfig
from edgessm.train.mine import Mined, mine_recordings, read_mined, write_mined
from edgessm.train.tasks import build_task, frame_targets

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "demos" / "keywords.wav"
SR = 16000


@pytest.fixture(scope="module")
def sc_folder(tmp_path_factory) -> Path:
    return speech_commands_folder(tmp_path_factory.mktemp("sc"))


def _sentences(folder: Path, n: int = 3, seconds: float = 1.5) -> Path:
    """Keyword-free 'sentences' (noise bursts) of training voices, in a manifest."""
    rng = np.random.default_rng(0)
    clips = []
    for i in range(n):
        path = folder / f"s{i}.wav"
        write_audio(path, (0.1 * rng.standard_normal(int(seconds * SR))).astype(np.float32), SR)
        clips.append(Clip(str(path), speaker=f"v{i}", text="where did i put my notebook", split="train",
                          source="recorded"))  # fmt: skip
    write_manifest(folder / "manifest.csv", clips)
    return folder / "manifest.csv"


def _config(sc_folder: Path, manifest: Path, **data) -> TrainConfig:
    return TrainConfig.from_dict(
        {
            "task": "kws",
            "model": {"channels": [4, 8], "states": [4, 8], "kinds": ["full", "pointwise"], "pools": [4, 4]},
            "data": {"words": "sc10", "sources": [f"speech_commands:{sc_folder}", f"manifest:{manifest}"],
                     "clip_samples": 8192, "context_samples": 4000, **data},
            "train": {"steps": 2, "batch_size": 4, "workers": 0},
        }
    )  # fmt: skip


class _FakeGraph:
    """A graph whose `yes` logit is high over given seconds of each recording (by its length)."""

    def __init__(self, spans: dict[int, list[tuple[float, float]]]) -> None:
        self.info = SimpleNamespace(labels=["yes", "no", "_unknown_", "_silence_"], stride=320, sample_rate=SR)
        self.spans = spans

    def process(self, audio: np.ndarray) -> np.ndarray:
        frames = -(-len(audio) // 320)
        logits = np.zeros((4, frames), np.float32)
        logits[2] = 4.0  # _unknown_
        for a, b in self.spans.get(len(audio), []):
            logits[0, round(a / 0.02) : round(b / 0.02)] = 9.0
        return logits


def test_mining_reports_each_detection_with_its_recording_time_and_word(tmp_path: Path) -> None:
    quiet, busy = tmp_path / "quiet.wav", tmp_path / "busy.wav"
    write_audio(quiet, np.zeros(2 * SR, np.float32), SR)
    write_audio(busy, np.zeros(5 * SR, np.float32), SR)
    graph = _FakeGraph({5 * SR: [(1.0, 1.4), (3.0, 3.3)]})
    rows, seconds = mine_recordings(graph, [str(quiet), str(busy)], DecisionConfig(0.5))
    assert seconds == pytest.approx(7.0)
    assert [(r.path, r.word) for r in rows] == [(str(busy), "yes")] * 2
    # the decision fires once the 4-frame mean crosses 0.5: within 0.1 s of each span's start
    assert [round(r.time_s, 1) for r in rows] == [1.0, 3.0]
    assert all(0.5 <= r.score <= 1 for r in rows)
    # a second, closer span falls in the 1 s refractory period: one detection
    rows, _ = mine_recordings(_FakeGraph({5 * SR: [(1.0, 1.4), (1.6, 1.8)]}), [str(busy)], DecisionConfig(0.5))
    assert len(rows) == 1


class _LoudGraph(_FakeGraph):
    """Fires `yes` over frames whose audio is louder than -20 dBFS; keeps what it heard."""

    def process(self, audio: np.ndarray) -> np.ndarray:
        self.heard = audio
        frames = -(-len(audio) // 320)
        logits = np.zeros((4, frames), np.float32)
        logits[2] = 4.0
        x = np.resize(audio, frames * 320).reshape(frames, 320)
        logits[0, 10 * np.log10(np.mean(x**2, axis=1) + 1e-12) > -20] = 9.0
        return logits


def test_mining_at_a_close_microphone_level_streams_the_speech_that_loud(tmp_path: Path) -> None:
    from edgessm.data.augment import active_level_dbfs

    t = np.arange(2 * SR) / SR
    x = (0.03 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)  # -33 dBFS
    write_audio(tmp_path / "s.wav", x, SR)
    graph = _LoudGraph({})
    assert mine_recordings(graph, [str(tmp_path / "s.wav")], DecisionConfig(0.5))[0] == []  # as recorded: quiet
    rows, _ = mine_recordings(graph, [str(tmp_path / "s.wav")], DecisionConfig(0.5), level_dbfs=-12.0)
    assert [r.word for r in rows] == ["yes"]
    assert active_level_dbfs(graph.heard) == pytest.approx(-12.0, abs=0.1)
    rows, _ = mine_recordings(graph, [str(tmp_path / "s.wav")], DecisionConfig(0.5), level_dbfs=0.0)
    assert np.abs(graph.heard).max() <= 1.0  # past full scale: clipped, as a microphone does


def test_mined_csv_round_trips_and_refuses_what_it_did_not_write(tmp_path: Path) -> None:
    rows = [Mined("/a/b.wav", 1.25, "stop", 0.61), Mined("/a/c.flac", 0.5, "up", 0.5)]
    write_mined(tmp_path / "m.csv", rows)
    assert read_mined(tmp_path / "m.csv") == rows
    (tmp_path / "other.csv").write_text("path,start,label\n/a/b.wav,1,stop\n")
    with pytest.raises(ValueError, match="expected \\['path', 'time_s', 'word', 'score'\\]"):
        read_mined(tmp_path / "other.csv")
    (tmp_path / "bad.csv").write_text("path,time_s,word,score\n/a/b.wav,soon,stop,0.5\n")
    with pytest.raises(ValueError, match="line 2"):
        read_mined(tmp_path / "bad.csv")
    (tmp_path / "neg.csv").write_text("path,time_s,word,score\n/a/b.wav,-1,stop,0.5\n")
    with pytest.raises(ValueError, match="negative or non-finite"):
        read_mined(tmp_path / "neg.csv")
    with pytest.raises(FileNotFoundError, match="edgessm mine"):
        read_mined(tmp_path / "none.csv")


def test_several_mined_lists_join_and_a_moment_found_twice_counts_once(sc_folder: Path, tmp_path: Path) -> None:
    from edgessm.train.mined import read_mined_lists
    from edgessm.train.tasks import build_task

    write_mined(tmp_path / "a.csv", [Mined("/x.wav", 1.0, "up", 0.6), Mined("/y.wav", 2.0, "no", 0.5)])
    write_mined(tmp_path / "b.csv", [Mined("/x.wav", 1.3, "off", 0.4), Mined("/x.wav", 3.0, "on", 0.3)])
    joined = read_mined_lists([str(tmp_path / "a.csv"), str(tmp_path / "b.csv")])
    assert [(m.path, m.time_s, m.word) for m in joined] == [("/x.wav", 1.0, "up"), ("/y.wav", 2.0, "no"),
                                                            ("/x.wav", 3.0, "on")]  # fmt: skip
    assert read_mined_lists(str(tmp_path / "a.csv")) == read_mined(tmp_path / "a.csv")
    manifest = _sentences(tmp_path / "sent")
    write_mined(tmp_path / "c.csv", [Mined(str(tmp_path / "sent" / "s0.wav"), 1.0, "yes", 0.6)])
    write_mined(tmp_path / "d.csv", [Mined(str(tmp_path / "sent" / "s1.wav"), 1.0, "yes", 0.6)])
    cfg = _config(sc_folder, manifest, mined_negatives=[str(tmp_path / "c.csv"), str(tmp_path / "d.csv")],
                  mined_fraction=0.5)  # fmt: skip
    task = build_task(cfg)
    task.train_set()
    assert sorted(m.path for m in task.mined) == [str(tmp_path / "sent" / "s0.wav"), str(tmp_path / "sent" / "s1.wav")]


def test_a_mined_negative_is_the_recording_up_to_the_detection_with_no_keyword_at_any_frame(
    sc_folder: Path, tmp_path: Path
) -> None:
    manifest = _sentences(tmp_path / "sent")
    target = str(tmp_path / "sent" / "s1.wav")
    write_mined(tmp_path / "m.csv", [Mined(target, 0.3, "yes", 0.6)])
    task = build_task(_config(sc_folder, manifest, mined_negatives=str(tmp_path / "m.csv"), mined_fraction=0.5))
    ds = task.train_set()
    n = len(task.train_order)
    assert len(ds) == task._n_plain() + round(0.5 * n)
    assert task._n_plain() == n + task._n_silence(n)  # no sentence negatives in this recipe
    recording = load_audio(target)[0]
    unknown = task.labels.index("_unknown_")
    ends = []
    for i in range(task._n_plain(), len(ds)):
        ex = task._example("train", i, np.random.default_rng(i))
        assert ex["label"] == unknown and ex["audio"].shape == (1, 4000 + 8192)
        assert ex["context"] == 4000 and ex["positive_from"] == 0 and ex["unsupervised"] == (0, 0)
        x = ex["audio"][0]
        # silence, then the recording from its start, up to 0.05-0.3 s after the detection (no augmentation)
        lead = int(np.argmax(x != 0))
        end = len(x) - lead
        assert 0.35 * SR <= end <= 0.6 * SR
        np.testing.assert_allclose(x[lead:], recording[:end], atol=1e-4)
        ends.append(end)
    assert len(set(ends)) > 1  # the end is drawn
    # every frame of it is "no keyword"
    batch = task.collate([task._example("train", len(ds) - 1, np.random.default_rng(0))])
    background, positive = frame_targets(batch, task.labels, 256, 47)
    assert background.all() and not positive.any()


def test_mined_recordings_come_from_the_sentences_store_when_it_holds_them(sc_folder: Path, tmp_path: Path) -> None:
    """A list mined anew reuses the decoded sentences (no second store to decode); the examples are the same."""
    manifest = _sentences(tmp_path / "sent")
    write_mined(tmp_path / "m.csv", [Mined(str(tmp_path / "sent" / "s1.wav"), 0.3, "yes", 0.6)])
    mined = {"mined_negatives": str(tmp_path / "m.csv"), "mined_fraction": 0.5}
    shared = build_task(_config(sc_folder, manifest, context_prob=0.5, **mined))
    alone = build_task(_config(sc_folder, manifest, **mined))
    shared.train_set(), alone.train_set()
    assert shared.mined_clip[0][0] is shared.sentences is not None
    assert alone.sentences is None and alone.mined_clip[0][0] is not None
    last = len(alone.train_set()) - 1
    a = shared._mined_example(last, np.random.default_rng(3))["audio"]
    b = alone._mined_example(last, np.random.default_rng(3))["audio"]
    np.testing.assert_array_equal(a, b)
    # an _unknown_ training clip comes from the clips' store, which holds it whole
    rng, words = np.random.default_rng(1), []
    for i in range(6):  # short non-keyword words of six voices
        path = tmp_path / "words" / f"w{i}.wav"
        write_audio(path, (0.1 * rng.standard_normal(SR)).astype(np.float32), SR)
        words.append(Clip(str(path), speaker=f"w{i}", label="bed", source="recorded"))
    write_manifest(tmp_path / "words" / "manifest.csv", words)
    with_words = {"sources": [f"speech_commands:{sc_folder}", f"manifest:{tmp_path / 'words' / 'manifest.csv'}"]}
    plain = build_task(_config(sc_folder, manifest, **with_words))
    plain.train_set()
    unknown = next(c.path for c, lab in plain.items["train"] if plain.labels[lab] == "_unknown_")
    write_mined(tmp_path / "u.csv", [Mined(unknown, 0.2, "yes", 0.6)])
    task = build_task(_config(sc_folder, manifest, mined_negatives=str(tmp_path / "u.csv"), mined_fraction=0.5,
                              **with_words))  # fmt: skip
    task.train_set()
    store, i = task.mined_clip[0]
    assert store is task.store
    np.testing.assert_allclose(store[i], load_audio(unknown)[0], atol=1e-4)


def test_mined_negatives_are_augmented_like_other_clips(sc_folder: Path, tmp_path: Path) -> None:
    manifest = _sentences(tmp_path / "sent")
    write_mined(tmp_path / "m.csv", [Mined(str(tmp_path / "sent" / "s0.wav"), 0.45, "no", 0.55)])
    cfg = _config(sc_folder, manifest, mined_negatives=str(tmp_path / "m.csv"), mined_fraction=1.0)
    cfg.augment = {"gain_prob": 1.0, "gain_db": [-20.0, -20.0], "noise_prob": 0.0, "reverb_prob": 0.0,
                   "mic_prob": 0.0, "shift_prob": 0.0}  # fmt: skip
    task = build_task(cfg)
    ex = task._example("train", len(task.train_set()) - 1, np.random.default_rng(3))
    x, ctx = ex["audio"][0], 4000
    lead = int(np.argmax(x != 0))
    assert 0 < lead < ctx  # silence, then the recording's start in the context
    recording = load_audio(tmp_path / "sent" / "s0.wav")[0]
    np.testing.assert_allclose(x[lead:ctx], recording[: ctx - lead], atol=1e-4)  # the context as heard
    np.testing.assert_allclose(x[ctx:], 0.1 * recording[ctx - lead : len(x) - lead], atol=1e-4)  # the clip: -20 dB


def test_mined_negatives_must_be_the_recipes_own_keyword_free_training_speech(sc_folder: Path, tmp_path: Path) -> None:
    manifest = _sentences(tmp_path / "sent")
    elsewhere = tmp_path / "elsewhere.wav"
    write_audio(elsewhere, np.zeros(SR, np.float32), SR)
    write_mined(tmp_path / "m.csv", [Mined(str(elsewhere), 0.5, "yes", 0.6)])
    task = build_task(_config(sc_folder, manifest, mined_negatives=str(tmp_path / "m.csv"), mined_fraction=0.2))
    with pytest.raises(ValueError, match="not keyword-free training speech of this recipe"):
        task.train_set()
    write_mined(tmp_path / "empty.csv", [])
    task = build_task(_config(sc_folder, manifest, mined_negatives=str(tmp_path / "empty.csv"), mined_fraction=0.2))
    with pytest.raises(ValueError, match="no mined negatives"):
        task.train_set()
    with pytest.raises(ValueError, match=r"needs data\.mined_negatives"):
        build_task(_config(sc_folder, manifest, mined_fraction=0.2)).train_set()


def test_mine_cli_finds_the_keywords_hidden_in_a_keyword_free_sentence(sc_folder: Path, tmp_path: Path) -> None:
    """The shipped kws35 graph over the demo recording, listed as a keyword-free sentence: its eight
    words are where it fires; a recording of noise has none; the validation speaker is never read."""
    folder = tmp_path / "sent"
    folder.mkdir()
    demo = folder / "demo.wav"
    demo.write_bytes(DEMO.read_bytes())
    noise = folder / "noise.wav"
    write_audio(noise, (0.003 * np.random.default_rng(0).standard_normal(4 * SR)).astype(np.float32), SR)
    held_out = folder / "held_out.wav"
    held_out.write_bytes(DEMO.read_bytes())
    text = "where did i put my notebook"
    clips = [Clip(str(demo), speaker="a", text=text, split="train", source="recorded"),
             Clip(str(noise), speaker="b", text=text, split="train", source="recorded"),
             Clip(str(held_out), speaker="c", text=text, split="validation", source="recorded")]  # fmt: skip
    write_manifest(folder / "manifest.csv", clips)
    recipe = tmp_path / "r.toml"
    recipe.write_text(f'task = "kws"\n[model]\nchannels = [4]\nstates = [4]\nkinds = ["full"]\npools = [4]\n'
                      f'[data]\nwords = "sc10"\nsources = ["speech_commands:{sc_folder}", '
                      f'"manifest:{folder / "manifest.csv"}"]\nclip_samples = 8192\n')  # fmt: skip
    out = tmp_path / "mined.csv"
    cmd = [sys.executable, "-m", "edgessm", "mine", str(recipe), "--model", "kws35", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = read_mined(out)
    assert {r.path for r in rows} == {str(demo)}
    said = [line.split() for line in (ROOT / "demos" / "keywords.txt").read_text().splitlines()]
    for start, end, word, _ in said:  # each demo word fires between its start and 1 s after its end
        assert any(r.word == word and float(start) <= r.time_s <= float(end) + 1.0 for r in rows), word
    assert "2 recordings" in proc.stdout and out.with_suffix(".json").is_file()
    # a recipe of another task, and a bad threshold, are refused in one line
    bad = subprocess.run([*cmd[:4], "denoise", *cmd[5:]], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert bad.returncode != 0 and "mining needs a keyword recipe" in bad.stderr
    bad = subprocess.run([*cmd, "--threshold", "1.5"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert bad.returncode != 0 and "between 0 and 1" in bad.stderr
    bad = subprocess.run([*cmd, "--level-dbfs", "6"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert bad.returncode != 0 and "--level-dbfs must be between -80 and 0 dBFS" in bad.stderr


def test_training_on_mined_negatives_runs(sc_folder: Path, tmp_path: Path) -> None:
    from edgessm.train.trainer import Trainer

    manifest = _sentences(tmp_path / "sent")
    write_mined(tmp_path / "m.csv", [Mined(str(tmp_path / "sent" / f"s{i}.wav"), 1.0, "yes", 0.6) for i in range(3)])
    cfg = _config(sc_folder, manifest, mined_negatives=str(tmp_path / "m.csv"), mined_fraction=0.5, frame_loss=1.0)
    cfg.train.log_every = 1
    Trainer(cfg, tmp_path / "run", device="cpu", progress=False).fit()
    with open(tmp_path / "run" / "log.csv") as f:
        logged = [r for r in csv.DictReader(f) if r.get("bg_loss")]
    assert len(logged) == 2 and all(np.isfinite(float(r["loss"])) for r in logged)


def test_a_pack_carries_the_mined_recordings_and_training_from_it_reads_them(sc_folder: Path, tmp_path: Path,
                                                                              capfd) -> None:  # fmt: skip
    """`edgessm pack` of a recipe with mined negatives packs their recordings whole with a mined.csv naming
    them at the same times; `train --pack` trains on them (nothing of the source folders needed there)."""
    import json

    from edgessm.cli import main
    from edgessm.data import pack
    from edgessm.data.store import AudioStore

    manifest = _sentences(tmp_path / "sent")
    rows = [Mined(str(tmp_path / "sent" / "s2.wav"), 0.9, "yes", 0.7), Mined(str(tmp_path / "sent" / "s0.wav"),
                                                                           0.4, "no", 0.6)]  # fmt: skip
    write_mined(tmp_path / "m.csv", rows)
    recipe = tmp_path / "r.toml"
    recipe.write_text(f'task = "kws"\n[model]\nchannels = [4]\nstates = [4]\nkinds = ["full"]\npools = [4]\n'
                      f'[data]\nwords = "sc10"\nsources = ["speech_commands:{sc_folder}", "manifest:{manifest}"]\n'
                      f'clip_samples = 8192\ncontext_samples = 4000\nmined_negatives = "{tmp_path / "m.csv"}"\n'
                      f'mined_fraction = 0.5\n[train]\nsteps = 2\nbatch_size = 4\nworkers = 0\n')  # fmt: skip
    out = tmp_path / "pack"
    assert main(["pack", str(recipe), "--out", str(out)]) == 0
    assert json.loads((out / "pack.json").read_text())["mined"] == 2
    packed = read_mined(out / "mined.csv")
    assert [(m.word, m.time_s) for m in packed] == [("yes", 0.9), ("no", 0.4)]
    assert all(pack.is_ref(m.path) and m.path.startswith(str(out.resolve())) for m in packed)
    store = AudioStore([m.path for m in packed])
    for i, m in enumerate(rows):  # the whole recording (Opus: the level and length kept)
        x, y = store[i], load_audio(m.path)[0]
        assert len(x) == len(y)
        assert abs(20 * np.log10(np.sqrt(np.mean(x**2)) / np.sqrt(np.mean(y**2)))) < 1.0
    (tmp_path / "m.csv").unlink()  # the training machine has only the pack
    run = tmp_path / "run"
    assert main(["train", str(recipe), "--pack", str(out), "--out", str(run), "--device", "cpu", "--no-progress"]) == 0
    assert "done: step 2 of 2" in capfd.readouterr().out  # two training processes on 2 cores: fd 1
    assert json.loads((run / "config.json").read_text())["data"]["mined_negatives"] == str(out.resolve() / "mined.csv")


def test_level_dbfs_sets_every_training_speech_to_a_level_in_its_range(sc_folder: Path, tmp_path: Path) -> None:
    """Keywords, sentence windows and mined spots alike: level alone must not tell a keyword from other speech."""
    from edgessm.data.augment import active_level_dbfs

    manifest = _sentences(tmp_path / "sent")
    write_mined(tmp_path / "m.csv", [Mined(str(tmp_path / "sent" / "s1.wav"), 0.3, "yes", 0.6)])
    data = {"mined_negatives": str(tmp_path / "m.csv"), "mined_fraction": 0.5, "sentence_negatives": 0.5}
    task = build_task(_config(sc_folder, manifest, level_dbfs=[-30.0, -24.0], **data))
    ds = task.train_set()
    n = len(task.train_order)
    silence = task.labels.index("_silence_")
    kinds: dict[str, list[float]] = {"clip": [], "negative": [], "mined": []}
    for i in range(len(ds)):
        ex = task._example("train", i, np.random.default_rng(i))
        if ex["label"] == silence:
            continue
        kind = "clip" if i < n else "mined" if i >= task._n_plain() else "negative"
        x = ex["audio"][0] if kind == "mined" else ex["audio"][0][ex["context"] :]
        kinds[kind].append(active_level_dbfs(x))
    for kind, levels in kinds.items():
        assert levels, kind
        assert -30.01 <= min(levels) and max(levels) <= -23.99, (kind, levels)
    everything = [v for levels in kinds.values() for v in levels]
    assert max(everything) - min(everything) > 2  # drawn, not one level
    # validation hears each clip at its own level
    plain = build_task(_config(sc_folder, manifest, **data))
    plain.train_set()
    np.testing.assert_array_equal(task._example("validation", 0, None)["audio"],
                                  plain._example("validation", 0, None)["audio"])  # fmt: skip
    with pytest.raises(ValueError, match=r"data.level_dbfs must be \[low, high\]"):
        build_task(_config(sc_folder, manifest, level_dbfs=[-10.0, -20.0]))
