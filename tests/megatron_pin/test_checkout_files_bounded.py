"""The files of a Megatron checkout the launcher reads without running it (the commit marker, package_info.py,
helpers.cpp) and fetch-megatron's --source tarball: read as every input is, a regular file within a bound; one
that is not is "not known" or a refusal (exit 2), never a hang, a MemoryError or a UnicodeDecodeError."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from launcher import MEGATRON_COMMIT, cli
from launcher.checks import doctor
from launcher.errors import UserError
from launcher.megatron import dataset_helpers, fetch
from launcher.megatron.pin import COMMIT_MARKER
from launcher.runs.rundir import megatron_checkout_version

DAMAGES = ["fifo", "dev zero", "sparse", "not utf-8", "link loop", "directory"]


def damage(path: Path, how: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if how == "fifo":
        os.mkfifo(path)
    elif how == "dev zero":
        path.symlink_to("/dev/zero")
    elif how == "sparse":
        with open(path, "wb") as handle:
            handle.truncate(10 << 30)
    elif how == "not utf-8":
        path.write_bytes(b"\xff\xfe" + MEGATRON_COMMIT.encode() + b"\n")
    elif how == "link loop":
        path.symlink_to(path.name)
    else:
        path.mkdir()


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_commit_marker_is_no_checkout_of_the_pin(tmp_path, how, capsys):
    checkout = tmp_path / "mlm"
    checkout.mkdir()
    (checkout / "pretrain_gpt.py").write_text("")
    damage(checkout / COMMIT_MARKER, how)
    [finding] = doctor.check_megatron_checkout(doctor.Context(megatron_path=checkout))
    assert finding.status == "warn" and "commit is unknown" in finding.detail
    assert cli.main(["fetch-megatron", str(checkout)]) == 2
    assert "is not a Megatron-LM checkout of" in capsys.readouterr().err


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_package_info_is_no_version(tmp_path, how):
    damage(tmp_path / "megatron" / "core" / "package_info.py", how)
    assert megatron_checkout_version(tmp_path) is None


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_helpers_source_has_no_cache_key(tmp_path, how):
    datasets = dataset_helpers.datasets_dir(tmp_path)
    damage(datasets / dataset_helpers.SOURCE, how)
    if how == "not utf-8":  # bytes are hashed, whatever they are
        assert dataset_helpers.source_key(datasets, ".so") is not None
    else:
        assert dataset_helpers.source_key(datasets, ".so") is None


def _tarball(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("how", ["fifo", "dev zero", "sparse", "directory", "link loop"])
def test_a_source_that_is_no_regular_file_is_refused_at_once(tmp_path, how):
    source = tmp_path / "src.tar.gz"
    damage(source, how)
    with pytest.raises(UserError):
        fetch.fetch(tmp_path / "out" / "mlm", str(source), log=lambda _: None)
    assert not (tmp_path / "out" / "mlm").exists() and os.listdir(tmp_path / "out") == []


def test_a_tarball_of_too_many_files_is_refused_before_it_is_unpacked(tmp_path, monkeypatch):
    monkeypatch.setattr(fetch, "MAX_TARBALL_MEMBERS", 10)
    source = _tarball(tmp_path / "src.tar.gz", {f"Megatron-LM-x/{n}.py": b"" for n in range(11)})
    with pytest.raises(UserError, match="unpacks to more than 10 files"):
        fetch.fetch(tmp_path / "out" / "mlm", str(source), log=lambda _: None)
    assert os.listdir(tmp_path / "out") == []


def test_a_tarball_that_inflates_past_the_bound_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(fetch, "MAX_UNPACKED_BYTES", 1 << 20)
    source = _tarball(tmp_path / "src.tar.gz", {"Megatron-LM-x/zeros": b"\0" * (2 << 20)})
    with pytest.raises(UserError, match="unpacks to more than"):
        fetch.fetch(tmp_path / "out" / "mlm", str(source), log=lambda _: None)


@pytest.mark.parametrize("members", [{}, {"Megatron-LM-x": b"a file where the folder goes"}, {"x": b""}],
                         ids=["empty", "one file as the folder", "no sources"])
def test_a_tarball_without_a_tree_is_refused(tmp_path, members):
    source = _tarball(tmp_path / "src.tar.gz", members)
    with pytest.raises(UserError):
        fetch.fetch(tmp_path / "out" / "mlm", str(source), log=lambda _: None)


def _gzip_of_zeros(mebibytes: int) -> bytes:
    """`mebibytes` MiB of zeros as gzip members of 1 MiB each: a few KB that inflate to all of it."""
    import gzip

    return gzip.compress(b"\0" * (1 << 20), 9) * mebibytes


@pytest.mark.parametrize("kind", [tarfile.GNUTYPE_LONGNAME, tarfile.XHDTYPE], ids=["long name", "pax header"])
def test_a_header_of_gigabytes_is_refused_not_read_into_memory(tmp_path, monkeypatch, kind):
    """tarfile reads a long-name or pax header whole, as its size says: 512 MiB of it (a few KB compressed) is
    refused at the first read past the bound."""
    import gzip

    header = tarfile.TarInfo("././@LongLink" if kind == tarfile.GNUTYPE_LONGNAME else "pax")
    header.type, header.size = kind, 512 << 20
    source = tmp_path / "src.tar.gz"
    source.write_bytes(gzip.compress(header.tobuf(tarfile.GNU_FORMAT)) + _gzip_of_zeros(512))
    largest: list[int] = []
    real = fetch._Unpacked.read
    monkeypatch.setattr(fetch._Unpacked, "read", lambda self, size=-1: largest.append(size) or real(self, size))
    with pytest.raises(UserError) as refused:
        fetch.fetch(tmp_path / "out" / "mlm", str(source), log=lambda _: None)
    assert "has a record of more than 64 MiB to read at once" in refused.value.problems[0].message
    assert max(largest) == 512 << 20 and os.listdir(tmp_path / "out") == []


def test_the_unpacked_stream_is_read_and_skipped_only_within_its_bound(tmp_path, monkeypatch):
    """Members' sizes are counted before unpacking; the stream they are read from is bounded too (headers and
    what lies between them), so neither reading nor skipping through it inflates past the bound."""
    monkeypatch.setattr(fetch, "MAX_UNPACKED_BYTES", 4 << 20)
    monkeypatch.setattr(fetch, "MAX_TARBALL_MEMBERS", 10)
    source = tmp_path / "src.tar.gz"
    source.write_bytes(_gzip_of_zeros(64))
    with fetch._Unpacked(source, str(source)) as stream:
        assert stream.seek(fetch.MAX_UNPACKED_BYTES) == 4 << 20
        with pytest.raises(UserError, match="unpacks to more than"):
            stream.seek(stream.limit + 1)
        stream.seek(stream.limit - 10)
        with pytest.raises(UserError, match="unpacks to more than"):
            stream.read(11)
        assert stream.tell() == stream.limit - 10  # nothing read past it
