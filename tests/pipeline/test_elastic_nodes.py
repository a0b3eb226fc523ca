"""`--nodes MIN-MAX`: the job is judged at every node count it could start with; only the counts where every check
holds are kept (and the others said why), none refuses the launch, and each target gets the range it can run."""

from __future__ import annotations

import json
import re

import pytest

from launcher.errors import UserError
from launcher.pipeline.elastic import attempt_range
from launcher.pipeline.node_range import MAX_COUNTS, NodeRange, parse_nodes
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import attempt, target_for


def test_parse_nodes_takes_a_count_or_a_range():
    assert parse_nodes("3") == 3
    assert parse_nodes("2-4") == NodeRange(2, 4)
    assert parse_nodes("2:4") == NodeRange(2, 4)  # torchrun's spelling
    assert parse_nodes("4-4") == 4  # one count is no range


@pytest.mark.parametrize("text", ["0", "4-2", "0-3", "x", "2-", "-2", "2-4-6", f"1-{MAX_COUNTS + 1}",
                                  "1-99999999999"])
def test_parse_nodes_refuses_what_is_no_count_or_range(text):
    with pytest.raises(UserError) as refused:
        parse_nodes(text)
    assert refused.value.problems[0].hint


def slurm_job(overrides: tuple[str, ...], nodes: NodeRange, gpus: int):
    preset = load_preset("345m", list(overrides))
    return attempt_range(preset, nodes, gpus, target=target_for(preset, slurm=True))


def test_each_count_is_judged_and_a_count_that_fails_is_left_out_with_why():
    job, problems = slurm_job((), NodeRange(2, 4), 2)
    assert problems == []
    assert job.elastic.counts == (2, 4) and job.nodes == 4
    ((count, why),) = job.elastic.refused
    assert count == 3 and "data-parallel size 6" in why and "32" in why
    assert [(c.dp, c.num_microbatches) for c in job.elastic.valid] == [(4, 2), (8, 1)]
    assert job.elastic.slurm_nodes == "2-4"
    assert any("leaves out 3 node(s)" in note for note in job.notes)


def test_the_range_is_restricted_to_its_valid_ends():
    job, problems = slurm_job((), NodeRange(3, 5), 2)
    assert problems == [] and job.elastic.counts == (4,) and job.elastic.slurm_nodes == "4"
    assert "restricted to 4" in job.elastic.summary()


@pytest.mark.parametrize("gpus", [1, 2, 8])
def test_every_kept_count_passes_the_same_checks_as_a_fixed_count_with_the_same_flags(gpus):
    """The argv is one for every count: each kept count, resolved on its own with the job's micro batch, is a valid
    job of the same flags, and each left-out count is refused there too."""
    job, problems = slurm_job(("global_batch_size=48",), NodeRange(1, 8), gpus)
    assert problems == []
    preset = load_preset("345m", ["global_batch_size=48", f"micro_batch_size={job.megatron['micro_batch_size']}"])
    for count in range(1, 9):
        alone, found = attempt(preset, count, gpus, target=target_for(preset, slurm=True))
        assert (count in job.elastic.counts) == (not found), (count, found)
        if not found:
            (kept,) = [c for c in job.elastic.valid if c.nodes == count]
            assert (kept.dp, kept.num_microbatches) == (alone.layout.dp, alone.layout.num_microbatches)
            assert kept.dp * kept.num_microbatches * job.megatron["micro_batch_size"] == 48


def test_the_micro_batch_is_fixed_once_for_every_count():
    """The launcher picks the micro batch at the highest count; a lower count keeps it and takes more micro
    batches per step (its own pick would have been larger)."""
    job, problems = slurm_job((), NodeRange(1, 2), 2)
    assert problems == [] and job.megatron["micro_batch_size"] == 8
    assert [(c.nodes, c.dp, c.num_microbatches) for c in job.elastic.valid] == [(1, 2, 2), (2, 4, 1)]


def test_no_count_that_works_refuses_with_every_counts_reason(launch):
    code, out, err = launch("345m", "--nodes", "3-3", "--gpus-per-node", "2", "--slurm", "--dry-run")
    assert code == 2  # one count: the plain refusal
    code, out, err = launch("345m", "--nodes", "2-3", "--gpus-per-node", "8", "--set", "global_batch_size=20",
                            "--slurm", "--dry-run")
    assert code == 2 and "Traceback" not in err
    assert "error: no node count in --nodes 2-3 gives a valid job: 2 node(s): " in err
    assert "; 3 node(s): " in err and "hint:" in err


def test_the_batch_script_asks_slurm_for_the_range_and_refuses_other_counts_at_start(launch):
    code, out, err = launch("345m", "--nodes", "2-4", "--gpus-per-node", "2", "--slurm", "--dry-run")
    assert code == 0, err
    assert "#SBATCH --nodes=2-4\n" in out
    assert "    3)" not in out and "    2) echo" in out and "    4) echo" in out
    assert "world_size=$((SLURM_JOB_NUM_NODES * 2))" in out
    assert "note: leaves out 3 node(s)" in err


def test_the_dry_run_header_says_the_range_and_each_count(launch):
    code, out, err = launch("345m", "--nodes", "1-2", "--gpus-per-node", "2", "--dry-run")
    assert code == 0, err
    assert "# elastic: --nodes 1-2, the job starts with 1, 2 node(s)" in out
    assert "#   1 node(s): world 2, DP 2, 2 micro batch(es) of 8 per step (global batch 32 kept)" in out
    assert "--nnodes 1:2 --nproc-per-node 2 --max-restarts 3 --rdzv-backend c10d" in out
    code, out, err = launch("345m", "--nodes", "1-2", "--gpus-per-node", "2", "--dry-run", "--format", "json")
    elastic = json.loads(out)["elastic"]
    assert elastic["requested"] == "1-2" and [c["nodes"] for c in elastic["valid"]] == [1, 2]


def test_torchrun_run_by_hand_needs_every_count_in_its_range(launch):
    """torchrun's rendezvous may form any count from MIN to MAX: a gap is refused there (not on Slurm, whose batch
    script refuses the count at job start)."""
    code, out, err = launch("345m", "--nodes", "2-4", "--gpus-per-node", "2", "--dry-run")
    assert code == 2
    assert "torchrun may form any count from 2 to 4, but only 2, 4 work" in err
    assert "hint: give a range whose every count works, e.g. --nodes 4" in err


def test_kubernetes_refuses_a_range(launch):
    code, out, err = launch("345m", "--nodes", "2-4", "--k8s", "--dry-run")
    assert code == 2 and "Traceback" not in err
    assert "JobSet" in err and "hint: give one count" in err


def test_memory_is_judged_at_the_fewest_nodes_where_the_optimizer_is_split_least():
    from launcher.cli.job import JobRequest, job_for

    preset = load_preset("175b", ["tensor_model_parallel_size=8", "pipeline_model_parallel_size=1",
                                  "global_batch_size=64"])
    fixed, fixed_problems = job_for(preset, JobRequest(8, 8, slurm=True, judge=True))
    ranged, problems = job_for(preset, JobRequest(NodeRange(1, 8), 8, slurm=True, judge=True))
    assert ranged.nodes == 8 and ranged.layout == fixed.layout  # the header's layout: the highest count's
    (memory,) = [p for p in problems if "memory estimate" in p.message]
    assert memory.message.startswith("with 1 node(s), the fewest of --nodes 1-8: the memory estimate")
    messages = (memory.message, *[p.message for p in fixed_problems if "memory estimate" in p.message])
    fewest, highest = (float(re.search(r"~([\d.]+) GiB", text).group(1)) for text in messages)
    assert fewest > highest  # DP 1 holds the whole optimizer state on each rank
    assert "a higher MIN" in memory.hint


def test_a_random_state_per_data_parallel_rank_cannot_follow_a_count_change():
    job, problems = slurm_job(("data_parallel_random_init=true",), NodeRange(1, 2), 2)
    assert any("data_parallel_random_init" in p.message for p in problems)
    job, problems = slurm_job(("data_parallel_random_init=true", "no_load_rng=true"), NodeRange(1, 2), 2)
    assert problems == []
