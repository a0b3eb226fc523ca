#!/usr/bin/env bash
# The whole test suite on a fresh machine: venv with megatron-core + torch, a local Slurm cluster
# (2 emulated nodes, fake GPUs; needs root for apt-get and the daemons), then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --full
if scripts/slurm-local.sh up; then
    trap 'scripts/slurm-local.sh down' EXIT
elif [ -n "${CI:-}" ]; then
    echo "error: the local Slurm cluster did not start" >&2
    exit 1
else
    echo "warning: no local Slurm cluster (needs root); the Slurm cluster tests will be skipped" >&2
fi
.venv/bin/python -m mypy  # the type check (its settings: [tool.mypy] in pyproject.toml)
# Two workers (this machine's 2 cores); tests/conftest.py puts each file, and all the Slurm cluster tests, in one
# group that one worker runs in order. `scripts/test.sh -n 0` runs in one process.
.venv/bin/python -m pytest -q -n 2 --dist loadgroup "$@"
