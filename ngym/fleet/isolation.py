"""Per-environment virtualenvs, so environments whose requirements conflict run side by side.

An environment that names requirements (its own lines, its folder's ``requirements.txt``, or a NeMo Gym environment to
install) runs in a virtualenv of its own, cached under ``NGYM_FLEET_VENVS`` (default ``~/.cache/ngym/fleet-venvs``) and
keyed by those lines and the ngym it layers on, so a second ``up`` (or another fleet with the same requirements) reuses
it. The venv sees ngym and its dependencies through a ``.pth`` file placed *after* its own site-packages: what the
environment installs wins over ngym's copy (pip installs its own version instead of touching ngym's venv), and nothing
of ngym is installed twice. A venv whose install failed is not marked ready and is made again next time.
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
from typing import IO

from ngym.child_python import python_module
from ngym.config import cache_root
from ngym.errors import ConfigError
from ngym.fleet.spec import NEMO_PREFIX, requirements_key

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


def ensure_venv(lines: list[str], log: Path, say: Callable[[str], None] = lambda _: None) -> Path:
    """The interpreter of a venv holding ``lines`` on top of ngym (made once, then reused).

    ``lines`` are pip requirement lines; a ``nemo-gym:NAME [--as ALIAS]`` line is installed with
    ``ngym install`` inside the venv. pip's output goes to ``log``; a failed install raises
    :class:`ConfigError` naming the log.
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
        return _make_venv(venv, lines, log, say)


def _make_venv(venv: Path, lines: list[str], log: Path, say: Callable[[str], None]) -> Path:
    say(f"making its virtualenv {venv} ({len(lines)} requirement line(s))")
    shutil.rmtree(venv, ignore_errors=True)
    base = getattr(sys, "_base_executable", sys.executable)
    with log.open("ab") as out:
        _run([base, "-m", "venv", "--without-pip", str(venv)], out, log)  # pip comes from ngym's layer
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
            _run([str(python), "-P", "-m", "pip", "install", "--disable-pip-version-check", *pip_lines], out, log)
        for nemo in (ln for ln in lines if ln.startswith(NEMO_PREFIX)):
            _run(python_module("ngym.cli", "install", *nemo.split(), python=str(python)), out, log)
    (venv / _READY).write_text("\n".join(lines) + "\n")
    return venv_python(venv)


def ngym_site_packages() -> str:
    """The site-packages of the interpreter running ngym (what every fleet venv layers on)."""
    return sysconfig.get_paths()["purelib"]


def _run(cmd: list[str], out: IO[bytes], log: Path) -> None:
    done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        raise ConfigError(f"`{' '.join(cmd[2:5])} ...` failed (exit {done.returncode}): {tail[0]} (log: {log})")
