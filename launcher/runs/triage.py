"""Why an attempt ended, in one of three classes that decide what to do next:

    infrastructure  a retry on other hardware fixes it: a failed node, preemption, the time limit, an NCCL timeout,
                    a network error, a rank killed from outside (SIGKILL, SIGTERM), a CUDA/Xid error of the GPU itself
    training        the code or the settings: a Python exception in Megatron, out of memory at an iteration, a NaN
                    loss, an assertion, a rank's own crash (SIGSEGV, SIGBUS, ...), NCCL refusing its call, a
                    checkpoint that does not fit; the same failure comes back at the same iteration
    data            a data file missing or corrupt, an index that could not be built

Where every rank printed something, the root cause is the rank's own failure, not the collectives' timeouts and
aborts it leaves on the others: the host's or the scheduler's end (a GPU error, a node failure, the time limit), then
out of memory, then the first exception of a rank's own, then an NCCL timeout or network error. An end is
`persistent` where the next attempt with the same settings, files and disk meets it again (out of memory, an error
raised before training began, an import error, a data file missing or damaged, a full disk): the requeue policy stops
there at once.

Read from the attempt's log lines (torchrun's "Root Cause" block and srun's error lines name the first failing rank
and its host), its exit status and, where known, Slurm's state for it (sacct). Lines are read one at a time and only
a few facts are kept, so any log costs the same memory. A log that says nothing classifiable gets no class: a
guess would requeue a code bug or stop a chain that a retry would have saved.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from launcher.counts import count as read_count
from launcher.runs import logparse as lp

INFRASTRUCTURE, TRAINING, DATA = "infrastructure", "training", "data"
GPU_ERROR = "GPU error (CUDA/Xid)"

# Slurm's job states (sacct) that name the cause themselves.
SLURM_STATES = {"NODE_FAIL": (INFRASTRUCTURE, "node failure (Slurm: NODE_FAIL)"),
                "BOOT_FAIL": (INFRASTRUCTURE, "node failed to boot (Slurm: BOOT_FAIL)"),
                "PREEMPTED": (INFRASTRUCTURE, "preempted (Slurm: PREEMPTED)"),
                "TIMEOUT": (INFRASTRUCTURE, "time limit (Slurm: TIMEOUT)"),
                "DEADLINE": (INFRASTRUCTURE, "deadline reached (Slurm: DEADLINE)"),
                "OUT_OF_MEMORY": (TRAINING, "host out of memory (Slurm: OUT_OF_MEMORY)")}
# (class, reason, pattern): the first line that matches one decides, in this order of precedence below.
# slurmstepd's cancel, by its name or, where its log's time format is on, by its timestamp ("[2026-04-20T03:25:23.011]
# error: *** STEP 7.1 ON gpu-1 CANCELLED AT …")
_SLURMSTEPD = re.compile(r"(?:slurmstepd: |\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})? ?\] )error: \*\*\* "
                         r"(?:JOB|STEP) \S+ ON (?P<host>\S+) CANCELLED AT \S+ "
                         r"DUE TO (?P<why>TIME LIMIT|PREEMPTION|NODE FAILURE)")
# The kernel's OOM killer, as slurmstepd and srun report it (Slurm's OUT_OF_MEMORY, where sacct is not asked); the
# other ranks then die by SIGKILL or in their collectives, which says nothing more.
_HOST_OOM = re.compile(r"slurmstepd: error: Detected \d+ oom[-_]kill event"
                       r"|srun: error: \S+: tasks? [\d,-]+: Out Of Memory")
# the kernel's own words for it (dmesg, syslog, the journal): the machine's memory or the job's cgroup limit
_KERNEL_OOM = re.compile(r"\b[Oo]ut of memory: Kill(?:ed)? process \d|\boom-kill:constraint=|\binvoked oom-killer: ")
_HOST_OOM_WORDS = ("oom", "Out Of Memory", "ut of memory")
_SRUN_OOM = re.compile(r"srun: error: (?P<host>[\w.-]{1,300}): tasks? [\d,-]+: Out Of Memory")
_SRUN_NODE_FAIL = re.compile(r"srun: error: Node failure on (?P<host>[\w.-]+)")
_SRUN_TASK = re.compile(r"srun: error: (?P<host>[\w.-]+): tasks? (?P<task>[\d,-]+): (?P<what>Exited with exit code "
                        r"(?P<code>\d+)|Killed|Terminated|Segmentation fault|Bus error|Aborted|Illegal instruction"
                        r"|Floating point exception)")
# A kernel line as syslog writes it ("Dec  1 10:00:00 gpu-7 kernel: NVRM: Xid ..."), where a prolog or a health
# check copies it into the job's log: it names the machine (an Xid, the OOM killer).
_SYSLOG_KERNEL = re.compile(r"^\w{3} [ \d]\d \d\d:\d\d:\d\d (?P<host>[\w.-]{1,300}) kernel: (?:\[[\d. ]+\] )?")
# NCCL's own lines (NCCL_DEBUG=WARN or INFO) start with the machine's name: "gpu-7:4242:4300 [3] NCCL WARN ...".
# A line about a peer (its failure seen here) names the wrong machine; the others say what failed on this one.
_NCCL_WARN = re.compile(r"^(?P<host>[\w.-]{1,300}):\d{1,10}:\d{1,10} \[\d{1,5}\] (?:\S{1,200} )?NCCL WARN ")
_NCCL_PEER = re.compile(r"remote|peer|[Cc]onnection (?:closed|reset)|closed by")
# ncclSystemError: a system call, a library (libibverbs, CUDA) or the device failed on the host that says it
_NCCL_SYSTEM = re.compile(r"unhandled system error|ncclSystemError")
MAX_NCCL_HOSTS = 16  # machines told apart for "one host's NCCL system error"; more: no one host
# Failures of the collectives: seen on the ranks that waited for one that had failed (or hung), so they are the cause
# only where no rank failed by itself (an out-of-memory rank leaves every other rank in an NCCL timeout).
# "A.{0,400}B", not "A.*B": a search tries each place A occurs and `.*` runs to the line's end from each, which is
# quadratic over a long line repeating A; the words of one message are never further apart.
# (class, words, pattern): a line without one of the words is not searched (a long alternation costs a line more than
# looking for its words), so every branch of the pattern holds one of them
_COMM = [
    ("NCCL timeout", ("Watchdog", "NCCL", "DistBackend", "Rendezvous", "Timed out"),
     re.compile(r"Watchdog caught collective operation timeout|ProcessGroupNCCL.{0,400}[Tt]imeout"
                r"|NCCL.{0,400}timed out|DistBackendError.{0,400}[Tt]imeout|RendezvousTimeoutError"
                r"|Timed out (?:after|waiting).{0,400}(?:store|rendezvous|barrier)")),
    ("NCCL/network error", ("NCCL", "DistNetwork", "ncclRemote", "Net :", "remote peer"),
     re.compile(r"NCCL (?:WARN|error).{0,400}(?:remote process exited|[Cc]onnection (?:closed|reset)"
                r"|unhandled system error|[Nn]etwork)|DistNetworkError|ncclRemoteError"
                r"|\bNet : (?:Call to|Connection)|Connection closed by remote peer")),
]
# An exception raised by a collective (torch.distributed's errors, a peer gone): never the first failure by itself.
_COMM_EXCEPTION = re.compile(r"^(?:torch\.distributed\.)?Dist(?:Backend|Network|Store)Error\b"
                             r"|^\w*(?:nccl|NCCL)\w*Error\b"
                             r"|[Cc]onnection (?:closed|reset) by peer|[Bb]roken pipe|communicator was aborted"
                             r"|Socket Timeout|ProcessGroupGloo|gloo/transport")
# Failures of the host itself or the scheduler's end of the job: they outrank what the ranks then raise.
# The words, not one library's sentence around them: torch's "CUDA error: …", its old "cuda runtime error (4) : …",
# THCudaCheck's "error=4 : …", the driver's enum names, the kernel's "fallen off the bus" (its sentence over lines).
_HOST = [
    (GPU_ERROR, ("Xid", "bus", "ECC", "aunch", "AUNCH", "CUDA", "NVML", "cudaError"),
     re.compile(r"\bXid\b|fallen off the bus|uncorrectable ECC|ECC error|ECC_UNCORRECTABLE"
                r"|unspecified launch failure|cudaErrorLaunchFailure|CUDA_ERROR_LAUNCH_FAILED"
                r"|CUDA error: (?:uncorrectable|an illegal instruction|ECC)"
                r"|CUDA-capable device\(s\) (?:is|are) busy or unavailable"
                r"|no CUDA-capable device is detected|NVML_ERROR|cudaErrorDevicesUnavailable")),
]
# NCCL's transports in their own words (InfiniBand's completion errors, a socket's), matched from the first "NET/": a
# link or a peer lost
_NET = re.compile(r"NET/\w{1,20} ?: .{0,400}(?:[Cc]ompletion|[Ff]ailed|[Ee]rror|[Cc]losed)")
# The CUDA error behind NCCL's "unhandled cuda error" (ncclUnhandledCudaError), in NCCL's words: its WARN line
# ("gpu-7:1:2 [0] enqueue.cc:1085 NCCL WARN Cuda failure 'out of memory'"), its last error as torch passes it on
# ("Last error:" then "Cuda failure 1 'invalid argument'", on one line or two), with the error's number since NCCL 2.19,
# its closing quote where a cut line lost it. The CUDA error says whose failure it is; the collective's exception that
# follows says only that NCCL failed.
_NCCL_CUDA = re.compile(r"Cuda failure (?:\d{1,4} )?'(?P<what>[^']{1,120})(?:'|$)")
# a rank's own code (a kernel's bad address or assertion): like torch's "CUDA error: an illegal memory access"
NCCL_CUDA_CRASH = ("an illegal memory access was encountered", "misaligned address", "device-side assert triggered")
# the GPU itself (as _HOST reads them in torch's words): a retry on another machine. The driver's own state too: an
# unknown error (999) or an initialization error (3) where NCCL sets up the device or NVLS, a system not yet
# initialized (802): a driver replaced under the running system, a Fabric Manager restarted without a GPU reset or
# not running; the machine's reboot or reset fixes it, another machine does not meet it
NCCL_CUDA_DEVICE = ("uncorrectable ECC error encountered", "unspecified launch failure",
                    "an illegal instruction was encountered", "uncorrectable NVLink error detected",
                    "CUDA-capable device(s) is/are busy or unavailable", "no CUDA-capable device is detected",
                    "hardware stack error", "the launch timed out and was terminated", "unknown error",
                    "initialization error", "system not yet initialized")
# A kernel of the rank's own failing, in any library's words without a Python traceback (a C++ terminate's what(), a
# trainer's logger line, cuBLAS's or cuDNN's status, glog's failed check): the rank crashed, as with a signal
_CUDA_CRASH = re.compile(r"an illegal memory access was encountered|\bmisaligned address|device-side assert triggered"
                         r"|CUBLAS_STATUS_(?:EXECUTION_FAILED|INTERNAL_ERROR)|CUDNN_STATUS_(?:EXECUTION_FAILED"
                         r"|INTERNAL_ERROR)")
_CUDA_CRASH_WORDS = ("illegal memory", "misaligned", "device-side assert", "_STATUS_")
# Megatron's NaN/Inf check in its own words (an assertion before the rerun state machine, its message since): the
# rank's own failure, though the line alone reaches the log
_NAN_CHECK = re.compile(r"found (?:NaN|Inf) in local (?:grad norm|forward loss)")
# NCCL refusing how it was called (two ranks on one GPU, a bad argument): the job's setup, met again by every retry
_NCCL_USAGE = re.compile(r"ncclInvalidUsage|ncclInvalidArgument|Duplicate GPU detected"
                         r"|NCCL error.{0,400}invalid (?:usage|argument)")
# A checkpoint that does not fit the model built (keys, shapes, Megatron's dist-checkpointing validation): the same
# checkpoint and settings fail the same way
_CHECKPOINT_MISMATCH = re.compile(r"Error\(s\) in loading state_dict|CheckpointingException|size mismatch for "
                                  r"|(?:Missing|Unexpected) key\(s\) in state_dict")
# CUDA's allocator (torch), a kernel launch or a library's own allocation (cuBLAS, cuDNN, NCCL's "Cuda failure"):
# the same memory at the same step runs out again, so a retry does not fix it.
_OOM_WORDS = ("out of memory", "OutOfMemory", "ALLOC_FAILED", "MemoryAllocation")
_OOM = re.compile(r"CUDA out of memory|(?:torch\.|torch\.cuda\.)?OutOfMemoryError: |CUDA error: out of memory"
                  r"|Cuda failure (?:\d{1,4} )?'out of memory'|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED"
                  r"|cudaErrorMemoryAllocation")
_DATA = re.compile(r"megatron/core/datasets/|indexed_dataset|\.idx\b|\.bin\b|IndexedDataset|GPTDataset"
                   r"|BlendedMegatronDatasetBuilder|Failed to compile the C\+\+ dataset helper|helpers_cpp"
                   r"|build_sample_idx|mmap length is greater than file size|data_samplers|dataset")
_DATA_ERROR = re.compile(r"^(?:FileNotFoundError|IsADirectoryError|PermissionError|EOFError|UnpicklingError"
                         r"|numpy\.core\._exceptions|ValueError: mmap)")
# Raised before training began (arguments, layout, model build, imports): the same settings raise it again.
_STARTUP_PERSISTENT = re.compile(r"^(?:\w+\.)*(?:AssertionError|ValueError|TypeError|KeyError|AttributeError|NameError"
                                 r"|IndexError|NotImplementedError|ZeroDivisionError|SyntaxError|FileNotFoundError"
                                 r"|NotADirectoryError|IsADirectoryError|PermissionError)\b")
_IMPORT = re.compile(r"^(?:\w+\.)*(?:ImportError|ModuleNotFoundError)\b")  # the environment's: at any point
# a GPU the job's setup names that this machine does not have (more local ranks than GPUs, a rank used as a device)
_DEVICE_SETUP = re.compile(r"invalid device ordinal")
# a network file system's handle gone stale under the process (the server restarted, the export remounted): the file
# system's, not the job's; the next attempt opens its files afresh
_STALE_HANDLE = re.compile(r"\[Errno 116\]|[Ss]tale (?:NFS )?file handle")
# the software built for another GPU or against other libraries: the environment's too, whatever the exception
_BUILD_MISMATCH = re.compile(r"no kernel image is available for execution on the device|undefined symbol: ")
# A missing or damaged data file stays missing or damaged.
_DATA_PERSISTENT = re.compile(r"^(?:FileNotFoundError|IsADirectoryError|NotADirectoryError|PermissionError)\b"
                              r"|mmap length is greater than file size|cannot mmap an empty file")
# A full disk or quota (torch.save's writer says it in its own words): it stays full for the next attempt.
_DISK_FULL = re.compile(r"\[Errno (?:28|122)\]|No space left on device|Disk quota exceeded"
                        r"|PytorchStreamWriter failed writing file|unexpected pos \d+ vs \d+")
_ARGPARSE = re.compile(r"^[\w.-]+\.py: error: ")  # argparse's refusal of the command line (exit 2, no traceback)
_ARGUMENT_ERROR = "argument error: "
_NAN = re.compile(r"\bnan\b", re.IGNORECASE)
_TRAINING_BEGINS = "training ..."  # Megatron's print_rank_0 in pretrain() once setup is done
# A rank's own output as torchrun prefixes it ("[rank3]:", "[default3]:"), behind srun -l's, a multi-node runner's
# host or torchx's label: never a line of slurmstepd, srun or torchrun itself, whatever it says
_RANK = re.compile(r"^(?:\s*[\w.-]{1,200}: )?(?:[\w.-]{1,200}/\d{1,6} \[(?:default)?\d{1,6}\]:)?"
                   r"(?:\[default\d{1,6}\]:)*\[(?:rank|default)(?P<rank>\d{1,9})\]:")
# a frame of a Python traceback whose head the log's cut (or a tool's own report) left out
_FRAME = re.compile(r'", line \d{1,9}, in [^\s"]{1,300}\s*$')
# torchrun's own line for each failed worker (the exit code; its local rank is no global rank)
_TORCHRUN_FAILED = re.compile(r"\bfailed \(exitcode: (?P<code>-?\d{1,4})\) local_rank: \d{1,9} \(pid: \d{1,10}\)")
# A rank's process crashed by itself (Python's faulthandler, UCX's handler): its code, a library or its GPU, not a
# kill from outside; retried once like any failure of the rank's own
CRASH_SIGNALS = ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT")
_FAULT = re.compile(r"Fatal Python error: (?P<what>Segmentation fault|Bus error|Aborted|Floating point exception"
                    r"|Illegal instruction)|Caught signal (?P<num>\d{1,2}) \(")
_CRASH_NAMES = {"Segmentation fault": "SIGSEGV", "Bus error": "SIGBUS", "Aborted": "SIGABRT",
                "Floating point exception": "SIGFPE", "Illegal instruction": "SIGILL"}
# Megatron's rerun state machine, validation without reruns: the fatal result's own line (the RuntimeError's message)
_UNEXPECTED_RESULT = re.compile(r"Rank \d{1,9}, node [\w.-]{1,300}, device \d{1,5}, iteration #?-?\d{1,18}: "
                                r"Unexpected result (?P<result>[^\s(]{1,60})")
_ROOT_CAUSE = "Root Cause (first observed failure):"
# torchrun raises it (after its own traceback) to report that a rank failed: the rank's end is in its root cause
_CHILD_FAILED = re.compile(r"^(?:torch\.distributed\.elastic\.multiprocessing\.errors\.)?ChildFailedError:")
_FIELD = re.compile(r"^\s*(?P<name>host|rank|exitcode|traceback)\s*: (?P<value>.*)$")
_SIGNAL = re.compile(r"Signal (?P<num>\d+) \((?P<name>SIG\w+)\)")
_TRACEBACK_FILE = re.compile(r'^\s*File "(?P<file>[^"]+)", line \d+')
# Megatron's rerun state machine (megatron/core/rerun_state_machine.py at the pin) ends a job that met an unexpected
# result (NaN/Inf, a spiky loss) with one of two exit codes, each after its own warning line:
RESUME_TO_DISAMBIGUATE = 16  # EXIT_CODE_RESUME_TO_DISAMBIGUATE: resume from the checkpoint (on another GPU)
FAILED_ON_RESULT_VALIDATION = 17  # EXIT_CODE_FAILED_ON_RESULT_VALIDATION: the validation failed; stop
RERUN_EXITS = {
    RESUME_TO_DISAMBIGUATE: "Megatron asks for a resume from its checkpoint to rerun the iteration and tell a "
                            "faulty GPU from a real NaN/Inf (exit code 16)",
    FAILED_ON_RESULT_VALIDATION: "Megatron's result validation failed (exit code 17): its rerun settled the "
                                 "NaN/Inf, or it judged it transient and fatal; the checkpoint is kept for a look",
}
# should_checkpoint_and_exit's warning before each exit (the code also where no exit code reaches the log)
RERUN_EXIT_LINES = {
    "Exiting now. The job can be resumed from a previous checkpoint": FAILED_ON_RESULT_VALIDATION,
    "Saving a checkpoint and exiting now. Please resume the job from the checkpoint to rerun the last iteration "
    "and establish a diagnostic": RESUME_TO_DISAMBIGUATE,
    "Exiting now. A checkpoint at the last iteration already exists if further examination is needed":
        FAILED_ON_RESULT_VALIDATION,
    "Exiting now. Please resume the job from the same checkpoint to rerun the last iteration and establish a "
    "diagnostic": RESUME_TO_DISAMBIGUATE,
}
# The machine the state machine wants the iteration rerun away from (os.uname()[1]): its first rerun reproduced the
# result on the same GPU, or the job came back to that GPU.
_RERUN_NODE = re.compile(r"Rank \d{1,9}, node (?P<host>[\w.-]{1,300}), device \d{1,5}, iteration #?\d{1,18}: First "
                         r"rerun: unexpected result is reproducible within the tolerance"
                         r"|Got rescheduled on the same GPU\. Need to resume again from the same checkpoint \(node: "
                         r"(?P<again>[\w.-]{1,300}), gpu: \d{1,5}\)")
_SRUN_EXIT_CODE = re.compile(r"Exited with exit code (?P<code>\d+)")
MAX_REASON = 200
# the part of a line read for its facts: a failure's words open its line (an exception, NCCL's or srun's line), and a
# line of 64 KiB costs the patterns no more than this (a 1 GiB tail of such lines is read in about a minute)
FACT_WINDOW = 8192
# where NCCL's transport names a link's failure on a line that says NET/…: after the name, within its sentence
NET_WINDOW = 600
MAX_SIGNAL = 64  # Linux's signal numbers (SIGRTMAX)
# A tool that writes its own prefix before each line (a timestamp, a task's name and pid) puts it before a traceback's
# header too: the prefix is learnt there, its digits aside, and taken off the lines that follow it
_TRACEBACK_HEADER = "Traceback (most recent call last):"
MAX_PREFIX = 200
_DIGITS = str.maketrans("0123456789", "0000000000")


@dataclass(frozen=True)
class Triage:
    """How one attempt ended. `cls` None: no failure found, or none that could be classified."""

    cls: str | None
    reason: str
    iteration: int | None = None  # the last iteration the attempt logged (the "same iteration" of a repeat)
    rank: int | None = None  # the first failing rank, where the log names it
    host: str | None = None  # its host
    persistent: bool = False  # a retry meets the same failure (out of memory, a start-up error, a full disk)
    resume_asked: bool = False  # Megatron asked for the resume itself (RESUME_TO_DISAMBIGUATE): always requeued
    # the cause is the machine `host` (None: the log names none): a GPU/ECC/Xid error, a node failure, the OOM
    # killer, one machine's NCCL system error, or the machine Megatron's rerun must avoid
    host_fault: bool = False

    def describe(self) -> str:
        if self.cls is None:
            return self.reason
        where = "".join([f" at iteration {self.iteration}" if self.iteration is not None else "",
                         f", first failing rank {self.rank}" if self.rank is not None else "",
                         f" on {self.host}" if self.host else ""])
        return f"{self.cls}: {self.reason}{where}"

    def as_dict(self) -> dict:
        return {"class": self.cls, **{k: v for k, v in asdict(self).items()
                                      if k != "cls" and (k not in ("resume_asked", "host_fault") or v)}}


def failure_record(record: object) -> dict | None:
    """A failure record read back from a file (summary.json, a requeue decision), with the types as_dict writes
    (class and reason, host: text; iteration, rank: integers), or None; texts are cut to 200 characters."""
    if not isinstance(record, dict) or not isinstance(record.get("class"), (str, type(None))):
        return None
    texts = {k: record[k][:200] for k in ("class", "reason", "host") if isinstance(record.get(k), str)}
    counts = {k: record[k] for k in ("iteration", "rank")
              if isinstance(record.get(k), int) and not isinstance(record.get(k), bool)}
    return {"class": texts.get("class"), "reason": texts.get("reason", ""), "iteration": counts.get("iteration"),
            "rank": counts.get("rank"), "host": texts.get("host")}


class AttemptReader:
    """The facts of one attempt's lines that triage needs, gathered line by line."""

    def __init__(self) -> None:
        self.parser = lp.LogParser()
        self.iteration: int | None = None
        self.loaded: int | None = None
        # (reason, host, whether the host is to blame): the host's or the scheduler's end
        self.infra: tuple[str, str | None, bool] | None = None
        self.comm: str | None = None  # a collective's failure (the cause only where no rank failed by itself)
        self.oom = False
        self.host_oom = False  # the OOM killer, as Slurm reports it
        self.host_oom_host: str | None = None  # the machine srun says it struck
        self.nccl_system = False  # NCCL's "unhandled system error"
        self.nccl_hosts: dict[str, None] = {}  # machines whose NCCL lines say something failed there
        self.rerun_host: str | None = None  # the machine the rerun state machine wants the iteration rerun away from
        self.training_began = False
        self.exception_at_startup = False  # the exception came before training began
        self.nan: str | None = None
        self.exception: str | None = None  # the first exception line after a traceback header
        self.exception_rank: int | None = None
        self.traceback_open = False
        self.data_frame = False  # a frame of the failing traceback is in Megatron's data code
        self.stopped_by_signal = False
        self.root: dict[str, str] = {}
        self.in_root = False
        self.task: tuple[str, str] | None = None  # srun's first failing task: (host, what)
        self.rerun_exit: int | None = None  # the exit code the rerun state machine's last warning announced
        self.torchrun_exit: str | None = None  # torchrun's "failed (exitcode: N)" for its first failed worker
        self.crash: str | None = None  # the signal a rank's process crashed with, in its own words
        self.nccl_usage: str | None = None  # NCCL refused how it was called
        self.cuda_crash: str | None = None  # the CUDA error of a rank's own code (NCCL met it, or another library)
        self.nan_check: str | None = None  # Megatron's NaN/Inf check, in its own words
        self.prefix = ""  # the shape of the prefix a tool writes before each line of a traceback (digits as 0)

    def verdict(self, exit_code: int | None = None, slurm_state: str | None = None, *,
                rank_status: bool = False) -> Triage:
        return judge(self, exit_code, slurm_state, rank_status=rank_status)

    def feed(self, raw: str) -> None:
        if len(raw) > lp.MAX_LINE:
            return
        rank_match = _RANK.match(raw)
        line = self._unprefixed(lp.clean_line(raw)[:FACT_WINDOW])
        if rank_match is not None or not self._launcher_facts(line):
            self._facts(line, int(rank_match["rank"]) if rank_match else None)
        event = self.parser.feed(raw)
        match event:
            case lp.IterationLine():
                self.training_began = True
                self.iteration = event.iteration if self.iteration is None else max(self.iteration, event.iteration)
                if event.nan_iterations and event.lm_loss is None and self.nan is None:
                    self.nan = f"NaN loss ({event.nan_iterations} NaN iteration(s))"
            case lp.CheckpointLoaded():
                self.loaded = event.iteration
            case lp.ResultValidationFailure() if self.nan is None:
                self.nan = f"result validation failed: {event.message}"
            case lp.ExitLine(reason="signal"):
                self.stopped_by_signal = True

    def _unprefixed(self, line: str) -> str:
        """`line` without the prefix its tool wrote before the traceback's header, where it has that prefix's shape."""
        if self.prefix and line[:len(self.prefix)].translate(_DIGITS) == self.prefix:
            return line[len(self.prefix):]
        at = line.find(_TRACEBACK_HEADER, 0, MAX_PREFIX + len(_TRACEBACK_HEADER))
        if at > 0 and line[:at].strip():
            self.prefix = line[:at].translate(_DIGITS)
            return line[at:]
        return line

    def _launcher_facts(self, line: str) -> bool:
        """What torchrun, srun, slurmstepd and syslog say of the attempt (True: the line was one of theirs), read only
        from a line no rank printed: a rank's own output carries torchrun's prefix, so a rank's look-alike of these
        lines cannot say how the job ended, nor name a host to leave out."""
        stripped = line.strip()
        if stripped.startswith(_ROOT_CAUSE):
            self.in_root, self.root = True, {}
            return True
        if self.in_root:
            field = _FIELD.match(line)
            if field:
                self.root.setdefault(field["name"], field["value"].strip())
            elif stripped.startswith("="):
                self.in_root = "rank" not in self.root
            return True
        if "failed (exitcode" in line and (failed := _TORCHRUN_FAILED.search(line)):
            self.torchrun_exit = self.torchrun_exit or failed["code"]
            return True
        if "Signal" in line and (field := _FIELD.match(line)) and field["name"] == "traceback" \
                and (named := _SIGNAL.search(line)):
            self.torchrun_exit = self.torchrun_exit or f"-{named['num']}"  # a failure's field, its header cut off
            return True
        if "CANCELLED AT" in line and (step := _SLURMSTEPD.search(line)):
            why = {"TIME LIMIT": "time limit", "PREEMPTION": "preempted", "NODE FAILURE": "node failure"}[step["why"]]
            # the host slurmstepd names is its own, where it saw the cancel: a failed node is another one
            self.infra = self.infra or (f"{why} (slurmstepd)", step["host"], False)
            return True
        if _has(line, _HOST_OOM_WORDS) and (_HOST_OOM.search(line) or _KERNEL_OOM.search(line)):
            self.host_oom = True
            if named := _SRUN_OOM.search(line) or _SYSLOG_KERNEL.match(line):  # srun's task or syslog's machine
                self.host_oom_host = self.host_oom_host or named["host"]
            return True
        if node := _SRUN_NODE_FAIL.search(line):
            self.infra = self.infra or ("node failure (srun)", node["host"], True)
            return True
        if task := _SRUN_TASK.search(line):
            self.task = self.task or (task["host"], task["what"])
            return True
        if self.infra is None and (syslog := _SYSLOG_KERNEL.match(line)) and line.startswith("NVRM: Xid", syslog.end()):
            self.infra = (GPU_ERROR, syslog["host"], True)  # syslog's line names the machine
            return True
        return False

    def _facts(self, line: str, rank: int | None) -> None:
        stripped = line.strip()
        if "Cuda failure" in line and (cuda := _NCCL_CUDA.search(line)):
            self._nccl_cuda(line, cuda["what"].rstrip(), rank)
        for reason, words, pattern in _HOST:
            if self.infra is None and _has(line, words) and pattern.search(line):
                self.infra = (reason, None, True)
        if "NCCL" in line:
            self.nccl_system = self.nccl_system or _NCCL_SYSTEM.search(line) is not None
            warn = _NCCL_WARN.match(line)
            if warn and not _NCCL_PEER.search(line) and len(self.nccl_hosts) <= MAX_NCCL_HOSTS:
                self.nccl_hosts[warn["host"]] = None
        if ("rerun" in line or "rescheduled" in line) and (rerun := _RERUN_NODE.search(line)):
            self.rerun_host = rerun["host"] or rerun["again"]
        comm = next((reason for reason, words, pattern in _COMM if _has(line, words) and pattern.search(line)),
                    None)
        if comm is None and (net := line.find("NET/")) >= 0 and _NET.match(line, net, net + NET_WINDOW):
            comm = "NCCL/network error"
        self.comm = self.comm or comm
        if _has(line, _OOM_WORDS) and _OOM.search(line):
            self.oom = True
        if self.cuda_crash is None and _has(line, _CUDA_CRASH_WORDS) and (crash := _CUDA_CRASH.search(line)):
            self.cuda_crash = f"CUDA error: {crash[0]}"
        if self.nan_check is None and "found " in line and _NAN_CHECK.search(line):
            self.nan_check = stripped[:MAX_REASON]
        if self.nccl_usage is None and ("NCCL" in line or "nccl" in line or "Duplicate GPU" in line) \
                and _NCCL_USAGE.search(line):
            self.nccl_usage = stripped[:MAX_REASON]
        if self.crash is None and ("Fatal Python" in line or "Caught signal" in line) \
                and (fault := _FAULT.search(line)):
            self.crash = _CRASH_NAMES[fault["what"]] if fault["what"] else _signal_name(int(fault["num"]))
        if "Unexpected result" in line and self.nan is None and (result := _UNEXPECTED_RESULT.search(line)):
            self.nan = f"result validation failed: unexpected result {result['result']}"
        if "rerun_state_machine" in line or "exiting now" in line.lower():
            for text, code in RERUN_EXIT_LINES.items():
                if text in line:
                    self.rerun_exit = code
        if stripped == _TRAINING_BEGINS:
            self.training_began = True
        if lp._TRACEBACK_RE.search(line):
            self.traceback_open = True
            return
        if self.exception is None and '", line ' in line and _FRAME.search(line):
            self.traceback_open = True  # a traceback whose header was cut off
        if self.traceback_open and (frame := _TRACEBACK_FILE.match(line)) and _DATA.search(frame["file"]):
            self.data_frame = True
        if self.exception is None and not self.training_began and _ARGPARSE.match(stripped):
            self._exception(f"{_ARGUMENT_ERROR}{stripped}", rank)
        if self.traceback_open and self.exception is None and lp._EXCEPTION_RE.search(line):
            if "SignalException" in line:  # torchrun passing a signal on to its workers: the signal's, no bug
                self.stopped_by_signal = True
                return
            if _CHILD_FAILED.search(stripped):  # torchrun's own raise, reporting a rank's end: its root cause says
                self.traceback_open, self.data_frame = False, False
                return
            if comm or _COMM_EXCEPTION.search(stripped):  # a peer's failure seen here: the cause is elsewhere
                self.comm = self.comm or "NCCL/network error"
                self.traceback_open, self.data_frame = False, False
                return
            self._exception(stripped, rank)

    def _nccl_cuda(self, line: str, what: str, rank: int | None) -> None:
        """The CUDA error NCCL names (out of memory: the allocator's rule reads it). A GPU's own error names the
        machine of NCCL's WARN line, where no rank printed it (a rank's text in NCCL's words names no machine)."""
        if what in NCCL_CUDA_CRASH:
            self.cuda_crash = self.cuda_crash or f"CUDA error in NCCL: {what}"
        elif what in NCCL_CUDA_DEVICE:
            warn = _NCCL_WARN.match(line) if rank is None else None
            if self.infra is None or (self.infra[0] == GPU_ERROR and self.infra[1] is None and warn):
                self.infra = (GPU_ERROR, warn["host"] if warn else None, True)

    def _exception(self, text: str, rank: int | None) -> None:
        self.exception = text[:MAX_REASON]
        self.exception_rank = rank
        self.exception_at_startup = not self.training_began and self.iteration is None


def _has(line: str, words: tuple[str, ...]) -> bool:
    for word in words:  # a loop, not any() over a generator: this runs several times on every line of a log
        if word in line:
            return True
    return False


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def exit_status(slurm_exit_code: str) -> int | None:
    """sacct's ExitCode "status:signal" as an exit status (a signal as 128 + its number)."""
    status, _, signal = slurm_exit_code.partition(":")
    number = read_count(signal, 4)
    if number:
        return 128 + number
    return read_count(status, 4)


def triage_lines(lines: Iterable[str], exit_code: int | None = None, slurm_state: str | None = None, *,
                 rank_status: bool = False) -> Triage:
    """The class of the attempt whose log is `lines`, its exit status and Slurm's state (None: not known)."""
    reader = AttemptReader()
    for line in lines:
        reader.feed(line)
    return judge(reader, exit_code, slurm_state, rank_status=rank_status)


def judge(r: AttemptReader, exit_code: int | None, slurm_state: str | None, *, rank_status: bool = False) -> Triage:
    """`rank_status`: `exit_code` is the one rank's own (a run started without torchrun, whose root cause block
    would name a rank killed by a signal), with a signal N as 128 + N."""
    iteration = r.iteration if r.iteration is not None else r.loaded
    rank, host = _first_failure(r)
    rank = 0 if rank is None and rank_status else rank  # the one rank
    state = (slurm_state or "").split()[0] if slurm_state else ""
    if state in SLURM_STATES:
        cls, reason = SLURM_STATES[state]
        return Triage(cls, reason, iteration, rank, (r.infra[1] if r.infra else None) or host)
    if r.host_oom:
        return Triage(TRAINING, "host out of memory (the OOM killer, said by Slurm)", iteration, rank,
                      r.host_oom_host or host, host_fault=True)
    if r.infra is not None:
        reason, infra_host, blamed = r.infra
        return Triage(INFRASTRUCTURE, reason, iteration, rank, infra_host or host, host_fault=blamed)
    # a rank's own failure before the collectives' timeouts and aborts it leaves on the others
    if r.oom:
        return Triage(TRAINING, "CUDA out of memory", iteration, rank, host, persistent=True)
    if r.exception is not None:
        return _exception_end(r, iteration, rank, host)
    if r.cuda_crash is not None:  # a kernel of the rank's own failed; a collective's exception only reported it
        return Triage(TRAINING, f"rank crashed ({r.cuda_crash})", iteration, rank, host)
    if r.nccl_usage is not None:  # raised by a collective, and yet this rank's own: how NCCL was called
        return Triage(TRAINING, f"NCCL refused its call (the job's setup): {r.nccl_usage}", iteration, rank, host,
                      persistent=True)
    if (rerun := _rerun_exit(r, exit_code)) is not None:
        resume = rerun == RESUME_TO_DISAMBIGUATE
        # every rank exits 16: the machine is the one the state machine names, not the first rank srun saw end
        away = resume and r.rerun_host is not None
        return Triage(TRAINING, RERUN_EXITS[rerun], iteration, rank, r.rerun_host if away else host,
                      persistent=rerun == FAILED_ON_RESULT_VALIDATION, resume_asked=resume, host_fault=away)
    if r.nan_check is not None:  # raised by the rank itself: before the timeouts it leaves on the others
        return Triage(TRAINING, f"NaN: {r.nan_check}", iteration, rank, host)
    if r.nccl_system:
        return _nccl_system_end(r, iteration, rank)
    if r.comm is not None:
        return Triage(INFRASTRUCTURE, r.comm, iteration, rank, host)
    if r.nan is not None:
        return Triage(TRAINING, r.nan, iteration, rank, host)
    name = _torchrun_signal(r)
    if name is None and rank_status and exit_code is not None and 128 < exit_code <= 128 + MAX_SIGNAL:
        name = _signal_name(exit_code - 128)
    if name in CRASH_SIGNALS:
        return Triage(TRAINING, f"rank crashed ({name})", iteration, rank, host)
    if name is not None:
        return Triage(INFRASTRUCTURE, f"rank killed by {name}", iteration, rank, host)
    if r.stopped_by_signal:
        return Triage(INFRASTRUCTURE, "stopped by a signal (time limit, preemption or requeue): saved and exited",
                      iteration, rank, host)
    if r.task is not None and r.task[1] in ("Killed", "Terminated"):
        return Triage(INFRASTRUCTURE, f"task {r.task[1].lower()}", iteration, rank, host)
    if crash := (_CRASH_NAMES.get(r.task[1]) if r.task else None) or r.crash:  # srun's word, else the rank's own
        return Triage(TRAINING, f"rank crashed ({crash})", iteration, rank, host)
    if exit_code not in (None, 0) or r.root or r.task:
        return Triage(None, f"failed (exit status {exit_code}) without a cause in the log", iteration, rank, host)
    return Triage(None, "no failure in the log", iteration, rank, host)


def _torchrun_signal(r: AttemptReader) -> str | None:
    """The signal torchrun says ended the first failed rank: its root cause, else (no root cause in the log) its
    "failed (exitcode: -N)" line or a failure's traceback field (the other failures list the ranks it stopped)."""
    if r.root and (named := _SIGNAL.search(r.root.get("traceback", ""))):
        return named["name"]
    code = r.root.get("exitcode", "").split(" ")[0] if r.root else r.torchrun_exit or ""
    number = read_count(code[1:], 2) if code.startswith("-") else None
    return _signal_name(number) if number else None


def _nccl_system_end(r: AttemptReader, iteration: int | None, rank: int | None) -> Triage:
    """NCCL's "unhandled system error": a system call, a library or the device failed where it was raised. The other
    machines see that one vanish (remote errors, timeouts), so a machine is named only where the NCCL lines of one
    machine alone say that something failed there."""
    hosts = list(r.nccl_hosts)
    if len(hosts) == 1:
        return Triage(INFRASTRUCTURE, "NCCL system error (unhandled system error)", iteration, rank, hosts[0],
                      host_fault=True)
    said = (f"{MAX_NCCL_HOSTS}+" if len(hosts) > MAX_NCCL_HOSTS else str(len(hosts))) if hosts else "no"
    return Triage(INFRASTRUCTURE, f"NCCL system error (unhandled system error; {said} machine(s) say a failure of "
                  "their own in NCCL's lines: no one machine named)", iteration, rank, None, host_fault=True)


def _rerun_exit(r: AttemptReader, exit_code: int | None) -> int | None:
    """The rerun state machine's exit code, where the attempt ended with one: torchrun's root cause, srun's failing
    task, the exit status, else the warning Megatron prints before it exits."""
    codes = [r.root.get("exitcode", "").split(" ")[0] if r.root else "", r.torchrun_exit or "",
             (m["code"] if (m := _SRUN_EXIT_CODE.search(r.task[1])) else "") if r.task else "",
             str(exit_code) if exit_code is not None else ""]
    return next((number for code in codes if (number := read_count(code, 4)) in RERUN_EXITS), r.rerun_exit)


def _exception_end(r: AttemptReader, iteration: int | None, rank: int | None, host: str | None) -> Triage:
    """The end an attempt's first exception of its own (not a collective's) says; `persistent` where the next
    attempt, with the same settings, files and disk, meets it again."""
    text = r.exception or ""
    if text.startswith(_ARGUMENT_ERROR):
        return Triage(TRAINING, text, iteration, rank, host, persistent=True)
    if _DISK_FULL.search(text):
        return Triage(INFRASTRUCTURE, f"disk full: {text}", iteration, rank, host, persistent=True)
    if _CHECKPOINT_MISMATCH.search(text):
        return Triage(TRAINING, f"checkpoint does not fit the model: {text}", iteration, rank, host, persistent=True)
    if _STALE_HANDLE.search(text):
        return Triage(INFRASTRUCTURE, f"file system error (stale file handle): {text}", iteration, rank, host)
    if _IMPORT.search(text):  # the environment's, wherever it is raised (the data code's helpers too)
        return Triage(TRAINING, f"import error: {text}", iteration, rank, host, persistent=True)
    if _BUILD_MISMATCH.search(text):
        return Triage(TRAINING, f"built for another GPU or library: {text}", iteration, rank, host, persistent=True)
    if _DEVICE_SETUP.search(text):
        return Triage(TRAINING, f"the job's GPU setup: {text}", iteration, rank, host, persistent=True)
    if r.data_frame or (_DATA_ERROR.search(text) is not None and _DATA.search(text) is not None):
        persistent = r.exception_at_startup or _DATA_PERSISTENT.search(text) is not None
        return Triage(DATA, f"data: {text}", iteration, rank, host, persistent=persistent)
    if _NAN.search(text) and ("AssertionError" in text or "RuntimeError" in text):
        return Triage(TRAINING, f"NaN: {text}", iteration, rank, host)
    kind = "assertion" if text.startswith("AssertionError") else "Python exception"
    if r.exception_at_startup and _STARTUP_PERSISTENT.search(text):
        return Triage(TRAINING, f"{kind} at start-up: {text}", iteration, rank, host, persistent=True)
    return Triage(TRAINING, f"{kind}: {text}", iteration, rank, host)


def _first_failure(r: AttemptReader) -> tuple[int | None, str | None]:
    """torchrun's root cause (rank), else the rank that printed the first exception; the host as Slurm names it
    (srun's failing task), else torchrun's. torchrun names the machine (its fully qualified name), which need not be
    Slurm's node name (gpu-7.cluster.example vs gpu-7; several emulated nodes on one machine): a host left out of
    the next attempt must be one Slurm knows."""
    rank: int | None = None
    host: str | None = r.task[0] if r.task is not None else None
    if r.root:
        digits = r.root.get("rank", "").split(" ")[0]
        rank = read_count(digits, 9)  # a log's text: ASCII digits only ('²' is a digit to isdigit())
        host = host or r.root.get("host") or None
    if rank is None:
        rank = r.exception_rank
    return rank, host


def describe_failures(failures: list[dict]) -> list[str]:
    """`launch report`'s lines for the classified ends among the attempts' Triage.as_dict() records."""
    lines = []
    for number, record in enumerate(failures, 1):
        if record.get("class"):
            end = Triage(record["class"], record.get("reason") or "", record.get("iteration"), record.get("rank"),
                         record.get("host"), record.get("persistent") is True)
            lines.append(f"attempt {number}: {end.describe()}")
    return lines
