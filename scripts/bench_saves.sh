#!/usr/bin/env bash
# Each checkpoint save of `launch 345m` on one GPU: how long it stopped the training loop and how long until the
# checkpoint was complete on storage, as shipped ("new"), with the save settings before the launcher's save
# defaults and without the staged copy ("old"), and without only the staged copy. Run from the root of a checkout
# with $OUT set, Megatron-LM's dependencies on PYTHONPATH and MEGATRON_LM_PATH. About 150 s; each step has a hard
# limit. docs/checkpoint-saves.md says what the lines mean.
set -u
OUT=${OUT:?set OUT}
mkdir -p "$OUT"
ROOT=$PWD
PY=$(command -v python3 || command -v python)
RUNS=/tmp/35save-runs          # checkpoints (~5 GB a save) stay off $OUT and are deleted after each run
rm -rf "$RUNS"; mkdir -p "$RUNS"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 MEGATRON_LAUNCH_SAVE_PHASES=1
START=$(date +%s)
{
  echo "commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')  $(date -u)"
  nvidia-smi --query-gpu=name,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader 2>&1
  df -h /dev/shm /tmp 2>&1; free -g 2>&1 | head -2; nproc
  echo "disk: 1 GiB written with fsync to /tmp:"
  timeout -s KILL 20 dd if=/dev/zero of=/tmp/35save-dd bs=64M count=16 conv=fsync 2>&1 | tail -1
  rm -f /tmp/35save-dd
} > "$OUT/machine.txt" 2>&1

# name | environment | extra launch arguments. Saves at 15 and 30 (the second is the end-of-run save).
NEW_OPS=ce,norm,scale,adam,nosync,nancheck,layer,save   # the default fast ops, the staged save copy among them
OLD_OPS=ce,norm,scale,adam,nosync,nancheck,layer        # the same without it
NEW_SETS="--set ckpt_assume_constant_structure=true --set ckpt_fully_parallel_save=false"
VARIANTS=(
  "new|MEGATRON_LAUNCH_FAST_OPS=$NEW_OPS|$NEW_SETS"
  "old|MEGATRON_LAUNCH_FAST_OPS=$OLD_OPS|"
  "new-without-staged-copy|MEGATRON_LAUNCH_FAST_OPS=$OLD_OPS|$NEW_SETS"
)
for entry in "${VARIANTS[@]}"; do
  IFS='|' read -r name envs extra <<< "$entry"
  left=$(( 175 - ($(date +%s) - START) ))
  if [ "$left" -lt 55 ]; then echo "skipping $name: $left s left" | tee -a "$OUT/walls.txt"; continue; fi
  limit=$(( left < 100 ? left : 100 ))
  t0=$(date +%s%N)
  # shellcheck disable=SC2086
  timeout -s KILL "$limit" env $envs "$PY" -m launcher 345m --gpus-per-node 1 --no-doctor --set train_iters=30 \
    --set save_interval=15 --set eval_iters=0 --set "run_root=$RUNS/$name" $extra > "$OUT/$name.out" 2>&1
  rc=$?
  # a run cut off by its limit: end what it left (torchrun, ranks, the checkpoint writer), found by its run path
  for pid in $(pgrep -f -- "$RUNS/$name" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
  echo "$name: exit $rc (limit $limit s), wall $(( ($(date +%s%N) - t0) / 1000000 )) ms" | tee -a "$OUT/walls.txt"
  run_dir=$(ls -d "$RUNS/$name"/*/ 2>/dev/null | head -1)
  if [ -n "$run_dir" ]; then
    mkdir -p "$OUT/$name"
    cp -r "$run_dir/logs" "$OUT/$name/" 2>/dev/null
    cp "$run_dir"/summary.json "$run_dir"/manifest.json "$OUT/$name/" 2>/dev/null
    du -sh "$run_dir/checkpoints"/* >> "$OUT/$name/checkpoint-sizes.txt" 2>&1
    timeout -s KILL 10 "$PY" "$ROOT/scripts/save_timings.py" "$run_dir" > "$OUT/$name/saves.txt" 2>&1
    timeout -s KILL 10 "$PY" "$ROOT/scripts/save_timings.py" --json "$run_dir" > "$OUT/$name/saves.json" 2>&1
    grep -h "megatron-launch\|Async Caller\|Traceback\|Error" "$run_dir"/logs/*.log | sort | uniq -c | head -40 \
      > "$OUT/$name/launcher-lines.txt" 2>/dev/null
    cat "$OUT/$name/saves.txt"
    rm -rf "$run_dir/checkpoints"
  fi
done
cat "$OUT"/*/saves.txt > "$OUT/summary.txt" 2>/dev/null
echo "total $(( $(date +%s) - START )) s" | tee -a "$OUT/walls.txt"
rm -rf "$RUNS"
