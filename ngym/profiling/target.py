"""What ``ngym profile`` loads: a URL it is given, or an environment it starts itself and stops afterwards.

Given an environment (an installed name, a config file or a folder: see ``ngym.targets``), it is served by
``ngym run`` in a child process on 127.0.0.1 and a free port (``ngym.child_server.serve_environment``); the load
test starts once ``GET /health`` answers, and the child is stopped (SIGTERM, then SIGKILL) when the test ends,
however it ends.
Given a URL, that server is the target.
The profile data (dataset rows or example rollouts) comes from ``--data`` or from the environment's folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ngym.child_server import fetch_health
from ngym.errors import ConfigError, EnvironmentNotFound
from ngym.profiling.scenario import data_file_in
from ngym.targets import installed, resolve


@dataclass
class ProfileTarget:
    """Where the load goes and what it replays."""

    url: str
    name: str | None
    data: Path


def _installed_folder(name: str) -> Path | None:
    try:
        return installed(name).folder
    except EnvironmentNotFound:
        return None


def environment_identity(target: str) -> tuple[str | None, Path | None]:
    """The environment's name (for the scenario hook) and folder (for default data) of a target."""
    environment = resolve(target)  # EnvironmentNotFound (exit 2) names the installed ones
    return environment.name, environment.folder


def default_data(name: str | None, folder: Path | None, shown: str) -> Path:
    """``data/example_rollouts.jsonl`` (else ``data/example.jsonl``) of the environment's folder."""
    for candidate_folder in (folder, _installed_folder(name) if name else None):
        if candidate_folder is not None:
            found = data_file_in(candidate_folder)
            if found is not None:
                return found
    raise ConfigError(
        f"no profile data for {shown}: its folder has no data/example_rollouts.jsonl or data/example.jsonl; "
        "give --data rows.jsonl"
    )


def resolve_target(target: str, data: Path | None) -> tuple[str | None, Path]:
    """The environment name and the data file for an installed name or a config file (no server needed)."""
    name, folder = environment_identity(target)
    return name, data if data is not None else default_data(name, folder, target)


def resolve_url_target(url: str, data: Path | None) -> ProfileTarget:
    """A running server: its name comes from ``/health`` (for the scenario hook and the default data)."""
    health = fetch_health(url, timeout=5.0)
    if health is None:
        raise ConfigError(f"{url} does not answer GET /health: is the server running?")
    name = health.get("name") if isinstance(health.get("name"), str) else None
    if data is None:
        data = default_data(name, None, f"{url} (environment {name or 'unknown'})")
    return ProfileTarget(url=url.rstrip("/"), name=name, data=data)
