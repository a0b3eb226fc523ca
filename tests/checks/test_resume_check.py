"""The resume check: a checkpoint under --load judged against the job before anything is queued or started, on
real checkpoints that Megatron's save_checkpoint writes on this CPU (torch_dist and torch, at TP 2), and on
checkpoint directories and stored settings made by hand for what Megatron cannot be made to write here."""

from __future__ import annotations

import json
import pickle
import socket
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from launcher.checks import checkpoint
from launcher.checks.checkpoint import StoredCheckpoint
from launcher.checks.resume import judge
from launcher.cli.job import JobRequest, job_for
from launcher.pipeline.preset import load_preset

WRITER = Path(__file__).with_name("checkpoint_writer.py")
# The toy preset's model through pretrain_gpt.py at world 2, as the writer saved it (global batch 8).
TOY = ["entry=pretrain_gpt", "train_iters=20", "global_batch_size=8", "micro_batch_size=4"]
# The writer saves the model alone (no optimizer, no scheduler): a job resumes it only without the optimizer state.
WEIGHTS_ONLY = "no_load_optim=true"


def toy_job(load: str | Path, *overrides: str):
    job, problems = job_for(load_preset("toy", [*TOY, f"load={load}", *overrides]),
                            JobRequest(nodes=1, gpus_per_node=2, run_dir=False, local=False))
    assert not problems, problems
    return job


def levels(check, topic: str) -> list[str]:
    return [item.level for item in check.items if item.topic == topic]


def text_of(check, topic: str) -> str:
    return " ".join(item.message + " " + item.hint for item in check.items if item.topic == topic)


# -- real checkpoints ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, StoredCheckpoint]:
    """A torch_dist and a torch checkpoint of the toy model at TP 2 (two gloo ranks), read once each."""
    out = tmp_path_factory.mktemp("checkpoints")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = subprocess.run([sys.executable, str(WRITER), str(out), "2", str(port), "torch_dist,torch",
                           "--tensor-model-parallel-size", "2"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return {fmt: checkpoint.read(out / fmt, sys.executable) for fmt in ("torch_dist", "torch")}


@pytest.mark.megatron
def test_the_stored_settings_are_read_without_the_weights(saved):
    dist = saved["torch_dist"]
    assert (dist.found, dist.format, dist.iteration, dist.unread) == (True, "torch_dist", 10, "")
    assert dist.args["tensor_model_parallel_size"] == 2 and dist.args["hidden_size"] == 12
    assert dist.args["consumed_train_samples"] == 80 and dist.checkpoint_version == 3.0
    legacy = saved["torch"]
    assert (legacy.format, legacy.unread, legacy.args["ckpt_format"]) == ("torch", "", "torch")
    assert legacy.file.endswith("mp_rank_00/model_optim_rng.pt")


@pytest.mark.megatron
def test_torch_dist_at_tp2_resumed_at_tp1_pp2_is_accepted_with_a_note(saved):
    stored = saved["torch_dist"]
    check = judge(toy_job(stored.load, "ckpt_format=torch_dist", "tensor_model_parallel_size=1",
                          "pipeline_model_parallel_size=2", WEIGHTS_ONLY), stored)
    assert check.ok, check.render()
    assert levels(check, "layout") == ["note"]
    assert "TP 2 → 1" in text_of(check, "layout") and "PP 1 → 2" in text_of(check, "layout")
    assert "reshards" in text_of(check, "layout")
    # vocab 100 pads to 256 rows at TP 2, 128 at TP 1: the padding rows past 128 are dropped
    assert levels(check, "shape") == ["ok", "note"] and "padded 256 → 128 rows at TP 1" in text_of(check, "shape")
    # the checkpoint is written here by the installed megatron-core, whose parser has one flag the pinned
    # checkout's lacks (fp8_output_proj): the version topic may say exactly that, nothing else
    assert levels(check, "version") == ["ok"] or "(fp8_output_proj)" in text_of(check, "version")
    assert not [item for item in check.items if item.level == "warn" and item.topic != "version"], check.render()


@pytest.mark.megatron
def test_a_torch_checkpoint_at_a_changed_tp_is_refused_with_the_conversion(saved):
    stored = saved["torch"]
    check = judge(toy_job(stored.load, "ckpt_format=torch", "tensor_model_parallel_size=1"), stored)
    assert not check.ok
    assert levels(check, "layout") == ["refuse"]
    said = text_of(check, "layout")
    assert "TP 2 → 1" in said and "ckpt_convert_format=torch_dist" in said
    assert "tensor_model_parallel_size=2" in said  # the conversion runs at the saved layout
    assert levels(check, "shape") == ["ok"]  # the vocabulary padded for TP 2 is the layout's change, not the model's


@pytest.mark.megatron
def test_a_torch_checkpoint_at_its_own_layout_is_accepted(saved):
    stored = saved["torch"]
    check = judge(toy_job(stored.load, "ckpt_format=torch", WEIGHTS_ONLY), stored)
    assert check.ok, check.render()
    assert levels(check, "layout") == ["ok"] and levels(check, "shape") == ["ok"]


@pytest.mark.megatron
@pytest.mark.parametrize("damage", ["cut short", "not a torch file", "empty"])
@pytest.mark.parametrize("fmt", ["torch_dist", "torch"])
def test_a_stored_file_torch_cannot_read_is_a_damaged_checkpoint(saved, tmp_path, damage, fmt):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(saved[fmt].load, copy)
    target = Path(saved[fmt].file.replace(saved[fmt].load, str(copy), 1))
    data = target.read_bytes()
    target.write_bytes({"cut short": data[:300], "not a torch file": b"\x00garbage" * 100, "empty": b""}[damage])
    stored = checkpoint.read(copy, sys.executable)
    assert not stored.found and stored.damaged, stored
    check = judge(toy_job(copy, f"ckpt_format={fmt}", WEIGHTS_ONLY), stored)
    assert not check.ok and "damaged" in text_of(check, "found") and "Megatron stops at load" in text_of(check, "found")


@pytest.mark.megatron
@pytest.mark.parametrize("fmt", ["torch_dist", "torch"])
def test_a_checkpoint_without_optimizer_state_is_refused_unless_the_job_loads_none(saved, fmt):
    """Megatron's load_checkpoint reads state_dict['optimizer'] unless no_load_optim or finetune: KeyError."""
    stored = saved[fmt]
    check = judge(toy_job(stored.load, f"ckpt_format={fmt}"), stored)
    assert levels(check, "state") == ["refuse"] and "no optimizer state" in text_of(check, "state")
    assert "no_load_optim=true" in text_of(check, "state")
    for lifted in (WEIGHTS_ONLY, "finetune=true"):
        assert levels(judge(toy_job(stored.load, f"ckpt_format={fmt}", lifted), stored), "state") == []


@pytest.mark.megatron
@pytest.mark.parametrize("fmt", ["torch_dist", "torch"])
@pytest.mark.parametrize(("setting", "named"), [("hidden_size=16", "hidden_size 12 (checkpoint) ≠ 16 (job)"),
                                                ("num_layers=4", "num_layers 2 (checkpoint) ≠ 4 (job)")])
def test_a_changed_model_shape_is_refused(saved, fmt, setting, named):
    stored = saved[fmt]
    check = judge(toy_job(stored.load, f"ckpt_format={fmt}", setting), stored)
    assert not check.ok
    assert levels(check, "shape") == ["refuse"] and named in text_of(check, "shape")


@pytest.mark.megatron
@pytest.mark.parametrize("batch", [16, 32])
def test_a_changed_global_batch_is_warned_with_the_numbers(saved, batch):
    stored = saved["torch_dist"]
    check = judge(toy_job(stored.load, "ckpt_format=torch_dist", f"global_batch_size={batch}",
                          f"micro_batch_size={batch // 2}", WEIGHTS_ONLY), stored)
    assert check.ok, check.render()
    assert levels(check, "batch") == ["warn"]
    said = text_of(check, "batch")
    assert f"global batch 8 (checkpoint) → {batch} (job)" in said
    assert "after 80 samples" in said and f"read {10 * batch} samples instead of 80" in said


@pytest.mark.megatron
def test_check_prints_the_resume_verdict_as_json(saved, launch):
    stored = saved["torch_dist"]
    settings = [*TOY, f"load={stored.load}", "ckpt_format=torch_dist", "tensor_model_parallel_size=1",
                "pipeline_model_parallel_size=2", WEIGHTS_ONLY]
    code, out, err = launch("toy", "--check", "--format", "json", *[f"--set={s}" for s in settings])
    assert code == 0, out + err
    resume = json.loads(out)["resume"]
    assert resume["ok"] and resume["checkpoint"]["format"] == "torch_dist" and resume["consumed_train_samples"] == 80
    assert [i["level"] for i in resume["items"] if i["topic"] == "layout"] == ["note"]


@pytest.mark.megatron
def test_the_text_verdict_names_the_checkpoint_and_each_refusal(saved):
    stored = saved["torch_dist"]
    lines = judge(toy_job(stored.load, "ckpt_format=torch_dist", "hidden_size=16"), stored).render()
    assert lines[0] == f"resume: refused (torch_dist checkpoint at iteration 10, 80 samples consumed in {stored.load})"
    assert any(line.startswith("  refused: the model differs from the checkpoint's: hidden_size 12 (checkpoint) ≠ "
                               "16 (job)") for line in lines)
    assert any(line.startswith("    hint: ") for line in lines)


@pytest.mark.megatron
def test_resume_of_a_run_directory_checks_its_own_checkpoints(saved, launch, tmp_path):
    import shutil

    from launcher.checks.resume import check_job
    from launcher.runs import tracking

    code, out, err = launch("toy", "--slurm", "--megatron-path", str(tmp_path), "--set", f"run_root={tmp_path}",
                            *[f"--set={s}" for s in [*TOY, "ckpt_format=torch", WEIGHTS_ONLY]], cwd=tmp_path)
    assert code == 0, err
    run_dir = Path(out.strip()).parent

    def resumed(*overrides: str):
        preset, existing = tracking.open_resume(run_dir, list(overrides))
        job, problems = job_for(preset, JobRequest(slurm=True, existing=existing, megatron_path=str(tmp_path)))
        assert not problems, problems
        return check_job(job, sys.executable)

    nothing = resumed()
    assert not nothing.ok and "nothing to resume" in text_of(nothing, "found")
    assert resumed("load=null") is None  # starting over on purpose: nothing to check
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    shutil.copytree(saved["torch"].load, run_dir / "checkpoints")
    check = resumed()
    assert check.ok and check.stored.iteration == 10, check.render()
    assert not resumed("tensor_model_parallel_size=1").ok


# -- no checkpoint where one is expected -----------------------------------------------------------------------

def test_an_empty_load_directory_is_refused(tmp_path):
    check = judge(toy_job(tmp_path), checkpoint.find(tmp_path))
    assert not check.ok
    assert levels(check, "found") == ["refuse"]
    assert "latest_checkpointed_iteration.txt" in text_of(check, "found")
    assert "--set load=null" in text_of(check, "found")


def test_a_missing_load_directory_is_refused(tmp_path):
    check = judge(toy_job(tmp_path / "nowhere"), checkpoint.find(tmp_path / "nowhere"))
    assert not check.ok and "does not exist" in text_of(check, "found")


def test_a_new_runs_own_empty_directory_is_no_refusal(tmp_path):
    from launcher.checks.resume import check_job

    job, problems = job_for(load_preset("toy", [*TOY, "save=" + str(tmp_path / "ck")]),
                            JobRequest(nodes=1, gpus_per_node=2, run_dir=False, local=False))
    assert check_job(job, None) is None  # load = save, chosen by the launcher, nothing there yet: a fresh start


def dist_iteration(root: Path, name: str, metadata: str = '{"sharded_backend": "torch_dist"}',
                   common: bool = True) -> Path:
    """An iteration directory as torch_dist lays it out (its files' contents are not read by find)."""
    directory = root / name
    directory.mkdir()
    (directory / "metadata.json").write_text(metadata)
    if common:
        (directory / "common.pt").write_bytes(b"PK")
    return directory


# read_metadata: int(text) after strip(), else 'release', else "Invalid metadata file" and sys.exit() (status 0);
# a negative iteration fails its assertion; the iteration is all-reduced as a torch.long
@pytest.mark.parametrize(("tracker", "said"), [
    ("garbage", "Invalid metadata file"), ("", "Invalid metadata file"), ("7.0", "Invalid metadata file"),
    ("-5", "error parsing metadata file"), ("9" * 20, "64-bit"), ("7", "iter_0000007 is missing"),
    ("release", "release is missing")])
def test_a_tracker_that_leads_nowhere_is_damaged_and_refused_even_in_a_runs_own_directory(tmp_path, tracker, said):
    from launcher.checks.resume import check_job

    (tmp_path / "latest_checkpointed_iteration.txt").write_text(tracker)
    found = checkpoint.find(tmp_path)
    assert not found.found and found.damaged and said in found.why_not
    check = judge(toy_job(tmp_path), found)
    assert levels(check, "found") == ["refuse"] and said in text_of(check, "found")
    # load = save, set by the launcher (a new run's own directory): Megatron still reads the tracker and stops
    job = toy_job(tmp_path)
    job = replace(job, preset=replace(job.preset, megatron={k: v for k, v in job.preset.megatron.items()
                                                           if k != "load"},
                                      overrides=tuple(o for o in job.preset.overrides if not o.startswith("load="))))
    own = check_job(job, None)
    assert own is not None and not own.expected and not own.ok


def test_a_tracker_that_is_not_a_file_is_no_checkpoint_as_for_megatron(tmp_path):
    (tmp_path / "latest_checkpointed_iteration.txt").mkdir()  # Megatron's isfile() is false: a fresh start
    found = checkpoint.find(tmp_path)
    assert not found.found and not found.damaged


def test_a_tracker_file_that_is_not_utf8_is_damaged(tmp_path):
    (tmp_path / "latest_checkpointed_iteration.txt").write_bytes(b"\xff\xfe7")
    found = checkpoint.find(tmp_path)
    assert found.damaged and "UTF-8" in found.why_not


@pytest.mark.parametrize(("tracker", "iteration"), [("+7", 7), (" 0007\n", 7), ("7_0", 70), ("-0", 0)])
def test_a_tracker_is_read_as_megatron_reads_it(tmp_path, tracker, iteration):
    (tmp_path / "latest_checkpointed_iteration.txt").write_text(tracker)
    dist_iteration(tmp_path, f"iter_{iteration:07d}")
    found = checkpoint.find(tmp_path)
    assert (found.found, found.iteration, found.format) == (True, iteration, "torch_dist"), found.why_not


def test_ckpt_step_is_the_iteration_megatron_loads_with_or_without_a_tracker(tmp_path):
    from launcher.checks.resume import check_job

    dist_iteration(tmp_path, "iter_0000050")
    found = checkpoint.find(tmp_path, 50)  # no tracker: Megatron still loads iteration 50
    assert (found.found, found.iteration) == (True, 50)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("50")
    missing = checkpoint.find(tmp_path, 70)
    assert missing.damaged and "ckpt_step 70 names iteration 70" in missing.why_not
    assert not check_job(toy_job(tmp_path, "ckpt_format=torch_dist", "ckpt_step=70"), None).ok


def test_a_release_tracker_finds_the_release_directory(tmp_path):
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("release\n")
    dist_iteration(tmp_path, "release")
    found = checkpoint.find(tmp_path)
    assert (found.found, found.release, found.iteration) == (True, True, 0)


@pytest.mark.parametrize(("metadata", "said"), [("{", "not JSON"), ("[]", "no JSON object"),
                                                ('{"sharded_backend": "torch_dist", "extra": 1}', "extra"),
                                                ('{"common_backend": "torch"}', "no sharded_backend"),
                                                ('{"sharded_backend": ' + "9" * 5000 + "}", "not JSON")])
def test_a_damaged_metadata_json_is_refused(tmp_path, metadata, said):
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("5")
    dist_iteration(tmp_path, "iter_0000005", metadata)
    found = checkpoint.find(tmp_path)
    assert found.damaged and said in found.why_not and "metadata.json" in found.why_not


@pytest.mark.parametrize("layout", ["no file", "no common.pt", "no model file"])
def test_an_iteration_directory_megatron_cannot_load_is_damaged(tmp_path, layout):
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("5\n")
    if layout == "no common.pt":
        dist_iteration(tmp_path, "iter_0000005", common=False)
    else:
        (tmp_path / "iter_0000005" / ("mp_rank_00" if layout == "no model file" else "")).mkdir(parents=True)
    found = checkpoint.find(tmp_path)
    assert not found.found and found.damaged
    assert ("no checkpoint Megatron knows" if layout == "no file" else "is missing") in found.why_not


def test_a_load_directory_that_is_a_symlink_loop_is_no_checkpoint(tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    found = checkpoint.find(loop)
    assert not found.found and not found.damaged
    assert not judge(toy_job(loop), found).ok  # the user's load expects one


# -- stored settings made by hand (what the CPU cannot make Megatron write) -------------------------------------

def stored_dist(tmp_path: Path, args: dict, content_metadata: dict | None = None) -> StoredCheckpoint:
    return StoredCheckpoint(str(tmp_path), found=True, iteration=100, directory=str(tmp_path / "iter_0000100"),
                            format="torch_dist", backend={"sharded_backend": "torch_dist"},
                            args={"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 1,
                                  "num_layers": 2, "hidden_size": 12, "num_attention_heads": 4, "seq_length": 64,
                                  "max_position_embeddings": 64, "vocab_size": 100, "global_batch_size": 8,
                                  "consumed_train_samples": 800, "mock_data": True, **args},
                            content_metadata=content_metadata, checkpoint_version=3.0)


@pytest.mark.parametrize(("sharding", "level"), [("dp_reshardable", "refuse"), ("fully_reshardable", "note")])
def test_a_distributed_optimizer_follows_a_tp_change_only_when_saved_reshardable(tmp_path, sharding, level):
    stored = stored_dist(tmp_path, {"use_distributed_optimizer": True},
                         {"distrib_optim_sharding_type": sharding})
    job = toy_job(tmp_path, "ckpt_format=torch_dist", "tensor_model_parallel_size=1",
                  "use_distributed_optimizer=true", "train_iters=200")
    check = judge(job, stored)
    assert levels(check, "optimizer") == [level]
    assert sharding in text_of(check, "optimizer")
    relaxed = judge(toy_job(tmp_path, "ckpt_format=torch_dist", "tensor_model_parallel_size=1",
                            "use_distributed_optimizer=true", "no_load_optim=true", "train_iters=200"), stored)
    assert levels(relaxed, "optimizer") == []  # no optimizer state is loaded


def test_a_changed_batch_under_a_sample_budget_says_where_megatron_ends(tmp_path):
    # update_train_iters: the loop runs to train_samples // the job's batch, whatever the checkpoint consumed
    stored = stored_dist(tmp_path, {"train_samples": 3200, "train_iters": None})
    job = toy_job(tmp_path, "ckpt_format=torch_dist", "tensor_model_parallel_size=2", "train_iters=null",
                  "train_samples=3200", "global_batch_size=16", "micro_batch_size=8", "lr_decay_samples=3200",
                  "lr_warmup_samples=0")
    said = text_of(judge(job, stored), "batch")
    assert "global batch 8 (checkpoint) → 16 (job)" in said
    assert "trains to iteration 200 (train_samples // 16): the 100 iterations left read 1,600 samples, ending at " \
           "2,400 of train_samples 3,200" in said


def test_a_changed_data_blend_and_seq_length_are_warned(tmp_path):
    stored = stored_dist(tmp_path, {"mock_data": False, "data_path": ["0.5", "/d/a", "0.5", "/d/b"]})
    check = judge(toy_job(tmp_path, "ckpt_format=torch_dist", "tensor_model_parallel_size=2", "seq_length=32",
                          "max_position_embeddings=64", "train_iters=200"), stored)
    assert levels(check, "data") == ["warn"] and "/d/a" in text_of(check, "data")
    assert "seq_length 64 (checkpoint) → 32 (job)" in text_of(check, "batch")
    assert "51,200 tokens" in text_of(check, "batch")  # 800 samples × 64


def test_state_megatron_reads_at_load_and_the_checkpoint_lacks_is_refused(tmp_path):
    stored = replace(stored_dist(tmp_path, {}), keys=("args", "checkpoint_version", "opt_param_scheduler"))
    job = toy_job(tmp_path, "ckpt_format=torch_dist", "tensor_model_parallel_size=2", "train_iters=200")
    check = judge(job, stored)
    assert levels(check, "state") == ["refuse"] and "no iteration" in text_of(check, "state")
    legacy = replace(stored, format="torch", keys=("args", "iteration", "model", "optimizer"))
    torch_job = toy_job(tmp_path, "ckpt_format=torch", "tensor_model_parallel_size=2", "train_iters=200")
    assert "no RNG state" in text_of(judge(torch_job, legacy), "state")
    assert levels(judge(toy_job(tmp_path, "ckpt_format=torch", "tensor_model_parallel_size=2", "train_iters=200",
                                "no_load_rng=true"), legacy), "state") == []
    no_optim = stored_dist(tmp_path, {"no_save_optim": True})
    assert "no optimizer state" in text_of(judge(job, no_optim), "state")
    release = replace(no_optim, release=True, keys=("args",))
    assert levels(judge(job, release), "state") == []  # a release checkpoint is loaded as weights only


def test_what_megatron_asserts_equal_at_load_is_refused(tmp_path):
    stored = stored_dist(tmp_path, {"global_batch_size": 16})
    job = toy_job(tmp_path, "ckpt_format=torch_dist", "tensor_model_parallel_size=2", "train_iters=200",
                  "phase_transition_iterations=100")
    check = judge(job, stored)
    assert "refuse" in levels(check, "shape") and "global_batch_size 16 (checkpoint) ≠ 8 (job)" in \
        text_of(check, "shape")
    plain = judge(toy_job(tmp_path, "ckpt_format=torch_dist", "tensor_model_parallel_size=2", "train_iters=200"),
                  stored)
    assert levels(plain, "shape") == ["ok"] and levels(plain, "batch") == ["warn"]  # without phases: a warning


def test_a_torch_dist_checkpoint_with_a_torch_job_is_refused(tmp_path):
    check = judge(toy_job(tmp_path, "ckpt_format=torch", "tensor_model_parallel_size=2", "train_iters=200"),
                  stored_dist(tmp_path, {}))
    assert levels(check, "format") == ["refuse"] and "ckpt_format=torch_dist" in text_of(check, "format")


def test_settings_the_pin_does_not_know_say_version_skew(tmp_path):
    check = judge(toy_job(tmp_path, "ckpt_format=torch_dist", "tensor_model_parallel_size=2", "train_iters=200"),
                  stored_dist(tmp_path, {"a_setting_from_the_future": 1}))
    assert "warn" in levels(check, "version") and "a_setting_from_the_future" in text_of(check, "version")


def test_the_model_type_get_model_stores_is_no_version_skew(tmp_path):
    """training.get_model sets args.model_type, so every checkpoint pretrain_gpt.py saves at the pin holds it."""
    check = judge(toy_job(tmp_path, "ckpt_format=torch_dist", "tensor_model_parallel_size=2", "train_iters=200"),
                  stored_dist(tmp_path, {"model_type": "ModelType.encoder_or_decoder"}))
    assert "model_type" not in text_of(check, "version"), check.render()


def test_unreadable_stored_settings_are_said_not_guessed(tmp_path):
    stored = StoredCheckpoint(str(tmp_path), found=True, iteration=3, format="torch_dist",
                              unread="reading its stored settings needs torch")
    check = judge(toy_job(tmp_path, "ckpt_format=torch_dist"), stored)
    assert check.ok and levels(check, "read") == ["warn"] and levels(check, "shape") == []


# a checkpoint's stored args hold whatever was written there: sizes that give no model are said, never divided by
NO_SHAPE = [("num_attention_heads", 0), ("make_vocab_size_divisible_by", 0), ("tensor_model_parallel_size", 0),
            ("vocab_size", 10**4000), ("hidden_size", 1e308), ("num_layers", float("inf"))]


@pytest.mark.parametrize(("name", "value"), NO_SHAPE, ids=[f"{n}={str(v)[:8]}" for n, v in NO_SHAPE])
@pytest.mark.parametrize("fmt", ["torch_dist", "torch"])
@pytest.mark.parametrize("take", [False, True])
def test_stored_sizes_that_give_no_model_are_said_not_a_crash(tmp_path, name, value, fmt, take):
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("100")
    dist_iteration(tmp_path, "iter_0000100")
    job = toy_job(tmp_path, f"ckpt_format={fmt}", "tensor_model_parallel_size=2", "train_iters=200",
                  *(["use_checkpoint_args=true"] if take else []))
    check = judge(job, replace(stored_dist(tmp_path, {name: value}), format=fmt))
    said = " ".join(check.render())
    assert "not compared" in said or "model differs" in said or "vocab_size 1000" in said, said


# -- reading is not running ------------------------------------------------------------------------------------

class Planted:
    def __reduce__(self):
        return (print, ("the checkpoint ran code",))


@pytest.mark.megatron
def test_a_checkpoint_that_would_run_code_is_not_read(tmp_path):
    iteration = tmp_path / "iter_0000001"
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("1")
    iteration.mkdir()
    (iteration / "metadata.json").write_text(json.dumps({"sharded_backend": "torch_dist"}))
    with zipfile.ZipFile(iteration / "common.pt", "w") as archive:  # torch's zip layout, a hostile pickle inside
        archive.writestr("common/data.pkl", pickle.dumps({"args": Planted(), "iteration": 1}, protocol=2))
        archive.writestr("common/byteorder", "little")
        archive.writestr("common/version", "3\n")
    stored = checkpoint.read(tmp_path, sys.executable)
    assert stored.found and stored.args is None
    assert "builtins.print" in stored.unread and "not read" in stored.unread


# -- before a submission ---------------------------------------------------------------------------------------

def fake_sbatch(tmp_path: Path) -> dict[str, str]:
    """An sbatch on PATH that records being called and prints a job id."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\necho called >> {tmp_path / 'sbatch-called'}\necho 42\n")
    (bin_dir / "sbatch").chmod(0o755)
    checkout = tmp_path / "megatron-lm"
    checkout.mkdir()
    (checkout / "pretrain_gpt.py").write_text("")
    import os

    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "MEGATRON_PYTHON": "/nonexistent/python"}


def test_submit_refuses_an_empty_load_before_sbatch_runs(tmp_path, launch):
    env = fake_sbatch(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = launch("toy", "--submit", "--megatron-path", str(tmp_path / "megatron-lm"),
                            "--set", f"run_root={tmp_path / 'runs'}",
                            *[f"--set={s}" for s in [*TOY, f"load={empty}"]], env=env, cwd=tmp_path)
    assert code == 2, out + err
    assert "error: resume: load=" in err and "expects a checkpoint" in err and "--set load=null" in err
    assert not (tmp_path / "sbatch-called").exists()
    assert not list((tmp_path / "runs").glob("*/manifest.json"))  # nothing left behind
    code, out, err = launch("toy", "--submit", "--megatron-path", str(tmp_path / "megatron-lm"),
                            "--set", f"run_root={tmp_path / 'runs'}",
                            *[f"--set={s}" for s in [*TOY, "load=null"]], env=env, cwd=tmp_path)
    assert code == 0, out + err  # starting from scratch, said so
    assert (tmp_path / "sbatch-called").exists()


def test_an_empty_load_with_a_pretrained_checkpoint_fine_tunes_from_it(tmp_path):
    from launcher.checks.resume import check_job

    empty, pretrained = tmp_path / "empty", tmp_path / "pretrained"
    empty.mkdir()
    pretrained.mkdir()
    job = toy_job(empty, "ckpt_format=torch_dist", f"pretrained_checkpoint={pretrained}")
    neither = check_job(job, None)
    assert not neither.ok and "FileNotFoundError" in text_of(neither, "found")
    (pretrained / "latest_checkpointed_iteration.txt").write_text("release")
    (pretrained / "release").mkdir()
    (pretrained / "release" / "metadata.json").write_text(json.dumps({"sharded_backend": "torch_dist"}))
    (pretrained / "release" / "common.pt").write_bytes(b"")
    check = check_job(job, None)  # no torch named here: the stored settings are not read, and it says so
    assert check.ok, check.render()
    assert levels(check, "found") == ["note"] and "fine-tunes from pretrained_checkpoint" in text_of(check, "found")
    assert check.stored.release and levels(check, "read") == ["warn"]


def test_settings_of_the_pin_the_checkpoint_lacks_say_an_older_megatron(tmp_path):
    from launcher.checks.resume import _version
    from launcher.megatron import args as megatron_args

    catalog = megatron_args.catalog()
    every = {name: arg.default for name, arg in catalog.items() if arg.provider == "megatron"}
    metadata = {"singleton_local_shards": False}
    assert [i.level for i in _version(stored_dist(tmp_path, every, metadata))] == ["ok"]
    older = stored_dist(tmp_path, {k: v for k, v in every.items() if k != "ffn_hidden_size"}, metadata)
    assert "ffn_hidden_size" not in older.args
    said = " ".join(i.message for i in _version(older))
    assert "lacks" in said and "ffn_hidden_size" in said and "older Megatron" in said


# -- non-persistent checkpoints: Megatron loads a newer one instead of the persistent one -----------------------

def persistent_and_non_persistent(load: Path, persistent: int | None, newer: str | None,
                                  where: Path | None = None) -> Path:
    """LOAD with a persistent torch_dist checkpoint at `persistent` (None: none), and a global non-persistent one
    whose tracker says `newer` in LOAD/non_persistent (or `where`)."""
    load.mkdir(exist_ok=True)
    if persistent is not None:
        (load / "latest_checkpointed_iteration.txt").write_text(str(persistent))
        dist_iteration(load, f"iter_{persistent:07d}")
    directory = where or load / "non_persistent"
    if newer is not None:
        directory.mkdir()
        (directory / "latest_checkpointed_iteration.txt").write_text(newer)
        dist_iteration(directory, "release" if newer == "release" else f"iter_{int(newer):07d}")
    return directory


def test_a_newer_global_non_persistent_checkpoint_is_the_one_judged(tmp_path):
    from launcher.checks.resume import check_job

    directory = persistent_and_non_persistent(tmp_path / "ckpt", 10, "15")
    check = check_job(toy_job(tmp_path / "ckpt", "ckpt_format=torch_dist", "non_persistent_ckpt_type=global"), None)
    assert check.ok, check.render()
    assert (check.stored.load, check.stored.iteration) == (str(directory), 15)
    assert "Megatron loads the non-persistent checkpoint" in text_of(check, "found")
    assert "iteration 15" in check.render()[0] and str(directory) in check.render()[0]
    # without non_persistent_ckpt_type Megatron never looks there
    plain = check_job(toy_job(tmp_path / "ckpt", "ckpt_format=torch_dist"), None)
    assert (plain.stored.load, plain.stored.iteration) == (str(tmp_path / "ckpt"), 10)
    # the same iteration: Megatron takes the non-persistent one (>=); ckpt_step counts as the persistent iteration
    (directory / "latest_checkpointed_iteration.txt").write_text("10")
    dist_iteration(directory, "iter_0000010")
    same = check_job(toy_job(tmp_path / "ckpt", "ckpt_format=torch_dist", "non_persistent_ckpt_type=global"), None)
    assert same.stored.load == str(directory)
    stepped = check_job(toy_job(tmp_path / "ckpt", "ckpt_format=torch_dist", "non_persistent_ckpt_type=global",
                                "ckpt_step=12"), None)
    assert stepped.stored.load == str(tmp_path / "ckpt") and "older than" in text_of(stepped, "found")


def test_an_older_non_persistent_checkpoint_leaves_the_persistent_one_judged_and_says_so(tmp_path):
    from launcher.checks.resume import check_job

    persistent_and_non_persistent(tmp_path / "ckpt", 10, "5")
    check = check_job(toy_job(tmp_path / "ckpt", "ckpt_format=torch_dist", "non_persistent_ckpt_type=global"), None)
    assert (check.stored.load, check.stored.iteration) == (str(tmp_path / "ckpt"), 10)
    assert levels(check, "found") == ["note"] and "older than the persistent checkpoint's iteration 10" in \
        text_of(check, "found")


def test_a_non_persistent_checkpoint_in_its_own_directory_or_without_a_persistent_one_is_judged(tmp_path):
    from launcher.checks.resume import check_job

    elsewhere = persistent_and_non_persistent(tmp_path / "ckpt", None, "3", where=tmp_path / "np")
    check = check_job(toy_job(tmp_path / "ckpt", "ckpt_format=torch_dist", "non_persistent_ckpt_type=global",
                              f"non_persistent_global_ckpt_dir={elsewhere}"), None)
    assert check.ok, check.render()  # an empty load the user named is no refusal: Megatron resumes iteration 3
    assert (check.stored.load, check.stored.iteration) == (str(elsewhere), 3)
    assert "no persistent checkpoint" in text_of(check, "found")


@pytest.mark.parametrize(("tracker", "said"), [("release", "can't be a release checkpoint"),
                                               ("garbage", "Invalid metadata file")])
def test_a_non_persistent_tracker_megatron_stops_at_is_refused(tmp_path, tracker, said):
    from launcher.checks.resume import check_job

    persistent_and_non_persistent(tmp_path / "ckpt", 10, tracker if tracker == "release" else None)
    if tracker != "release":
        (tmp_path / "ckpt" / "non_persistent").mkdir()
        (tmp_path / "ckpt" / "non_persistent" / "latest_checkpointed_iteration.txt").write_text(tracker)
    check = check_job(toy_job(tmp_path / "ckpt", "ckpt_format=torch_dist", "non_persistent_ckpt_type=global"), None)
    assert not check.ok and said in text_of(check, "found")


def test_local_non_persistent_checkpoints_are_said_not_judged(tmp_path):
    from launcher.checks.resume import check_job

    persistent_and_non_persistent(tmp_path / "ckpt", 10, None)
    check = check_job(toy_job(tmp_path / "ckpt", "ckpt_format=torch_dist", "non_persistent_ckpt_type=local",
                              f"non_persistent_local_ckpt_dir={tmp_path / 'local'}"), None)
    assert check.stored.iteration == 10
    assert "non_persistent_ckpt_type=local" in text_of(check, "found") and "not visible here" in \
        text_of(check, "found")


# -- precision: what the optimizer's load refuses, and what it accepts but changes --------------------------------

FULL_STATE = ("args", "checkpoint_version", "iteration", "model", "optimizer", "opt_param_scheduler", "rng_state")


def stored_at(tmp_path: Path, fmt: str, **args) -> StoredCheckpoint:
    return replace(stored_dist(tmp_path, args), format=fmt, keys=FULL_STATE)


@pytest.mark.parametrize(("old", "new"), [({}, "bf16=true"), ({}, "fp16=true"), ({"bf16": True}, "bf16=false"),
                                          ({"fp16": True}, "fp16=false")])
def test_fp32_against_fp16_or_bf16_with_the_torch_formats_optimizer_state_is_refused(tmp_path, old, new):
    """Float16OptimizerWithFloat16Params and FP32Optimizer each read keys only their own kind saved."""
    stored = stored_at(tmp_path, "torch", **old)
    check = judge(toy_job(tmp_path, "ckpt_format=torch", "train_iters=200", new), stored)
    assert levels(check, "precision") == ["refuse"], check.render()
    assert "Unable to load optimizer from checkpoint" in text_of(check, "precision")
    assert "no_load_optim=true" in text_of(check, "precision")
    weights = judge(toy_job(tmp_path, "ckpt_format=torch", "train_iters=200", new, "no_load_optim=true"), stored)
    assert levels(weights, "precision") == ["note"] and "cast to" in text_of(weights, "precision")
    assert levels(judge(toy_job(tmp_path, "ckpt_format=torch", "train_iters=200", new, "finetune=true"), stored),
                  "precision") == ["note"]


@pytest.mark.parametrize("fmt", ["torch", "torch_dist"])
@pytest.mark.parametrize(("old", "new", "said"), [({"fp16": True}, "bf16=true", "loss scale is dropped"),
                                                  ({"bf16": True}, "fp16=true", "starts at initial_loss_scale")])
def test_fp16_against_bf16_loads_with_a_warning_of_what_changes(tmp_path, fmt, old, new, said):
    stored = stored_at(tmp_path, fmt, **old)
    check = judge(toy_job(tmp_path, f"ckpt_format={fmt}", "train_iters=200", new), stored)
    assert levels(check, "precision") == ["warn"] and said in text_of(check, "precision"), check.render()
    assert "cast to" in text_of(check, "precision")


def test_a_precision_change_not_measured_at_the_pin_is_a_warning_not_a_verdict(tmp_path):
    sharded = judge(toy_job(tmp_path, "ckpt_format=torch", "train_iters=200", "use_distributed_optimizer=true"),
                    stored_at(tmp_path, "torch", bf16=True, use_distributed_optimizer=True))
    assert levels(sharded, "precision") == ["warn"] and "not measured" in text_of(sharded, "precision")


def test_unchanged_precision_says_nothing_and_an_fp8_change_is_a_note(tmp_path):
    stored = stored_at(tmp_path, "torch", bf16=True, fp8=None)
    assert levels(judge(toy_job(tmp_path, "ckpt_format=torch", "train_iters=200", "bf16=true"), stored),
                  "precision") == []
    fp8 = judge(toy_job(tmp_path, "ckpt_format=torch", "train_iters=200", "bf16=true"),
                stored_at(tmp_path, "torch", bf16=True, fp8="hybrid"))
    assert levels(fp8, "precision") == ["note"] and "fp8 'hybrid' (checkpoint) → None (job)" in \
        text_of(fp8, "precision")


@pytest.mark.megatron
@pytest.mark.parametrize("length", ["train_iters=10", "train_samples=80"])
def test_a_checkpoint_at_the_jobs_end_is_refused_before_launch_and_by_the_resume_check(saved, length):
    """Megatron's own save at iteration 10, resumed by a job of 10 iterations (or 80 samples of 8): its loop would
    not run (training.py train()); one more iteration trains."""
    stored = saved["torch_dist"]
    lengths = [length, "train_iters=null"] if length.startswith("train_samples") else [length]
    job, problems = job_for(load_preset("toy", [*TOY, f"load={stored.load}", "ckpt_format=torch_dist", WEIGHTS_ONLY,
                                                *lengths]),
                            JobRequest(nodes=1, gpus_per_node=2, run_dir=False, local=False))
    assert any("holds a checkpoint at iteration 10" in p.message and "train 0 iterations" in p.message
               for p in problems), problems
    check = judge(job, stored)
    assert levels(check, "batch") == ["refuse"] and "train 0 iterations" in text_of(check, "batch")
    more = "train_iters=11" if length.startswith("train_iters") else "train_samples=88"
    check = judge(toy_job(stored.load, "ckpt_format=torch_dist", WEIGHTS_ONLY, *lengths[1:], more), stored)
    assert "refuse" not in levels(check, "batch"), check.render()
