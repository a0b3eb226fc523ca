"""How the job's processes start: torchrun, or the entry script run directly (`python3 -u ENTRY …`) where exactly
one process runs here.

torchrun costs a one-GPU job seconds of start-up (its own import of torch, its agent and rendezvous, its exit:
1.3-1.4 s CPU and 1.3-2.6 s to the rank's first line on a CPU machine, docs/benchmarks.md) and, for one process,
only gives it a few variables (torch/distributed/elastic/agent/server/local_elastic_agent.py): the launcher
exports those itself (`rank_environment`), so the rank sees what torchrun's one worker sees.
`launcher.runner: torchrun` (`--set runner=torchrun`) keeps torchrun; Slurm, Kubernetes, several GPUs or nodes
always use it.
"""

from __future__ import annotations

from dataclasses import dataclass

TORCHRUN, DIRECT = "torchrun", "direct"
ASYNC_ERRORS = "TORCH_NCCL_ASYNC_ERROR_HANDLING"  # torchrun gives its workers 1 where it is not set


@dataclass(frozen=True)
class Runner:
    name: str  # TORCHRUN or DIRECT
    why: str  # said in the dry-run header

    @property
    def direct(self) -> bool:
        return self.name == DIRECT

    def describe(self) -> str:
        return f"{'python3 directly, without torchrun' if self.direct else 'torchrun'} ({self.why})"


def choose_runner(setting: str, *, processes: int, here: bool, torchrun: str, inprocess_restart: bool) -> Runner:
    """`setting` is launcher.runner (auto or torchrun); `processes` the job's world size; `here` whether it runs on
    this machine (not Slurm or Kubernetes); `torchrun` launcher.torchrun."""
    if setting == TORCHRUN:
        return Runner(TORCHRUN, "runner=torchrun")
    if not here:
        return Runner(TORCHRUN, "one per node on the cluster")
    if processes != 1:
        return Runner(TORCHRUN, f"{processes} processes")
    if torchrun != TORCHRUN:  # its workers would run the Python of that torchrun, perhaps another environment's
        return Runner(TORCHRUN, "launcher.torchrun names the torchrun to use")
    if inprocess_restart:  # Megatron opens its restart stores at torchrun's MASTER_PORT + 1 and + 2
        return Runner(TORCHRUN, "in-process restart needs torchrun's rendezvous port")
    return Runner(DIRECT, "one process here: torchrun would only add seconds of start-up (one H200, toy: 1.7-2.3 s "
                          f"command -> exit); the launcher exports what torchrun gives its worker (RANK=0 ... "
                          f"MASTER_PORT=0, {ASYNC_ERRORS}=1 where unset); --set runner=torchrun to use it")


def rank_environment() -> dict[str, str]:
    """What torchrun gives its one worker of a one-node, one-process job. MASTER_PORT 0: the rank's own TCPStore
    server (rank 0 of a world of 1) binds a free port, as torchrun --standalone finds one, so two jobs here never
    collide."""
    return {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "0",
            "ROLE_RANK": "0", "ROLE_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0"}
