"""One process here starts without torchrun: `python3 -u ENTRY …` with the variables torchrun gives its one worker.

The real launches below run a stand-in pretrain_gpt.py in a stand-in Megatron checkout (--megatron-path): it records
what it was started with, or sleeps, or is killed by a signal, so the launcher's own start, forwarding and exit
status are what is tested.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from launcher.backends import local
from launcher.checks.megatron_python import find_megatron_python
from launcher.checks.megatron_verdict import target_env
from launcher.errors import UserError
from launcher.pipeline.command import Command, build_command
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import Placement, resolve
from launcher.pipeline.runner import rank_environment
from launcher.runs import triage
from tests.conftest import REPO, alive, without_run_stamp

WAIT_SECONDS = 60
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                  "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def job(*overrides: str, gpus: int = 1, target: Placement | None = None):
    preset = load_preset("345m", [*overrides, "transformer_engine=false", "apex=false"])
    return resolve(preset, 1, gpus, megatron_path=Path("/opt/megatron-lm"), inherited_env={},
                   **({"target": target} if target is not None else {}))


# ---- what runs ----

def test_one_gpu_here_runs_the_entry_directly_with_torchruns_worker_variables():
    resolved = job()
    command = build_command(resolved)
    assert command.direct and resolved.runner.direct
    assert command.argv[:3] == ["python3", "-u", "/opt/megatron-lm/pretrain_gpt.py"]
    assert command.argv[3:] == command.script_args
    assert {name: command.env[name] for name in RANK_VARIABLES} == rank_environment()
    assert rank_environment()["WORLD_SIZE"] == "1" and rank_environment()["MASTER_PORT"] == "0"
    assert command.env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"  # torchrun's default for its workers


def test_runner_torchrun_brings_torchrun_back_with_no_rank_variables():
    command = build_command(job("runner=torchrun"))
    assert not command.direct
    assert command.argv[:6] == ["torchrun", "--nnodes", "1", "--nproc-per-node", "1", "--standalone"]
    assert not set(RANK_VARIABLES) & set(command.env) and "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in command.env


@pytest.mark.parametrize("case", ["two GPUs", "Slurm", "a named torchrun", "in-process restart"])
def test_auto_keeps_torchrun_where_one_process_here_is_not_the_job(case):
    inputs = {"two GPUs": {"gpus": 2}, "Slurm": {"target": Placement(slurm=True)},
              "a named torchrun": {"overrides": ("torchrun=/opt/other/bin/torchrun",)},
              "in-process restart": {"overrides": ("inprocess_restart=true",)}}[case]
    resolved = job(*inputs.get("overrides", ()), gpus=inputs.get("gpus", 1), target=inputs.get("target"))
    assert not resolved.runner.direct
    assert not build_command(resolved).direct and "RANK" not in resolved.environment.exported


def test_torchruns_values_win_over_the_presets_and_the_inherited_ones():
    preset = load_preset("345m", ["env.RANK=3", "env.MASTER_PORT=null", "transformer_engine=false", "apex=false"])
    resolved = resolve(preset, 1, 1, megatron_path=Path("/opt/megatron-lm"),
                       inherited_env={"WORLD_SIZE": "8", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"})
    environment = resolved.environment
    assert environment.get("RANK") == "0" and environment.get("MASTER_PORT") == "0"
    assert environment.get("WORLD_SIZE") == "1"
    assert environment.get("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "3"  # the user's, as torchrun would keep it
    assert "MASTER_PORT" not in environment.unset


def test_megatrons_own_checks_see_no_rank_variable_of_a_direct_run():
    """`launch --check` puts each layout to Megatron with its own world size; the job's one rank is not it."""
    assert not set(RANK_VARIABLES) & set(target_env(job()))


def test_the_dry_run_says_which_runner_runs_and_why(launch):
    code, out, err = launch("345m", "--gpus-per-node", "1", "--dry-run")
    assert code == 0, err
    assert "# runner python3 directly, without torchrun (one process here" in out
    assert "\npython3 -u \\\n  /" in out and "export RANK=0\n" in out
    code, out, err = launch("345m", "--gpus-per-node", "1", "--set", "runner=torchrun", "--dry-run")
    assert code == 0, err
    assert "# runner torchrun (runner=torchrun)" in out and "\ntorchrun --nnodes 1 --nproc-per-node 1" in out
    code, out, err = launch("345m", "--gpus-per-node", "1", "--dry-run", "--format", "json")
    assert json.loads(out)["runner"]["name"] == "direct"


@pytest.mark.parametrize("value", ["direct", "Torchrun", "", "[torchrun]"])
def test_an_unknown_runner_is_refused_with_a_hint(launch, value):
    code, out, err = launch("345m", "--gpus-per-node", "1", "--set", f"runner={value}", "--dry-run")
    assert code == 2 and "Traceback" not in err
    assert "error: launcher.runner (--set runner) must be auto or torchrun" in err and "hint: " in err


def test_a_preset_file_chooses_the_runner(tmp_path, launch):
    preset = tmp_path / "mine.yaml"
    preset.write_text("base: 345m\nlauncher:\n  runner: torchrun\n  gpus_per_node: 1\n")
    code, out, err = launch(str(preset), "--dry-run")
    assert code == 0, err
    assert "# runner torchrun (runner=torchrun)" in out


MEGATRON_INIT = """\
import sys
sys.argv = ["pretrain_gpt.py", "--distributed-backend", "gloo"]
import torch.distributed as dist
from megatron.training import global_vars
from megatron.training.arguments import parse_args
from megatron.training.initialize import _initialize_distributed
global_vars.set_args(parse_args(ignore_unknown_args=True))
_initialize_distributed(None, None, None)
print(dist.get_rank(), dist.get_world_size(), dist.get_backend())
"""


@pytest.mark.megatron
def test_megatrons_distributed_initialisation_works_on_the_rank_variables():
    """Megatron's own env:// initialisation (init_process_group without an init method) at a world of one, with
    MASTER_PORT 0, here over gloo on the CPU."""
    python = find_megatron_python()
    if python is None:
        pytest.skip("needs megatron-core 0.18.0 and torch")
    env = {**os.environ, **rank_environment()}
    if os.environ.get("MEGATRON_LM_PATH"):
        env["PYTHONPATH"] = os.environ["MEGATRON_LM_PATH"]
    result = subprocess.run([python, "-c", MEGATRON_INIT], env=env, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[-1] == "0 1 gloo"


# ---- real launches with a stand-in entry ----

def stand_in_megatron(tmp_path: Path, body: str) -> Path:
    """A Megatron checkout whose pretrain_gpt.py is `body` (it gets `here`, its folder, and the usual modules)."""
    megatron = tmp_path / "megatron-lm"
    megatron.mkdir(exist_ok=True)
    (megatron / "pretrain_gpt.py").write_text(
        "import json, os, pathlib, signal, sys, time\nhere = pathlib.Path(__file__).parent.parent\n"
        + textwrap.dedent(body))
    return megatron


RECORD = """\
(here / "record.json").write_text(json.dumps({"argv": sys.orig_argv, "executable": sys.executable,
                                              "env": dict(os.environ), "pid": os.getpid(), "sid": os.getsid(0)}))
print("iteration        1/       2 |", flush=True)
"""


def launch_argv(tmp_path: Path, megatron: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "launcher", "345m", "--gpus-per-node", "1", "--set", "transformer_engine=false",
            "--set", "apex=false", "--set", f"run_root={tmp_path / 'runs'}", "--megatron-path", str(megatron), *extra]


def environment() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("MEGATRON_LM_PATH", None)
    return env


def run_launch(tmp_path: Path, megatron: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(launch_argv(tmp_path, megatron, *extra), cwd=tmp_path, env=environment(),
                          capture_output=True, text=True, timeout=WAIT_SECONDS, check=False)


def test_a_launch_runs_exactly_the_command_its_dry_run_printed(tmp_path):
    megatron = stand_in_megatron(tmp_path, RECORD)
    dry = run_launch(tmp_path, megatron, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    planned = json.loads(run_launch(tmp_path, megatron, "--dry-run", "--format", "json").stdout)
    run_launch(tmp_path, megatron, "--no-doctor")
    ran = json.loads((tmp_path / "record.json").read_text())
    # python3 on the processes' PATH is this launcher's interpreter, as torchrun's workers run torchrun's
    assert ran["argv"][0] == sys.executable and planned["argv"][0] == "python3"
    assert without_run_stamp(json.dumps(ran["argv"][1:])) == without_run_stamp(json.dumps(planned["argv"][1:]))
    # every variable the text dry-run exports is what the rank saw
    exports = [shlex.split(line)[1].split("=", 1) for line in dry.stdout.splitlines() if line.startswith("export ")]
    assert {name for name, _ in exports} >= set(RANK_VARIABLES)
    for name, value in exports:
        expected = ran["env"]["PYTHONPATH"].startswith(value) if name == "PYTHONPATH" else ran["env"][name] == value
        assert expected, (name, value, ran["env"].get(name))
    (run_dir,) = (tmp_path / "runs").iterdir()
    command_sh = (run_dir / "command.sh").read_text()
    assert "\npython3 -u " in command_sh and "export MASTER_PORT=0" in command_sh
    assert json.loads((run_dir / "manifest.json").read_text())["attempts"][0]["argv"][:2] == ["python3", "-u"]


SLEEPER = """\
seen = []
def note(signum, _frame):
    seen.append(signal.Signals(signum).name)
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
    signal.signal(sig, note)
print("iteration        1/       2 |", flush=True)
(here / "started").write_text(str(os.getpid()))
while not seen:
    time.sleep(0.05)
time.sleep(0.5)  # a second delivery of the same signal would arrive meanwhile
(here / "signals").write_text(",".join(seen))
sys.exit(128 + signal.Signals[seen[0]])
"""


def wait_for(path: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not path.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.05)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1])
def test_a_signal_to_the_launchers_process_group_reaches_the_rank_once(tmp_path, sig):
    """As a terminal's Ctrl-C does: the whole foreground group gets it; the rank, in a session of its own like
    torchrun's workers, gets it once, from the launcher."""
    megatron = stand_in_megatron(tmp_path, SLEEPER)
    proc = subprocess.Popen(launch_argv(tmp_path, megatron, "--no-doctor"), cwd=tmp_path, env=environment(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(tmp_path / "started", proc)
        os.killpg(proc.pid, sig)
        code = proc.wait(timeout=WAIT_SECONDS)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert (tmp_path / "signals").read_text() == sig.name
    assert code == 128 + sig, proc.stderr.read()  # the rank's status, passed on


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV])
def test_a_rank_killed_by_signal_n_exits_128_plus_n_and_is_named_in_the_summary(tmp_path, sig):
    megatron = stand_in_megatron(tmp_path, f"""\
        print("iteration        1/       2 |", flush=True)
        os.kill(os.getpid(), {int(sig)})
        """)
    result = run_launch(tmp_path, megatron, "--no-doctor")
    assert result.returncode == 128 + sig, result.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["exit_code"] == 128 + sig and summary["outcome"] == "failed"
    # a kill from outside is the machine's or the scheduler's; a segfault is the rank's own crash, retried once
    crashed = sig in (signal.SIGSEGV,)
    assert summary["failure"]["class"] == (triage.TRAINING if crashed else triage.INFRASTRUCTURE)
    said = f"rank crashed ({sig.name})" if crashed else f"rank killed by {sig.name}"
    assert summary["failure"]["reason"] == said and summary["failure"]["rank"] == 0


def test_a_rank_that_raises_is_diagnosed_from_its_own_traceback(tmp_path):
    megatron = stand_in_megatron(tmp_path, """\
        print("iteration        1/       2 |", flush=True)
        raise AssertionError("layer 3 has no weights")
        """)
    result = run_launch(tmp_path, megatron, "--no-doctor")
    assert result.returncode == 1, result.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    failure = json.loads((run_dir / "summary.json").read_text())["failure"]
    assert failure["class"] == triage.TRAINING
    assert failure["reason"] == "assertion: AssertionError: layer 3 has no weights"
    assert failure["rank"] == 0


# ---- the local backend itself ----

def direct_command(tmp_path: Path, body: str) -> Command:
    script = tmp_path / "entry.py"
    script.write_text("import os, pathlib, signal, sys, time\nhere = pathlib.Path(__file__).parent\n"
                      + textwrap.dedent(body))
    return Command(argv=[sys.executable, "-u", str(script)], env={}, script=str(script), script_args=[],
                   direct=True)


def test_run_returns_128_plus_n_for_a_direct_child_killed_by_signal_n(tmp_path):
    command = direct_command(tmp_path, "os.kill(os.getpid(), signal.SIGKILL)\n")
    assert local.run(command, dict(os.environ), stdout=subprocess.DEVNULL) == 128 + signal.SIGKILL


def test_a_failing_record_stops_the_direct_child_with_sigterm_then_sigkill(tmp_path, monkeypatch):
    """The launcher cannot record the run any more: SIGTERM, and SIGKILL once the grace time is over."""
    monkeypatch.setattr(local, "STOP_GRACE_SECONDS", 1)
    command = direct_command(tmp_path, """\
        def ignore(signum, _frame):
            (here / "terms").open("a").write(signal.Signals(signum).name + "\\n")
        signal.signal(signal.SIGTERM, ignore)
        (here / "pid").write_text(str(os.getpid()))
        print("first line", flush=True)
        while True:
            time.sleep(0.05)
        """)

    def full_disk(_line: str) -> None:
        raise OSError(28, "No space left on device")

    started = time.monotonic()
    with pytest.raises(OSError):
        local.run(command, dict(os.environ), on_line=full_disk)
    assert time.monotonic() - started < WAIT_SECONDS
    assert (tmp_path / "terms").read_text() == "SIGTERM\n"
    pid = int((tmp_path / "pid").read_text())
    with pytest.raises(ProcessLookupError):  # reaped: killed, not left running
        os.kill(pid, 0)


def test_a_direct_run_without_its_python_says_how_to_go_on(tmp_path):
    command = replace(direct_command(tmp_path, "pass\n"), argv=["no-such-python3", "-u", "entry.py"])
    with pytest.raises(UserError) as caught:
        local.run(command, {"PATH": str(tmp_path)})
    (problem,) = caught.value.problems
    assert problem.message == "no-such-python3 is not on PATH" and "--set runner=torchrun" in problem.hint


EARLY_SIGNAL = """\
import os, signal, subprocess, sys
from launcher.backends import local
from launcher.pipeline.command import Command

real = subprocess.Popen
def popen_as_a_signal_comes(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)  # while the launcher starts the rank
    return real(*args, **kwargs)
subprocess.Popen = popen_as_a_signal_comes
entry = sys.argv[1]
command = Command(argv=[sys.executable, "-u", entry], env={}, script=entry, script_args=[], direct=True)
print(local.run(command, dict(os.environ)), flush=True)
"""


def test_a_signal_that_comes_while_the_rank_starts_is_passed_on_once_it_has(tmp_path):
    """Not lost, and the launcher does not die of it leaving a rank in its own session that nothing stops."""
    entry = tmp_path / "entry.py"
    entry.write_text("import signal, sys, time\n"
                     "signal.signal(signal.SIGTERM, lambda s, _f: sys.exit(128 + s))\n"
                     "time.sleep(30)\n")
    result = subprocess.run([sys.executable, "-c", EARLY_SIGNAL, str(entry)], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=WAIT_SECONDS, check=False)
    assert result.returncode == 0, result.stderr
    # the rank ends by it, whether its handler was in place yet (exit 143) or not (killed: 128 + 15)
    assert result.stdout.strip() == str(128 + signal.SIGTERM)


KILLED_LAUNCHER = """\
import os, sys
from launcher.backends import local
from launcher.pipeline.command import Command

entry, direct = sys.argv[1], sys.argv[2] == "direct"
command = Command(argv=[sys.executable, "-u", entry], env={}, script=entry, script_args=[], direct=direct)
local.run(command, dict(os.environ), on_line=lambda line: print(line, end="", flush=True))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("runner", ["direct", "torchrun"])
def test_a_launcher_killed_by_sigkill_takes_its_job_with_it(tmp_path, runner):
    """No handler sees SIGKILL: the rank (or torchrun) must still not train on, unrecorded, holding the GPU."""
    entry = tmp_path / "entry.py"
    entry.write_text("import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(60)\n")
    launcher = subprocess.Popen([sys.executable, "-c", KILLED_LAUNCHER, str(entry), runner], stdout=subprocess.PIPE,
                                text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert launcher.stdout is not None
    rank = int(launcher.stdout.readline())
    assert alive(rank)
    launcher.kill()
    launcher.wait()
    deadline = time.monotonic() + WAIT_SECONDS
    while alive(rank) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(rank)
