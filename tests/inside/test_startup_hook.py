"""The start-up hook of the launcher's training processes (launcher/inside/site/sitecustomize.py): it refuses the
imports the job said it cannot use, loudly, replaces Megatron's JIT warm-up only where told to, hands over to the
sitecustomize it shadows, and never stops a process because of itself."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SITE = Path(__file__).resolve().parents[2] / "launcher" / "inside" / "site"


def run_python(code: str, tmp_path: Path, env: dict[str, str], extra_path: tuple[Path, ...] = ()):
    path = os.pathsep.join(map(str, [SITE, *extra_path]))
    full = {k: v for k, v in os.environ.items() if not k.startswith("MEGATRON_LAUNCH_")}
    full.update({"PYTHONPATH": path, **env})
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, cwd=tmp_path,
                          timeout=60)


def package(root: Path, name: str, body: str = "") -> Path:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(body)
    return root


def test_a_skipped_package_is_not_importable_as_if_it_were_not_installed(tmp_path):
    lib = package(tmp_path / "lib", "heavy", "LOADED = True\n")
    code = textwrap.dedent("""\
        import importlib.util
        try:
            import heavy
        except ModuleNotFoundError as error:
            print("refused:", error)
        try:
            import heavy.sub
        except ModuleNotFoundError:
            print("submodule refused")
        print("find_spec:", importlib.util.find_spec("heavy"))  # an availability probe answers as for a missing one
        import json  # everything else imports as before
        print("json ok")
        """)
    result = run_python(code, tmp_path, {"MEGATRON_LAUNCH_SKIP_IMPORTS": "heavy,other"}, (lib,))
    assert "refused: import of heavy halted" in result.stdout, result.stderr
    assert "submodule refused" in result.stdout and "find_spec: None" in result.stdout
    assert "json ok" in result.stdout


def test_without_its_variables_the_hook_changes_nothing(tmp_path):
    lib = package(tmp_path / "lib", "heavy", "LOADED = True\n")
    result = run_python("import heavy; print(heavy.LOADED)", tmp_path, {}, (lib,))
    assert result.stdout.split() == ["True"], result.stderr


def fake_megatron(root: Path) -> Path:
    """megatron.training.initialize with a warm-up that records that it ran."""
    training = root / "megatron" / "training"
    training.mkdir(parents=True)
    (root / "megatron" / "__init__.py").write_text("")
    (training / "__init__.py").write_text("")
    (training / "initialize.py").write_text("def _warmup_jit_function():\n    print('megatron warm-up ran')\n")
    return root


def test_the_warmup_is_replaced_only_when_told(tmp_path):
    lib = fake_megatron(tmp_path / "lib")
    code = "import megatron.training.initialize as i; print(i._warmup_jit_function.__name__)"
    told = run_python(code, tmp_path, {"MEGATRON_LAUNCH_JIT_WARMUP": "draws"}, (lib,))
    assert told.stdout.strip() == "draws", told.stderr
    untold = run_python(code, tmp_path, {}, (lib,))
    assert untold.stdout.strip() == "_warmup_jit_function", untold.stderr


def test_the_replaced_warmup_falls_back_to_megatrons_when_it_cannot_read_the_arguments(tmp_path):
    lib = fake_megatron(tmp_path / "lib")  # this initialize has no get_args: the stand-in cannot know the shapes
    code = "import megatron.training.initialize as i; i._warmup_jit_function()"
    result = run_python(code, tmp_path, {"MEGATRON_LAUNCH_JIT_WARMUP": "draws"}, (lib,))
    assert "megatron warm-up ran" in result.stdout, result.stderr


def test_the_sitecustomize_it_shadows_still_runs(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import builtins\nbuiltins.OTHER_SITE = True\n")
    result = run_python("import builtins; print(getattr(builtins, 'OTHER_SITE', False))", tmp_path,
                        {"MEGATRON_LAUNCH_SKIP_IMPORTS": "nothing"}, (other,))
    assert result.stdout.strip() == "True", result.stderr


def test_with_a_launcher_prefix_bytecode_is_written_there_even_where_python_may_not_write_it(tmp_path):
    lib = package(tmp_path / "lib", "plain", "X = 1\n")
    prefix = tmp_path / "pycache"
    env = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": str(prefix), "MEGATRON_LAUNCH_WRITE_BYTECODE": "1"}
    result = run_python("import plain, sys; print(sys.dont_write_bytecode)", tmp_path, env, (lib,))
    assert result.stdout.strip() == "False", result.stderr
    assert list(prefix.rglob("__init__*.pyc")) and not (lib / "plain" / "__pycache__").exists()
    without = run_python("import sys; print(sys.dont_write_bytecode)", tmp_path,
                         {"PYTHONDONTWRITEBYTECODE": "1"}, (lib,))
    assert without.stdout.strip() == "True"  # no prefix of the launcher's: the environment's choice stands


EXIT_PROGRAM = textwrap.dedent("""\
    import atexit, gc, os, sys
    gc.disable()  # what is garbage now stays garbage until the program ends

    class Noted:
        def __init__(self, name):
            self.name, self.me = name, self  # a cycle: only a collection finds it
        def __del__(self):
            os.write(1, f"finalized {self.name}\\n".encode())

    Noted("garbage")  # unreachable at exit
    ALIVE = Noted("alive")  # reachable from a module until the interpreter tears the modules down
    atexit.register(lambda: os.write(1, b"program atexit\\n"))
    sys.exit(3)
    """)


def test_at_exit_the_garbage_is_finalized_once_and_what_is_alive_is_left_to_the_system(tmp_path):
    result = run_python(EXIT_PROGRAM, tmp_path, {"MEGATRON_LAUNCH_EXIT": "collect-once"})
    assert result.returncode == 3, result.stderr  # the program's exit status
    lines = result.stdout.splitlines()
    assert lines[0] == "program atexit"  # the program's own handlers run first
    assert "finalized garbage" in lines  # the garbage at exit: collected, its finalizers run
    assert "finalized alive" not in lines  # left to the operating system, like any object alive at exit


def test_without_its_variable_the_interpreter_shuts_down_as_always(tmp_path):
    result = run_python(EXIT_PROGRAM, tmp_path, {"MEGATRON_LAUNCH_SKIP_IMPORTS": "nothing"})
    assert result.returncode == 3, result.stderr
    assert {"finalized garbage", "finalized alive"} <= set(result.stdout.splitlines())


def run_script(script: Path, tmp_path: Path, env: dict[str, str], extra_path: tuple[Path, ...] = ()):
    path = os.pathsep.join(map(str, [SITE, *extra_path]))
    full = {k: v for k, v in os.environ.items() if not k.startswith("MEGATRON_LAUNCH_")}
    full.update({"PYTHONPATH": path, **env})
    return subprocess.run([sys.executable, "-u", str(script)], env=full, capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)


GC_PROGRAM = textwrap.dedent("""\
    import builtins, gc
    builtins.FROZEN_AT_START = gc.get_freeze_count()  # some builds freeze a few objects of their own at start
    print("while importing:", gc.isenabled())
    import megatron.training.initialize as initialize
    initialize.initialize_megatron()
    print("warm-up:", initialize._warmup_jit_function.__name__)
    """)


def test_pretrain_gpt_collects_no_garbage_while_importing_and_resumes_when_megatron_initializes(tmp_path):
    lib = fake_megatron(tmp_path / "lib")
    (lib / "megatron" / "training" / "initialize.py").write_text(textwrap.dedent("""\
        import gc
        def _warmup_jit_function():
            pass
        def initialize_megatron():
            print("initialize:", gc.isenabled(), gc.get_freeze_count() > FROZEN_AT_START)
        """))
    script = tmp_path / "pretrain_gpt.py"
    script.write_text(GC_PROGRAM)
    env = {"MEGATRON_LAUNCH_IMPORT_GC": "paused", "MEGATRON_LAUNCH_JIT_WARMUP": "draws"}
    result = run_script(script, tmp_path, env, (lib,))
    assert result.stdout.splitlines() == ["while importing: False", "initialize: True True", "warm-up: draws"], \
        result.stderr  # both hooks on the same module apply
    other = tmp_path / "other_program.py"  # torchrun, inductor's workers, any other program: Python's own GC
    other.write_text(GC_PROGRAM)
    result = run_script(other, tmp_path, env, (lib,))
    assert result.stdout.splitlines()[:2] == ["while importing: True", "initialize: True False"], result.stderr
    untold = run_script(script, tmp_path, {}, (lib,))
    assert untold.stdout.splitlines()[:2] == ["while importing: True", "initialize: True False"], untold.stderr


def test_torchrun_collects_no_garbage_until_its_agent_module_is_imported(tmp_path):
    lib = tmp_path / "lib"
    (lib / "torch" / "distributed").mkdir(parents=True)
    (lib / "torch" / "__init__.py").write_text("")
    (lib / "torch" / "distributed" / "__init__.py").write_text("")
    (lib / "torch" / "distributed" / "run.py").write_text("import gc\nprint('agent module:', gc.isenabled())\n")
    script = tmp_path / "torchrun"  # the console script's name
    script.write_text("import gc\nprint('start:', gc.isenabled())\nimport torch.distributed.run\n"
                      "print('after:', gc.isenabled())\n")
    result = run_script(script, tmp_path, {"MEGATRON_LAUNCH_IMPORT_GC": "paused"}, (lib,))
    assert result.stdout.splitlines() == ["start: False", "agent module: False", "after: True"], result.stderr


def test_the_exit_trace_stamps_the_end_of_pretrain_and_dumps_the_stacks_while_the_process_ends(tmp_path):
    lib = fake_megatron(tmp_path / "lib")
    (lib / "megatron" / "training" / "training.py").write_text("def pretrain():\n    return 'trained'\n")
    code = ("import time\nfrom megatron.training.training import pretrain\nprint(pretrain())\n"
            "def ending_slowly():\n    time.sleep(0.5)\nending_slowly()\n")
    result = run_python(code, tmp_path, {"MEGATRON_LAUNCH_EXIT_TRACE": "0.1"}, (lib,))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("> megatron-launch exit trace: pretrain returned at "), result.stdout
    assert result.stdout.splitlines()[1] == "trained"
    assert "ending_slowly" in result.stderr  # a stack dumped while the program was still ending
    for value in ("", "0", "-1", "soon"):  # off, and the program as without the hook
        untold = run_python(code, tmp_path, {"MEGATRON_LAUNCH_EXIT_TRACE": value}, (lib,))
        assert untold.stdout == "trained\n" and untold.stderr == "", (value, untold.stderr)


QUICK_PROGRAM = textwrap.dedent("""\
    import atexit, os, sys
    from megatron.training.training import pretrain

    class Noted:
        def __del__(self):
            os.write(1, b"teardown ran\\n")

    ALIVE = Noted()  # finalized only by the interpreter's module teardown
    log = open("log.txt", "w")  # left open and unflushed, as a program may
    log.write("written before the end\\n")
    atexit.register(lambda: os.write(1, b"program atexit\\n"))
    HOW = sys.argv[1]
    if HOW == "raise-before":
        raise RuntimeError("before pretrain")
    print(pretrain())
    if HOW == "raise-after":
        raise RuntimeError("after pretrain")
    """)


def quick_run(tmp_path: Path, how: str, exit_value: str = "quick"):
    tmp_path.mkdir(exist_ok=True)
    lib = tmp_path / "lib"
    if not lib.exists():
        fake_megatron(lib)
        (lib / "megatron" / "training" / "training.py").write_text("def pretrain():\n    return 'trained'\n")
    script = tmp_path / "pretrain_gpt.py"
    script.write_text(QUICK_PROGRAM)
    path = os.pathsep.join(map(str, [SITE, lib]))
    full = {k: v for k, v in os.environ.items() if not k.startswith("MEGATRON_LAUNCH_")}
    full.update({"PYTHONPATH": path, "MEGATRON_LAUNCH_EXIT": exit_value})
    return subprocess.run([sys.executable, str(script), how], env=full, capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)


def test_the_quick_exit_ends_a_clean_run_at_once_after_its_handlers_with_every_file_flushed(tmp_path):
    result = quick_run(tmp_path, "clean")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["trained", "program atexit"]  # no module teardown after the handlers
    assert (tmp_path / "log.txt").read_text() == "written before the end\n"  # the open file's buffer was written



def test_the_collected_exit_keeps_what_a_file_left_open_holds_however_the_program_ends(tmp_path):
    for how in ("clean", "raise-before", "raise-after"):
        result = quick_run(tmp_path / how, how, "collect-once")
        assert result.returncode == (0 if how == "clean" else 1), (how, result.stderr)
        assert "teardown ran" not in result.stdout  # the alive object: left to the operating system
        assert (tmp_path / how / "log.txt").read_text() == "written before the end\n", how  # lost before the fix


def test_the_quick_exit_leaves_every_other_end_to_python(tmp_path):
    for how in ("raise-before", "raise-after"):
        result = quick_run(tmp_path / how, how)
        assert result.returncode == 1, (how, result.stderr)  # Python's status for an unhandled exception
        assert f"RuntimeError: {how.replace('raise-', '')} pretrain" in result.stderr
        assert (tmp_path / how / "log.txt").read_text() == "written before the end\n"
