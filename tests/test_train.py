"""The trainer: losses go down for each task type, exact resume, DDP equivalence, the CLI."""

from __future__ import annotations

import csv
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fixtures import (
    clean_and_noise_folders,
    librispeech_folder,
    speech_commands_folder,
    tiny_kws_toml,
    write_audio,
)

from edgessm.train.config import TrainConfig, apply_overrides, load_config
from edgessm.train.trainer import RunExistsError, Trainer, load_model_weights

TINY_KWS = {"channels": [4, 8], "states": [4, 8], "kinds": ["full", "pointwise"], "pools": [4, 4], "dropout": 0.0}


def kws_config(folder: Path, steps: int = 30, **train) -> TrainConfig:
    return TrainConfig.from_dict(
        {
            "task": "kws",
            "model": TINY_KWS,
            "data": {"words": "sc10", "sources": [f"speech_commands:{folder}"],
                     "noise": [f"noise:{folder / '_background_noise_'}"], "clip_samples": 8192},
            "optim": {"lr": 0.01, "warmup": 0.1},
            "train": {"steps": steps, "batch_size": 8, "eval_every": steps, "checkpoint_every": 10, "log_every": 1,
                      "workers": 0, **train},
        }
    )  # fmt: skip


def _losses_steps(run: Path) -> list[str]:
    with open(run / "log.csv") as f:
        return [r["step"] for r in csv.DictReader(f) if r.get("loss")]


def _losses(run: Path, column: str = "loss") -> list[float]:
    with open(run / "log.csv") as f:
        return [float(r[column]) for r in csv.DictReader(f) if r.get(column)]


@pytest.fixture(scope="module")
def sc_folder(tmp_path_factory) -> Path:
    return speech_commands_folder(tmp_path_factory.mktemp("sc"))


def test_classification_loss_goes_down(sc_folder: Path, tmp_path: Path) -> None:
    trainer = Trainer(kws_config(sc_folder, steps=40), tmp_path / "run", device="cpu", progress=False)
    metrics = trainer.fit()
    losses = _losses(tmp_path / "run")
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5
    assert 0.0 <= metrics["accuracy"] <= 1.0
    assert (tmp_path / "run" / "model.safetensors").is_file()
    assert (tmp_path / "run" / "checkpoints" / "best.pt").is_file()


def test_resume_reaches_the_same_weights(sc_folder: Path, tmp_path: Path) -> None:
    full = Trainer(kws_config(sc_folder, steps=20), tmp_path / "a", device="cpu", progress=False)
    full.fit()
    part = Trainer(kws_config(sc_folder, steps=20), tmp_path / "b", device="cpu", progress=False)
    part.fit(stop_after=10)
    assert part.step == 10
    # resumed with data-loader workers: the data a step sees does not depend on them
    resumed = Trainer(kws_config(sc_folder, steps=20, workers=2), tmp_path / "b", device="cpu", progress=False,
                      resume=True)  # fmt: skip
    assert resumed.step == 10
    resumed.fit()
    for (name, a), (_, b) in zip(full.model.state_dict().items(), resumed.model.state_dict().items(), strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-5), name
    steps = [int(float(s)) for s in _losses_steps(tmp_path / "b")]
    assert steps == sorted(set(steps))  # the log has each step once, in order


def test_partial_init_takes_the_matching_blocks_and_trains_new_ones(sc_folder: Path, tmp_path: Path, capsys) -> None:
    """A network whose last block changed kind starts from another's front and first block (``--init-partial``);
    the HADES block's losses reach the log."""
    Trainer(kws_config(sc_folder, steps=2), tmp_path / "a", device="cpu", progress=False).fit()
    cfg = kws_config(sc_folder, steps=3)
    cfg.model = {**TINY_KWS, "kinds": ["full", "hades"], "hades": {"experts": 2, "top_q": 1, "head_dim": 4}}
    with pytest.raises(RuntimeError, match=r"Missing key|Unexpected key"):
        Trainer(cfg, tmp_path / "strict", device="cpu", progress=False, init=tmp_path / "a")
    from safetensors.torch import save_file

    fewer = dict(load_model_weights(tmp_path / "a", "cpu"))
    dropped = sorted(fewer)[-1]
    del fewer[dropped]  # weights without one tensor of the network (a shipped folder without a training head)
    save_file(fewer, str(tmp_path / "fewer.safetensors"))
    with pytest.raises(RuntimeError, match=rf"lacks 1 tensors .*{dropped}.*--init-partial"):
        Trainer(kws_config(sc_folder, steps=2), tmp_path / "f", device="cpu", progress=False,
                init=tmp_path / "fewer.safetensors")  # fmt: skip
    trainer = Trainer(cfg, tmp_path / "b", device="cpu", progress=False, init=tmp_path / "a", init_partial=True)
    assert "start fresh" in capsys.readouterr().out
    first = {k: v for k, v in trainer.model.state_dict().items() if ".0." in k}
    source = load_model_weights(tmp_path / "a", "cpu")
    assert first and all(torch.equal(v, source[k]) for k, v in first.items())
    trainer.fit()
    assert _losses(tmp_path / "b", "balance") and _losses(tmp_path / "b", "diversity")


def test_refuses_to_overwrite_a_run(sc_folder: Path, tmp_path: Path) -> None:
    Trainer(kws_config(sc_folder, steps=2), tmp_path / "r", device="cpu", progress=False).fit()
    with pytest.raises(RunExistsError, match="--resume"):
        Trainer(kws_config(sc_folder, steps=2), tmp_path / "r", device="cpu", progress=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_worker(rank: int, world: int, port: int, folder: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world), RANK=str(rank),
                      LOCAL_RANK=str(rank))  # fmt: skip
    torch.set_num_threads(1)
    Trainer(kws_config(Path(folder), steps=12), out, device="cpu", progress=False).fit()
    torch.distributed.destroy_process_group()


def test_two_process_gloo_ddp_equals_one_process(sc_folder: Path, tmp_path: Path) -> None:
    single = Trainer(kws_config(sc_folder, steps=12), tmp_path / "single", device="cpu", progress=False)
    single.fit()
    torch.multiprocessing.spawn(_ddp_worker, args=(2, _free_port(), str(sc_folder), str(tmp_path / "ddp")), nprocs=2)
    from safetensors.torch import load_file

    ddp = load_file(str(tmp_path / "ddp" / "model.safetensors"))
    for name, a in single.model.state_dict().items():
        assert torch.allclose(a, ddp[name], atol=1e-5, rtol=1e-4), name


def test_streaming_context_and_sentence_negatives(sc_folder: Path, tmp_path: Path) -> None:
    """With context, training examples are context + clip long and keep the clip's label; hard
    negatives are windows of keyword-free sentences labelled _unknown_; sentences naming a keyword
    are never used."""
    import numpy as np

    from edgessm.data.audio import write_audio
    from edgessm.data.manifest import Clip, write_manifest
    from edgessm.train.tasks import build_task

    rng = np.random.default_rng(0)
    texts = ["where did i put my notebook", "the seal is sleeping", "say yes to the dress"]
    clips = []
    for i, text in enumerate(texts):
        path = tmp_path / "sent" / f"s{i}.wav"
        write_audio(path, (0.1 * (i + 1) * rng.standard_normal(12000)).astype(np.float32), 16000)
        clips.append(Clip(str(path), speaker=f"v{i}", text=text, split="train", source="synth:test"))
    write_manifest(tmp_path / "sent" / "manifest.csv", clips)
    cfg = kws_config(sc_folder)
    cfg.data = {**cfg.data, "sources": [*cfg.data["sources"], f"manifest:{tmp_path / 'sent' / 'manifest.csv'}"],
                "context_prob": 1.0, "context_samples": 4000, "sentence_negatives": 0.5}  # fmt: skip
    task = build_task(cfg)
    ds = task.train_set()
    n = len(task.items["train"])
    assert len(ds) == n + task._n_silence(n) + round(0.5 * n)
    assert len(task.sentences) == 2  # "say yes ..." names a keyword
    unknown = task.labels.index("_unknown_")
    for i in (0, n - 1, len(ds) - 1):
        ex = task._example("train", i, np.random.default_rng(i))
        assert ex["audio"].shape == (1, 4000 + 8192)
        assert np.isfinite(ex["audio"]).all()
    assert task._example("train", len(ds) - 1, np.random.default_rng(1))["label"] == unknown
    assert task._example("train", 0, np.random.default_rng(1))["label"] == task.items["train"][0][1]
    # validation clips follow silence, the state exported graphs start every stream from
    val = task._example("validation", 0, None)["audio"]
    assert val.shape == (1, 4000 + 8192) and not val[0, :4000].any()
    assert task.describe()["warmup_samples"] == 4000
    assert "warmup_samples" not in build_task(kws_config(sc_folder)).describe()  # no context: zero state
    # the context is background, not silence, most of the time
    loud = [np.sqrt(np.mean(task._context(4000, np.random.default_rng(k))[0] ** 2)) > 1e-3 for k in range(40)]
    assert 0.7 <= np.mean(loud) < 1.0
    assert all(task._context(4000, np.random.default_rng(k))[1] == (0, 0) for k in range(40))  # no keyword in it
    # context_keyword_prob: speech contexts hold a previous keyword, unsupervised while the head hears it
    task.data.context_keyword_prob = 1.0
    spans = [task._context(16000, np.random.default_rng(k))[1] for k in range(60)]
    held = [s for s in spans if s != (0, 0)]
    assert len(held) == len(spans)  # every context, whatever its background
    assert all(0 <= a < b <= 16000 for a, b in held)
    for k in range(60):
        ex = task._example("train", 0, np.random.default_rng(k))
        if ex["unsupervised"] != (0, 0):
            a, b = ex["unsupervised"]
            assert b - a >= task.window_samples and np.abs(ex["audio"][0, a : a + 400]).max() > 0
            break
    else:
        raise AssertionError("no example had a keyword in its context")


def test_sentence_babble_puts_keyword_free_speech_under_the_keywords(sc_folder: Path, tmp_path: Path) -> None:
    """data.sentence_babble: the augmentation's babble source is the keyword-free sentences (here a
    3 kHz tone, which the keyword clips do not have); without it there is no babble source at all."""
    import numpy as np

    from edgessm.data.audio import write_audio
    from edgessm.data.manifest import Clip, write_manifest
    from edgessm.train.tasks import build_task

    t = np.arange(16000) / 16000
    path = tmp_path / "sent" / "s0.wav"
    write_audio(path, (0.3 * np.sin(2 * np.pi * 3000 * t)).astype(np.float32), 16000)
    clips = [Clip(str(path), speaker="v0", text="the seal is sleeping", split="train", source="synth:test")]
    write_manifest(tmp_path / "sent" / "manifest.csv", clips)
    cfg = kws_config(sc_folder)
    cfg.data = {**cfg.data, "sources": [*cfg.data["sources"], f"manifest:{tmp_path / 'sent' / 'manifest.csv'}"],
                "sentence_babble": True}  # fmt: skip
    babble_only = {"bank": 0.0, "colored": 0.0, "babble": 1.0, "babble_talkers": [1, 1]}
    cfg.augment = {"shift_prob": 0.0, "reverb_prob": 0.0, "mic_prob": 0.0, "gain_prob": 0.0, "noise_prob": 1.0,
                   "snr_db": [0.0, 0.0], "noise": babble_only}  # fmt: skip

    def tone_share(audio: np.ndarray) -> float:
        spec = np.abs(np.fft.rfft(audio.astype(np.float64))) ** 2
        f = np.fft.rfftfreq(len(audio), 1 / 16000)
        return float(spec[(f > 2950) & (f < 3050)].sum() / spec.sum())

    task = build_task(cfg)
    task.train_set()
    ex = task._example("train", 0, np.random.default_rng(3))["audio"][0]
    clean = task._clip_example("train", 0, None)["audio"][0]
    assert tone_share(ex) > 0.2 and tone_share(clean) < 0.01  # at 0 dB SNR the talker is half the energy
    cfg.data = {**cfg.data, "sentence_babble": False}
    without = build_task(cfg)
    without.train_set()
    with pytest.raises(ValueError, match="no noise source available"):
        without._example("train", 0, np.random.default_rng(3))


def test_recorded_clips_can_be_drawn_more_often(sc_folder: Path, tmp_path: Path) -> None:
    """real_repeats = k: every recorded training clip is k positions of the pass, a synthetic one 1;
    silence and hard negatives stay fractions of the whole pass."""
    import numpy as np

    from edgessm.data.audio import write_audio
    from edgessm.data.manifest import Clip, write_manifest
    from edgessm.train.tasks import build_task

    rng = np.random.default_rng(0)
    clips = []
    for i in range(6):
        path = tmp_path / "syn" / f"w{i}.wav"
        write_audio(path, (0.1 * rng.standard_normal(8000)).astype(np.float32), 16000)
        clips.append(Clip(str(path), speaker=f"v{i}", label="yes", split="train", source="synth:test"))
    write_manifest(tmp_path / "syn" / "manifest.csv", clips)
    cfg = kws_config(sc_folder)
    cfg.data = {**cfg.data, "sources": [*cfg.data["sources"], f"manifest:{tmp_path / 'syn' / 'manifest.csv'}"]}
    once = build_task(cfg)
    cfg.data = {**cfg.data, "real_repeats": 3}
    thrice = build_task(cfg)
    base, ds = once.train_set(), thrice.train_set()
    synth = sum(c.source.startswith("synth") for c, _ in thrice.items["train"])
    real = len(thrice.items["train"]) - synth
    assert synth == 6 and real > 0
    n = 3 * real + synth
    assert len(thrice.train_order) == n and len(ds) == n + thrice._n_silence(n) and len(base) < len(ds)
    drawn = [thrice.train_order.count(i) for i in range(len(thrice.items["train"]))]
    assert sorted(set(drawn)) == [1, 3]
    for i, (c, _) in enumerate(thrice.items["train"]):
        assert drawn[i] == (1 if c.source.startswith("synth") else 3)
    k = thrice.train_order.index(len(thrice.items["train"]) - 1)  # the pass position of the last item
    assert thrice._example("train", k, np.random.default_rng(0))["label"] == thrice.items["train"][-1][1]
    cfg.data = {**cfg.data, "real_repeats": 0}
    with pytest.raises(ValueError, match="real_repeats must be at least 1"):
        build_task(cfg).train_set()


def test_word_repeats_draw_one_words_recorded_clips_more_often(sc_folder: Path) -> None:
    """word_repeats = {"no": 2}: each recorded *no* is two positions of the pass and two entries of the context
    keywords' pool, every other clip one; a word the recipe does not have, or a count below 1, is refused."""
    from edgessm.train.tasks import build_task

    cfg = kws_config(sc_folder)
    base = build_task(cfg)
    base.train_set()
    cfg.data = {**cfg.data, "word_repeats": {"no": 2}}
    task = build_task(cfg)
    task.train_set()
    no = task.labels.index("no")
    items = task.items["train"]
    assert any(lab == no for _, lab in items) and any(lab != no for _, lab in items)
    for i, (_, lab) in enumerate(items):
        assert task.train_order.count(i) == (2 if lab == no else 1)
        assert task.keyword_train.count(i) == (2 if lab == no else base.keyword_train.count(i))
    n_no = sum(lab == no for _, lab in items)
    assert len(task.train_order) == len(base.train_order) + n_no
    for bad, message in (({"nope": 2}, "not words of"), ({"no": 0}, "whole numbers >= 1")):
        cfg.data = {**cfg.data, "word_repeats": bad}
        with pytest.raises(ValueError, match=message):
            build_task(cfg)


def _kws_task_with_sentences(sc_folder: Path, folder: Path, clips: list, **data):
    """A prepared KWS task over the test Speech Commands folder plus ``clips`` (written as a manifest in
    ``folder``), with hard negatives so the sentence pool is built; ``data`` overrides ``[data]``."""
    from edgessm.data.manifest import write_manifest
    from edgessm.train.tasks import build_task

    write_manifest(folder / "manifest.csv", clips)
    cfg = kws_config(sc_folder)
    cfg.data = {**cfg.data, "sources": [*cfg.data["sources"], f"manifest:{folder / 'manifest.csv'}"],
                "sentence_negatives": 0.5, **data}  # fmt: skip
    task = build_task(cfg)
    task.train_set()
    return task


def _pool_lengths(task) -> list[int]:
    """Sorted lengths (samples) of the task's sentence-pool entries."""
    return sorted(task.sentences.length(i) for i in range(len(task.sentences)))


def test_recorded_sentences_can_weigh_more_in_the_sentence_pool(sc_folder: Path, tmp_path: Path) -> None:
    """data.real_sentence_repeats = k: a recorded keyword-free sentence is k entries of the pool that
    context, hard negatives and babble draw from, a synthetic one 1; sentences naming a keyword stay out."""
    import numpy as np

    from edgessm.data.audio import write_audio
    from edgessm.data.manifest import Clip

    rng = np.random.default_rng(0)
    rows = [("the seal is sleeping", "synth:test"), ("where is my notebook", "read:test"),
            ("say yes to the dress", "read:test")]  # fmt: skip
    clips = []
    for i, (text, source) in enumerate(rows):
        path = tmp_path / "sent" / f"s{i}.wav"
        n = 12000 if source.startswith("synth") else 9000
        write_audio(path, (0.1 * rng.standard_normal(n)).astype(np.float32), 16000)
        clips.append(Clip(str(path), speaker=f"v{i}", text=text, split="train", source=source))
    once = _kws_task_with_sentences(sc_folder, tmp_path / "sent", clips)
    assert len(once.sentences) == 2
    four = _kws_task_with_sentences(sc_folder, tmp_path / "sent", clips, real_sentence_repeats=4)
    assert len(four.sentences) == 5  # the recorded sentence 4 times, the synthetic one once
    assert _pool_lengths(four) == [9000] * 4 + [12000]
    with pytest.raises(ValueError, match="real_sentence_repeats must be at least 1"):
        _kws_task_with_sentences(sc_folder, tmp_path / "sent", clips, real_sentence_repeats=0)


def test_kws_never_trains_on_the_streaming_evaluations_speech_background(sc_folder: Path, tmp_path: Path) -> None:
    """Recorded read sentences of the speakers the streaming evaluation uses as its speech background
    (stream_background_speaker) stay out of the keyword spotter's sentence pool; the others join it."""
    import numpy as np

    from edgessm.data.audio import write_audio
    from edgessm.data.manifest import Clip
    from edgessm.eval.backgrounds import stream_background_speaker

    rng = np.random.default_rng(0)
    clips = []
    for i in range(8):
        path = tmp_path / "read" / f"s{i}.wav"
        write_audio(path, (0.1 * rng.standard_normal(4000 + 1000 * i)).astype(np.float32), 16000)
        clips.append(Clip(str(path), speaker=f"reader{i}", text="the seal is sleeping", split="train",
                          source="real_read_speech"))  # fmt: skip
    held = [stream_background_speaker(c) for c in clips]
    assert any(held) and not all(held)
    assert not stream_background_speaker(Clip("x.wav", speaker="reader0", text="a", source="synth:test"))
    task = _kws_task_with_sentences(sc_folder, tmp_path / "read", clips)
    assert _pool_lengths(task) == sorted(4000 + 1000 * i for i in range(8) if not held[i])


def test_waveform_loss_goes_down(tmp_path: Path) -> None:
    clean, noise = clean_and_noise_folders(tmp_path / "data")
    cfg = TrainConfig.from_dict(
        {
            "task": "denoise",
            "model": {"channels": [4, 8], "states": [4, 8], "kinds": ["full", "pointwise"], "pools": [4, 4],
                      "bottleneck_states": 8, "n_bottleneck": 1},
            "data": {"sources": [f"folder:{clean}"], "noise": [f"noise:{noise}"], "segment_samples": 4096,
                     "val_noise_holdout": ["hum.wav"], "validation_pct": 50.0},
            "optim": {"lr": 0.005, "warmup": 0.05},
            "train": {"steps": 40, "batch_size": 4, "eval_every": 40, "log_every": 1, "workers": 0},
        }
    )  # fmt: skip
    metrics = Trainer(cfg, tmp_path / "run", device="cpu", progress=False).fit()
    # the total rises as the spectral term's weight ramps up: each term must fall on its own
    for part in ("wave", "spec"):
        values = _losses(tmp_path / "run", part)
        assert sum(values[-5:]) / 5 < 0.8 * sum(values[:5]) / 5, part
    assert "si_sdr_improvement" in metrics


def test_ctc_loss_goes_down(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("EDGESSM_CACHE", str(tmp_path / "cache"))  # the decoded-audio cache stays in tmp
    root = librispeech_folder(tmp_path / "ls")
    cfg = TrainConfig.from_dict(
        {
            "task": "asr",
            "model": {"channels": [8, 16], "states": [4, 16], "kinds": ["full", "pointwise"], "pools": [16, 20]},
            "data": {"sources": [f"librispeech:{root}"], "validation_pct": 40.0},
            "optim": {"lr": 0.01, "warmup": 0.05},
            "train": {"steps": 30, "batch_size": 4, "eval_every": 30, "log_every": 1, "workers": 0},
        }
    )  # fmt: skip
    metrics = Trainer(cfg, tmp_path / "run", device="cpu", progress=False).fit()
    losses = _losses(tmp_path / "run")
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5
    assert 0.0 <= metrics["cer"]


def test_ctc_examples_mix_sentences_words_and_joined_word_sequences(tmp_path: Path, monkeypatch) -> None:
    """Sequences join single-word clips cut to their speech; transcripts always match; long audio is left out."""
    monkeypatch.setenv("EDGESSM_CACHE", str(tmp_path / "cache"))
    import numpy as np

    from edgessm.data.audio import write_audio
    from edgessm.data.manifest import Clip, write_manifest
    from edgessm.train.tasks import build_task

    clips = []
    for i, (text, seconds) in enumerate([("go", 1.0), ("stop", 1.0), ("up", 1.0), ("go left now", 2.0),
                                         ("turn it up", 2.0), ("much too long", 9.0)]):  # fmt: skip
        x = np.zeros(int(16000 * seconds), np.float32)
        x[4000:-4000] = 0.3 * np.sin(np.arange(len(x) - 8000) * 0.2 * (i + 1))  # "speech" between silences
        write_audio(tmp_path / f"{i}.wav", x, 16000)
        clips.append(Clip(str(tmp_path / f"{i}.wav"), speaker=f"s{i}", text=text, split="train"))
    clips.append(Clip(str(tmp_path / "0.wav"), speaker="v", text="go", split="validation"))
    write_manifest(tmp_path / "m.csv", clips)
    cfg = TrainConfig.from_dict({"task": "asr", "model": {"channels": [4], "states": [4], "kinds": ["full"],
                                 "pools": [320]},
                                 "data": {"sources": [f"manifest:{tmp_path / 'm.csv'}"], "max_samples": 128000,
                                          "sentence_weight": 0, "word_weight": 0, "sequence_weight": 1}})  # fmt: skip
    task = build_task(cfg)
    items = [task.train_set()[(i, i)] for i in range(20)]
    for it in items:
        words = it["text"].split()
        assert 2 <= len(words) <= 5 and set(words) <= {"go", "stop", "up"}
        assert it["tokens"] == task.tok.encode(it["text"])
        # each word is its 0.5 s of speech plus 50 ms margins: no clip's leading/trailing 0.25 s silence
        assert len(it["audio"]) < len(words) * 16000 * (0.5 + 0.1) + (len(words) - 1) * 16000 * 0.5 + 1
    assert "much too long" not in {c.text for c in [task.clips[i] for i in task.pool["train"]["sentence"]]}
    assert task.describe()["labels"][:3] == ["<blank>", " ", "'"]


def _tiny_asr(manifest: Path, **data) -> TrainConfig:
    """A one-block recognizer recipe on the utterances of ``manifest`` with ``data`` settings."""
    return TrainConfig.from_dict({"task": "asr", "model": {"channels": [4], "states": [4], "kinds": ["full"],
                                  "pools": [320]}, "data": {"sources": [f"manifest:{manifest}"], **data}})  # fmt: skip


def test_source_weights_set_each_sources_share_of_the_draws(tmp_path: Path, monkeypatch) -> None:
    """A 2-clip real source weighted 3 : 1 against a 6-clip synthetic one gets 3/4 of the words drawn."""
    monkeypatch.setenv("EDGESSM_CACHE", str(tmp_path / "cache"))
    import numpy as np

    from edgessm.data.audio import write_audio
    from edgessm.data.manifest import Clip, write_manifest
    from edgessm.train.tasks import build_task, source_draw_weights

    clips = []
    for i in range(8):
        write_audio(tmp_path / f"{i}.wav", 0.1 * np.ones(8000, np.float32), 16000)
        src = "real" if i < 2 else "synth:tts"
        clips.append(Clip(str(tmp_path / f"{i}.wav"), speaker=f"s{i}", text="abcdefgh"[i], split="train", source=src))
    clips.append(Clip(str(tmp_path / "0.wav"), speaker="v", text="a", split="validation", source="real"))
    write_manifest(tmp_path / "m.csv", clips)

    def task_with(weights):
        return build_task(_tiny_asr(tmp_path / "m.csv", sentence_weight=0, word_weight=1, sequence_weight=0,
                                    source_weights=weights))  # fmt: skip

    weighted, plain = task_with({"real": 3, "synth:*": 1}).train_set(), task_with({}).train_set()
    items = [weighted[(i, i)]["text"] for i in range(800)]
    real = sum(t in ("a", "b") for t in items) / len(items)
    assert 0.70 < real < 0.80 and len(set(items)) == 8
    uniform = [plain[(i, i)]["text"] for i in range(800)]
    assert 0.18 < sum(t in ("a", "b") for t in uniform) / 800 < 0.32  # no weights: 2 of 8 clips
    p = source_draw_weights(["a", "b", "b", "c"], {"a": 2, "*": 1})
    assert np.allclose(p, [0.5, 0.125, 0.125, 0.25])
    with pytest.raises(ValueError, match="no pattern matches source 'synth:tts'"):
        task_with({"real": 1}).train_set()
    with pytest.raises(ValueError, match="weight 0"):
        source_draw_weights(["a"], {"a": 0})


def test_length_buckets_give_each_batch_one_shape_and_keep_every_utterances_share(tmp_path: Path, monkeypatch) -> None:
    """``[data] length_buckets``: the trainer's grouped sampler gives every item of a step the step's draw, so
    a batch is all sentences of one length bucket, all single words, or sequences of one word count; each
    utterance's share of the draws stays that of its source weight; a batch pads far less."""
    monkeypatch.setenv("EDGESSM_CACHE", str(tmp_path / "cache"))
    import numpy as np

    from edgessm.data.audio import write_audio
    from edgessm.data.manifest import Clip, write_manifest
    from edgessm.train.sampler import StepSampler
    from edgessm.train.tasks import build_task

    clips = []
    for i in range(8):  # sentences of 1..8 s, the odd ones from a source weighing 3
        x = 0.1 * np.ones(16000 * (i + 1), np.float32)
        write_audio(tmp_path / f"s{i}.wav", x, 16000)
        clips.append(Clip(str(tmp_path / f"s{i}.wav"), speaker=f"s{i}", text=f"say {'abcdefgh'[i]}",
                          split="train", source="heavy" if i % 2 else "light"))  # fmt: skip
    for i, w in enumerate(["go", "up"]):
        write_audio(tmp_path / f"w{i}.wav", 0.1 * np.ones(8000, np.float32), 16000)
        clips.append(Clip(str(tmp_path / f"w{i}.wav"), speaker=f"w{i}", text=w, split="train", source="light"))
    clips.append(Clip(str(tmp_path / "w0.wav"), speaker="v", text="go", split="validation", source="light"))
    write_manifest(tmp_path / "m.csv", clips)

    def task_with(buckets):
        return build_task(_tiny_asr(tmp_path / "m.csv", max_samples=160000, sentence_weight=0.6, word_weight=0.2,
                                    sequence_weight=0.2, source_weights={"heavy": 3, "light": 1},
                                    length_buckets=buckets, val_items=1))  # fmt: skip

    bucketed, plain = task_with(4), task_with(0)
    data = bucketed.train_set()
    assert data.grouped and not plain.train_set().grouped
    p, runs, _ = bucketed._buckets["train"]
    assert len(runs) == 4 and np.isclose(p.sum(), 1.0)
    sampler = StepSampler(len(data), 4, 300, seed=3, grouped=True)
    assert len({b[2] for b in sampler.global_batch(7)}) == 1  # one step seed per global batch
    assert [b[:2] for b in sampler.global_batch(7)] == StepSampler(len(data), 4, 300, seed=3).global_batch(7)
    texts, padded, speech = [], 0, 0
    for batch in sampler:
        items = [data[key] for key in batch]
        kinds = {"word" if " " not in t else "sentence" if t.startswith("say") else "sequence"
                 for t in (it["text"] for it in items)}  # fmt: skip
        assert len(kinds) == 1, [it["text"] for it in items]
        if kinds == {"sequence"}:
            assert len({len(it["text"].split()) for it in items}) == 1
        if kinds == {"sentence"}:
            buckets = {next(k for k, r in enumerate(runs) if "abcdefgh".index(it["text"][-1]) in
                            [bucketed.pool["train"]["sentence"][j] for j in r]) for it in items}  # fmt: skip
            assert len(buckets) == 1
            texts += [it["text"] for it in items]
        lengths = [len(it["audio"]) for it in items]
        padded, speech = padded + max(lengths) * len(lengths), speech + sum(lengths)
    share = np.array([texts.count(f"say {c}") for c in "abcdefgh"]) / len(texts)
    assert np.allclose(share, [1 / 16, 3 / 16] * 4, atol=0.05)  # the source weights, bucketed or not
    loose = [plain.train_set()[key] for batch in StepSampler(len(data), 4, 300, seed=3) for key in batch]
    loose_padded = sum(max(len(it["audio"]) for it in loose[i : i + 4]) * 4 for i in range(0, len(loose), 4))
    assert padded / speech < 1.25 < loose_padded / sum(len(it["audio"]) for it in loose)
    with pytest.raises(ValueError, match="length_buckets"):
        task_with(-1).train_set()


def test_teacher_confidence_weighs_each_utterance_in_the_ctc_loss(tmp_path: Path, monkeypatch) -> None:
    """``[data] confidence_weighting = p``: an utterance with the teacher's confidence c weighs (c / mean c)^p
    in the CTC loss (a joined sequence the mean of its parts), one with a human transcript 1; the loss is the
    weighted mean of the per-utterance losses (all weights 1: PyTorch's own mean)."""
    monkeypatch.setenv("EDGESSM_CACHE", str(tmp_path / "cache"))
    import csv

    import numpy as np
    import torch

    from edgessm.data.audio import write_audio
    from edgessm.data.label import confidences
    from edgessm.train.tasks import build_task

    rows = []
    for i, (text, conf) in enumerate([("go", "0.4"), ("stop", "0.8"), ("up", ""), ("go", "0.6")]):
        x = np.zeros(16000, np.float32)
        x[4000:-4000] = 0.3 * np.sin(np.arange(8000) * 0.2 * (i + 1))
        write_audio(tmp_path / f"{i}.wav", x, 16000)
        split = "validation" if i == 3 else "train"
        rows.append({"path": f"{i}.wav", "speaker": f"s{i}", "text": text, "split": split, "confidence": conf})
    with open(tmp_path / "labels.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["path", "speaker", "text", "split", "confidence"])
        w.writeheader()
        w.writerows(rows)
    known = confidences(tmp_path / "labels.csv")
    assert known == {str((tmp_path / f"{i}.wav").resolve()): c for i, c in ((0, 0.4), (1, 0.8), (3, 0.6))}

    def task_with(power, kinds=(0, 1, 0)):
        cfg = TrainConfig.from_dict({"task": "asr", "model": {"channels": [4], "states": [4], "kinds": ["full"],
                                     "pools": [320]},
                                     "data": {"sources": [f"manifest:{tmp_path / 'labels.csv'}"],
                                              "sentence_weight": kinds[0], "word_weight": kinds[1],
                                              "sequence_weight": kinds[2], "confidence_weighting": power,
                                              "val_items": 2}})  # fmt: skip
        return build_task(cfg)

    task = task_with(1.0)
    items = [task.train_set()[(i, i)] for i in range(30)]
    mean = (0.4 + 0.8 + 0.6) / 3  # every utterance with a confidence, validation's too
    expected = {"go": 0.4 / mean, "stop": 0.8 / mean, "up": 1.0}
    assert {it["text"] for it in items} == set(expected)
    assert all(np.isclose(it["weight"], expected[it["text"]]) for it in items)
    squared = [task_with(2.0).train_set()[(i, i)] for i in range(10)]
    assert all(np.isclose(it["weight"], expected[it["text"]] ** 2) for it in squared)  # "up" stays 1
    sequences = task_with(1.0, kinds=(0, 0, 1)).train_set()
    for i in range(10):
        it = sequences[(i, i)]
        assert np.isclose(it["weight"], np.mean([expected[w] for w in it["text"].split()]))

    batch = task.collate(items[:4])
    assert batch["weights"].shape == (4,)
    torch.manual_seed(0)
    net = task.build_model()
    plain = {k: v for k, v in batch.items() if k != "weights"}
    with torch.no_grad():
        weighted, _ = task.loss(net, batch, 0.0)
        ones, _ = task.loss(net, {**batch, "weights": torch.ones(4)}, 0.0)
        unweighted, _ = task.loss(net, plain, 0.0)
        first, _ = task.loss(net, {**batch, "weights": torch.tensor([1.0, 0.0, 0.0, 0.0])}, 0.0)
        alone, _ = task.loss(net, task.collate(items[:1]) | {"weights": torch.ones(1)}, 0.0)
    assert torch.isclose(ones, unweighted, rtol=1e-5) and not torch.isclose(weighted, unweighted, rtol=1e-3)
    assert torch.isclose(first, alone, rtol=1e-4)  # weight 0 takes an utterance out
    assert "weight" not in task_with(0.0).train_set()[(0, 0)]  # off: the loss as before

    # the weighted loss trains under bf16 autocast on the CPU (as train.amp = "bf16" runs it)
    from edgessm.train.trainer import Trainer

    amp = TrainConfig.from_dict({**task.cfg.to_dict(), "train": {"steps": 3, "batch_size": 2, "eval_every": 3,
                                 "log_every": 1, "workers": 0, "amp": "bf16"}})  # fmt: skip
    Trainer(amp, tmp_path / "run", device="cpu", progress=False).fit()
    with open(tmp_path / "run" / "log.csv") as f:
        losses = [float(r["loss"]) for r in csv.DictReader(f) if r.get("loss")]
    assert len(losses) == 3 and np.isfinite(losses).all()

    human = tmp_path / "human.csv"
    human.write_text("path,speaker,text,split\n0.wav,s0,go,train\n3.wav,s3,go,validation\n")
    assert confidences(human) == {}
    cfg = TrainConfig.from_dict({"task": "asr", "model": {"channels": [4], "states": [4], "kinds": ["full"],
                                 "pools": [320]},
                                 "data": {"sources": [f"manifest:{human}"], "confidence_weighting": 1.0}})  # fmt: skip
    with pytest.raises(ValueError, match="no source carries the teacher's confidences"):
        build_task(cfg).train_set()
    with pytest.raises(ValueError, match="confidence_weighting must be >= 0"):
        task_with(-1.0)


def test_ctc_warmup_silence_precedes_every_example_and_is_not_scored(tmp_path: Path, monkeypatch) -> None:
    """``warmup_s``: examples start with that much silence; its frames never enter the loss or the decoding."""
    monkeypatch.setenv("EDGESSM_CACHE", str(tmp_path / "cache"))
    import numpy as np
    import torch
    import torch.nn.functional as F

    from edgessm.data.audio import write_audio
    from edgessm.data.manifest import Clip, write_manifest
    from edgessm.train.tasks import build_task

    clips = []
    for i, (text, split) in enumerate([("go", "train"), ("stop", "train"), ("up", "validation")]):
        x = 0.3 * np.sin(np.arange(16000) * 0.2 * (i + 1)).astype(np.float32)
        write_audio(tmp_path / f"{i}.wav", x, 16000)
        clips.append(Clip(str(tmp_path / f"{i}.wav"), speaker=f"s{i}", text=text, split=split))
    write_manifest(tmp_path / "m.csv", clips)

    def config(warmup: float) -> TrainConfig:
        return TrainConfig.from_dict({"task": "asr", "model": {"channels": [4], "states": [4], "kinds": ["full"],
                                      "pools": [320]},
                                      "data": {"sources": [f"manifest:{tmp_path / 'm.csv'}"], "warmup_s": warmup,
                                               "sequence_weight": 0, "val_items": 2}})  # fmt: skip

    task = build_task(config(0.04))
    assert task.describe()["warmup_samples"] == 640 and "warmup_samples" not in build_task(config(0)).describe()
    item = task.train_set()[(0, 0)]
    assert len(item["audio"]) == 640 + 16000 and not item["audio"][:640].any()
    assert task._val and all(not x[:640].any() and x[640:].any() for _, x, _ in task._val)

    class Spells(torch.nn.Module):
        """Shouts 'u' (the validation words begin with it) in the two warm-up frames, then the logits given."""

        stride = 320

        def __init__(self, after: torch.Tensor) -> None:
            super().__init__()
            self.after = after

        def forward(self, x):
            shout = torch.full((x.shape[0], 29, 2), -30.0)
            shout[:, task.tok.index["u"]] = 30.0
            return torch.cat([shout, self.after.expand(x.shape[0], -1, -1)], -1)

    after = torch.randn(1, 29, 50, generator=torch.Generator().manual_seed(0))
    batch = task.collate([task.train_set()[(i, i)] for i in range(2)])
    loss, _ = task.loss(Spells(after), batch, 0.0)
    logp = after.expand(2, -1, -1).log_softmax(1).permute(2, 0, 1)
    want = F.ctc_loss(logp, batch["tokens"], torch.full((2,), 50), batch["token_lengths"], zero_infinity=True)
    assert torch.allclose(loss, want)
    blanks = torch.full((1, 29, 50), -30.0)
    blanks[:, 0] = 30.0
    assert task.evaluate(Spells(blanks), "cpu")["cer"] == 1.0  # the shouted 'u's are not decoded: all deleted
    with pytest.raises(ValueError, match=r"multiple of 0\.02 s"):
        build_task(config(0.03))


def test_config_overrides_and_errors(tmp_path: Path) -> None:
    d = apply_overrides({"task": "kws", "train": {"steps": 5}}, ["train.steps=7", "optim.lr=3e-3", "data.words=sc12"])
    cfg = TrainConfig.from_dict(d)
    assert cfg.train.steps == 7 and cfg.optim.lr == 0.003 and cfg.data["words"] == "sc12"
    with pytest.raises(ValueError, match="unknown keys in \\[train\\]"):
        TrainConfig.from_dict({"task": "kws", "train": {"stepz": 1}})
    with pytest.raises(FileNotFoundError, match="shipped config"):
        load_config("no-such-config")


def test_compile_takes_a_mode_and_the_trainer_passes_it_on(sc_folder: Path, tmp_path: Path, monkeypatch) -> None:
    def settings(value):
        return TrainConfig.from_dict({"task": "kws", "train": {"compile": value}}).train.compile

    assert [settings(v) for v in (True, False, "off", "reduce-overhead")] == [
        "default", False, False, "reduce-overhead"]  # fmt: skip
    assert apply_overrides({"task": "kws"}, ["train.compile=max-autotune"])["train"]["compile"] == "max-autotune"
    with pytest.raises(ValueError, match=r"train.compile = 'fast': use true/false or one of default, reduce-overhead"):
        settings("fast")
    seen = []
    monkeypatch.setattr(torch, "compile", lambda net, mode: seen.append(mode) or net)
    cfg = kws_config(sc_folder, steps=1)
    cfg.train.compile = "reduce-overhead"
    Trainer(cfg, tmp_path / "run", device="cpu", progress=False)
    assert seen == ["reduce-overhead"]


def test_sc_test_set_cannot_be_trained_on() -> None:
    from edgessm.train.tasks import load_sources

    with pytest.raises(ValueError, match="evaluation only"):
        load_sources(["shared:sc_test"])


def test_cli_trains_a_speech_commands_folder_end_to_end(sc_folder: Path, tmp_path: Path, capsys) -> None:
    from edgessm.cli import main

    cfg = tiny_kws_toml(tmp_path / "tiny.toml", sc_folder, steps=6)
    out = tmp_path / "run"
    assert main(["train", str(cfg), "--out", str(out), "--device", "cpu", "--no-progress"]) == 0
    assert "done: step 6 of 6" in capsys.readouterr().out
    assert (out / "model.safetensors").is_file() and (out / "model.json").is_file()
    with pytest.raises(SystemExit, match="--resume"):
        main(["train", str(cfg), "--out", str(out), "--device", "cpu"])
    # resuming a finished run is a no-op that keeps the weights
    assert main(["train", str(cfg), "--out", str(out), "--device", "cpu", "--resume", "--no-progress"]) == 0


def test_snapshots_are_model_folders_that_soup_and_validate(sc_folder: Path, tmp_path: Path, capsys) -> None:
    """``train.snapshot_every`` writes the weights as model folders; the last one is the run's final weights;
    a soup of them scores through ``edgessm train --validate`` as the run's own evaluation would."""
    import json

    from edgessm.cli import main

    run = tmp_path / "run"
    trainer = Trainer(kws_config(sc_folder, steps=6, snapshot_every=4), run, device="cpu", progress=False)
    metrics = trainer.fit()
    snaps = sorted(p.name for p in (run / "snapshots").iterdir())
    assert snaps == ["step_0000004", "step_0000006"]  # every 4 steps and the last
    final = load_model_weights(run, "cpu")
    last = load_model_weights(run / "snapshots" / "step_0000006", "cpu")
    early = load_model_weights(run / "snapshots" / "step_0000004", "cpu")
    assert all(torch.equal(final[k], last[k]) for k in final)
    assert any(not torch.equal(final[k], early[k]) for k in final)
    cfg = tiny_kws_toml(tmp_path / "tiny.toml", sc_folder, steps=6)
    capsys.readouterr()
    # the final weights score what the run's last evaluation logged
    assert main(["train", str(cfg), "--init", str(run), "--validate", "--device", "cpu"]) == 0
    scored = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert scored["accuracy"] == pytest.approx(metrics["accuracy"], abs=1e-5)
    soup = tmp_path / "soup"
    assert main(["soup", *(str(run / "snapshots" / n) for n in snaps), "--out", str(soup)]) == 0
    capsys.readouterr()
    assert main(["train", str(cfg), "--init", str(soup), "--validate", "--device", "cpu"]) == 0
    assert 0.0 <= json.loads(capsys.readouterr().out.strip().splitlines()[-1])["accuracy"] <= 1.0
    with pytest.raises(SystemExit, match="--init"):
        main(["train", str(cfg), "--validate"])
    with pytest.raises(SystemExit, match="--out is required"):
        main(["train", str(cfg)])
    with pytest.raises(ValueError, match="snapshot_every"):
        Trainer(kws_config(sc_folder, snapshot_every=-1), tmp_path / "bad", device="cpu", progress=False)
    for key in ("eval_every", "log_every", "checkpoint_every"):  # once a ZeroDivisionError after the first step
        with pytest.raises(ValueError, match=f"train.{key} must be .* >= 1, got 0"):
            Trainer(kws_config(sc_folder, **{key: 0}), tmp_path / "bad", device="cpu", progress=False)


def test_front_plan_reaches_the_filterbank_and_trains(sc_folder: Path, tmp_path: Path) -> None:
    from edgessm.ssm.filterbank import FilterbankFront

    cfg = kws_config(sc_folder, steps=2, front_plan="chunked")
    cfg.model = {**TINY_KWS, "front": "filterbank", "front_bands": 8, "front_pool": 64}
    trainer = Trainer(cfg, tmp_path / "run", device="cpu", progress=False)
    fronts = [m for m in trainer.model.modules() if isinstance(m, FilterbankFront)]
    assert len(fronts) == 1 and fronts[0].plan == "chunked"
    trainer.fit()
    assert all(math.isfinite(v) for v in _losses(tmp_path / "run"))
    cfg.train.front_plan = "fast"
    with pytest.raises(ValueError, match=r"train\.front_plan"):
        Trainer(cfg, tmp_path / "bad", device="cpu", progress=False)


def test_cli_reports_a_missing_folder(tmp_path: Path) -> None:
    from edgessm.cli import main

    cfg = tmp_path / "bad.toml"
    cfg.write_text('task = "kws"\n[data]\nsources = ["speech_commands:/no/such/folder"]\n[train]\nworkers = 0\n')
    with pytest.raises(SystemExit, match="does not exist"):
        main(["train", str(cfg), "--out", str(tmp_path / "r"), "--device", "cpu", "--no-progress"])


RECIPES = sorted(p.stem for p in (Path(__file__).parents[1] / "edgessm" / "train" / "configs").glob("*.toml"))


def test_the_recipe_list_finds_the_shipped_recipes() -> None:
    assert {"kws", "kws_v8", "denoise", "denoise_v4", "asr", "asr_v5"} <= set(RECIPES)


@pytest.mark.parametrize("name", RECIPES)
def test_shipped_recipes_are_valid(name: str) -> None:
    from edgessm.data import augment
    from edgessm.data.corpora import shared_data_dir
    from edgessm.train.tasks import _resolve, build_task

    if shared_data_dir(required=False) is None:
        pytest.skip("the shipped recipes read shared/data, which is not present")
    cfg = load_config(name)
    task = build_task(cfg)
    model = task.build_model()
    assert sum(p.numel() for p in model.parameters()) > 10_000
    from edgessm.train.trainer import freeze

    freeze(model, list(cfg.train.freeze))  # the modules a recipe freezes exist in its network
    settings = _resolve(cfg.augment)
    cls = augment.DenoiseAugmentConfig if name.startswith("denoise") else augment.KwsAugmentConfig
    assert augment.config_from_dict(cls, settings) is not None


def test_paper_sized_recognizer_recipe_builds() -> None:
    """asr-librispeech is Table 7's backbone: 12 SSM blocks, total stride 320, a few million parameters."""
    from edgessm.ssm import CentaurusBlock
    from edgessm.train.tasks import build_task

    cfg = load_config("asr-librispeech")
    model = build_task(cfg).build_model()
    assert model.stride == 320
    assert sum(isinstance(m, CentaurusBlock) for m in model.encoder.layers) == 12
    assert 4e6 < model.counts().params < 8e6


def test_trained_run_exports_through_the_cli(sc_folder: Path, tmp_path: Path, capsys) -> None:
    from edgessm.cli import main
    from edgessm.runtime import StepModel

    run = tmp_path / "run"
    Trainer(kws_config(sc_folder, steps=3), run, device="cpu", progress=False).fit()
    assert main(["export", str(run), "--out", str(tmp_path / "graph"), "--chunk", "32"]) == 0
    assert "max abs error" in capsys.readouterr().out
    model = StepModel(tmp_path / "graph" / "graph.onnx")  # the graph is named after its folder
    assert model.info.task == "kws" and model.info.labels[-2:] == ["_unknown_", "_silence_"]
    from edgessm.runtime.level import AgcConfig

    assert model.agc == AgcConfig()  # a keyword spotter's graph asks for the input level control by default
    assert main(["export", str(run), "--out", str(tmp_path / "raw"), "--chunk", "32", "--agc", "off"]) == 0
    assert StepModel(tmp_path / "raw" / "raw.onnx").agc is None
    assert main(["export", str(run), "--out", str(tmp_path / "cut"), "--chunk", "32", "--agc-cut", "12"]) == 0
    assert StepModel(tmp_path / "cut" / "cut.onnx").agc == AgcConfig(max_cut=12.0)
    with pytest.raises(SystemExit, match="--agc-cut needs the level control"):
        main(["export", str(run), "--out", str(tmp_path / "x"), "--chunk", "32", "--agc", "off", "--agc-cut", "12"])
    with pytest.raises(SystemExit, match="multiple of the network's total stride"):
        main(["export", str(run), "--out", str(tmp_path / "graph"), "--chunk", "30"])
    # a run's checkpoint exports too (an unfinished run has no model.safetensors yet)
    assert main(["export", str(run), "--out", str(tmp_path / "ck"), "--checkpoint", "last", "--chunk", "32"]) == 0
    assert StepModel(tmp_path / "ck" / "ck.onnx").info.labels == model.info.labels
    # per-keyword thresholds of a calibration report travel in the graph and become listen's decision
    import json

    from edgessm.runtime.kws import graph_decision

    cal = tmp_path / "calibration.json"
    cal.write_text(json.dumps({"chosen": {"yes": 0.55, "no": 0.95}}))
    assert main(["export", str(run), "--out", str(tmp_path / "cal"), "--chunk", "32", "--threshold", "0.8",
                 "--class-thresholds", str(cal), "--contrast-db", "6", "--speech-after", "0.5",
                 "--hold", "0.3", "--margin", "0.2"]) == 0  # fmt: skip
    decision = graph_decision(StepModel(tmp_path / "cal" / "cal.onnx").info.extra)
    assert decision.threshold == 0.8 and decision.class_thresholds == {"yes": 0.55, "no": 0.95}
    assert decision.contrast_db == 6.0 and decision.speech_after == 0.5 and decision.hold_s == 0.3  # gates too
    assert decision.margin == 0.2
    with pytest.raises(SystemExit, match="--contrast-db must be 0"):
        main(["export", str(run), "--out", str(tmp_path / "bad"), "--chunk", "32", "--contrast-db", "-1"])
    for bad in ({"chosen": {"maybe": 0.5}}, {"chosen": {"yes": 1.5}}, {"other": 1}):
        cal.write_text(json.dumps(bad))
        with pytest.raises(SystemExit, match="class-thresholds"):
            main(["export", str(run), "--out", str(tmp_path / "bad"), "--chunk", "32", "--class-thresholds", str(cal)])


def test_cli_trains_a_clean_and_noise_folder_end_to_end(tmp_path: Path, capfd) -> None:
    """The recipe's defaults on this machine: on 2 or more cores, two training processes (their output on fd 1)."""
    from edgessm.cli import main

    clean, noise = clean_and_noise_folders(tmp_path / "data")
    cfg = tmp_path / "den.toml"
    cfg.write_text(
        f"""task = "denoise"
[model]
channels = [4, 8]
states = [4, 8]
kinds = ["full", "pointwise"]
pools = [4, 4]
bottleneck_states = 8
n_bottleneck = 1
[data]
sources = ["folder:{clean}"]
noise = ["noise:{noise}"]
segment_samples = 2048
validation_pct = 50.0
[augment]
mask_prob = 0.5
[train]
steps = 4
batch_size = 2
workers = 0
"""
    )
    out = tmp_path / "run"
    assert main(["train", str(cfg), "--out", str(out), "--device", "cpu", "--no-progress"]) == 0
    assert "si_sdr_improvement" in capfd.readouterr().out
    assert (out / "model.safetensors").is_file()


def test_sigterm_to_the_whole_process_group_checkpoints_and_resumes(sc_folder: Path, tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'task = "kws"\n[model]\nchannels = [4, 8]\nstates = [4, 8]\nkinds = ["full", "pointwise"]\npools = [4, 4]\n'
        f'[data]\nwords = "sc10"\nsources = ["speech_commands:{sc_folder}"]\nclip_samples = 8192\n'
        f"[train]\nsteps = 100000\nbatch_size = 4\nworkers = 2\nprocesses = 1\ncheckpoint_every = 1000\n"
    )
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "edgessm", "train", str(cfg), "--out", str(out), "--device", "cpu",
                             "--no-progress"], start_new_session=True)  # fmt: skip
    deadline = time.time() + 120
    while not (out / "log.csv").exists() and time.time() < deadline:
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGTERM)  # as a terminal or a job scheduler would: every process
    assert proc.wait(timeout=120) == 0
    state = torch.load(out / "checkpoints" / "last.pt", weights_only=True)
    assert state["step"] > 0


def test_denoise_min_words_keeps_only_sentences(tmp_path: Path) -> None:
    from edgessm.train.tasks import DenoiseTask

    clean, noise = clean_and_noise_folders(tmp_path / "data")
    rows = ["path,speaker,label,text,split,source"]
    for i, wav in enumerate(sorted(clean.rglob("*.wav"))):
        text = "yes" if i % 2 else "the quick brown fox"
        rows.append(f"{wav},spk{i % 3},x,{text},{'validation' if i < 2 else 'train'},t")
    manifest = tmp_path / "m.csv"
    manifest.write_text("\n".join(rows) + "\n")
    base = {"task": "denoise", "model": {}, "data": {"sources": [f"manifest:{manifest}"], "noise": [f"noise:{noise}"],
                                                     "val_noise_holdout": ["hum.wav"]}}  # fmt: skip
    every = DenoiseTask(TrainConfig.from_dict(base))
    every._prepare()
    sentences = DenoiseTask(TrainConfig.from_dict({**base, "data": {**base["data"], "min_words": 3}}))
    sentences._prepare()
    assert len(every.train_clips) == 6 and len(sentences.train_clips) == 3
    assert all(len(c.text.split()) >= 3 for c in sentences.train_clips + sentences.val_clips)


def test_denoise_validation_streams_joined_clips(tmp_path: Path) -> None:
    import numpy as np

    from edgessm.train.tasks import DenoiseTask

    clean, noise = clean_and_noise_folders(tmp_path / "data")
    data = {"sources": [f"folder:{clean}"], "noise": [f"noise:{noise}"], "val_noise_holdout": ["hum.wav"],
            "validation_pct": 50.0, "segment_samples": 4096, "val_samples": 48000}  # fmt: skip
    task = DenoiseTask(TrainConfig.from_dict({"task": "denoise", "model": {}, "data": data}))
    task._prepare()
    longest = max(len(task.clean[len(task.train_clips) + i]) for i in range(len(task.val_clips)))
    assert longest < 48000  # one clip cannot fill the validation length: it must join several
    ex = task._example("validation", 0, None)
    assert ex["noisy"].shape == ex["clean"].shape == (1, 48000)
    speech = np.abs(ex["clean"][0]) > 1e-4
    assert speech[:16000].any() and speech[-16000:].any()  # speech throughout, not one clip in silence
    assert task._example("train", 0, np.random.default_rng(0))["noisy"].shape == (1, 4096)


def test_denoise_validation_of_a_delayed_network_compares_aligned_samples(tmp_path: Path) -> None:
    """A spectral denoiser at unit gains returns its input one hop late: validation must score it as
    the input itself (improvement 0 dB), not as a shifted signal (a large loss) or against a shifted
    input (a large gain)."""
    from edgessm.nets import build_network
    from edgessm.train.tasks import DenoiseTask

    clean, noise = clean_and_noise_folders(tmp_path / "data")
    data = {"sources": [f"folder:{clean}"], "noise": [f"noise:{noise}"], "val_noise_holdout": ["hum.wav"],
            "validation_pct": 50.0, "segment_samples": 4096, "val_samples": 32000, "val_items": 4}  # fmt: skip
    task = DenoiseTask(TrainConfig.from_dict({"task": "denoise", "model": {}, "data": data}))
    net = build_network("denoise", arch="spectral", channels=[8], states=[4], kinds=["pointwise"], bands=8,
                        fine_bins=0).eval()  # fmt: skip
    with torch.no_grad():
        net.head.weight.zero_()
        net.head.bias.fill_(40.0)
        metrics = task.evaluate(net, "cpu")
    assert abs(metrics["si_sdr_improvement"]) < 0.01


def test_denoise_word_streams_join_clean_words_of_training_speakers(tmp_path: Path) -> None:
    import numpy as np

    from edgessm.data.audio import dynamic_range_db
    from edgessm.train.tasks import DenoiseTask

    clean, noise = clean_and_noise_folders(tmp_path / "data")
    rng = np.random.default_rng(1)
    t = np.arange(4800) / 16000
    for i in range(6):  # clean words in silence, and words recorded over a noise floor
        word = np.concatenate([np.zeros(1600), 0.3 * np.sin(2 * np.pi * 200 * (i + 1) * t), np.zeros(1600)])
        write_audio(tmp_path / "words" / f"spk{i}" / "clean.wav", word.astype(np.float32), 16000)
        noisy = word + 0.05 * rng.normal(size=word.size)
        write_audio(tmp_path / "words" / f"spk{i}" / "noisy.wav", noisy.astype(np.float32), 16000)
    data = {"sources": [f"folder:{clean}"], "noise": [f"noise:{noise}"], "val_noise_holdout": ["hum.wav"],
            "segment_samples": 32000, "word_sources": [f"folder:{tmp_path / 'words'}"], "word_stream_prob": 1.0,
            "validation_pct": 0.0, "test_pct": 0.0}  # fmt: skip
    task = DenoiseTask(TrainConfig.from_dict({"task": "denoise", "model": {}, "data": data}))
    task._prepare()
    assert len(task.word_index) == 6  # the noisy-floor recordings are left out
    assert all(dynamic_range_db(task.words[i]) >= 30 for i in task.word_index)
    stream = task._word_stream(32000, np.random.default_rng(0))
    active = np.abs(stream).reshape(-1, 160).max(1) > 1e-3
    starts = np.flatnonzero(active[1:] & ~active[:-1])
    assert len(starts) >= 3  # several words with pauses between them fill the segment
    assert task._example("train", 0, np.random.default_rng(0))["noisy"].shape == (1, 32000)

    no_words = {**data, "word_sources": []}
    with pytest.raises(ValueError, match="word_sources"):
        DenoiseTask(TrainConfig.from_dict({"task": "denoise", "model": {}, "data": no_words}))._prepare()


def test_validation_reports_recorded_speech_accuracy_on_its_own(sc_folder: Path) -> None:
    """``accuracy_real`` counts only the groups' members (recorded clips); the score stays overall."""
    from edgessm.train.tasks import build_task, classify_dataset

    class Says(torch.nn.Module):  # predicts the class written in the first sample
        def forward(self, audio: torch.Tensor) -> torch.Tensor:
            return 10.0 * torch.nn.functional.one_hot(audio[:, 0, 0].long(), 3).float()

    said, truth = [0, 1, 2, 2, 1, 0], [0, 1, 2, 0, 0, 1]  # right, right, right, wrong, wrong, wrong
    ds = [{"audio": torch.full((1, 4), float(s)), "label": torch.tensor(t)} for s, t in zip(said, truth, strict=True)]

    def collate(items):
        return {"audio": torch.stack([i["audio"] for i in items]), "label": torch.stack([i["label"] for i in items])}

    m = classify_dataset(Says(), ds, collate, "cpu", batch=4, groups={"real": [True, True, False, True]})
    assert m["accuracy"] == m["score"] == 0.5
    assert m["accuracy_real"] == 2 / 3  # items 0, 1 right, item 3 wrong; 2 and 4, 5 are not members
    task = build_task(kws_config(sc_folder))
    with torch.no_grad():
        metrics = task.evaluate(task.build_model(), "cpu")
    assert 0.0 <= metrics["accuracy_real"] <= 1.0  # every Speech Commands clip is recorded speech


_STEP_FAULTS = """
import resource, sys, torch
if sys.argv[1] == "keep":
    from edgessm.train.allocator import keep_freed_memory
    assert keep_freed_memory()
torch.manual_seed(0)
torch.set_num_threads(1)
net = torch.nn.Sequential(torch.nn.Conv1d(16, 64, 1), torch.nn.SiLU(), torch.nn.Conv1d(64, 16, 1))
opt = torch.optim.AdamW(net.parameters())
x = torch.randn(16, 16, 16000)  # activations of 65 MB, above glibc's largest default mmap threshold
def step():
    y = torch.fft.irfft(torch.fft.rfft(net(x), n=32000), n=32000)
    y.square().mean().backward(); opt.step(); opt.zero_grad()
step(); step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(6): step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc tuning")
def test_training_steps_reuse_freed_activations_without_page_faults() -> None:
    def faults(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", _STEP_FAULTS, mode], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})  # fmt: skip
        return int(out.stdout.strip())

    # six steps touch ~2.6 GB of activations: 320k-770k fresh pages with glibc's defaults (measured),
    # 0-48k when the freed blocks are reused
    default = faults("default")
    assert default > 150_000
    assert faults("keep") < default / 4


def test_denoise_real_repeats_draws_recorded_clips_more_often(tmp_path: Path) -> None:
    from edgessm.train.tasks import DenoiseTask

    clean, noise = clean_and_noise_folders(tmp_path / "data")
    rows = ["path,speaker,label,text,split,source"]
    for i, wav in enumerate(sorted(clean.rglob("*.wav"))):
        rows.append(f"{wav},spk{i % 3},x,a b c,{'validation' if i < 2 else 'train'},{'synth:espeak' if i % 2 else 't'}")
    manifest = tmp_path / "m.csv"
    manifest.write_text("\n".join(rows) + "\n")
    data = {"sources": [f"manifest:{manifest}"], "noise": [f"noise:{noise}"], "val_noise_holdout": ["hum.wav"]}

    def task(**over):
        t = DenoiseTask(TrainConfig.from_dict({"task": "denoise", "model": {}, "data": {**data, **over}}))
        t._prepare()
        return t

    once, thrice = task(), task(real_repeats=3)
    recorded = sum(not c.source.startswith("synth") for c in once.train_clips)
    assert 0 < recorded < len(once.train_clips)
    assert len(once.train_set()) == len(once.train_clips)
    assert len(thrice.train_set()) == len(once.train_clips) + 2 * recorded
    counts = [thrice.train_order.count(i) for i in range(len(thrice.train_clips))]
    assert counts == [1 if c.source.startswith("synth") else 3 for c in thrice.train_clips]
    with pytest.raises(ValueError, match="real_repeats"):
        task(real_repeats=0)


def test_denoise_gain_supervision_scores_the_gains_and_needs_a_mask_network(tmp_path: Path) -> None:
    import numpy as np

    from edgessm.nets import build_network
    from edgessm.train.tasks import DenoiseTask

    clean, noise = clean_and_noise_folders(tmp_path / "data")
    data = {"sources": [f"folder:{clean}"], "noise": [f"noise:{noise}"], "val_noise_holdout": ["hum.wav"],
            "segment_samples": 3200, "mask_weight": 1.0}  # fmt: skip
    spectral = {"arch": "spectral", "channels": [8], "states": [4], "kinds": ["pointwise"], "bands": 8}
    task = DenoiseTask(TrainConfig.from_dict({"task": "denoise", "model": spectral, "data": data}))
    task._prepare()
    items = [task._example("train", i, np.random.default_rng(i)) for i in range(2)]
    batch = {k: torch.stack([torch.from_numpy(it[k]) for it in items]) for k in ("noisy", "clean")}
    net = build_network("denoise", **spectral)
    loss, parts = task.loss(net, batch, 0.5)
    loss.backward()
    assert parts["mask"] > 0 and net.head.weight.grad.abs().sum() > 0
    with torch.no_grad():
        target, valid = net.oracle_gains(batch["noisy"], batch["clean"])
    assert valid.sum() > 0 and ((target >= 0) & (target <= 1)).all()

    hourglass = build_network("denoise", channels=[4, 8], states=[4, 4], kinds=["full", "pointwise"], pools=[4, 4],
                              bottleneck_states=8, n_bottleneck=1)  # fmt: skip
    with pytest.raises(ValueError, match="spectral"):
        task.loss(hourglass, batch, 0.5)


def test_denoise_gain_error_in_decibels_reads_the_floor_and_needs_gain_supervision() -> None:
    """mask_db_weight: the mean floored dB gap between the gains and the ideal mask, over the floor's depth: gains of
    -20 dB where the ideal is -40 dB (the floor) score 0.5, and deeper than the floor counts as the floor."""
    from edgessm.train.denoise_task import _floored_db

    t = torch.full((1, 3, 2), 0.01)  # -40 dB

    def gap(g: float) -> float:
        return float((_floored_db(torch.full_like(t, g), -40) - _floored_db(t, -40)).abs().mean() / 40)

    assert gap(0.1) == pytest.approx(0.5) and gap(1e-4) == pytest.approx(0.0) and gap(1.0) == pytest.approx(1.0)


def test_denoise_gain_error_in_decibels_trains_the_gains(tmp_path: Path) -> None:
    import numpy as np

    from edgessm.nets import build_network
    from edgessm.train.tasks import DenoiseTask

    clean, noise = clean_and_noise_folders(tmp_path / "data")
    data = {"sources": [f"folder:{clean}"], "noise": [f"noise:{noise}"], "val_noise_holdout": ["hum.wav"],
            "segment_samples": 3200, "mask_weight": 1.0, "mask_db_weight": 0.5}  # fmt: skip
    spectral = {"arch": "spectral", "channels": [8], "states": [4], "kinds": ["pointwise"], "bands": 8}

    def task(**changes):
        return DenoiseTask(TrainConfig.from_dict({"task": "denoise", "model": spectral, "data": {**data, **changes}}))

    with_db = task()
    with_db._prepare()
    items = [with_db._example("train", i, np.random.default_rng(i)) for i in range(2)]
    batch = {k: torch.stack([torch.from_numpy(it[k]) for it in items]) for k in ("noisy", "clean")}
    net = build_network("denoise", **spectral)
    loss, parts = with_db.loss(net, batch, 0.5)
    without, _ = task(mask_db_weight=0.0).loss(net, batch, 0.5)
    assert 0 < float(parts["mask_db"]) <= 1
    assert float((loss - without).detach()) == pytest.approx(0.5 * float(parts["mask_db"]), rel=1e-4)
    loss.backward()
    assert net.head.weight.grad.abs().sum() > 0
    for bad, message in (({"mask_db_floor": 0.0}, "below 0 dB"), ({"mask_weight": 0.0}, "needs data.mask_weight")):
        with pytest.raises(ValueError, match=message):
            task(**bad).loss(net, batch, 0.5)


def test_bf16_autocast_trains_on_cpu(sc_folder: Path, tmp_path: Path) -> None:
    """`train.amp = "bf16"`: the step runs under autocast (SSM layers in float32 islands) and learns."""
    trainer = Trainer(kws_config(sc_folder, steps=12, amp="bf16"), tmp_path / "run", device="cpu", progress=False)
    assert trainer.amp_dtype == torch.bfloat16
    trainer.fit()
    losses = _losses(tmp_path / "run")
    assert len(losses) == 12 and all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-3:]) < sum(losses[:3])


def test_frame_targets_mark_context_negatives_and_post_word_frames() -> None:
    from edgessm.train.tasks import frame_targets

    labels = ["yes", "no", "_unknown_", "_silence_"]
    batch = {
        "audio": torch.zeros(3, 1, 1600),
        "label": torch.tensor([0, 2, 3]),  # a keyword, an unknown word, silence
        "context": torch.tensor([400, 400, 400]),
        "positive_from": torch.tensor([1000, 0, 0]),
    }
    bg, pos = frame_targets(batch, labels, stride=200, n_frames=8)  # frame f has heard (f + 1) * 200 samples
    assert bg[0].tolist() == [1, 1, 0, 0, 0, 0, 0, 0]  # only frames that heard nothing but context
    assert pos[0].tolist() == [0, 0, 0, 0, 0, 1, 1, 1]  # from the word's end (+ tolerance) to the clip's end
    assert bg[1:].eq(1).all() and pos[1:].eq(0).all()  # a negative example says "no keyword" everywhere
    late = {**batch, "positive_from": torch.tensor([5000, 0, 0])}
    assert frame_targets(late, labels, 200, 8)[1][0].tolist() == [0] * 7 + [1]  # the last frame always counts


def test_frame_targets_and_the_kws_loss_never_read_the_device(sc_folder: Path) -> None:
    """No host sync in a training step: the frame targets are built where the batch is (a batch on
    the meta device cannot be read by the host at all), and the loss parts stay tensors until a log step."""
    from edgessm.train.tasks import build_task, frame_targets

    labels = ["yes", "no", "_unknown_", "_silence_"]
    batch = {"audio": torch.zeros(3, 1, 1600), "label": torch.tensor([0, 2, 3]), "context": torch.tensor([400] * 3),
             "positive_from": torch.tensor([1000, 0, 0]), "unsupervised": torch.tensor([[0, 0]] * 3)}  # fmt: skip
    bg, pos = frame_targets({k: v.to("meta") for k, v in batch.items()}, labels, stride=200, n_frames=8)
    assert bg.device.type == pos.device.type == "meta" and bg.shape == pos.shape == (3, 8)
    cfg = kws_config(sc_folder)
    cfg.data = {**cfg.data, "context_samples": 2000, "frame_loss": 1.0}
    task = build_task(cfg)
    ds = task.train_set()
    net = task.build_model()
    items = task.collate([ds[(i, i)] for i in range(4)])
    loss, parts = task.loss(net, items, 0.0)
    assert loss.requires_grad and torch.isfinite(loss)
    assert set(parts) == {"acc", "bg_loss", "pos_loss", "bg_fire"}
    assert all(torch.is_tensor(v) and v.dim() == 0 and not v.requires_grad for v in parts.values())


def test_frame_supervised_training_learns_and_logs_its_terms(sc_folder: Path, tmp_path: Path) -> None:
    cfg = kws_config(sc_folder, steps=30)
    cfg.data.update(context_samples=4096, frame_loss=1.0, frame_tolerance_s=0.1)
    trainer = Trainer(cfg, tmp_path / "run", device="cpu", progress=False)
    trainer.fit()
    losses = _losses(tmp_path / "run")
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5
    bg = _losses(tmp_path / "run", "bg_loss")
    assert len(bg) == 30 and sum(bg[-5:]) < sum(bg[:5])  # the context frames learn to say "no keyword"


def test_frame_targets_leave_a_previous_keyword_unsupervised() -> None:
    """A keyword said in the context: no "no keyword" target while the head still hears it."""
    from edgessm.train.tasks import frame_targets

    labels = ["yes", "no", "_unknown_", "_silence_"]
    batch = {
        "audio": torch.zeros(2, 1, 1600),
        "label": torch.tensor([0, 2]),
        "context": torch.tensor([1000, 1000]),
        "positive_from": torch.tensor([1400, 0]),
        "unsupervised": torch.tensor([[200, 600], [200, 600]]),  # samples 200..600: the previous word + window
    }
    bg, pos = frame_targets(batch, labels, stride=200, n_frames=8)
    assert bg[0].tolist() == [1, 0, 0, 1, 1, 0, 0, 0]
    assert bg[1].tolist() == [1, 0, 0, 1, 1, 1, 1, 1]  # a negative example: "no keyword" again after the span
    assert pos[0].tolist() == [0, 0, 0, 0, 0, 0, 0, 1]  # frames that heard past sample 1400


def test_music_contexts_come_from_the_music_bank(sc_folder: Path, tmp_path: Path, monkeypatch) -> None:
    """data.music_pieces = n: music contexts and music noise are crops of n pieces rendered at start."""
    import numpy as np

    from edgessm.data.audio import write_audio
    from edgessm.data.manifest import Clip
    from edgessm.train import kws_task

    path = tmp_path / "sent" / "s0.wav"
    write_audio(path, (0.1 * np.random.default_rng(0).standard_normal(12000)).astype(np.float32), 16000)
    clips = [Clip(str(path), speaker="v0", text="where is my notebook", split="train", source="read:test")]
    task = _kws_task_with_sentences(sc_folder, tmp_path, clips, context_prob=1.0, context_samples=8000,
                                    music_pieces=2)  # fmt: skip
    assert task.music is not None and len(task.music) == 2
    monkeypatch.setattr(kws_task, "music_like", lambda *a, **k: (_ for _ in ()).throw(AssertionError("rendered")))
    for i in range(40):  # kind 1 of the contexts is music: some of these draw it
        assert task._example("train", i % len(task.train_order), np.random.default_rng(i))["audio"].shape[-1] > 8000


def test_a_non_finite_loss_stops_the_run_at_the_next_check(sc_folder: Path, tmp_path: Path, monkeypatch) -> None:
    """The step never reads the loss back (no host sync); the next log/eval/checkpoint step does, and the run
    stops there with the steps between which it happened, before a checkpoint saves poisoned weights."""
    cfg = kws_config(sc_folder, steps=30, log_every=10)
    trainer = Trainer(cfg, tmp_path / "run", device="cpu", progress=False)
    real_loss = trainer.task.loss

    def poisoned(net, batch, progress):
        loss, parts = real_loss(net, batch, progress)
        return (loss * float("nan") if trainer.step == 12 else loss), parts  # step 13's loss

    monkeypatch.setattr(trainer.task, "loss", poisoned)
    with pytest.raises(FloatingPointError, match="between steps 11 and 20"):
        trainer.fit()
    assert _losses_steps(tmp_path / "run") == ["10"]
    last = torch.load(tmp_path / "run" / "checkpoints" / "last.pt", weights_only=False)
    assert last["step"] == 10  # the poisoned weights of step 20 were never saved


def test_a_run_grown_from_a_narrower_one_starts_where_it_stood(sc_folder: Path, tmp_path: Path, capsys) -> None:
    """``--init`` with narrower weights of the same layout: the network grows to the recipe's channels (said so),
    scores what the narrow one scored, and trains on."""
    narrow = kws_config(sc_folder, steps=2)
    narrow.model = {**TINY_KWS, "kinds": ["bottleneck", "pointwise"], "channels": [4, 8]}
    first = Trainer(narrow, tmp_path / "a", device="cpu", progress=False)
    first.fit()
    wide = kws_config(sc_folder, steps=2)
    wide.model = {**narrow.model, "channels": [8, 16]}
    grown = Trainer(wide, tmp_path / "b", device="cpu", progress=False, init=tmp_path / "a")
    assert "tensors grown to this network's sizes" in capsys.readouterr().out
    assert grown.model.backbone.layers[0].h_out == 8
    before, after = first.evaluate(), grown.evaluate()
    assert before and after == pytest.approx(before, rel=1e-4, abs=1e-5)
    grown.fit()


def test_frozen_modules_keep_their_weights_while_the_rest_trains(sc_folder: Path, tmp_path: Path, capsys) -> None:
    """``train.freeze``: module paths, or ``front`` for a filterbank front; frozen parameters leave the optimizer
    and do not move, the rest trains, resume works, and names that match nothing are refused."""
    Trainer(kws_config(sc_folder, steps=2), tmp_path / "a", device="cpu", progress=False).fit()
    start = load_model_weights(tmp_path / "a", "cpu")
    cfg = kws_config(sc_folder, steps=6, freeze=["backbone.layers.0"])
    trainer = Trainer(cfg, tmp_path / "b", device="cpu", progress=False, init=tmp_path / "a")
    assert "parameters keep their weights" in capsys.readouterr().out
    trainer.fit(stop_after=3)
    Trainer(cfg, tmp_path / "b", device="cpu", progress=False, resume=True).fit()
    end = load_model_weights(tmp_path / "b", "cpu")
    frozen = [k for k in end if k.startswith("backbone.layers.0.")]
    assert frozen and all(torch.equal(end[k], start[k]) for k in frozen)
    assert any(not torch.equal(end[k], start[k]) for k in end if k not in frozen)

    with pytest.raises(ValueError, match=r"no module 'backbone.layers.9'.*backbone.layers.0"):
        Trainer(kws_config(sc_folder, freeze=["backbone.layers.9"]), tmp_path / "c", device="cpu", progress=False)
    with pytest.raises(ValueError, match="has none"):  # the tiny network starts with a full block, not a front
        Trainer(kws_config(sc_folder, freeze=["front"]), tmp_path / "d", device="cpu", progress=False)
    with pytest.raises(ValueError, match="leaves nothing to train"):
        Trainer(kws_config(sc_folder, freeze=["backbone", "head"]), tmp_path / "e", device="cpu", progress=False)
    fb = kws_config(sc_folder, freeze=["front"])
    fb.model = {**TINY_KWS, "front": "filterbank", "front_bands": 8, "front_pool": 160}
    trainer = Trainer(fb, tmp_path / "f", device="cpu", progress=False)
    names = {n for n, p in trainer.model.named_parameters() if not p.requires_grad}
    assert names and all(n.startswith("backbone.layers.0.") for n in names)


@pytest.fixture(scope="module")
def kws_teacher(sc_folder: Path, tmp_path_factory) -> Path:
    """A finished tiny keyword-spotting run: the teacher of the distillation tests."""
    run = tmp_path_factory.mktemp("teacher") / "run"
    Trainer(kws_config(sc_folder, steps=10), run, device="cpu", progress=False).fit()
    return run


def _distilling(sc_folder: Path, teacher: Path, **data):
    """A tiny keyword task taught by ``teacher`` with the ``data`` settings, a batch of 4 and a fresh student."""
    from edgessm.train.tasks import build_task

    cfg = kws_config(sc_folder)
    cfg.data = {**cfg.data, "distill_model": str(teacher), **data}
    task = build_task(cfg)
    ds = task.train_set()
    return task, task.collate([ds[(i, i)] for i in range(4)]), task.build_model()


def test_distillation_matches_the_teachers_softened_posteriors(sc_folder: Path, kws_teacher: Path) -> None:
    """The distillation term is T^2 KL(teacher || student) over every frame: zero for the teacher itself, positive
    for another network, and part of the loss (logged as ``distill``) with ``data.distill_weight``."""
    from edgessm.deploy.load import load_trained
    from edgessm.train.tasks import build_task

    cfg = kws_config(sc_folder)
    cfg.data = {**cfg.data, "distill_model": str(kws_teacher), "distill_weight": 1.0, "distill_temperature": 2.0}
    task = build_task(cfg)
    ds = task.train_set()
    items = task.collate([ds[(i, i)] for i in range(4)])
    teacher, _ = load_trained(kws_teacher)
    with torch.no_grad():
        own = task.distill_loss(teacher(items["audio"], all_frames=True).float(), items["audio"])
    assert abs(float(own)) < 1e-6
    student = task.build_model()
    loss, parts = task.loss(student, items, 0.0)
    assert loss.requires_grad and float(parts["distill"]) > 1e-4
    plain = build_task(kws_config(sc_folder))
    plain.train_set()
    torch.manual_seed(0)
    base, base_parts = plain.loss(student, items, 0.0)
    assert "distill" not in base_parts
    assert float(loss.detach()) == pytest.approx(float(base.detach()) + float(parts["distill"]), rel=1e-4)
    assert all(not p.requires_grad for p in task.teacher(torch.device("cpu")).parameters())


def test_distillation_training_brings_the_student_to_the_teacher(sc_folder: Path, kws_teacher: Path,
                                                                 tmp_path: Path) -> None:  # fmt: skip
    """Trained with the distillation term, a student ends nearer the teacher's posteriors than the same training
    on the labels alone, and the run logs the term."""
    from edgessm.deploy.load import load_trained
    from edgessm.train.tasks import build_task

    def trained(distill_weight: float, out: Path):
        cfg = kws_config(sc_folder, steps=30)
        if distill_weight:
            cfg.data.update(distill_model=str(kws_teacher), distill_weight=distill_weight)
        Trainer(cfg, out, device="cpu", progress=False).fit()
        return load_trained(out)[0]

    with_kd, without = trained(3.0, tmp_path / "kd"), trained(0.0, tmp_path / "plain")
    assert len(_losses(tmp_path / "kd", "distill")) == 30
    cfg = kws_config(sc_folder)
    cfg.data = {**cfg.data, "distill_model": str(kws_teacher), "distill_weight": 1.0}
    task = build_task(cfg)
    ds = task.train_set()
    items = task.collate([ds[(i, i)] for i in range(16)])
    with torch.no_grad():
        near, far = (float(task.distill_loss(n(items["audio"], all_frames=True).float(), items["audio"]))
                     for n in (with_kd, without))  # fmt: skip
    assert near < 0.5 * far


def test_distillation_settings_are_checked(sc_folder: Path, kws_teacher: Path) -> None:
    from edgessm.train.tasks import build_task

    cfg = kws_config(sc_folder)
    teacher = {"distill_model": str(kws_teacher)}
    for bad, message in (({"distill_weight": 1.0}, "distill_weight > 0 needs data.distill_model"),
                         ({"distill_peak_weight": 1.0}, "distill_peak_weight > 0 needs data.distill_model"),
                         ({**teacher, "distill_weight": -1.0}, "distill_peak_weight must be >= 0.*got -1"),
                         ({**teacher, "distill_peak_weight": -1.0}, "must be >= 0.*got 0.0, -1"),
                         ({**teacher, "distill_temperature": 0.0}, "temperature > 0")):  # fmt: skip
        cfg.data = {**kws_config(sc_folder).data, **bad}
        with pytest.raises(ValueError, match=message):
            build_task(cfg)
    cfg.data = {**kws_config(sc_folder).data, "words": "sc35", "distill_model": str(kws_teacher), "distill_weight": 1.0}
    task = build_task(cfg)
    task.train_set()
    items = task.collate([task.train_set()[(i, i)] for i in range(2)])
    with pytest.raises(ValueError, match="not a keyword spotter of this task's"):
        task.loss(task.build_model(), items, 0.0)


def test_peak_distillation_scores_each_keywords_highest_frame(sc_folder: Path) -> None:
    """The peak term is the binary cross-entropy of each keyword's highest posterior over the frames against the
    teacher's, summed over the keywords (the background classes left out); least where the peaks agree, and its
    gradient reaches only the frame where a keyword peaks."""
    from edgessm.train.tasks import build_task

    cfg = kws_config(sc_folder)
    cfg.data = {**cfg.data, "distill_model": "unused here", "distill_peak_weight": 1.0}
    task = build_task(cfg)
    c, f = len(task.labels), 7
    keywords = [i for i, lab in enumerate(task.labels) if lab not in ("_unknown_", "_silence_")]
    torch.manual_seed(0)
    frames = torch.randn(3, c, f, requires_grad=True)
    target = torch.randn(3, c, f) * 3
    loss = task.peak_loss(frames, target)
    m = torch.softmax(frames.detach().double(), 1)[:, keywords].amax(-1)
    q = torch.softmax(target.double(), 1)[:, keywords].amax(-1)
    manual = float(-(q * torch.log(m) + (1 - q) * torch.log(1 - m)).sum(1).mean())
    assert float(loss.detach()) == pytest.approx(manual, rel=1e-5)
    assert float(task.peak_loss(target, target)) < float(loss.detach())  # the teacher's own peaks: the least
    loss.backward()
    # per example and keyword one frame (its peak) gets a gradient through the keyword itself; the softmax
    # passes it to the other classes of that frame only: frames where no keyword peaks get none
    peak_frames = torch.softmax(frames.detach(), 1)[:, keywords].argmax(-1)  # (B, K)
    touched = frames.grad.abs().sum(1) > 0  # (B, F)
    for b in range(3):
        assert set(torch.nonzero(touched[b]).flatten().tolist()) == set(peak_frames[b].tolist())


def test_peak_distillation_is_part_of_the_loss(sc_folder: Path, kws_teacher: Path) -> None:
    """With ``distill_peak_weight`` alone the loss adds the peak term (logged as ``peak``) and no frame KL."""
    from edgessm.train.tasks import build_task

    task, items, student = _distilling(sc_folder, kws_teacher, distill_peak_weight=0.5)
    loss, parts = task.loss(student, items, 0.0)
    assert "distill" not in parts and float(parts["peak"]) > 0
    plain = build_task(kws_config(sc_folder))
    plain.train_set()
    base, _ = plain.loss(student, items, 0.0)
    assert float(loss.detach()) == pytest.approx(float(base.detach()) + 0.5 * float(parts["peak"]), rel=1e-4)


def test_the_kws35_es_distillation_recipe_fits_its_shipped_teacher() -> None:
    """kws_es_v6 names the shipped kws35 as its teacher: same labels, same frames for the same audio."""
    from edgessm.train.tasks import build_task

    task = build_task(load_config("kws_es_v6"))
    assert task.data.distill_model == "kws35" and task.data.distill_weight > 0
    student = task.build_model().eval()
    audio = torch.randn(2, 1, 32000) * 0.05
    with torch.no_grad():
        frames = student(audio, all_frames=True).float()
        loss = task.distill_loss(frames, audio)
    assert frames.shape == (2, len(task.labels), 100) and torch.isfinite(loss) and float(loss) > 0


def test_distillation_trains_a_step_under_cpu_autocast(sc_folder: Path, kws_teacher: Path) -> None:
    """Student and teacher under bf16 autocast (the GPU recipes' precision): both terms stay finite, gradients
    reach every trainable weight of the student and none of the teacher."""
    task, items, student = _distilling(sc_folder, kws_teacher, distill_weight=1.0, distill_peak_weight=1.0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, parts = task.loss(student, items, 0.0)
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(parts[k]) and float(parts[k]) > 0 for k in ("distill", "peak"))
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in student.parameters() if p.requires_grad)
    assert all(p.grad is None for p in task.teacher(torch.device("cpu")).parameters())
