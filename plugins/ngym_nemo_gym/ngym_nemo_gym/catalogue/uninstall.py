"""``ngym uninstall`` of NeMo Gym environments, keeping the siblings installed as code only consistent.

An environment's siblings are installed as code only (``ngym_nemo_gym.catalogue.package``): the distribution
``ngym-nemo-<sibling>`` without entry point or requirements of its own. Uninstalling keeps pip's view true to
what is importable:

- a full environment another installed one still imports is not removed but **replaced by its code only** (its
  server leaves ``ngym list``; the importer keeps working), rebuilt from the project ``ngym install`` kept;
- a code-only sibling the user names while an installed environment imports it is refused, naming that one;
- code-only siblings no installed distribution requires any more are removed with what the user uninstalled
  (like ``apt autoremove``, for what ngym installed on its own).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Collection, Sequence
from importlib import metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ngym import NgymError
from ngym.plugin_api import pip_uninstall_args, reset_registry
from ngym.plugin_api import run_pip as plugin_run_pip
from ngym_nemo_gym.catalogue.folder import COMPAT_DISTRIBUTION, distribution_name, read_environment
from ngym_nemo_gym.catalogue.install import fresh_project, is_installed, projects_dir, run_pip
from ngym_nemo_gym.catalogue.package import CODE_ONLY_KEYWORD

Echo = Callable[[str], None]
PREFIX = "ngym-nemo-"
#: The folder NeMo Gym environments are installed under in site-packages (the namespace package).
ENVIRONMENTS_FOLDER = "resources_servers"


class SiblingInUse(NgymError):
    """A sibling installed as code only is imported by an installed environment."""

    exit_code = 2


def nemo_distribution(package: str) -> str:
    """``nemo-gym:<name>`` → ``ngym-nemo-<name>``; any other package name as given."""
    return distribution_name(package.partition(":")[2]) if package.startswith("nemo-gym:") else package


def is_nemo_distribution(name: str) -> bool:
    """True for an ``ngym-nemo-<name>`` distribution (a NeMo Gym environment ngym installed), not the compat one."""
    canonical = canonicalize_name(name)
    return canonical.startswith(PREFIX) and canonical != COMPAT_DISTRIBUTION


def is_code_only(distribution: str) -> bool:
    """True when ``distribution`` is installed and is a sibling's code only (no entry point, no requirements)."""
    try:
        keywords = metadata.distribution(distribution).metadata.get_all("Keywords") or []
    except metadata.PackageNotFoundError:
        return False
    return CODE_ONLY_KEYWORD in " ".join(keywords).replace(",", " ").split()


def importers(distribution: str, *, ignoring: Collection[str] = ()) -> list[str]:
    """The installed distributions (outside ``ignoring``) that require ``distribution``."""
    wanted = canonicalize_name(distribution)
    found: set[str] = set()
    for dist in metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"] or "")
        if not name or name in ignoring or name == wanted:
            continue
        for line in dist.requires or []:
            try:
                requirement = Requirement(line)
            except InvalidRequirement:
                continue
            if canonicalize_name(requirement.name) == wanted and (
                requirement.marker is None or requirement.marker.evaluate({"extra": ""})
            ):
                found.add(name)
    return sorted(found)


def uninstall_packages(packages: Sequence[str], *, yes: bool, echo: Echo = print) -> int:
    """Uninstall ``packages`` (distribution names or ``nemo-gym:<name>``) with pip; pip's exit code."""
    names = [nemo_distribution(p) for p in packages]
    targets = {canonicalize_name(n) for n in names}
    nemo = [n for n in names if canonicalize_name(n).startswith(PREFIX) and canonicalize_name(n) != COMPAT_DISTRIBUTION]
    for name in nemo:
        if is_code_only(name) and (users := importers(name, ignoring=targets)):
            raise SiblingInUse(
                f"{name} is installed only as the code {', '.join(users)} imports; uninstall "
                f"{'that' if len(users) == 1 else 'those'} too, or leave it"
            )
    keep = [n for n in nemo if is_installed(n) and not is_code_only(n) and importers(n, ignoring=targets)]
    for name in keep:
        importing = ", ".join(importers(name, ignoring=targets))
        echo(f"ngym: {importing} imports {name}: keeping its code only (its server leaves `ngym list`)")
        _reinstall_code_only(name)
    remove = [n for n in names if n not in keep]
    if remove:
        folders = _environment_folders(remove)
        code = plugin_run_pip(pip_uninstall_args(remove, yes=yes))
        if code:
            return code
        _remove_leftovers(folders, echo)
    orphans = _orphaned_code_only()
    if orphans:
        echo(f"ngym: removing {', '.join(orphans)} (code only, no installed environment imports it any more)")
        folders = _environment_folders(orphans)
        run_pip(["uninstall", "--yes", *orphans], verbose=False)
        _remove_leftovers(folders, echo)
    reset_registry()
    return 0


def _environment_folders(distributions: Sequence[str]) -> list[Path]:
    """The ``resources_servers/<name>`` folders the installed ``distributions`` put in site-packages."""
    folders: set[Path] = set()
    for name in distributions:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for file in dist.files or []:
            if len(file.parts) > 2 and file.parts[0] == ENVIRONMENTS_FOLDER:
                folders.add(Path(str(dist.locate_file(Path(*file.parts[:2])))))
    return sorted(folders)


def _remove_leftovers(folders: Sequence[Path], echo: Echo) -> None:
    """Delete what pip leaves of uninstalled environments' folders: files their runs made (generated data,
    pytest's rewritten ``.pyc``), which pip never recorded. A folder left behind is still importable from
    site-packages (``resources_servers.<name>``) and shadows a source checkout of the same name. A folder
    another installed distribution still has files in is left alone; ``resources_servers/`` goes when empty."""
    owned = {
        Path(str(dist.locate_file(Path(*file.parts[:2]))))
        for dist in metadata.distributions()
        for file in dist.files or []
        if len(file.parts) > 2 and file.parts[0] == ENVIRONMENTS_FOLDER
    }
    for folder in folders:
        if folder.is_dir() and folder not in owned:
            shutil.rmtree(folder, ignore_errors=True)
            echo(f"ngym: removed {folder} (files the environment made, which pip does not track)")
        parent = folder.parent
        if parent.name == ENVIRONMENTS_FOLDER and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()


def _orphaned_code_only() -> list[str]:
    """Code-only siblings no installed distribution requires, transitively (one sibling's code importing
    another's goes with it)."""
    orphans: list[str] = []
    while True:
        candidates = [
            canonicalize_name(d.metadata["Name"] or "")
            for d in metadata.distributions()
            if canonicalize_name(d.metadata["Name"] or "").startswith(PREFIX)
        ]
        found = [
            name
            for name in candidates
            if name not in orphans and is_code_only(name) and not importers(name, ignoring=set(orphans))
        ]
        if not found:
            return sorted(orphans)
        orphans.extend(found)


def _reinstall_code_only(distribution: str) -> None:
    """Replace the installed full environment ``distribution`` by its code only, built from the project
    ``ngym install`` kept in ``projects_dir()``."""
    kept = (
        {distribution_name(p.name): p for p in projects_dir().iterdir() if p.is_dir()}
        if projects_dir().is_dir()
        else {}
    )
    project = kept.get(canonicalize_name(distribution))
    if project is None:
        raise NgymError(f"cannot keep {distribution}'s code: its project is gone from {projects_dir()}")
    dist = metadata.distribution(distribution)
    with tempfile.TemporaryDirectory(prefix="ngym-nemo-") as tmp:
        copy = Path(tmp) / project.name
        shutil.copytree(project, copy)  # fresh_project rewrites the kept project folder itself
        known = {p.name for p in (copy / "resources_servers").iterdir()} | {p.name for p in projects_dir().iterdir()}
        env = read_environment(copy / "resources_servers" / project.name, known)
        rebuilt = fresh_project(env, version=dist.version, code_only=True)
    run_pip(["install", "--no-deps", str(rebuilt)], verbose=False)
