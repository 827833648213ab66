"""The keyword augmentation's tail batched on the training device (train/device_mix.py): the same audio
as the loader's own augmentation, echoes that re-pair the drawn parts, the trainer's switches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from test_train import _losses, kws_config

from edgessm.data.augment import KwsAugment, KwsAugmentConfig, MicResponseConfig, NoiseSourceConfig, RirBank
from edgessm.data.noise import NoiseBank
from edgessm.train.device_mix import DeviceMixer, mix_fields, shuffle_within
from edgessm.train.tasks import build_task
from edgessm.train.trainer import Trainer

T = 4000


@pytest.fixture(scope="module")
def augment() -> KwsAugment:
    rng = np.random.default_rng(0)
    rirs = []
    for k in range(5):  # decaying rooms with their direct path 0-30 samples in
        h = np.exp(-np.arange(1500) / rng.uniform(50, 400)) * rng.standard_normal(1500)
        rirs.append(np.concatenate([np.zeros(6 * k), [4.0], h]))
    noises = NoiseBank({f"n{i}": (0.2 * rng.standard_normal(9000)).astype(np.float32) for i in range(3)})
    speech = [(0.1 * rng.standard_normal(3000)).astype(np.float32) for _ in range(4)]
    cfg = KwsAugmentConfig(reverb_prob=0.5, mic_prob=0.6, noise_prob=0.8, speed_prob=0.3, snr_db=(-5.0, 20.0),
                           noise=NoiseSourceConfig(bank=1.0, colored=0.5, babble=0.5),
                           mic=MicResponseConfig(n_peaks=(0, 2)))  # fmt: skip
    return KwsAugment(cfg, noise_bank=noises, rir_bank=RirBank(rirs), babble_speech=speech)


def _clip(k: int) -> np.ndarray:
    t = np.arange(T)
    x = 0.3 * np.sin(2 * np.pi * (200 + 37 * k) * t / 16000) * np.hanning(T)
    return (x * (k % 7 != 0)).astype(np.float32)  # every 7th clip silent: noise goes in at a level


def _batch(augment: KwsAugment, mixer: DeviceMixer, n: int, context: int = 300):
    """Plans of ``n`` clips (the last two not augmented, as silence examples), their CPU-finished audio."""
    mixes = [augment.plan(_clip(k), np.random.default_rng(k)) for k in range(n - 2)]
    finished = [augment.finish(m) for m in mixes] + [_clip(1), _clip(2)]
    fields = [mix_fields(m, T, mixer.sections) for m in mixes] + [mix_fields(None, T, mixer.sections)] * 2
    speech = [m.speech for m in mixes] + [_clip(1), _clip(2)]
    ctx = np.random.default_rng(9).normal(0, 0.01, (n, 1, context)).astype(np.float32)
    items = [{"audio": np.concatenate([ctx[i], s[None]], axis=1), "label": i, **f}
             for i, (s, f) in enumerate(zip(speech, fields, strict=True))]  # fmt: skip
    batch = {k: torch.stack([torch.as_tensor(it[k]) for it in items]) for k in items[0]}
    return batch, np.stack(finished), ctx


def test_device_mixer_gives_the_loaders_augmentation(augment: KwsAugment) -> None:
    mixer = DeviceMixer(augment, T)
    batch, finished, ctx = _batch(augment, mixer, 40)
    assert batch["mix_has_mic"].any() and batch["mix_has_noise"].any() and (batch["mix_rir"] >= 0).any()
    assert (batch["mix_rir"] < 0).any() and not batch["mix_has_noise"].all()  # some of each part absent too
    before = {k: v.clone() for k, v in batch.items()}
    out = mixer(batch)
    got = out["audio"].numpy()
    np.testing.assert_array_equal(got[:, :, :300], ctx)  # the context stays as it was
    err = np.abs(got[:, 0, 300:] - finished).max(axis=1) / np.abs(finished).max(axis=1).clip(1e-6)
    assert err.max() < 2e-4, err
    for k, v in before.items():  # the loaded batch is left alone (echoes reuse it)
        assert torch.equal(v, batch[k])


def test_echoes_re_pair_the_drawn_parts_among_augmented_examples(augment: KwsAugment) -> None:
    mixer = DeviceMixer(augment, T)
    batch, _, _ = _batch(augment, mixer, 30)
    m = {k: v for k, v in batch.items() if k.startswith("mix_")}
    g = torch.Generator().manual_seed(3)
    re = mixer._repair(m, g)
    on = m["mix_on"]
    for key in ("mix_rir", "mix_has_noise", "mix_has_mic", "mix_has_gain"):
        assert sorted(re[key][on].tolist()) == sorted(m[key][on].tolist())  # a permutation: same parts
        assert torch.equal(re[key][~on], m[key][~on])  # silence examples keep theirs (none)
    assert not torch.equal(re["mix_rir"], m["mix_rir"])
    lo, hi = augment.config.gain_db
    assert ((re["mix_gain_db"][on] >= lo) & (re["mix_gain_db"][on] <= hi)).all()
    first = mixer(batch)["audio"]
    again = mixer(batch, torch.Generator().manual_seed(3), echo=True)["audio"]
    same = mixer(batch, torch.Generator().manual_seed(3), echo=True)["audio"]
    assert torch.equal(again, same)  # the generator decides
    changed = (again - first).abs().amax(-1)[:, 0] > 1e-6
    assert changed[on].float().mean() > 0.5 and not changed[~on].any()


def test_device_mixing_reads_nothing_back_from_the_device(augment: KwsAugment) -> None:
    """On a GPU a value read back (``.item()``, ``bool()``, ``nonzero``) makes the host wait for every queued
    kernel: on meta tensors, which hold no values, any such read raises."""
    mixer = DeviceMixer(augment, T, "meta")
    batch, _, _ = _batch(augment, DeviceMixer(augment, T), 6)
    meta = {k: v.to("meta") for k, v in batch.items()}
    for echo in (False, True):
        out = mixer(meta, None, echo=echo)
        assert out["audio"].shape == batch["audio"].shape and out["audio"].device.type == "meta"
    with pytest.raises((RuntimeError, NotImplementedError)):
        bool(meta["mix_on"].any())  # the check has teeth


def test_shuffle_within_permutes_only_the_marked_positions() -> None:
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        on = torch.rand(17, generator=g) < 0.6
        src = shuffle_within(on, g)
        assert sorted(src.tolist()) == list(range(17))  # a permutation
        assert torch.equal(src[~on], torch.nonzero(~on).flatten())  # unmarked positions keep their own
        assert on[src[on]].all()  # marked positions draw from marked ones
    on = torch.ones(50, dtype=torch.bool)
    assert not torch.equal(shuffle_within(on, g), torch.arange(50))


def test_device_mixer_refuses_what_it_cannot_do(augment: KwsAugment) -> None:
    masked = KwsAugment(KwsAugmentConfig(mask_prob=0.5), rir_bank=augment.rir_bank)
    with pytest.raises(ValueError, match="mask_prob"):
        DeviceMixer(masked, T)
    with pytest.raises(ValueError, match="shape"):
        mix_fields(augment.plan(np.zeros(T + 1, np.float32), np.random.default_rng(0)), T, 6)


def test_kws_training_mixes_on_the_device_and_echoes(tmp_path: Path) -> None:
    from fixtures import speech_commands_folder

    folder = speech_commands_folder(tmp_path / "sc")
    cfg = kws_config(folder, steps=24, device_augment="on", echo=3)
    cfg.augment = {
        "reverb_prob": 0.5,
        "rirs": {"simulated": 2, "cache_dir": str(tmp_path / "rirs")},
        "mic_prob": 0.5,
        "speed_prob": 0.3,
    }
    trainer = Trainer(cfg, tmp_path / "run", device="cpu", progress=False)
    trainer.fit()
    losses = _losses(tmp_path / "run")
    assert len(losses) == 24 and all(np.isfinite(losses))
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5
    task = build_task(cfg)  # the loader's examples stop at the plan, validation's do not
    task.device_mixer(torch.device("cpu"))
    ex = task._example("train", 0, np.random.default_rng(0))
    assert ex["mix_on"] and ex["mix_noise"].shape == (8192,)
    assert "mix_on" not in task._example("validation", 0, None)


def test_trainer_says_when_echo_or_device_augmentation_cannot_apply(tmp_path: Path) -> None:
    from fixtures import speech_commands_folder

    folder = speech_commands_folder(tmp_path / "sc")
    with pytest.raises(ValueError, match=r"train\.echo > 1"):
        Trainer(kws_config(folder, steps=2, echo=2, device_augment="off"), tmp_path / "a", device="cpu",
                progress=False).fit()  # fmt: skip
    with pytest.raises(ValueError, match="device_augment must be"):
        Trainer(kws_config(folder, steps=2, device_augment="gpu"), tmp_path / "b", device="cpu", progress=False).fit()
    with pytest.raises(ValueError, match="no augmentation to run on the device"):
        Trainer(kws_config(folder, steps=2, device_augment="on"), tmp_path / "c", device="cpu", progress=False).fit()
