"""scripts/import_corpus_gpu.py: each corpus script moved to one GPU as a user would, and the dry-run's verdict
on it (the GPU part runs on a machine with one; here, what decides which jobs it launches and how it judges them)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import import_corpus_gpu as corpus_gpu  # noqa: E402


def sets_of(moves: list[str]) -> dict[str, str]:
    return dict(move.split("=", 1) for move in moves)


def test_the_move_makes_one_gpu_four_layers_mock_data_and_four_logged_iterations():
    settings = {"num_layers": 24, "tensor_model_parallel_size": 4, "pipeline_model_parallel_size": 2,
                "num_layers_per_virtual_pipeline_stage": 3, "micro_batch_size": 2, "global_batch_size": 512,
                "data_path": "/data/x_text_document", "tokenizer_type": "GPT2BPETokenizer", "vocab_file": "v.json",
                "merge_file": "m.txt", "save": "/ckpt", "lr_warmup_iters": 2000, "train_samples": 10**6}
    moves, why = corpus_gpu.one_gpu_moves(settings)
    got = sets_of(moves)
    assert got["nodes"] == got["gpus_per_node"] == "1"
    assert got["tensor_model_parallel_size"] == got["pipeline_model_parallel_size"] == "1"
    assert got["num_layers_per_virtual_pipeline_stage"] == got["train_samples"] == "null"
    assert got["num_layers"] == "4" and got["train_iters"] == "4" and got["log_interval"] == "1"
    assert got["mock_data"] == "true" and got["data_path"] == "null" and got["save"] == "null"
    assert got["tokenizer_type"] == "NullTokenizer" and got["vocab_size"] == "50257"
    assert got["vocab_file"] == got["merge_file"] == "null"
    assert got["global_batch_size"] == "2"  # one micro-batch per step at DP 1
    assert got["lr_warmup_iters"] == "1" and any("lr_warmup_iters 2000" in w for w in why)
    assert got["eval_iters"] == "0" and got["eval_interval"] == "4"


def test_a_per_layer_pattern_is_cut_to_the_layers_kept():
    moves, why = corpus_gpu.one_gpu_moves({"num_layers": 61, "moe_layer_freq": "([0]*3+[1]*58)"})
    got = sets_of(moves)
    assert got["num_layers"] == "4" and got["moe_layer_freq"] == "[0,0,0,1]"
    assert corpus_gpu.one_gpu_moves({"num_layers": 61, "moe_layer_freq": 2}, 2)[0].count("num_layers=2") == 1
    assert "moe_layer_freq=2" not in corpus_gpu.one_gpu_moves({"num_layers": 8, "moe_layer_freq": 2})[0]


def test_a_model_of_fewer_layers_keeps_them():
    assert sets_of(corpus_gpu.one_gpu_moves({"num_layers": 2})[0])["num_layers"] == "2"


def test_hints_are_followed_through_their_first_way_out_only():
    assert corpus_gpu.hint_sets("set moe_permute_fusion=false or install Transformer Engine") == [
        "moe_permute_fusion=false"]
    assert corpus_gpu.hint_sets("--set a=1 --set b=null, or raise c (see --set d=2)") == ["a=1", "b=null"]
    assert corpus_gpu.hint_sets("change the value named above") == []


def run(returncode: int, losses: list[str], skipped: int = 0, output: str = "") -> corpus_gpu.Row:
    row = corpus_gpu.Row("x.sh")
    lines = [f" [2026-12-03 10:00:0{i}] iteration {i + 1:8d}/       4 | consumed samples: {i + 1} | elapsed time per "
             f"iteration (ms): 100.0 | learning rate: 1.0E-04 | global batch size: 1 | lm loss: {loss} | loss "
             f"scale: 1.0 | number of skipped iterations: {skipped:3d} | number of nan iterations:   0 |"
             for i, loss in enumerate(losses)]
    corpus_gpu.judge_run(row, returncode, output, lines)
    return row


def test_the_gpu_verdict_needs_four_finite_unskipped_iterations_and_exit_0():
    assert run(0, ["1.1E+01"] * 4).gpu == "trains"
    assert run(0, ["1.1E+01"] * 3).gpu == "failed"  # a run that stopped early
    assert run(0, ["1.1E+01", "nan", "1.0E+01", "1.0E+01"]).gpu == "failed"
    assert run(0, ["1.1E+01"] * 4, skipped=1).gpu == "failed"  # fp16's loss scale skipped a step
    assert run(1, ["1.1E+01"] * 4, output="torch.OutOfMemoryError: CUDA out of memory").gpu == "failed"
    refused = run(2, [], output="error: gpu memory: too big\nhint: lower it\n")
    assert refused.gpu == "refused" and "error: gpu memory" in refused.gpu_reason


def test_a_checkpoint_write_this_machines_disk_broke_after_good_steps_is_run_again_not_a_verdict():
    short_write = "RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"
    broken = run(1, ["1.1E+01"] * 4, output=short_write)
    assert broken.gpu == "not run" and "checkpoint write failed" in broken.gpu_reason
    assert run(1, ["1.1E+01"] * 4, output="OSError: [Errno 28] No space left on device").gpu == "not run"
    assert run(1, ["1.1E+01"] * 2, output=short_write).gpu == "failed"  # it did not train 4 good steps


def test_a_launch_refused_for_this_machines_disk_follows_the_hint_and_is_judged_on_the_retry(monkeypatch, tmp_path):
    iterations = [f" [2026-12-03 10:00:0{i}] iteration {i + 1:8d}/       4 | consumed samples: {i + 1} | elapsed "
                  f"time per iteration (ms): 100.0 | learning rate: 1.0E-04 | global batch size: 1 | lm loss: 1.1E+01 "
                  f"| loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |"
                  for i in range(4)]
    calls = []

    def launch(preset, overrides, run_root, timeout_s, options=()):
        calls.append(list(overrides))
        if "no_save_optim=true" in overrides:
            return corpus_gpu.ftm.Launched([], 0, "", "", iterations, 30.0)
        refusal = "error: checkpoint space: one checkpoint is ~94 GB; 28 GB free\nhint: (--set no_save_optim=true)\n"
        return corpus_gpu.ftm.Launched([], 2, refusal, "", [], 1.0)

    monkeypatch.setattr(corpus_gpu.ftm, "launch", launch)
    row = corpus_gpu.Row("x.sh", launcher="accepted", overrides=("num_layers=4",))
    corpus_gpu.train_on_gpu(row, tmp_path / "x.yaml", tmp_path, 60)
    assert calls == [["num_layers=4"], ["num_layers=4", "no_save_optim=true", "no_save_rng=true"]]
    assert row.gpu == "trains" and "this machine's disk" in row.gpu_reason and row.gpu_seconds == 31.0
    assert corpus_gpu.agreement(row) is True


@pytest.mark.parametrize(("launcher", "gpu", "agrees"), [
    ("accepted", "trains", True), ("accepted", "failed", False), ("accepted", "refused", False),
    ("refused", "refused", True), ("refused", "trains", False), ("accepted", "not run", None)])
def test_agreement(launcher, gpu, agrees):
    assert corpus_gpu.agreement(corpus_gpu.Row("x", launcher=launcher, gpu=gpu)) is agrees


def test_every_corpus_script_gets_a_dry_run_verdict_without_a_gpu(tmp_path):
    assert corpus_gpu.main(["--out", str(tmp_path), "--write-plan", str(tmp_path / "plan.json")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "verdicts.jsonl").read_text().splitlines()]
    assert len(rows) == len(json.loads((corpus_gpu.CORPUS / "INDEX.json").read_text()))
    assert all(r["launcher"] in ("accepted", "refused") and r["rounds"] for r in rows)
    assert all("internal error" not in r["reason"] for r in rows)
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert set(plan["presets"]) == {r["config"] for r in rows}


def test_a_plans_accepted_jobs_are_rehearsed_with_the_environment_megatrons_checks_see(tmp_path, monkeypatch):
    """--plan with --rehearse judges the plan's accepted jobs again and rehearses each; a WORLD_SIZE the script
    exported (torchrun's to set, and the launcher's for a run without it) never reaches the rehearsal."""
    import functional_test_matrix as ftm

    name = "snellius_h100_train_gpt_self_sbatch.job"  # exports WORLD_SIZE=16
    rows, presets = corpus_gpu.prepare(name, tmp_path)
    assert rows[0].launcher == "accepted"
    # the import leaves the script's WORLD_SIZE out; a preset written by hand may still carry it
    preset = yaml.safe_load(presets[name])
    preset["launcher"].setdefault("env", {})["WORLD_SIZE"] = "16"
    presets[name] = yaml.safe_dump(preset)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"rows": [corpus_gpu.asdict(r) for r in rows], "presets": presets}))
    corpus_gpu.JOBS.clear()
    seen: list[dict] = []

    class Worker:
        def __init__(self, checkout):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def rehearse_many(self, requests):
            seen.extend(env for _argv, env in requests)
            return [{"ok": True, "stage": "done", "error": "", "facts": {"loss": 5.0}}]

    monkeypatch.setattr(ftm, "Rehearser", Worker)
    corpus_gpu.main(["--out", str(tmp_path / "out"), "--plan", str(plan), "--rehearse", str(tmp_path)])
    verdicts = [json.loads(line) for line in (tmp_path / "out" / "verdicts.jsonl").read_text().splitlines()]
    assert [v["rehearsal"] for v in verdicts] == ["ok"]
    assert len(seen) == 1 and "WORLD_SIZE" not in seen[0]
    assert presets[name].count("WORLD_SIZE: '16'") == 1  # still in the preset
