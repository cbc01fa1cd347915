"""The code layer's wheels (ngym's and the plugin's), built from their source trees on the host.

Editable and directory installs are built from a copy of their tree (a build backend writes ``build/`` and
``*.egg-info`` into the tree it builds), with a fixed ``SOURCE_DATE_EPOCH`` so an unchanged tree gives a
byte-identical wheel and Docker reuses the code layer; a distribution with no local tree is fetched.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

from ngym.containerize.errors import WheelhouseError
from ngym.containerize.pip import SOURCE_DATE_EPOCH, Log, _pip, _pip_error, default_cache_dir, host_python_version
from ngym.containerize.spec import DistributionSource

#: Not copied when a source tree is snapshotted for a wheel build.
_IGNORED = shutil.ignore_patterns(
    ".git",
    ".venv",
    "venv",
    "__pycache__",
    "*.pyc",
    "build",
    "dist",
    "*.egg-info",
    ".pytest_cache",
    ".ruff_cache",
    "wheelhouse",
    "node_modules",
    ".mypy_cache",
)


def build_code_wheels(sources: Sequence[DistributionSource], out: Path, *, log: Log, python: str) -> None:
    """One wheel per source: built from its source tree (one pip run for all), else fetched from the index."""
    env = {**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH, "PYTHONDONTWRITEBYTECODE": "1"}
    fetched: set[str] = set()
    for source in sources:
        if source.source_dir is None:
            log(f"wheelhouse: fetching {source.distribution}=={source.version}")
            spec = f"{source.distribution}=={source.version}"
            _pip(python, ["wheel", "--no-deps", "--wheel-dir", str(out), spec], env=env, what=f"fetch {spec}")
            fetched = {p.name for p in out.glob("*.whl")}
    local = [s for s in sources if s.source_dir is not None]
    if not local:
        return
    # Build from snapshots: a build backend writes build/ and *.egg-info into the tree it builds.
    with tempfile.TemporaryDirectory(prefix="ngym-src-") as tmp:
        snapshots = []
        for i, source in enumerate(local):
            assert source.source_dir is not None
            log(f"wheelhouse: building {source.distribution} {source.version} from {source.source_dir}")
            copy = Path(tmp) / str(i) / source.source_dir.name
            shutil.copytree(source.source_dir, copy, ignore=_IGNORED, symlinks=True)
            snapshots.append(str(copy))
        names = ", ".join(s.distribution for s in local)
        args = ["wheel", "--no-deps", "--wheel-dir", str(out), *snapshots]
        build_python = _build_env([Path(snap) for snap in snapshots], python=python, log=log)
        if build_python is not None:
            try:
                for snapshot in snapshots:
                    _build_with_backend(build_python, Path(snapshot), out, env=env)
                return
            except WheelhouseError:
                log("wheelhouse: the cached build environment did not work; building in isolation")
                for partial in out.glob("*.whl"):
                    if partial.name not in fetched:
                        partial.unlink()
        _pip(python, args, env=env, what=f"build {names}")


#: PEP 517 ``build_wheel`` called directly in the cached build environment (what pip does, minus pip's start-up).
_BUILD_WHEEL = """
import importlib, os, sys, tomllib
src, out = sys.argv[1], sys.argv[2]
with open(os.path.join(src, "pyproject.toml"), "rb") as f:
    system = tomllib.load(f).get("build-system", {})
for entry in reversed(system.get("backend-path", [])):
    sys.path.insert(0, os.path.join(src, entry))
sys.path.insert(0, src)
os.chdir(src)
module, _, attrs = system.get("build-backend", "setuptools.build_meta:__legacy__").partition(":")
backend = importlib.import_module(module)
for attr in filter(None, attrs.split(".")):
    backend = getattr(backend, attr)
print(backend.build_wheel(out))
"""


def _build_with_backend(build_python: Path, source: Path, out: Path, *, env: Mapping[str, str]) -> None:
    if not (source / "pyproject.toml").is_file():
        raise WheelhouseError(f"{source}: no pyproject.toml")
    proc = subprocess.run(
        [str(build_python), "-c", _BUILD_WHEEL, str(source), str(out)],
        capture_output=True,
        text=True,
        env=dict(env),
        check=False,
    )
    built = proc.stdout.strip().splitlines()[-1:] if proc.returncode == 0 else []
    if not built or not (out / built[0]).is_file():
        raise WheelhouseError(f"could not build {source.name}:\n{_pip_error(proc.stdout, proc.stderr)}")


def build_requires(source_dir: Path) -> list[str]:
    """``[build-system] requires`` of a source tree (PEP 518's default when there is none)."""
    try:
        data = tomllib.loads((source_dir / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        data = {}
    return list(data.get("build-system", {}).get("requires", ["setuptools>=40.8.0", "wheel"]))


def _build_env(source_dirs: Sequence[Path], *, python: str, log: Log) -> Path | None:
    """A cached virtualenv holding the union of the sources' build requirements; its python, or None.

    Building in it (``--no-build-isolation``) saves fetching the build backend from the index on every run,
    which is most of a code-only rebuild's time. Any trouble returns None: pip's own isolation is the fallback.
    """
    requires = sorted({req for d in source_dirs for req in build_requires(d)})
    digest = hashlib.sha256("\n".join([python, host_python_version(), *requires]).encode()).hexdigest()[:16]
    env_dir = default_cache_dir().parent / "build-env" / digest
    env_python = env_dir / "bin" / "python"
    if (env_dir / "complete").is_file() and env_python.exists():
        return env_python
    try:
        env_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(env_dir.parent / f"{digest}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # two builds at once: the second waits and reuses the first's env
            if (env_dir / "complete").is_file() and env_python.exists():
                return env_python
            log(f"wheelhouse: preparing a cached build environment ({', '.join(requires)})")
            if env_dir.exists():
                shutil.rmtree(env_dir)
            subprocess.run([python, "-m", "venv", "--without-pip", str(env_dir)], check=True, capture_output=True)
            _pip(python, ["--python", str(env_python), "install", *requires], env=os.environ, what="install tools")
            (env_dir / "complete").write_text("\n".join(requires) + "\n")
    except (OSError, subprocess.CalledProcessError, WheelhouseError):
        return None
    return env_python
