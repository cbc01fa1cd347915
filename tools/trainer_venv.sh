#!/usr/bin/env bash
# Make (once) and print the path of the one trainer virtualenv (tools/trainer-requirements.txt): TRL, verl,
# skyrl-gym and the openreward SDK, resolved together on Python 3.12.
#
# Trainers pull torch, transformers and Ray (~6 GB, ~8 min the first time), so they live in one venv outside the
# repository, cached at ${NGYM_TRAINER_VENV:-${XDG_CACHE_HOME:-~/.cache}/ngym/trainers/<key>}, key = hash of the requirements file
# and the interpreter: editing the requirements makes a new venv, an unchanged file reuses the old one. ngym's own
# venv never imports a trainer; `make trainers`, `make trainers-verl` and `make ors` run the trainers in this venv as
# subprocesses, with the checkout on PYTHONPATH for the client helpers in ngym/train/ (httpx only).
# `--check`: exit 0 (printing the path) only if it is made; makes nothing.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REQS="$HERE/trainer-requirements.txt"

PYTHON="${NGYM_TRAINER_PYTHON:-}"
if [ -z "$PYTHON" ]; then
  for candidate in "$HOME/.pyenv/versions/3.12.1/bin/python3" "$(command -v python3.12 || true)"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ]; then PYTHON="$candidate"; break; fi
  done
fi
if [ -z "$PYTHON" ]; then
  echo "trainer_venv: no Python 3.12 found (looked for ~/.pyenv/versions/3.12.1/bin/python3 and python3.12 on PATH; or set NGYM_TRAINER_PYTHON)" >&2
  exit 1
fi

KEY="$( { cat "$REQS"; "$PYTHON" -c 'import sys; print(sys.version)'; } | sha256sum | cut -c1-16)"
VENV="${NGYM_TRAINER_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ngym/trainers/$KEY}"
CHECK="import trl, trl.experimental.openreward, torch, transformers, datasets, accelerate, openreward, \
openreward.api.environments.client, verl.tools.base_tool, verl.tools.tool_registry, skyrl_gym, httpx, yaml"

# Made = complete (its imports worked when it was made) and every package still there. Finding them is enough:
# importing torch, verl and TRL takes 10-60 s, and each make target and test session asks.
FOUND="import importlib.util, sys; sys.exit(any(importlib.util.find_spec(m) is None for m in sys.argv[1:]))"
PACKAGES="trl torch transformers datasets accelerate openreward verl skyrl_gym httpx yaml"
# shellcheck disable=SC2086
made() { [ -x "$VENV/bin/python" ] && [ -f "$VENV/.ngym-complete" ] && "$VENV/bin/python" -c "$FOUND" $PACKAGES >/dev/null 2>&1; }

if made; then
  echo "$VENV"
  exit 0
fi
if [ "${1:-}" = "--check" ]; then  # only say whether it is made (exit 1: not yet)
  exit 1
fi

mkdir -p "$(dirname "$VENV")"
# One maker at a time (two test runs, two checkouts, three make targets): the second waits, then finds it made.
exec 9>"$VENV.lock"
flock 9
if made; then
  echo "$VENV"
  exit 0
fi
echo "trainer_venv: making $VENV with $("$PYTHON" --version) and $REQS (~8 min, ~6 GB the first time)" >&2
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --progress-bar off -r "$REQS" >&2
"$VENV/bin/python" -c "$CHECK" >&2
"$VENV/bin/python" -m pip freeze --disable-pip-version-check > "$VENV/.ngym-freeze.txt"
touch "$VENV/.ngym-complete"
echo "$VENV"
