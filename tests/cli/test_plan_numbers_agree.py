"""`launch plan`'s figures agree with the rest of the launcher and read their inputs strictly (issue 26 item 5)."""

import json
import time

import pytest


def _json(launch, *args):
    code, out, err = launch(*args)
    assert code == 0, err
    return json.loads(out)


def test_plan_toy_parameters_equal_list_and_dry_run(launch):
    listed = {r["preset"]: r["parameters"] for r in _json(launch, "list", "--format", "json")}
    dry = _json(launch, "toy", "--dry-run", "--format", "json")
    planned = _json(launch, "plan", "toy", "--format", "json")
    assert listed["toy"] == dry["parameters"] == planned["model"]["parameters"] == 6960


def test_plan_toy_text_says_which_model_the_listed_layouts_build(launch):
    code, out, err = launch("plan", "toy")
    assert code == 0, err
    assert "parameters           6.96K (vocab 100, not padded)" in out
    assert ("note: the layouts below run through pretrain_gpt.py, which builds 7.63K parameters "
            "(vocabulary padded to 256, output layer tied to the embedding)") in out


def test_plan_175b_explains_every_gib_between_complete_and_megatron_memory(launch):
    plan = _json(launch, "plan", "175b", "--format", "json")
    memory = plan["memory"]
    parts = memory["difference"]
    names = [p["what"] for p in parts]
    assert names == ["parameters", "gradients in 16 bits", "optimizer step", "sequence parallel",
                     "Megatron's 5 % margin", "activation terms"]
    assert sum(p["bytes"] for p in parts) == pytest.approx(
        memory["complete"]["total"] - memory["megatron"]["total"], rel=1e-9)
    # 175b keeps fp32 main gradients, as Megatron's report counts them: no 16-bit buffer, no fp32 copy in the step
    assert parts[1]["bytes"] == 0 and parts[2]["bytes"] == 0
    sp = parts[3]
    # Megatron's report uses its no-SP formula unless SP comes with selective recompute: 10·s·b·h per layer
    # outside the TP regions is counted on every TP rank, where sequence parallel keeps 1/8 of it.
    assert sp["bytes"] < -15 * 2**30
    code, out, err = launch("plan", "175b")
    assert code == 0, err
    assert "complete − Megatron = -21.00 GiB:" in out
    assert "sequence parallel -19.69 GiB: Megatron's report uses its sequence-parallel formula only with " \
           "selective recompute; the run shards norms and dropouts over TP 8" in out
    assert "'complete' adds biases" not in out


def test_plan_345m_checkpoint_size_has_a_unit_that_fits(launch):
    code, out, err = launch("plan", "345m")
    assert code == 0, err
    assert "checkpoints        4.97 GB each" in out
    assert "0.00 TB" not in out
    code, out, err = launch("plan", "175b")
    assert "checkpoints        2.44 TB each" in out


def test_plan_tokens_without_a_unit_is_refused_with_a_hint(launch):
    code, out, err = launch("plan", "345m", "--tokens", "300")
    assert code == 2
    assert "error: --tokens 300 has no unit" in err
    assert "hint: write 300B for 300 billion tokens (units K, M, B or T; or 300e9)" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("text, tokens", [("300B", 300e9), ("1.2T", 1.2e12), ("300e9", 300e9), ("50m", 50e6)])
def test_plan_tokens_with_a_unit_or_exponent_is_read(launch, text, tokens):
    plan = _json(launch, "plan", "345m", "--tokens", text, "--format", "json", "--top", "1")
    assert plan["tokens"] == pytest.approx(tokens)


@pytest.mark.parametrize("setting", ["num_layers=1000000000", "hidden_size=1000000000000",
                                     "seq_length=1000000000", "ffn_hidden_size=1000000000000",
                                     "vocab_size=1000000000000000"])
def test_plan_with_a_huge_model_setting_exits_2_quickly(launch, setting):
    start = time.monotonic()
    code, out, err = launch("plan", "345m", "--set", setting)
    assert code == 2, err
    assert time.monotonic() - start < 20
    assert "error: no layout of 345m fits on any number of h100-80gb GPUs" in err
    assert "Traceback" not in err


def test_plan_refuses_a_budget_beyond_a_million_gpus(launch):
    code, out, err = launch("plan", "345m", "--gpus", "1000000000000000")
    assert code == 2
    assert "error: --gpus 1000000000000000 is more GPUs than the plan searches (at most 1,048,576)" in err
    assert "hint: give a budget of at most 1,048,576 GPUs" in err
