"""``ngym status``: per server of a fleet, health, live sessions and the bytes they hold, rollouts/s and errors.

Read from each environment's ``/health`` (``live_sessions``, ``session_bytes``: the tool-call bytes its live
sessions have sent, and ``traffic``: responses, verifies, 5xx since it started), twice, ``interval`` seconds
apart: rollouts/s is the verifies between the two readings over the time between them. An environment served by
several processes is read per process and the counts summed: each replica of the ray engine, and each worker of
an ``ngym run --workers N`` unit (its HAProxy sends a ``/health`` naming a worker's slot to that worker); each
is a sub-row (``parts``). Other servers (agents, models, the head server) show only whether they answer.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from pydantic import BaseModel, Field

from ngym.errors import ConfigError
from ngym.fleet.state import FleetState, ServerRecord
from ngym.processes import probe
from ngym.server.hosting.haproxy import HEALTH_SLOT_HEADER


class PartStatus(BaseModel):
    """One process of an environment: a worker (``w0``) or a replica (``r0``)."""

    name: str
    health: str
    live_sessions: int | None = None
    #: the tool-call bytes its live sessions have sent (None: its session store cannot say, e.g. Redis)
    session_bytes: int | None = None


class ServerStatus(BaseModel):
    """One row of ``ngym status``."""

    name: str
    kind: str
    url: str
    health: str  # "ok" | "down" | "failed" | "unhealthy (HTTP 503)" | ...
    reason: str = ""
    live_sessions: int | None = None
    session_bytes: int | None = None
    rollouts_per_second: float | None = None
    verified: int | None = None
    errors: int | None = None
    parts: list[PartStatus] = Field(default_factory=list)


def read_health(record: ServerRecord, timeout: float = 2.0, worker: int | None = None) -> tuple[str, dict[str, Any]]:
    """(health word, the /health body) of one environment; ``worker``: that worker of its ``--workers`` set."""
    url = f"http://{record.host}:{record.port}/health"
    if worker is None:
        status, body = probe(url, timeout)
    else:
        status, body = probe(url, timeout, {HEALTH_SLOT_HEADER: str(worker)})
    if status is None:
        return "down", {}
    if not 200 <= status < 300:
        return f"unhealthy (HTTP {status})", {}
    return ("ok", body) if body is not None else ("down", {})


def _bytes(body: dict[str, Any]) -> int | None:
    report = body.get("session_bytes")
    return int(report.get("total") or 0) if isinstance(report, dict) else None


def _part(name: str, health: str, body: dict[str, Any]) -> PartStatus:
    if health != "ok":
        return PartStatus(name=name, health=health)
    live = body.get("live_sessions")
    return PartStatus(name=name, health=health, live_sessions=int(live or 0), session_bytes=_bytes(body))


def _sum(parts: list[tuple[PartStatus, dict[str, Any]]]) -> dict[str, Any]:
    """The counts of the answering parts, summed (``session_bytes`` None when any part cannot say)."""
    answering = [(part, body) for part, body in parts if part.health == "ok"]
    sizes = [part.session_bytes for part, _ in answering]
    total: dict[str, Any] = {
        "live_sessions": sum(part.live_sessions or 0 for part, _ in answering),
        "session_bytes": {"total": sum(s or 0 for s in sizes)} if None not in sizes else None,
        "traffic": {"verified": 0, "server_errors": 0},
    }
    for _, body in answering:
        for key in ("verified", "server_errors"):
            total["traffic"][key] += int((body.get("traffic") or {}).get(key) or 0)
    return {**total, "parts": [part for part, _ in parts]}


def _read_workers(record: ServerRecord, prefix: str = "") -> list[tuple[PartStatus, dict[str, Any]]]:
    """Each worker of a ``--workers N`` process, by its slot; a worker whose answer names another slot (a server
    older than this reading, or a worker left out by HAProxy's checks: another one answered) reads ``down``."""
    parts = []
    for index in range(record.workers):
        health, body = read_health(record, worker=index)
        slot = str(body.get("route_slot") or "").split(",")[-1]
        if health == "ok" and slot != f"{index}/{record.workers}":
            health, body = "down", {}
        parts.append((_part(f"{prefix}w{index}", health, body), body))
    return parts


def read_environment(record: ServerRecord) -> tuple[str, dict[str, Any]]:
    """(health word, the /health body) of an environment; for replicas behind a router (the ray engine's HAProxy,
    even over one replica), each replica is read and the counts summed, and ``replicas_up``/``replicas`` say how
    many answered; for ``--workers N``, each worker likewise (``workers_up``). ``parts``: one row per replica or
    worker. A router that answers while no replica behind it does (HAProxy's 503) reads ``down``."""
    routed = (record.host, record.port) not in {(r.host, r.port) for r in record.replicas}
    replicas = record.replicas if routed else []
    if not replicas:
        health, body = read_health(record)
        if health != "ok" or record.workers <= 1:
            return health, body
        workers = _read_workers(record)
        up = sum(part.health == "ok" for part, _ in workers)
        return "ok", {**_sum(workers), "workers_up": up}
    health, body = read_health(record)  # the router's answer: is the one URL up
    if health != "ok":
        # the router is up but has no replica left to send to: the environment is down (loud, as a process
        # that exited), whatever the router's own answer
        if health.startswith("unhealthy") and not any(
            read_health(ServerRecord(kind="environment", host=r.host, port=r.port))[0] == "ok" for r in replicas
        ):
            return "down", {}
        return health, body
    parts: list[tuple[PartStatus, dict[str, Any]]] = []
    for index, replica in enumerate(replicas):
        one = ServerRecord(kind="environment", host=replica.host, port=replica.port, workers=record.workers)
        word, answer = read_health(one)
        if word == "ok" and record.workers > 1:
            parts.extend(_read_workers(one, prefix=f"r{index}."))
        else:
            parts.append((_part(f"r{index}", word, answer), answer))
    answering = sum(
        any(p.health == "ok" for p, _ in parts if p.name == f"r{i}" or p.name.startswith(f"r{i}."))
        for i in range(len(replicas))
    )
    return "ok", {**_sum(parts), "replicas_up": answering, "replicas": len(replicas)}


def fleet_status(state: FleetState, interval: float = 1.0) -> list[ServerStatus]:
    """The status of every server of the fleet (the head server first)."""
    return status_rows({"(head)": state.head, **state.servers}, interval)


def url_status(url: str, interval: float = 1.0) -> list[ServerStatus]:
    """The status of one environment served at ``url`` (``ngym run``, with or without ``--workers N``: the
    count is read from its ``/health``), as one row with a sub-row per worker."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ConfigError(f"{url!r}: expected a fleet file or an http://HOST:PORT URL of an `ngym run` server")
    record = ServerRecord(kind="environment", host=parts.hostname, port=parts.port or 80, ok=True)
    health, body = read_health(record)
    if health == "ok":
        levels = str(body.get("route_slot") or "").split(",")
        if len(levels) == 1 and "/" in levels[0]:
            record.workers = max(1, int(levels[0].partition("/")[2] or 1))
    rows = status_rows({url: record}, interval)
    for row in rows:
        row.url = url
        if row.health == "down" and not row.reason:  # say why: a mistyped port reads as an environment that died
            row.reason = "nothing answers GET /health there: is `ngym run` serving at this URL?"
    return rows


def live_sessions_at(url: str) -> int | None:
    """The live sessions of the `ngym run` at ``url``: every worker's of a ``--workers N`` set (its ``/health``
    answers for the one worker it reaches), None when it does not say."""
    (row, *_) = url_status(url, interval=0)
    return row.live_sessions


def status_rows(records: dict[str, ServerRecord], interval: float) -> list[ServerStatus]:
    """A row per record, in order."""
    first = {n: (time.monotonic(), read_environment(r)) for n, r in records.items() if r.kind == "environment" and r.ok}
    if first and interval > 0:
        time.sleep(interval)
    rows = []
    for name, record in records.items():
        url = f"http://{record.host}:{record.port}"
        if not record.ok:
            rows.append(ServerStatus(name=name, kind=record.kind, url=url, health="failed", reason=record.reason))
            continue
        if record.kind != "environment":
            health, _ = read_health(record)
            if health.startswith("unhealthy (HTTP 404"):  # a NeMo agent may have no /health: it answers, so it is up
                health = "ok"
            rows.append(ServerStatus(name=name, kind=record.kind, url=url, health=health, reason=record.reason))
            continue
        health, body = read_environment(record)
        row = ServerStatus(name=name, kind=record.kind, url=url, health=health)
        if health == "ok":
            traffic = body.get("traffic") or {}
            row.live_sessions = body.get("live_sessions")
            row.session_bytes = _bytes(body)
            row.parts = list(body.get("parts") or [])
            row.verified = traffic.get("verified")
            row.errors = traffic.get("server_errors")
            started, (_, before) = first.get(name, (time.monotonic(), ("", {})))
            earlier = (before.get("traffic") or {}).get("verified")
            elapsed = time.monotonic() - started
            # --interval 0 reads once: no rate to show ("-"), not a 0.0 that reads as an idle server
            if interval > 0 and isinstance(earlier, int) and isinstance(row.verified, int) and elapsed > 0:
                row.rollouts_per_second = round((row.verified - earlier) / elapsed, 2)
            if "replicas" in body:
                row.reason = f"{body['replicas_up']}/{body['replicas']} replicas answer; counts summed over them"
            elif "workers_up" in body:
                row.reason = f"{body['workers_up']}/{record.workers} workers answer; counts summed over them"
        elif record.process is not None and not record.process.alive():
            row.health, row.reason = "down", "its process has exited"
        rows.append(row)
    return rows


def render(rows: list[ServerStatus]) -> str:
    """A plain table of the rows; an environment's workers or replicas as indented rows under it."""
    header = ("server", "kind", "health", "sessions", "session bytes", "rollouts/s", "verified", "5xx", "url / reason")
    table = [header]
    for r in rows:
        table.append(
            (
                r.name,
                r.kind,
                r.health,
                _cell(r.live_sessions),
                _cell(r.session_bytes),
                _cell(r.rollouts_per_second),
                _cell(r.verified),
                _cell(r.errors),
                r.url + (f"  {r.reason}" if r.reason else ""),
            )
        )
        for part in r.parts:
            cells = (f"  {part.name}", "", part.health, _cell(part.live_sessions), _cell(part.session_bytes))
            table.append((*cells, "", "", "", ""))
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    return "\n".join(
        ("  ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1]).rstrip()
        for row in table
    )


def _cell(value: object) -> str:
    return "-" if value is None else str(value)
