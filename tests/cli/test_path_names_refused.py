"""A path the system refuses (a name too long; a loop of symbolic links; a directory on the way this user may not
search) is the user's input whichever command meets it: exit 2 with error and hint. Python 3.12's
Path.exists/is_file raise it, so the first path check of preset loading, import, runs, doctor or import -o ended
in "internal error"."""

import errno

import pytest

from launcher import cli

LONG = "a" * 5000  # longer than PATH_MAX
LONG_NAME = "b" * 300  # one name longer than NAME_MAX, the whole path short


@pytest.mark.parametrize("argv", [
    ["{p}", "--dry-run"], ["show", "{p}"], ["plan", "{p}"], ["diff", "{p}", "toy"], ["import", "{p}"],
    ["runs", "--run-root", "{p}"], ["doctor", "--megatron-path", "{p}"], ["fetch-megatron", "{p}"],
    ["import", "-o", "{p}", "--", "--num-layers", "2"], ["toy", "--dry-run", "--set", "run_root={p}"],
    ["{p}", "--dry-run", "--format", "json"],
])
@pytest.mark.parametrize("path", [LONG, f"{{tmp}}/{LONG_NAME}.yaml"], ids=["5,000 characters", "a 300-byte name"])
def test_a_path_too_long_is_an_input_error(capsys, tmp_path, argv, path):
    path = path.replace("{tmp}", str(tmp_path))  # an existing directory: the long name itself is looked up
    assert cli.main([word.replace("{p}", path) for word in argv]) == 2
    out, err = capsys.readouterr()
    assert "internal error" not in out + err
    assert ("error:" in err and "hint:" in err) or ('"error"' in out and '"hint"' in out)


def test_too_long_and_loop_are_named_other_errors_are_not():
    too_long = cli.name_refused(OSError(errno.ENAMETOOLONG, "File name too long", "x" * 500))
    assert too_long is not None and "is too long a path" in too_long.problems[0].message
    assert len(too_long.problems[0].message) < 300  # the name is cut in the message
    loop = cli.name_refused(OSError(errno.ELOOP, "Too many levels of symbolic links", "a/b"))
    assert loop is not None and "'a/b' cannot be followed" in loop.problems[0].message
    assert cli.name_refused(OSError(errno.ENOENT, "No such file or directory", "x")) is None
    assert cli.name_refused(PermissionError(errno.EACCES, "Permission denied")) is None  # no path: not the input's


def test_a_path_under_a_directory_this_user_may_not_search_is_an_input_error(tmp_path, capsys, monkeypatch):
    """As root every directory is searchable: the stat of a path under a mode-000 directory is made to fail as it
    does for any other user (EACCES from Path.is_file, which Python 3.12 raises)."""
    from pathlib import Path

    locked = str(tmp_path / "locked")

    def is_file(self):
        if str(self).startswith(locked):
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return original(self)

    original = Path.is_file
    monkeypatch.setattr(Path, "is_file", is_file)
    assert cli.main(["import", f"{locked}/train.sh"]) == 2
    err = capsys.readouterr().err
    assert f"'{locked}/train.sh' cannot be reached: Permission denied" in err and "hint: check the permissions" in err
