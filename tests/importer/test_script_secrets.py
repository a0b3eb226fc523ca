"""Secrets next to the training command: one a job launcher or container runtime passes to the ranks on its own
command line (mpirun -x, mpiexec -genv/-env, srun --export, jsrun -E, docker -e, apptainer --env, env) is read as the
variable it sets, one a script keeps in a variable of its own (exported or not) is remembered as it is set, and a
manifest's env is never read as a bash script: none is carried into the preset or shown in what the import writes."""

from __future__ import annotations

import pytest
import yaml

from launcher import redaction
from launcher.errors import UserError
from launcher.importer.build import import_source

MODEL = ("pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 "
         "--max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 --train-iters 4 --mock-data "
         "--tokenizer-type NullTokenizer --vocab-size 128")
SECRET = "s3cr3t-Pw9"  # no credential's form: a secret only by the name it is given

WRAPPERS = [
    "mpirun -np 8 -x DB_PASSWORD={s}",
    "mpirun -np 8 --x=DB_PASSWORD={s}",
    "mpiexec -n 8 -genv DB_PASSWORD {s}",
    "mpiexec -n 8 -env DB_PASSWORD {s}",
    "mpiexec -n 8 --env DB_PASSWORD {s}",
    "mpiexec -n 8 --env DB_PASSWORD={s}",
    "srun -N 1 --ntasks-per-node 8 --export=ALL,DB_PASSWORD={s},NCCL_DEBUG=INFO",
    "srun -N 1 --ntasks-per-node 8 --export ALL,DB_PASSWORD={s}",
    "jsrun -n 8 -r 8 -E DB_PASSWORD={s}",
    "jsrun -n 8 -r 8 --env DB_PASSWORD={s}",
    "srun -N 1 --ntasks-per-node 8 docker run -e DB_PASSWORD={s} img",
    "srun -N 1 --ntasks-per-node 8 apptainer exec --env DB_PASSWORD={s} img.sif",
    "env DB_PASSWORD={s} mpirun -np 8",
    # forms this reader knows as no environment option: the value after a secret's name is still not shown
    "mpirun -np 8 --mca-env DB_PASSWORD {s}",
    "mpirun -np 8 --vars=A=1,DB_PASSWORD={s}",
]


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_a_secret_passed_by_the_job_launcher_is_written_nowhere(wrapper):
    imported = import_source(f"#!/bin/bash\n{wrapper.format(s=SECRET)} python {MODEL}\n", "train.sh")
    written = redaction.for_file(imported.text)  # what nofollow.write_atomic writes
    assert SECRET not in written, [line for line in written.splitlines() if SECRET in line]
    assert "DB_PASSWORD" not in imported.env
    assert not any(SECRET in redaction.scrub(note) for note in imported.not_carried)


def test_a_variable_the_launcher_passes_is_carried_as_the_ranks_see_it():
    imported = import_source(f"#!/bin/bash\nsrun -N 1 --ntasks-per-node 8 --export=ALL,NCCL_DEBUG=INFO,A=1 "
                             f"python {MODEL}\nmpiexec -n 8 -genv NCCL_ALGO Ring -env B 2 python {MODEL}\n", "t.sh")
    assert {k: imported.env[k] for k in ("NCCL_ALGO", "B")} == {"NCCL_ALGO": "Ring", "B": "2"}


@pytest.mark.parametrize("use", ['mysql --password="$DB_PASSWORD" -e "select 1"', 'curl -u "me:$API_SECRET" x',
                                 'echo "$DB_PASSWORD" | docker login --password-stdin'])
def test_a_secret_the_script_keeps_in_a_variable_is_written_nowhere(use):
    script = f"#!/bin/bash\nDB_PASSWORD={SECRET}x\nreadonly API_SECRET={SECRET}y\n{use}\ntorchrun {MODEL}\n"
    written = redaction.for_file(import_source(script, "train.sh").text)
    assert SECRET not in written, [line for line in written.splitlines() if SECRET in line]


def test_a_secret_named_variable_holding_a_number_or_a_name_scrubs_no_setting():
    # KEY_BITS=4096 is no credential; remembered, every 4096 of the preset would read <redacted>
    script = ("#!/bin/bash\nKEY_BITS=4096\nfor KEY in SEQ_LENGTH_OF_IT; do :; done\nAUTH_FILE=/etc/auth.json\n"
              f"torchrun {MODEL.replace('--seq-length 128', '--seq-length 4096')} --max-position-embeddings 4096\n")
    written = redaction.for_file(import_source(script, "train.sh").text)
    assert "seq_length: 4096" in written and redaction.REDACTED not in written


def test_a_manifest_nested_past_the_limit_is_refused_not_read_as_a_script():
    # read as bash, each `value: …` line of the container's env was shown as a command not carried
    job = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gpt"}, "spec": {"containers": [
        {"name": "t", "image": "img", "command": ["torchrun", *MODEL.split()],
         "env": [{"name": "DB_PASSWORD", "value": SECRET}]}]}}
    for deep in ("a: " + "[" * 100 + "]" * 100 + "\n", "a: " + "[" * 5000 + "]" * 5000 + "\n"):
        with pytest.raises(UserError, match="nesting deeper than 64 levels"):
            import_source(deep + yaml.safe_dump(job), "job.yaml")


@pytest.mark.parametrize("given", ["--wandb-api-key {v}", "--hf-token={v}", "--db-password {v}", "--api-key {v}"])
def test_a_credential_given_to_a_flag_no_megatron_takes_is_written_nowhere(given):
    # the value comes from a variable whose name says nothing: only the flag's name says it is a credential
    script = f"#!/bin/bash\nV={SECRET}z\ntorchrun {MODEL} {given.format(v='$V')}\n"
    written = redaction.for_file(import_source(script, "train.sh").text)
    assert SECRET not in written, [line for line in written.splitlines() if SECRET in line]


@pytest.mark.parametrize("command", [
    "wandb login {s}", "huggingface-cli login --token {s}", "hf auth login --token={s}", "hf auth login {s}",
    "some-tool --password {s}", "some-tool --api-key={s}", "curl -H x --access-token {s} https://example.com",
])
def test_a_credential_on_a_command_the_import_does_not_carry_is_not_shown_in_its_note(command):
    """Such lines are named in the preset's "not carried" comments: the credential typed there must not be."""
    script = f"#!/bin/bash\n{command.format(s=SECRET)}\ntorchrun {MODEL}\n"
    imported = import_source(script, "train.sh")
    assert SECRET not in imported.text and any(redaction.REDACTED in line for line in imported.not_carried)
    assert command.split()[0] in imported.text  # the line is still named


@pytest.mark.parametrize(("assignment", "flag", "setting", "value"), [
    # HabanaAI's DeepSeek-V3 job: TOKEN_DISPATCHER_TYPE=${HL_TOKEN_DISPATCHER_TYPE:-allgather}; the preset's
    # dispatcher was <redacted>, which the dry-run then refused as no choice of the flag
    ("TOKEN_DISPATCHER_TYPE=allgather", "--moe-token-dispatcher-type $TOKEN_DISPATCHER_TYPE",
     "moe_token_dispatcher_type", "allgather"),
    ("IMPL_KEY=transformer_engine", "--transformer-impl $IMPL_KEY", "transformer_impl", "transformer_engine"),
    ("NORM_TOKEN=LayerNorm", "--normalization $NORM_TOKEN", "normalization", "LayerNorm"),
])
def test_a_word_megatron_chooses_from_is_no_secret_whatever_its_variable_is_called(assignment, flag, setting, value):
    imported = import_source(f"#!/bin/bash\n{assignment}\ntorchrun --nproc_per_node 8 {MODEL} --num-experts 8 "
                             f"{flag}\n", "train.sh")
    assert imported.settings[setting] == value
    assert redaction.REDACTED not in imported.text


def test_a_secret_under_such_a_name_is_still_one():
    imported = import_source(f"#!/bin/bash\nDISPATCH_TOKEN={SECRET}x\ntorchrun --nproc_per_node 8 {MODEL} "
                             f"--wandb-exp-name $DISPATCH_TOKEN\n", "train.sh")
    assert SECRET not in imported.text


WRITTEN = [
    ("cat > ds.json <<EOF\n{{\"train_batch_size\": 8, \"comet\": {{\"api_key\": \"{s}\"}}}}\nEOF\n",
     "--deepspeed_config ds.json"),
    ("echo '{{\"hf_token\": \"{s}\", \"steps_per_print\": 1}}' > ds.json\n", "--deepspeed_config ds.json"),
    ("cat > cfg.yaml <<'EOF'\nwandb:\n  api_key: {s}   # the team's\nEOF\n", "--yaml-cfg cfg.yaml"),
    ("echo \"export DB_PASSWORD={s}\" > creds.env\n", "--yaml-cfg creds.env"),
    ("cat > ds.json <<EOF\n{{\"x\": {{\"Password\" : '{s}'}}}}\nEOF\n",
     "--deepspeed_config ds.json --tokenizer-config \"$(cat ds.json)\""),
]


@pytest.mark.parametrize(("writes", "flag"), WRITTEN)
def test_a_secret_member_of_a_file_the_script_writes_is_shown_nowhere(writes, flag):
    script = f"#!/bin/bash\n{writes.format(s=SECRET + 'w')}torchrun {MODEL} {flag}\n"
    imported = import_source(script, "train.sh")
    written = redaction.for_file(imported.text)
    assert SECRET not in written, [line for line in written.splitlines() if SECRET in line]
    notes = [redaction.scrub(n) for n in (*imported.not_carried, *imported.lost)]
    assert not any(SECRET in n for n in notes), notes
    assert any("<redacted>" in n for n in notes)  # the file's text is still shown, its secret not


def test_a_written_files_members_that_are_no_secret_are_shown_as_written():
    script = (f"#!/bin/bash\ncat > cfg.yaml <<'EOF'\nkey_bits: 4096\ntokenizer_type: GPT2BPETokenizer\nEOF\n"
              f"torchrun {MODEL} --yaml-cfg cfg.yaml\n")
    (line,) = [n for n in import_source(script, "train.sh").lost if n.startswith("--yaml-cfg")]
    assert "key_bits: 4096" in redaction.scrub(line) and "tokenizer_type: GPT2BPETokenizer" in redaction.scrub(line)
