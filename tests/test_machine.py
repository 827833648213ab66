"""How a run uses the machine (processes, threads, loader workers), device tables in recipes, the launcher's
commands, and where a run stands (status.json, `edgessm runs`)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from fixtures import speech_commands_folder, tiny_kws_toml

from edgessm.cli import main
from edgessm.train.cli import launch_commands, resume_command
from edgessm.train.config import CONFIG_DIR, RunConfig, TrainConfig, load_config
from edgessm.train.machine import machine_plan
from edgessm.train.status import RunStatus


def test_a_cpu_trains_one_process_per_core_with_one_thread_each() -> None:
    plan = machine_plan(RunConfig(batch_size=32), "cpu", cores=2)
    assert (plan.processes, plan.threads, plan.workers) == (2, 1, 0)
    plan = machine_plan(RunConfig(batch_size=48), "cpu", cores=16)
    assert (plan.processes, plan.threads, plan.workers) == (8, 2, 0)  # at most 8 processes; the cores shared out
    # each process takes an equal share of the batch: a batch of 9 on 2 cores trains in one process
    plan = machine_plan(RunConfig(batch_size=9), "cpu", cores=2)
    assert (plan.processes, plan.threads) == (1, 2)


def test_batches_of_varying_length_train_in_one_process_beside_its_loader() -> None:
    plan = machine_plan(RunConfig(batch_size=8), "cpu", cores=2, even=False)
    assert (plan.processes, plan.threads, plan.workers) == (1, 2, 2)


def test_explicit_numbers_win_and_a_started_run_counts_its_processes() -> None:
    plan = machine_plan(RunConfig(batch_size=32, processes=1), "cpu", cores=2)
    assert (plan.processes, plan.threads, plan.workers) == (1, 2, 2)  # one process: a loader beside the step
    plan = machine_plan(RunConfig(batch_size=32, processes=1, workers=0), "cpu", cores=2)
    assert (plan.processes, plan.threads, plan.workers) == (1, 2, 0)
    plan = machine_plan(RunConfig(batch_size=32, processes=1, workers=1), "cpu", cores=2)
    assert (plan.threads, plan.workers) == (2, 1)
    plan = machine_plan(RunConfig(batch_size=32, threads=3), "cpu", cores=2)
    assert plan.threads == 3
    # a trainer made in this process (or one of a launcher's) is the number of processes that run
    assert machine_plan(RunConfig(batch_size=32), "cpu", cores=2, started=1).threads == 2
    assert machine_plan(RunConfig(batch_size=32), "cpu", cores=2, started=2).workers == 0


def test_a_gpu_process_feeds_its_gpu_from_loader_workers() -> None:
    plan = machine_plan(RunConfig(batch_size=256), "cuda", cores=16)
    assert (plan.processes, plan.threads, plan.workers) == (1, 2, 14)
    plan = machine_plan(RunConfig(batch_size=256), "cuda", cores=16, started=4)  # torchrun, 4 GPUs
    assert (plan.processes, plan.threads, plan.workers) == (4, 1, 3)


@pytest.mark.parametrize("key,value", [("processes", 0), ("threads", "many"), ("workers", -1), ("processes", True)])
def test_bad_machine_settings_say_what_is_allowed(key: str, value) -> None:
    with pytest.raises(ValueError, match=rf"train.{key} must be 'auto' or a whole number"):
        machine_plan(RunConfig(**{key: value}), "cpu", cores=2)


def _recipe(tmp_path: Path, tables: str) -> Path:
    path = tmp_path / "r.toml"
    path.write_text('task = "kws"\n[train]\nbatch_size = 256\n[optim]\nlr = 0.002\n' + tables)
    return path


def test_device_tables_are_laid_over_the_recipe_and_set_still_wins(tmp_path: Path) -> None:
    path = _recipe(tmp_path, "[cpu.train]\nbatch_size = 32\n[cpu.optim]\nlr = 0.001\n[cuda.train]\nbatch_size = 512\n")
    assert load_config(str(path), device="cpu").train.batch_size == 32
    assert load_config(str(path), device="cpu").optim.lr == 0.001
    assert load_config(str(path), device="cuda").train.batch_size == 512
    assert load_config(str(path)).train.batch_size == 256  # no device: the recipe as written
    assert load_config(str(path), ["train.batch_size=8"], device="cpu").train.batch_size == 8
    raw = tomllib.loads(path.read_text())
    assert TrainConfig.from_dict(raw).train.batch_size == 256  # the tables are recipe syntax, not sections


def test_device_tables_may_not_change_the_network(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"\[cpu.model\]: a network is the same on every device"):
        load_config(str(_recipe(tmp_path, "[cpu.model]\nchannels = [4]\n")), device="cpu")
    with pytest.raises(ValueError, match=r"\[cuda\] holds tables"):
        load_config(str(_recipe(tmp_path, "[cuda]\nbatch_size = 4\n")), device="cuda")


def test_shipped_recipes_load_on_both_devices() -> None:
    for path in sorted(CONFIG_DIR.glob("*.toml")):
        for device in ("cpu", "cuda"):
            cfg = load_config(str(path), device=device)
            machine_plan(cfg.train, device, cores=2)  # every machine setting is valid


def test_the_launcher_starts_ranks_of_one_group_with_their_threads() -> None:
    plan = machine_plan(RunConfig(batch_size=32), "cpu", cores=2)
    runs = launch_commands(["train", "kws", "--out", "runs/k"], plan, port=29512)
    assert len(runs) == 2
    for rank, (cmd, env) in enumerate(runs):
        assert cmd[1:] == ["-m", "edgessm", "train", "kws", "--out", "runs/k"]
        ranks = (env["RANK"], env["WORLD_SIZE"], env["MASTER_PORT"], env["OMP_NUM_THREADS"])
        assert ranks == (str(rank), "2", "29512", "1")


def test_the_resume_command_repeats_the_run_without_what_only_started_or_stopped_it() -> None:
    argv = ["train", "kws_v8", "--out", "runs/k", "--init", "models/kws35", "--init-partial", "--set", "a.b=1",
            "--stop-after", "30"]  # fmt: skip
    assert resume_command(argv) == "edgessm train kws_v8 --out runs/k --set a.b=1 --resume"
    assert resume_command(["train", "kws", "--out", "r", "--resume"]) == "edgessm train kws --out r --resume"


@pytest.fixture(scope="module")
def sc_folder(tmp_path_factory) -> Path:
    return speech_commands_folder(tmp_path_factory.mktemp("sc"))


def test_a_run_says_where_it_stands(sc_folder: Path, tmp_path: Path, capsys) -> None:
    cfg = tiny_kws_toml(tmp_path / "tiny.toml", sc_folder, steps=6)
    out = tmp_path / "run"
    argv = ["train", str(cfg), "--out", str(out), "--device", "cpu", "--no-progress", "--stop-after", "3",
            "--set", "train.log_every=1"]  # fmt: skip
    assert main(argv) == 0
    said = capsys.readouterr().out
    assert "first step after" in said
    st = RunStatus.load(out)
    assert (st.state, st.step, st.total_steps, st.examples, st.parts) == ("stopped", 3, 6, 12, 1)
    assert st.first_step_s is not None and st.first_step_s > 0 and st.wall_s >= st.first_step_s
    assert st.message == (
        f"continue with: edgessm train {cfg} --out {out} --device cpu --no-progress --set train.log_every=1 --resume"
    )
    assert st.checkpoint.endswith("last.pt") and Path(st.checkpoint).is_file()
    with open(out / "log.csv") as f:
        header = f.readline()
    assert "data_wait" in header and "items_per_s" in header
    assert main(["train", str(cfg), "--out", str(out), "--device", "cpu", "--no-progress", "--resume"]) == 0
    st = RunStatus.load(out)
    assert (st.state, st.step, st.parts) == ("done", 6, 2) and "score" in st.validation
    capsys.readouterr()
    assert main(["runs", str(out)]) == 0
    table = capsys.readouterr().out
    assert "done" in table and "6/6" in table
    assert main(["runs", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[str(out)]["state"] == "done"
    assert main(["runs", str(tmp_path)]) == 0  # a folder of runs: the runs in it
    assert str(out) in capsys.readouterr().out
    assert main(["runs", str(out), "--plot", str(tmp_path / "curves.png")]) == 0  # the two sittings' curves
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()
    assert main(["runs", str(out), "--json", "--plot", str(tmp_path / "c2.png")]) == 0  # stdout stays JSON
    assert json.loads(capsys.readouterr().out)[str(out)]["state"] == "done"


def test_runs_says_when_a_folder_holds_no_run(tmp_path: Path, capsys) -> None:
    assert main(["runs", str(tmp_path)]) == 1
    assert "no status.json here" in capsys.readouterr().out


def test_a_failed_run_says_why(sc_folder: Path, tmp_path: Path) -> None:
    from test_train import kws_config

    from edgessm.train.trainer import Trainer

    trainer = Trainer(kws_config(sc_folder, steps=4), tmp_path / "r", device="cpu", progress=False)

    def broken(net, batch, progress):
        raise RuntimeError("the loss broke")

    trainer.task.loss = broken
    with pytest.raises(RuntimeError, match="the loss broke"):
        trainer.fit()
    st = RunStatus.load(tmp_path / "r")
    assert st.state == "failed" and "the loss broke" in st.message


def test_two_processes_from_one_command_train_stop_and_resume_together(sc_folder: Path, tmp_path: Path) -> None:
    """`edgessm train` starts the processes itself; a SIGTERM to it stops every one after the same step, with a
    checkpoint that --resume continues."""
    import os
    import signal
    import subprocess
    import sys
    import time

    cfg = tiny_kws_toml(tmp_path / "two.toml", sc_folder, steps=100000).read_text()
    cfg = cfg.replace("processes = 1", "processes = 2\ncheckpoint_every = 100000")
    (tmp_path / "two.toml").write_text(cfg)
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "edgessm", "train", str(tmp_path / "two.toml"), "--out", str(out), "--device", "cpu",
           "--no-progress"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 600  # the first logged step: minutes on a loaded machine
    while not (out / "log.csv").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.5)
    os.kill(proc.pid, signal.SIGTERM)  # the launcher only, as `kill PID` or a job scheduler does
    said, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, said
    assert "2 processes x 1 threads" in said and "stopped at step" in said
    st = RunStatus.load(out)
    assert st.state == "stopped" and st.processes == 2 and st.step > 0
    assert st.message.endswith("--resume")
    done = subprocess.run([*cmd, "--resume", "--stop-after", str(st.step + 2)], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    again = RunStatus.load(out)
    assert (again.state, again.step, again.parts) == ("stopped", st.step + 2, 2)


_LATE_SIGNAL = """
import signal, sys
from edgessm.train.trainer import Trainer
agree = Trainer._any

def _any(self, flag):  # process 0 is signalled just after the processes agreed to go on (step 3)
    out = agree(self, flag)
    if self.rank == 0 and self.step == 3:
        self._request_stop(signal.SIGTERM, None)
    return out

Trainer._any = _any
from edgessm.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_signal_between_agreement_and_checkpoint_stops_every_process_after_the_same_step(
    sc_folder: Path, tmp_path: Path
) -> None:
    """A signal may land in one process at any line of a step: after the processes agreed to go on, it
    counts at the next step's agreement, so no process waits at a checkpoint the others never reach."""
    import os
    import subprocess
    import sys

    from edgessm.train.cli import _free_port

    cfg = tiny_kws_toml(tmp_path / "two.toml", sc_folder, steps=100000).read_text()
    (tmp_path / "two.toml").write_text(cfg.replace("processes = 1", "processes = 2\ncheckpoint_every = 100000"))
    (tmp_path / "late.py").write_text(_LATE_SIGNAL)
    argv = ["train", str(tmp_path / "two.toml"), "--out", str(tmp_path / "run"), "--device", "cpu", "--no-progress"]
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "WORLD_SIZE": "2",
           "OMP_NUM_THREADS": "1"}  # fmt: skip
    cmd = [sys.executable, str(tmp_path / "late.py"), *argv]
    pipe = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    procs = [subprocess.Popen(cmd, env={**env, "RANK": str(r)}, **pipe) for r in range(2)]
    try:
        said = [p.communicate(timeout=180)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], said
    assert "stopped at step 4" in said[0]
    assert RunStatus.load(tmp_path / "run").step == 4


def test_a_sitting_ends_on_time_with_the_schedule_unchanged(sc_folder: Path, tmp_path: Path) -> None:
    """train.stop_after_min: a checkpoint and a stop after that many minutes; --resume goes on to the end."""
    from test_train import kws_config

    from edgessm.train.trainer import Trainer

    cfg = kws_config(sc_folder, steps=6, stop_after_min=1e-6)  # over as soon as the first step is done
    Trainer(cfg, tmp_path / "r", device="cpu", progress=False).fit()
    st = RunStatus.load(tmp_path / "r")
    assert (st.state, st.step, st.total_steps) == ("stopped", 1, 6)
    cfg.train.stop_after_min = 0.0
    Trainer(cfg, tmp_path / "r", device="cpu", progress=False, resume=True).fit()
    assert RunStatus.load(tmp_path / "r").state == "done"
    with pytest.raises(ValueError, match="stop_after_min must be >= 0"):
        Trainer(kws_config(sc_folder, steps=6, stop_after_min=-1.0), tmp_path / "n", device="cpu").fit()
