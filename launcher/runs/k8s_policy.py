"""What `launch --resume RUN_DIR --k8s` takes from the JobSet's earlier attempts: the Slurm batch script's rule
(runs/requeue_policy.py) applied to the pods' logs.

Each pod appends to logs/k8s/node-N-attempt-M.log and opens each start with `megatron-launch: pod N of M (POD HOST),
attempt A, on node MACHINE, jobset NAME, …` (backends/k8s.py's entry script; the machine is the pod's spec.nodeName).
One attempt is one JobSet's restart A: the lines of all its pods, as a Slurm job's log holds every rank's. Attempts are
ordered by JobSet (NAME, then NAME-rN in the order `launch --resume` wrote them) and number. The last one decides:

- a persistent end (out of memory, a start-up error, Megatron's failed result validation, …) or the same training or
  data failure a second time: a warning that a retry meets it again (the resume is asked for: it is written);
- an end that blames a host (a GPU/ECC/Xid error, a node failure, the OOM killer, one machine's NCCL system error) or
  Megatron's exit 16 naming the machine its rerun must avoid: the host a log names is a pod's host name (torchrun,
  Megatron and NCCL name the pod), so it is taken only as one of the last attempt's pods and becomes the machine that
  pod ran on; the new JobSet's pods are kept off it, with every machine left out before (manifest.json
  excluded_nodes, at most 64): a required node affinity `metadata.name NotIn [...]`.

The logs are data: a machine is taken only as a Kubernetes node name (DNS-1123 subdomain, as echo wrote it), and
the reading is bounded (read_attempts), each log or attempt not read said in a warning.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass, replace
from pathlib import Path

from launcher import untrusted
from launcher.errors import UserError
from launcher.pipeline.k8s_settings import DNS1123_SUBDOMAIN
from launcher.runs import entries, requeue_policy, triage

LOG_DIR = Path("logs") / "k8s"
MAX_POD_LOG_BYTES = 1 << 30
MAX_LOG_BYTES = 4 << 30  # of all pod logs together
MAX_ATTEMPTS = 1000  # the newest attempts kept (the last decides; the earlier ones tell a failure met twice)
MAX_PODS = 10_000  # pods of one attempt whose machines are kept
MAX_EXCLUDED = 64
MAX_NODE_NAME = 253  # a Kubernetes node's name: a DNS-1123 subdomain
_HEADER = re.compile(r"megatron-launch: pod [0-9]{1,9} of [0-9]{1,9} \((?P<host>[^()\s]{0,253})\), attempt "
                     r"(?P<attempt>[0-9]{1,9})(?:, on node (?P<node>\S{1,253}), jobset (?P<jobset>\S{1,253}))?,")
_RESUMED = re.compile(r".*-r(?P<number>[0-9]{1,6})")


def node_name(name: object) -> bool:
    return isinstance(name, str) and len(name) <= MAX_NODE_NAME and bool(DNS1123_SUBDOMAIN.fullmatch(name))


def excluded_nodes(manifest: dict) -> tuple[list[str], str | None]:
    """The machines left out so far (manifest.json's excluded_nodes), and what of that list was not taken."""
    names = manifest.get("excluded_nodes")
    if names is None:
        return [], None
    if not isinstance(names, list) or len(names) > MAX_EXCLUDED:
        size = f"{len(names)} names, more than the {MAX_EXCLUDED}" if isinstance(names, list) else "not a list of"
        return [], f"{size} machine names the launcher leaves out"
    kept = [name for name in dict.fromkeys(n for n in names if node_name(n))]
    dropped = len(names) - len(kept)
    return kept, f"{dropped} value(s) that name no machine, dropped" if dropped else None


@dataclass
class _Attempt:
    reader: triage.AttemptReader
    machines: dict[str, str]  # pod host name → the machine it ran on ("" where the log does not say)


@dataclass
class PodLogs:
    """What the pod logs say: every attempt's end (oldest first), the last attempt's pods (host → machine), and
    what was not read, in words."""

    ends: list[triage.Triage]
    machines: dict[str, str]
    unread: list[str]


def read_attempts(run_dir: Path) -> PodLogs:
    """Every attempt's end from the pod logs, oldest first, and the last attempt's pods: host → machine.

    Bounded whatever the logs hold: at most MAX_LOG_BYTES in all (a log past what is left is not read), the
    MAX_ATTEMPTS newest attempts (each header names one, so a log of headers alone would otherwise keep a reader
    per line) and MAX_PODS pods an attempt; each log or attempt left is said."""
    attempts: dict[tuple[int, str, int], _Attempt] = {}
    keys: list[tuple[int, str, int]] = []  # attempts' keys, a heap: the oldest first
    unread: list[str] = []
    dropped_attempts = dropped_pods = 0
    budget = MAX_LOG_BYTES
    for path in sorted(entries.listed(Path(run_dir) / LOG_DIR, "node-*-attempt-*.log", "pod logs")):
        if not path.is_file():
            unread.append(f"{path.name} (not a regular file)")
            continue
        size = path.stat().st_size
        if size > min(budget, MAX_POD_LOG_BYTES):
            unread.append(f"{path.name} ({size:,} bytes, past the {MAX_LOG_BYTES:,} read of all pod logs)"
                          if size <= MAX_POD_LOG_BYTES else f"{path.name} ({size:,} bytes, more than a pod log's "
                          f"{MAX_POD_LOG_BYTES:,})")
            continue
        budget -= size
        current: _Attempt | None = None
        try:
            for raw in untrusted.Lines(path, "pod log", MAX_POD_LOG_BYTES):
                # the entry script's line as echo wrote it (a colour code is no part of a name; it may follow an
                # earlier pod's cut last line)
                header = _HEADER.search(raw) if "megatron-launch: pod" in raw else None
                if header:
                    jobset = header["jobset"] or ""
                    resumed = _RESUMED.fullmatch(jobset)
                    key = (int(resumed["number"]) if resumed else 0, jobset, int(header["attempt"]))
                    current = attempts.get(key)
                    if current is None:
                        current = attempts[key] = _Attempt(triage.AttemptReader(), {})
                        heapq.heappush(keys, key)
                        if len(attempts) > MAX_ATTEMPTS:  # the oldest goes (perhaps this one)
                            oldest = heapq.heappop(keys)
                            current = None if oldest == key else current
                            del attempts[oldest]
                            dropped_attempts += 1
                    if current is None:
                        continue
                    machine = header["node"] or ""
                    if header["host"] in current.machines or len(current.machines) < MAX_PODS:
                        current.machines[header["host"]] = machine if node_name(machine) else ""
                    else:
                        dropped_pods += 1
                elif current is not None:
                    current.reader.feed(raw)
        except UserError as error:
            unread.append(f"{path.name} ({error.problems[0].message})")
    if dropped_attempts:
        unread.append(f"{dropped_attempts:,} older attempt(s) past the {MAX_ATTEMPTS:,} newest")
    if dropped_pods:
        unread.append(f"{dropped_pods:,} pod header(s) past {MAX_PODS:,} pods in one attempt")
    ordered = [attempts[key] for key in sorted(attempts)]
    return PodLogs([a.reader.verdict() for a in ordered], ordered[-1].machines if ordered else {}, unread)


@dataclass(frozen=True)
class Resume:
    """What the new JobSet takes from the earlier attempts."""

    exclude: tuple[str, ...] = ()  # every machine its pods keep off
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    decision: requeue_policy.Decision | None = None  # to record (the last attempt's end and what was done)


def resume(run_dir: Path, manifest: dict) -> Resume:
    logs = read_attempts(run_dir)
    ends, machines = logs.ends, logs.machines
    before, not_taken = excluded_nodes(manifest)
    notes = [f"manifest.json excluded_nodes: {not_taken}, not taken"] if not_taken else []
    unread = [f"pod logs not read in full (each end is judged from what was read): {_listed(logs.unread)}"] \
        if logs.unread else []
    if not ends:
        return Resume(tuple(before), tuple(notes + _kept(before)), tuple(unread))
    decision = requeue_policy.decide(ends, (), tuple(machines))
    last = decision.end
    warnings = unread
    if decision.action == requeue_policy.STOP:
        warnings.append(f"the JobSet's last attempt ended {decision.rule}; resuming as asked (change what caused "
                        "it first)")
    added: list[str] = []
    hosts = decision.hosts
    for pod in decision.left_out:
        machine = machines.get(pod, "")
        if not machine:
            hosts = f"no machine left out: the log of pod {pod} does not name the machine it ran on"
        elif machine in before:
            hosts = f"{machine} (pod {pod}) was left out already"
        elif len(before) >= MAX_EXCLUDED:
            hosts = f"{machine} kept: {MAX_EXCLUDED} machines are left out already"
        else:
            added.append(machine)
            hosts = f"leaving out {machine}, where pod {pod} ran" + (
                ", where the rerun must not run again" if last.resume_asked else "")
    exclude = (*before, *added)
    if last.host_fault or last.resume_asked:
        notes.append(f"the JobSet's last attempt ended {last.describe()}: {hosts}")
    notes += _kept([name for name in before if name not in added])
    recorded = replace(decision, exclude=exclude, left_out=tuple(added), hosts=hosts)
    return Resume(exclude, tuple(notes), tuple(warnings), recorded)


def _kept(names: list[str]) -> list[str]:
    return [f"keeping off {', '.join(names)}: an earlier attempt failed there (manifest.json excluded_nodes)"] \
        if names else []


def _listed(items: list[str], most: int = 5) -> str:
    return "; ".join(items[:most]) + (f"; and {len(items) - most} more" if len(items) > most else "")
