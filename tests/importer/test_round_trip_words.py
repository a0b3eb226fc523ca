"""`launch import` says "equal" only when it is: every word of the script's training command is in the preset's argv
with its value, is Megatron's default left out, or is named by the report (lost, translated, converted, harmless,
added or replaced, given more than once). The words are grouped here by a rule of their own (a flag and the words
up to the next flag), not by the importer's flag reader, so that a word the reader throws away cannot also vanish
from the comparison. Checked on every script of the import corpus and on generated commands."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.cli.job import job_as_declared
from launcher.importer.build import Imported, import_source
from launcher.importer.report import Outcome, as_dict, check_import, render
from launcher.megatron.args import catalog

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "import_corpus"
INDEX = json.loads((CORPUS / "INDEX.json").read_text())
FLAG = re.compile(r"^--?[A-Za-z]")


def word_groups(words: list[str]) -> list[tuple[str | None, list[str]]]:
    """(flag, its values) in order: a word that starts with a dash and a letter opens a flag (`--x=v` carries its
    value); every other word belongs to the flag before it (None: words before any flag)."""
    groups: list[tuple[str | None, list[str]]] = []
    for word in words:
        if FLAG.match(word):
            name, eq, value = word.partition("=")
            groups.append((name, [value] if eq else []))
        elif groups:
            groups[-1][1].append(word)
        else:
            groups.append((None, [word]))
    return groups


def _spelling(flag: str) -> str:
    return "--" + flag.lstrip("-").replace("_", "-")


def _same(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return float(a) == float(b)
    except ValueError:
        return False


def unaccounted(imported: Imported, outcome: Outcome, report: str) -> list[str]:
    """Each word group of the script that the preset's argv does not hold and the report does not name."""
    by_flag = {flag: arg for arg in catalog().values() for flag in arg.flags}
    argv = {_spelling(flag): values for flag, values in word_groups(outcome.argv) if flag}
    missing = []
    for flag, values in word_groups(imported.script_args):
        if flag is None:
            if not all(word in report for word in values):
                missing.append(" ".join(values))
            continue
        spelled, arg = _spelling(flag), by_flag.get(_spelling(flag))
        held = argv.get(spelled)
        if held is not None and len(held) == len(values) and all(map(_same, held, values)):
            continue
        if held is None and arg is not None and (
                (arg.kind == "value" and len(values) == 1 and arg.default is not None
                 and _same(str(arg.default), values[0])) or (arg.kind == "true" and not values and arg.default)):
            continue  # Megatron's default: the same run without the word
        if flag in report or spelled in report or (arg is not None and arg.dest in report):
            continue
        missing.append(" ".join([flag, *values]))
    return missing


def judged(text: str, name: str, args: list[str] | None, tmp: Path,
           environment: dict[str, str] | None = None) -> tuple[Imported, Outcome, str]:
    """The import, its checks and round trip, and the report the user reads."""
    imported = import_source(text, name, args or [], environment=environment)
    preset = tmp / "imported.yaml"
    preset.write_text(imported.text)
    outcome = check_import(imported, preset, job_as_declared)
    return imported, outcome, render(imported, outcome, str(preset))


def strictly_equal(imported: Imported, outcome: Outcome, report: str) -> list[str]:
    """"round trip: equal" claims every word is in the argv: nothing may lean on the report naming it."""
    return unaccounted(imported, outcome, "") if "round trip: equal" in report else []


def says_equal(report: str) -> bool:
    verdict = next(line for line in report.splitlines() if line.startswith("round trip"))
    return "differs" not in verdict


@pytest.mark.parametrize("name", sorted(INDEX))
def test_a_corpus_script_said_equal_has_every_word_in_the_preset_or_named(name, tmp_path):
    imported, outcome, report = judged((CORPUS / name).read_text(), name, INDEX[name].get("args", []), tmp_path,
                                       INDEX[name].get("env"))
    assert as_dict(imported, outcome, None)["round_trip"]["equal"] is says_equal(report)
    if says_equal(report):
        assert unaccounted(imported, outcome, report) == [], report
        assert strictly_equal(imported, outcome, report) == [], report


BASE = ("torchrun --nproc_per_node 1 pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
        "--seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 --lr 1e-4 "
        "--train-iters 10 --eval-interval 10 --eval-iters 1 --mock-data --tokenizer-type NullTokenizer "
        "--vocab-size 1024 --bf16")
# words people write: the pin's flags with odd values, both sides of a switch, other releases' and forks' flags,
# underscores, `=` forms, repeats, a flag the pin has not, stray words
WORDS = ["--lr 2e-4", "--lr=3e-4", "--num-layers 4", "--hidden_size 64", "--rotary-base 500000.0",
         "--position-embedding-type rope", "--rotary-base 1.5", "--hidden-dropout 0.1", "--attention-dropout 0.0",
         "--no-bias-gelu-fusion", "--bias-gelu-fusion", "--checkpoint-activations", "--fp16", "--rms-norm",
         "--swiglu", "--untie-embeddings-and-output-weights", "--moe-num-experts 4", "--num-experts 4",
         "--my-fork-flag 3", "--my-fork-switch", "stray", "--seq_length 128", "--normalization RMSNorm",
         "--lr-warmup-fraction 0.01", "--weight-decay 0.1", "--clip-grad 1.0", "--init-method-std 0.02",
         "--num-query-groups 2 --group-query-attention", "--use-flash-attn", "--make-vocab-size-divisible-by 128",
         "--micro-batch-size 2", "--tensor-model-parallel-size 1", "--distributed-backend nccl", "--foo -1"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(extra=st.lists(st.sampled_from(WORDS), min_size=1, max_size=5))
def test_a_generated_command_said_equal_has_every_word_in_the_preset_or_named(extra, tmp_path):
    imported, outcome, report = judged(" ".join([BASE, *extra]), "train.sh", None, tmp_path)
    assert as_dict(imported, outcome, None)["round_trip"]["equal"] is says_equal(report), report
    if says_equal(report):
        assert unaccounted(imported, outcome, report) == [], report
        assert strictly_equal(imported, outcome, report) == [], report


def test_a_repeated_flag_is_not_called_equal_word_for_word(tmp_path):
    _, _, report = judged(BASE + " --lr 2e-4", "train.sh", None, tmp_path)
    assert "round trip: equal" not in report
    assert "1 given more than once, the last value carried as argparse takes it (--lr)" in report


def test_the_json_round_trip_is_not_equal_when_a_word_is_lost(tmp_path):
    imported, outcome, _ = judged(BASE + " --my-fork-flag 3", "train.sh", None, tmp_path)
    answer = as_dict(imported, outcome, None)["round_trip"]
    assert answer["equal"] is False and answer["lost"] == ["--my-fork-flag 3"]


def test_the_round_trip_names_a_variable_the_ranks_would_not_get_as_the_script_exports_it():
    from launcher.importer.report import env_differences

    assert env_differences({"NCCL_ALGO": "Tree", "NVTE_FUSED_ATTN": "0"}, {"NVTE_FUSED_ATTN": "0"}) == [
        "env NCCL_ALGO: the script exports Tree, the job's ranks get (unset)"]
    assert env_differences({"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}) == [
        "env CUDA_DEVICE_MAX_CONNECTIONS: the script exports 1, the job's ranks get 32"]


def test_exported_numerics_variables_reach_the_ranks_and_the_round_trip_stays_equal(tmp_path):
    # (the attention-kernel variables are translated into attention_backend: tests/importer/test_attention_variables)
    script = ("export NVTE_ALLOW_NONDETERMINISTIC_ALGO=0\nexport NCCL_ALGO=Tree\nNVTE_BIAS_GELU_NVFUSION=0 "
              + BASE + "\n")
    imported, outcome, report = judged(script, "train.sh", None, tmp_path)
    assert imported.env == {"NVTE_ALLOW_NONDETERMINISTIC_ALGO": "0", "NCCL_ALGO": "Tree",
                            "NVTE_BIAS_GELU_NVFUSION": "0"}
    assert outcome.differences == [] and "round trip: equal" in report


def test_what_a_job_launcher_exports_to_every_rank_is_carried(tmp_path):
    # Open MPI's -x and MPICH's -genv set the ranks' environment: the allocator's expandable segments (with TE's
    # CUDA graphs a Megatron assert) were dropped with the wrapper, and the round trip still said equal
    script = ("mpirun -np 8 -x PATH -x PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True -genv NCCL_ALGO Tree "
              + BASE.replace("torchrun --nproc_per_node 1 ", "python ") + "\n")
    imported, outcome, report = judged(script, "train.sh", None, tmp_path)
    assert imported.env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert imported.env["NCCL_ALGO"] == "Tree" and "PATH" not in imported.env
    assert outcome.differences == []
