"""Flags whose value is a variable a job launcher sets in each process's environment, where the pin reads that very
value from the environment itself: `--local-rank $SLURM_LOCALID` is this process's local rank, which the launcher's
torchrun exports as LOCAL_RANK to every process it starts and Megatron reads by default. Such a flag is the
launcher's business: a note, not a loss."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from launcher.importer.bash_subset import UNRESOLVED

# the pin's settings whose default is a variable torchrun exports to each process
# (megatron/training/config/common_config.py:85: local_rank = int(os.getenv("LOCAL_RANK", "0")))
PIN_DEFAULT_FROM = {"local_rank": "LOCAL_RANK"}

# the variables job launchers set per process that hold that same value: torchrun, Slurm's srun, Open MPI, MPICH /
# Intel MPI (Hydra), MVAPICH2, Cray PALS, Flux, LSF's jsrun
SAME_VALUE = {
    "LOCAL_RANK": frozenset({"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                             "MV2_COMM_WORLD_LOCAL_RANK", "PALS_LOCAL_RANKID", "FLUX_TASK_LOCAL_ID",
                             "JSM_NAMESPACE_LOCAL_RANK"}),
}


def given_by_launcher(dest: str, value: str, copies: Mapping[str, str], set_by_script: Collection[str],
                      undecided: Collection[str]) -> str | None:
    """The variable whose value `value` is, where it is the per-process one the pin reads for `dest` by default;
    None otherwise. `value` must be that variable alone (`${LOCAL_RANK}0` is not); a variable the script holds as a
    copy of another (`LOCAL_RANK=$OMPI_COMM_WORLD_LOCAL_RANK`) is that other's; the variable must be the caller's,
    not one the script sets or a branch not decided may set."""
    variable = PIN_DEFAULT_FROM.get(dest)
    whole = UNRESOLVED.fullmatch(value)
    if variable is None or whole is None:
        return None
    name = whole.group(1)
    root = copies.get(name, name)
    if not root or root in set_by_script or name in undecided or root in undecided:
        return None
    if name != root and name not in set_by_script:  # a copy the script may not make on every path
        return None
    return root if root in SAME_VALUE[variable] else None
