"""The commands that start each server of a fleet, as plain argv lists (pure: tested without starting anything)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ngym.fleet.spec import EnvironmentSpec, FleetSpec, ServerSpec
from ngym.redact import holds_secret, secret_overrides_env


def environment_target(spec: FleetSpec, env: EnvironmentSpec, name: str = "") -> str:
    """What ``ngym run`` is given: the installed name or the path. A ``nemo-gym:X`` environment is installed in
    its venv as X, or as the fleet's ``name`` for it when that differs (``ngym install ... --as name``)."""
    folder = env.folder(spec.base_dir)
    if folder is not None:
        return str(folder)
    return name if env.is_nemo and name else env.env.removeprefix("nemo-gym:")


def environment_command(
    spec: FleetSpec, env: EnvironmentSpec, host: str, port: int, python: str | None = None, name: str = ""
) -> list[str]:
    """``python -P -m ngym.cli run TARGET --host H --port P [--workers N] [k=v ...]``: one unit, one URL."""
    return [python or sys.executable, *environment_args(spec, env, name), "--host", host, "--port", str(port)]


def environment_args(spec: FleetSpec, env: EnvironmentSpec, name: str = "") -> list[str]:
    """The interpreter's arguments of an environment's unit, without where it listens (``--host``/``--port``); ``-P``:
    nothing imported from the folder it starts in (``ngym.child_python``)."""
    args = ["-P", "-m", "ngym.cli", "run", environment_target(spec, env, name)]
    if env.workers > 1:
        args += ["--workers", str(env.workers)]
    return args + [f"{key}={text}" for key, text in _overrides(env) if not holds_secret(key, text)]


def environment_env(env: EnvironmentSpec) -> dict[str, str]:
    """What an environment's unit gets in its environment besides ours: its secret overrides (``session_secret``,
    ``api_key``...), which a command line would show to every local user."""
    return secret_overrides_env([f"{key}={text}" for key, text in _overrides(env) if holds_secret(key, text)])


def _overrides(env: EnvironmentSpec) -> list[tuple[str, str]]:
    return [(key, _override_value(value)) for key, value in env.config.items()]


def _override_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, dict)):
        import json

        return json.dumps(value)
    return str(value)


def server_command(server: ServerSpec, host: str, port: int, base: Path) -> tuple[list[str], Path]:
    """How to start a server entry: its ``command`` (``{host}``/``{port}`` filled in) in the fleet file's folder,
    or as NeMo Gym's ``gym env start`` does, ``python <entrypoint>`` in the entry's folder."""
    launch = server.launch
    assert launch is not None
    if launch.command is not None:
        return [part.replace("{host}", host).replace("{port}", str(port)) for part in launch.command], base
    assert launch.python is not None and launch.dir is not None
    entrypoint = str(server.config.get("entrypoint", "app.py"))
    return [launch.python, entrypoint], Path(launch.dir)


def server_env(global_config_yaml: str, name: str) -> dict[str, str]:
    """NeMo Gym's child-server environment: the whole config and the server's own name."""
    return {**os.environ, "NEMO_GYM_CONFIG_DICT": global_config_yaml, "NEMO_GYM_CONFIG_PATH": name}
