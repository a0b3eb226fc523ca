"""megatron-launch: a thin, checked front door to NVIDIA Megatron-LM."""

import shlex
import sys
from pathlib import Path

__version__ = "0.1.0"
MEGATRON_COMMIT = "432d76b2b8bf036d8a267d5f1623eccd5dbca092"
MEGATRON_CORE_VERSION = "0.18.0"
CHECKOUT = Path(__file__).resolve().parents[1]  # the source checkout, when installed from one


def install_command(extra: str) -> str:
    """The pip command that adds one of the launcher's extras to this interpreter. The launcher is not on a
    package index: it installs from its checkout (scripts/bootstrap.sh does `pip install -e .`)."""
    source = str(CHECKOUT) if (CHECKOUT / "pyproject.toml").exists() else "."
    return f"{shlex.quote(sys.executable)} -m pip install -e {shlex.quote(f'{source}[{extra}]')}"
