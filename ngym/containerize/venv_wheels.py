"""The wheelhouse of an environment's own virtualenv (``EnvironmentVenv``), built on the host for its image.

The image re-creates the venv exactly: every distribution installed in it, at its installed version, with
``--no-deps`` (the venv's set is already complete and consistent; resolving again could pick other versions).

- a distribution from the package index: its wheel, ``name==version`` (built with ``pip wheel`` when the image's
  Python is the host's, else a binary wheel downloaded for that version), cached like the main wheelhouse's
  dependencies (``ngym.containerize.wheelhouse``) under a key of the pins and the image's Python;
- one installed from a local folder (``pip install FOLDER``; PEP 610 ``dir_info``): a wheel built from that
  folder, every time (it is code, not a dependency: its own layer in the image, from ``root/code``); a folder
  that is gone cannot be packaged and is named in the result's notes (the image then lacks it, and ``--run``
  fails loudly if the environment needed it);
- one installed from an archive or VCS URL: ``name @ URL``, fetched again.

pip itself is left out: the image installs with pip run from its wheel, and the venv never needs it at run time.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ngym.containerize.errors import WheelhouseError
from ngym.containerize.payload import EnvironmentVenv
from ngym.containerize.pip import SOURCE_DATE_EPOCH, Log, _pip, default_cache_dir, host_python_version
from ngym.containerize.source_wheels import build_code_wheels
from ngym.containerize.spec import DistributionSource, source_dir_from_direct_url
from ngym.containerize.wheelhouse import _add_marker_dependencies, _binary_target_args, _canonical

#: Part of the cache key: bump it when what a cached set must contain changes.
_FORMAT = "venv-1"
#: Installed in every venv by ``python -m venv`` but not needed in the image's (see the module docstring).
_LEFT_OUT = {"pip"}

_LIST_SCRIPT = """
import json, sysconfig
from importlib import metadata
paths = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
found = []
for dist in metadata.distributions(path=paths):
    name = dist.metadata["Name"]
    if name:
        found.append({"name": name, "version": dist.version, "direct_url": dist.read_text("direct_url.json")})
print(json.dumps(found))
"""


@dataclass(frozen=True)
class VenvWheels:
    """The wheels of one environment venv: index ones in ``root``, ones built from local folders in ``root/code``;
    and what could not be packaged."""

    key: str
    root: Path
    wheels: tuple[str, ...]
    code_wheels: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())


def installed_distributions(python: Path) -> list[dict[str, Any]]:
    """``name``, ``version`` and ``direct_url`` (PEP 610 JSON text or None) of each distribution in the venv."""
    if not python.exists():
        raise WheelhouseError(f"the environment's interpreter {python} is missing: reinstall the environment")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run([str(python), "-s", "-c", _LIST_SCRIPT], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise WheelhouseError(f"could not list what {python} has installed:\n  {proc.stderr.strip()[-1000:]}")
    listed: list[dict[str, Any]] = json.loads(proc.stdout)
    unique: dict[str, dict[str, Any]] = {}
    for dist in listed:
        unique.setdefault(_canonical(dist["name"]), dist)  # the first on the path wins, as at import
    return sorted(unique.values(), key=lambda d: _canonical(d["name"]))


def build_venv_wheelhouse(
    venv: EnvironmentVenv,
    dest: Path,
    *,
    python_version: str | None = None,
    log: Log = lambda line: None,
    cache_dir: Path | None = None,
) -> VenvWheels:
    """Every wheel the image needs to re-create ``venv`` (see the module docstring), in ``dest``."""
    python_version = python_version or host_python_version()
    dest = Path(dest)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    pins: list[str] = []
    locals_: list[DistributionSource] = []
    notes: list[str] = []
    for dist in installed_distributions(venv.python):
        name, version = dist["name"], dist["version"]
        if _canonical(name) in _LEFT_OUT:
            continue
        direct = json.loads(dist["direct_url"]) if dist["direct_url"] else None
        if direct is None:
            pins.append(f"{name}=={version}")
        elif "dir_info" in direct:
            source = source_dir_from_direct_url(direct)
            if source is None:
                gone = f"{name} {version} not packaged: it was installed from {direct.get('url')}, which is gone"
                if _canonical(name) in {_canonical(r) for r in venv.required}:
                    raise WheelhouseError(f"{gone}; the environment needs it: install the environment again")
                notes.append(gone)
                continue
            locals_.append(DistributionSource(name, version, source))
        else:
            pins.append(f"{name} @ {direct['url']}")
    log(f"wheelhouse: environment venv {venv.key}: {len(pins)} distribution(s), {len(locals_)} from local folders")
    if pins:
        _cached_pins(pins, dest, python_version, log=log, cache_dir=cache_dir)
    (dest / "code").mkdir()
    if locals_:
        build_code_wheels(locals_, dest / "code", log=log, python=sys.executable)
    for note in notes:
        log(f"wheelhouse: {note}")
    wheels = tuple(sorted(p.name for p in dest.glob("*.whl")))
    code_wheels = tuple(sorted(p.name for p in (dest / "code").glob("*.whl")))
    non_wheels = sorted(p.name for p in dest.iterdir() if p.suffix != ".whl" and p.name != "code")
    if non_wheels or len(code_wheels) != len(locals_):
        raise WheelhouseError(f"not the expected wheels in the environment's wheelhouse {dest}")
    return VenvWheels(venv.key, dest, wheels, code_wheels, tuple(notes))


def _cached_pins(pins: list[str], dest: Path, python_version: str, *, log: Log, cache_dir: Path | None) -> None:
    """The pinned wheels into ``dest``, from the cache when this exact set was fetched before."""
    text = "".join(f"{pin}\n" for pin in sorted(pins, key=str.lower))
    digest = hashlib.sha256("\0".join([_FORMAT, python_version, platform.machine(), text]).encode())
    cache = (cache_dir or default_cache_dir()) / f"venv-{digest.hexdigest()[:24]}"
    if (cache / "complete").is_file():
        log(f"wheelhouse: environment venv wheels from the cache ({cache})")
        for wheel in cache.glob("*.whl"):
            shutil.copyfile(wheel, dest / wheel.name)
        return
    with tempfile.TemporaryDirectory(prefix="ngym-venv-pins-") as tmp:
        requirements = Path(tmp) / "requirements.txt"
        requirements.write_text(text)
        env = {**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH}
        if python_version == host_python_version():
            cmd = ["wheel", "--no-deps", "--wheel-dir", str(dest), "--requirement", str(requirements)]
        else:
            cmd = ["download", "--no-deps", "--dest", str(dest), *_binary_target_args(python_version)]
            cmd += ["--requirement", str(requirements)]
        log(f"wheelhouse: fetching the environment venv's {len(pins)} wheels (pinned to its installed versions)")
        _pip(sys.executable, cmd, env=env, what="fetch the environment venv's wheels", log=log)
        constraints = "".join(f"{pin}\n" for pin in pins if " @ " not in pin)  # pip takes no URL as a constraint
        _add_marker_dependencies(dest, python_version, constraints, log=log, python=sys.executable)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".tmp-", dir=cache.parent))
        for wheel in dest.glob("*.whl"):
            shutil.copyfile(wheel, staging / wheel.name)
        (staging / "complete").write_text("pinned\n")
        if cache.exists():
            shutil.rmtree(cache)
        staging.rename(cache)
    except OSError:  # a cache that cannot be written only costs time
        pass
