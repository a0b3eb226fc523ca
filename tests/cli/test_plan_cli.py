"""`launch plan` as a user types it (subprocess)."""

import json

import pytest

NO_KERNELS = ["--set", "transformer_engine=false", "--set", "apex=false"]


def test_plan_175b_json(launch):
    code, out, err = launch("plan", "175b", "--gpus", "1024", "--tokens", "300B", "--format", "json", "--top", "3")
    assert code == 0, err
    data = json.loads(out)
    assert (data["nodes"], data["gpus_per_node"], data["world_size"]) == (128, 8, 1024)
    assert data["model"]["padded_vocab_size"] == 51200
    assert 174e9 < data["model"]["parameters"] < 176e9
    assert data["layout"]["valid"] and data["layout"]["dp"] == 8
    for part in ("weights", "gradients", "optimizer", "activations", "total"):
        assert data["memory"]["megatron"][part] > 0 and data["memory"]["complete"][part] > 0
    assert data["memory"]["fits"] in ("fits", "tight", "does not fit")
    assert data["time"]["seconds_to_tokens"] > 86400
    best = data["search"]["best"]
    assert len(best) == 3 and best[0]["seconds_per_iteration"] <= best[-1]["seconds_per_iteration"]
    # Never a layout above the stated margin (it once ranked one at 99.8 % third).
    usable = data["gpu"]["usable_fraction"] * data["gpu"]["memory_gib"]
    assert all(c["fits"] == "fits" and c["memory_gib"] <= usable for c in best)
    assert len({(c["tp"], c["pp"]) for c in best}) == 3
    step = data["time"]["step"]
    parts = ("compute", "recompute", "bubble", "tensor_comm", "context_comm", "pipeline_comm", "data_comm",
             "optimizer")
    assert step["total"] == pytest.approx(sum(step[k] for k in parts))
    assert data["search"]["alternatives"]


def test_plan_overrides_reproduce_the_listed_layout(launch):
    code, out, err = launch("plan", "345m", "--gpus", "8", "--format", "json", "--top", "2", *NO_KERNELS)
    assert code == 0, err
    first = json.loads(out)["search"]["best"][0]
    command = first["command"]
    assert command[:2] == ["launch", "345m"]
    # Planning the suggested command again shows that layout as the preset's own.
    sets = [w for i, w in enumerate(command) if i and command[i - 1] == "--set"]
    code, out, err = launch("plan", "345m", "--gpus", "8", "--format", "json", *NO_KERNELS,
                            *[x for s in sets for x in ("--set", s)])
    assert code == 0, err
    own = json.loads(out)["layout"]
    for key in ("tp", "pp", "vpp", "dp", "micro_batch_size", "recompute", "distributed_optimizer",
                "global_batch_size"):
        assert own[key] == first[key], key


def test_plan_text(launch):
    code, out, err = launch("plan", "345m", "--gpu", "h200-141gb", *NO_KERNELS)
    assert code == 0, err
    for needle in ("parameters", "354.87M", "Memory per GPU", "optimizer state", "activations", "fits h200-141gb?",
                   "per iteration", "Best layouts", "launch 345m"):
        assert needle in out, needle


def test_unknown_gpu_lists_known_ones(launch):
    code, out, err = launch("plan", "175b", "--gpu", "h900")
    assert code == 2 and out == ""
    assert "unknown GPU 'h900'" in err and "h100-80gb" in err and "b200-180gb" in err
    assert "Traceback" not in err


def test_too_few_gpus_says_the_minimum(launch):
    code, out, err = launch("plan", "175b", "--gpus", "8")
    assert code == 2 and out == ""
    assert "no valid layout of 175b fits on 8 × h100-80gb" in err
    assert "at least" in err and "GPUs are needed" in err


def test_bad_budget_flags(launch):
    code, _, err = launch("plan", "175b", "--gpus", "12")
    assert code == 2 and "not a whole number of nodes" in err
    code, _, err = launch("plan", "175b", "--gpus", "16", "--nodes", "2")
    assert code == 2 and "cannot be combined" in err


def test_plan_shows_what_periodic_checkpoints_cost(launch):
    code, out, err = launch("plan", "175b", "--format", "json", "--top", "1")
    assert code == 0, err
    ckpt = json.loads(out)["checkpoint"]
    assert ckpt["save_interval"] == 1000 and ckpt["saves"] == 96  # 95,368 iterations
    assert 2.4e12 < ckpt["bytes"] < 2.5e12  # 174.6B parameters × (2 bf16 weights + 12 fp32 optimizer state)
    assert ckpt["seconds_per_save"] == ckpt["bytes"] / 20e9 and 0 < ckpt["overhead_fraction"] < 0.1
    code, out, err = launch("plan", "175b", "--top", "1", "--ckpt-write-gbps", "100")
    assert code == 0, err
    assert "checkpoints        2.44 TB each" in out and "at 100 GB/s" in out and "every 1,000 iterations" in out


def test_plan_help_says_gpus_default_is_the_presets(launch):
    code, out, _ = launch("plan", "--help")
    assert code == 0
    text = " ".join(out.split())
    assert "default: the preset's nodes × GPUs per node" in text and "(default 8)" not in text


def test_plan_uneven_pipeline_from_the_command_line(launch):
    """126 layers on PP 8: Megatron's embedding/loss-in-split, given as settings."""
    sets = ["num_layers=126", "pipeline_model_parallel_size=8", "account_for_embedding_in_pipeline_split=true",
            "account_for_loss_in_pipeline_split=true"]
    code, out, err = launch("plan", "175b", "--gpus", "1024", "--format", "json", "--top", "1",
                            *[x for s in sets for x in ("--set", s)])
    assert code == 0, err
    data = json.loads(out)
    assert data["layout"]["valid"], data["layout"]["problems"]
    assert data["layout"]["embedding_in_split"] and data["layout"]["loss_in_split"]


def test_plan_names_the_setting_every_layout_inherits(launch):
    """Memory is not the problem here: the hint must not ask for fewer or more GPUs."""
    code, out, err = launch("plan", "345m", "--gpus", "16", *NO_KERNELS, "--set", "tp_comm_overlap=true",
                            "--set", "tensor_model_parallel_size=2", "--set", "sequence_parallel=true")
    assert code == 2 and out == ""
    assert "passes launch's checks: tp_comm_overlap" in err and "GPUs are needed" not in err
    assert "Traceback" not in err


def test_plan_shows_context_parallel(launch):
    code, out, err = launch("plan", "345m", "--gpus", "16", "--top", "1", "--set", "context_parallel_size=2",
                            "--set", "transformer_engine=true", "--set", "apex=true")
    assert code == 0, err
    assert "TP1 PP1 CP2 DP8" in out


def test_plan_without_te_names_context_parallel_as_the_reason(launch):
    # CP needs Transformer Engine: on a target without it the plan says so instead of crashing on DP 0
    code, out, err = launch("plan", "345m", "--gpus", "16", "--top", "1", "--set", "context_parallel_size=2",
                            "--set", "transformer_engine=false")
    assert code == 2 and out == ""
    assert "context_parallel_size 2 needs Transformer Engine" in err and "Traceback" not in err
