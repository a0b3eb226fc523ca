"""Where Megatron-LM lives and what the environment offers (Transformer Engine, NVIDIA apex), without torch."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from launcher import MEGATRON_COMMIT
from launcher.errors import UserError

REPO_ROOT = Path(__file__).resolve().parents[2]
SUBMODULE = REPO_ROOT / "third_party" / "megatron-lm"
ENV_VAR = "MEGATRON_LM_PATH"
ENTRY_SCRIPTS = {
    "pretrain_gpt": "pretrain_gpt.py",
    "simple_loop": "examples/run_simple_mcore_train_loop.py",
}


# `launch fetch-megatron` writes the commit into a tarball's tree (it has no .git to say it).
COMMIT_MARKER = ".megatron-launch-commit"
MAX_MARKER_BYTES = 4096  # the marker holds a commit hash and a newline
FETCH_HINT = "run `launch fetch-megatron` (the pinned commit into your data directory, remembered)"


def submodule_hint(path: Path) -> str:
    """For the submodule of a source clone, which a plain `git clone` leaves empty: the command that fills it."""
    if path != SUBMODULE or not (REPO_ROOT / ".gitmodules").is_file():
        return ""
    return f"; or fill this clone's submodule: git -C {REPO_ROOT} submodule update --init third_party/megatron-lm"


def _xdg(name: str, fallback: str) -> Path:
    value = os.environ.get(name)
    return Path(value) if value and os.path.isabs(value) else Path.home() / fallback


def config_file() -> Path:
    """Where `launch fetch-megatron` remembers the checkout: $XDG_CONFIG_HOME/megatron-launch/config.json."""
    return _xdg("XDG_CONFIG_HOME", ".config") / "megatron-launch" / "config.json"


DATA_DIR_ENV = "MEGATRON_LAUNCH_DATA_DIR"


def data_dir() -> Path:
    """The launcher's own data (the fetched checkout, plan --measure's measurements): $MEGATRON_LAUNCH_DATA_DIR,
    else $XDG_DATA_HOME/megatron-launch, else ~/.local/share/megatron-launch."""
    value = os.environ.get(DATA_DIR_ENV)
    return Path(value).expanduser().absolute() if value else _xdg("XDG_DATA_HOME", ".local/share") / "megatron-launch"


CACHE_DIR_ENV = "MEGATRON_LAUNCH_CACHE_DIR"


def cache_dir() -> Path:
    """What the launcher can rebuild but keeps to start faster (the dataset helpers built per source):
    $MEGATRON_LAUNCH_CACHE_DIR, else $XDG_CACHE_HOME/megatron-launch, else ~/.cache/megatron-launch."""
    value = os.environ.get(CACHE_DIR_ENV)
    return Path(value).expanduser().absolute() if value else _xdg("XDG_CACHE_HOME", ".cache") / "megatron-launch"


def default_fetch_dir() -> Path:
    """<data_dir>/megatron-lm-432d76b."""
    return data_dir() / f"megatron-lm-{MEGATRON_COMMIT[:7]}"


def remembered_path() -> Path | None:
    """The checkout `launch fetch-megatron` fetched last, if its config file names one."""
    from launcher import untrusted

    if not os.path.lexists(config_file()):
        return None
    try:  # bounded, a regular file only: a FIFO there must not hang every launch
        value = untrusted.read_json(config_file(), "launcher config", 1 << 20).get("megatron_path")
    except (UserError, OSError, AttributeError):
        return None
    return Path(value) if isinstance(value, str) and os.path.isabs(value) else None


def megatron_path(cli_value: str | None, preset_value: str | None) -> Path:
    """--megatron-path, then the preset's launcher.megatron_path, then $MEGATRON_LM_PATH, then the submodule of a
    source checkout when it is populated, then the checkout `launch fetch-megatron` remembered."""
    for value in (cli_value, preset_value, os.environ.get(ENV_VAR)):
        if value:
            return Path(value).expanduser().absolute()
    if (SUBMODULE / ENTRY_SCRIPTS["pretrain_gpt"]).is_file():
        return SUBMODULE
    return remembered_path() or SUBMODULE


def require_checkout(path: Path, entry: str) -> Path:
    script = path / ENTRY_SCRIPTS[entry]
    if not script.is_file():
        raise UserError(
            f"no Megatron-LM checkout at {path} ({ENTRY_SCRIPTS[entry]} is missing)",
            f"{FETCH_HINT}, or point the launcher at a checkout of {MEGATRON_COMMIT[:12]} with "
            f"--megatron-path DIR or {ENV_VAR}=DIR{submodule_hint(path)}",
        )
    return script


def checkout_warning(path: Path, entry: str) -> str | None:
    """For a printed or written job: the entry script the command names does not exist on this machine."""
    if entry not in ENTRY_SCRIPTS or (path / ENTRY_SCRIPTS[entry]).is_file():
        return None
    return (f"{path / ENTRY_SCRIPTS[entry]} does not exist here: the command needs a Megatron-LM checkout of "
            f"{MEGATRON_COMMIT[:12]} there; {FETCH_HINT}, or give --megatron-path DIR{submodule_hint(path)}")


@dataclass(frozen=True)
class Kernels:
    """Which optional fused-kernel packages the training processes will find."""

    transformer_engine: bool
    apex: bool
    how: str  # "preset" (declared), "detected" (here), "login node" (bare-metal Slurm), "NGC image"
    # None: not known. A declared TE (and an NGC image's) is the NGC container's, launcher.megatron.target.
    te_version: str | None = None
    # torchao (float8 training): FP8 without TE runs through it (launcher/inside/megatron_ext/float8.py). Found
    # where the kernels are looked up, or declared in launcher.packages.
    torchao: bool = False


def has_module(name: str) -> bool:
    """Importable, judged without importing it (find_spec)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def detect_kernels() -> tuple[bool, bool]:
    """TE and a *full* NVIDIA apex (its CUDA extensions), found without importing them or torch.

    The unrelated PyPI package also named `apex` has no fused_weight_gradient_mlp_cuda, so it counts as absent.
    """
    te = has_module("transformer_engine")
    apex = has_module("apex") and has_module("fused_weight_gradient_mlp_cuda") and has_module(
        "scaled_masked_softmax_cuda")
    return te, apex

