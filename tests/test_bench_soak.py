"""``edgessm bench soak`` on 18 s of audio (S shortened to 4 s): the report's structure, every sample back
from denoise, the repeated segment's results. Speed and memory are the benchmark's to measure, not this
test's: here they only have to be there."""

from __future__ import annotations

import json

import numpy as np

from edgessm.bench import BENCHMARKS
from edgessm.bench.soak import BLOCK, RATE, Program, checkpoints
from edgessm.cli import main
from edgessm.runtime.registry import MODELS_DIR


def test_checkpoints_are_1_10_30_60_minutes_or_those_fractions_of_a_shorter_run() -> None:
    assert checkpoints(60) == [m * 60 * RATE for m in (1, 10, 30, 60)]
    assert checkpoints(90) == [m * 60 * RATE for m in (1, 10, 30, 60, 90)]
    assert checkpoints(10) == [s * RATE for s in (10, 100, 300, 600)]
    assert all(f % BLOCK == 0 for f in checkpoints(0.3))


def test_the_audio_holds_the_segment_twice_sample_for_sample() -> None:
    program = Program(0.3, 4.0)
    audio = np.concatenate(list(program.blocks()))
    seg = len(program.segment)
    assert len(audio) == program.frames == 0.3 * 60 * RATE and audio.dtype == np.int16
    assert program.starts == [6 * RATE, 12 * RATE] and seg == 4 * RATE
    a, b = (audio[s : s + seg] for s in program.starts)
    assert np.array_equal(a, b) and np.array_equal(a / 32768.0, program.segment)
    assert not np.array_equal(audio[: 2 * RATE], audio[-2 * RATE :])  # around it: other speech


def test_a_short_soak_reports_every_command(tmp_path, capsys) -> None:
    assert "soak" in BENCHMARKS
    assert main(["bench", "soak", "--minutes", "0.3", "--segment", "4", "--out", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    report = json.loads((tmp_path / "soak.json").read_text())
    marks = report["checkpoint_frames"]
    assert len(marks) == 4 and report["audio_s"] == 18.0 and report["segment"]["starts_s"] == [6.0, 12.0]
    for name in ("listen", "denoise", "transcribe"):
        r = report["commands"][name]
        assert r["returncode"] == 0 and "error" not in r, r
        assert r["fed_frames"] == 18 * RATE and r["faster_than_real_time"] and r["real_time_factor"] > 0
        assert len(r["rss_mb"]) == len(r["hwm_mb"]) == len(marks)
        assert f"`{r['command']}`" in table

    denoise = report["commands"]["denoise"]
    assert denoise["samples_in"] == denoise["samples_out"] == 18 * RATE and denoise["samples_match"]
    same = denoise["segment"]
    assert same["compared_s"] == [1.0, 3.99] and len(same["max_abs_diff_per_second"]) == 4  # 10 ms lookahead
    # the copies heard different things before S: the output's difference fades (the state forgets), it
    # is not noise-sized (the denoiser's state remembers tens of seconds; see the 10-minute soak)
    assert 0 <= same["max_abs_diff"] <= same["max_abs_diff_whole_segment"] < 0.05
    listen = report["commands"]["listen"]["segment"]
    # both copies hear the segment's first word; what the model makes of the speech just before a copy may
    # differ (kws35 v5 hears a "no" at the start of one copy without shared data), and "same" says whether
    copies = [[k for k, _ in c] for c in listen["copies"]]
    assert all("yes" in c for c in copies) and listen["same"] == (copies[0] == copies[1])  # words; times may shift
    assert listen["same"] is False or 0 <= listen["max_time_diff_s"] < 0.5, listen
    # keywords of the model; not only the demo's: at its shipped 0.5 kws35 v9 hears a "down" in the demo's noisy
    # speech after one copy's audio (the false accepts its card reports), the code is not what decides that
    labels = json.loads((MODELS_DIR / "kws35" / "model.json").read_text())["labels"]
    assert set(copies[0] + copies[1]) <= set(labels) - {"_unknown_", "_silence_"}
    words = report["commands"]["transcribe"]["segment"]
    assert all(isinstance(c, str) for c in words["copies"]) and isinstance(words["same"], bool)

    for name, state in report["state"].items():
        assert len(state["max_abs"]) == len(state["peak"]) == len(state["tensors"]) == len(marks), name
        assert all(0 < v < 1e3 for v in state["max_abs"]), state["max_abs"]  # bounded, not drifting off
    assert "| denoise: samples in = samples out | 288,000 in, 288,000 out: yes |" in table
