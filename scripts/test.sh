#!/usr/bin/env bash
# The whole test suite on a fresh machine: venv with megatron-core + torch, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --full
.venv/bin/python -m pytest -q "$@"
