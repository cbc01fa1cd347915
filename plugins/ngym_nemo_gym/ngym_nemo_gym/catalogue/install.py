"""``ngym install nemo-gym:<name>`` / ``ngym install <NeMo Gym environment folder>``.

The environment (and every sibling environment it imports that is not installed yet, as code only: see
``package``) is packaged by ``package`` into ``<prefix>/share/ngym/nemo-gym/<name>`` and
installed from there with pip into ngym's own interpreter, in one pip call. A name already
registered by another distribution is never overwritten silently: the user picks ``--as NAME`` or ``--replace``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from ngym import NgymError
from ngym.plugin_api import get_registry, needs_of, reset_registry
from ngym_nemo_gym.catalogue import wheel as nemo_wheel
from ngym_nemo_gym.catalogue.folder import (
    NemoEnvironment,
    NemoEnvironmentError,
    distribution_name,
    read_environment,
)
from ngym_nemo_gym.catalogue.package import build_project

SOURCE_PREFIX = "nemo-gym:"
Echo = Callable[[str], None]


class NameClashError(NgymError):
    """The environment's name is taken by another installed distribution."""

    exit_code = 2


class PipFailed(NgymError):
    """pip could not install the generated packages (its last lines say why)."""


@dataclass
class InstallResult:
    name: str  # the ngym name it is registered under
    environment: NemoEnvironment
    installed: list[str]  # distributions pip installed (the environment, then new siblings as code only)


def is_nemo_source(text: str) -> bool:
    """True for ``nemo-gym:<name>`` and for a folder holding a NeMo Gym environment (its requirements name
    nemo-gym, or it has ``app.py`` and ``configs/`` but no ``pyproject.toml`` of its own)."""
    if text.startswith(SOURCE_PREFIX):
        return True
    path = Path(text)
    if not path.is_dir():
        return False
    if _mentions_nemo_gym(path):
        return True
    return (path / "app.py").is_file() and (path / "configs").is_dir() and not (path / "pyproject.toml").is_file()


def _mentions_nemo_gym(path: Path) -> bool:
    for name in ("requirements.txt", "pyproject.toml"):
        file = path / name
        if file.is_file() and "nemo-gym" in file.read_text(encoding="utf-8", errors="replace").replace("_", "-"):
            return True
    return False


def install_nemo_environment(
    source: str,
    *,
    as_name: str | None = None,
    replace: bool = False,
    verbose: bool = False,
    echo: Echo = print,
) -> InstallResult:
    """Install one NeMo Gym environment (``nemo-gym:<name>`` or a folder) as an ngym plugin."""
    with tempfile.TemporaryDirectory(prefix="ngym-nemo-") as tmp:
        work = Path(tmp)
        wheel_path: Path | None = None
        if source.startswith(SOURCE_PREFIX):
            env_name = source[len(SOURCE_PREFIX) :].strip()
            if not env_name:
                raise NemoEnvironmentError("give an environment name: nemo-gym:<name> (ngym list --available nemo-gym)")
            wheel_path = nemo_wheel.nemo_gym_wheel()
            echo(f"ngym: taking {env_name} from {wheel_path.name}")
            folder = nemo_wheel.extract_environment(env_name, work / "src", wheel_path)
            version = nemo_wheel.NEMO_GYM_VERSION
        else:
            folder = Path(source).resolve()
            version = "0+local"
        sibling_source = _SiblingSource(folder.parent, wheel_path, work / "src")  # src/ mirrors the wheel
        env = read_environment(folder, sibling_source.names())
        name = as_name or env.name
        _check_clash(name, env, replace=replace, verbose=verbose, echo=echo)

        siblings = sibling_source.missing_closure(env)
        projects = [fresh_project(env, ngym_name=name, version=version)]
        projects += [fresh_project(s, version=version, code_only=True) for s in siblings]
        shown = f" (+ the code of {', '.join(s.name for s in siblings)})" if siblings else ""
        echo(f"ngym: installing {env.name} with its requirements{shown}")
        run_pip(["install", *map(str, projects), *env.pip_lines], verbose=verbose)
    reset_registry()
    domain = env.domain or "?"
    echo(f"ngym: installed {name} ({domain}) from {env.distribution}; try: ngym test {name} / ngym run {name}")
    for need in needs_of(name):  # it did install; what it needs is advice, not a reason to fail
        echo(f"ngym: before it serves a rollout, {need}")
    return InstallResult(name, env, [env.distribution, *(s.distribution for s in siblings)])


def projects_dir() -> Path:
    """Where generated projects are kept, inside the interpreter's prefix (``<prefix>/share/ngym/nemo-gym``).

    Kept, not discarded: pip records a directory install's source (PEP 610 ``direct_url.json``), and
    ``ngym containerize`` rebuilds the environment's wheel from it for the image.
    """
    return Path(sys.prefix) / "share" / "ngym" / "nemo-gym"


def fresh_project(env: NemoEnvironment, *, version: str, ngym_name: str | None = None, code_only: bool = False) -> Path:
    """The generated project of ``env`` in ``projects_dir()``, written afresh."""
    dest = projects_dir() / env.name
    shutil.rmtree(dest, ignore_errors=True)
    return build_project(env, dest, ngym_name=ngym_name, version=version, code_only=code_only)


class _SiblingSource:
    """Where the sibling environments an environment imports come from: next to it, else the wheel."""

    def __init__(self, parent: Path, wheel_path: Path | None, scratch: Path) -> None:
        self.parent, self.wheel_path, self.scratch = parent, wheel_path, scratch

    def names(self) -> set[str]:
        local = (
            {p.name for p in self.parent.iterdir() if p.is_dir()} if self.parent.name == "resources_servers" else set()
        )
        try:
            wheel_path = self.wheel_path or nemo_wheel.nemo_gym_wheel()
        except NgymError:
            return local
        with zipfile.ZipFile(wheel_path) as zf:
            return local | set(nemo_wheel.environment_names(zf))

    def folder(self, name: str) -> Path:
        local = self.parent / name
        if self.parent.name == "resources_servers" and local.is_dir():
            return local
        target = self.scratch / nemo_wheel.PREFIX / name
        if target.is_dir():
            return target
        return nemo_wheel.extract_environment(name, self.scratch, self.wheel_path)

    def missing_closure(self, env: NemoEnvironment) -> list[NemoEnvironment]:
        """Siblings (transitively) whose distribution is not installed yet (in full or as code only)."""
        names = self.names()
        found: dict[str, NemoEnvironment] = {}
        pending = list(env.siblings)
        while pending:
            sibling = pending.pop()
            if sibling in found or sibling == env.name or is_installed(_dist(sibling)):
                continue
            found[sibling] = read_environment(self.folder(sibling), names)
            pending.extend(found[sibling].siblings)
        return list(found.values())


def _dist(name: str) -> str:
    return distribution_name(name)


def is_installed(distribution: str) -> bool:
    """True when ``distribution`` is installed in this interpreter."""
    try:
        metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True


def _check_clash(name: str, env: NemoEnvironment, *, replace: bool, verbose: bool, echo: Echo) -> None:
    """Refuse a name another distribution registers, unless ``replace`` (which uninstalls that one first)."""
    entries = [e for e in get_registry().all_entries() if e.name == name and e.distribution != env.distribution]
    if not entries:
        return
    other = entries[0]
    owner = f"{other.distribution or 'an unknown distribution'} ({other.target})"
    if not replace:
        raise NameClashError(
            f"an environment named {name!r} is already installed by {owner}; install NeMo Gym's "
            f"{env.name} under another name with --as NAME, or uninstall {other.distribution} with --replace"
        )
    if other.distribution is None:
        raise NameClashError(
            f"{name!r} is registered by {owner}, which has no distribution to uninstall; use --as NAME"
        )
    echo(f"ngym: uninstalling {other.distribution} (it registered {name!r})")
    run_pip(["uninstall", "--yes", other.distribution], verbose=verbose)


def run_pip(args: list[str], *, verbose: bool) -> None:
    """pip in ngym's interpreter: its output streamed with ``verbose``, else kept and shown only on failure."""
    command = [sys.executable, "-m", "pip", *args]
    if verbose:
        code = subprocess.call(command)
        output = ""
    else:
        result = subprocess.run([*command[:4], "--quiet", *command[4:]], capture_output=True, text=True)
        code, output = result.returncode, result.stderr + result.stdout
    if code:
        raise PipFailed(f"pip {args[0]} failed: {pip_failure_line(output, code)} (run with -v for pip's output)")


def pip_failure_line(output: str, code: int) -> str:
    """The line of pip's output that says why it failed: its ``ERROR:``, else the ``×`` headline of a failed
    build (``git clone ... did not run successfully``), else its last line; never the generic ``note:``."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip() and not ln.startswith("WARNING: Location")]
    for prefix in ("ERROR:", "×"):
        found = [ln for ln in lines if ln.startswith(prefix)]
        if found:
            return found[0]
    useful = [ln for ln in lines if not ln.startswith(("note:", "hint:"))]
    return useful[-1] if useful else f"exit code {code}"
