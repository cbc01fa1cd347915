"""What ``ngym up`` leaves behind for ``ngym status`` and ``ngym down``: one JSON file in the fleet's state dir.

Each started process is recorded with its process group and its start time (from ``/proc``), so ``down`` stops
exactly the processes ``up`` started, even if a pid was reused since.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel, Field

from ngym.processes import start_time, stop_group

STATE_FILE = "state.json"


class ProcessRecord(BaseModel):
    """One process ``up`` started (a server, or the head server)."""

    pid: int
    start_time: str = ""
    log: str = ""

    @classmethod
    def started(cls, pid: int, log: Path | str) -> ProcessRecord:
        """The record of a process just started (its start time read now, from ``/proc``)."""
        return cls(pid=pid, start_time=start_time(pid), log=str(log))

    def alive(self) -> bool:
        """Still running, and still the process ``up`` started (not a reused pid)."""
        return self.start_time != "" and start_time(self.pid) == self.start_time

    def stop(self, timeout: float = 10.0) -> bool:
        """SIGTERM its process group, SIGKILL it after ``timeout`` s (``ngym.processes.stop_group``); True if it
        was running."""
        return stop_group(self.pid, self.start_time, timeout) if self.start_time else False


class ReplicaRecord(BaseModel):
    """One replica of an environment placed by the ray engine: where it listens, its node and its actor."""

    host: str
    port: int
    node: str = ""  # the Ray node id
    actor: str = ""  # the actor's name in the engine's Ray namespace
    ok: bool = False
    reason: str = ""


class ServerRecord(BaseModel):
    """A server of the fleet: where it listens, what it is, whether it came up."""

    kind: str  # "environment" | "server" | "head"
    host: str
    port: int
    ok: bool = False
    reason: str = ""
    workers: int = 1
    process: ProcessRecord | None = None
    front: ProcessRecord | None = None  # the local engine: the HAProxy on its URL, in front of its process
    service: str = ""  # the Compose service, for the compose engine
    target: str = ""  # what `ngym run` serves (an environment: its installed name or path)
    python: str = ""  # the interpreter serving it, when not ngym's own (its own virtualenv)
    #: the ray engine: the environment's replicas (behind the front's HAProxy when more than one)
    replicas: list[ReplicaRecord] = Field(default_factory=list)


class FleetState(BaseModel):
    """Everything ``status`` and ``down`` need."""

    name: str
    engine: str
    head: ServerRecord
    servers: dict[str, ServerRecord] = Field(default_factory=dict)
    compose_file: str = ""  # the compose engine: the folder of the projects
    project: str = ""  # the compose engine's project prefix, or the ray engine's namespace
    ray_address: str = ""  # the ray engine: the cluster the actors were placed on

    def save(self, state_dir: Path) -> None:
        write_private(state_dir / STATE_FILE, self.model_dump_json(indent=2))

    @classmethod
    def load(cls, state_dir: Path) -> FleetState | None:
        path = state_dir / STATE_FILE
        return cls.model_validate(json.loads(path.read_text())) if path.is_file() else None


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (0600; its folder 0700), replacing it at once: the
    fleet's files may hold secrets (the global config holds every server's keys)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an older file of that name kept its mode
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    tmp.replace(path)
