"""Input that is wrong, damaged or built to hurt: exit 2 with a short message, bounded work, never a traceback."""

import json
import os
from pathlib import Path

import pytest

from launcher import cli, untrusted
from launcher.errors import UserError
from launcher.pipeline.pipeline_layout import unroll_pipeline_layout
from launcher.pipeline.preset import MAX_BASE_CHAIN, load_preset

# Under 500 bytes that PyYAML builds as shared lists, 9**9 strings wherever the value is walked or printed.
ALIAS_BOMB = "[" + ", ".join(
    ['&a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"&{n} [{', '.join([f'*{p}'] * 9)}]" for p, n in zip("abcdefgh", "bcdefghi")]) + "]"


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def preset_file(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, expected", [
    ("description: 2024-13-45\n", "line 1"),
    ("description: !!timestamp foo\n", "timestamp"),
    ("launcher:\n  nodes: !!int abc\n", "line 2"),
    ("megatron:\n  num_layers: " + "9" * 5000 + "\n", "as int"),
    ("description: " + "[" * 5000 + "\n", "nesting"),  # libyaml: "exceeded maximum nesting depth"
    ("megatron: {num_layers: 2, num_layers: 4}\n", "twice"),
    ("description: &x [*x]\n", "valid YAML"),
])
def test_yaml_pyyaml_cannot_build_is_a_user_error(tmp_path, capsys, text, expected):
    path = preset_file(tmp_path, text)
    with pytest.raises(UserError, match=expected):
        load_preset(str(path))
    code, _, err = run_cli(capsys, str(path), "--dry-run")
    assert code == 2 and err.startswith("error:") and "Traceback" not in err


def test_repeated_key_names_both_lines(tmp_path):
    path = preset_file(tmp_path, "base: toy\nlauncher:\n  nodes: 1\n  gpus_per_node: 2\n  nodes: 2\n")
    with pytest.raises(UserError, match="'nodes' appears twice in one mapping, at line 3 and line 5"):
        load_preset(str(path))


def test_merge_key_override_is_not_a_repeated_key():
    data = untrusted.load_yaml("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  x: 3\n", "test")
    assert data["other"] == {"x": 3, "y": 2}


def test_set_value_pyyaml_cannot_build(capsys):
    code, _, err = run_cli(capsys, "toy", "--set", "nodes=2024-13-45", "--dry-run")
    assert code == 2 and "must be an integer" in err


@pytest.mark.parametrize("where", [
    "description: BOMB\n",
    "launcher:\n  env:\n    A: BOMB\n",
    "megatron:\n  num_layers: BOMB\n",
    "launcher:\n  slurm:\n    extra_sbatch: BOMB\n",
    "megatron:\n  data_path: BOMB\n",
])
def test_alias_bomb_is_refused_quickly(tmp_path, capsys, where):
    assert len(ALIAS_BOMB) < 500
    path = preset_file(tmp_path, "base: toy\n" + where.replace("BOMB", ALIAS_BOMB))
    code, _, err = run_cli(capsys, str(path), "--dry-run")
    assert code == 2 and "expands to more than" in err
    assert len(err) < 2000


def test_benign_aliases_still_work(tmp_path):
    path = preset_file(tmp_path, "base: toy\nlauncher:\n  env:\n    A: &v hello\n    B: *v\n")
    env = load_preset(str(path)).launcher.env
    assert env["A"] == env["B"] == "hello"


def test_huge_values_are_cut_in_messages(tmp_path, capsys):
    path = preset_file(tmp_path, "base: toy\nmegatron:\n  num_layers: " + "x" * 1_000_000 + "\n")
    code, _, err = run_cli(capsys, str(path), "--dry-run")
    assert code == 2 and "characters]" in err and len(err) < 2000


@pytest.mark.parametrize("as_base", [False, True])
def test_devices_and_huge_files_are_not_read(tmp_path, capsys, as_base):
    target = "/dev/zero"
    if as_base:
        target = str(preset_file(tmp_path, "base: /dev/zero\n"))
    code, _, err = run_cli(capsys, target, "--dry-run")
    assert code == 2 and "not a regular file" in err
    big = tmp_path / "big.yaml"
    with big.open("wb") as handle:
        handle.truncate(untrusted.MAX_FILE_BYTES + 1)  # sparse: no disk used
    code, _, err = run_cli(capsys, str(big), "--dry-run")
    assert code == 2 and "at most" in err


def test_a_long_base_chain_is_refused(tmp_path, capsys):
    previous = "toy"
    for i in range(1100):
        preset_file(tmp_path, f"base: {previous}\n", f"p{i}.yaml")
        previous = f"p{i}.yaml"
    code, _, err = run_cli(capsys, str(tmp_path / previous), "--dry-run")
    assert code == 2 and f"more than {MAX_BASE_CHAIN} base: files deep" in err


def test_pipeline_layout_is_bounded_before_it_is_unrolled(capsys):
    with pytest.raises(ValueError, match="unrolls to more than"):
        unroll_pipeline_layout("E|t*3000000000|L", limit=1000)
    with pytest.raises(ValueError):
        unroll_pipeline_layout("E|(t|)*" + "9" * 5000 + "L", limit=1000)
    assert unroll_pipeline_layout("E|(t|)*3,L") == ["E", "t", "t", "t", "L"]
    code, _, err = run_cli(capsys, "345m", "--dry-run", "--set", "pipeline_model_parallel_size=2",
                           "--set", "pipeline_model_parallel_layout=E|t*3000000000|L")
    assert code == 2 and "pipeline_model_parallel_layout" in err and "unrolls" in err


def test_internal_error_is_one_line_and_a_traceback_file(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)

    def broken(argv):
        raise KeyError("a bug\nwith two lines")

    monkeypatch.setitem(cli.SUBCOMMANDS, "list", broken)
    code, out, err = run_cli(capsys, "list", "--set", "env.API_KEY=hunter2")
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1 and "internal error" in err
    (written,) = tmp_path.glob("megatron-launch-crash-*.txt")
    assert str(written) in err
    text = written.read_text()
    assert "Traceback" in text and "KeyError" in text and "hunter2" not in text


def test_damaged_manifest_types_on_resume(tmp_path, capsys):
    run_dir = tmp_path / "runs" / "toy-20260101T000000Z"
    run_dir.mkdir(parents=True)
    (run_dir / "preset.yaml").write_text("base: toy\n")
    for manifest in ({"preset": ["x"], "attempts": 5}, {"checkpoint_dir": 7}, [1, 2], "not json {"):
        (run_dir / "manifest.json").write_text(json.dumps(manifest) if not isinstance(manifest, str) else manifest)
        code, _, err = run_cli(capsys, "--resume", str(run_dir))
        assert code == 2 and "damaged run directory" in err, err
    (run_dir / "manifest.json").write_text("{}")
    (run_dir / "preset.yaml").write_text("megatron: 5\n")
    code, _, err = run_cli(capsys, "--resume", str(run_dir))
    assert code == 2 and "Traceback" not in err


@pytest.mark.parametrize("overrides, expected", [
    (["global_batch_size=null", "step_batch_size_schedule=0:16 1.2.3B:32"], 2),
    # an override routes the toy through pretrain_gpt.py (the simple loop takes none), which needs a vocabulary
    (["vocab_size=null"], 2),
])
def test_odd_override_combinations(capsys, overrides, expected):
    argv = ["toy", "--dry-run"]
    for text in overrides:
        argv += ["--set", text]
    code, out, err = run_cli(capsys, *argv)
    assert code == expected and "internal error" not in err, err
    assert expected == 2 or "padded vocab unknown" in out


def test_fifo_is_not_waited_on(tmp_path, capsys):
    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    code, _, err = run_cli(capsys, str(fifo), "--dry-run")
    assert code == 2 and "not a regular file" in err


def _data_preset(tmp_path: Path, *overrides: str) -> list[str]:
    argv = ["345m", "--dry-run", "--set", "mock_data=false", "--set", f"data_path={tmp_path}/absent"]
    for text in overrides:
        argv += ["--set", text]
    return argv


@pytest.mark.parametrize("vocab", ["12345", "[1, 2]", '{"a": "x"}', "[" * 100_000, "{"])
def test_vocab_file_that_is_not_a_vocab(tmp_path, capsys, vocab):
    (tmp_path / "vocab.json").write_text(vocab)
    (tmp_path / "merges.txt").write_text("")
    code, _, err = run_cli(capsys, *_data_preset(tmp_path, "tokenizer_type=GPT2BPETokenizer",
                                                 f"vocab_file={tmp_path}/vocab.json",
                                                 f"merge_file={tmp_path}/merges.txt"))
    assert code == 2 and "vocab_file" in err and "internal error" not in err, err


@pytest.mark.parametrize("spec", ['{"model": {"vocab": 5', '[1]', '{"model": {"vocab": {"a": "x"}}}',
                                  '{"model": {"vocab": {}}, "added_tokens": [{"id": "x"}]}', "[" * 100_000])
def test_malformed_tokenizer_json(tmp_path, capsys, spec):
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text(spec)
    code, _, err = run_cli(capsys, *_data_preset(tmp_path, "tokenizer_type=HuggingFaceTokenizer",
                                                 f"tokenizer_model={tmp_path}/tok"))
    assert code == 2 and "tokenizer.json" in err and "internal error" not in err, err


@pytest.mark.parametrize("content", ['{"train": 5}', '{"train": [{"a": 1}]}', "[1]", "[" * 100_000])
def test_per_split_data_args_with_wrong_types(tmp_path, capsys, content):
    (tmp_path / "split.json").write_text(content)
    code, _, err = run_cli(capsys, "345m", "--dry-run", "--set", "mock_data=false",
                           "--set", f"per_split_data_args_path={tmp_path}/split.json")
    assert code == 2 and "per_split_data_args_path" in err and "internal error" not in err, err


def test_damaged_gzip_input_to_prepare_data(tmp_path, capsys):
    import gzip
    import random

    rng = random.Random(1)
    with gzip.open(tmp_path / "good.jsonl.gz", "wt") as handle:
        for _ in range(3000):
            handle.write(json.dumps({"text": "".join(rng.choice("abcdefgh ") for _ in range(200))}) + "\n")
    data = (tmp_path / "good.jsonl.gz").read_bytes()
    (tmp_path / "cut.jsonl.gz").write_bytes(data[:len(data) // 2])
    (tmp_path / "plain.jsonl.gz").write_text('{"text": "not gzip"}\n')
    for name in ("cut", "plain"):
        code, _, err = run_cli(capsys, "prepare-data", str(tmp_path / f"{name}.jsonl.gz"), "--output-prefix",
                               str(tmp_path / f"out-{name}"), "--tokenizer", "byte", "--workers", "1")
        assert code == 2 and "not a complete gzip file" in err, err
        assert not list(tmp_path.glob(f"out-{name}*"))


FIXTURE_LOGS = Path(__file__).parents[1] / "fixtures" / "logs"


def _edited_log(tmp_path: Path, pattern: str, replacement: str) -> Path:
    import re

    text = (FIXTURE_LOGS / "toy_fp32_1gpu.log").read_text()
    path = tmp_path / "edited.log"
    path.write_text(re.sub(pattern, replacement, text))
    return path


def test_report_a_log_whose_every_loss_is_nan_is_a_failure(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a log's plots go to ./plots/<name>: never into the repository
    log = _edited_log(tmp_path, r"lm loss: \S+", "lm loss: NAN")
    code, out, err = run_cli(capsys, "report", str(log), "--format", "json")
    assert code == 1, err  # the report is made; a failed run's report exits 1
    data = json.loads(out, parse_constant=lambda name: pytest.fail(f"bare {name} in JSON"))
    assert data["summary"]["outcome"] == "failed" and data["summary"]["final_loss"] is None
    assert any("loss is nan" in reason for reason in data["summary"]["reasons"])


def test_report_ignores_negative_times(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    log = _edited_log(tmp_path, r"elapsed time per iteration \(ms\): \S+", "elapsed time per iteration (ms): -5.0")
    code, out, err = run_cli(capsys, "report", str(log), "--format", "json")
    assert code == 0, err
    summary = json.loads(out)["summary"]
    assert summary["steady_ms_per_iter"] is None and summary["steady_tokens_per_s"] is None


def test_report_refuses_devices_and_unwritable_output(tmp_path, capsys):
    code, _, err = run_cli(capsys, "report", "/dev/zero")
    assert code == 2 and "not a regular file" in err
    log = FIXTURE_LOGS / "toy_fp32_1gpu.log"
    code, _, err = run_cli(capsys, "report", str(log), "--output-dir", "/proc/x")
    assert code == 2 and "cannot write the plots" in err


def test_report_on_damaged_metrics(tmp_path, capsys):
    run_dir = tmp_path / "toy-20260101T000000Z"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "manifest.json").write_text("{}")
    (run_dir / "preset.yaml").write_text("megatron: {seq_length: 64}\n")
    (run_dir / "metrics.jsonl").write_text(
        '{"kind": "iteration", "iteration": 1, "loss": "x", "lr": [1]}\n'
        '{"kind": "iteration", "iteration": "2", "loss": 1.0}\n' + "[" * 100_000 + "\n")
    code, _, err = run_cli(capsys, "report", str(run_dir))
    assert code == 2 and "not JSON" in err


def test_divisor_hints_are_bounded_work(capsys):
    from launcher.pipeline.divisors import divisors  # the one divisors: layout rules and search both use it

    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(1_000_000_007) == [1, 1_000_000_007]  # a prime: sqrt(n) trials, not n
    assert len(divisors(10**9)) == 100
    code, _, err = run_cli(capsys, "345m", "--dry-run", "--set", "num_attention_heads=1000000000")
    assert code == 2 and "num_attention_heads" in err


# -- what the terminal shows is what runs ---------------------------------------------------------------------------

INVISIBLE = ["\u202e", "\u2066", "\u200b", "\u200d", "\ufeff", "\u2028", "\u2029", "\u00ad", "\u061c"]


@pytest.mark.parametrize("char", INVISIBLE)
@pytest.mark.parametrize("command", [("toy", "--dry-run"), ("show", "toy"), ("toy", "--dry-run", "--format", "json")])
def test_bidi_zero_width_and_separator_characters_never_reach_the_terminal_raw(capsys, char, command):
    code, out, err = run_cli(capsys, *command, "--set", f"env.X=a{char}b", "--set", f"wandb_exp_name=d{char}e")
    assert code == 0, err
    assert char not in out + err


def test_a_dry_run_writes_an_invisible_character_so_that_the_pasted_command_is_the_same(capsys):
    code, out, _ = run_cli(capsys, "toy", "--dry-run", "--set", "env.X=a\u202eb\u200bc")
    assert code == 0
    assert "export X=$'a\\xe2\\x80\\xaeb\\xe2\\x80\\x8bc'" in out.splitlines()


@pytest.mark.parametrize("argv", [
    ("toy", "--set", "env.X=x\udcff"), ("toy", "--dry-run", "--set", "lr=1\udce9"), ("show", "t\udcffy"),
    ("report", "runs/\udcff"), ("plan", "toy", "--set", "env.X=\udcff"),
])
def test_a_non_utf8_argument_is_refused_cleanly(capsys, argv):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert "holds a byte that is not UTF-8 text" in err and "hint:" in err


# -- Kubernetes values the API server would refuse ------------------------------------------------------------------

@pytest.mark.parametrize("setting, expected", [
    ("k8s.time=99999999999999999999", "out of range"), ("k8s.time=0", "out of range"),
    ("k8s.shm_size=-1Gi", "not a positive size"), ("k8s.shm_size=-64", "not a positive size"),
    ("k8s.shm_size=0Mi", "not a positive size"),
])
def test_kubernetes_values_the_api_server_refuses_are_refused_with_a_hint(capsys, setting, expected):
    code, _, err = run_cli(capsys, "toy", "--k8s", "--dry-run", "--gpus-per-node", "2", "--set", setting)
    assert code == 2 and expected in err and "hint:" in err, err


# -- every refusal says what to do ------------------------------------------------------------------------------------

def test_every_problem_renders_a_hint_even_one_written_without():
    from launcher.errors import Problem

    for message in ("x must be at least 1, got 0", "something is wrong", "p.yaml is not valid YAML at line 2"):
        rendered = UserError(Problem(message)).render()
        assert rendered.splitlines()[1].startswith("  hint: ") and len(rendered.splitlines()[1]) > 10
        assert json.loads(UserError(Problem(message)).as_json())["problems"][0]["hint"]


@pytest.mark.parametrize("argv", [
    ("plan", "345m", "--set", "pipeline_model_parallel_size=0"),
    ("plan", "345m", "--set", "tensor_model_parallel_size=-1"),
    ("plan", "345m", "--set", "num_layers=0"),
    ("plan", "345m", "--set", "pipeline_model_parallel_layout=Eqq|L"),
    ("345m", "--dry-run", "--set", "pipeline_model_parallel_layout=Ex|L"),
    ("345m", "--dry-run", "--set", "pipeline_model_parallel_size=0"),
    ("plan", "345m", "--tflops", "nan"), ("plan", "345m", "--tflops", "inf"), ("plan", "345m", "--tflops", "1e400"),
    ("plan", "345m", "--ckpt-write-gbps", "nan"),
])
def test_crafted_plan_and_layout_values_are_refused_with_a_hint(capsys, argv):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2, out + err
    assert "internal error" not in err and "hint:" in err


def test_a_preset_with_its_own_layout_string_is_planned_not_crashed(capsys):
    # a valid layout string (2 stages) the plan understands: its own layout is priced, others are ranked
    code, out, err = run_cli(capsys, "plan", "345m", "--set", "pipeline_model_parallel_layout=Et*23|tL",
                             "--set", "pipeline_model_parallel_size=2")
    assert code in (0, 2) and "internal error" not in err and "Traceback" not in err


def test_plan_json_never_holds_nan(capsys):
    code, out, _ = run_cli(capsys, "plan", "345m", "--tflops", "300", "--format", "json")
    assert code == 0
    json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in plan --format json"))


def test_a_preset_with_base_twice_is_refused_with_a_hint(tmp_path, capsys):
    path = preset_file(tmp_path, "base: toy\nbase: 345m\n")
    code, _, err = run_cli(capsys, str(path), "--dry-run")
    assert code == 2 and "appears twice" in err and "hint: keep one of them" in err


def test_import_of_a_nan_flag_value_is_no_internal_error(capsys):
    code, out, err = run_cli(capsys, "import", "--", "torchrun", "pretrain_gpt.py", "--lr", "nan", "--num-layers", "2")
    assert "internal error" not in err
    assert code == 2 and "Traceback" not in err  # carried as given and refused by the check (the round-trip tests)


def test_import_of_a_yaml_alias_bomb_is_bounded(tmp_path, capsys):
    import time

    path = preset_file(tmp_path, "MODEL_ARGS: " + ALIAS_BOMB + "\n", "functional.yaml")
    started = time.monotonic()
    code, _, err = run_cli(capsys, "import", str(path))
    assert time.monotonic() - started < 10
    assert code == 2 and "expands to more than" in err and "hint:" in err


def test_import_onto_a_device_replaces_nothing(capsys):
    before = os.stat("/dev/full")
    code, _, err = run_cli(capsys, "import", "-o", "/dev/full", "--", "torchrun", "pretrain_gpt.py",
                           "--num-layers", "2")
    assert code == 2 and "not a regular file" in err and "hint:" in err
    assert os.stat("/dev/full").st_rdev == before.st_rdev


def test_import_onto_a_full_disk_leaves_no_empty_file(tmp_path, capsys, monkeypatch):
    import errno

    from launcher import nofollow

    real_fdopen = os.fdopen

    class Full:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(nofollow.os, "fdopen", lambda fd, *a, **k: Full(real_fdopen(fd, *a, **k)))
    target = tmp_path / "out.yaml"
    code, _, err = run_cli(capsys, "import", "-o", str(target), "--", "torchrun", "pretrain_gpt.py",
                           "--num-layers", "2")
    monkeypatch.undo()
    assert code == 2 and "No space left" in err and "hint:" in err
    assert list(tmp_path.iterdir()) == []
