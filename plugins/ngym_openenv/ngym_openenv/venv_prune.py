"""Older virtualenvs of a reinstalled OpenEnv environment, removed so that reinstalls do not fill the disk.

An environment's venv is keyed by its name, its requirements and its folder's files (``install.py``): an edited
folder installs into a new venv, so an author who reinstalls after every edit would keep one venv (hundreds of
MB, GBs with torch) per edit. The name's older venvs belong to installs the new one replaced (the name is one
installed environment's), so each install removes them, except one a running process still uses (an ``ngym
run`` of the replaced install serving from it).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

Echo = Callable[[str], None]


def replaced_venvs(root: Path, name: str, keep: Path) -> list[Path]:
    """The venvs of ``name`` under ``root`` other than ``keep`` (``<name>-<12 hex digits>``, nothing else: the
    environment ``echo`` never touches ``echo_env``'s)."""
    pattern = re.compile(re.escape(name) + r"-[0-9a-f]{12}")
    return sorted(
        path
        for path in root.glob(f"{glob_escape(name)}-*")
        if path.is_dir() and pattern.fullmatch(path.name) and path.resolve() != keep.resolve()
    )


def glob_escape(text: str) -> str:
    """``text`` as a literal glob pattern."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def in_use(venv: Path, proc: Path = Path("/proc")) -> bool:
    """Whether a running process was started from ``venv`` (its command line names a file inside it)."""
    prefix = str(venv.resolve()).encode() + b"/"
    for cmdline in proc.glob("[0-9]*/cmdline"):
        try:
            arguments = cmdline.read_bytes().split(b"\0")
        except OSError:  # the process ended, or is not ours to read
            continue
        if any(argument.startswith(prefix) for argument in arguments):
            return True
    return False


def prune_replaced(root: Path, name: str, keep: Path, echo: Echo) -> list[Path]:
    """Remove ``name``'s venvs other than ``keep`` that no running process uses; the ones removed."""
    removed = []
    for venv in replaced_venvs(root, name, keep):
        if in_use(venv):
            echo(f"ngym: keeping {venv} (a running process uses it; the next install of {name} removes it)")
            continue
        shutil.rmtree(venv, ignore_errors=True)
        removed.append(venv)
    if removed:
        echo(f"ngym: removed {len(removed)} older venv(s) of {name}: {', '.join(p.name for p in removed)}")
    return removed
