#!/usr/bin/env bash
# Set up the local model on a fresh machine: a virtualenv with rlm, the
# prebuilt llama.cpp server (a sha256-pinned wheel: seconds), and the 1.5B GGUF
# assembled and verified in the user cache dir. About 1-2 minutes in all.
#
#   scripts/setup-local-model.sh            # venv in ./.venv, the 1.5B model
#   scripts/setup-local-model.sh --small    # the 0.5B model instead
#   scripts/setup-local-model.sh --build    # compile the native server too (5-10 min; faster)
#   VENV=/opt/rlm-venv PYTHON=python3.12 scripts/setup-local-model.sh
#
# Needs: Python >= 3.11 with venv (and, for --build only, a C/C++ compiler and cmake),
# ~2.5 GB free disk under the cache dir ($RLM_CACHE_DIR, default ~/.cache/rlm).
# Safe to run again: finished steps are kept. Extra arguments go to
# `rlm local setup` (--small, --build, --force, --pip-arg=...).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${VENV:-$repo/.venv}"
python="${PYTHON:-python3}"

if [[ ! -x "$venv/bin/python" ]]; then
    echo "creating virtualenv $venv" >&2
    "$python" -m venv "$venv"
fi
"$venv/bin/python" - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"rlm needs Python >= 3.11, this virtualenv has {sys.version.split()[0]}")
PY

echo "installing rlm into $venv" >&2
"$venv/bin/python" -m pip install --disable-pip-version-check -q -e "$repo[dev]"

# Installs the server if missing, then fetches, assembles and verifies the model.
"$venv/bin/python" -m rlm.local setup "$@"
"$venv/bin/python" -m rlm.local status >&2 || true  # exit 4 (not ready) only with --no-server
