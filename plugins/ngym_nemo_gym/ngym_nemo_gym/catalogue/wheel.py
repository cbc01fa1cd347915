"""The nemo-gym distribution as a source of environments: its wheel, cached, read without installing it.

NeMo Gym ships its environments inside its wheel (``resources_servers/<name>/...``), so the wheel is the
catalogue: listing reads the zip's directory and the environments' config YAML; installing one extracts
its folder. The wheel is fetched once with ``pip download --no-deps`` (it needs no Python version match,
nothing of it is installed) into ``~/.cache/ngym/nemo-wheel/`` (``NGYM_NEMO_WHEEL_DIR`` moves it).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from ngym import NgymError
from ngym.plugin_api import cache_root, did_you_mean

NEMO_GYM_VERSION = "0.7.0"
WHEEL_DIR_ENV = "NGYM_NEMO_WHEEL_DIR"
PREFIX = "resources_servers/"


class NemoGymSourceError(NgymError):
    """The nemo-gym wheel cannot be fetched or does not hold the requested environment."""


def wheel_dir() -> Path:
    return Path(os.environ.get(WHEEL_DIR_ENV) or cache_root() / "nemo-wheel")


def nemo_gym_wheel(version: str = NEMO_GYM_VERSION, *, download: bool = True) -> Path:
    """The cached ``nemo_gym-<version>-py3-none-any.whl``, downloaded with pip when absent."""
    folder = wheel_dir()
    found = sorted(folder.glob(f"nemo_gym-{version}-*.whl"))
    if found:
        return found[0]
    if not download:
        raise NemoGymSourceError(f"nemo-gym {version} wheel not in {folder}")
    folder.mkdir(parents=True, exist_ok=True)
    args = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--ignore-requires-python",
        "--only-binary",
        ":all:",
        "--dest",
        str(folder),
        f"nemo-gym=={version}",
    ]
    result = subprocess.run(args, capture_output=True, text=True)
    found = sorted(folder.glob(f"nemo_gym-{version}-*.whl"))
    if result.returncode or not found:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no wheel downloaded"]
        raise NemoGymSourceError(f"cannot download nemo-gym=={version} into {folder}: {tail[0]}")
    return found[0]


@dataclass(frozen=True)
class AvailableEnvironment:
    """One environment the nemo-gym wheel ships, as ``ngym list --available nemo-gym`` shows it."""

    name: str
    domain: str | None
    description: str
    config: str | None  # the config file the domain was read from (relative to the environment)
    has_tests: bool
    has_example_rollouts: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def environment_names(zf: zipfile.ZipFile) -> list[str]:
    names = {PurePosixPath(n).parts[1] for n in zf.namelist() if n.startswith(PREFIX) and n.count("/") >= 2}
    return sorted(names)


def available_environments(wheel: Path | None = None) -> list[AvailableEnvironment]:
    """Every environment in the wheel with its domain (from its config YAML), sorted by name."""
    with zipfile.ZipFile(wheel or nemo_gym_wheel()) as zf:
        files = set(zf.namelist())
        rows = []
        for name in environment_names(zf):
            base = f"{PREFIX}{name}/"
            configs = sorted(f[len(base) :] for f in files if f.startswith(base + "configs/") and f.endswith(".yaml"))
            domain, description, config = _first_domain(name, configs, lambda rel, base=base: zf.read(base + rel))
            rows.append(
                AvailableEnvironment(
                    name=name,
                    domain=domain,
                    description=description,
                    config=config,
                    has_tests=any(f.startswith(base + "tests/") and f.endswith(".py") for f in files),
                    has_example_rollouts=base + "data/example_rollouts.jsonl" in files,
                )
            )
    return rows


def _first_domain(name: str, configs: list[str], read: Any) -> tuple[str | None, str, str | None]:
    """Domain and description of the first resources-server instance, preferring ``configs/<name>.yaml``."""
    ordered = sorted(configs, key=lambda rel: rel != f"configs/{name}.yaml")
    for rel in ordered:
        fields = resources_server_fields(read(rel))
        if fields is not None:
            return fields.get("domain"), str(fields.get("description") or ""), rel
    return None, "", None


def resources_server_fields(text: bytes | str) -> dict[str, Any] | None:
    """The fields of the first ``<instance>: resources_servers: <impl>: {...}`` in a NeMo config text."""
    try:
        tree = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(tree, dict):
        return None
    for value in tree.values():
        servers = value.get("resources_servers") if isinstance(value, dict) else None
        if isinstance(servers, dict):
            for impl in servers.values():
                if isinstance(impl, dict):
                    return impl
    return None


#: An environment's files name the companion folders they read or import from NeMo Gym's root this way:
#: ``benchmarks/<x>`` (judge configs, prompts, reference data; ``benchmarks.<x>`` when imported),
#: ``responses_api_agents.<x>`` (an agent's module a simulator-style environment imports),
#: ``responses_api_models.<x>`` (a model server's config class its tests build) and
#: ``environment_servers.<x>`` / ``environments.<x>`` (an episode server or preparation module its tests import);
#: or a path joined from NeMo's root with pathlib (``root / "responses_api_agents" / "swe_agents"``: swe_rebench's
#: Maven mirror).
COMPANION_REFERENCE = re.compile(
    r"\b(benchmarks(?=[./])|responses_api_agents(?=\.)|responses_api_models(?=[./])|environment_servers(?=\.)"
    r"|environments(?=\.))[./]([A-Za-z_][A-Za-z0-9_]*)"
    r"|\b(benchmarks|responses_api_agents|responses_api_models|environment_servers|environments)"
    r"[\"']\s*/\s*[\"']([A-Za-z_][A-Za-z0-9_]*)[\"']"
)


def referenced_companions(folder: Path) -> set[str]:
    """Companion folders the environment's code or configs mention, as ``"benchmarks/<x>"``,
    ``"responses_api_agents/<x>"``, ``"responses_api_models/<x>"``, ``"environment_servers/<x>"`` or
    ``"environments/<x>"``."""
    found: set[str] = set()
    for path in folder.rglob("*"):
        if path.suffix in (".py", ".yaml", ".yml") and "__pycache__" not in path.parts:
            text = path.read_text(errors="replace")
            for match in COMPANION_REFERENCE.finditer(text):
                top, name = match.group(1, 2) if match.group(1) else match.group(3, 4)
                found.add(f"{top}/{name}")
    return found


def companion_closure(folder: Path, root: Path) -> list[str]:
    """The companions ``folder`` references, and those they reference in turn (a benchmark's config naming
    another's prompt), that exist under ``root``."""
    found: set[str] = set()
    pending = [folder]
    while pending:
        for ref in referenced_companions(pending.pop()) - found:
            if (root / ref).is_dir():
                found.add(ref)
                pending.append(root / ref)
    return sorted(found)


def extract_environment(name: str, dest: Path, wheel: Path | None = None) -> Path:
    """Copy ``resources_servers/<name>/`` out of the wheel into ``dest``, keeping the wheel's layout, with the
    ``benchmarks/<x>/`` folders it references (those the wheel has); the environment's folder."""
    wheel = wheel or nemo_gym_wheel()
    with zipfile.ZipFile(wheel) as zf:
        base = f"{PREFIX}{name}/"
        names = zf.namelist()
        members = [m for m in names if m.startswith(base) and not m.endswith("/")]
        if not members:
            known = environment_names(zf)
            raise NemoGymSourceError(
                f"nemo-gym {NEMO_GYM_VERSION} has no environment {name!r}{did_you_mean(name, known)} "
                f"({len(known)} available: ngym list --available nemo-gym)"
            )
        _extract(zf, members, dest)
        pending: list[Path] = [dest / PREFIX / name]
        done: set[str] = set()
        while pending:  # a companion may reference another (a benchmark config naming another's prompt)
            refs = tuple(f"{ref}/" for ref in referenced_companions(pending.pop()) - done)
            done.update(ref.rstrip("/") for ref in refs)
            new = [m for m in names if m.startswith(refs) and not m.endswith("/")]
            _extract(zf, new, dest)
            pending.extend(dest / ref for ref in refs if (dest / ref).is_dir())
    return dest / PREFIX / name


def _extract(zf: zipfile.ZipFile, members: list[str], dest: Path) -> None:
    for member in members:
        target = dest / member
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(zf.read(member))
