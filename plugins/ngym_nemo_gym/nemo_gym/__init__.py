"""NeMo Gym's import package, provided by ngym (distribution ``ngym-nemo-gym``).

Environments written for NVIDIA NeMo Gym 0.7.0 import ``nemo_gym.*``; these modules implement that surface on
ngym, so such an environment runs as an ngym environment. This is not NeMo Gym's code.

Paths. NeMo Gym resolves some files against its repository root (``PARENT_DIR``), the folder that holds
``resources_servers/``. Under ngym that root is, in order: ``NGYM_NEMO_ROOT`` if set; else the folder holding the
importable ``resources_servers`` package (where ``ngym install`` puts NeMo Gym environments); else the current
directory. ``CACHE_DIR`` is ``NEMO_GYM_CACHE_DIR`` or ``~/.cache/nemo_gym``.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

__version__ = "0.7.0"  # the NeMo Gym release whose surface this provides

ROOT_DIR = Path(__file__).absolute().parent
ROOT_ENV = "NGYM_NEMO_ROOT"


def repository_root() -> Path:
    """What NeMo Gym calls ``PARENT_DIR``: the folder that holds ``resources_servers/`` (see the module doc)."""
    configured = os.environ.get(ROOT_ENV)
    if configured:
        return Path(configured).absolute()
    try:
        spec = importlib.util.find_spec("resources_servers")
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]).absolute().parent if locations else Path.cwd()


def cache_dir() -> Path:
    return Path(os.environ.get("NEMO_GYM_CACHE_DIR") or Path.home() / ".cache" / "nemo_gym")


def _resolve_under_cwd_or_install(rel_path: str | Path, *, validator: Any = None) -> Path:
    """An absolute path as is; a relative one under the current directory if it exists there, else the root."""
    path = Path(rel_path)
    if path.is_absolute():
        return path
    for root in (Path.cwd(), repository_root()):
        candidate = root / path
        if candidate.exists() and (validator is None or validator(candidate)):
            return candidate
    return repository_root() / path


def __getattr__(name: str) -> Any:
    # Computed on access: the root depends on sys.path and the environment at the time an environment imports it.
    if name in ("PARENT_DIR", "WORKING_DIR"):
        return repository_root()
    if name == "CACHE_DIR":
        return cache_dir()
    raise AttributeError(f"module 'nemo_gym' has no attribute {name!r}")
