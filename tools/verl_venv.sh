#!/usr/bin/env bash
# Make (once) and print the path of a Python 3.12 virtualenv holding verl 0.9.1 and skyrl-gym 0.4.0 (tools/verl-requirements.txt).
#
# verl pulls torch, Ray, transformers and ~150 other packages (a ~6 GB venv, several minutes), so it lives outside the
# repository, keyed on the requirements file: ${NGYM_VERL_VENV:-$HOME/.cache/ngym/verl/<sha256 of the file, 16 hex>}.
# An edited requirements file gets a new venv; an unchanged one is reused while its imports work. The tests run ngym
# from the checkout in it (PYTHONPATH), so ngym's code is never stale there. `--check`: exit 0 only if it is made.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REQS="$HERE/verl-requirements.txt"
KEY="$(sha256sum "$REQS" | cut -c1-16)"
VENV="${NGYM_VERL_VENV:-$HOME/.cache/ngym/verl/$KEY}"
CHECK="import verl.tools.base_tool, verl.tools.tool_registry, skyrl_gym, httpx, yaml"

if [ -x "$VENV/bin/python" ] && [ -f "$VENV/.ngym-complete" ] && "$VENV/bin/python" -c "$CHECK" >/dev/null 2>&1; then
  echo "$VENV"
  exit 0
fi
if [ "${1:-}" = "--check" ]; then  # is it made? (exit 1 when not; makes nothing)
  exit 1
fi

PYTHON=""
for candidate in "$HOME/.pyenv/versions/3.12.1/bin/python3" "$(command -v python3.12 || true)"; do
  if [ -n "$candidate" ] && [ -x "$candidate" ]; then PYTHON="$candidate"; break; fi
done
if [ -z "$PYTHON" ]; then
  echo "verl_venv: no Python 3.12 found (looked for ~/.pyenv/versions/3.12.1/bin/python3 and python3.12 on PATH)" >&2
  exit 1
fi

echo "verl_venv: making $VENV with $PYTHON and $REQS (~6 GB, several minutes)" >&2
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --progress-bar off -r "$REQS" >&2
"$VENV/bin/python" -c "$CHECK" >&2
touch "$VENV/.ngym-complete"
echo "$VENV"
