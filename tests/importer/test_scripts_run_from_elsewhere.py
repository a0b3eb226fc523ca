"""A script file run after `cd DIR` / `pushd DIR` is the one in DIR, as bash finds it, and one run behind `sudo`,
`env`, `nohup`, `time` or with `NAME=value` before it is read with the variables bash gives it. Where DIR is not
known here (`cd $WORKDIR`), a file of the same name next to the script is not read in its place: it is named as
not read. Each known case is compared with real bash, the training program replaced by a stub that prints its
words."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from launcher.errors import UserError
from launcher.importer.build import import_source

INNER = ("#!/bin/bash\nTP=${TP:-2}\n"
         "python pretrain_gpt.py --num-layers ${LAYERS:-3} --hidden-size HIDDEN --num-attention-heads 8 "
         "--tensor-model-parallel-size $TP --seq-length 512 --max-position-embeddings 512\n")
# the same name in two places: which one is read shows in --hidden-size
FILES = {"x.sh": INNER.replace("HIDDEN", "1024"), "run/x.sh": INNER.replace("HIDDEN", "2048"),
         "run/deeper/x.sh": INNER.replace("HIDDEN", "4096")}


def _imported(tmp_path: Path, lines: str):
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(stat.S_IRWXU)
    outer = "#!/bin/bash\nexport LAYERS=6\nTP=8\n" + lines + "\n"
    (tmp_path / "outer.sh").write_text(outer)
    return import_source(outer, "outer.sh", [], path=tmp_path / "outer.sh")


def _bash_words(tmp_path: Path) -> list[str]:
    stubs = tmp_path / "bin"
    stubs.mkdir(exist_ok=True)
    (stubs / "python").write_text("#!/bin/bash\nshift\nprintf '%s\\n' \"$@\"\n")
    (stubs / "python").chmod(stat.S_IRWXU)
    env = {"PATH": f"{stubs}:{os.environ['PATH']}", "HOME": str(tmp_path / "home")}
    done = subprocess.run(["bash", "outer.sh"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=10)
    return done.stdout.split()


KNOWN = [
    ("cd run && bash x.sh", 2048, 6),
    ("cd run; ./x.sh", 2048, 6),
    ("cd run/deeper\ncd ..\nbash x.sh", 2048, 6),
    ("cd run; bash deeper/x.sh", 4096, 6),
    ("cd run; bash ../x.sh", 1024, 6),
    ("D=run\ncd \"$D\" || exit 1\nbash x.sh", 2048, 6),
    ("pushd run > /dev/null\nbash x.sh", 2048, 6),
    ("pushd run > /dev/null\npopd > /dev/null\nbash x.sh", 1024, 6),
    ("cd run\npopd 2> /dev/null\nbash x.sh", 2048, 6),  # an empty stack: bash stays where it is
    ("(cd run)\nbash x.sh", 1024, 6),  # a subshell's cd is its own
    ("bash -c 'cd run'\nbash x.sh", 1024, 6),
    ("f() { cd run; }\nf\nbash x.sh", 2048, 6),  # a function's cd is the script's
    ("cd \"$(dirname \"$0\")\"/run && bash x.sh", 2048, 6),
    ("LAYERS=7 bash x.sh", 1024, 7),  # given on its line: exported to it
    ("env LAYERS=9 bash x.sh", 1024, 9),
    ("env -i PATH=\"$PATH\" bash x.sh", 1024, 3),  # env -i: nothing exported reaches it
    ("env -C run bash x.sh", 2048, 6),
    ("nohup bash x.sh 2>/dev/null", 1024, 6),
    ("time bash x.sh 2>/dev/null", 1024, 6),
]


@pytest.mark.parametrize(("lines", "hidden", "layers"), KNOWN)
def test_the_script_file_read_is_the_one_bash_runs(tmp_path, lines, hidden, layers):
    imported = _imported(tmp_path, lines)
    assert (imported.settings["hidden_size"], imported.settings["num_layers"]) == (hidden, layers)
    assert imported.settings["tensor_model_parallel_size"] == 2  # TP=8 was not exported
    if shutil.which("bash") is not None:
        assert _bash_words(tmp_path) == imported.script_args


@pytest.mark.parametrize("lines", ["cd $WORKDIR && bash x.sh", "cd \"$WORKDIR\"; ./x.sh", "cd\nbash x.sh",
                                   "pushd $WORKDIR\nbash x.sh", "cd /nowhere/known && bash x.sh",
                                   "cd $WORKDIR; source x.sh", "env -C \"$WORKDIR\" bash x.sh"])
def test_a_script_file_in_a_directory_not_known_here_is_not_read_from_the_scripts(tmp_path, lines):
    with pytest.raises(UserError) as caught:
        _imported(tmp_path, lines)
    message = caught.value.problems[0].message
    assert "no training command found" in message and ("x.sh" in message or "were not read" in message)


def test_the_directory_not_known_is_said(tmp_path):
    with pytest.raises(UserError) as caught:
        _imported(tmp_path, "cd $WORKDIR && bash x.sh")
    assert "the directory that `cd ${WORKDIR}` moves to, which is not known here" in caught.value.problems[0].message


@pytest.mark.parametrize(("lines", "layers", "said"), [
    ("sudo bash x.sh", 3, True),  # sudo's env_reset: LAYERS is not passed
    ("sudo -u train bash x.sh", 3, True),
    ("sudo LAYERS=5 bash x.sh", 5, True),
    ("sudo -E bash x.sh", 6, False),
    ("sudo --preserve-env bash x.sh", 6, False),
    ("cd run && sudo -E ./x.sh", 6, False),
])
def test_a_script_file_run_by_sudo_is_read_with_what_sudo_passes(tmp_path, lines, layers, said):
    imported = _imported(tmp_path, lines)
    assert imported.settings["num_layers"] == layers
    assert imported.settings["hidden_size"] == (2048 if "cd run" in lines else 1024)
    assert any("sudo without -E passes none of them: LAYERS" in note for note in imported.not_carried) == said


@pytest.mark.parametrize(("lines", "hidden"), [
    ("cd $SLURM_SUBMIT_DIR && bash x.sh", 1024), ("cd \"${SLURM_SUBMIT_DIR}\"/run; ./x.sh", 2048),
    ("cd $PBS_O_WORKDIR\nbash x.sh", 1024), ("cd ${LS_SUBCWD}/run/deeper && bash x.sh", 4096),
    ("cd $PJM_O_WORKDIR; bash run/x.sh", 2048), ("cd $SGE_O_WORKDIR; bash x.sh", 1024),
])
def test_the_directory_a_job_was_submitted_from_is_the_scripts_own(tmp_path, lines, hidden):
    # the job manager sets it to where sbatch/qsub/bsub/pjsub ran: the import reads the script as run from there
    assert _imported(tmp_path, lines).settings["hidden_size"] == hidden
