"""The import corpus (tests/fixtures/import_corpus) rehearsed in each job's own parallel layout, shrunk, on CPU
processes (`launch PRESET --check --rehearse`'s multi-rank rehearsal, launcher/checks/rehearsal_ranks.py).

    python scripts/import_corpus_layouts.py --out DIR                     # import, dry-run, group by layout shape
    MEGATRON_LM_PATH=$MLM python scripts/import_corpus_layouts.py --out DIR --rehearse [--only TEXT] [--config NAME…]
    python scripts/import_corpus_layouts.py --out DIR --table DIR1/layouts.jsonl …   # the table, DIR/records.jsonl

Each script goes through `launch import` (the arguments INDEX.json gives it; an import that would lose something is
written as `--accept-loss` writes it). The preset keeps its layout, its world (nodes × GPUs per node; 1 node where
the script's count is not known), its model and numerics and its target's kernels; only what a rehearsal cannot have
is moved: mock data with a NullTokenizer of the script's vocabulary, no checkpoint to load, 4 iterations, no
evaluation, no reporting service. The dry-run judges that against its target (`launch PRESET --dry-run`); its
`set X=V` hints are followed (at most 3 rounds). The accepted jobs are grouped by the shape their layout shrinks to
(TP, PP, VPP, CP, EP, expert TP, DP of the rehearsal; sequence parallel, the distributed optimizer, the MoE dispatcher,
GQA/MQA/MLA, fp16/bf16, the checkpoint format, uneven stages, a layout string), and OUT/shapes.json lists each
shape's jobs. With --rehearse, one job per shape (the first by name, or those named by --config) is rehearsed, one
at a time; one JSON line each in OUT/layouts.jsonl (corpus name, shape, ok / failed / not run, seconds, error).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import import_corpus_gpu as icg  # noqa: E402

from launcher.checks.megatron_verdict import target_env  # noqa: E402
from launcher.checks.rehearsal_ranks import rehearse_layout, shrunk_layout  # noqa: E402
from launcher.checks.rehearsal_split import SPLIT_SETTINGS  # noqa: E402
from launcher.cli.job import JobRequest, job_for  # noqa: E402
from launcher.errors import UserError  # noqa: E402
from launcher.importer.build import GPT2_VOCAB, tokenizer_vocab  # noqa: E402
from launcher.pipeline.preset import load_preset  # noqa: E402

ROUNDS = 3
NODES = re.compile(r"use --nodes (\d+)")
USE = re.compile(r"use ([a-z_]+) (\d+) ")
# what a rehearsal cannot have: the script's data, tokenizer files, checkpoints to load, evaluation, reporting
NOT_HERE = (*icg.DATA_FILES, *icg.TOKENIZER_FILES, "load", "save", "wandb_project", "wandb_exp_name",
            "wandb_save_dir", "exit_interval", "exit_duration_in_mins", "rampup_batch_size")
SAMPLE_SCHEDULE = ("train_samples", "lr_decay_samples", "lr_warmup_samples", "lr_wsd_decay_samples")


def layout_moves(settings: dict) -> list[str]:
    """The `--set`s that keep the job's layout, model and numerics and move only what a rehearsal cannot have."""
    sets = ["train_iters=4", "log_interval=1", "eval_iters=0", "mock_data=true", "use_checkpoint_args=false"]
    sets += [] if settings.get("eval_interval") else ["eval_interval=4"]  # pretrain_gpt needs one
    sets += [f"{dest}=null" for dest in (*NOT_HERE, *SAMPLE_SCHEDULE) if settings.get(dest) is not None]
    if settings.get("tokenizer_type") != "NullTokenizer" or not settings.get("vocab_size"):
        vocab, _ = tokenizer_vocab(settings)
        sets += ["tokenizer_type=NullTokenizer", f"vocab_size={vocab or GPT2_VOCAB}"]
    if (settings.get("lr_warmup_iters") or 0) >= 4:
        sets.append("lr_warmup_iters=1")
    if settings.get("lr_decay_iters") is not None:
        sets.append("lr_decay_iters=null")
    return sets


def judge(preset_path: Path, settings: dict) -> tuple[object | None, list[str], list[str]]:
    """(the accepted job or None, the --sets of the last dry-run, its problems)."""
    moves, extra, problems = layout_moves(settings), [], []
    for _ in range(ROUNDS + 1):
        try:
            preset = load_preset(str(preset_path), moves + extra)
            job, found = job_for(preset, JobRequest(judge=True, local=False))
        except UserError as exc:
            job, found = None, list(exc.problems)
        if not found:
            return job, moves + extra, []
        problems = [f"error: {p.message} hint: {p.fix}" for p in found]
        fixes = [fix for p in found for fix in icg.hint_sets(p.fix) if fix not in extra]
        # a world the script's count did not give (its launcher's count is not known without running it)
        fixes += [f"nodes={m[1]}" for p in found if (m := NODES.search(p.fix)) and f"nodes={m[1]}" not in extra]
        fixes += [f"{m[1]}={m[2]}" for p in found if (m := USE.match(p.fix)) and f"{m[1]}={m[2]}" not in extra]
        if not fixes:
            break
        extra = list(dict.fromkeys([*extra, *fixes]))
    return None, moves + extra, problems


def shape(job: object) -> dict:
    """What the rehearsal of this job runs: its shrunk layout and the features that change the parallel code."""
    megatron = dict(job.megatron)  # type: ignore[attr-defined]
    layout, _ = shrunk_layout(job.layout, megatron)  # type: ignore[attr-defined]
    groups, heads = megatron.get("num_query_groups"), megatron.get("num_attention_heads")
    attention = ("MLA" if megatron.get("multi_latent_attention") else
                 "MQA" if groups == 1 else "GQA" if groups and heads and groups < heads else "MHA")
    return {
        "layout": layout.describe(), "world": layout.world,
        "sp": bool(megatron.get("sequence_parallel")) and layout.tp > 1,
        "dist_opt": bool(megatron.get("use_distributed_optimizer")),
        "moe": (megatron.get("moe_token_dispatcher_type") or "allgather") if megatron.get("num_experts") else None,
        "attention": attention,
        "dtype": "fp16" if megatron.get("fp16") else "bf16" if megatron.get("bf16") else "fp32",
        "ckpt": megatron.get("ckpt_format") or "torch_dist",
        "uneven": any(megatron.get(dest) not in (None, False) for dest in SPLIT_SETTINGS),
        "layout_string": bool(megatron.get("pipeline_model_parallel_layout")),
        "te": bool(job.kernels.transformer_engine),  # type: ignore[attr-defined]
    }


def shape_key(s: dict) -> str:
    flags = [name for name in ("sp", "dist_opt", "uneven", "layout_string", "te") if s[name]]
    return "; ".join([s["layout"], *(f"moe {s['moe']}" for _ in [0] if s["moe"]), s["attention"], s["dtype"],
                       s["ckpt"], *flags])


def table(paths: list[Path], out: Path) -> int:
    records: dict[str, dict] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            record = json.loads(line)
            record["shape"] = (record.get("shape") or "").replace(" | ", "; ")
            before = records.get(record["config"])
            earlier = ([*before.get("earlier", []), before["error"]] if before and not before["ok"] else
                       before.get("earlier", []) if before else [])
            records[record["config"]] = {**record, "earlier": earlier}
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "records.jsonl", "w") as sink:
        for _name, r in sorted(records.items()):
            sink.write(json.dumps({key: r.get(key) for key in ("config", "shape", "ok", "outcome", "seconds",
                                                                "error", "said", "earlier")}) + "\n")
    print("| corpus script | shape (rehearsed layout; the job's features) | outcome | s | what it said | "
          "earlier run (fixed since) |")
    print("|---|---|---|---|---|---|")
    for name, r in sorted(records.items()):
        said = (r.get("said") if r["ok"] else r["error"]) or ""
        earlier = " / ".join(e[:160] for e in r["earlier"]) or "–"
        print(f"| {name} | {r['shape']} | {r['outcome']} | {r['seconds']:.0f} | {said[:160].replace('|', '/')} | "
              f"{earlier.replace('|', '/')} |")
    counts = {o: sum(r["outcome"] == o for r in records.values()) for o in ("ok", "failed", "not run", "refused")}
    print(f"\n{len(records)} rehearsed: " + ", ".join(f"{n} {o}" for o, n in counts.items() if n))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", default="", help="scripts whose name contains this text")
    parser.add_argument("--config", action="append", default=[], help="rehearse this script (repeatable)")
    parser.add_argument("--rehearse", action="store_true", help="rehearse one job per shape, one at a time")
    parser.add_argument("--timeout-s", type=float, default=600, help="per torchrun (train, load)")
    parser.add_argument("--table", type=Path, nargs="*", help="print the markdown table of these layouts.jsonl files "
                        "(a script's last record counts) and write their lines, trimmed, to OUT/records.jsonl")
    args = parser.parse_args(argv)
    if args.table is not None:
        return table(args.table, args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    index = json.loads((icg.CORPUS / "INDEX.json").read_text())
    names = sorted(n for n in index if args.only in n and (not args.config or n in args.config))
    jobs: dict[str, tuple[object, dict, list[str]]] = {}
    refused: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            row, path, settings = icg.import_row(name, index[name], Path(tmp))
            if path is None:
                refused[name] = [row.reason]
                continue
            job, sets, problems = judge(path, settings)
            if job is None:
                refused[name] = problems
            else:
                jobs[name] = (job, shape(job), sets)
        shapes: dict[str, list[str]] = {}
        for name, (_, s, _) in jobs.items():
            shapes.setdefault(shape_key(s), []).append(name)
        (args.out / "shapes.json").write_text(json.dumps(
            {"accepted": len(jobs), "refused": {n: p[:3] for n, p in refused.items()},
             "shapes": shapes, "sets": {n: j[2] for n, j in jobs.items()}}, indent=1))
        print(f"{len(names)} scripts: {len(jobs)} accepted at their own layout, {len(refused)} refused; "
              f"{len(shapes)} shapes", flush=True)
        for key, members in sorted(shapes.items()):
            print(f"  {key}: {len(members)}: {', '.join(members[:4])}{' …' if len(members) > 4 else ''}")
        if not args.rehearse:
            return 0
        chosen = args.config or [members[0] for members in shapes.values()]
        with open(args.out / "layouts.jsonl", "a") as sink:
            for name in chosen:
                if name not in jobs:
                    record = {"config": name, "shape": None, "ok": False, "outcome": "refused", "seconds": 0,
                              "error": " ".join(refused.get(name, ["not in the corpus"]))[:600]}
                else:
                    job, s, sets = jobs[name]
                    start = time.monotonic()
                    result = rehearse_layout(job, target_env(job), args.timeout_s)
                    outcome = "ok" if result.ok else "not run" if result.stage == "setup" else "failed"
                    record = {"config": name, "shape": shape_key(s), "ok": result.ok, "outcome": outcome,
                              "seconds": round(time.monotonic() - start, 1),
                              "error": "" if result.ok else " / ".join(result.render()[:3])[:600],
                              "said": result.render()[0][:400], "sets": sets, "rehearsal": result.as_dict()}
                sink.write(json.dumps(record) + "\n")
                sink.flush()
                print(f"  {name}: {record['outcome']} ({record['seconds']} s) {record['error'][:300]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
