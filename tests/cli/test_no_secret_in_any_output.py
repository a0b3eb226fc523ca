"""One secret rule for every output: a secret's value (an env variable named *TOKEN*, *KEY*, *PASSWORD*, …) is in
no stdout, stderr, JSON or file of any command, error messages included; options cannot be abbreviated (an
abbreviation would slip past the redaction of --set); terminal controls in values never reach the terminal raw."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.cli import main

SECRET = "hf_s3cr3tvalue"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv", [
    ("345m", "--dry-run"),
    ("345m", "--dry-run", "--format", "json"),
    ("345m", "--dry-run", "--slurm"),
    ("show", "345m"),
    ("show", "345m", "--format", "json"),
    ("345m", "--dry-run", "--set", f"lr={SECRET}"),  # an error message quoting the value
    ("345m", "--dry-run", "--slurm", "--set", f"env.DB_PASSWORD={SECRET}'x"),  # a Slurm refusal quoting it
])
def test_no_command_prints_a_secret_value(capsys, argv):
    code, out, err = _run(capsys, *argv, "--set", f"env.HF_TOKEN={SECRET}")
    assert SECRET not in out and SECRET not in err
    assert code in (0, 2)


def test_the_dry_run_exports_a_secret_from_the_environment_as_command_sh_does(capsys):
    code, out, _ = _run(capsys, "345m", "--dry-run", "--set", f"env.HF_TOKEN={SECRET}")
    assert code == 0
    assert 'export HF_TOKEN="${HF_TOKEN:?HF_TOKEN is a secret and is not stored in this file: export it first}"' \
        in out.splitlines()
    code, out, _ = _run(capsys, "345m", "--dry-run", "--format", "json", "--set", f"env.HF_TOKEN={SECRET}")
    data = json.loads(out)
    assert data["env"]["HF_TOKEN"] == "<redacted>" and data["overrides"] == ["env.HF_TOKEN=<redacted>"]


def test_diff_shows_no_secret(tmp_path, capsys):
    path = tmp_path / "p.yaml"
    path.write_text(f"base: 345m\nlauncher: {{env: {{WANDB_API_KEY: {SECRET}}}}}\n")
    code, out, err = _run(capsys, "diff", "345m", str(path))
    assert code == 0 and SECRET not in out + err
    assert "launcher.env.WANDB_API_KEY  (not set)  <redacted>" in out


@pytest.mark.parametrize("abbreviation", ["--se=env.HF_TOKEN=x", "--dry", "--form=json"])
def test_options_cannot_be_abbreviated(capsys, abbreviation):
    code, out, err = _run(capsys, "345m", "--dry-run", abbreviation)
    assert code == 2
    assert err.splitlines()[0] == f"error: launch: unrecognized arguments: {abbreviation}"


def test_an_abbreviated_set_never_reaches_a_manifest(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, _ = _run(capsys, "toy", "--gpus-per-node", "1", "--se=env.HF_TOKEN=" + SECRET)
    assert code == 2 and not (tmp_path / "runs").exists()


def test_terminal_escapes_in_values_are_escaped_before_the_terminal(capsys):
    code, out, err = _run(capsys, "345m", "--dry-run", "--set", "env.COLOR=\x1b[31mred\x1b]0;title\x07")
    assert code == 0
    assert "\x1b" not in out and "\x07" not in out
    assert "export COLOR=$'\\x1b[31mred\\x1b]0;title\\x07'" in out.splitlines()
    code, out, err = _run(capsys, "345m", "--dry-run", "--set", "lr=\x1b[2J")
    assert code == 2 and "\x1b" not in err


def test_a_crash_file_holds_no_secret(tmp_path, capsys, monkeypatch):
    import launcher.cli as cli

    monkeypatch.setattr("tempfile.gettempdir", lambda: str(tmp_path))

    def boom(argv):
        raise RuntimeError(f"token was {SECRET}")

    monkeypatch.setitem(cli.SUBCOMMANDS, "list", boom)
    main(["show", "345m", "--set", f"env.HF_TOKEN={SECRET}"])  # remembers the secret
    capsys.readouterr()
    code, out, err = _run(capsys, "list")
    assert code == 1 and SECRET not in err
    (crash,) = Path(tmp_path).glob("megatron-launch-crash-*.txt")
    assert SECRET not in crash.read_text()


# A credential is recognised by its form too, whatever the variable is called, and by more names.
TOKEN_SHAPED = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123"


@pytest.mark.parametrize("argv", [
    ("345m", "--dry-run"),
    ("345m", "--dry-run", "--format", "json"),
    ("345m", "--dry-run", "--slurm"),
    ("show", "345m"),
])
def test_a_credential_shaped_value_is_a_secret_under_any_name(capsys, argv):
    code, out, err = _run(capsys, *argv, "--set", f"env.MY_SETTING={TOKEN_SHAPED}")
    assert code == 0 and TOKEN_SHAPED not in out + err


def test_a_credential_shaped_value_is_exported_from_the_environment_not_printed(capsys):
    code, out, _ = _run(capsys, "345m", "--dry-run", "--set", "env.SOME_ID=ghp_0123456789abcdefghijABCDEFGHIJ012345")
    assert code == 0
    assert 'export SOME_ID="${SOME_ID:?SOME_ID is a secret and is not stored in this file: export it first}"' \
        in out.splitlines()


def test_an_error_message_never_shows_a_credential_shaped_word(capsys):
    key = "nvapi-" + "0123456789abcdefghijKLMNOPQRSTUVWXYZ" * 2
    code, out, err = _run(capsys, "345m", "--dry-run", "--set", f"lr={key}")
    assert code == 2 and key not in out + err and "<redacted>" in err


@pytest.mark.parametrize(("name", "secret"), [
    ("DB_PASS", True), ("GH_PAT", True), ("HF_AUTH", True), ("SENTRY_DSN", True), ("SLACK_WEBHOOK_URL", True),
    ("SSH_PASSPHRASE", True), ("BYPASS_CACHE", False), ("PATH_PREFIX", False), ("NCCL_DEBUG", False),
    ("HF_TOKEN", True), ("HUGGING_FACE_HUB_TOKEN", True), ("TOKEN_FILE", True), ("TOKENIZERS_PARALLELISM", False),
    ("MAX_TOKENS", False),
])
def test_secret_names_include_pass_pat_auth_and_friends_as_words(name, secret):
    from launcher.redaction import is_secret

    assert is_secret(name) is secret


@pytest.mark.parametrize("text", ["/data/sk-abcdefghijklmnopqrstuvwxyz0123456789", "hf_checkpointsLlama3Instruct8B/x",
                                  "--data-path /corpora/ghp_like_name_but_a_path"])
def test_paths_that_only_resemble_a_credential_are_left_alone(text):
    from launcher.redaction import scrub

    assert scrub(text) == text
