"""The directory put first on the training's PATH is this launcher's own: fresh, mode 0700, owned by this user;
a directory planted under the old predictable name in $TMPDIR is never used."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from launcher.backends import local

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the shim is used only with torch")


def test_a_planted_torchrun_in_the_old_predictable_directory_is_not_on_the_training_path(tmp_path):
    digest = hashlib.sha1(sys.executable.encode()).hexdigest()[:12]
    planted = Path(tempfile.gettempdir()) / f"megatron-launch-{os.getuid()}-python-{digest}"
    planted.mkdir(exist_ok=True)
    (planted / "torchrun").write_text("#!/bin/sh\necho evil\n")
    (planted / "torchrun").chmod(0o755)
    try:
        path = local.training_path(str(tmp_path))
        assert str(planted) not in path.split(os.pathsep)
        assert shutil.which("torchrun", path=path) != str(planted / "torchrun")
    finally:
        shutil.rmtree(planted, ignore_errors=True)


def test_the_helper_directory_is_private_to_this_user():
    first = Path(local.training_path("/usr/bin").split(os.pathsep)[0])
    info = first.lstat()
    assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700
    assert info.st_uid == os.getuid()
    assert sorted(p.name for p in first.iterdir()) in (["python3"], ["python3", "python3-config"])
