"""`edgessm soup`: averaged weights of fine-tunes of one network, with its refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from edgessm.cli import main
from edgessm.train.soup import average_weights, make_soup

DESC = {"network": "kws", "config": {"channels": [4]}, "labels": ["a", "b"], "clip_samples": 16000, "step": 9}


def _model(folder, seed: int, desc: dict | None = None, shape=(3, 2)) -> str:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    save_file({"w": rng.normal(size=shape).astype(np.float32), "n": np.array([7], dtype=np.int64)},
              str(folder / "model.safetensors"))  # fmt: skip
    (folder / "model.json").write_text(json.dumps(desc or DESC))
    return str(folder)


def test_average_is_the_weighted_mean_in_float64():
    a = {"w": np.array([1.0, 2.0], np.float32), "n": np.array([3])}
    b = {"w": np.array([3.0, 6.0], np.float32), "n": np.array([3])}
    out = average_weights([a, b])
    assert out["w"].dtype == np.float32
    np.testing.assert_allclose(out["w"], [2.0, 4.0])
    np.testing.assert_allclose(average_weights([a, b], [3, 1])["w"], [1.5, 3.0])
    assert out["n"].tolist() == [3]


def test_soup_folder_and_record(tmp_path):
    a, b = _model(tmp_path / "a", 0), _model(tmp_path / "b", 1)
    dest = make_soup([a, b], tmp_path / "soup", weights=[1, 3])
    got = load_file(str(dest / "model.safetensors"))
    wa, wb = load_file(a + "/model.safetensors")["w"], load_file(b + "/model.safetensors")["w"]
    np.testing.assert_allclose(got["w"], 0.25 * wa + 0.75 * wb, rtol=1e-6)
    desc = json.loads((dest / "model.json").read_text())
    assert desc["network"] == "kws" and [s["weight"] for s in desc["soup"]] == [0.25, 0.75] and "step" not in desc
    assert all(len(s["sha256"]) == 64 for s in desc["soup"])
    assert not list(tmp_path.glob(".soup.tmp-*"))  # written atomically: no temporary folder left


def test_soup_refusals(tmp_path):
    a, b = _model(tmp_path / "a", 0), _model(tmp_path / "b", 1)
    other = _model(tmp_path / "c", 2, {**DESC, "labels": ["a", "c"]})
    wide = _model(tmp_path / "d", 3, shape=(3, 3))
    with pytest.raises(ValueError, match="labels differs"):
        make_soup([a, other], tmp_path / "x")
    with pytest.raises(ValueError, match="different shapes"):
        make_soup([a, wide], tmp_path / "x")
    with pytest.raises(ValueError, match="given twice"):
        make_soup([a, a], tmp_path / "x")
    with pytest.raises(ValueError, match="at least two"):
        make_soup([a], tmp_path / "x")
    with pytest.raises(ValueError, match="one weight per model"):
        make_soup([a, b], tmp_path / "x", weights=[1.0])
    with pytest.raises(ValueError, match="non-negative"):
        make_soup([a, b], tmp_path / "x", weights=[1.0, -1.0])
    before = (tmp_path / "a" / "model.safetensors").read_bytes()
    with pytest.raises(FileExistsError, match="never overwrites"):
        make_soup([a, b], a)
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == before
    assert not (tmp_path / "x").exists()
    nan = _model(tmp_path / "e", 4)
    w = load_file(nan + "/model.safetensors")
    w["w"][0, 0] = np.nan
    save_file(w, nan + "/model.safetensors")
    with pytest.raises(ValueError, match="NaN"):
        make_soup([a, nan], tmp_path / "x")
    ints = _model(tmp_path / "f", 5)
    w = load_file(ints + "/model.safetensors")
    w["n"] = np.array([8], dtype=np.int64)
    save_file(w, ints + "/model.safetensors")
    with pytest.raises(ValueError, match="integer tensor n"):
        make_soup([a, ints], tmp_path / "x")


def test_soup_cli_errors_in_one_line(tmp_path, capsys):
    a, b = _model(tmp_path / "a", 0), _model(tmp_path / "b", 1)
    with pytest.raises(SystemExit, match="edgessm soup: --weights takes numbers"):
        main(["soup", a, b, "--out", str(tmp_path / "s"), "--weights", "1,x"])
    with pytest.raises(SystemExit, match=r"edgessm soup: .*has no model\.json"):
        main(["soup", a, str(tmp_path), "--out", str(tmp_path / "s")])
    assert main(["soup", a, b, "--out", str(tmp_path / "s")]) == 0
    assert "soup of 2 models" in capsys.readouterr().out


def test_soup_of_a_shipped_network_loads_for_export(tmp_path):
    from edgessm.deploy.load import load_trained
    from edgessm.runtime.registry import MODELS_DIR

    src = MODELS_DIR / "kws35"
    twin = tmp_path / "twin"
    twin.mkdir()
    w = {
        k: v + np.float32(0.01) if v.dtype == np.float32 else v
        for k, v in load_file(str(src / "model.safetensors")).items()
    }
    save_file(w, str(twin / "model.safetensors"))
    (twin / "model.json").write_text((src / "model.json").read_text())
    dest = make_soup(["kws35", str(twin)], tmp_path / "soup")
    net, desc = load_trained(dest)
    assert desc["network"] == "kws" and len(desc["soup"]) == 2
    name = next(k for k, v in w.items() if v.dtype == np.float32)
    got = dict(net.state_dict())[name].numpy()
    np.testing.assert_allclose(got, load_file(str(src / "model.safetensors"))[name] + 0.005, rtol=1e-5, atol=1e-6)


def test_a_failed_write_leaves_nothing(tmp_path, monkeypatch):
    import safetensors.numpy

    a, b = _model(tmp_path / "a", 0), _model(tmp_path / "b", 1)

    def full_disk(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(safetensors.numpy, "save_file", full_disk)
    with pytest.raises(OSError, match="No space"):
        make_soup([a, b], tmp_path / "soup")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]


def test_a_model_folder_is_written_whole_and_never_over_another(tmp_path) -> None:
    import numpy as np

    from edgessm.deploy.load import write_model_folder

    dest = write_model_folder(tmp_path / "m", {"w": np.arange(3, dtype=np.float32)}, {"network": "kws"})
    assert sorted(p.name for p in dest.iterdir()) == ["model.json", "model.safetensors"]
    assert json.loads((dest / "model.json").read_text()) == {"network": "kws"}
    with pytest.raises(FileExistsError, match="never overwritten"):
        write_model_folder(dest, {"w": np.zeros(1, np.float32)}, {})
    assert [p.name for p in tmp_path.iterdir()] == ["m"]  # no temporary folder left behind
