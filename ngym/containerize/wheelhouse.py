"""The wheelhouse the build context carries, built on the host: ``build_wheelhouse`` (runs pip) makes::

    <dir>/code/   ngym's and the plugin's wheels (built from their source trees, also for editable installs)
    <dir>/deps/   every dependency as a wheel, for the image's Python version and platform

so the image installs with ``--no-index`` and the build never needs the network. Dependency versions are pinned
to what the host's ngym interpreter has installed (the tested set), falling back to a fresh resolution only when a
pinned version is not available. ``ngym.containerize.dockerfile.build_context`` copies it into the build context.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence, Set
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from ngym.containerize.errors import WheelhouseError
from ngym.containerize.pip import (
    SOURCE_DATE_EPOCH,
    Log,
    _may_be_the_pins,
    _pip,
    default_cache_dir,
    host_python_version,
)
from ngym.containerize.source_wheels import build_code_wheels
from ngym.containerize.spec import DistributionSource, distribution_source_dir


@dataclass(frozen=True)
class Wheelhouse:
    """Where the wheels are, and their file names (sorted)."""

    root: Path
    code_wheels: tuple[str, ...]
    dependency_wheels: tuple[str, ...]
    #: the pip wheel (in ``tools/``) that installs the others inside the build, run from the wheel itself
    installer_wheel: str
    #: True when the host's installed versions could be used as pins; False after a fresh resolution
    pinned_to_host: bool = True

    @property
    def tools_dir(self) -> Path:
        return self.root / "tools"

    @property
    def code_dir(self) -> Path:
        return self.root / "code"

    @property
    def deps_dir(self) -> Path:
        return self.root / "deps"


def build_wheelhouse(
    sources: Sequence[DistributionSource],
    dest: Path,
    *,
    python_version: str | None = None,
    log: Log = lambda line: None,
    python: str = sys.executable,
    cache_dir: Path | None = None,
) -> Wheelhouse:
    """Build the wheels of ``sources`` (the code layer) and of all their dependencies into ``dest``.

    ``python_version`` is the image's ``major.minor``; when it is the host's, dependency wheels are built with
    ``pip wheel`` on the host (sdists included); otherwise binary wheels for that version are downloaded.
    The dependency wheels are cached in ``cache_dir`` (default: ``default_cache_dir()``) under a key made of
    the code wheels' requirements, the host's pins and the target Python, so a code-only change reuses them
    byte for byte (which is what lets Docker reuse the dependency layer).
    """
    python_version = python_version or host_python_version()
    dest = Path(dest)
    code_dir, deps_dir, tools_dir = dest / "code", dest / "deps", dest / "tools"
    for d in (code_dir, deps_dir, tools_dir):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)

    code_names = {_canonical(s.distribution) for s in sources}
    build_code_wheels(sources, code_dir, log=log, python=python)
    code_wheels = tuple(sorted(p.name for p in code_dir.glob("*.whl")))
    if len(code_wheels) != len(code_names):
        raise WheelhouseError(f"expected one wheel per distribution in {code_dir}, found {', '.join(code_wheels)}")

    constraints_text = host_constraints(exclude=code_names)
    key = _dependency_key(code_dir, code_wheels, constraints_text, python_version)
    cache = (cache_dir or default_cache_dir()) / key
    pinned = True
    if (cache / "complete").is_file():
        log(f"wheelhouse: dependency wheels from the cache ({cache})")
        pinned = (cache / "complete").read_text().strip() == "pinned"
        for wheel in cache.glob("*.whl"):
            shutil.copyfile(wheel, deps_dir / wheel.name)
        for wheel in (cache / "tools").glob("*.whl"):
            shutil.copyfile(wheel, tools_dir / wheel.name)
    else:
        pinned = _resolve_dependencies(
            code_dir, code_wheels, deps_dir, python_version, constraints_text, log=log, python=python
        )
        _add_marker_dependencies(deps_dir, python_version, constraints_text, log=log, python=python)
        for wheel in list(deps_dir.glob("*.whl")):
            if _canonical(wheel.name.split("-")[0]) in code_names:
                wheel.unlink()  # pip copies the requested wheels themselves into the output directory
        non_wheels = sorted(p.name for p in deps_dir.iterdir() if p.suffix != ".whl")
        if non_wheels:
            raise WheelhouseError(f"not wheels in the wheelhouse: {', '.join(non_wheels)}")
        _fetch_installer(tools_dir, python=python, log=log)
        _store_in_cache(deps_dir, tools_dir, cache, pinned)
    deps = tuple(sorted(p.name for p in deps_dir.glob("*.whl")))
    installers = sorted(p.name for p in tools_dir.glob("pip-*.whl"))
    if len(installers) != 1:
        raise WheelhouseError(f"expected one pip wheel in {tools_dir}, found {installers or 'none'}")
    log(f"wheelhouse: {len(code_wheels)} code wheel(s), {len(deps)} dependency wheel(s), {installers[0]}")
    return Wheelhouse(dest, code_wheels, deps, installers[0], pinned)


def _resolve_dependencies(
    code_dir: Path,
    code_wheels: Sequence[str],
    deps_dir: Path,
    python_version: str,
    constraints_text: str,
    *,
    log: Log,
    python: str,
) -> bool:
    """Fetch/build every dependency wheel into ``deps_dir``; True when pinned to the host's versions."""
    with tempfile.TemporaryDirectory(prefix="ngym-constraints-") as tmp:
        constraints = Path(tmp) / "constraints.txt"
        constraints.write_text(constraints_text)
        log(f"wheelhouse: resolving dependencies for Python {python_version} (pinned to the host's versions)")
        try:
            _fetch_dependencies(code_dir, code_wheels, deps_dir, python_version, constraints, log=log, python=python)
            return True
        except WheelhouseError as exc:
            if not _may_be_the_pins(getattr(exc, "pip_output", "")):
                raise
            # A host version may not be on the index: resolve afresh (its error, if any, is the one worth showing).
            log("wheelhouse: the host's versions could not all be used; resolving afresh")
            for stale in deps_dir.glob("*"):
                stale.unlink()
            _fetch_dependencies(code_dir, code_wheels, deps_dir, python_version, None, log=log, python=python)
            return False


def _dependency_key(code_dir: Path, code_wheels: Sequence[str], constraints: str, python_version: str) -> str:
    digest = hashlib.sha256()
    for part in (_WHEELHOUSE_FORMAT, python_version, platform.machine(), constraints):
        digest.update(part.encode() + b"\0")
    for wheel in code_wheels:
        digest.update(wheel.split("-")[0].encode() + b"\0")
        digest.update("\n".join(_requires_dist(code_dir / wheel)).encode() + b"\0")
    return digest.hexdigest()[:24]


#: Part of the dependency cache key: bump it when what a cached wheel set must contain changes
#: (2: dependencies for the target's earliest micro version, see ``_add_marker_dependencies``).
_WHEELHOUSE_FORMAT = "2"


def _marker_environment(python_version: str) -> dict[str, str]:
    """The marker environment of the image's Python at its earliest micro version (``X.Y.0``).

    pip evaluates ``Requires-Dist`` markers with the *host* interpreter, even with ``--python-version``; the
    image's micro version may be older (Debian bookworm's python3 is 3.11.2) and need more, e.g. redis needs
    ``async-timeout; python_full_version < "3.11.3"``.
    """
    return {"python_version": python_version, "python_full_version": f"{python_version}.0", "extra": ""}


def _missing_marker_requirements(deps_dir: Path, python_version: str) -> list[str]:
    """Requirements of the wheels in ``deps_dir`` that apply to ``_marker_environment`` but have no wheel."""
    present = {_canonical(w.name.split("-")[0]) for w in deps_dir.glob("*.whl")}
    environment = _marker_environment(python_version)
    missing: dict[str, str] = {}
    for wheel in sorted(deps_dir.glob("*.whl")):
        for line in _requires_dist(wheel):
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            name = _canonical(req.name)
            if req.marker is None or name in present or name in missing:
                continue
            if req.marker.evaluate(environment):
                extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
                missing[name] = f"{req.name}{extras}{req.specifier}"
    return sorted(missing.values())


def _add_marker_dependencies(
    deps_dir: Path, python_version: str, constraints_text: str, *, log: Log, python: str
) -> None:
    """Add the wheels that only the image's earlier micro versions need (see ``_marker_environment``)."""
    for _ in range(5):  # their own dependencies may need more; a few rounds settle it
        missing = _missing_marker_requirements(deps_dir, python_version)
        if not missing:
            return
        log(f"wheelhouse: adding dependencies of Python {python_version}.0 markers: {', '.join(missing)}")
        with tempfile.TemporaryDirectory(prefix="ngym-constraints-") as tmp:
            constraints = Path(tmp) / "constraints.txt"
            constraints.write_text(constraints_text)
            args = ["--constraint", str(constraints), *missing]
            if python_version == host_python_version():
                cmd = ["wheel", "--wheel-dir", str(deps_dir), *args]
            else:
                cmd = ["download", "--dest", str(deps_dir), *_binary_target_args(python_version), *args]
            env = {**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH}
            try:
                _pip(python, cmd, env=env, what="fetch the dependencies of older micro versions", log=log)
            except WheelhouseError:  # a pin the index lacks: take the newest matching version instead
                _pip(python, [a for a in cmd if a not in args[:2]], env=env, what="fetch dependencies", log=log)


def _binary_target_args(python_version: str) -> list[str]:
    """pip download's options for binary wheels of another CPython on this machine's Linux platform."""
    machine = platform.machine()
    return [
        "--only-binary",
        ":all:",
        "--python-version",
        python_version,
        "--implementation",
        "cp",
        *[arg for tag in linux_platform_tags(machine) for arg in ("--platform", tag)],
    ]


def _requires_dist(wheel: Path) -> list[str]:
    """The ``Requires-Dist`` lines of a wheel's METADATA."""
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1]
        if not names:
            raise WheelhouseError(f"{wheel.name}: no METADATA")
        text = zf.read(names[0]).decode()
    head = text.split("\n\n", 1)[0]
    return sorted(line.partition(":")[2].strip() for line in head.splitlines() if line.startswith("Requires-Dist:"))


def _fetch_installer(tools_dir: Path, *, python: str, log: Log) -> None:
    """The pip wheel that installs the others in the build: the host's pip version, else the index's newest."""
    version = _pip_version(python)
    log(f"wheelhouse: fetching the installer (pip {version or 'latest'})")
    args = ["download", "--no-deps", "--only-binary", ":all:", "--dest", str(tools_dir)]
    try:
        _pip(python, [*args, f"pip=={version}" if version else "pip"], env=os.environ, what="fetch pip's wheel")
    except WheelhouseError:
        if not version:
            raise
        _pip(python, [*args, "pip"], env=os.environ, what="fetch pip's wheel")


def _pip_version(python: str) -> str | None:
    proc = subprocess.run(
        [python, "-c", "import pip; print(pip.__version__)"], capture_output=True, text=True, check=False
    )
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def _store_in_cache(deps_dir: Path, tools_dir: Path, cache: Path, pinned: bool) -> None:
    """Copy the wheels into the cache atomically (a partly written entry is never used)."""
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=cache.parent))
        for wheel in deps_dir.glob("*.whl"):
            shutil.copyfile(wheel, tmp / wheel.name)
        (tmp / "tools").mkdir()
        for wheel in tools_dir.glob("*.whl"):
            shutil.copyfile(wheel, tmp / "tools" / wheel.name)
        (tmp / "complete").write_text("pinned\n" if pinned else "fresh\n")
        if cache.exists():
            shutil.rmtree(cache)
        tmp.rename(cache)
    except OSError:  # a cache that cannot be written only costs time
        pass


def host_constraints(exclude: Set[str] = frozenset()) -> str:
    """``name==version`` for every distribution installed in this interpreter, except ``exclude`` and local ones.

    A distribution installed from a local tree (editable, a directory, an ``*.egg-info`` in a source tree) has no
    index version to pin to, so it is left out.
    """
    pins: dict[str, str] = {}
    local: set[str] = set()
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        key = _canonical(name)
        if dist.read_text("direct_url.json") or distribution_source_dir(dist) is not None:
            local.add(key)
        pins.setdefault(key, f"{name}=={dist.version}")
    keep = sorted(set(pins) - local - {_canonical(n) for n in exclude})
    return "".join(f"{pins[k]}\n" for k in keep)


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _fetch_dependencies(
    code_dir: Path,
    code_wheels: Sequence[str],
    deps_dir: Path,
    python_version: str,
    constraints: Path | None,
    *,
    log: Log,
    python: str,
) -> None:
    args = ["--wheel-dir", str(deps_dir), *[str(code_dir / w) for w in code_wheels]]
    if constraints is not None:
        args[:0] = ["--constraint", str(constraints)]
    if python_version == host_python_version():
        cmd = ["wheel", *args]
    else:  # another Python: only binary wheels can be had without that interpreter
        cmd = [
            "download",
            "--dest",
            str(deps_dir),
            *_binary_target_args(python_version),
            *[a for a in args if a not in ("--wheel-dir", str(deps_dir))],
        ]
    env = {**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH}
    _pip(python, cmd, env=env, what="resolve the dependencies", log=log)


def linux_platform_tags(machine: str, glibc_minor: int = 36) -> list[str]:
    """Every manylinux tag a glibc 2.``glibc_minor`` system accepts (pip's ``--platform`` does not expand them)."""
    tags = [f"manylinux_2_{minor}_{machine}" for minor in range(glibc_minor, 16, -1)]
    legacy = {"manylinux2014": 17, "manylinux2010": 12, "manylinux1": 5}
    tags += [f"{name}_{machine}" for name, minor in legacy.items() if minor <= glibc_minor]
    return [*tags, f"linux_{machine}"]
