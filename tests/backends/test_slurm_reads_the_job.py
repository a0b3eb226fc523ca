"""The Slurm backend renders the resolved job: its settings (parsed once, in resolve), its --preflight settings,
its rendezvous port and its command's torchrun words; it re-derives nothing."""

from pathlib import Path

from launcher.backends import slurm
from launcher.checks.data import check_job_data
from launcher.pipeline.command import build_command
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve, target_for

RUNS = Path("/shared/runs/345m")


def slurm_job(overrides=(), preflight=False, nodes=2, gpus=4):
    preset = load_preset("345m", list(overrides))
    return resolve(preset, nodes, gpus, target=target_for(preset, slurm=True), run_dir=RUNS, preflight=preflight,
                   megatron_path=Path("/opt/megatron-lm"), data_check=check_job_data)


def rendered(job):
    return slurm.render_batch_script(slurm.prepare_job(job, build_command(job)).job)


def test_the_batch_script_runs_the_commands_torchrun_words():
    job = slurm_job()
    command = build_command(job)
    runner = command.shell_words()[:command.argv.index(command.script)]
    assert runner == [job.runtime.torchrun, '--nnodes="$SLURM_NNODES"', "--nproc-per-node=4", "--rdzv-backend=c10d",
                      '--rdzv-endpoint="$head_node:$rdzv_port"', '--rdzv-id="$SLURM_JOB_ID"']
    text = rendered(job)
    assert "".join(f"    {word} \\\n" for word in runner) in text


def test_the_rendezvous_port_is_decided_once_in_resolve():
    job = slurm_job(["slurm.rdzv_port=29511", "master_port=29400"])
    assert job.rdzv_port == 29511
    assert "\nrdzv_port=29511\n" in rendered(job)
    assert slurm_job(["master_port=29400"]).rdzv_port == 29400


def test_preflight_settings_for_slurm_are_decided_in_resolve():
    settings = slurm_job(["slurm.chain=1", "slurm.job_name=gpt"], preflight=True).target.slurm_settings
    assert (settings.requeue, settings.chain, settings.job_name) == (False, 1, "gpt-preflight")
    text = rendered(slurm_job(preflight=True))
    assert "#SBATCH --job-name=megatron-345m-preflight\n" in text and "#SBATCH --no-requeue\n" in text


def test_the_backend_renders_the_settings_resolve_parsed():
    """A job whose placement says otherwise than its preset's slurm: section renders the placement's."""
    from dataclasses import replace

    job = slurm_job(["slurm.partition=batch"])
    placed = replace(job.target, slurm_settings=replace(job.target.slurm_settings, partition="other"))
    assert "#SBATCH --partition=other\n" in rendered(replace(job, target=placed))
