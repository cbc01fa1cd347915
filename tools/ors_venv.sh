#!/usr/bin/env bash
# Make (once) and print the path of a virtualenv holding the Open Reward Standard SDK (tools/ors-client-requirements.txt).
#
# openreward pulls the OpenAI, Anthropic and Google clients and OpenTelemetry (~60 packages) and pins sse-starlette,
# so it lives in a venv outside the repository, cached at ${NGYM_ORS_VENV:-$HOME/.cache/ngym/ors-client/<key>},
# key = hash of the requirements file and the interpreter. ngym never imports it: `make ors` runs the tests that
# drive its client against ngym servers in subprocesses. `ors_venv.sh --probe` only says whether it is made.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REQS="$HERE/ors-client-requirements.txt"

PYTHON="${NGYM_ORS_PYTHON:-}"
if [ -z "$PYTHON" ]; then
  for candidate in "$HOME/.pyenv/versions/3.12.1/bin/python3" "$(command -v python3.12 || true)" "$(command -v python3 || true)"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ]; then PYTHON="$candidate"; break; fi
  done
fi
if [ -z "$PYTHON" ]; then
  echo "ors_venv: no Python found (set NGYM_ORS_PYTHON)" >&2
  exit 1
fi

KEY="$( { cat "$REQS"; "$PYTHON" -c 'import sys; print(sys.version)'; } | sha256sum | cut -c1-16)"
VENV="${NGYM_ORS_VENV:-$HOME/.cache/ngym/ors-client/$KEY}"
TRL="trl==1.16.0"
CHECK="import openreward, openreward.api.environments.client, trl.experimental.openreward, datasets"

if [ -x "$VENV/bin/python" ] && [ -f "$VENV/.ngym-complete" ] && "$VENV/bin/python" -c "$CHECK" >/dev/null 2>&1; then
  echo "$VENV"
  exit 0
fi
if [ "${1:-}" = "--probe" ]; then  # only say whether the venv is made (exit 1: it is not)
  exit 1
fi

echo "ors_venv: making $VENV with $("$PYTHON" --version) and $REQS (~2 min the first time)" >&2
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQS" >&2
# TRL's ORS binding without the trainer's torch/transformers (its package imports them lazily).
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "$TRL" >&2
"$VENV/bin/python" -c "$CHECK" >&2
touch "$VENV/.ngym-complete"
echo "$VENV"
