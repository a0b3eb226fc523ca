"""One data directory for the launcher's own files: the fetched checkout and plan --measure's measurements."""

from __future__ import annotations

from launcher.cli.plan_refit import measurements_path
from launcher.megatron.pin import data_dir, default_fetch_dir


def test_the_data_directory_is_one_place_for_the_checkout_and_the_measurements(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MEGATRON_LAUNCH_DATA_DIR", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    assert data_dir() == tmp_path / "home" / ".local/share/megatron-launch"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/is/ignored")  # the XDG spec: only absolute paths count
    assert data_dir() == tmp_path / "home" / ".local/share/megatron-launch"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert data_dir() == tmp_path / "xdg" / "megatron-launch"
    monkeypatch.setenv("MEGATRON_LAUNCH_DATA_DIR", str(tmp_path / "mine"))
    assert default_fetch_dir().parent == tmp_path / "mine"
    assert measurements_path() == tmp_path / "mine" / "measurements.json"
