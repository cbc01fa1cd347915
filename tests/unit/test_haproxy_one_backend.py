"""The HAProxy configuration of one backend (the ray engine's one-replica environments) does not mark its only
server down on a single failed connection: with nowhere else to send its rollouts, that would only turn one slow
connect under load into ~1 s of 503s for a healthy environment; its active check still takes a dead one out.
Several backends keep the passive mark-down (their rollouts then go to another worker at once)."""

from __future__ import annotations

from ngym.server.hosting.haproxy import Backend, haproxy_config


def servers(count: int) -> list[str]:
    text = haproxy_config(
        listen_fd=3,
        backends=[Backend(f"r{i}", "127.0.0.1", 8000 + i) for i in range(count)],
        cookie_name="ngym_session",
        session_ttl_seconds=60,
        max_sessions=10,
    )
    return [line.strip() for line in text.splitlines() if line.strip().startswith("server ")]


def test_one_backend_is_taken_out_by_its_checks_only() -> None:
    (line,) = servers(1)
    assert "check inter 1s fall 2" in line and "on-error mark-down" not in line


def test_several_backends_mark_a_failed_worker_down_at_once() -> None:
    lines = servers(2)
    assert len(lines) == 2 and all("observe layer4 error-limit 1 on-error mark-down" in line for line in lines)
