#!/usr/bin/env bash
# Make (once) and print the path of a virtualenv holding the RL trainers of tools/trainer-requirements.txt (TRL, ...).
#
# Trainers pull torch and transformers (~6 GB, ~8 min the first time), so they live in a venv outside the repository,
# cached at ${NGYM_TRAINER_VENV:-$HOME/.cache/ngym/trainers/<key>}, key = hash of the requirements file and the
# interpreter: editing the requirements makes a new venv, an unchanged file reuses the old one. ngym's own venv never
# imports a trainer; `make trainers` runs the trainers in this venv as subprocesses, with the repository on PYTHONPATH
# for the light client helpers in ngym/train/ (httpx only). `--check`: exit 0 (printing the path) only if it is made.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REQS="$HERE/trainer-requirements.txt"

PYTHON="${NGYM_TRAINER_PYTHON:-}"
if [ -z "$PYTHON" ]; then
  for candidate in "$HOME/.pyenv/versions/3.12.1/bin/python3" "$(command -v python3.12 || true)" "$(command -v python3 || true)"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ]; then PYTHON="$candidate"; break; fi
  done
fi
if [ -z "$PYTHON" ]; then
  echo "trainer_venv: no Python found (set NGYM_TRAINER_PYTHON)" >&2
  exit 1
fi

KEY="$( { cat "$REQS"; "$PYTHON" -c 'import sys; print(sys.version)'; } | sha256sum | cut -c1-16)"
VENV="${NGYM_TRAINER_VENV:-$HOME/.cache/ngym/trainers/$KEY}"
CHECK="import trl, torch, transformers, datasets, accelerate, openreward, httpx"

if [ -x "$VENV/bin/python" ] && [ -f "$VENV/.ngym-complete" ] && "$VENV/bin/python" -c "$CHECK" >/dev/null 2>&1; then
  echo "$VENV"
  exit 0
fi
if [ "${1:-}" = "--check" ]; then  # only say whether it is made (exit 1: not yet)
  exit 1
fi

mkdir -p "$(dirname "$VENV")"
# One maker at a time (two test runs, two checkouts): the second waits, then finds the venv made.
exec 9>"$VENV.lock"
flock 9
if [ -x "$VENV/bin/python" ] && [ -f "$VENV/.ngym-complete" ] && "$VENV/bin/python" -c "$CHECK" >/dev/null 2>&1; then
  echo "$VENV"
  exit 0
fi
echo "trainer_venv: making $VENV with $("$PYTHON" --version) and $REQS (~8 min, ~6 GB the first time)" >&2
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQS" >&2
"$VENV/bin/python" -c "$CHECK" >&2
"$VENV/bin/python" -m pip freeze --disable-pip-version-check > "$VENV/.ngym-freeze.txt"
touch "$VENV/.ngym-complete"
echo "$VENV"
