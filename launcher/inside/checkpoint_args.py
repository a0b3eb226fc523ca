"""Read what a Megatron checkpoint says about itself (its args, iteration, format version, content metadata)
without running it and without loading its weights. Runs under the Megatron interpreter (it needs torch), as a
plain script:

    python checkpoint_args.py FILE    →  one JSON object on stdout

FILE is `common.pt` of a torch_dist checkpoint or `model_optim_rng.pt` of a torch one. A checkpoint is data
someone else may have written: it is read with torch.load(weights_only=True), whose unpickler builds only the
types allowed here. Of those, argparse.Namespace, signal.Signals and numpy's arrays are the real, inert types;
every Megatron class the file names (enums such as AttnBackend, RerunState, OptimizerConfig) is replaced by a
stand-in that records its name and arguments and runs no Megatron code. Any other global is refused before
anything is built (torch lists them without unpickling). Zip-format files are memory-mapped, so the weights
beside the args are never read; an old non-zip file is read only up to MAX_LEGACY_BYTES.
"""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Any

MAX_LEGACY_BYTES = 64 << 20
MAX_ARGS = 5000  # a Namespace with more attributes than Megatron has is not read further
MAX_TEXT = 2000  # characters of one string value
MAX_LIST = 64  # items of one list value (data_path blends are weight/prefix pairs)
MAX_INT_BITS = 64  # no setting Megatron stores holds a larger integer
# The real types a checkpoint may hold besides Megatron's own (megatron/core/safe_globals.py lists the same).
REAL_GLOBALS = ("argparse.Namespace", "signal.Signals", "types.SimpleNamespace", "pathlib.PosixPath",
                "numpy.ndarray", "numpy.dtype", "numpy.core.multiarray._reconstruct",
                "numpy._core.multiarray._reconstruct", "torch._C.Generator")
STAND_IN_PREFIX = "megatron."


class StandIn:
    """What a Megatron class in the file becomes: its qualified name and what the file passed to it."""

    qualified_name = "?"

    def __init__(self, *args: Any) -> None:
        self.args = args
        self.state: Any = None

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __repr__(self) -> str:
        shown = ",".join(str(a) for a in self.args[:1])
        return f"{self.qualified_name.rsplit('.', 1)[-1]}({shown})"


def _stand_in(name: str) -> type:
    return type("StandIn", (StandIn,), {"qualified_name": name, "__module__": __name__})


def _real(name: str) -> Any:
    import argparse
    import pathlib
    import signal
    import types

    import numpy
    import torch

    reconstruct = getattr(numpy, "_core", numpy.core).multiarray._reconstruct
    return {"argparse.Namespace": argparse.Namespace, "signal.Signals": signal.Signals,
            "types.SimpleNamespace": types.SimpleNamespace, "pathlib.PosixPath": pathlib.PosixPath,
            "numpy.ndarray": numpy.ndarray, "numpy.dtype": numpy.dtype,
            "numpy.core.multiarray._reconstruct": reconstruct, "numpy._core.multiarray._reconstruct": reconstruct,
            "torch._C.Generator": torch._C.Generator}[name]


def _plain(value: Any, depth: int = 0) -> Any:
    """A JSON value for one stored setting: scalars, short lists, names of stand-ins; None for anything else."""
    if type(value).__name__ == "Signals":
        return getattr(value, "name", str(value))
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
        # json.dumps (as str()) refuses an integer past 4,300 digits, and the whole reply with it: said, not written
        return f"an integer of {value.bit_length()} bits"
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return value[:MAX_TEXT]
    if isinstance(value, StandIn):
        return repr(value)[:MAX_TEXT]
    if isinstance(value, (list, tuple)) and depth == 0:
        return [_plain(item, 1) for item in value[:MAX_LIST]]
    return None


def read(path: str) -> dict[str, Any]:
    import numpy
    import torch

    if not os.path.isfile(path):
        return {"error": f"{path} is not a file"}
    size = os.path.getsize(path)
    zipped = _is_zip(path)
    if not zipped and size > MAX_LEGACY_BYTES:
        return {"error": f"{path} is an old (non-zip) torch file of {size} bytes: not read (more than "
                         f"{MAX_LEGACY_BYTES >> 20} MiB would be loaded to reach its args)"}
    try:
        names = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception as exc:  # noqa: BLE001 - any failure to read the file is the answer
        # not a file torch.save wrote, or one cut short: torch.load at Megatron's load fails the same way
        return {"error": f"cannot list the types in {path}: {type(exc).__name__}: {' '.join(str(exc).split())[-600:]}",
                "damaged": True}
    refused = [n for n in names if n not in REAL_GLOBALS and not n.startswith(STAND_IN_PREFIX)]
    if refused:
        return {"error": f"{path} holds types a Megatron checkpoint does not ({', '.join(sorted(refused)[:5])}): "
                         "not read"}
    allowed: list[Any] = []
    for name in names:
        if name.startswith(STAND_IN_PREFIX):
            allowed.append((_stand_in(name), name))
        else:
            allowed.append((_real(name), name))
    # numpy's dtype classes (an RNG state's uint32 array builds numpy.dtypes.UInt32DType): inert, and not listed
    # by torch's scan because the dtype's own reduce names them
    allowed += [cls for cls in vars(numpy.dtypes).values() if isinstance(cls, type) and issubclass(cls, numpy.dtype)]
    try:
        with torch.serialization.safe_globals(allowed), numpy.errstate(all="ignore"):
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=zipped)
    except Exception as exc:  # noqa: BLE001
        return {"error": f"cannot read {path} safely: {type(exc).__name__}: {' '.join(str(exc).split())[-600:]}"}
    if not isinstance(state, dict):
        return {"error": f"{path} holds a {type(state).__name__}, not a Megatron checkpoint's dict", "damaged": True}
    stored = state.get("args")
    values = vars(stored) if hasattr(stored, "__dict__") and not isinstance(stored, StandIn) else None
    args = None
    if isinstance(values, dict):
        args = {str(k): _plain(v) for k, v in list(values.items())[:MAX_ARGS]}
    content = state.get("content_metadata")
    return {
        "args": args,
        "iteration": _plain(state.get("iteration")),
        "checkpoint_version": _plain(state.get("checkpoint_version")),
        "content_metadata": ({str(k): _plain(v) for k, v in list(content.items())[:100]}
                             if isinstance(content, dict) else None),
        "keys": sorted(str(k) for k in list(state)[:100]),
        "stand_ins": sorted(n for n in names if n.startswith(STAND_IN_PREFIX)),
    }


def _is_zip(path: str) -> bool:
    with open(path, "rb") as handle:
        return handle.read(4) == b"PK\x03\x04"


def main() -> int:
    if len(sys.argv) != 2:
        print(json.dumps({"error": "usage: checkpoint_args.py FILE"}))
        return 2
    print(json.dumps(read(sys.argv[1]), allow_nan=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
