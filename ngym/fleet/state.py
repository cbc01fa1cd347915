"""What ``ngym up`` leaves behind for ``ngym status`` and ``ngym down``: one JSON file in the fleet's state dir.

Each started process is recorded with its process group and its start time (from ``/proc``), so ``down`` stops
exactly the processes ``up`` started, even if a pid was reused since.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

STATE_FILE = "state.json"


class ProcessRecord(BaseModel):
    """One process ``up`` started (a server, or the head server)."""

    pid: int
    start_time: str = ""
    log: str = ""

    def alive(self) -> bool:
        """Still running, and still the process ``up`` started (not a reused pid)."""
        return self.start_time != "" and proc_start_time(self.pid) == self.start_time


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
    service: str = ""  # the Compose service, for the compose engine
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
        state_dir.mkdir(parents=True, exist_ok=True)
        tmp = state_dir / (STATE_FILE + ".tmp")
        tmp.write_text(self.model_dump_json(indent=2))
        tmp.replace(state_dir / STATE_FILE)

    @classmethod
    def load(cls, state_dir: Path) -> FleetState | None:
        path = state_dir / STATE_FILE
        return cls.model_validate(json.loads(path.read_text())) if path.is_file() else None


def proc_start_time(pid: int) -> str:
    """The kernel's start time of ``pid`` (clock ticks since boot), or "" when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # the command name (field 2) may hold spaces and parentheses: split after its closing one
    fields = stat.rpartition(")")[2].split()
    return "" if fields[0] in ("Z", "X") else fields[19]  # a zombie has exited: only its parent has not reaped it


def stop_process(record: ProcessRecord, timeout: float = 10.0) -> bool:
    """SIGTERM the process group ``up`` started, SIGKILL it after ``timeout`` s; True if it was running."""
    if not record.alive():
        return False
    try:
        os.killpg(record.pid, signal.SIGTERM)  # each server leads its own group (start_new_session)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not record.alive() and not _group_alive(record.pid):
            return True
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(record.pid, signal.SIGKILL)
    return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def json_default(value: Any) -> Any:
    return str(value)
