"""Install hints of `launch doctor` and `--check` name the launcher's own Python and the README's extra
(`pip install -e '.[megatron]'`), never a bare `pip` that may belong to another interpreter (pyenv's)."""

from __future__ import annotations

import shlex
import sys

import pytest

from launcher import CHECKOUT
from launcher.checks import doctor, megatron_verdict
from launcher.errors import UserError

EXTRA = f"{shlex.quote(sys.executable)} -m pip install -e {shlex.quote(f'{CHECKOUT}[megatron]')}"


def test_install_hint_is_the_megatron_extra_into_this_python():
    assert doctor._megatron_extra() == EXTRA


@pytest.mark.parametrize("check, missing", [(doctor.check_torch, "torch"),
                                            (doctor.check_megatron_core, "megatron-core")])
def test_missing_packages_are_installed_into_the_launchers_python(monkeypatch, check, missing):
    real = doctor._version
    monkeypatch.setattr(doctor, "_version", lambda name: None if name == missing else real(name))
    (finding,) = check(doctor.Context())
    assert finding.fix == EXTRA


def test_pybind11_missing_for_the_training_python_points_at_this_venv(tmp_path):
    other = tmp_path / "bin"
    other.mkdir()
    python3 = other / "python3"  # another interpreter first on PATH, as pyenv's shims are
    python3.write_text("#!/bin/sh\n[ \"$2\" = pybind11 ] && exit 1\necho /root/.pyenv/versions/3.12.1/bin/python3\n")
    python3.chmod(0o755)
    findings = doctor.check_helper_build(doctor.Context(env={"PATH": f"{other}:/usr/bin:/bin"}))
    pybind = next(f for f in findings if "pybind11" in f.detail)
    assert pybind.detail == ("pybind11 is not importable by the training python "
                             "(/root/.pyenv/versions/3.12.1/bin/python3)")
    assert pybind.fix == EXTRA


def test_check_without_megatron_names_the_readme_install(monkeypatch):
    monkeypatch.setattr(megatron_verdict, "find_megatron_python", lambda: None)
    with pytest.raises(UserError) as caught:
        megatron_verdict.UpstreamChecker()
    assert caught.value.problems[0].hint.startswith(f"{EXTRA} (the README's `pip install -e '.[megatron]'`)")
