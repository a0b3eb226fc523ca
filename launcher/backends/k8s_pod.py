"""What runs torchrun in each pod of a JobSet, so that the pod's exit status says what the JobSet's failure policy
needs to know (backends/k8s.py renders the policy).

torchrun exits 1 whatever its ranks exited with (its ChildFailedError), so a pod that ran torchrun as PID 1 could not
tell Megatron's "no retry can fix this" from a crash: Megatron's argument parser (exit 2 on every rank) and its failed
result validation (EXIT_CODE_FAILED_ON_RESULT_VALIDATION, 17, on every rank) were restarted like any failure. The
supervisor runs torchrun as its child, forwards SIGTERM and SIGINT to it (the kubelet signals PID 1 only), passes its
standard error through, reads torchrun's "Root Cause (first observed failure)" block, and exits with the first
failing rank's code where that code is one the policy acts on (2, 16, 17), else with torchrun's own status. Every
rank exits with these codes, so every pod of the attempt says the same. Plain Python (the image's python3, standard
library only), passed in the pod's environment; no `$(` and no `$$` (Kubernetes would expand them).
"""

from __future__ import annotations

INPUT_ERROR = 2  # bad input (a data file missing, a package missing, Megatron's argument parser): no retry helps
RESUME_TO_DISAMBIGUATE = 16  # Megatron's rerun state machine: resume from its checkpoint, on other hardware
FAILED_ON_RESULT_VALIDATION = 17  # Megatron's result validation failed: settled, no retry helps
PASSED_ON = (INPUT_ERROR, RESUME_TO_DISAMBIGUATE, FAILED_ON_RESULT_VALIDATION)
NOT_RETRIED = (INPUT_ERROR, FAILED_ON_RESULT_VALIDATION)

SUPERVISOR = r"""
import re, signal, subprocess, sys
child = subprocess.Popen(sys.argv[1:], stderr=subprocess.PIPE)
def forward(number, frame):
    child.send_signal(number)
signal.signal(signal.SIGTERM, forward)
signal.signal(signal.SIGINT, forward)
in_root, code = False, None
for raw in child.stderr:
    sys.stderr.buffer.write(raw)
    sys.stderr.buffer.flush()
    line = raw.decode("utf-8", "replace")
    if "Root Cause (first observed failure):" in line:
        in_root = True
    elif in_root and code is None:
        found = re.match(r"\s*exitcode\s*: (-?[0-9]{1,4})\b", line)
        if found:
            code = int(found.group(1))
status = child.wait()
status = 128 - status if status < 0 else status
ended = code if status != 0 and code in PASSED else status
if status != 0:
    said = f"; its first failing rank exited {code}" if code is not None else ""
    print(f"megatron-launch: torchrun exited {status}{said}; the pod exits {ended}", file=sys.stderr, flush=True)
sys.exit(ended)
""".replace("PASSED", repr(list(PASSED_ON)))
