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

import re
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


__all__ = ["detect_required_env"]
