"""The fleet file: which environments and servers to bring up, and how.

.. code-block:: yaml

    name: demo                      # optional, default: the file's stem
    host: 127.0.0.1                 # where every server listens (default 127.0.0.1)
    head_server: {port: 11000}      # NeMo Gym's head server (the global config); 0 = any free port
    engine: local                   # local | compose | ray | kubernetes (writes manifests) | a plugin's engine
    ray: {address: 10.0.0.1:6379}   # the ray engine's cluster (default: RAY_ADDRESS, else auto); servers_address:
                                    # the Ray that `servers:` (NeMo Gym's) join, when not this one (another Python)
    environments:                   # name in the global config -> what to serve
      weather: example_single_tool_call          # an installed environment, by name
      counter:
        env: example_session_state_mgmt
        workers: 2                               # one `ngym run --workers 2` unit, one URL
        config: {session_ttl_seconds: 600}       # field overrides (`ngym run`'s key=value)
      mine:
        env: ./my_env                            # a folder (or its configs/x.yaml)
        requirements: [sympy==1.12]              # its own virtualenv, cached by these lines
      mcqa: nemo-gym:mcqa                        # one of NeMo Gym's environments (own virtualenv)
    servers:                        # other NeMo Gym servers (agents, models), in NeMo Gym's YAML shape
      weather_agent:
        responses_api_agents:
          simple_agent:
            entrypoint: app.py
            resources_server: {type: resources_servers, name: weather}
            model_server: {type: responses_api_models, name: policy_model}
        launch: {python: /path/to/nemo-venv/bin/python, dir: /path/to/responses_api_agents/simple_agent}
      policy_model:
        responses_api_models: {replay: {}}
        launch: {command: [ngym, replay-model, --env, example_single_tool_call, --host, "{host}", --port, "{port}"]}
      judge_model:                  # no `launch`: a server that runs elsewhere, named with its address
        responses_api_models: {vllm_model: {host: 10.0.0.5, port: 8000}}

A server entry with ``launch`` is started as NeMo Gym starts its servers: ``python <entrypoint>`` in ``dir``
with the global config in ``NEMO_GYM_CONFIG_DICT`` and its own name in ``NEMO_GYM_CONFIG_PATH``; the fleet
gives it a free port unless its config names one.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ngym.config_tree import SERVER_TYPES  # NeMo Gym's server types: the second level of a server entry
from ngym.errors import ConfigError
from ngym.suggest import did_you_mean

NEMO_PREFIX = "nemo-gym:"
#: sources of ``ngym install`` a fleet entry does not take: the entry names the installed environment instead
_INSTALL_FIRST = ("openenv", "verifiers")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


class EnvironmentSpec(BaseModel):
    """One environment of the fleet: one ``ngym run`` unit behind one URL."""

    model_config = ConfigDict(extra="forbid")

    env: str = Field(description="installed name, `nemo-gym:NAME`, or a folder / config file")
    workers: int = Field(default=1, ge=1, le=256)
    replicas: int = Field(default=1, ge=1, le=256, description="copies behind the engine's router (compose, ray)")
    port: int | None = Field(default=None, ge=0, le=65535)
    requirements: list[str] = Field(default_factory=list, description="pip requirement lines: its own venv")
    config: dict[str, Any] = Field(default_factory=dict, description="field overrides, as `ngym run k=v`")

    @field_validator("env")
    @classmethod
    def _installed_first(cls, value: str) -> str:
        source = value.split(":", 1)[0]
        if source in _INSTALL_FIRST:
            raise ValueError(
                f"{value!r}: {source} environments are installed once, not by the fleet (they ask for a domain and"
                f" record example data): run `ngym install {value}`, then name it here by its installed name (the"
                " compose engine images it with its own virtualenv)"
            )
        return value

    @property
    def is_nemo(self) -> bool:
        return self.env.startswith(NEMO_PREFIX)

    def folder(self, base: Path) -> Path | None:
        """The environment's folder or config file when ``env`` is a path (relative to the fleet file)."""
        if self.is_nemo or not any(c in self.env for c in "/\\.") and not (base / self.env).exists():
            return None
        path = Path(self.env).expanduser()
        return path if path.is_absolute() else (base / path).resolve()

    def nemo_install(self, name: str) -> str:
        """The ``ngym install`` argument of a NeMo Gym environment named ``name`` in the fleet: ``nemo-gym:X``,
        with ``--as name`` when the fleet names it otherwise (so it may sit beside a built-in called X)."""
        nemo = self.env.removeprefix(NEMO_PREFIX)
        return self.env if nemo == name else f"{self.env} --as {name}"

    def isolation_key(self, base: Path, name: str = "") -> list[str]:
        """What its own virtualenv must hold (empty: it runs in ngym's own interpreter)."""
        lines = list(self.requirements)
        if self.is_nemo:
            lines.append(self.nemo_install(name or self.env.removeprefix(NEMO_PREFIX)))
        folder = self.folder(base)
        req = (folder if folder is not None and folder.is_dir() else Path("/nonexistent")) / "requirements.txt"
        if req.is_file():
            lines += [ln.strip() for ln in req.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        return lines


class LaunchSpec(BaseModel):
    """How to start a server entry: NeMo Gym's way (``python`` runs the entrypoint in ``dir``), or a ``command``
    whose ``{host}`` and ``{port}`` are filled in (e.g. ``ngym replay-model --host {host} --port {port}``)."""

    model_config = ConfigDict(extra="forbid")

    python: str | None = None
    dir: str | None = None
    command: list[str] | None = None

    @model_validator(mode="after")
    def _one_way(self) -> LaunchSpec:
        if (self.command is None) == (self.python is None):
            raise ValueError("launch takes either `python` (with `dir`) or `command`")
        if self.python is not None and self.dir is None:
            raise ValueError("launch: `python` needs `dir`, the folder of the entrypoint")
        return self


class ServerSpec(BaseModel):
    """A NeMo Gym server entry (agent, model, environment server): its NeMo config and, optionally, how to start it."""

    model_config = ConfigDict(extra="forbid")

    server_type: str
    implementation: str
    config: dict[str, Any]
    launch: LaunchSpec | None = None

    def nemo_entry(self) -> dict[str, Any]:
        return {self.server_type: {self.implementation: dict(self.config)}}


class FleetSpec(BaseModel):
    """A whole fleet file, validated."""

    model_config = ConfigDict(extra="forbid")

    name: str
    host: str = "127.0.0.1"
    head_server: dict[str, Any] = Field(default_factory=lambda: {"port": 11000})
    #: a registered fleet engine (``ngym.fleet.engines``: ngym's four and every plugin's)
    engine: str = "local"
    #: the ray engine's settings: ``address`` of the cluster (default ``RAY_ADDRESS``, else ``auto``);
    #: ``servers_address``: the Ray cluster NeMo Gym's ``servers:`` entries join (``ray_head_node_address`` in the
    #: global config; default the fleet's own), for servers of another Python or Ray version than the cluster's
    ray: dict[str, Any] = Field(default_factory=dict)
    #: the kubernetes engine's settings: ``namespace``, ``images: {NAME: image}`` (default ngym-<env>:latest)
    kubernetes: dict[str, Any] = Field(default_factory=dict)
    environments: dict[str, EnvironmentSpec] = Field(default_factory=dict)
    servers: dict[str, ServerSpec] = Field(default_factory=dict)
    #: the fleet file's folder: relative paths in it are relative to this
    base_dir: Path = Path(".")

    @field_validator("engine")
    @classmethod
    def _registered_engine(cls, value: str) -> str:
        from ngym.fleet.engines import registered, unknown_engine

        known = registered().names()
        if value not in known:
            raise ValueError(unknown_engine(value, known))
        return value

    @field_validator("environments", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: {"env": v} if isinstance(v, str) else v for k, v in value.items()}
        return value

    @field_validator("servers", mode="before")
    @classmethod
    def _nemo_shape(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        out = {}
        for name, entry in value.items():
            if not isinstance(entry, dict):
                raise ValueError(
                    f"server {name!r}: expected NeMo Gym's shape {{server_type: {{implementation: {{...}}}}}}"
                )
            entry = dict(entry)
            launch = entry.pop("launch", None)
            types = [k for k in entry if k in SERVER_TYPES]
            if len(entry) != 1 or not types or not isinstance(entry[types[0]], dict) or len(entry[types[0]]) != 1:
                raise ValueError(
                    f"server {name!r}: expected one of {', '.join(SERVER_TYPES)} holding one implementation "
                    f"(NeMo Gym's shape), got keys {sorted(entry)}"
                )
            ((impl, config),) = entry[types[0]].items()
            out[name] = {"server_type": types[0], "implementation": impl, "config": config or {}, "launch": launch}
        return out

    @model_validator(mode="after")
    def _names(self) -> FleetSpec:
        for name in [*self.environments, *self.servers]:
            if not _NAME.match(name):
                raise ValueError(f"{name!r} is not a server name (letters, digits, _ . -; not starting with a digit)")
        both = set(self.environments) & set(self.servers)
        if both:
            raise ValueError(f"{', '.join(sorted(both))}: named both under environments and servers")
        if not self.environments and not self.servers:
            raise ValueError("the fleet has no environments and no servers")
        return self

    @model_validator(mode="after")
    def _legacy_agent_servers(self) -> FleetSpec:
        """NeMo Gym's collector runs each agent through an environment server that names it; an agent started
        from NeMo Gym's install (``launch: {python, dir: .../responses_api_agents/AGENT}``) that none names gets
        NeMo Gym's own ``legacy_agent`` one, started from the same install, as ``<agent>_env``."""
        named = {
            str((s.config.get("agent_server") or {}).get("name"))
            for s in self.servers.values()
            if s.server_type == "environment_servers" and isinstance(s.config.get("agent_server"), dict)
        }
        for name, server in list(self.servers.items()):
            launch = server.launch
            if server.server_type != "responses_api_agents" or name in named or launch is None or not launch.dir:
                continue
            legacy = Path(launch.dir).parent.parent / "environment_servers" / "legacy_agent"
            if f"{name}_env" in self.servers or f"{name}_env" in self.environments or not legacy.is_dir():
                continue
            self.servers[f"{name}_env"] = ServerSpec(
                server_type="environment_servers",
                implementation="legacy_agent",
                config={
                    "entrypoint": "app.py",
                    "agent_server": {"type": "responses_api_agents", "name": name},
                    "max_concurrent_episodes": None,
                    "queue_timeout_seconds": None,
                    "default_episode_timeout_seconds": 600,
                    "cleanup_timeout_seconds": 60,
                },
                launch=LaunchSpec(python=launch.python, dir=str(legacy)),
            )
        return self

    def state_dir(self) -> Path:
        """Where ``up`` writes its state (pids, ports, logs, the global config) for ``status`` and ``down``."""
        return self.base_dir / ".ngym-fleet" / self.name


def load_fleet(path: Path) -> FleetSpec:
    """Read and validate a fleet file; any problem is one :class:`ConfigError` naming the file and the field."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such fleet file")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a fleet file is a mapping (name, environments, servers, ...)")
    data.setdefault("name", path.stem)
    data["base_dir"] = path.resolve().parent
    try:
        return FleetSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{path}: " + "; ".join(_error_line(e) for e in exc.errors())) from None


def _error_line(error: Any) -> str:
    """One validation error as ``where: what``; a misspelled key says which key it is and what was meant."""
    loc = [str(p) for p in error["loc"]]
    where = ".".join(loc) or "(top)"
    if error["type"] == "value_error":  # a validator's own sentence, without pydantic's "Value error, "
        return f"{where}: {error['ctx']['error']}"
    if error["type"] != "extra_forbidden":
        return f"{where}: {error['msg']}"
    # the model the key sits in: the fleet, an environment (environments.NAME.key), a launch (servers.N.launch.k)
    model: type[BaseModel] = FleetSpec
    if loc[0] == "environments" and len(loc) == 3:
        model = EnvironmentSpec
    elif loc[0] == "servers" and len(loc) >= 3:
        model = LaunchSpec
    key = loc[-1]
    choices = [f for f in model.model_fields if f != "base_dir"]
    return f"{where}: unknown key {key!r}{did_you_mean(key, choices)} (keys: {', '.join(choices)})"


def requirements_key(lines: list[str]) -> str:
    """A short stable key for a set of requirement lines (order and duplicates do not matter)."""
    return hashlib.sha256("\n".join(sorted(set(lines))).encode()).hexdigest()[:16]
