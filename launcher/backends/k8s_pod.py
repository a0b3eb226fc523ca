"""What runs torchrun in each pod of a JobSet, so that the pod's exit status says what the JobSet's failure policy
needs to know (backends/k8s.py renders the policy).

torchrun exits 1 whatever its ranks exited with (its ChildFailedError), so a pod that ran torchrun as PID 1 could not
tell Megatron's "no retry can fix this" from a crash: Megatron's argument parser (exit 2 on every rank) and its failed
result validation (EXIT_CODE_FAILED_ON_RESULT_VALIDATION, 17, on every rank) were restarted like any failure. The
supervisor runs torchrun as its child, forwards SIGTERM and SIGINT to it (the kubelet signals PID 1 only), passes its
standard error through, reads torchrun's "Root Cause (first observed failure)" block, and exits with the first
failing rank's code where that code is one the policy acts on (2, 16, 17), else with torchrun's own status.
The ranks write to the same standard error, so a rank's own line can look like that block: the code is taken only
from the block that ends the stream (torchrun prints it as it exits, after its ranks have ended), closed by its
`====` line, and only where torchrun exited 1 (its ChildFailedError). Any doubt restarts the JobSet: a wrong "do not
retry" would end a run a retry could save. Lines are read in pieces (a rank's 10 GB line without a newline is not
held), bytes that are not UTF-8 pass through unchanged. Every
rank exits with these codes, so every pod of the attempt says the same. Plain Python (the image's python3, standard
library only), passed in the pod's environment; no `$(` and no `$$` (Kubernetes would expand them).
"""

from __future__ import annotations

INPUT_ERROR = 2  # bad input (a data file missing, a package missing, Megatron's argument parser): no retry helps
RESUME_TO_DISAMBIGUATE = 16  # Megatron's rerun state machine: resume from its checkpoint, on other hardware
FAILED_ON_RESULT_VALIDATION = 17  # Megatron's result validation failed: settled, no retry helps
PASSED_ON = (INPUT_ERROR, RESUME_TO_DISAMBIGUATE, FAILED_ON_RESULT_VALIDATION)
NOT_RETRIED = (INPUT_ERROR, FAILED_ON_RESULT_VALIDATION)
ROOT_CAUSE = "Root Cause (first observed failure):"  # torch.distributed.elastic's ChildFailedError message
MAX_LINE = 65536  # a line of standard error is passed through in pieces of at most this many bytes

SUPERVISOR = r"""
import re, signal, subprocess, sys
child = subprocess.Popen(sys.argv[1:], stderr=subprocess.PIPE)
def forward(number, frame):
    try:
        child.send_signal(number)
    except OSError:
        pass
signal.signal(signal.SIGTERM, forward)
signal.signal(signal.SIGINT, forward)
passing, at_start = True, True
in_root, closed, code = False, False, None
while True:
    raw = child.stderr.readline(LINE)
    if not raw:
        break
    if passing:
        try:
            sys.stderr.buffer.write(raw)
            sys.stderr.buffer.flush()
        except OSError:
            passing = False
    whole, at_start = at_start, raw.endswith(b"\n")
    text = raw.decode("utf-8", "replace").rstrip("\r\n") if whole else "-"
    if text == MARKER:
        in_root, closed, code = True, False, None
    elif in_root and not closed:
        if re.fullmatch(r"={3,}", text):
            closed = True
        elif code is None:
            found = re.fullmatch(r"\s*exitcode\s*: (-?[0-9]{1,4})\b.*", text)
            if found:
                code = int(found.group(1))
    elif text.strip():
        in_root, code = False, None
status = child.wait()
status = 128 - status if status < 0 else status
trusted = code if in_root and closed and status == 1 else None
ended = trusted if trusted in PASSED else status
if status != 0:
    said = f"; its first failing rank exited {trusted}" if trusted is not None else ""
    print(f"megatron-launch: torchrun exited {status}{said}; the pod exits {ended}", file=sys.stderr, flush=True)
sys.exit(ended)
""".replace("PASSED", repr(list(PASSED_ON))).replace("MARKER", repr(ROOT_CAUSE)).replace("LINE", str(MAX_LINE))
