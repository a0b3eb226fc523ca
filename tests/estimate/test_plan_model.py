"""The plan's model piece by piece: uneven pipeline stages, placement and the DP×CP optimizer sharding against
megatron-core's own code; CP in memory; each communication's overlap rule; the memory margin in the search."""

from __future__ import annotations

import inspect
from dataclasses import replace

import pytest
from plan_shapes import GPT_175B, LLAMA_LIKE

from launcher.estimate import formulas as est
from launcher.estimate import search as ps
from launcher.estimate import steptime
from launcher.estimate.stages import SplitError, split_layers

H100 = est.GPUS["h100-80gb"]
LLAMA_405B = dict(LLAMA_LIKE, num_layers=126, hidden_size=16384, num_attention_heads=128, ffn_hidden_size=53248,
                  seq_length=8192, max_position_embeddings=8192, global_batch_size=512,
                  use_distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True)

SPLITS = [  # num_layers, PP, VPP, first, last, embedding counted, loss counted
    (24, 4, 1, None, None, False, False),
    (24, 4, 3, None, None, False, False),
    (126, 8, 1, None, None, True, True),
    (126, 8, 8, None, None, True, True),
    (127, 8, 1, None, None, False, True),
    (30, 4, 1, 6, 6, False, False),
    (30, 4, 3, 9, 3, False, False),
    (61, 4, 1, 16, None, False, False),
]


@pytest.mark.parametrize("layers,pp,vpp,first,last,emb,loss", SPLITS)
def test_stage_split_is_megatrons(layers, pp, vpp, first, last, emb, loss) -> None:
    tb = pytest.importorskip("megatron.core.transformer.transformer_block")
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    config = TransformerConfig(
        num_layers=layers, hidden_size=64, num_attention_heads=4, pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None, pipeline_dtype=torch.float32,
        num_layers_in_first_pipeline_stage=first, num_layers_in_last_pipeline_stage=last,
        account_for_embedding_in_pipeline_split=emb, account_for_loss_in_pipeline_split=loss)
    ours = split_layers(layers, pp, vpp, first, last, emb, loss)
    for stage in ours:
        theirs = [tb.get_num_layers_to_build(config, vp_stage=v if vpp > 1 else None, pp_rank=stage.rank)
                  for v in range(vpp)]
        assert list(stage.chunk_layers) == theirs, stage
    assert sum(s.layers for s in ours) == layers


@pytest.mark.parametrize("layout,pp", [("Et*3|(tt|)*29,m|L", 8), ("Et*2|(t*2|)*34,t*3|(t*2|)*3,tL", 8),
                                       ("Ett|tt|tt|ttL", 4), ("E|t*4|t*4|t*4,L", 2)])
def test_explicit_layout_is_megatrons(layout: str, pp: int) -> None:
    ppl = pytest.importorskip("megatron.core.transformer.pipeline_parallel_layer_layout")
    from megatron.core.transformer.enums import LayerType

    theirs = ppl.PipelineParallelLayerLayout(layout, pp)
    layers = sum(chunk.count(LayerType.decoder) for rank in theirs.layout for chunk in rank)
    ours = split_layers(layers, pp, layout=layout)
    for stage in ours:
        assert list(stage.chunk_layers) == [c.count(LayerType.decoder) for c in theirs.layout[stage.rank]]
        assert stage.embedding == any(LayerType.embedding in c for c in theirs.layout[stage.rank])
        assert stage.loss == any(LayerType.loss in c for c in theirs.layout[stage.rank])


def test_uneven_splits_megatron_refuses_are_refused() -> None:
    with pytest.raises(SplitError, match="not divisible by PP 8"):
        split_layers(126, 8)
    with pytest.raises(SplitError, match="cannot be combined"):
        split_layers(30, 4, first=6, embedding_in_split=True)
    with pytest.raises(SplitError, match="do not divide evenly"):
        split_layers(30, 4, first=5, last=6)


@pytest.mark.parametrize("tp,cp,dp,pp", [(8, 1, 4, 2), (2, 2, 4, 2), (1, 1, 16, 1), (4, 2, 2, 4), (2, 4, 1, 2)])
def test_placement_follows_megatrons_rank_order(tp: int, cp: int, dp: int, pp: int) -> None:
    parallel_state = pytest.importorskip("megatron.core.parallel_state")
    node = 8
    gen = parallel_state.RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order="tp-cp-ep-dp-pp")

    def crosses(name: str) -> bool:
        return any(len({r // node for r in group}) > 1 for group in gen.get_ranks(name))

    t = est.Training(world_size=tp * cp * dp * pp, tp=tp, cp=cp, pp=pp)
    place = steptime.placement(t, node)
    assert (place.tp, place.cp, place.dp, place.pp) == (crosses("tp"), crosses("cp"), crosses("dp-cp"),
                                                         crosses("pp"))
    assert all(len(g) == t.dp_cp for g in gen.get_ranks("dp-cp"))


def test_distributed_optimizer_is_sharded_over_dp_times_cp() -> None:
    ddp = pytest.importorskip("megatron.core.distributed.distributed_data_parallel")
    # Megatron's buffers (and the distributed optimizer over them) use the DP group that includes CP.
    assert "data_parallel_group = self.intra_dp_cp_group" in inspect.getsource(ddp.DistributedDataParallel)
    t = est.Training(world_size=64, tp=4, cp=2, distributed_optimizer=True)
    assert t.dp == 8 and t.dp_cp == 16
    assert est.bytes_per_parameter(t)[2] == pytest.approx(12 / 16)
    assert est.bytes_per_parameter(replace(t, grad_reduce_in_bf16=True))[1] == 2


def test_context_parallel_divides_activations() -> None:
    m = est.model_shape(LLAMA_LIKE)
    t = est.Training(world_size=8, tp=2, micro_batch_size=1, global_batch_size=8, sequence_parallel=True)
    two = replace(t, cp=2)
    assert est.layer_activation_bytes(m, two) == pytest.approx(est.layer_activation_bytes(m, t) / 2)
    assert est.complete_memory(m, two).activations < 0.55 * est.complete_memory(m, t).activations


def test_fp8_stores_gemm_inputs_in_one_byte() -> None:
    m = est.model_shape(LLAMA_LIKE)
    t = est.Training(world_size=8, micro_batch_size=1, global_batch_size=8)
    assert est.layer_activation_bytes(m, replace(t, fp8=True)) < est.layer_activation_bytes(m, t)


def test_uneven_pipeline_in_memory_and_time() -> None:
    """Llama 3.1 405B: 126 layers on PP 8 only with the embedding and loss counted as layers."""
    t = est.training_of({**LLAMA_405B, "tensor_model_parallel_size": 8, "pipeline_model_parallel_size": 8,
                         "context_parallel_size": 2, "account_for_embedding_in_pipeline_split": True,
                         "account_for_loss_in_pipeline_split": True, "sequence_parallel": True}, 1024)
    m = est.model_shape(LLAMA_405B, 8)
    assert not ps.layout_problems(m, t)
    layers = [s.layers for s in est.stage_parameters(m, t)]
    assert layers == [15] + [16] * 6 + [15]
    step = steptime.step_time(m, t, H100)
    assert step.total > 0 and step.context_comm >= 0
    # The search finds the split by itself: 126 layers do not divide by 8.
    found = ps.search(LLAMA_405B | {"context_parallel_size": 2}, 1024, H100, top=20).best
    assert any(c.training.pp == 8 and c.training.embedding_in_split for c in found)


def test_overlap_rules() -> None:
    m = est.model_shape(GPT_175B, 8)
    t = est.training_of(GPT_175B, 1536)
    plain = steptime.step_time(m, t, H100)
    grads = steptime.step_time(m, replace(t, overlap_grad_reduce=True), H100)
    both = steptime.step_time(m, replace(t, overlap_grad_reduce=True, overlap_param_gather=True), H100)
    assert both.data_comm < grads.data_comm < plain.data_comm
    assert both.data_comm > 0  # at least the last bucket stays exposed
    # The parameter all-gather exists only with the distributed optimizer.
    no_dist = replace(t, distributed_optimizer=False, overlap_grad_reduce=True, overlap_param_gather=True)
    assert steptime.step_time(m, no_dist, H100).data_comm == pytest.approx(
        steptime.step_time(m, replace(no_dist, overlap_param_gather=False), H100).data_comm)
    assert steptime.step_time(m, replace(t, tp_comm_overlap=True), H100).tensor_comm < plain.tensor_comm
    assert steptime.step_time(m, replace(t, grad_reduce_in_bf16=True), H100).data_comm < plain.data_comm
    assert steptime.step_time(m, replace(t, fp8=True), H100).compute < plain.compute


def test_context_parallel_ring_hides_behind_attention() -> None:
    m = est.model_shape(LLAMA_LIKE)
    t = est.Training(world_size=16, tp=1, cp=2, micro_batch_size=1, global_batch_size=16)
    assert steptime.step_time(m, t, H100).context_comm == 0  # inside a node, 4096 tokens: attention is longer
    slow = steptime.step_time(m, replace(t, cp=16, world_size=16), est.GPUS["l40s-48gb"], gpus_per_node=1)
    assert slow.context_comm > 0


def test_search_never_ranks_a_layout_above_the_margin() -> None:
    """`launch plan 175b --gpus 1024 --gpu h100-80gb` once ranked a layout at 99.8 % third."""
    found = ps.search(GPT_175B, 1024, H100, top=20).best
    assert found and all(c.memory.total <= est.USABLE_FRACTION * H100.memory_bytes for c in found)
    assert len({(c.training.tp, c.training.pp) for c in found}) == len(found)  # each TP·PP once
