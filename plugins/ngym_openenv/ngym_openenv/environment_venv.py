"""The virtualenv an installed OpenEnv environment runs in, and what ``probe.py`` reads in it.

Made once per set of requirements under ``$NGYM_CACHE_DIR/openenv-venvs`` (default
``~/.cache/ngym/openenv-venvs``) and reused while it works; a folder's own requirements (its ``pyproject.toml`` or
``server/requirements.txt``) checked against the interpreter first; pip's failure said in one line.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tomllib
import venv
from collections.abc import Callable
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ngym_openenv.errors import OpenEnvInstallError

Echo = Callable[[str], None]


def environments_home() -> Path:
    """Where installed OpenEnv environments keep their files (inside ngym's interpreter's prefix)."""
    return Path(sys.prefix) / "share" / "ngym" / "openenv"


def venv_root() -> Path:
    from ngym.plugin_api import cache_dir

    return cache_dir() / "openenv-venvs"


def folder_requirements(folder: Path, python: str | None, echo: Echo) -> list[str]:
    """What to pip-install for a folder: the folder itself when its project suits the interpreter, else its
    ``server/requirements.txt`` (what OpenEnv's Dockerfiles install), with OpenEnv when that does not name it."""
    project = folder / "pyproject.toml"
    requirements = folder / "server" / "requirements.txt"
    if project.is_file() or (folder / "setup.py").is_file():
        refused = _python_refused(project, python)
        if refused is None or not requirements.is_file():
            # A project that leaves OpenEnv out (openapp_env's: "installed by the Dockerfile separately") gets it
            # from the index, as the image's base would give it.
            return [str(folder), *([] if _names_openenv(project) else ["openenv"])]
        echo(f"ngym: {refused}: installing server/requirements.txt instead, as OpenEnv's Dockerfiles do")
    if requirements.is_file():
        named = re.findall(r"^\s*(openenv(?:[-_]core)?)\b", requirements.read_text(encoding="utf-8"), re.MULTILINE)
        return ["-r", str(requirements), *([] if named else ["openenv"])]
    return ["openenv"]


def _names_openenv(project: Path) -> bool:
    """Whether the project's dependencies name OpenEnv (``openenv``, ``openenv-core``, with extras or a URL);
    a ``setup.py`` project, or one that cannot be read, is taken to."""
    try:
        dependencies = tomllib.loads(project.read_text(encoding="utf-8")).get("project", {}).get("dependencies")
    except (OSError, tomllib.TOMLDecodeError):
        return True
    if dependencies is None:
        return True  # dynamic (or setup.py) dependencies: not ours to second-guess
    return any(re.match(r"\s*openenv(?:[-_]core)?\s*(?:[\[<>=!~;@ ]|$)", str(d)) for d in dependencies)


def _python_refused(project: Path, python: str | None) -> str | None:
    """Why the project's ``requires-python`` excludes the interpreter it would be installed into, else None."""
    try:
        wanted = tomllib.loads(project.read_text(encoding="utf-8")).get("project", {}).get("requires-python")
    except (OSError, tomllib.TOMLDecodeError):
        return None
    if not wanted:
        return None
    if python:
        version = _run([python, "-c", "import platform; print(platform.python_version())"]).stdout.strip()
    else:
        version = ".".join(map(str, sys.version_info[:3]))
    try:
        if Version(version) in SpecifierSet(str(wanted)):
            return None
    except (InvalidSpecifier, InvalidVersion):
        return None
    return f"its pyproject.toml requires Python {wanted} and this is {version}"


def environment_venv(name: str, requirements: list[str], folder: Path | None, echo: Echo) -> str:
    """The interpreter of a virtualenv holding ``requirements``, made once and reused while it imports openenv."""
    key = hashlib.sha256(json.dumps(requirements).encode())
    if folder is not None:  # a folder's requirements are its files: a changed folder is a new venv
        for file in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            key.update(str(file.relative_to(folder)).encode() + file.read_bytes())
    where = venv_root() / f"{name}-{key.hexdigest()[:12]}"
    where.parent.mkdir(parents=True, exist_ok=True)
    # one maker at a time: a second install of the same requirements waits, then reuses what the first made
    with open(where.parent / f"{where.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _made_venv(where, requirements, echo)


def _made_venv(where: Path, requirements: list[str], echo: Echo) -> str:
    python = where / "bin" / "python"
    ready = where / ".ngym-ready"
    if ready.is_file() and _run([str(python), "-c", "import openenv, uvicorn"]).returncode == 0:
        echo(f"ngym: reusing {where}")
        return str(python)
    echo(f"ngym: making {where} with {' '.join(requirements)} (a minute or a few)")
    shutil.rmtree(where, ignore_errors=True)
    venv.EnvBuilder(with_pip=True).create(where)
    result = _run([str(python), "-m", "pip", "install", "--disable-pip-version-check", *requirements, "uvicorn"])
    if result.returncode:
        log = where / "pip.log"
        log.write_text(result.stdout, encoding="utf-8")
        raise OpenEnvInstallError(
            f"{_target(requirements)} cannot be installed here: {pip_reason(result.stdout)} (pip's output: {log})"
        )
    ready.write_text(json.dumps(requirements) + "\n", encoding="utf-8")
    return str(python)


def pip_into(python: str, requirements: list[str], echo: Echo) -> str:
    """Install ``requirements`` into an existing interpreter's environment (``-o python=...``)."""
    echo(f"ngym: installing {' '.join(requirements)} into {python}'s environment")
    result = _run([python, "-m", "pip", "install", "--disable-pip-version-check", *requirements])
    if result.returncode:
        tail = "\n  ".join(result.stdout.splitlines()[-15:])
        raise OpenEnvInstallError(
            f"{_target(requirements)} cannot be installed with {python}: {pip_reason(result.stdout)}\n  {tail}"
        )
    return python


def _target(requirements: list[str]) -> str:
    """What was being installed, shortly: a folder's name, a requirements file's folder, or the requirements."""
    if requirements[:1] == ["-r"] and len(requirements) > 1:
        return f"{Path(requirements[1]).parent.parent.name} (its server/requirements.txt)"
    if requirements and Path(requirements[0]).is_dir():
        return Path(requirements[0]).name
    return " ".join(requirements)


#: pip's words for why an install failed, and how to say it in one line (first match wins).
_PIP_REASONS = (
    (
        re.compile(r"unable to access '([^']+)'.*Could not resolve host", re.I),
        "it needs {0}, which cannot be reached from here",
    ),
    (re.compile(r"Could not resolve host: (\S+)", re.I), "it needs {0}, which cannot be reached from here"),
    (
        re.compile(r"No matching distribution found for (\S+)"),
        "{0} is not on the package index for this Python/platform",
    ),
    (re.compile(r"Package '([^']+)' requires a different Python: (.+)"), "{0} does not support this Python ({1})"),
    (re.compile(r"ResolutionImpossible|conflicting dependencies", re.I), "its requirements conflict with each other"),
    (re.compile(r"Failed to build (.+)"), "{0} failed to build (a compiler or system library may be missing)"),
)


def pip_reason(output: str) -> str:
    """One line saying why pip failed (a host it cannot reach, a package not on the index, ...), from its output."""
    for pattern, words in _PIP_REASONS:
        found = pattern.search(output)
        if found:
            return words.format(*(g.strip() for g in found.groups()))
    errors = [line.strip() for line in output.splitlines() if line.strip().startswith("ERROR:")]
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return (errors[0] if errors else lines[-1] if lines else "pip failed without output").removeprefix("ERROR: ")


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def probe(python: str, request: dict[str, Any]) -> dict[str, Any]:
    result = _run([python, str(Path(__file__).with_name("probe.py")), json.dumps(request)])
    marker = next((line for line in reversed(result.stdout.splitlines()) if line.startswith("NGYM-PROBE ")), None)
    if result.returncode or marker is None:
        tail = "\n  ".join(result.stdout.splitlines()[-15:])
        raise OpenEnvInstallError(f"the environment's app could not be imported:\n  {tail}")
    facts: dict[str, Any] = json.loads(marker.removeprefix("NGYM-PROBE "))
    if facts.get("import_error"):
        which = f"{Path(python).parent.parent.name}-{request.get('app')}"  # the venv's name: one file per environment
        log = venv_root() / f"import-error-{re.sub(r'[^A-Za-z0-9_.-]+', '_', which)}.log"
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(str(facts.get("traceback") or ""), encoding="utf-8")
            kept = f" (traceback: {log})"
        except OSError:
            kept = ""
        raise OpenEnvInstallError(
            f"the environment's app {request.get('app')} could not be imported: {facts['import_error']}{kept}"
        )
    return facts
