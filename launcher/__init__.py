"""megatron-launch: a thin, checked front door to NVIDIA Megatron-LM."""

import shlex
import sys
from pathlib import Path

__version__ = "0.1.0"
MEGATRON_COMMIT = "432d76b2b8bf036d8a267d5f1623eccd5dbca092"
MEGATRON_CORE_VERSION = "0.18.0"
CHECKOUT = Path(__file__).resolve().parents[1]  # the source checkout, when installed from one


def install_command(extra: str) -> str:
    """The pip command that adds one of the launcher's extras to this interpreter. The launcher is on no package
    index: from a checkout, `pip install -e CHECKOUT[extra]`; installed from a built wheel, the extra's own
    requirements as this installation's metadata lists them."""
    pip = f"{shlex.quote(sys.executable)} -m pip install"
    if (CHECKOUT / "pyproject.toml").exists():
        return f"{pip} -e {shlex.quote(f'{CHECKOUT}[{extra}]')}"
    import importlib.metadata

    try:
        requires = importlib.metadata.requires("megatron-launch") or []
    except importlib.metadata.PackageNotFoundError:
        requires = []
    marker = f'extra == "{extra}"'
    wanted = [r.split(";")[0].strip() for r in requires if marker in r.replace("'", '"')]
    return f"{pip} {' '.join(shlex.quote(w) for w in wanted)}" if wanted else f"{pip} -e 'CHECKOUT[{extra}]'"
