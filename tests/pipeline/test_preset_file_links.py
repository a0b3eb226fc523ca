"""A preset or base: file that is a link loop is a read error (exit 2), never a crash of path resolution."""

import os

import pytest

from launcher import cli
from launcher.errors import UserError
from launcher.pipeline.preset import load_preset


def test_a_preset_that_links_to_itself_is_a_user_error(tmp_path):
    (tmp_path / "loop.yaml").symlink_to("loop.yaml")
    with pytest.raises(UserError, match="cannot read preset file .*loop.yaml.*symbolic links"):
        load_preset(str(tmp_path / "loop.yaml"))


def test_a_base_in_a_link_loop_is_a_user_error(tmp_path, capsys):
    os.symlink("b.yaml", tmp_path / "a.yaml")
    os.symlink("a.yaml", tmp_path / "b.yaml")
    (tmp_path / "child.yaml").write_text("base: a.yaml\n")
    assert cli.main(["show", str(tmp_path / "child.yaml")]) == 2
    err = capsys.readouterr().err
    assert "a.yaml" in err and "hint:" in err and "internal error" not in err
