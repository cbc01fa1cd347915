"""The cache of verifiers environments' virtualenvs: how a venv is named, shared, locked and pruned.

A venv is keyed by **what pip installs into it from the package index** and the interpreter, never by where
the environment's own code lies: a folder's key is its ``pyproject.toml``'s ``dependencies`` (the project itself
is reinstalled into the venv at each install, seconds), a module's its PEP 723 block, a distribution's its
requirement. So the same environment from two paths (a clone, a test's temporary copy, another worktree)
reuses one venv, and two environments with the same requirements share one (~600 MB each for verifiers 0.4).

Each use stamps the venv (``.ngym-used``: at install, and when a server starts its worker); an install prunes
venvs of this cache that no installed environment here names and that nobody used for
``NGYM_VERIFIERS_VENV_DAYS`` days (default 14; 0 prunes every unused one). A venv in use is never pruned: a
running worker holds a shared lock on it, an install an exclusive one, and the pruner skips what it cannot
lock at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO

from ngym.plugin_api import cache_dir

Echo = Callable[[str], None]
DAYS_ENV = "NGYM_VERIFIERS_VENV_DAYS"
DEFAULT_DAYS = 14.0
STAMP = ".ngym-used"
#: a venv without an interpreter this much older than its folder is a make that was interrupted
HALF_MADE_SECONDS = 3600.0


def venvs_dir() -> Path:
    return cache_dir() / "verifiers" / "venvs"


def venv_for(requirements: Iterable[str]) -> Path:
    """The venv holding ``requirements`` (what the package index gives, not a local project's path) for this
    interpreter: one per requirement set, whoever asks for it."""
    wanted = sorted(requirements)
    key = "|".join([*wanted, str(sys.version_info[:2]), sys.base_prefix])
    slug = "".join(c if c.isalnum() else "_" for c in (wanted[0] if wanted else "bare"))[:40].strip("_") or "env"
    return venvs_dir() / f"{slug}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"


def _lock_file(venv: Path, kind: str) -> Path:
    folder = venv.parent / ".locks"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{venv.name}.{kind}"


@contextlib.contextmanager
def installing(venv: Path, echo: Echo) -> Iterator[None]:
    """Hold the venv for an install: one install at a time (two test runs or users installing the same
    environment would otherwise run pip into one venv at once), and never pruned meanwhile."""
    waiting = f"waiting for another install into {venv}"
    with (
        _locked(_lock_file(venv, "install"), fcntl.LOCK_EX, echo, waiting),
        _locked(_lock_file(venv, "use"), fcntl.LOCK_SH, echo, ""),
    ):
        yield
    mark_used(venv)


@contextlib.contextmanager
def _locked(path: Path, mode: int, echo: Echo, waiting: str) -> Iterator[None]:
    with path.open("a") as fh:
        try:
            fcntl.flock(fh, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting:
                echo(f"ngym: {waiting}")
            fcntl.flock(fh, mode)
        yield


def hold_for_use(python: str | Path) -> IO[str] | None:
    """A shared lock on the venv of ``python`` while a worker runs in it (close the file to let go); it also
    stamps the venv as used. None when ``python`` is not in this cache (nothing to protect)."""
    venv = Path(python).parent.parent
    if venv.parent != venvs_dir():
        return None
    mark_used(venv)
    fh = _lock_file(venv, "use").open("a")
    fcntl.flock(fh, fcntl.LOCK_SH)
    return fh


def mark_used(venv: Path) -> None:
    if venv.is_dir():
        (venv / STAMP).touch()


def last_used(venv: Path) -> float:
    """When the venv was last installed into or served from (its making, for venvs older than the stamp)."""
    times = [p.stat().st_mtime for p in (venv / STAMP, venv / "pyvenv.cfg", venv) if p.exists()]
    return max(times, default=0.0)


def max_age_seconds() -> float:
    text = os.environ.get(DAYS_ENV, "")
    try:
        days = float(text) if text.strip() else DEFAULT_DAYS
    except ValueError:
        days = DEFAULT_DAYS
    return max(days, 0.0) * 86400.0


def prune(keep: Iterable[Path], echo: Echo, *, now: float | None = None) -> list[Path]:
    """Remove the venvs of this cache not in ``keep`` (those installed environments name) and unused for
    longer than ``NGYM_VERIFIERS_VENV_DAYS``, and half-made ones; the venvs removed."""
    root = venvs_dir()
    if not root.is_dir():
        return []
    kept = {Path(p).resolve() for p in keep}
    now = time.time() if now is None else now
    age = max_age_seconds()
    removed: list[Path] = []
    freed = 0
    for venv in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if venv.resolve() in kept:
            continue
        idle = now - last_used(venv)
        half_made = not (venv / "bin" / "python").exists() and idle > HALF_MADE_SECONDS
        if idle <= age and not half_made:
            continue
        size = _size(venv)
        if remove_unless_in_use(venv):
            removed.append(venv)
            freed += size
    if removed:
        echo(
            f"ngym: removed {len(removed)} virtualenv(s) no installed environment uses, idle over"
            f" {age / 86400:g} days ({freed / 2**30:.1f} GiB; {DAYS_ENV} sets the days):"
            f" {', '.join(v.name for v in removed)}"
        )
    return removed


def remove_unless_in_use(venv: Path) -> bool:
    """Remove the venv unless an install or a running worker holds it; whether it was removed."""
    install_lock, use_lock = _lock_file(venv, "install"), _lock_file(venv, "use")
    with install_lock.open("a") as first, use_lock.open("a") as second:
        try:
            fcntl.flock(first, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(second, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # an install or a running worker holds it
        shutil.rmtree(venv, ignore_errors=True)
        return not venv.exists()


def _size(folder: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def fingerprint(python: str | Path, *, distribution: str | None = None, module: str | None = None) -> str:
    """What is installed of an environment in its venv: the hash of its distribution's RECORD (the files and
    their hashes, less where it was installed from) or of its single module's file; "" when not found.

    Venvs are shared by requirement set, so another install of a same-named environment (another copy of a
    folder, another module of that name) can replace the code a record was made from: the server compares
    this at start and refuses to serve code other than what was installed and recorded."""
    venv = Path(python).parent.parent
    for site in sorted(venv.glob("lib/python*/site-packages")):
        if distribution is None and module:
            path = site / f"{module}.py"
            return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else ""
        wanted = _normal(distribution or "")
        for info in site.glob("*.dist-info"):
            if _normal(info.name.split("-", 1)[0]) == wanted and (info / "RECORD").is_file():
                lines = (info / "RECORD").read_text(encoding="utf-8", errors="replace").splitlines()
                own = sorted(line for line in lines if line and not _install_detail(line, info.name))
                return hashlib.sha256("\n".join(own).encode()).hexdigest()[:16]
    return ""


def _normal(name: str) -> str:
    return "".join("_" if c in "-_." else c for c in name).lower()


def _install_detail(line: str, info: str) -> bool:
    """RECORD lines that differ between two installs of the same code (where from, by whom, bytecode)."""
    path = line.split(",", 1)[0]
    return "__pycache__" in path or path in {f"{info}/{f}" for f in _DETAILS}


_DETAILS = ("direct_url.json", "INSTALLER", "REQUESTED", "RECORD")
