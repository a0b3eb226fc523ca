#!/usr/bin/env bash
# Fetch the pinned Megatron-LM (432d76b2b8bf, megatron-core 0.18.0) into third_party/megatron-lm.
# Needs network access to github.com. Alternatively point the launcher at an existing checkout with
# --megatron-path DIR or MEGATRON_LM_PATH=DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
commit=432d76b2b8bf036d8a267d5f1623eccd5dbca092
if git submodule status third_party/megatron-lm >/dev/null 2>&1; then
    git submodule update --init third_party/megatron-lm
else
    git clone https://github.com/NVIDIA/Megatron-LM.git third_party/megatron-lm
fi
git -C third_party/megatron-lm checkout --quiet "$commit"
echo "Megatron-LM at $(git -C third_party/megatron-lm rev-parse --short HEAD) in third_party/megatron-lm"
