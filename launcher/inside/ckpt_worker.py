"""The persistent checkpoint writer's start (``--use-persistent-ckpt-worker``), with the writer's own imports moved
from its first save to its start.

Megatron starts the writer process when it initializes, but the process imports the writing code (the
dist-checkpointing file writer, which imports megatron.core's optimizer, models and more: 1.4 s on an H200 host,
~6 s on a small CPU machine) only when it unpickles its first request, so the first save's write (at the end of a
short run: the whole wait for it) starts that much later. Here the process imports it as soon as it starts, while
the training process is still building the model; then Megatron's own loop runs, unchanged.

The training processes' start-up hook (launcher/inside/site/sitecustomize.py, MEGATRON_LAUNCH_CKPT_WORKER=preimport)
makes ``PersistentAsyncCaller.async_loop`` this module's ``async_loop``, keeping Megatron's as UPSTREAM_ATTR; the
writer process is given this function as its target (multiprocessing pickles it by name).
"""

from __future__ import annotations

import importlib
from typing import Any

WRITER_MODULES = ("megatron.core.dist_checkpointing.strategies.filesystem_async",)
UPSTREAM_ATTR = "_megatron_launch_upstream_async_loop"


def async_loop(*args: Any, **kwargs: Any) -> Any:
    """The writer process's target: the writer's imports, then Megatron's loop."""
    for name in WRITER_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - only time is at stake: the first request imports it as upstream's would
            pass
    from megatron.core.dist_checkpointing.strategies.async_utils import PersistentAsyncCaller

    upstream = getattr(PersistentAsyncCaller, UPSTREAM_ATTR, None) or PersistentAsyncCaller.async_loop
    return upstream(*args, **kwargs)


def install(async_utils: Any) -> None:
    """Make the writer start with async_loop (called right after Megatron's async_utils module is executed)."""
    caller = async_utils.PersistentAsyncCaller
    if getattr(caller, UPSTREAM_ATTR, None) is None:
        setattr(caller, UPSTREAM_ATTR, staticmethod(caller.async_loop))
        caller.async_loop = staticmethod(async_loop)
