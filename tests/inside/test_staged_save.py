"""The staged checkpoint copy: the writer process gets the staging buffer's descriptor and each tensor's place in
it, and writes exactly the tensors (each with a storage of its own size) that upstream's hand-off would give it."""

import io
import multiprocessing
import socket

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.megatron

from launcher.inside.megatron_ext import staged_save  # noqa: E402
from launcher.inside.megatron_ext.staged_save import HostStage, StagedBuckets, TensorPlace, WriteFromStage  # noqa: E402


def _buckets():
    """Upstream's WriteBucket layout: (path, file name, (bytes items, tensor items)) per file."""
    tensors = [torch.arange(12, dtype=torch.float32).view(3, 4), torch.tensor([True, False, True]),
               torch.arange(6, dtype=torch.bfloat16).view(2, 3).t(),  # not contiguous
               torch.tensor(7, dtype=torch.int64), torch.empty(0, 5)]
    return [("/ckpt/__0_0.distcp", "__0_0.distcp", ([("bytes-item", io.BytesIO(b"common"))],
                                                    [(f"item{i}", t) for i, t in enumerate(tensors[:3])])),
            ("/ckpt/__0_1.distcp", "__0_1.distcp", ([], [(f"item{i}", t) for i, t in enumerate(tensors[3:], 3)]))]


def record_write(rank, write_buckets, results_queue):
    """Stands for upstream's write_preloaded_data_multithread: torch.save each tensor, report what was written."""
    written = {}
    for _, _, (bytes_data, tensor_data) in write_buckets:
        for item, data in bytes_data:
            written[item] = data.getvalue()
        for item, tensor in tensor_data:
            stream = io.BytesIO()
            torch.save(tensor, stream)
            written[item] = (torch.load(io.BytesIO(stream.getvalue())).tolist(), len(stream.getvalue()),
                             tensor.untyped_storage().nbytes())
    results_queue.put((rank, written))


def _writer_process(requests, results):
    write, rank, staged = requests.get()
    write(rank, staged, results)


def test_the_writer_process_writes_the_staged_tensors_each_with_its_own_storage():
    buckets = _buckets()
    stage = HostStage()
    staged = stage.stage(buckets, on_device=False)
    assert isinstance(staged, StagedBuckets)
    assert all(isinstance(t, TensorPlace) for _, _, (_, items) in staged.buckets for _, t in items)
    context = multiprocessing.get_context("forkserver")  # as Megatron starts its persistent writer
    requests, results = context.Queue(), context.Queue()
    process = context.Process(target=_writer_process, args=(requests, results))
    process.start()
    try:
        requests.put((WriteFromStage(record_write), 0, staged))
        rank, written = results.get(timeout=60)
    finally:
        process.join(timeout=30)
        stage.release()
    assert rank == 0 and written["bytes-item"] == b"common"
    originals = {item: t for _, _, (_, items) in buckets for item, t in items}
    for item, tensor in originals.items():
        values, saved_bytes, storage_bytes = written[item]
        assert values == tensor.tolist()
        assert storage_bytes == tensor.numel() * tensor.element_size()  # not the whole buffer
        assert saved_bytes < 2048 + storage_bytes


def test_a_second_save_reuses_the_buffer_and_sees_the_new_values():
    stage = HostStage()
    first = torch.zeros(1000)
    bucket = [("/c/f", "f", ([], [("w", first)]))]
    assert stage.stage(bucket, on_device=False) is not None
    buffer, size = stage.tensor.data_ptr(), stage.size
    staged = stage.stage([("/c/f", "f", ([], [("w", first + 1)]))], on_device=False)
    try:
        assert (stage.tensor.data_ptr(), stage.size) == (buffer, size)
        [(_, _, (_, [(_, tensor)]))] = staged.materialize()
        assert tensor.tolist() == [1.0] * 1000
    finally:
        staged_save._WORKER_MAP.clear()
        stage.release()


def test_no_buffer_where_it_would_take_the_hosts_spare_memory(monkeypatch):
    monkeypatch.setattr(staged_save, "_available_memory", lambda: 64 << 20)
    stage = HostStage()
    assert stage.stage([("/c/f", "f", ([], [("w", torch.zeros(16 << 20))]))], on_device=False) is None
    assert "available host memory" in stage.refused


def test_the_patched_hand_off_sends_the_staged_request_and_leaves_others_to_megatron(monkeypatch):
    pytest.importorskip("megatron.core")
    from megatron.core.dist_checkpointing.strategies import async_utils

    sent = []
    monkeypatch.setattr(async_utils.PersistentAsyncCaller, "schedule_async_call",
                        lambda self, request: sent.append(request))
    monkeypatch.setattr(async_utils.PersistentAsyncCaller, "_persistent_process", None)
    monkeypatch.setattr(staged_save, "ON_DEVICE", False)
    monkeypatch.setattr(staged_save, "STAGE", HostStage())
    from megatron.training import training

    monkeypatch.setattr(training, "train", training.train)  # install() wraps it too: restored after the test
    assert staged_save.install() is True
    assert training.train.__wrapped__ is not None
    assert staged_save.install() is False
    caller = async_utils.PersistentAsyncCaller()
    buckets = _buckets()
    request = async_utils.AsyncRequest(record_write, (0, buckets, None), [], preload_fn=lambda: buckets)
    try:
        caller.schedule_async_call(request)
        caller.schedule_async_call(request._replace(preload_fn=None))
    finally:
        staged_save.STAGE.release()
    staged, untouched = sent
    assert staged.preload_fn is None and isinstance(staged.async_fn, WriteFromStage)
    assert isinstance(staged.async_fn_args[1], StagedBuckets)
    assert untouched.async_fn is record_write and untouched.async_fn_args[1] is buckets


def _megatron_writer(requests, results):
    """The persistent writer's part of a request: its async function on its arguments (async_utils.async_loop)."""
    write, args = requests.get()
    write(*args)
    results.put("written")


def test_a_megatron_torch_dist_save_written_from_the_staged_buffer_loads_back_equal(tmp_path, monkeypatch):
    """Megatron's own planning, files and finalisation; only the copy and the hand-off staged, in a forkserver
    process as Megatron's persistent writer is. (On CPU: gloo, and the CUDA scalar of the finalisation on CPU.)"""
    pytest.importorskip("megatron.core")
    import torch.distributed as dist
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing import ShardedTensor

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        monkeypatch.setenv("MASTER_PORT", str(free.getsockname()[1]))
    dist.init_process_group("gloo", rank=0, world_size=1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    try:
        values = {"embedding": torch.randn(50, 16), "layer.weight": torch.randn(16, 16).to(torch.bfloat16),
                  "layer.exp_avg": torch.randn(16, 16).t(), "step": torch.tensor(3)}
        state = {name: ShardedTensor.from_rank_offsets(name, tensor.clone()) for name, tensor in values.items()}
        state["iteration"] = 7
        request = dist_checkpointing.save(state, str(tmp_path), async_sharded_save=True, async_strategy="mcore")
        assert request.preload_fn is not None  # the tensors would have gone to the writer for it to copy
        stage = HostStage()
        args = list(request.async_fn_args)
        args[1] = stage.stage(args[1], on_device=False)
        assert sum(isinstance(t, TensorPlace) for _, _, (_, items) in args[1].buckets for _, t in items) == 4
        context = multiprocessing.get_context("forkserver")
        requests, results = context.Queue(), context.Queue()
        writer = context.Process(target=_megatron_writer, args=(requests, results))
        writer.start()
        requests.put((WriteFromStage(request.async_fn), tuple(args)))
        assert results.get(timeout=120) == "written"
        writer.join(timeout=30)
        for finalize in request.finalize_fns:
            finalize()
        stage.release()
        template = {name: ShardedTensor.from_rank_offsets(name, torch.zeros_like(tensor.contiguous()))
                    for name, tensor in values.items()}
        template["iteration"] = None
        loaded = dist_checkpointing.load(template, str(tmp_path))
    finally:
        dist.destroy_process_group()
    assert loaded["iteration"] == 7
    assert sum(f.stat().st_size for f in tmp_path.glob("*.distcp")) < 64 << 10  # each tensor, not the buffer
    for name, tensor in values.items():
        assert torch.equal(loaded[name], tensor), name
