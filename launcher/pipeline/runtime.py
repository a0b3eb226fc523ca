"""Which Python and torchrun the job's processes run, decided once where the job is resolved and said by every
consumer (the dry-run, the batch script's header).

- in a container image (Slurm's container_image, every Kubernetes pod): the image's own `python3` and torchrun,
  from its PATH: the image is the environment;
- on Slurm's nodes as they are: this launcher's Python and the torchrun beside it (a venv's bin/), by absolute path,
  so a job runs in the environment the launcher checked and not in whatever the submitting shell had on PATH; where
  this Python has no torchrun beside it (the launcher installed alone), both come from the nodes' PATH;
- here: torchrun from PATH as the user set it (the local backend puts this Python's python3 first, see
  backends.local.training_path).
`launcher.torchrun` set in the preset (or --set torchrun=PATH) always names the torchrun.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TORCHRUN = "torchrun"  # LauncherSettings.torchrun's default: look it up
PATH_PYTHON = "python3"


@dataclass(frozen=True)
class Runtime:
    python: str  # runs the checks before torchrun on each node (packages, data files)
    torchrun: str
    how: str  # said in the dry-run and the script's header

    def describe(self, with_torchrun: bool = True) -> str:
        torchrun = f", torchrun {self.torchrun}" if with_torchrun else ""
        return f"python {self.python}{torchrun} ({self.how})"


def runtime_for(torchrun: str, *, slurm: bool = False, container_image: str | None = None,
                python: str | None = None) -> Runtime:
    """The job's Python and torchrun for its target (`python`: this launcher's, sys.executable by default)."""
    if container_image:
        return Runtime(PATH_PYTHON, torchrun, "the container image's, from its PATH")
    if not slurm:
        return Runtime(PATH_PYTHON, torchrun, "from PATH here, with this launcher's python3 first")
    python = python or sys.executable
    beside = Path(python).parent / DEFAULT_TORCHRUN  # not resolved: a venv's python is a link out of the venv
    if torchrun != DEFAULT_TORCHRUN:
        return Runtime(python, torchrun, "launcher.torchrun, and this launcher's Python")
    if python and beside.is_file() and os.access(beside, os.X_OK):
        return Runtime(python, str(beside), "this launcher's Python and the torchrun beside it")
    return Runtime(PATH_PYTHON, torchrun, f"from the nodes' PATH: this launcher's Python ({python}) has no torchrun "
                   "beside it")
