"""Without apex, the weight-gradient accumulation is fused into the GEMM where a step accumulates microbatches
(the launcher's apex-free stand-in), said in the header; never over the preset's choice, never at one microbatch."""

from launcher.megatron.pin import Kernels
from launcher.pipeline.environment import APEX_FREE
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve

WITH_APEX = Kernels(False, True, "preset", None)
WITH_TORCHAO = Kernels(False, False, "preset", None, torchao=True)


def job_for(*overrides: str, global_batch: int = 16, kernels: Kernels | None = None):
    preset = load_preset("345m", overrides=[f"global_batch_size={global_batch}", "micro_batch_size=1", *overrides])
    return resolve(preset, 1, 1, **({"kernels": kernels} if kernels else {}))


def fusion_notes(job) -> list[str]:
    return [note for note in job.notes if note.startswith("gradient accumulation fusion on without apex")]


def test_several_microbatches_per_step_get_the_fused_accumulation_and_the_header_says_so():
    job = job_for()
    assert job.megatron["gradient_accumulation_fusion"] is True and job.added["gradient_accumulation_fusion"] is True
    assert str(APEX_FREE) in job.environment.exported["PYTHONPATH"].split(":")
    assert len(notes := fusion_notes(job)) == 1 and "16 microbatches" in notes[0]


def test_one_microbatch_per_step_keeps_the_unfused_accumulation():
    job = job_for(global_batch=1)
    assert job.megatron["gradient_accumulation_fusion"] is False and not fusion_notes(job)


def test_the_presets_own_choice_fp8_and_apex_are_left_alone():
    job = job_for("gradient_accumulation_fusion=false")
    assert job.megatron["gradient_accumulation_fusion"] is False and not fusion_notes(job)
    assert job_for("fp8_format=hybrid", kernels=WITH_TORCHAO).megatron["gradient_accumulation_fusion"] is False
    assert "gradient_accumulation_fusion" not in job_for(kernels=WITH_APEX).added  # apex's own kernel: Megatron's
