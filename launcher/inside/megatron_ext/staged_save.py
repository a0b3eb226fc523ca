"""Megatron's asynchronous checkpoint save with the copy to host memory done in the training process, into one
pinned buffer that lives as long as the run.

Upstream (``--async-save --use-persistent-ckpt-worker --async-strategy mcore``) pickles every GPU tensor of the
checkpoint to the persistent writer process through CUDA IPC, and the training loop waits while that process opens
each shared allocation and copies each tensor to host memory, page-locked by its caching allocator at its first
save (async_utils.py, ``PersistentAsyncCaller.schedule_async_call``: ``_persistent_preload_q.join()``). Here the
training process copies the tensors itself, on a side stream, into one page-locked buffer kept for the run
(``memfd_create`` memory registered with CUDA once, made in a background thread when training starts and sized from
the model and the optimizer): nothing is allocated or opened per save, and the writer receives the buffer's file
descriptor plus each tensor's place in it instead of CUDA handles.
The writer process then writes exactly what upstream's would (same files, same items, each tensor with a storage of
its own size), from the shared pages.

Only the copy and the hand-off change: the plan, the files, the finalisation and the checks stay Megatron's. The
buffer is rewritten only after the writer has finished the previous save (upstream's writer, too, copies the next
save only then). Where the buffer cannot be had (no memory to spare, CUDA refuses to register it), the save takes
upstream's path and says why once.
"""

from __future__ import annotations

import mmap
import os
import threading
import time
from dataclasses import dataclass
from multiprocessing import reduction
from typing import Any

import torch

ALIGN = 4096  # each tensor starts on its own page in the buffer
GROWTH = 1.0625  # room for a later save slightly larger than the first (e.g. a scalar state added)
HOST_REGISTER_PORTABLE = 1  # cudaHostRegisterPortable: page-locked for every CUDA context, whichever thread registers
MEMORY_RESERVE = 0.25  # leave at least this share of the host's available memory free


@dataclass(frozen=True)
class TensorPlace:
    """Where one tensor lies in the staging buffer."""
    offset: int
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass
class StagedBuckets:
    """What the writer process gets in place of upstream's write buckets: the buffer's descriptor and where each
    tensor is in it. Picklable; the descriptor travels through multiprocessing's resource sharer (``DupFd``)."""
    fd: Any  # multiprocessing.reduction.DupFd
    size: int
    buckets: list  # upstream's WriteBucket layout with TensorPlace in place of each GPU tensor

    def materialize(self) -> list:
        """Upstream's write buckets, each staged tensor a view of the shared pages with a storage of its own size
        (torch.save writes a tensor's whole storage)."""
        view = _worker_mapping(self.fd.detach(), self.size)
        result = []
        for file_path, file_name, (bytes_data, tensor_data) in self.buckets:
            tensors = [(item, _tensor_at(view, t) if isinstance(t, TensorPlace) else t) for item, t in tensor_data]
            result.append((file_path, file_name, (bytes_data, tensors)))
        return result


def _tensor_at(view: memoryview, place: TensorPlace) -> torch.Tensor:
    if place.numel == 0:
        return torch.empty(place.shape, dtype=place.dtype)
    return torch.frombuffer(view, dtype=place.dtype, count=place.numel, offset=place.offset).view(place.shape)


_WORKER_MAP: dict[str, Any] = {}  # the writer process keeps the buffer mapped between saves


def _worker_mapping(fd: int, size: int) -> memoryview:
    st = os.fstat(fd)
    key = (st.st_dev, st.st_ino, size)
    if _WORKER_MAP.get("key") == key:
        os.close(fd)
        return _WORKER_MAP["view"]
    mapped = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    os.close(fd)
    _WORKER_MAP.update(key=key, map=mapped, view=memoryview(mapped))
    return _WORKER_MAP["view"]


class WriteFromStage:
    """The writer's function, given the staged buckets: upstream's write with the buckets materialised first."""

    def __init__(self, write: Any) -> None:
        self.write = write

    def __call__(self, rank: int, staged: StagedBuckets, results_queue: Any) -> None:
        start = time.perf_counter()
        result = self.write(rank, staged.materialize(), results_queue)
        if rank == 0 and os.environ.get("MEGATRON_LAUNCH_SAVE_PHASES", "") not in ("", "0"):
            written = sum(t.numel * t.dtype.itemsize for _, _, (_, items) in staged.buckets for _, t in items
                          if isinstance(t, TensorPlace))
            print(f"> megatron-launch checkpoint writer: {written / 2**30:.2f} GiB written and synced in "
                  f"{time.perf_counter() - start:.2f} s", flush=True)
        return result


class HostStage:
    """The training process's page-locked, shareable staging buffer."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.size = 0
        self.map: mmap.mmap | None = None
        self.tensor: torch.Tensor | None = None
        self.stream: torch.cuda.Stream | None = None
        self.refused: str | None = None
        self.pinned = False
        self.lock = threading.Lock()  # a save waits for a buffer still being made in the background

    def ensure(self, nbytes: int, pin: bool = True) -> bool:
        """A buffer of at least nbytes, page-locked with CUDA where pin; False (and self.refused says why) where it
        cannot be had."""
        if self.tensor is not None and nbytes <= self.size:
            return True
        if self.refused:
            return False
        self.release()
        size = -(-int(nbytes * GROWTH) // (2 << 20)) * (2 << 20)
        available = _available_memory()
        if available is not None and size > available * (1 - MEMORY_RESERVE):
            self.refused = (f"a {size / 2**30:.1f} GiB staging buffer would leave less than "
                            f"{MEMORY_RESERVE:.0%} of the {available / 2**30:.1f} GiB of available host memory")
            return False
        fd = os.memfd_create("megatron-launch-checkpoint-stage", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            mapped = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as error:
            os.close(fd)
            self.refused = f"no shared host memory for the staging buffer ({error})"
            return False
        tensor = torch.frombuffer(mapped, dtype=torch.uint8)
        tensor.fill_(0)  # the pages made now, not by the first copy (or by the page-locking, all at once)
        status = _code(torch.cuda.cudart().cudaHostRegister(tensor.data_ptr(), size, HOST_REGISTER_PORTABLE)) \
            if pin else 0
        if status != 0:
            del tensor
            mapped.close()
            os.close(fd)
            self.refused = f"CUDA did not page-lock the staging buffer (cudaHostRegister error {status})"
            return False
        self.fd, self.size, self.map, self.tensor, self.pinned = fd, size, mapped, tensor, pin
        return True

    def prepare(self, nbytes: int) -> threading.Thread:
        """Make the buffer in a background thread (at launch, so that the first save finds it ready)."""

        device = torch.cuda.current_device()

        def make() -> None:
            try:
                torch.cuda.set_device(device)  # a new thread starts on device 0
                with self.lock:
                    self.ensure(nbytes)
            except Exception as error:  # the first save tries again, and says why if it cannot
                _say_once(f"> megatron-launch staged checkpoint copy: buffer not prepared at launch ({error})")

        thread = threading.Thread(target=make, name="megatron-launch-checkpoint-stage", daemon=True)
        thread.start()
        return thread

    def release(self) -> None:
        if self.tensor is None:
            return
        if self.pinned:
            torch.cuda.cudart().cudaHostUnregister(self.tensor.data_ptr())
        self.tensor = None
        if self.map is not None:
            self.map.close()
        if self.fd is not None:
            os.close(self.fd)
        self.fd, self.map, self.size = None, None, 0

    def stage(self, buckets: list, on_device: bool = True) -> StagedBuckets | None:
        """Copy every CUDA tensor of upstream's write buckets (every tensor, where not on_device) into the buffer;
        None where the buffer is refused."""
        places: list[tuple[torch.Tensor, int]] = []
        end = 0
        for _, _, (_, tensor_data) in buckets:
            for _, tensor in tensor_data:
                if isinstance(tensor, torch.Tensor) and (tensor.is_cuda or not on_device):
                    places.append((tensor, end))
                    end += -(-tensor.numel() * tensor.element_size() // ALIGN) * ALIGN
        with self.lock:
            if not self.ensure(max(end, ALIGN), pin=on_device):
                return None
        assert self.tensor is not None and self.fd is not None
        staged_place: dict[int, TensorPlace] = {}

        def copy_all() -> None:
            assert self.tensor is not None
            for tensor, offset in places:
                nbytes = tensor.numel() * tensor.element_size()
                if nbytes:
                    target = self.tensor[offset:offset + nbytes].view(tensor.dtype).view(tensor.shape)
                    target.copy_(tensor, non_blocking=on_device)
                staged_place[id(tensor)] = TensorPlace(offset, tensor.dtype, tuple(tensor.shape))

        if on_device:
            if self.stream is None:
                self.stream = torch.cuda.Stream()
            self.stream.wait_stream(torch.cuda.current_stream())  # the tensors' values as the step left them
            with torch.cuda.stream(self.stream):
                copy_all()
            self.stream.synchronize()
        else:
            copy_all()
        out = []
        for file_path, file_name, (bytes_data, tensor_data) in buckets:
            tensors = [(item, staged_place.get(id(t), t)) for item, t in tensor_data]
            out.append((file_path, file_name, (bytes_data, tensors)))
        return StagedBuckets(reduction.DupFd(self.fd), self.size, out)


def _code(status: Any) -> int:
    """A cudaError_t from torch.cuda.cudart() as an int (a pybind11 enum or already an int)."""
    return int(getattr(status, "value", status))


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


STAGE = HostStage()
ON_DEVICE = True  # stage the CUDA tensors (tests stage CPU ones)
_SAID: set[str] = set()


def _say_once(text: str) -> None:
    if text in _SAID:
        return
    _SAID.add(text)
    if not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0:
        print(text, flush=True)


def expected_bytes(model: Any, optimizer: Any) -> int:
    """About what a save copies: the model's parameters, and the optimizer's main parameters with two states of
    their size each (Adam's moments). A save that needs more grows the buffer then."""
    seen: set[int] = set()

    def size(tensors: Any) -> int:
        total = 0
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.is_cuda and t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                total += t.numel() * t.element_size()
        return total

    chunks = model if isinstance(model, (list, tuple)) else [model]
    model_bytes = sum(size(chunk.parameters()) for chunk in chunks)
    optimizers = getattr(optimizer, "chained_optimizers", None) or [optimizer]
    main = 0
    for opt in optimizers:
        inner = getattr(opt, "optimizer", None)
        for group in getattr(inner, "param_groups", []):
            main += size(group["params"])
    return model_bytes + 3 * main


def _prepare_at_training_start() -> None:
    """Make the buffer in the background when training starts (the model and optimizer exist then; this module is
    imported while the model is built), where the job saves that way."""
    from megatron.training import training

    upstream = training.train
    if getattr(upstream, "_megatron_launch_staged", False):
        return

    def train(forward_step_func, model, optimizer, *args, **kwargs):
        try:
            from megatron.training import get_args

            margs = get_args()
            if (margs.save and margs.async_save and margs.use_persistent_ckpt_worker
                    and margs.async_strategy == "mcore" and margs.ckpt_format == "torch_dist"):
                STAGE.prepare(expected_bytes(model, optimizer))
        except Exception as error:  # the first save then makes the buffer itself
            _say_once(f"> megatron-launch staged checkpoint copy: buffer not prepared at launch ({error})")
        return upstream(forward_step_func, model, optimizer, *args, **kwargs)

    train._megatron_launch_staged = True
    train.__wrapped__ = upstream
    training.train = train


def wait_for_writer(caller: Any) -> None:
    """Until the persistent writer has finished every request it was given: the previous save's write reads the
    buffer that this save's copy overwrites (upstream's writer, too, copies a save only after the previous write)."""
    if caller._persistent_process is not None and caller._persistent_queue is not None:
        caller._persistent_queue.join()


def install() -> bool:
    """Patch Megatron's persistent checkpoint worker hand-off (mcore strategy); False where already done."""
    from megatron.core.dist_checkpointing.strategies import async_utils

    caller = async_utils.PersistentAsyncCaller
    upstream = caller.schedule_async_call
    if getattr(upstream, "_megatron_launch_staged", False):
        return False

    def schedule_async_call(self, async_req):
        if async_req.async_fn is None or async_req.preload_fn is None or len(async_req.async_fn_args) != 3:
            return upstream(self, async_req)
        wait_for_writer(caller)
        args = list(async_req.async_fn_args)
        staged = STAGE.stage(args[1], on_device=ON_DEVICE)
        if staged is None:
            _say_once(f"> megatron-launch staged checkpoint copy: off ({STAGE.refused}); Megatron's own hand-off")
            return upstream(self, async_req)
        _say_once(f"> megatron-launch staged checkpoint copy: {STAGE.size / 2**30:.2f} GiB page-locked host buffer")
        args[1] = staged
        request = async_req._replace(async_fn=WriteFromStage(async_req.async_fn), async_fn_args=tuple(args),
                                     preload_fn=None)
        return upstream(self, request)

    schedule_async_call._megatron_launch_staged = True
    caller.schedule_async_call = schedule_async_call
    try:
        _prepare_at_training_start()
    except ImportError:  # megatron-core alone: no training loop
        pass
    return True
