"""``ngym status``: per server of a fleet, health, live sessions, rollouts/s and errors.

Read from each environment's ``/health`` (``live_sessions``, and ``traffic``: responses, verifies, 5xx since
it started), twice, ``interval`` seconds apart: rollouts/s is the verifies between the two readings over the
time between them. Other servers (agents, models, the head server) show only whether they answer.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel

from ngym.fleet.state import FleetState, ServerRecord
from ngym.processes import probe


class ServerStatus(BaseModel):
    """One row of ``ngym status``."""

    name: str
    kind: str
    url: str
    health: str  # "ok" | "down" | "failed" | "unhealthy (HTTP 503)" | ...
    reason: str = ""
    live_sessions: int | None = None
    rollouts_per_second: float | None = None
    verified: int | None = None
    errors: int | None = None


def read_health(record: ServerRecord, timeout: float = 2.0) -> tuple[str, dict[str, Any]]:
    """(health word, the /health body) of one environment."""
    status, body = probe(f"http://{record.host}:{record.port}/health", timeout)
    if status is None:
        return "down", {}
    if not 200 <= status < 300:
        return f"unhealthy (HTTP {status})", {}
    return ("ok", body) if body is not None else ("down", {})


def read_environment(record: ServerRecord) -> tuple[str, dict[str, Any]]:
    """(health word, the /health body) of an environment; for replicas behind a router (the ray engine's HAProxy,
    even over one replica), each replica is read and the counts summed, and ``replicas_up``/``replicas`` say how
    many answered. A router that answers while no replica behind it does (HAProxy's 503) reads ``down``."""
    routed = (record.host, record.port) not in {(r.host, r.port) for r in record.replicas}
    replicas = record.replicas if routed else []
    if not replicas:
        return read_health(record)
    health, body = read_health(record)  # the router's answer: is the one URL up
    if health != "ok":
        # the router is up but has no replica left to send to: the environment is down (loud, as a process
        # that exited), whatever the router's own answer
        if health.startswith("unhealthy") and not any(
            read_health(ServerRecord(kind="environment", host=r.host, port=r.port))[0] == "ok" for r in replicas
        ):
            return "down", {}
        return health, body
    total: dict[str, Any] = {"live_sessions": 0, "traffic": {"verified": 0, "server_errors": 0}}
    answering = 0
    for replica in replicas:
        word, one = read_health(ServerRecord(kind="environment", host=replica.host, port=replica.port))
        if word != "ok":
            continue
        answering += 1
        total["live_sessions"] += int(one.get("live_sessions") or 0)
        for key in ("verified", "server_errors"):
            total["traffic"][key] += int((one.get("traffic") or {}).get(key) or 0)
    return "ok", {**total, "replicas_up": answering, "replicas": len(replicas)}


def fleet_status(state: FleetState, interval: float = 1.0) -> list[ServerStatus]:
    """The status of every server of the fleet (the head server first)."""
    records = {"(head)": state.head, **state.servers}
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
            row.verified = traffic.get("verified")
            row.errors = traffic.get("server_errors")
            started, (_, before) = first.get(name, (time.monotonic(), ("", {})))
            earlier = (before.get("traffic") or {}).get("verified")
            elapsed = time.monotonic() - started
            if isinstance(earlier, int) and isinstance(row.verified, int) and elapsed > 0:
                row.rollouts_per_second = round((row.verified - earlier) / elapsed, 2)
            if "replicas" in body:
                row.reason = f"{body['replicas_up']}/{body['replicas']} replicas answer; counts summed over them"
            elif record.workers > 1:
                row.reason = f"{record.workers} workers; counts are the answering worker's"
        elif record.process is not None and not record.process.alive():
            row.health, row.reason = "down", "its process has exited"
        rows.append(row)
    return rows


def render(rows: list[ServerStatus]) -> str:
    """A plain table of the rows."""
    header = ("server", "kind", "health", "sessions", "rollouts/s", "verified", "5xx", "url / reason")
    table = [header] + [
        (
            r.name,
            r.kind,
            r.health,
            _cell(r.live_sessions),
            _cell(r.rollouts_per_second),
            _cell(r.verified),
            _cell(r.errors),
            r.url + (f"  {r.reason}" if r.reason else ""),
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1] for row in table
    )


def _cell(value: object) -> str:
    return "-" if value is None else str(value)
