"""A process the launcher starts for its checks ends with the process that started it, even when that one is
killed by SIGKILL (no handler runs): a killed check must not leave a worker growing on the machine."""

import os
import subprocess
import sys
import time

import pytest

from launcher.inside.parent_death import DieWithParent
from tests.conftest import alive

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

# A parent that starts a long-sleeping child the way the launcher starts its workers, prints its pid, then waits.
PARENT = """
import subprocess, sys, time
from launcher.inside.parent_death import DieWithParent
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], preexec_fn=DieWithParent())
print(child.pid, flush=True)
time.sleep(60)
"""


def test_a_worker_dies_when_its_parent_is_killed():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.getcwd()})
    child = int(parent.stdout.readline())
    assert alive(child)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)


def test_a_child_whose_parent_is_gone_already_ends_at_once():
    done = subprocess.run([sys.executable, "-c",
                           "from launcher.inside.parent_death import die_with_parent; die_with_parent(1); print('x')"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 1 and done.stdout == ""


def test_the_preexec_function_names_the_process_that_made_it():
    assert DieWithParent().parent == os.getpid()
