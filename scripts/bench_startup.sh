#!/usr/bin/env bash
# Start-up on one GPU: command -> iteration 1 and command -> exit of `launch toy` (cold,
# warm) and `launch 345m` (first, warm; 5 iterations), then A/B runs of what the start-up hook changes or suspects:
#   toy_warm_python_gc    the same warm toy with Python's own garbage collection while importing and at exit
#                         (--set env.MEGATRON_LAUNCH_IMPORT_GC=python, env.MEGATRON_LAUNCH_EXIT=python); the default
#                         is the start-up hook's: no collections while importing (compare "after
#                         library-setup" - "before library-setup"), one at exit (compare "after training is done" -> exit)
#   toy_warm_1thread      TORCHINDUCTOR_COMPILE_THREADS=1: is the wait after "[after training is done]" the rank
#                         waiting for inductor's compile-worker sidecar (started at the first compile, joined at exit)?
# and a rank's import profile (warm bytecode): $OUT/rank_importtime.txt is the raw `python -X importtime` of
# pretrain_gpt.py's module level, for the next cut of unused imports.
# Run from the repository root on one GPU machine (docs/benchmarks.md), with $OUT (output dir), PYTHONPATH=/tmp/site
# (omegaconf, antlr4 4.9.3, torchao) and MEGATRON_LM_PATH (checkout at the pin). Every step has a hard
# `timeout -s KILL`; the whole script stays under 150 s (later steps are skipped when the budget is spent).
# Writes to $OUT: figures.txt (the breakdowns), milestones.json, logs.txt (stamped launcher output),
# rank_importtime.txt (run as `python -c`, so with Python's own collection while importing: the profile, not the
# figure; the figure is "before -> after library-setup" of the launches).
set -u
: "${OUT:?set OUT}" "${MEGATRON_LM_PATH:?set MEGATRON_LM_PATH}"
BEGIN=$(date +%s)
BUDGET=${BUDGET:-146}
REPO=$PWD
W=$(mktemp -d /tmp/35imp.XXXXXX)
trap 'rm -rf "$W"' EXIT  # the runs' checkpoints (GBs) and the cold copy
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
FIG=$OUT/figures.txt
PY=$(command -v python3)
left() { echo $(( BUDGET - ($(date +%s) - BEGIN) )); }
say() { echo "$*" | tee -a "$FIG"; }

# step LABEL MAX_SECONDS [--stop-after REGEX] COMMAND...: timed by scripts/startup_timing.py (its own SIGKILL at
# the limit), plus a hard outer timeout. A step with less than 12 s left is skipped.
step() {
  local label=$1 max=$2; shift 2
  local stop=()
  if [ "${1:-}" = "--stop-after" ]; then stop=(--stop-after "$2"); shift 2; fi
  local l; l=$(left)
  local t=$(( max < l - 3 ? max : l - 3 ))
  if [ "$t" -lt 12 ]; then say "== $label: skipped (script budget spent)"; return; fi
  timeout -s KILL $((t + 2)) "$PY" scripts/startup_timing.py --label "$label" --out "$W/logs" --timeout "$t" \
    "${stop[@]}" -- "$@" 2>&1 | tee -a "$FIG"
}

say "# 35imp.sh $(git -C "$REPO" log -1 --format='%h %s' 2>/dev/null | cut -c1-100) at $(date -u +%H:%M:%S)"
say "# python env: $(env | grep -E '^PYTHON(DONTWRITEBYTECODE|PYCACHEPREFIX|OPTIMIZE|PATH)=' | tr '\n' ' ')"
say "# $(nproc) cores; $(timeout -s KILL 20 "$PY" -c 'import sys, torch, torch.distributed.run as r; print(sys.version.split()[0], "torch", torch.__version__, "| torchrun --monitor-interval default", r.get_args_parser().get_default("monitor_interval"))' 2>&1 | tail -1)"

# A cold copy of the checkout: no bytecode, no built dataset helpers; empty compiler caches and launcher cache
# (XDG_CACHE_HOME: the launcher's bytecode prefix and helpers cache live under it).
COLD=$W/megatron-lm
timeout -s KILL 20 cp -al "$MEGATRON_LM_PATH" "$COLD" 2>/dev/null || { rm -rf "$COLD"; timeout -s KILL 20 cp -a "$MEGATRON_LM_PATH" "$COLD"; }
find "$COLD" -name __pycache__ -prune -exec rm -rf {} + 2>/dev/null
rm -f "$COLD"/megatron/core/datasets/helpers_cpp*.so
export TORCHINDUCTOR_CACHE_DIR=$W/inductor TRITON_CACHE_DIR=$W/triton XDG_CACHE_HOME=$W/xdg-cache
say "# cold copy: $COLD; TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR, XDG_CACHE_HOME fresh under $W (copy took $(( $(date +%s) - BEGIN )) s)"

LAUNCH=("$PY" -m launcher --megatron-path "$COLD" --set "run_root=$W/runs")
step toy_cold 34 "${LAUNCH[@]}" toy --gpus-per-node 1
step toy_warm 20 "${LAUNCH[@]}" toy --gpus-per-node 1
# log_interval=1: the first iteration is printed when it ends (the preset logs every 10). The first 345m run only
# fills the (fresh) inductor cache with its layers' kernels: stopped at iteration 2, so that its end-of-run save
# (~5 GB) costs no budget; the second is the warm figure, to its exit.
step m345_first 34 --stop-after 'iteration +2/' "${LAUNCH[@]}" 345m --gpus-per-node 1 --set train_iters=5 --set log_interval=1
step m345_warm 50 "${LAUNCH[@]}" 345m --gpus-per-node 1 --set train_iters=5 --set log_interval=1
step toy_warm_python_gc 18 "${LAUNCH[@]}" toy --gpus-per-node 1 --set env.MEGATRON_LAUNCH_EXIT=python \
  --set env.MEGATRON_LAUNCH_IMPORT_GC=python
TORCHINDUCTOR_COMPILE_THREADS=1 step toy_warm_1thread 18 "${LAUNCH[@]}" toy --gpus-per-node 1

# What a rank imports, with the environment the fast path's ranks get (warm: the bytecode now exists).
l=$(left)
if [ "$l" -gt 14 ]; then
  RANKENV=(env PYTHONPYCACHEPREFIX="$XDG_CACHE_HOME/megatron-launch/pycache" MEGATRON_LAUNCH_WRITE_BYTECODE=1
           PYTHONPATH="$COLD:$REPO:$REPO/launcher/inside/site:$PYTHONPATH" RANK=0 LOCAL_RANK=0 WORLD_SIZE=1
           MEGATRON_LAUNCH_SKIP_IMPORTS=cupy,transformers,sentencepiece,tiktoken MEGATRON_LAUNCH_EXIT=collect-once)
  (cd "$COLD" && timeout -s KILL $(( l < 24 ? l - 4 : 20 )) "${RANKENV[@]}" "$PY" -X importtime -c \
    "import sys, time; t = time.time(); sys.argv = ['pretrain_gpt.py']; src = open('pretrain_gpt.py').read().split('if __name__ ==')[0]; exec(compile(src, 'pretrain_gpt.py', 'exec'), {'__name__': 'imports'}); print(f'pretrain_gpt.py module level: {time.time() - t:.2f} s', file=sys.stderr)" \
    > /dev/null 2> "$OUT/rank_importtime.txt")
  say "== rank imports (warm, -X importtime): $(grep -m1 'module level' "$OUT/rank_importtime.txt")"
  say "   top level by cumulative ms: $(grep -E '\| [A-Za-z_]' "$OUT/rank_importtime.txt" | grep -v '|   ' | sort -t'|' -k2 -n -r | head -12 | awk -F'|' '{gsub(/ /,"",$2); gsub(/^ +/,"",$3); printf "%s %d, ", $3, $2/1000}')"
else
  say "== rank imports: skipped (script budget spent)"
fi

"$PY" - "$W/logs" "$OUT/milestones.json" <<'EOF'
import json, sys, pathlib
logs = pathlib.Path(sys.argv[1])
out = {p.stem: json.loads(p.read_text()) for p in sorted(logs.glob("*.json"))} if logs.is_dir() else {}
pathlib.Path(sys.argv[2]).write_text(json.dumps(out, indent=1) + "\n")
EOF
for f in "$W"/logs/*.log; do [ -f "$f" ] && { echo "##### $(basename "$f")"; cat "$f"; }; done > "$OUT/logs.txt" 2>/dev/null
say "# done in $(( $(date +%s) - BEGIN )) s"
