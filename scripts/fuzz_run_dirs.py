"""Hostile-input sweep over every command that reads a run directory.

    python scripts/fuzz_run_dirs.py [--quick] [--sample N] [--match TEXT] [--seed N] [--only READER,...] [--keep DIR]

--quick --sample 100 takes a few minutes on 2 cores; --quick alone (801 mutations, about 9,000 reader runs) about
30 minutes there, the full sweep (2,261 mutations) about an hour and a half.

Makes real run directories (a local run through a replaying torchrun stand-in that saved at iteration 50, a
Slurm run with its slurm-JOB.out, a Kubernetes run with its pod log), then damages one file of a copy at a time
in many ways (missing, empty, cut, binary, not UTF-8, huge, an endless line, a link to /dev/zero, to a secret
file or outside the run root, a FIFO, a directory, deep nesting, NaN, a wrong type at every key, shell
metacharacters and newlines in every string, planted programs, settings that choose a program (a loader variable,
TMPDIR, USER, an #SBATCH --export or --chdir), what killed writes leave (temporaries, an empty
lock), the run directory empty or on a read-only mount) and runs every reader on each:

    report (text, json, --partial) · runs / ls (text, json) · diff RUN toy · --resume RUN --slurm / --k8s /
    here (a stand-in torchrun named on the command line) · the Slurm requeue policy (python3 -m
    launcher.runs.requeue_policy RUN JOB ATTEMPT STATUS)

Each reader runs in a forked child of this process (the launcher is imported once) with a 10 s limit and
2 GiB of address space. A finding is: an exit status other than 0, 1 (report: the run failed) or 2; a traceback
or "internal error"; exit 2 without `error:` and `hint:`; more than 10 s; a marker file that a planted command
or string would have created (something from the run directory was executed); the text of a file outside
the run directory (reached through a link) in the output or in a file written; a secret in clear in any file
written; a temporary of the launcher's atomic writes left behind. Prints one line per finding and the totals.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
LOGS = ROOT / "tests" / "fixtures" / "logs"
TIME_LIMIT_S = 10
MEMORY_LIMIT = 2 << 30
OUTSIDE_TEXT = "OUTSIDE-THE-RUN-DIRECTORY-3c91f"  # the content of a file a link may point at
SECRETS = {"WANDB_API_KEY": "wandbsecretvalue0123456789abcdef", "HF_TOKEN": "hf_SecretTokenValue0123456789",
           "DB_URL": "postgres://user:S3cretDbPassw0rd@db.example/x"}
OUTSIDE_FILE = Path("/tmp/outside.txt")  # set to a file in the work directory by main()
SECRET_SETS = ("--set", f"launcher.env.WANDB_API_KEY={SECRETS['WANDB_API_KEY']}", "--set",
               f"launcher.env.DB_URL={SECRETS['DB_URL']}", "--set", f"launcher.env.PLAIN={SECRETS['HF_TOKEN']}",
               "--set", f"wandb_exp_name={SECRETS['HF_TOKEN']}")
SECRET_WORDS = ("wandbsecretvalue0123456789abcdef", "hf_SecretTokenValue0123456789", "S3cretDbPassw0rd")


# ------------------------------------------------------------------------------------------- run directories

def _launch(work: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "launcher", *args, "--megatron-path", str(work / "megatron-lm")],
                          cwd=work, env=env, capture_output=True, text=True, timeout=300, check=False)


def _stand_in(work: Path) -> Path:
    """A torchrun that prints a recorded log and saves a tracker at 50 (a program named on the command line)."""
    script = work / "torchrun-replay"
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import sys, pathlib
        argv = sys.argv[1:]
        if "--save" in argv:
            save = pathlib.Path(argv[argv.index("--save") + 1])
            save.mkdir(parents=True, exist_ok=True)
            (save / "latest_checkpointed_iteration.txt").write_text("50")
        sys.stdout.write(open({str(LOGS / "toy_truncated.log")!r}).read())
        sys.exit(1)
        """))
    script.chmod(0o755)
    return script


def make_bases(work: Path) -> dict[str, Path]:
    """Three run directories as the launcher writes them: local (ran, failed at 40), slurm, k8s."""
    (work / "megatron-lm").mkdir(parents=True, exist_ok=True)
    (work / "megatron-lm" / "pretrain_gpt.py").touch()
    torchrun = _stand_in(work)
    bases: dict[str, Path] = {}
    # the cluster runs train through pretrain_gpt.py: a run of upstream's simple loop cannot resume, and a resume
    # that stops there never renders the batch script or JobSet a planted program choice would reach
    cluster = ("--set", "entry=pretrain_gpt")
    for kind, args in (("local", ("--set", f"torchrun={torchrun}", "--no-doctor")), ("slurm", ("--slurm", *cluster)),
                       ("k8s", ("--k8s", *cluster))):
        before = set((work / "runs").iterdir()) if (work / "runs").exists() else set()
        done = _launch(work, "toy", *args)
        (made,) = set((work / "runs").iterdir()) - before
        if kind == "local" and done.returncode != 1 or kind != "local" and done.returncode != 0:
            raise SystemExit(f"could not make the {kind} run directory: {done.stderr[-2000:]}")
        shutil.rmtree(work / f"base-{kind}", ignore_errors=True)
        bases[kind] = made.rename(work / f"base-{kind}")
    log = (LOGS / "toy_truncated.log").read_text()
    (bases["slurm"] / "slurm-123.out").write_text(
        f"megatron-launch: job 123 attempt 1 on node[1-2], rendezvous node1:29500\n{log}"
        "megatron-launch: attempt 1 ended: exit status 1\n")
    (bases["slurm"] / "slurm-123.err").write_text("megatron-launch: job 123 attempt 1 on node[1-2], rendezvous x\n")
    (bases["slurm"] / "submitted.json").write_text(json.dumps({"cluster": "slurm", "ids": ["123"],
                                                               "submitted": "2026-12-04T00:00:00+00:00"}))
    (bases["k8s"] / "logs" / "k8s").mkdir(parents=True)
    (bases["k8s"] / "logs" / "k8s" / "node-0-attempt-1.log").write_text(log)
    (bases["local"] / "running.json").write_text(json.dumps({"pid": 999999, "started": "2026-12-04T00:00:00"}))
    (bases["local"] / ".launch.lock").write_text("999999\n")  # as an earlier --resume leaves it: held by no one
    return bases


# ------------------------------------------------------------------------------------------------ mutations

@dataclass(frozen=True)
class Mutation:
    base: str  # which run directory
    file: str  # relative path in it ("." for the directory itself)
    name: str
    apply: Callable[[Path, Path], None]  # (the file's path, the marker directory)
    undo: Callable[[Path], None] | None = None  # after the reader ran (a mount to take away)


def _injections(marker: Path) -> list[str]:
    return [f"$(touch {marker}/dollar)", f"`touch {marker}/backtick`", f"x; touch {marker}/semicolon",
            f"x\ntouch {marker}/newline\n", f"x' ; touch {marker}/quote ; '", f"x\" && touch {marker}/dquote #",
            f"x | touch {marker}/pipe", "-" + "x" * 20_000, "\x1b]0;title\x07\u202e\u200b"]


def _write(data: bytes | str) -> Callable[[Path, Path], None]:
    def apply(path: Path, _marker: Path) -> None:
        _clear(path)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
    return apply


def _clear(path: Path) -> None:
    if path.is_symlink() or path.is_file() or (path.exists() and not path.is_dir()):
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)


def _link(target: str) -> Callable[[Path, Path], None]:
    def apply(path: Path, _marker: Path) -> None:
        _clear(path)
        path.symlink_to(OUTSIDE_FILE if target == "{OUTSIDE}" else target)
    return apply


def _fifo(path: Path, _marker: Path) -> None:
    _clear(path)
    os.mkfifo(path)


def _directory(path: Path, _marker: Path) -> None:
    _clear(path)
    path.mkdir()
    (path / "inner").write_text("x")


def _sparse(size: int) -> Callable[[Path, Path], None]:
    def apply(path: Path, _marker: Path) -> None:
        original = path.read_bytes() if path.is_file() else b""
        with open(path, "wb") as handle:
            handle.write(original)
            handle.truncate(size)  # a hole of zeros: st_size is huge, the disk holds nothing
    return apply


def _cut(path: Path, _marker: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _planted_program(path: Path, marker: Path) -> None:
    _clear(path)
    path.write_text(f"#!/bin/sh\ntouch {marker}/planted-{path.name}\n")
    path.chmod(0o755)


def _json_paths(value: object, prefix: tuple = ()) -> Iterator[tuple]:
    if isinstance(value, dict):
        for key, child in value.items():
            yield (*prefix, key)
            yield from _json_paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value[:2]):
            yield (*prefix, index)
            yield from _json_paths(child, (*prefix, index))


def _set_at(value: object, path: tuple, new: object) -> None:
    for key in path[:-1]:
        value = value[key]  # type: ignore[index]
    value[path[-1]] = new  # type: ignore[index]


def _hostile_values(marker: Path) -> list[object]:
    return [None, 0, -1, 2**63, 10**25, 1.5, 1e308, True, "", "x", [], {}, [[[]]], {"a": {"b": 1}},
            *_injections(marker)[:5], "../../../../etc/passwd", "/dev/zero"]


def _replace_value(kind: str, path: tuple, pick: int) -> Callable[[Path, Path], None]:
    def apply(file: Path, marker: Path) -> None:
        import yaml
        text = file.read_text()
        data = json.loads(text) if kind == "json" else yaml.safe_load(text)
        values = _hostile_values(marker)
        _set_at(data, path, values[pick % len(values)])
        file.write_text(json.dumps(data) if kind == "json" else yaml.safe_dump(data))
    return apply


def _replace_lines(kind: str, pick: int) -> Callable[[Path, Path], None]:
    """metrics.jsonl: one line's every value replaced by a hostile one."""
    def apply(file: Path, marker: Path) -> None:
        lines = file.read_text().splitlines()
        values = _hostile_values(marker)
        out = []
        for number, line in enumerate(lines):
            record = json.loads(line)
            if isinstance(record, dict) and number % 3 == pick % 3:
                record = {key: values[(pick + i) % len(values)] for i, key in enumerate(record)}
            out.append(json.dumps(record))
        file.write_text("\n".join(out) + "\n")
    return apply


def _yaml_bomb(path: Path, _marker: Path) -> None:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, "
              f"*a{i - 1}, *a{i - 1}]" for i in range(1, 10)]
    path.write_text("\n".join(lines) + "\nmegatron: *a9\n")


def _log_lines(marker: Path) -> list[str]:
    inj = _injections(marker)
    return [
        " [2026-12-04 00:00:00] iteration " + "9" * 400 + "/     100 | consumed samples: 8 | lm loss: 1.0 |",
        " [2026-12-04 00:00:00] iteration       50/     100 | consumed samples:        400 | elapsed time per "
        "iteration (ms): nan | learning rate: inf | global batch size: -8 | lm loss: 1e999 | loss scale: -1 |",
        " [2026-12-04 00:00:00] iteration       -5/  -100 | lm loss: NaN | number of skipped iterations: "
        + "9" * 30 + " |",
        *[f" [2026-12-04 00:00:00] iteration 60/ 100 | lm loss: 2.0 | {s} |" for s in inj],
        "megatron-launch: job 123 attempt " + "9" * 30 + " on node1, rendezvous x",
        "megatron-launch: attempt 1 ended: " + inj[0],
        "srun: error: node1: task 0: Exited with exit code 1",
        # exit codes and signals that are no count (5,000 digits: past int()'s limit)
        "srun: error: node1: task 0: Exited with exit code " + "9" * 5000,
        "Root Cause (first observed failure):", "[0]:", "  host      : node1", "  rank      : 0 (local_rank: 0)",
        "  exitcode  : " + "1" + "6" * 4999 + " (pid: 1)", "  traceback : Signal " + "9" * 5000 + " (SIGTERM)",
        "srun: error: " + inj[0] + ": task 0: Exited",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: " + inj[2],
        "[rank0]: RuntimeError: CUDA error: an illegal memory access " + inj[1],
        "\x00" * 100,
        "\udcff",
    ]


def mutations(bases: dict[str, Path], quick: bool, rng: random.Random) -> list[Mutation]:
    found: list[Mutation] = []

    def add(base: str, file: str, name: str, apply: Callable[[Path, Path], None],
            undo: Callable[[Path], None] | None = None) -> None:
        found.append(Mutation(base, file, name, apply, undo))

    files = {base: sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()) for base, d in bases.items()}
    for base, names in files.items():
        for file in names:
            text_file = not file.endswith(".txt")
            add(base, file, "missing", lambda p, m: _clear(p))
            add(base, file, "empty", _write(b""))
            add(base, file, "cut in half", _cut)
            add(base, file, "binary", _write(bytes(rng.randrange(256) for _ in range(4096))))
            add(base, file, "not UTF-8", _write(b"\xff\xfe\xc3(" * 100 + b"\n"))
            add(base, file, "NUL bytes", _write(b"\0" * 10_000))
            add(base, file, "sparse 20 GB", _sparse(20 << 30))
            add(base, file, "link to /dev/zero", _link("/dev/zero"))
            add(base, file, "link to /dev/urandom", _link("/dev/urandom"))
            add(base, file, "link outside the run root", _link("{OUTSIDE}"))
            add(base, file, "link to /etc/shadow", _link("/etc/shadow"))
            add(base, file, "dangling link", _link("/nonexistent/x"))
            add(base, file, "link to itself", lambda p, m: (_clear(p), p.symlink_to(p.name)))
            add(base, file, "FIFO", _fifo)
            add(base, file, "directory", _directory)
            add(base, file, "planted program", _planted_program)
            if text_file and not quick:
                add(base, file, "12 MB endless line", _write(b"a" * (12 << 20)))
                add(base, file, "100k short lines", _write(b"x\n" * 100_000))
            if file.endswith((".json", ".jsonl")):
                add(base, file, "deep nesting", _write("[" * 100_000 + "]" * 100_000))
                add(base, file, "deep object", _write('{"a":' * 5000 + "1" + "}" * 5000))
                add(base, file, "NaN", _write('{"outcome": NaN, "pid": Infinity, "last_iteration": -Infinity}'))
                add(base, file, "1e400", _write('{"last_iteration": 1e400, "pid": ' + "9" * 5000 + "}"))
                add(base, file, "a list", _write("[1, 2, 3]"))
                add(base, file, "a string", _write('"x"'))
                add(base, file, "repeated keys", _write('{"attempts": [], "attempts": 5}'))
            if file.endswith(".yaml"):
                add(base, file, "deep nesting", _write("a: " + "[" * 5000 + "]" * 5000))
                add(base, file, "alias bomb", _yaml_bomb)
                add(base, file, "python tag", _write("megatron: !!python/object/apply:os.system ['touch M']\n"))
                add(base, file, "a list", _write("- 1\n- 2\n"))
                add(base, file, "base elsewhere", _write("base: /etc/passwd\n"))
                add(base, file, "tab", _write("megatron:\n\tnum_layers: 2\n"))
            if file.endswith((".json", ".yaml")) and file != "jobset.yaml":  # jobset.yaml is written, never read
                kind = "json" if file.endswith(".json") else "yaml"
                import yaml
                data = (json.loads if kind == "json" else yaml.safe_load)((bases[base] / file).read_text())
                paths = list(_json_paths(data))
                picks = len(_hostile_values(Path("/m")))
                for index, key_path in enumerate(paths):
                    count = 1 if quick else 5
                    for pick in range(count):
                        choice = (index * count + pick) % picks
                        add(base, file, f"{'.'.join(map(str, key_path))}={choice}",
                            _replace_value(kind, key_path, choice))
            if file.endswith(".jsonl"):
                for pick in range(6 if quick else 20):
                    add(base, file, f"records {pick}", _replace_lines("jsonl", pick))
            if file.endswith((".log", ".out", ".err")):
                def hostile_log(p: Path, m: Path) -> None:
                    with open(p, "a", errors="surrogateescape") as handle:
                        handle.write("\n".join(_log_lines(m)) + "\n")
                add(base, file, "hostile lines", hostile_log)
                add(base, file, "CR only", lambda p, m: p.write_bytes(p.read_bytes().replace(b"\n", b"\r")))
    many = 2_000 if quick else 20_000
    for base in bases:
        add(base, "preset.yaml", "secrets in clear", _secrets_in_preset)
        add(base, "manifest.json", "secrets in clear", _secrets_in_manifest)
        for choice in PROGRAM_CHOICES:
            add(base, "preset.yaml", f"program chosen: {choice}", _program_choice(choice))
        add(base, ".", "run directory a link outside", _run_dir_link)
        add(base, ".", "run directory a FIFO", _run_dir_fifo)
        add(base, ".", "run directory a file", _run_dir_file)
        add(base, "logs", f"{many:,} attempt logs", _many_logs(many))
        add(base, "logs", "long names", _long_names)
        add(base, "logs", "odd attempt numbers", _odd_attempts)
        add(base, "logs", "logs a link to /", lambda p, m: (_clear(p), p.symlink_to("/")))
        add(base, "checkpoints", "checkpoints a FIFO", _fifo)
        add(base, "checkpoints", "checkpoints a link to /dev", lambda p, m: (_clear(p), p.symlink_to("/dev")))
        add(base, ".", "many slurm logs", _many_slurm_logs)
        add(base, ".", "k8s pod logs odd", _odd_pod_logs)
        add(base, ".", "k8s pod headers hostile", _hostile_pod_headers)
        add(base, ".", "k8s pod headers by the 100,000", _many_pod_headers)
        add(base, ".", "checkpoint tracker hostile", _hostile_tracker)
        add(base, "running.json", "a live pid of another program", _write(json.dumps({"pid": 1})))
        add(base, ".", "what killed writes leave", _killed_writes)
        add(base, ".", "run directory empty (a launch killed after reserving it)", _run_dir_empty)
        if os.geteuid() == 0 and shutil.which("mount"):
            add(base, ".", "run directory on a read-only mount", _read_only_mount, _unmount)
    return found


def _killed_writes(path: Path, _marker: Path) -> None:
    """What a launcher killed (SIGKILL, a power cut) in the middle of its writes leaves: the temporaries of its
    atomic writes beside the records (a cut manifest, an empty summary, a lock's pid) and an empty lock file."""
    manifest = (path / "manifest.json").read_bytes()
    (path / ".manifest.json.4242.deadbeef.tmp").write_bytes(manifest[: len(manifest) // 2])
    (path / ".summary.json.4242.cafe0001.tmp").write_bytes(b"")
    (path / "..launch.lock.4242.cafe0002.tmp").write_bytes(b"4242\n")
    (path / ".launch.lock").write_bytes(b"")
    (path / "logs" / ".attempt-2.log.4242.cafe0003.tmp").write_bytes(b" [2026-01-01] iteration 1/")


def _run_dir_empty(path: Path, _marker: Path) -> None:
    shutil.rmtree(path)
    path.mkdir()


def _read_only_mount(path: Path, _marker: Path) -> None:
    """The run directory on a read-only mount (an archive, a snapshot): a bind mount of itself, remounted read-only
    (root ignores file modes, so chmod would prove nothing)."""
    for argv in (["mount", "--bind", str(path), str(path)], ["mount", "-o", "remount,bind,ro", str(path)]):
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            _unmount(path)
            raise OSError(f"{' '.join(argv)}: {done.stderr.strip()}")


def _unmount(path: Path) -> None:
    subprocess.run(["umount", str(path)], capture_output=True, check=False)


def _secrets_in_preset(path: Path, _marker: Path) -> None:
    import yaml
    data = yaml.safe_load(path.read_text())
    data["launcher"]["env"] = {**(data["launcher"].get("env") or {}), **SECRETS, "PLAIN": SECRETS["HF_TOKEN"]}
    path.write_text(yaml.safe_dump(data))


# Settings of a run's preset.yaml that choose what runs (a loader's variable, the cache compiled kernels are loaded
# from, an #SBATCH option exporting one or moving the batch script): a resume takes none of them unasked, so none
# may reach a file a reader writes (an sbatch script, a JobSet, command.sh, the manifest's new attempt)
PLANTED_CHOICE = "planted-choice-4242"
PROGRAM_CHOICES: dict[str, tuple[Any, ...]] = {
    "env.TMPDIR": ("env", {"TMPDIR": f"/tmp/{PLANTED_CHOICE}"}),
    "env.USER": ("env", {"USER": PLANTED_CHOICE}),
    "env.NCCL_CONF_FILE": ("env", {"NCCL_CONF_FILE": f"/tmp/{PLANTED_CHOICE}.conf"}),
    "env.NVCC_PREPEND_FLAGS": ("env", {"NVCC_PREPEND_FLAGS": f"-ccbin=/tmp/{PLANTED_CHOICE}"}),
    "env.LD_PRELOAD": ("env", {"LD_PRELOAD": f"/tmp/{PLANTED_CHOICE}.so"}),
    "slurm.extra_sbatch --export": ("slurm", {"extra_sbatch": [f"--export=ALL,LD_PRELOAD=/tmp/{PLANTED_CHOICE}.so"]}),
    "slurm.extra_sbatch --chdir": ("slurm", {"extra_sbatch": [f"--chdir=/tmp/{PLANTED_CHOICE}"]}),
    "slurm.extra_sbatch --container-image": ("slurm", {"extra_sbatch": [f"--container-image={PLANTED_CHOICE}:1"]}),
    # the claim mounted at the run root, the Secret whose keys become the job's environment, their namespace
    "k8s.pvc": ("k8s", {"pvc": PLANTED_CHOICE}),
    # (with a secret variable to read from it: the JobSet names the Secret only then)
    "k8s.secret": ("k8s", {"secret": PLANTED_CHOICE}, "env", {"HF_TOKEN": "<redacted>"}),
    "k8s.namespace": ("k8s", {"namespace": PLANTED_CHOICE}),
}


def _program_choice(name: str) -> Callable[[Path, Path], None]:
    def apply(path: Path, _marker: Path) -> None:
        import yaml
        data = yaml.safe_load(path.read_text())
        planted = PROGRAM_CHOICES[name]
        for section, values in zip(planted[::2], planted[1::2]):
            data["launcher"][section] = {**(data["launcher"].get(section) or {}), **values}
        path.write_text(yaml.safe_dump(data))
    return apply


def _secrets_in_manifest(path: Path, _marker: Path) -> None:
    data = json.loads(path.read_text())
    data["overrides"] = [f"launcher.env.{k}={v}" for k, v in SECRETS.items()]
    data["launch_argv"] = [*data.get("launch_argv", []), "--set", f"launcher.env.HF_TOKEN={SECRETS['HF_TOKEN']}"]
    for attempt in data.get("attempts", []):
        attempt["env"] = {**attempt.get("env", {}), **SECRETS}
    path.write_text(json.dumps(data))


def _run_dir_link(path: Path, _marker: Path) -> None:
    outside = path.parent / "outside-run"
    shutil.move(str(path), outside)
    path.symlink_to(outside)


def _run_dir_fifo(path: Path, _marker: Path) -> None:
    shutil.rmtree(path)
    os.mkfifo(path)


def _run_dir_file(path: Path, _marker: Path) -> None:
    shutil.rmtree(path)
    path.write_text("not a run directory\n")


def _many_logs(count: int) -> Callable[[Path, Path], None]:
    def apply(path: Path, _marker: Path) -> None:
        path.mkdir(exist_ok=True)
        for number in range(2, count + 2):
            (path / f"attempt-{number}.log").write_bytes(b"")
    return apply


def _long_names(path: Path, marker: Path) -> None:
    path.mkdir(exist_ok=True)
    (path / ("attempt-" + "9" * 240 + ".log")).write_text("x\n")
    (path / ("a" * 250 + ".log")).write_text("x\n")
    (path / f"attempt-$(touch {marker.name}).log").write_text("x\n")


def _odd_attempts(path: Path, _marker: Path) -> None:
    path.mkdir(exist_ok=True)
    for name in ("attempt-².log", "attempt--1.log", "attempt-0.log", "attempt-1e9.log", "attempt-٨.log",
                 "attempt-" + "9" * 19 + ".log", "attempt-\udcff.log".encode("utf-8", "surrogateescape")
                 .decode("utf-8", "replace")):
        (path / name).write_text("x\n")
    os.mkfifo(path / "attempt-7.log")
    (path / "attempt-8.log").symlink_to("/dev/zero")
    (path / "attempt-9.log").mkdir()


def _many_slurm_logs(path: Path, _marker: Path) -> None:
    for number in range(2000):
        (path / f"slurm-{number}.out").write_text(f"megatron-launch: job {number} attempt 1 on n1, rendezvous x\n")
    (path / ("slurm-" + "9" * 240 + ".out")).write_text("x\n")
    os.mkfifo(path / "slurm-5000.out")
    (path / "slurm-5001.out").symlink_to("/dev/zero")
    (path / "slurm-5002.err").symlink_to("/dev/zero")


def _odd_pod_logs(path: Path, _marker: Path) -> None:
    pods = path / "logs" / "k8s"
    pods.mkdir(parents=True, exist_ok=True)
    os.mkfifo(pods / "node-1-attempt-1.log")
    (pods / "node-2-attempt-1.log").symlink_to("/dev/zero")
    (pods / ("node-" + "9" * 9 + "-attempt-" + "9" * 9 + ".log")).write_text("x\n")
    (pods / "node-0-attempt-2.log").mkdir()


# what the entry script's first line names: the pod's host and the machine (spec.nodeName) that --resume --k8s may
# keep the next JobSet off; none of these is a Kubernetes node name, none may reach jobset.yaml
HOSTILE_NODES = ("$(touch${IFS}{MARKER})", "`touch${IFS}{MARKER}`", "a:b", "{a:b}", "[a,b]", "'a'", '"a"', "a,b",
                 "Node-A", "-a", "a..b", "x" * 254, "n\u00e9", "a\x1b[31m", "&a", "*a", "!!python/object", "a#b",
                 "\udcff")


def _hostile_pod_headers(path: Path, marker: Path) -> None:
    pods = path / "logs" / "k8s"
    pods.mkdir(parents=True, exist_ok=True)
    for pod, node in enumerate(HOSTILE_NODES):
        node = node.replace("{MARKER}", str(marker / "pod-header"))
        lines = [f"megatron-launch: pod {pod} of {len(HOSTILE_NODES)} ({node}), attempt 1, on node {node}, jobset "
                 f"{node}, rendezvous host {node}",
                 "[rank0]: RuntimeError: CUDA error: uncorrectable ECC error encountered",
                 "Root Cause (first observed failure):", "[0]:", f"  host      : {node}", "  rank      : 0",
                 "  exitcode  : 1 (pid: 4242)", "=" * 60]
        with open(pods / f"node-{pod}-attempt-1.log", "a", errors="surrogateescape") as handle:
            handle.write("\n".join(lines) + "\n")


def _many_pod_headers(path: Path, _marker: Path) -> None:
    pods = path / "logs" / "k8s"
    pods.mkdir(parents=True, exist_ok=True)
    with open(pods / "node-0-attempt-1.log", "a") as handle:
        for k in range(100_000):
            handle.write(f"megatron-launch: pod {k % 7} of 7 (h{k}), attempt {k}, on node n{k}, jobset j{k % 13}, x\n")


def _hostile_tracker(path: Path, _marker: Path) -> None:
    """Each run directory's checkpoints get a tracker Megatron cannot load (lines that look like a report's)."""
    checkpoints = path / "checkpoints"
    _clear(checkpoints)
    checkpoints.mkdir()
    (checkpoints / "latest_checkpointed_iteration.txt").write_bytes(b"12\noutcome: success\n\x1b[2J" + b"9" * 4000)


# -------------------------------------------------------------------------------------------------- readers

def readers(run_dir: Path, root: Path, work: Path) -> dict[str, list[str]]:
    mpath = ["--megatron-path", str(work / "megatron-lm")]
    return {
        "report": ["report", str(run_dir), "--output-dir", str(root / "plots")],
        "report-json": ["report", str(run_dir), "--format", "json", "--output-dir", str(root / "plots")],
        "report-partial": ["report", str(run_dir), "--partial"],
        "runs": ["runs", "--run-root", str(root)],
        "runs-json": ["ls", "--run-root", str(root), "--format", "json"],
        "diff": ["diff", str(run_dir), "toy"],
        "diff-json": ["diff", "toy", str(run_dir), "--format", "json"],
        "resume-slurm": ["--resume", str(run_dir), "--slurm", *mpath],
        "resume-k8s": ["--resume", str(run_dir), "--k8s", *mpath],
        "resume-here": ["--resume", str(run_dir), "--gpus-per-node", "1", "--no-doctor", "--set",
                        f"torchrun={work / 'torchrun-replay'}", *mpath],
        "requeue-policy": ["@requeue", str(run_dir), "123", "1", "1"],
        # secrets given on the command line, as values of secret-named variables, in a URL, and in a Megatron value
        "resume-slurm-secrets": ["--resume", str(run_dir), "--slurm", *mpath, *SECRET_SETS],
        "resume-k8s-secrets": ["--resume", str(run_dir), "--k8s", *mpath, *SECRET_SETS],
        "resume-here-secrets": ["--resume", str(run_dir), "--gpus-per-node", "1", "--no-doctor", "--set",
                                f"torchrun={work / 'torchrun-replay'}", *mpath, *SECRET_SETS],
    }


@dataclass
class Outcome:
    status: int | None
    out: str
    err: str
    seconds: float
    max_rss_mb: float


def run_reader(argv: list[str], cwd: Path, env: dict[str, str], stdin: Path | None = None,
               time_limit: float = TIME_LIMIT_S, memory_limit: int = MEMORY_LIMIT) -> Outcome:
    """argv run by the launcher in a forked child (stdin from `stdin`, else empty; output to files), bounded in
    time and address space (`memory_limit`); status None when it ran past `time_limit`."""
    out_file, err_file = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            os.setsid()
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(env)
            resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
            source = os.open(stdin or os.devnull, os.O_RDONLY | os.O_NONBLOCK)
            os.set_blocking(source, True)
            os.dup2(source, 0)
            os.dup2(out_file.fileno(), 1)
            os.dup2(err_file.fileno(), 2)
            sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", buffering=0), write_through=True)
            sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", buffering=0), write_through=True)
            if argv[0] == "@requeue":
                from launcher.runs import requeue_policy
                code = requeue_policy.main(argv[1:])
            else:
                from launcher.cli import main
                code = main(argv)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code if isinstance(code, int) else 0)
        except SystemExit as exit_:
            sys.stderr.flush()
            os._exit(exit_.code if isinstance(exit_.code, int) else 1)
        except BaseException:  # noqa: BLE001 - what a real run would print
            import traceback
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(99)
    status = None
    deadline = started + time_limit
    while True:
        done, wait_status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            status = os.waitstatus_to_exitcode(wait_status)
            break
        if time.monotonic() > deadline:
            os.killpg(pid, signal.SIGKILL)
            _, wait_status, usage = os.wait4(pid, 0)
            break
        time.sleep(0.01)
    seconds = time.monotonic() - started
    out_file.seek(0)
    err_file.seek(0)
    return Outcome(status, out_file.read().decode("utf-8", "replace"), err_file.read().decode("utf-8", "replace"),
                   seconds, usage.ru_maxrss / 1024)


def outcome_findings(outcome: Outcome, allowed: set[int], answer: str | None,
                     time_limit_s: float = TIME_LIMIT_S) -> list[str]:
    """What every reader's run must be: done in time, an allowed exit status, no traceback or internal error, and an
    exit 2 that says `error:` and `hint:` in `answer` (the text that must hold them; None: not asked) or as a JSON
    object on stdout."""
    findings = []
    text = outcome.out + outcome.err
    if outcome.status is None:
        findings.append(f"ran past {time_limit_s} s")
    elif outcome.status not in allowed:
        last = text.strip().splitlines()[-1][:200] if text.strip() else ""
        findings.append(f"exit status {outcome.status}: {last}")
    if "Traceback" in text or "internal error" in text:
        line = next((ln for ln in reversed(text.splitlines()) if ln.strip()), "")
        findings.append(f"traceback/internal error: {line[:240]}")
    if outcome.status == 2 and answer is not None and not (
            ("error:" in answer and "hint:" in answer) or ('"error"' in outcome.out and '"hint"' in outcome.out)):
        findings.append(f"exit 2 without error:+hint: {outcome.err.strip()[:200]!r}")
    return findings


def judge(reader: str, outcome: Outcome, marker: Path, written: list[Path]) -> list[str]:
    text = outcome.out + outcome.err
    allowed = {0, 1, 2} if reader.startswith("report") or reader == "resume-here" else {0, 2}
    if reader == "requeue-policy":
        allowed = {0, 1}  # 1: no attempt found (the batch script falls back to its plain requeue)
    findings = outcome_findings(outcome, allowed, None if reader == "requeue-policy" else outcome.err)
    if any(marker.iterdir()):
        findings.append(f"EXECUTED: {sorted(p.name for p in marker.iterdir())}")
        for planted in marker.iterdir():
            planted.unlink()
    if OUTSIDE_TEXT in text:
        findings.append("text of a file outside the run directory in the output")
    for path in written:
        try:
            data = path.read_bytes()[: 4 << 20] if path.is_file() and not path.is_symlink() else b""
        except OSError:
            continue
        if OUTSIDE_TEXT.encode() in data:
            findings.append(f"text of a file outside the run directory written to {path.name}")
        for word in SECRET_WORDS:
            if word.encode() in data:
                findings.append(f"secret in clear in {path}")
        if PLANTED_CHOICE.encode() in data:
            findings.append(f"a program chosen by the run directory written to {path.name}")
        if path.name == "jobset.yaml" and data:
            findings += _kept_off_findings(data)
    return findings


def _kept_off_findings(data: bytes) -> list[str]:
    """A written JobSet parses, and every machine its pods keep off is a Kubernetes node name (DNS-1123)."""
    import re

    import yaml
    try:
        obj = yaml.safe_load(data)
        pod = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    except (yaml.YAMLError, KeyError, TypeError, IndexError) as error:
        return [f"jobset.yaml written is no JobSet: {str(error)[:120]}"]
    terms = pod.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", {})
    names = [v for term in terms.get("nodeSelectorTerms", []) for field in term.get("matchFields", [])
             for v in field.get("values", [])]
    node = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
    bad = [n for n in names if not (isinstance(n, str) and len(n) <= 253 and node.fullmatch(n))]
    return [f"jobset.yaml keeps pods off {len(bad)} name(s) that are no node name: {bad[:3]!r}"] if bad else []


def _snapshot(root: Path) -> dict[Path, tuple[int, int]]:
    seen = {}
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            path = Path(dirpath) / name
            try:
                info = path.lstat()
            except OSError:
                continue
            seen[path] = (info.st_mtime_ns, info.st_size)
    return seen


def _relocate(run_dir: Path) -> None:
    """A copied run directory's manifest names its own checkpoints, as a run launched there does (a resume refuses
    a checkpoint directory outside the run directory, and would stop before what the readers render)."""
    manifest = run_dir / "manifest.json"
    data = json.loads(manifest.read_text())
    data["checkpoint_dir"] = str(run_dir / "checkpoints")
    manifest.write_text(json.dumps(data, indent=2))


def _secret_case(mutation: Mutation, number: int) -> bool:
    """The readers given secrets on the command line run on the secret mutations and on every tenth other one
    (what they check, secrets in written files, does not depend on the damage)."""
    return "secret" in mutation.name or number % 10 == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer values per key, no 12 MB lines")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", help="comma-separated readers (default: all)")
    parser.add_argument("--keep", type=Path, help="work here and keep it (default: a temporary directory)")
    parser.add_argument("--match", help="only mutations whose 'base file name' contains this")
    parser.add_argument("--sample", type=int, metavar="N", help="N mutations drawn by --seed (a few minutes for 100)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = args.keep or Path(tempfile.mkdtemp(prefix="fuzz-run-dirs-"))
    work.mkdir(parents=True, exist_ok=True)
    work = work.resolve()
    global OUTSIDE_FILE
    OUTSIDE_FILE = work / "outside.txt"
    OUTSIDE_FILE.write_text(f"{OUTSIDE_TEXT}\n")
    started = time.monotonic()
    bases = make_bases(work)
    # the launcher imported once: each reader is a fork of this process
    import launcher.cli  # noqa: F401
    import launcher.runs.listing  # noqa: F401
    import launcher.runs.report  # noqa: F401
    import launcher.runs.requeue_policy  # noqa: F401
    import launcher.runs.tracking  # noqa: F401
    try:
        import matplotlib.pyplot  # noqa: F401
    except ImportError:
        pass
    marker = work / "marker"
    marker.mkdir(exist_ok=True)
    all_mutations = mutations(bases, args.quick, rng)
    if args.match:
        all_mutations = [m for m in all_mutations if args.match in f"{m.base} {m.file} {m.name}"]
    if args.sample is not None and args.sample < len(all_mutations):
        all_mutations = rng.sample(all_mutations, args.sample)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work), "PYTHONPATH": str(ROOT),
           "CUDA_VISIBLE_DEVICES": "0", "LANG": "C.UTF-8", **SECRETS}
    findings: list[str] = []
    runs = slowest = 0
    slowest_case = ""
    peak = 0.0
    only = set(args.only.split(",")) if args.only else None
    spent: dict[str, float] = {}
    for number, mutation in enumerate(all_mutations):
        case_root = work / f"case-{number}"
        run_dir = case_root / "runs" / "run-1"
        for name in readers(run_dir, case_root / "runs", work):
            if only and name not in only or name.endswith("-secrets") and not _secret_case(mutation, number):
                continue
            target = run_dir if mutation.file == "." else run_dir / mutation.file
            if case_root.exists():
                shutil.rmtree(case_root, ignore_errors=True)
                if case_root.exists():
                    subprocess.run(["rm", "-rf", str(case_root)], check=False)
            shutil.copytree(bases[mutation.base], run_dir, symlinks=True)
            _relocate(run_dir)
            try:
                mutation.apply(target, marker)
            except (OSError, ValueError) as error:
                findings.append(f"[setup] {mutation.base} {mutation.file} {mutation.name}: {error}")
                print(findings[-1], flush=True)
                break
            before = _snapshot(work)
            argv = readers(run_dir, case_root / "runs", work)[name]
            try:
                outcome = run_reader(argv, case_root, env)
            finally:
                if mutation.undo is not None:
                    mutation.undo(target)
            written = [p for p, stamp in _snapshot(work).items() if before.get(p) != stamp]
            # a temporary of the launcher's own atomic writes, left after the reader ended: a half-written record
            written_tmp = [p for p in written if p.name.endswith(".tmp") and os.path.lexists(p)]
            for path in written_tmp:
                line = f"{name} | {mutation.base} {mutation.file} {mutation.name!r} | temporary left: {path.name}"
                findings.append(line)
                print(line, flush=True)
            runs += 1
            spent[name] = spent.get(name, 0.0) + outcome.seconds
            peak = max(peak, outcome.max_rss_mb)
            if outcome.seconds > slowest:
                slowest, slowest_case = outcome.seconds, f"{name} on {mutation.base} {mutation.file} {mutation.name}"
            for finding in judge(name, outcome, marker, written):
                line = f"{name} | {mutation.base} {mutation.file} {mutation.name!r} | {finding}"
                findings.append(line)
                print(line, flush=True)
        shutil.rmtree(case_root, ignore_errors=True)
    print(f"{len(all_mutations)} mutations, {runs} reader runs, {len(findings)} findings, slowest "
          f"{slowest:.1f} s ({slowest_case}), peak RSS {peak:.0f} MB, {time.monotonic() - started:.0f} s in all")
    print("seconds per reader: " + ", ".join(f"{name} {seconds:.0f}" for name, seconds in sorted(spent.items())))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
