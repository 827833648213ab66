"""Data packs (``edgessm pack``): a recipe's clips compressed into one folder train the same task elsewhere;
and ``train.time_limit_min`` fits a run, its schedule included, into a wall-clock budget."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fixtures import SR, speech_commands_folder, tiny_kws_toml, write_audio

from edgessm.cli import main
from edgessm.data import pack
from edgessm.data.audio import load_audio, speech_bounds
from edgessm.data.manifest import Clip
from edgessm.data.store import AudioStore
from edgessm.train.config import load_config
from edgessm.train.pack import kept, parse_keep
from edgessm.train.tasks import build_task


def _recipe(tmp_path: Path, sc: Path) -> Path:
    rirs = tmp_path / "rirs"
    decay = np.exp(-np.arange(1600) / 200.0) * np.random.default_rng(1).normal(size=1600)
    write_audio(rirs / "room.wav", (0.5 * decay / np.abs(decay).max()).astype(np.float32), SR)
    extra = f'[augment]\nreverb_prob = 0.5\n[augment.rirs]\nmeasured = "{rirs}"\n'
    return tiny_kws_toml(tmp_path / "tiny.toml", sc, steps=4, extra=extra)


def test_a_pack_holds_the_recipes_clips_and_trains_the_same_task(tmp_path: Path, capsys) -> None:
    sc = speech_commands_folder(tmp_path / "sc")
    cfg = _recipe(tmp_path, sc)
    out = tmp_path / "pack"
    assert main(["pack", str(cfg), "--out", str(out), "--margin", "0.05"]) == 0
    assert "packed 33 clips"  # 36 less the test list's 3 in capsys.readouterr().out
    summary = json.loads((out / "pack.json").read_text())
    assert summary["clips"] == 33 and summary["noises"] == 1 and summary["rirs"] == 1

    # the same items in the same splits; each clip is its speech (+ margin), decoded back at its length
    original = build_task(load_config(str(cfg)))
    packed_clips = pack.read_pack(out)
    assert all(pack.is_ref(c.path) for c in packed_clips)
    splits, _ = original.select_clips()
    assert sorted(c.split for c in packed_clips) == sorted(s for s, items in splits.items() for _ in items)
    store = AudioStore([c.path for c in packed_clips])
    for i, clip in enumerate(original.packed_clips()[:6]):
        start, end = speech_bounds(load_audio(clip.path)[0], margin=int(0.05 * SR))
        x, y = store[i], load_audio(clip.path)[0][start:end]
        assert len(x) == len(y) < 0.8 * SR  # the tone word of a 1 s clip, +- 50 ms
        assert abs(20 * np.log10(np.sqrt(np.mean(x**2)) / np.sqrt(np.mean(y**2)))) < 1.5  # its level kept

    run = tmp_path / "run"
    assert main(["train", str(cfg), "--pack", str(out), "--out", str(run), "--device", "cpu", "--no-progress"]) == 0
    assert "done: step 4 of 4" in capsys.readouterr().out
    trained = json.loads((run / "config.json").read_text())
    assert trained["data"]["sources"] == [f"pack:{out.resolve()}"]
    assert trained["augment"]["rirs"]["measured"] == str(out.resolve() / "rirs")


def test_pack_refuses_a_used_folder_and_train_refuses_a_folder_that_is_no_pack(tmp_path: Path) -> None:
    sc = speech_commands_folder(tmp_path / "sc", speakers=2)
    cfg = _recipe(tmp_path, sc)
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match="not empty"):
        main(["pack", str(cfg), "--out", str(tmp_path / "used")])
    assert (tmp_path / "used" / "notes.txt").read_text() == "mine"
    with pytest.raises(SystemExit, match="not a data pack"):
        main(["train", str(cfg), "--pack", str(tmp_path / "used"), "--out", str(tmp_path / "run")])
    with pytest.raises(SystemExit, match="SOURCE=FRACTION"):
        main(["pack", str(cfg), "--out", str(tmp_path / "p2"), "--keep", "synth:*=2"])


def test_pack_references_name_samples_of_a_shard(tmp_path: Path) -> None:
    t = np.arange(SR) / SR
    clips = [Clip(str(tmp_path / f"{i}.wav"), speaker=f"s{i}", label="yes", split="train") for i in range(3)]
    for i, c in enumerate(clips):
        write_audio(c.path, (0.3 * np.sin(2 * np.pi * 300 * (i + 1) * t[: 4000 * (i + 1)])).astype(np.float32), SR)
    noise = tmp_path / "long_noise.wav"
    write_audio(noise, (0.1 * np.random.default_rng(0).normal(size=5 * SR)).astype(np.float32), SR)
    pack.write_pack(tmp_path / "p", clips, shards=2, progress=False, noises=[str(noise)], noise_max_s=2.0)
    assert len(load_audio(tmp_path / "p" / "noise" / "000_long_noise.ogg")[0]) == 2 * SR  # its middle 2 s
    back = pack.read_pack(tmp_path / "p")
    assert [pack.read_ref(c.path).shape[0] for c in back] == [4000, 8000, 12000]
    assert [(c.speaker, c.label, c.split) for c in back] == [(c.speaker, c.label, c.split) for c in clips]
    y = pack.read_ref(back[1].path)
    spectrum = np.abs(np.fft.rfft(y))
    assert abs(np.argmax(spectrum) * SR / len(y) - 600) < 5  # the 600 Hz tone survives the codec
    assert pack.file_of(back[0].path).endswith("shard00.ogg") and pack.file_of("/a/b.wav") == "/a/b.wav"
    with pytest.raises(ValueError, match="damaged"):
        pack.read_ref(pack.file_of(back[0].path) + "#0-99999999")


def test_keep_fractions_are_stable_and_the_last_matching_pattern_wins() -> None:
    clips = [Clip(f"/data/{i}.wav", source="synth:piper" if i % 2 else "sc_train_subset") for i in range(2000)]
    keep = parse_keep(["synth:*=0.25", "sc_train_subset=1"])
    chosen = [c for c in clips if kept(c, keep)]
    synth = sum(c.source.startswith("synth") for c in chosen)
    assert sum(not c.source.startswith("synth") for c in chosen) == 1000 and 200 < synth < 300
    assert chosen == [c for c in clips if kept(c, keep)]  # the same choice every time
    other = [c for c in clips if kept(c, keep, seed=1)]  # another seed: another quarter of the synthetic clips
    assert 200 < sum(c.source.startswith("synth") for c in other) < 300 and other != chosen
    assert not any(kept(c, parse_keep(["*=0.5", "*=0"])) for c in clips)
    for bad in ("synth:*", "=0.5", "x=abc", "x=-0.1"):
        with pytest.raises(ValueError, match="SOURCE=FRACTION"):
            parse_keep([bad])


def test_time_limit_shrinks_the_run_and_its_schedule(tmp_path: Path) -> None:
    from test_train import kws_config

    from edgessm.train.trainer import Trainer

    sc = speech_commands_folder(tmp_path / "sc", speakers=4)
    cfg = kws_config(sc, steps=100_000, time_limit_min=0.02)  # 1.2 s: it ends right after the 40-step probe
    trainer = Trainer(cfg, tmp_path / "run", device="cpu", progress=False)
    trainer.fit()
    assert 40 < trainer.step == trainer.total_steps < 100_000
    assert trainer.scheduler.get_last_lr()[0] == pytest.approx(0.0, abs=1e-9)  # the cosine ran to its end
    assert (tmp_path / "run" / "model.safetensors").is_file()


def test_time_limit_follows_a_machine_that_slows_down_mid_run(monkeypatch) -> None:
    from edgessm.train import trainer as trainer_mod

    now = [0.0]
    monkeypatch.setattr(trainer_mod.time, "perf_counter", lambda: now[0])
    clock = trainer_mod._TimeLimit(minutes=10.0, start_step=0, skip=10, probe=30, refit=100)
    fits = {}
    for step in range(1, 2000):
        now[0] += 0.1 if step <= 500 else 0.2  # 10 steps/s, then half as fast
        if (fitted := clock.fit(step)) is not None:
            fits[step] = fitted
    assert sorted(fits)[:3] == [40, 140, 240]  # the probe's end, then every 100 steps
    assert fits[40] == pytest.approx(40 + 10 * (570 - 4.0), abs=1)  # 10 steps/s, 95% of 600 s, 4 s gone
    late = fits[740]  # measured over steps 641-740, all at 5 steps/s
    assert clock.rate == pytest.approx(5.0) and late == pytest.approx(740 + 5 * (570 - (50.0 + 240 * 0.2)), abs=1)
    assert late < fits[40]


def test_a_recognizer_pack_keeps_transcripts_and_leaves_out_the_test_speakers(tmp_path: Path) -> None:
    from fixtures import librispeech_folder

    from edgessm.train.config import TrainConfig
    from edgessm.train.pack import trim_keyword

    root = librispeech_folder(tmp_path / "ls", speakers=20, per_speaker=1)
    recipe = {"task": "asr", "model": {"channels": [8], "states": [4], "kinds": ["full"], "pools": [16]},
              "data": {"sources": [f"librispeech:{root}"], "validation_pct": 30.0, "test_pct": 30.0}}  # fmt: skip
    task = build_task(TrainConfig.from_dict(recipe))
    every = task.utterances()
    chosen = task.packed_clips()
    assert {c.split for c in chosen} == {"train", "validation"}
    assert len(chosen) == sum(task.split(c) in ("train", "validation") for c in every) < len(every)
    pack.write_pack(tmp_path / "p", chosen, trim_keyword(0.15, 32000), progress=False)
    packed = build_task(
        TrainConfig.from_dict({**recipe, "data": {**recipe["data"], "sources": [f"pack:{tmp_path / 'p'}"]}})
    )
    assert sorted((c.text, c.split) for c in packed.packed_clips()) == sorted((c.text, c.split) for c in chosen)


def _manifest(path: Path, wavs: list[Path], source: str) -> str:
    rows = ["path,speaker,label,text,split,source"] + [f"{w},{source}{i % 4},,,,{source}" for i, w in enumerate(wavs)]
    path.write_text("\n".join(rows) + "\n")
    return f"manifest:{path}"


def test_a_denoise_pack_keeps_each_recipe_keys_clips_and_the_held_out_noise(tmp_path: Path, capfd) -> None:
    """Clean speech, word-stream speakers, babble talkers and music each come back from the pack under
    their own recipe key; the validation noise is still found by name; test speakers stay out."""
    from fixtures import clean_and_noise_folders

    clean, noise = clean_and_noise_folders(tmp_path / "data", n_clean=12)
    words, talkers = clean_and_noise_folders(tmp_path / "w", n_clean=8, seed=1)[0], clean_and_noise_folders(
        tmp_path / "b", n_clean=8, seed=2)[0]  # fmt: skip
    music = tmp_path / "music"
    for i in range(2):
        t = np.arange(SR * 30) / SR
        tone = 0.2 * np.sin(2 * np.pi * 220 * (i + 1) * t) * (t > 20)  # loud in its last 10 s
        write_audio(music / f"track{i}.wav", tone.astype(np.float32), SR)
    sources = {k: _manifest(tmp_path / f"{k}.csv", sorted(d.rglob("*.wav")), k)
               for k, d in (("speech", clean), ("words", words), ("talkers", talkers))}  # fmt: skip
    cfg = tmp_path / "den.toml"
    cfg.write_text(f"""task = "denoise"
[model]
arch = "spectral"
channels = [8]
states = [4]
kinds = ["pointwise"]
bands = 8
fine_bins = 0
[data]
sources = ["{sources["speech"]}"]
noise = ["noise:{noise}"]
segment_samples = 3200
val_samples = 3200
val_items = 2
validation_pct = 25.0
test_pct = 25.0
val_noise_holdout = ["hum.wav"]
test_noise_holdout = []
word_sources = ["{sources["words"]}"]
word_stream_prob = 0.5
min_dynamic_range_db = 20.0  # the fixture words hold 26 dB
babble_sources = ["{sources["talkers"]}"]
music_sources = ["noise:{music}"]
music_max_s = 5.0
[augment.noise]
bank = 1.0
babble = 1.0
music = 1.0
[train]
steps = 3
batch_size = 2
workers = 0
""")
    task = build_task(load_config(str(cfg)))
    roles = task.packed_roles()
    assert roles["sources"] and all(c.split in ("train", "validation") for c in roles["sources"])
    assert all(c.split == "train" for key in ("word_sources", "babble_sources") for c in roles[key])
    out = tmp_path / "pack"
    assert main(["pack", str(cfg), "--out", str(out)]) == 0
    summary = json.loads((out / "pack.json").read_text())
    assert summary["roles"] == {"sources": ["speech"], "word_sources": ["words"], "babble_sources": ["talkers"],
                                "music_sources": ["music"]}  # fmt: skip
    packed = pack.read_pack(out)
    tracks = [c for c in packed if c.source == "music"]
    assert len(tracks) == 2 and all(len(pack.read_ref(c.path)) == 5 * SR for c in tracks)  # the loudest 5 s
    assert np.abs(pack.read_ref(tracks[0].path)).mean() > 0.05  # from the loud end of the track

    run = tmp_path / "run"
    assert main(["train", str(cfg), "--pack", str(out), "--out", str(run), "--device", "cpu", "--no-progress"]) == 0
    assert "done: step 3 of 3" in capfd.readouterr().out  # two training processes on 2 cores: fd 1
    data = json.loads((run / "config.json").read_text())["data"]
    root = out.resolve()
    assert data["sources"] == [f"pack:{root}@speech"] and data["babble_sources"] == [f"pack:{root}@talkers"]
    assert data["music_sources"] == [f"pack:{root}@music"] and data["noise"] == [f"pack:{root}"]
    trained = build_task(load_config(str(cfg), [f"{k}={v!r}" for k, v in (
        ("data.sources", data["sources"]), ("data.word_sources", data["word_sources"]),
        ("data.babble_sources", data["babble_sources"]), ("data.music_sources", data["music_sources"]),
        ("data.noise", data["noise"]))]))  # fmt: skip
    trained._prepare()
    assert len(trained.train_clips) == sum(c.split == "train" for c in roles["sources"])
    assert len(trained.noise_val) == 1 and np.abs(trained.noise_val[0]).max() > 0.05  # hum, found by its name
    assert len(trained.noise_train) == 1
