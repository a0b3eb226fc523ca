#!/usr/bin/env bash
# Create .venv (Python 3.12, like Megatron itself) and install the launcher into it.
#   scripts/bootstrap.sh            launcher only (dry-runs, plans, Slurm scripts): 17 s with pip's cache warm, 190 s downloading
#   scripts/bootstrap.sh --full     + megatron-core 0.18.0, torch, matplotlib and the test tools (~75 s, 5.5 GB)
set -euo pipefail
cd "$(dirname "$0")/.."
extras=""
[ "${1:-}" = "--full" ] && extras="[megatron,report,test]"

find_python() {
    # any pyenv 3.12.x (the glob stays a literal word, which is skipped, where none is installed)
    for candidate in python3.12 "$(uv python find 3.12 2>/dev/null)" \
                     "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12 python3; do
        if command -v "$candidate" >/dev/null 2>&1 &&
           "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
            echo "$candidate"; return 0
        fi
    done
    echo "error: Python 3.12 not found (the Python this project and Megatron-LM's tested versions use)" >&2
    echo "  hint: uv python install 3.12 (no root), apt-get install python3.12 python3.12-venv (Debian 13," \
         "Ubuntu 24.04), brew install python@3.12, or pyenv install 3.12" >&2
    return 1
}

if [ ! -x .venv/bin/python ]; then
    python=$(find_python) || exit 2  # its error and hint are said; nothing was made
    "$python" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# setuptools prints a 9-line box on every editable install ("folders ... with the same name as your package"):
# true of any checkout, and nothing to act on.
PYTHONWARNINGS="ignore:Editable installation" .venv/bin/python -m pip install --quiet -e ".$extras"
echo "ready: .venv/bin/launch ($(.venv/bin/python --version)); for a bare \`launch\`: source .venv/bin/activate"
