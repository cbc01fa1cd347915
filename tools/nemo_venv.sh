#!/usr/bin/env bash
# Make (once) and print the path of a Python 3.13 virtualenv holding NeMo Gym 0.7.0, for the conformance tests.
#
# NeMo Gym 0.7.0 declares Python >= 3.12 and pulls ~200 packages, so it lives in its own venv outside the
# repository and ngym never imports it: the tests drive it in a subprocess. The venv is cached at
# ${NGYM_NEMO_VENV:-${XDG_CACHE_HOME:-~/.cache}/ngym/nemo-gym-0.7.0-py313} and reused while `import nemo_gym` works there.
set -euo pipefail

NEMO_VERSION="0.7.0"
VENV="${NGYM_NEMO_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ngym/nemo-gym-${NEMO_VERSION}-py313}"

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import nemo_gym, mcp" >/dev/null 2>&1; then
  echo "$VENV"
  exit 0
fi

PYTHON=""
for candidate in "$HOME/.pyenv/versions/3.13.0/bin/python3" "$(command -v python3.13 || true)"; do
  if [ -n "$candidate" ] && [ -x "$candidate" ]; then PYTHON="$candidate"; break; fi
done
if [ -z "$PYTHON" ]; then
  echo "nemo_venv: no Python 3.13 found (looked for ~/.pyenv/versions/3.13.0/bin/python3 and python3.13 on PATH)" >&2
  exit 1
fi

mkdir -p "$(dirname "$VENV")"
# One maker at a time (.ci/run makes it in the background while the suite runs; a test may ask for it meanwhile):
# the second waits, then finds it made.
exec 9>"$VENV.lock"
flock 9
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import nemo_gym, mcp" >/dev/null 2>&1; then
  echo "$VENV"
  exit 0
fi
echo "nemo_venv: making $VENV with $PYTHON and nemo-gym==$NEMO_VERSION (about 80 s)" >&2
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
# --ignore-requires-python: 0.7.0's metadata names a narrower range than the code needs.
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --ignore-requires-python "nemo-gym==$NEMO_VERSION" >&2
"$VENV/bin/python" -c "import nemo_gym, mcp" >&2
echo "$VENV"
