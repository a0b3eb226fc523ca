"""Which of a script's exports are its own plumbing rather than the ranks' environment.

A script exports what torchrun sets for every rank it starts (MASTER_ADDR, WORLD_SIZE, RANK …: the launcher's
torchrun sets its own, over the caller's), command strings and flag lists (`CMD`, `LAUNCHER`, `DISTRIBUTED_ARGS`,
`GPT_ARGS`), and the values it builds the training command from (`DATA_PATH`, `NUM_LAYERS`): these reach the ranks as
the command's words, or not at all. Megatron reads none of the last two kinds (the pin's os.environ reads are
launcher-owned names, CUDA_DEVICE_MAX_CONNECTIONS, NVTE_*/NCCL_*/TORCH_* settings, SLURM_* job facts); a variable
that a library reads (a prefix below) is kept whatever its value.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# what torch.distributed's elastic agent (torchrun) sets in each worker's environment, over the caller's
TORCHRUN_SETS = frozenset({
    "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
    "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE"})

# names a library or runtime the ranks load reads: kept as written
LIBRARY_PREFIXES = (
    "NCCL_", "NVTE_", "CUDA", "CUDNN_", "CUBLAS", "NVIDIA_", "NVSHMEM_", "TORCH", "PYTORCH_", "XLA_", "TF_", "HSA_",
    "HIP_", "ROCM", "ROCR_", "RCCL_", "MIOPEN_", "GPU_", "FI_", "UCX_", "UCC_", "OMP_", "KMP_", "MKL_", "MPICH_",
    "OMPI_", "PMI", "HF_", "TRANSFORMERS_", "TOKENIZERS_", "WANDB_", "TRITON_", "PT_", "HCCL_", "ASCEND_", "TE_",
    "GLOO_", "TP_SOCKET", "LD_", "PYTHON", "MEGATRON_", "MAMBA_", "SLURM_", "NSYS", "HYDRA_", "MALLOC_", "CC",
    "CXX", "PATH", "HOME", "TMPDIR", "LANG", "LC_", "http", "https", "HTTP", "HTTPS", "NO_PROXY", "no_proxy")

FLAG_WORD = re.compile(r"--?[A-Za-z][A-Za-z0-9_.-]*(=.*)?")


def _library(name: str) -> bool:
    return name.startswith(LIBRARY_PREFIXES)


def plumbing(name: str, value: str, command_words: Sequence[str]) -> str | None:
    """Why the export `name=value` is not the ranks' environment, or None where it is carried. `command_words`: the
    training command's words after the entry script."""
    if name in TORCHRUN_SETS:
        return "torchrun sets it for each rank it starts (the launcher's rendezvous and world), over the script's"
    if _library(name):
        return None
    words = value.split()
    if any(FLAG_WORD.fullmatch(word) for word in words):
        return ("a command line or flags of the script's own, which reach the ranks as the training command's "
                "words (read there), not as a variable Megatron reads")
    if value and any(value == given and _same_thing(name, flag) for flag, given in _flag_values(command_words)):
        return ("a value the script builds the training command from (the value of a flag of its name there), not "
                "a variable Megatron reads")
    return None


# words of a name that say nothing of what it holds
GENERIC = frozenset({"num", "number", "size", "n", "of", "per", "the", "args", "arg", "value", "my", "use"})


def _same_thing(name: str, flag: str) -> bool:
    """DATA_PATH and --data-path, HIDDEN and --hidden-size: the variable names what the flag sets (a value that is
    only equal, B=2 beside --num-layers 2, is not taken for it)."""
    named = set(name.lower().split("_")) - GENERIC
    return bool(named & (set(flag.lstrip("-").lower().replace("_", "-").split("-")) - GENERIC))


def _flag_values(words: Sequence[str]) -> list[tuple[str, str]]:
    """(flag, value) of `--flag value` and `--flag=value` among the command's words."""
    out = [(word.partition("=")[0], word.partition("=")[2]) for word in words if word.startswith("--") and "=" in word]
    out += [(words[k], words[k + 1]) for k in range(len(words) - 1)
            if words[k].startswith("-") and not words[k + 1].startswith("--")]
    return out
