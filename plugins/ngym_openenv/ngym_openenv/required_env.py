"""The environment variables an OpenEnv environment's server cannot start without, read from its code at install.

OpenEnv environments read their settings from environment variables, and some refuse to start without one
(DIPG's ``server/app.py``: ``DATASET_PATH = os.environ.get("DIPG_DATASET_PATH")`` then ``if not DATASET_PATH:
raise ValueError("The DIPG_DATASET_PATH environment variable must be set.")``). Found here, they are checked before
the install builds anything, and kept in the manifest as the server's ``required_env``, which ``ngym run``,
``validate``, ``prepare`` and ``containerize --run`` check (``ngym.required_env``).

What counts: ``os.environ["NAME"]`` read (not assigned), and ``x = os.environ.get("NAME")`` / ``os.getenv("NAME")``
without a default followed within a few lines by ``if not x`` (or ``is None``) and a ``raise``. A variable with a
default is a setting, not a need. Test folders are not read.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

_SUBSCRIPT = re.compile(r"""os\.environ\[\s*['"]([A-Z][A-Z0-9_]*)['"]\s*\](?!\s*=[^=])""")
_GET = re.compile(
    r"""^\s*(\w+)\s*(?::[^=]+)?=\s*os\.(?:environ\.get|getenv)\(\s*['"]([A-Z][A-Z0-9_]*)['"]\s*\)\s*(#.*)?$"""
)
_MESSAGE = re.compile(r"""raise\s+\w+\(\s*f?['"](.+?)['"]""")
_LOOKAHEAD = 4


def detect_required_env(folder: Path) -> dict[str, str]:
    """Variable → what the code says of it (its error message, else where it is read), sorted by name."""
    found: dict[str, str] = {}
    for source in sorted(folder.rglob("*.py")):
        relative = source.relative_to(folder)
        if any(part in ("tests", "test", ".venv", "build") or part.startswith(".") for part in relative.parts[:-1]):
            continue
        try:
            lines = source.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for index, line in enumerate(lines):
            for match in _SUBSCRIPT.finditer(line):
                found.setdefault(match.group(1), f"read by {relative}")
            got = _GET.match(line)
            if got is None:
                continue
            variable, name = got.group(1), got.group(2)
            after = lines[index + 1 : index + 1 + _LOOKAHEAD]
            checked = any(re.search(rf"if\s+(not\s+{variable}\b|{variable}\s+is\s+None)", a) for a in after)
            raised = next((a for a in after if "raise" in a), None)
            if checked and raised is not None:
                message = _MESSAGE.search(raised)
                found.setdefault(name, message.group(1) if message else f"{relative} refuses to start without it")
    return dict(sorted(found.items()))


def package_folder(python: str, app: str) -> Path | None:
    """The folder of the top-level package of ``app`` (``module:attribute``) in ``python``'s environment (None
    when it cannot be told: then nothing is detected)."""
    package = app.partition(":")[0].split(".")[0]
    code = (
        "import importlib.util, sys; s = importlib.util.find_spec(sys.argv[1]); "
        "print(next(iter(s.submodule_search_locations or []), '') if s else '')"
    )
    try:
        done = subprocess.run([python, "-c", code, package], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = done.stdout.strip()
    return Path(found) if done.returncode == 0 and found and Path(found).is_dir() else None


def unset_line(name: str, required: dict[str, str]) -> str | None:
    """The install's one line naming each required variable this shell lacks (with what the code says), else
    None (the wording of ``ngym.required_env``'s, which ``ngym run`` and the other commands print)."""
    unset = {var: what for var, what in required.items() if not os.environ.get(var)}
    if not unset:
        return None
    named = "; ".join(f"{var} ({what})" for var, what in unset.items())
    noun = "variable" if len(unset) == 1 else "variables"
    return (
        f"{name} needs the environment {noun} {named}, not set here: set it and install again (ngym starts the "
        "environment once at install)"
    )


__all__ = ["detect_required_env", "package_folder", "unset_line"]
