"""A way out that turns a feature off drops the settings only that feature reads, and costs nothing where it turns
no feature off (the layout search words every rule's way out for thousands of layouts)."""

from launcher.pipeline.feature_settings import drop, with_drops


def test_dropping_fp8_resets_every_fp8_setting_the_job_changed():
    job = {"fp8": "hybrid", "fp8_param_gather": True, "fp8_recipe": "blockwise", "bf16": True}
    assert drop("fp8", job.get) == ["fp8=null", "fp8_param_gather=false", "fp8_recipe=delayed"]
    assert with_drops("set fp8=null", job.get) == (
        "set fp8=null --set fp8_param_gather=false --set fp8_recipe=delayed")


def test_a_way_out_that_turns_no_feature_off_reads_no_setting():
    asked: list[str] = []

    def arg(name: str) -> object:
        asked.append(name)
        return None

    assert with_drops("set tensor_model_parallel_size=2", arg) == "set tensor_model_parallel_size=2"
    assert asked == []


def test_asking_twice_gives_the_same_drops():
    job = {"multi_latent_attention": True, "q_lora_rank": 64, "kv_lora_rank": 64}.get
    first = with_drops("--set multi_latent_attention=false", job)
    assert first == with_drops("--set multi_latent_attention=false", job) == (
        "--set multi_latent_attention=false --set kv_lora_rank=32 --set q_lora_rank=null")
