"""A fleet's front holds clients to the environment's own HTTP limits (its config overrides, else the defaults)."""

from __future__ import annotations

from ngym.fleet.front import client_limits
from ngym.fleet.spec import EnvironmentSpec
from ngym.server.hosting.client_limits import ClientLimits
from ngym.server.hosting.haproxy import Backend, haproxy_config


def test_the_fronts_limits_are_the_environments_settings() -> None:
    env = EnvironmentSpec(
        env="example_session_state_mgmt",
        config={
            "request_header_timeout_seconds": 2.5,
            "keep_alive_timeout_seconds": 75,
            "max_request_header_bytes": 8192,
        },
    )
    assert client_limits(env) == ClientLimits(
        max_header_bytes=8192, header_timeout_seconds=2.5, body_timeout_seconds=60.0, keep_alive_seconds=75.0
    )
    assert client_limits(EnvironmentSpec(env="example_session_state_mgmt")) == ClientLimits()


def test_haproxy_is_configured_with_them() -> None:
    limits = ClientLimits(header_timeout_seconds=2.5, body_timeout_seconds=0.5, keep_alive_seconds=75)
    text = haproxy_config(listen_fd=3, backends=[Backend("unit", "127.0.0.1", 1)], cookie_name="c", limits=limits)
    lines = {line.strip() for line in text.splitlines()}
    assert {
        "timeout http-request 2500ms",
        "timeout http-keep-alive 75000ms",
        "http-request wait-for-body time 500ms",
    } <= lines
    assert "option http-buffer-request" not in lines  # it would wait for the body under the header time instead
