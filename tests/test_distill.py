"""Frame-level distillation from the teacher's encoder (edgessm.train.distill): cached frames, their
placement in composed examples, the loss, the recognizer's training-only head and its removal at export."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch

from edgessm.train import distill
from edgessm.train.distill import HOP, Placement, TeacherFeatures, distill_loss, teacher_targets


class _Store:
    """An audio store of clips of given lengths (samples)."""

    def __init__(self, lengths: list[int]) -> None:
        self.clips = [np.full(n, 0.01 * (k + 1), np.float32) for k, n in enumerate(lengths)]

    def length(self, i: int) -> int:
        return len(self.clips[i])

    def __getitem__(self, i: int) -> np.ndarray:
        return self.clips[i]


def _encode(clips) -> list[np.ndarray]:
    """Frame j of a clip: every dimension says (clip level, j): checkable after standardisation."""
    out = []
    for x in clips:
        n = distill.frame_count(len(x))
        f = np.zeros((n, 4), np.float32)
        f[:, 0] = float(x[0]) * 100
        f[:, 1] = np.arange(n)
        f[:, 2:] = np.random.default_rng(n).normal(size=(n, 2))
        out.append(f)
    return out


def _features(tmp_path, lengths=(16000, 8000, 4800), indices=(0, 2)) -> TeacherFeatures:
    paths = [f"clip{k}.wav" for k in range(len(lengths))]
    return TeacherFeatures.for_store(_Store(list(lengths)), list(indices), paths, encode=_encode, teacher_id="fake",
                                     cache_dir=tmp_path, progress=False)  # fmt: skip


def _raw(tf: TeacherFeatures, i: int) -> np.ndarray:
    return tf.get(i) * tf.std + tf.mean


def test_frames_are_computed_once_and_cached_by_utterances_and_teacher(tmp_path) -> None:
    tf = _features(tmp_path)
    assert tf.dim == 4 and 0 in tf and 2 in tf and 1 not in tf
    assert len(tf.get(0)) == 50 and len(tf.get(2)) == 15  # one frame per started 20 ms
    np.testing.assert_allclose(_raw(tf, 0)[:, 1], np.arange(50), atol=0.05)
    np.testing.assert_allclose(_raw(tf, 2)[:, 0], 3.0, atol=0.01)
    # standardised per dimension over every frame
    every = np.concatenate([tf.get(0), tf.get(2)])
    np.testing.assert_allclose(every.mean(0), 0, atol=1e-3)

    def refuse(clips):
        raise AssertionError("the cache should have answered")

    again = TeacherFeatures.for_store(_Store([16000, 8000, 4800]), [2, 0], [f"clip{k}.wav" for k in range(3)],
                                      encode=refuse, teacher_id="fake", cache_dir=tmp_path, progress=False)  # fmt: skip
    np.testing.assert_array_equal(again.get(2), tf.get(2))
    # another teacher or other utterances: another cache entry
    other = _features(tmp_path, indices=(0,))
    assert other.folder != tf.folder and 2 not in other
    assert not list(tmp_path.glob("*.partial"))


def test_a_larger_set_copies_the_frames_a_cached_set_holds_and_runs_the_teacher_on_the_rest(tmp_path) -> None:
    """A corpus added to a recipe: only the new utterances meet the teacher; the copied frames are the cached
    ones, and the standardisation is over the whole new set. A cache written before the listing gets one."""
    first = _features(tmp_path, lengths=(16000, 8000, 4800), indices=(0, 2))
    assert json.loads((first.folder / "utterances.json").read_text()) == [["clip0.wav", 16000, 0, 50],
                                                                          ["clip2.wav", 4800, 50, 15]]  # fmt: skip
    seen = []

    def counting(clips):
        seen.extend(len(x) for x in clips)
        return _encode(clips)

    # the same clips at other store positions, plus one new clip
    store = _Store([8000, 4800, 16000, 12000])
    paths = ["clip1.wav", "clip2.wav", "clip0.wav", "clip3.wav"]
    bigger = TeacherFeatures.for_store(store, [1, 2, 3], paths, encode=counting, teacher_id="fake",
                                       cache_dir=tmp_path, progress=False)  # fmt: skip
    assert seen == [12000] and bigger.folder != first.folder
    np.testing.assert_allclose(_raw(bigger, 2), _raw(first, 0), atol=0.02)
    np.testing.assert_allclose(_raw(bigger, 1), _raw(first, 2), atol=0.02)
    np.testing.assert_allclose(np.concatenate([bigger.get(i) for i in (1, 2, 3)]).mean(0), 0, atol=1e-3)
    # another teacher never reuses these frames
    seen.clear()
    TeacherFeatures.for_store(store, [1, 2], paths, encode=counting, teacher_id="other", cache_dir=tmp_path,
                              progress=False)  # fmt: skip
    assert sorted(seen) == [4800, 16000]
    # a cache without the listing (written by an earlier version) gets it when it is next used
    (first.folder / "utterances.json").unlink()
    _features(tmp_path, lengths=(16000, 8000, 4800), indices=(0, 2))
    assert json.loads((first.folder / "utterances.json").read_text())[1] == ["clip2.wav", 4800, 50, 15]


def test_a_teacher_with_the_wrong_frame_count_is_refused(tmp_path) -> None:
    def short(clips):
        return [f[:-1] for f in _encode(clips)]

    with pytest.raises(ValueError, match="frame count"):
        TeacherFeatures.for_store(_Store([16000]), [0], ["a.wav"], encode=short, teacher_id="x", cache_dir=tmp_path,
                                  progress=False)  # fmt: skip
    assert not (list(tmp_path.glob("*/info.json")))


def test_targets_follow_each_placed_utterance_and_mask_pauses(tmp_path) -> None:
    tf = _features(tmp_path)
    warm = 30 * HOP
    # a whole utterance after 0.6 s of warm-up silence
    t, m = teacher_targets([Placement(0, warm, 0, 16000)], 90, tf)
    assert not m[:30].any() and m[30:80].all() and not m[80:].any()
    np.testing.assert_array_equal(t[30:80], tf.get(0))
    # a sequence: 0.1 s of clip 2 from its sample 1600, a pause, 0.25 s of clip 0 from its sample 3200;
    # an utterance without teacher frames (clip 1) stays masked
    parts = [Placement(2, 0, 1600, 1600), Placement(1, 1600, 0, 3200), Placement(0, 8000, 3200, 4000)]
    t, m = teacher_targets(parts, 40, tf)
    assert m[:5].all() and not m[5:25].any() and m[25:37].all() and not m[38:].any()
    np.testing.assert_allclose(_raw(tf, 2)[5:10], (t[:5] * tf.std + tf.mean), atol=1e-2)  # 1600/320 = 5 frames in
    j = (np.arange(25, 37) * HOP + HOP // 2 - 8000 + 3200) // HOP
    np.testing.assert_allclose((t[25:37] * tf.std + tf.mean)[:, 1], j, atol=0.05)


def test_targets_follow_an_utterance_played_faster(tmp_path) -> None:
    """Speed perturbation (``Placement.played_faster``): example frame ``f`` takes the teacher frame of the
    stored time it now plays, ``factor`` times further along, and the part's span shrinks with it."""
    tf = _features(tmp_path)
    p = Placement(0, 0, 0, 16000).played_faster(1.25)  # 1 s of clip 0 in 0.8 s
    assert (p.out_start, p.n, p.rate) == (0, 12800, 1.25)
    t, m = teacher_targets([p], 50, tf)
    assert m[:40].all() and not m[40:].any()
    j = np.floor((np.arange(40) * HOP + HOP // 2) * 1.25 / HOP)
    np.testing.assert_allclose((t[:40] * tf.std + tf.mean)[:, 1], j, atol=0.05)
    # a part of a sequence, slowed down: its start moves later and it covers more frames
    q = Placement(2, 3200, 1600, 3200).played_faster(0.8)
    assert (q.out_start, q.n, q.rate) == (4000, 4000, 0.8)
    t, m = teacher_targets([q], 50, tf)
    on = np.flatnonzero(m)
    assert on[0] == 12 and on[-1] == 24  # centres 4000 <= 320 f + 160 < 8000
    j = np.floor(((on * HOP + HOP // 2 - 4000) * 0.8 + 1600) / HOP)
    np.testing.assert_allclose((t[on] * tf.std + tf.mean)[:, 1], j, atol=0.05)
    # twice: the rates multiply; at factor 1 nothing moves
    assert Placement(0, 0, 0, 16000).played_faster(2.0).played_faster(0.5) == Placement(0, 0, 0, 16000)
    assert Placement(1, 320, 0, 640).played_faster(1.0) == Placement(1, 320, 0, 640)


def test_the_loss_scores_frame_f_against_the_teacher_frame_lag_back_where_masked_in() -> None:
    torch.manual_seed(0)
    target = torch.randn(2, 20, 8)
    mask = torch.ones(2, 20, dtype=torch.bool)
    lag = 3
    pred = torch.zeros(2, 8, 20)
    pred[..., lag:] = target[:, : 20 - lag].transpose(1, 2)
    floor = -torch.nn.functional.logsigmoid(torch.tensor(1.0))  # perfect prediction: L1 0, cosine 1
    assert distill_loss(pred, target, mask, lag).item() == pytest.approx(floor.item(), abs=1e-5)
    assert distill_loss(pred, target, mask, 0).item() > floor.item() + 0.5
    # frames whose teacher frame is masked out do not count
    wrong = pred.clone()
    wrong[0, :, 10] += 5.0
    mask2 = mask.clone()
    mask2[0, 10 - lag] = False
    assert distill_loss(wrong, target, mask2, lag).item() == pytest.approx(floor.item(), abs=1e-5)
    assert distill_loss(wrong, target, mask, lag).item() > floor.item()
    # nothing to score: 0, with a gradient
    none = distill_loss(pred.requires_grad_(), target, torch.zeros_like(mask), lag)
    assert none.item() == 0.0
    none.backward()


def _recognizer(distill_dim: int):
    from edgessm.nets.asr import CtcRecognizer, CtcRecognizerConfig

    cfg = CtcRecognizerConfig(channels=[8, 16], states=[4, 8], kinds=["full", "pointwise"], pools=[40, 8],
                              distill_dim=distill_dim)  # fmt: skip
    return CtcRecognizer(cfg), cfg


def test_the_recognizer_predicts_teacher_frames_only_when_asked() -> None:
    net, _ = _recognizer(6)
    x = torch.randn(2, 1, 320 * 7)
    logits, pred = net(x, distill=True)
    assert logits.shape == (2, 29, 7) and pred.shape == (2, 6, 7)
    torch.testing.assert_close(net(x), logits)
    plain, _ = _recognizer(0)
    with pytest.raises(ValueError, match="distillation head"):
        plain(x, distill=True)


def test_export_leaves_the_distillation_head_out(tmp_path) -> None:
    from dataclasses import asdict

    from safetensors.torch import load_file

    from edgessm.deploy import package as pkg
    from edgessm.deploy.load import load_trained

    net, cfg = _recognizer(6)
    desc = {"network": "asr", "config": asdict(cfg), "labels": []}
    pkg.package(net.eval(), desc, tmp_path / "r", "r", 320, verify_audio=[np.zeros(320 * 10, np.float32)])
    saved = json.loads((tmp_path / "r" / "model.json").read_text())
    assert saved["config"]["distill_dim"] == 0
    assert not [k for k in load_file(str(tmp_path / "r" / "model.safetensors")) if k.startswith("distill")]
    loaded, _ = load_trained(tmp_path / "r")
    x = torch.randn(1, 1, 320 * 5)
    torch.testing.assert_close(loaded(x), net(x))


def test_a_recipe_with_distillation_trains_on_ctc_plus_teacher_frames(tmp_path, monkeypatch) -> None:
    """``[data] distill_weight``: every training example carries the teacher frames of its clean utterances
    (after the warm-up silence), and the loss logs both parts."""
    monkeypatch.setenv("EDGESSM_CACHE", str(tmp_path / "cache"))
    from edgessm.data.audio import write_audio
    from edgessm.data.manifest import Clip, write_manifest
    from edgessm.train.config import TrainConfig
    from edgessm.train.tasks import build_task
    from edgessm.train.trainer import Trainer

    def fake_teacher(model_dir=None):
        def encode(clips):
            return [np.tile(_encode([x])[0][:, :2], (1, 192)) for x in clips]  # 384 dimensions like Whisper tiny

        return encode, "fake-384"

    monkeypatch.setattr(distill, "whisper_encoder", fake_teacher)
    clips = []
    for i, (text, split) in enumerate(
        [("go", "train"), ("stop", "train"), ("go on now", "train"), ("up", "validation")]
    ):
        x = np.zeros(16000 * (2 if " " in text else 1), np.float32)
        x[3200:-3200] = 0.3 * np.sin(np.arange(len(x) - 6400) * 0.2 * (i + 1))
        write_audio(tmp_path / f"{i}.wav", x, 16000)
        clips.append(Clip(str(tmp_path / f"{i}.wav"), speaker=f"s{i}", text=text, split=split))
    write_manifest(tmp_path / "m.csv", clips)
    cfg = TrainConfig.from_dict({"task": "asr", "model": {"channels": [4, 8], "states": [4, 8],
                                 "kinds": ["full", "pointwise"], "pools": [40, 8]},
                                 "data": {"sources": [f"manifest:{tmp_path / 'm.csv'}"], "warmup_s": 0.2,
                                          "distill_weight": 0.5, "distill_lag_s": 0.04, "val_items": 2},
                                 "train": {"steps": 6, "batch_size": 2, "eval_every": 6, "log_every": 1,
                                           "workers": 0}})  # fmt: skip
    task = build_task(cfg)
    assert task.model_config()["distill_dim"] == 384 and task.distill_lag == 2
    items = [task.train_set()[(i, i)] for i in range(12)]
    for it in items:
        mask = it["teacher_mask"]
        assert len(mask) == len(it["audio"]) // HOP and not mask[:10].any()  # 0.2 s warm-up: no target
        assert mask.any()
    batch = task.collate(items[:3])
    assert batch["teacher"].shape == (3, batch["audio"].shape[-1] // HOP, 384)
    Trainer(cfg, tmp_path / "run", device="cpu", progress=False).fit()
    with open(tmp_path / "run" / "log.csv") as f:
        parts = [r for r in csv.DictReader(f) if r.get("distill")]
    assert len(parts) == 6 and all(float(r["distill"]) > 0 and float(r["ctc"]) > 0 for r in parts)
    # the run keeps its head (to --init from it); edgessm export leaves it out (test above)
    assert json.loads((tmp_path / "run" / "model.json").read_text())["config"]["distill_dim"] == 384
    with pytest.raises(ValueError, match="distill_lag_s"):
        build_task(TrainConfig.from_dict({**cfg.to_dict(), "data": {**cfg.data, "distill_lag_s": 0.03}}))

    # speed perturbation ([augment] speed_prob): the example is played faster before the warm-up silence,
    # and its teacher frames follow (1 s of "go" at 1.25x: 0.8 s, 40 frames after the 10 of the warm-up)
    fast = TrainConfig.from_dict({**cfg.to_dict(), "augment": {"speed_prob": 1.0, "speed_factors": [1.25, 1.25]},
                                  "data": {**cfg.data, "sentence_weight": 0.0, "sequence_weight": 0.0}})  # fmt: skip
    fast_task = build_task(fast)
    for i in range(4):
        it = fast_task.train_set()[(i, i)]
        assert len(it["audio"]) == 3200 + 12800 and it["text"] in ("go", "stop")
        assert not it["teacher_mask"][:10].any() and it["teacher_mask"][10:50].all()
        raw = it["teacher"][10:50, 1] * fast_task.teacher.std[1] + fast_task.teacher.mean[1]
        np.testing.assert_allclose(raw, np.floor((np.arange(40) * HOP + HOP // 2) * 1.25 / HOP), atol=0.05)
    for bad, match in (({"speed_prob": 1.5}, "speed_prob"), ({"speed_prob": 0.5, "speed_factors": [1.1, 0.9]},
                                                             "speed_factors")):  # fmt: skip
        with pytest.raises(ValueError, match=match):
            build_task(TrainConfig.from_dict({**fast.to_dict(), "augment": bad})).train_set()
