"""Per-environment virtualenvs, so environments whose requirements conflict run side by side.

An environment that names requirements (its own lines, its folder's ``requirements.txt``, or a NeMo Gym environment to
install) runs in a virtualenv of its own, cached under ``NGYM_FLEET_VENVS`` (default ``~/.cache/ngym/fleet-venvs``) and
keyed by those lines and the ngym it layers on, so a second ``up`` (or another fleet with the same requirements) reuses
it. The venv sees ngym and its dependencies through a ``.pth`` file placed *after* its own site-packages: what the
environment installs wins over ngym's copy (pip installs its own version instead of touching ngym's venv), and nothing
of ngym is installed twice. A venv whose install failed is not marked ready and is made again next time.

Each install command runs in a process group of its own (the install, pip, and pip's build backends), handed to
the caller's ``started`` as soon as it runs: the fleet records it, so ``ngym down`` stops it even after ``ngym up``
was killed (``kill -9``) in the middle of it; when ``up`` is interrupted (Ctrl-C, SIGTERM) the group is stopped
before the interruption goes on.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

from ngym.child_python import python_module
from ngym.config import cache_root
from ngym.errors import ConfigError
from ngym.fleet.spec import NEMO_PREFIX, requirements_key
from ngym.processes import spawn, stop

#: called with each install command's process as soon as it started (the fleet records it for ``ngym down``)
Started = Callable[[subprocess.Popen[bytes]], None]

VENVS_ENV = "NGYM_FLEET_VENVS"
_READY = ".ngym-ready"


def venv_root() -> Path:
    return Path(os.environ.get(VENVS_ENV) or cache_root() / "fleet-venvs")


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def venv_dir(lines: list[str]) -> Path:
    """Where the venv holding ``lines`` is cached: keyed by the lines and by the ngym it layers on (a venv made
    for another checkout's interpreter, as CI clones one per run, has a ``.pth`` pointing at that checkout, which
    may be gone or hold other code)."""
    return venv_root() / requirements_key([*lines, f"# layered on {ngym_site_packages()}"])


def ensure_venv(
    lines: list[str], log: Path, say: Callable[[str], None] = lambda _: None, started: Started | None = None
) -> Path:
    """The interpreter of a venv holding ``lines`` on top of ngym (made once, then reused).

    ``lines`` are pip requirement lines; a ``nemo-gym:NAME [--as ALIAS]`` line is installed with
    ``ngym install`` inside the venv. pip's output goes to ``log``; a failed install raises
    :class:`ConfigError` naming the log. ``started`` gets each install command's process (its own group).
    """
    venv = venv_dir(lines)
    if (venv / _READY).is_file():
        return venv_python(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    # One maker at a time: replicas placed on nodes that share this cache (or two fleets) would otherwise
    # remove each other's half-made venv. The second waits, then finds it ready.
    with open(venv.parent / f"{venv.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / _READY).is_file():
            return venv_python(venv)
        return _make_venv(venv, lines, log, say, started)


def _make_venv(
    venv: Path, lines: list[str], log: Path, say: Callable[[str], None], started: Started | None = None
) -> Path:
    say(f"making its virtualenv {venv} ({len(lines)} requirement line(s))")
    shutil.rmtree(venv, ignore_errors=True)
    base = getattr(sys, "_base_executable", sys.executable)
    _run([base, "-m", "venv", "--without-pip", str(venv)], log, started)  # pip comes from ngym's layer
    python = venv_python(venv)
    purelib = subprocess.run(
        [str(python), "-P", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # `import site; site.addsitedir(...)`, not a bare path: addsitedir also runs the .pth files there
    # (ngym's own editable installs are .pth finders), and it appends, so this venv's packages win.
    Path(purelib, "zz_ngym_base.pth").write_text(f"import site; site.addsitedir({ngym_site_packages()!r})\n")
    pip_lines = [ln for ln in lines if not ln.startswith(NEMO_PREFIX)]
    if pip_lines:
        _run([str(python), "-P", "-m", "pip", "install", "--disable-pip-version-check", *pip_lines], log, started)
    for nemo in (ln for ln in lines if ln.startswith(NEMO_PREFIX)):
        _run(python_module("ngym.cli", "install", *nemo.split(), python=str(python)), log, started)
    (venv / _READY).write_text("\n".join(lines) + "\n")
    return venv_python(venv)


def ngym_site_packages() -> str:
    """The site-packages of the interpreter running ngym (what every fleet venv layers on)."""
    return sysconfig.get_paths()["purelib"]


def _run(cmd: list[str], log: Path, started: Started | None) -> None:
    """Run an install command in a process group of its own, its output appended to ``log``; an interruption
    (Ctrl-C, SIGTERM raised as ``KeyboardInterrupt``) stops the whole group before it goes on."""
    process = spawn(cmd, log)
    try:
        if started is not None:
            started(process)
        code = process.wait()
    except BaseException:
        stop(process, grace=5.0)
        raise
    if code != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        raise ConfigError(f"`{' '.join(cmd[2:5])} ...` failed (exit {code}): {tail[0]} (log: {log})")
