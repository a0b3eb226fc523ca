"""Summarise a torch profiler chrome trace: per step, wall time against GPU-busy time, the largest idle gaps
(with the host ops running when each began), the host's waits for the GPU (a synchronisation of 1 ms or more,
with the op that asked for it: after one, the GPU idles while the host queues the next kernels) and the kernels
that take the most time.

    python scripts/trace_summary.py rank-0.json.gz
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import defaultdict


def main(path: str) -> None:
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    gpu = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"])
    # A step appears as a CPU op and as an annotation: keep one of each name.
    steps = list({e["name"]: e for e in sorted(events, key=lambda e: e["ts"])
                  if str(e.get("name", "")).startswith("ProfilerStep#")}.values())
    host = sorted((e for e in events if e.get("cat") in ("cpu_op", "user_annotation")), key=lambda e: e["ts"])
    for step in steps:
        t0, t1 = step["ts"], step["ts"] + step["dur"]
        busy, end, gaps, previous = 0.0, t0, [], "<step start>"
        for e in (e for e in gpu if t0 <= e["ts"] < t1):
            start, stop = e["ts"], e["ts"] + e["dur"]
            if start > end:
                gaps.append((start - end, end, previous, e["name"]))
            busy += max(0.0, stop - max(start, end))
            if stop > end:
                end, previous = stop, e["name"]
        print(f"{step['name']}: wall {step['dur'] / 1000:.1f} ms, GPU busy {busy / 1000:.1f} ms, "
              f"idle {(step['dur'] - busy) / 1000:.1f} ms")
        for gap, began, before, after in sorted(gaps, reverse=True)[:12]:
            running = [h["name"][:40] for h in host if h["ts"] <= began <= h["ts"] + h["dur"]][-3:]
            print(f"   idle {gap / 1000:5.2f} ms after {before[:50]!r} before {after[:50]!r}; host in {running}")
        waits = [e for e in events if e.get("cat") == "cuda_runtime" and "Synchronize" in e["name"]
                 and e["dur"] >= 1000 and t0 <= e["ts"] < t1]
        for wait in waits:
            asking = [h["name"][:40] for h in host if h["ts"] <= wait["ts"] <= h["ts"] + h["dur"]][-3:]
            print(f"   host waits {wait['dur'] / 1000:6.2f} ms in {wait['name']} at +{(wait['ts'] - t0) / 1000:.1f} ms;"
                  f" asked by {asking}")
    per_kernel = defaultdict(float)
    for e in gpu:
        per_kernel[e["name"][:90]] += e["dur"]
    n = max(len(steps), 1)
    per_stream = defaultdict(float)
    for e in gpu:
        per_stream[e.get("args", {}).get("stream")] += e["dur"]
    streams = ", ".join(f"stream {s}: {t / 1000 / n:.1f} ms"
                        for s, t in sorted(per_stream.items(), key=lambda kv: -kv[1]))
    # kernels on different streams overlap: their sum can exceed the step's wall time
    print(f"GPU time per step: {sum(per_kernel.values()) / 1000 / n:.1f} ms ({streams}); the largest:")
    for name, total in sorted(per_kernel.items(), key=lambda kv: -kv[1])[:25]:
        print(f"  {total / 1000 / n:7.2f} ms  {name}")


if __name__ == "__main__":
    main(sys.argv[1])
