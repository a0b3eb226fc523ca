"""The import corpus (tests/fixtures/import_corpus) moved to one GPU: does the dry-run's verdict equal the GPU's?

    python scripts/import_corpus_gpu.py --out DIR [--only TEXT]                  # the dry-run verdicts (no GPU)
    python scripts/import_corpus_gpu.py --out DIR --gpu --jobs 6 --deadline-s 200 --run-timeout-s 150   # on a GPU

Each script of the corpus goes through `launch import` (the same reader, with the arguments INDEX.json gives it).
An import that would lose some of the script's model, numerics or layout is refused (exit 2); that is its first
verdict, recorded with what it lost, and the preset is then written as `--accept-loss` writes it. Then the moves a
user makes for one GPU (`one_gpu_moves`: one node, one GPU, every parallel size 1 and the settings that name
pipeline stages dropped, at most 4 layers (a per-layer pattern cut to them), mock data with a NullTokenizer of the
script's vocabulary, 4 iterations logged each, no evaluation, the script's own --save/--load dropped (the launch
saves into its run directory once, at the end), one micro-batch per step, no Transformer Engine or apex, the GPU
named h200-141gb), and the dry-run's verdict on the result: accepted, or
refused with its problems. A refusal whose hints say `set X=V` is followed (at most ROUNDS rounds; each round
recorded); a refusal only for memory moves to fewer layers (2, then 1) as a user would.

With --gpu, each imported job, with the --sets of its last dry-run, is launched through `launch` on the GPU as
typed (a `launch` process of its own, in its own process group, killed with its group after --run-timeout-s; a
refused one must be refused again there, before any GPU work), `--jobs` at a time while the launcher's memory
estimates of those running fit the GPU, the smallest first. `--write-plan` keeps the dry-run's verdicts and the
imported presets in one JSON file; `--plan` launches from it on a machine without the importer's packages;
`--previous` keeps the GPU verdicts of an earlier run whose --sets are the same. GPU verdicts: trains (exit 0, 4
iterations logged, each loss finite and none skipped), refused (exit 2 at launch, before any GPU work), failed
(with the error lines), timeout, not run. A job the dry-run refuses for its memory estimate alone is launched
with --no-doctor (the launch's own memory check skipped): it must fail (out of memory) for the verdicts to agree.
"Agrees" when the dry-run accepted and the GPU trained, or the dry-run refused and the GPU refused or failed.

Writes OUT/verdicts.jsonl (one object per script) and, with --doc, the markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import functional_test_matrix as ftm  # noqa: E402

from launcher.cli.job import JobRequest, job_for  # noqa: E402
from launcher.errors import UserError  # noqa: E402
from launcher.estimate.summary import job_facts  # noqa: E402
from launcher.importer.build import GPT2_VOCAB, import_source, tokenizer_vocab  # noqa: E402
from launcher.megatron import layer_pattern  # noqa: E402
from launcher.pipeline.preset import load_preset  # noqa: E402
from launcher.runs import logparse  # noqa: E402

CORPUS = REPO / "tests" / "fixtures" / "import_corpus"
ITERATIONS = 4
LAYERS = (4, 2, 1)  # at most 4 layers; fewer only where the memory estimate says 4 cannot fit one GPU
ROUNDS = 3  # rounds of `set X=V` hints followed
GPU = "h200-141gb"
# of the H200's 139.8 GiB: runs start while 1.12 × their estimates + 2 GiB each fit (measured on one H200: the
# memory PyTorch reserved was at most 1.16 × the launcher's estimate + 1 GiB, docs/data/import-corpus-gpu-1.jsonl)
GPU_BUDGET_GIB = 136.0
MEMORY_MARGIN = (1.12, 2.0)
DATA_FILES = ("data_path", "train_data_path", "valid_data_path", "test_data_path", "data_args_path",
              "per_split_data_args_path", "data_cache_path", "blend", "split")
TOKENIZER_FILES = ("tokenizer_model", "vocab_file", "merge_file")
# set by the one-GPU move only where the script sets them: not the script's checkpoints, no evaluation, no
# reporting service
DROPPED = ("save", "load", "rampup_batch_size", "wandb_project", "wandb_exp_name", "wandb_save_dir",
           "exit_interval", "exit_duration_in_mins", "lr_decay_iters", "lr_wsd_decay_iters")
# a list value [a,b] is one value, its comma its own
SET = re.compile(r"(?:--)?set ([a-z_][a-z0-9_.]*|env\.[A-Za-z_][A-Za-z0-9_]*)=(\[[^\]\s]*\]|[^\s,;)`]+)")
MEMORY = ("memory estimate", "gpu memory")
TARGET_CHANGES = ("transformer_engine=true", "apex=true")  # not ways out on a machine without them
# the launch's refusal for the checkpoint's size on this machine's disk, and the way out its hint offers
DISK_REFUSAL = "error: checkpoint space:"
# a launch refused for a package that machine lacked (torchao for FP8 without TE): a verdict on that machine, not
# on the job; a machine with the package runs it again
PACKAGE_REFUSAL = "torchao's float8 training, which the target lacks"
# A checkpoint write that this machine's disk broke (several runs writing at once fill it): ENOSPC, or torch.save's
# zip writer failing to close its file ("unexpected pos N vs M" in write_end_of_file, the symptom that full disks give
# in public reports), or a run still saving when its time ran out. After 4 good steps that says nothing of the job.
DISK_WRITE_FAILURE = re.compile(r"unexpected pos \d+ vs \d+|No space left on device|file write failed")
WEIGHTS_ONLY = ("no_save_optim=true", "no_save_rng=true")
VERDICTS = ("trains", "refused", "failed", "timeout", "not run")


@dataclass
class Row:
    config: str  # the corpus file's name
    source: str = ""  # repository/path@commit
    imports: str = ""  # clean | refused (lost N; written with --accept-loss) | error
    lost: list[str] = field(default_factory=list)
    moves: list[str] = field(default_factory=list)  # why each non-obvious move was made
    rounds: list[dict] = field(default_factory=list)  # each dry-run: its --sets added and its verdict
    launcher: str = ""  # the dry-run's final verdict: accepted | refused
    reason: str = ""  # the final refusal's problems (error + hint)
    overrides: tuple[str, ...] = ()  # every --set of the final dry-run (and of the GPU run)
    gpu: str = ""  # one of VERDICTS (empty: --gpu not given)
    gpu_reason: str = ""
    gpu_seconds: float = 0.0
    memory_gib: float = 0.0  # the dry-run's memory estimate per GPU (accepted jobs)
    rehearsal: str = ""  # with --rehearse: ok | crashed | not run (`launch --check --rehearse`'s CPU rehearsal)
    agrees: bool | None = None


def hint_sets(hint: str) -> list[str]:
    """Every `set X=V` of the first way out a hint offers (its alternatives are split at ", or"; what a parenthesis
    adds is an example, not a way) that this target can take: a way that asks for Transformer Engine or apex, which
    a one-GPU move without them cannot give, is passed over."""
    for way in re.split(r",? or ", hint.removeprefix("unset them: ")):
        head = re.split(r"\s\(", way, maxsplit=1)[0]
        sets = [f"{m[1]}={m[2]}" for m in SET.finditer(head)]
        if sets and not any(s in TARGET_CHANGES for s in sets):
            return sets
        if re.search(r"transformer_engine=true|apex=true", way):
            continue
        if not sets:
            return []
    return []


def cut_pattern(value: object, layers: int) -> str | None:
    """A per-layer pattern (`([0]*3+[1]*58)`) cut to its first `layers` entries, as Megatron's list syntax; the last
    entry kept is the pattern's last kind where the cut would hold none of it (a MoE model stays one: moving to one
    GPU may drop layers, not the experts). None for an integer pattern (every N-th layer: valid at any count)."""
    try:
        parsed = layer_pattern.parse(value)  # type: ignore[arg-type]
    except ValueError:
        return None
    if isinstance(parsed, int):
        return None
    cut = parsed[:layers]
    if parsed and parsed[-1] not in cut:
        cut[-1] = parsed[-1]
    return "[" + ",".join(map(str, cut)) + "]"


def one_gpu_moves(settings: dict, layers: int = LAYERS[0]) -> tuple[list[str], list[str]]:
    """(the `--set`s a user types to move the imported preset to one GPU, why the non-obvious ones were made)."""
    why: list[str] = []
    sets = [s for s in ftm.one_gpu_overrides(settings) if not s.startswith("num_layers=")]
    sets += [f"gpu={GPU}", f"train_iters={ITERATIONS}", "log_interval=1", "eval_iters=0"]
    sets += [] if settings.get("eval_interval") else [f"eval_interval={ITERATIONS}"]  # pretrain_gpt needs one
    layers = min(layers, int(settings.get("num_layers") or layers))
    sets.append(f"num_layers={layers}")
    for dest in ftm.PATTERN_SETTINGS:
        cut = cut_pattern(settings[dest], layers) if settings.get(dest) is not None else None
        if cut is not None:
            sets.append(f"{dest}={cut}")
            why.append(f"{dest} cut to its first {layers} layers: {cut}")
    sets += [f"{dest}=null" for dest in (*DATA_FILES, *DROPPED) if settings.get(dest) is not None]
    sets.append("mock_data=true")
    if settings.get("tokenizer_type") != "NullTokenizer" or not settings.get("vocab_size"):
        vocab, whose = tokenizer_vocab(settings)
        sets += ["tokenizer_type=NullTokenizer", f"vocab_size={vocab or GPT2_VOCAB}"]
        sets += [f"{dest}=null" for dest in TOKENIZER_FILES if settings.get(dest) is not None]
        why.append(f"mock data: NullTokenizer with vocab_size {vocab or GPT2_VOCAB} ("
                   + (f"{whose}'s" if vocab else f"GPT-2's: {whose}'s is not known here") + ")")
    micro = int(settings.get("micro_batch_size") or 1)
    sets.append(f"global_batch_size={micro}")  # one micro-batch per step at DP 1
    warmup = settings.get("lr_warmup_iters") or 0
    if warmup >= ITERATIONS:  # the schedule shrinks with the run: the warmup must end before the decay (4 steps)
        sets.append("lr_warmup_iters=1")
        why.append(f"lr_warmup_iters {warmup} → 1 (the LR decays over the 4 iterations)")
    return sets, why


JOBS: dict[str, object] = {}  # the accepted jobs of this run, by script (for --rehearse)


def dry_run(preset_path: Path, overrides: list[str]) -> tuple[list, float]:
    """(the dry-run's problems (empty: accepted), the memory estimate per GPU in GiB (0 when refused)), judged for
    its target as `launch PRESET --dry-run` does, on the world the preset declares (one node, one GPU), whatever
    this machine has."""
    try:
        preset = load_preset(str(preset_path), overrides)
        job, problems = job_for(preset, JobRequest(judge=True, local=False))
    except UserError as exc:
        return list(exc.problems), 0.0
    if problems:
        return list(problems), 0.0
    JOBS[str(preset_path)] = job
    return [], float(job_facts(job)["estimate"]["memory_per_gpu_gib"])


def rendered(problems: list) -> str:
    return " ".join(f"error: {p.message} hint: {p.fix}" for p in problems)


def judge_with_hints(row: Row, preset_path: Path, settings: dict) -> None:
    """The dry-run on the moved preset; `set X=V` hints followed, memory refusals answered with fewer layers."""
    layers = iter(LAYERS[1:])
    moves, why = one_gpu_moves(settings)
    row.moves = why
    extra: list[str] = []
    for _ in range(ROUNDS + len(LAYERS)):
        problems, row.memory_gib = dry_run(preset_path, moves + extra)
        row.rounds.append({"sets": list(extra), "verdict": "accepted" if not problems else "refused",
                           "problems": [p.render() for p in problems][:8]})
        if not problems:
            break
        fixes = [fix for p in problems for fix in hint_sets(p.fix) if fix not in extra]
        only_memory = all(any(m in p.message for m in MEMORY) for p in problems)
        if only_memory and (fewer := next(layers, None)) is not None:
            moves, why = one_gpu_moves(settings, fewer)
            row.moves = [*why, f"num_layers {fewer}: the memory estimate of more layers is above one GPU"]
            continue
        if not fixes or sum(bool(r["sets"]) for r in row.rounds) >= ROUNDS:
            break
        extra = list(dict.fromkeys([*extra, *fixes]))
    row.overrides = tuple(moves + extra)
    row.launcher = "accepted" if not problems else "refused"
    estimate = re.search(r"memory estimate, ~([\d.]+) GiB", rendered(problems))
    row.memory_gib = row.memory_gib or (float(estimate[1]) if estimate else 0.0)
    row.reason = rendered(problems)[:1200]


def judge_run(row: Row, returncode: int, output: str, lines: list[str]) -> None:
    """The GPU verdict of one launch: 4 iterations, each loss finite and none skipped, exit 0."""
    iterations = [e for e in logparse.parse_lines(lines) if isinstance(e, logparse.IterationLine)]
    losses = [e.lm_loss for e in iterations]
    skipped = sum(e.skipped_iterations or 0 for e in iterations)
    good = len(iterations) >= ITERATIONS and all(x is not None and math.isfinite(x) for x in losses) and not skipped
    if returncode == 0 and good:
        row.gpu = "trains"
        row.gpu_reason = f"{len(iterations)} iterations, loss {losses[0]:.3f} → {losses[-1]:.3f}"
    elif returncode == 2 and "error:" in output:
        row.gpu = "refused"  # at launch (the doctor on this machine): before any GPU work
        row.gpu_reason = " ".join(line for line in output.splitlines() if line.startswith(("error:", "hint:")))
    elif good and (DISK_WRITE_FAILURE.search(output + "\n".join(lines[-80:]))
                   or returncode == -1 and lines and "saving checkpoint" in lines[-1]):
        row.gpu = "not run"  # so that the next pass runs it again (fold_previous keeps only verdicts)
        row.gpu_reason = (f"{len(iterations)} good iterations, then the end-of-run checkpoint write failed on this "
                          "machine's disk (several runs saving at once): run it again alone")
    else:
        row.gpu = "timeout" if returncode == -1 else "failed"
        errors = [line.strip() for line in (output + "\n" + "\n".join(lines[-80:])).splitlines()
                  if re.search(r"Error|error:|Traceback|out of memory|Killed|exitcode", line)]
        row.gpu_reason = (f"exit {returncode}, {len(iterations)} iterations, losses {losses}, skipped {skipped}: "
                          + " | ".join(dict.fromkeys(errors[-4:])))
    row.gpu_reason = row.gpu_reason[:600]


def train_on_gpu(row: Row, preset_path: Path, run_root: Path, timeout_s: float) -> None:
    """One launch as a user types it (`launch PRESET --set …`), judged by judge_run."""
    # a refusal for memory alone is put to the test: the launch's own memory check (the doctor) is skipped
    options = ("--no-doctor",) if memory_only(row) else ()
    result = ftm.launch(preset_path, list(row.overrides), run_root, timeout_s, options)
    row.gpu_seconds = result.seconds
    judge_run(row, result.returncode, result.stdout + "\n" + result.stderr, result.log_lines)
    if row.gpu == "refused" and DISK_REFUSAL in row.gpu_reason:
        # this machine's disk, not the job: the dry-run judged the target; follow the launch's own hint
        refusal = row.gpu_reason
        result = ftm.launch(preset_path, [*row.overrides, *WEIGHTS_ONLY], run_root, timeout_s, options)
        row.gpu_seconds += result.seconds
        judge_run(row, result.returncode, result.stdout + "\n" + result.stderr, result.log_lines)
        row.gpu_reason = (f"refused at launch for this machine's disk ({refusal[:160]}); with the hint's "
                          f"{' '.join(WEIGHTS_ONLY)}: {row.gpu_reason}")
    if options:
        row.gpu_reason = f"launched with --no-doctor: {row.gpu_reason}"
    if row.gpu not in ("trains", "refused"):
        with (run_root.parent / "gpu-failures.txt").open("a") as out:  # the whole story, for the one who fixes it
            out.write(f"===== {row.config}: {row.gpu} (exit {result.returncode})\n$ {' '.join(result.argv)}\n"
                      + "\n".join((result.stdout + result.stderr).splitlines()[-40:] + result.log_lines[-80:])
                      + "\n")


def train_all(runs: list[tuple[Row, Path]], run_root: Path, jobs: int, deadline: float, timeout_s: float,
              progress: Path, first_alone: bool = False) -> None:
    """Each run on the GPU, `jobs` at a time within the memory budget (MEMORY_MARGIN over the dry-run's estimate), the
    smallest first; none started after `deadline` (time.monotonic()). With `first_alone`, runs go one at a time
    until one got past the launch's checks: it builds Megatron's dataset helpers, which several runs building at
    once break."""
    def one(item: tuple[Row, Path]) -> None:
        row, preset_path = item
        if time.monotonic() > deadline:
            return
        train_on_gpu(row, preset_path, run_root, timeout_s)
        with progress.open("a") as out:
            out.write(json.dumps(asdict(row)) + "\n")
        print(f"  GPU {row.config}: {row.gpu} ({row.gpu_seconds:.0f} s) {row.gpu_reason[:200]}", flush=True)

    # the smallest first: the most verdicts before the deadline; a refused job launches only to be refused (no GPU)
    runs = sorted(runs, key=lambda item: item[0].memory_gib)
    while first_alone and runs:
        first = runs.pop(0)
        one(first)
        first_alone = first[0].gpu in ("refused", "")
    factor, extra = MEMORY_MARGIN
    budget = gpu_budget_gib()
    for row, _ in runs:  # sized for an H200: on a smaller GPU a job that cannot fit is not run, not failed
        if row.launcher == "accepted" and factor * row.memory_gib + extra > budget:
            row.gpu = "not run"
            row.gpu_reason = (f"needs ~{factor * row.memory_gib + extra:.0f} GiB (the dry-run's estimate for "
                              f"{GPU}), more than this GPU's {budget:.0f}")
    runs = [item for item in runs if not item[0].gpu]
    ftm.within_budget(runs, lambda item: factor * item[0].memory_gib + extra, one, jobs, budget)


def gpu_budget_gib() -> float:
    """GPU_BUDGET_GIB on an H200; on a smaller GPU its total memory less the same margin."""
    import torch
    total = torch.cuda.get_device_properties(0).total_memory / 2**30
    return min(GPU_BUDGET_GIB, total - 3.8)


def memory_only(row: Row) -> bool:
    """Refused by the dry-run for the memory estimate alone (the last round's problems)."""
    problems = row.rounds[-1]["problems"] if row.rounds else []
    return row.launcher == "refused" and bool(problems) and all(any(m in p for m in MEMORY) for p in problems)


def agreement(row: Row) -> bool | None:
    if not row.gpu or row.gpu == "not run":
        return None
    return row.gpu == "trains" if row.launcher == "accepted" else row.gpu != "trains"


def import_row(name: str, entry: dict, workdir: Path) -> tuple[Row, Path | None, dict]:
    row = Row(name, f"{entry['repository']}/{entry['path']}@{entry['commit'][:12]}")
    try:
        imported = import_source((CORPUS / name).read_text(), name, entry.get("args", []), environment=entry.get("env"))
    except UserError as exc:
        row.imports, row.launcher, row.reason = "error", "refused", "import: " + rendered(exc.problems)
        return row, None, {}
    row.lost = list(imported.lost)
    row.imports = f"refused (lost {len(row.lost)}; written with --accept-loss)" if row.lost else "clean"
    path = workdir / (Path(name).stem.replace(".", "_") + ".yaml")
    path.write_text(imported.text)
    return row, path, dict(imported.settings)


def markdown(rows: list[Row], command: str, seconds: float, gpu: bool) -> str:
    accepted = [r for r in rows if r.launcher == "accepted"]
    ran = [r for r in rows if r.agrees is not None]
    lines = [
        "# The import corpus moved to one GPU: the dry-run's verdict and the GPU's",
        "",
        "Each script of `tests/fixtures/import_corpus/` imported (`launch import SCRIPT ARGS -o X.yaml`; where the "
        "import refuses for what it would lose, that is recorded and the preset written with `--accept-loss`), then "
        "moved to one GPU as a user would (`scripts/import_corpus_gpu.py: one_gpu_moves`: nodes 1, every parallel "
        "size 1, the pipeline-stage settings dropped, at most 4 layers (a per-layer pattern cut to them), mock data "
        "with a NullTokenizer of the script's vocabulary, 4 iterations each logged, no evaluation, the script's "
        "--save/--load dropped (one save at the end, in the run directory), global batch = micro batch, no TE/apex, "
        "GPU h200-141gb), and dry-run. A refusal's `set X=V` hints are followed (at most 3 "
        "rounds); a refusal only for memory moves to 2, then 1 layer."
        + (" **GPU**: 4 iterations through `launch` on one H200 (trains: exit 0, 4 iterations, each loss finite, "
           "none skipped; refused: exit 2 at launch, before GPU work)." if gpu else ""),
        "",
        f"Made by `{command}` in {seconds:.0f} s.",
        "",
        f"{len(rows)} scripts: {sum(r.imports == 'clean' for r in rows)} import cleanly, "
        f"{sum(r.imports.startswith('refused') for r in rows)} are refused by the import for what they would lose; "
        f"moved to one GPU, {len(accepted)} are accepted by the dry-run, {len(rows) - len(accepted)} refused.",
    ]
    if gpu:
        # a row no pass has run yet (no verdict at all) is "not run" as well
        tally = ", ".join(f"{sum(r.gpu == v or (v == 'not run' and not r.gpu) for r in rows)} {v}" for v in VERDICTS)
        lines += ["", f"GPU: {tally}; the verdicts agree on {sum(bool(r.agrees) for r in ran)} of the {len(ran)} "
                      f"run, disagree on {sum(r.agrees is False for r in ran)}."]
    lines += ["", "| script | import | dry-run | hints followed | " + ("GPU | agrees | " if gpu else "")
              + "moves beyond the plain ones; reason |",
              "|---|---|---|---|" + ("---|---|" if gpu else "") + "---|"]
    for r in rows:
        followed = " ".join(dict.fromkeys(s for rnd in r.rounds for s in rnd["sets"])) or "–"
        reason = "; ".join(filter(None, [*r.moves, r.reason, f"GPU: {r.gpu_reason}" if r.gpu_reason else ""]))
        cells = [r.config, r.imports, r.launcher, followed]
        if gpu:
            cells += [r.gpu or "–", {True: "yes", False: "**no**", None: "–"}[r.agrees]]
        cells.append(reason[:500])
        lines.append("| " + " | ".join(c.replace("|", "/").replace("\n", " ") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def prepare(only: str, workdir: Path) -> tuple[list[Row], dict[str, str]]:
    """Every corpus script imported, moved and dry-run: the rows and each imported preset's text."""
    index = json.loads((CORPUS / "INDEX.json").read_text())
    rows: list[Row] = []
    presets: dict[str, str] = {}
    for name in sorted(index):
        if only and only not in name:
            continue
        row, preset_path, settings = import_row(name, index[name], workdir)
        rows.append(row)
        if preset_path is not None:
            judge_with_hints(row, preset_path, settings)
            presets[name] = preset_path.read_text()
            if row.launcher == "accepted":
                JOBS[name] = JOBS.pop(str(preset_path))
        print(f"{name}: import {row.imports}; dry-run {row.launcher} after {len(row.rounds)} round(s) "
              f"{row.reason[:200]}", flush=True)
    return rows, presets


def from_plan(path: Path, only: str) -> tuple[list[Row], dict[str, str]]:
    """The rows and presets a --write-plan wrote (where the GPU machine lacks what the importer needs)."""
    plan = json.loads(path.read_text())
    rows = [Row(**{**r, "overrides": tuple(r["overrides"])}) for r in plan["rows"] if only in r["config"]]
    return rows, {name: text for name, text in plan["presets"].items() if only in name}


def rejudge(rows: list[Row], presets: dict[str, str], workdir: Path) -> None:
    """Each accepted row of a plan dry-run again with its recorded --sets (its job kept for --rehearse); a row this
    dry-run refuses is said, and its verdict becomes the refusal."""
    for row in rows:
        if row.launcher != "accepted" or row.config not in presets:
            continue
        path = workdir / (Path(row.config).stem.replace(".", "_") + ".yaml")
        path.write_text(presets[row.config])
        problems, _ = dry_run(path, list(row.overrides))
        if problems:
            row.launcher, row.reason = "refused", rendered(problems)
            print(f"{row.config}: refused by this dry-run: {row.reason[:300]}", flush=True)
        else:
            JOBS[row.config] = JOBS.pop(str(path))


def fold_previous(rows: list[Row], paths: list[Path], rerun: tuple[str, ...] = ()) -> None:
    """A GPU verdict of an earlier run of the same script with the same --sets is kept (a later file wins); one
    that did not run to a verdict (not run, timeout), a refusal for that machine's disk or a package it lacked
    (which says nothing of the job), and the scripts named in `rerun` are not."""
    by_name = {r.config: r for r in rows if r.config not in rerun}
    for path in paths:
        for line in path.read_text().splitlines():
            old = json.loads(line)
            row = by_name.get(old.get("config", ""))
            disk_only = old.get("gpu") == "refused" and any(
                why in old.get("gpu_reason", "") for why in (DISK_REFUSAL, PACKAGE_REFUSAL))
            if row and tuple(old.get("overrides", ())) == row.overrides and old.get("gpu") in VERDICTS[:3] \
                    and not disk_only:
                row.gpu, row.gpu_reason, row.gpu_seconds = old["gpu"], old["gpu_reason"], old.get("gpu_seconds", 0.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--doc", type=Path, help="write the markdown table here")
    parser.add_argument("--only", default="", help="scripts whose name contains this text")
    parser.add_argument("--write-plan", type=Path, help="write the dry-run verdicts and presets here (JSON)")
    parser.add_argument("--plan", type=Path, help="take the verdicts and presets from a --write-plan file")
    parser.add_argument("--previous", type=Path, nargs="*", default=[],
                        help="earlier verdicts.jsonl: a GPU verdict of the same script and --sets is not run again")
    parser.add_argument("--rerun", nargs="*", default=[], help="scripts whose --previous verdict is run again")
    parser.add_argument("--rehearse", type=Path, metavar="MEGATRON_LM",
                        help="also rehearse each accepted job on this CPU (launch --check --rehearse) with this "
                             "Megatron-LM checkout")
    parser.add_argument("--gpu", action="store_true", help="launch each job on this machine's GPU")
    parser.add_argument("--first-alone", action="store_true",
                        help="one run at a time until one got past the launch's checks (Megatron's dataset helpers "
                             "not built yet)")
    parser.add_argument("--jobs", type=int, default=4, help="GPU runs at a time")
    parser.add_argument("--deadline-s", type=float, default=float("inf"), help="start no GPU run after this long")
    parser.add_argument("--run-timeout-s", type=float, default=300, help="kill a GPU run (its process group) after")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    run_root = (args.out / "runs").absolute()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        rows, presets = from_plan(args.plan, args.only) if args.plan else prepare(args.only, workdir)
        print(f"dry-runs: {sum(r.launcher == 'accepted' for r in rows)} of {len(rows)} accepted in "
              f"{time.monotonic() - start:.0f} s", flush=True)
        if args.rehearse:
            if args.plan:  # the plan's accepted jobs judged again here, with the --sets it recorded
                rejudge(rows, presets, workdir)
            accepted = [(row, JOBS[row.config]) for row in rows if row.config in JOBS]
            ftm.rehearse_all(accepted, args.rehearse.resolve())  # type: ignore[arg-type]
        if args.write_plan:
            args.write_plan.write_text(json.dumps({"rows": [asdict(r) for r in rows], "presets": presets},
                                                  indent=1) + "\n")
        fold_previous(rows, args.previous, tuple(args.rerun))
        if args.gpu:  # every imported job, the refused ones too: a launch must refuse them before any GPU work
            runs = []
            for row in rows:
                if row.config in presets and not row.gpu:
                    path = workdir / (Path(row.config).stem.replace(".", "_") + "-gpu.yaml")
                    path.write_text(presets[row.config])
                    runs.append((row, path))
            run_root.mkdir(parents=True, exist_ok=True)
            train_all(runs, run_root, args.jobs, start + args.deadline_s, args.run_timeout_s,
                      args.out / "gpu-progress.jsonl", args.first_alone)
    for row in rows:
        if args.gpu and not row.gpu and row.config in presets:
            row.gpu, row.gpu_reason = "not run", "the deadline came first"
        row.agrees = agreement(row)
    seconds = time.monotonic() - start
    with (args.out / "verdicts.jsonl").open("w") as sink:
        sink.writelines(json.dumps(asdict(r)) + "\n" for r in rows)
    command = ("python scripts/import_corpus_gpu.py --out OUT" + (f" --doc {args.doc}" if args.doc else "")
               + (f" --plan {args.plan}" if args.plan else "")
               + (" --previous " + " ".join(map(str, args.previous)) if args.previous else "")
               + (f" --rerun {' '.join(args.rerun)}" if args.rerun else "")
               + (f" --gpu --jobs {args.jobs} --deadline-s {args.deadline_s:g} --run-timeout-s {args.run_timeout_s:g}"
                  if args.gpu else "") + (" --first-alone" if args.first_alone else "")
               + (f" --only {args.only}" if args.only else ""))
    text = markdown(rows, command, seconds, args.gpu or any(r.gpu for r in rows))
    (args.out / "verdicts.md").write_text(text)
    if args.doc:
        args.doc.write_text(text)
    disagree = [r.config for r in rows if r.agrees is False]
    print(f"{len(rows)} scripts; disagreements: {disagree}", flush=True)
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main())
