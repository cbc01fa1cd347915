"""Shared fixtures: in-process apps of the built-in examples and a scratch environment."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from ngym.testing import app_for, serve_in_process


@pytest.fixture
async def counter_http() -> AsyncIterator[httpx.AsyncClient]:
    async with serve_in_process(app_for("example_session_state_mgmt")) as http:
        yield http


@pytest.fixture
async def weather_http() -> AsyncIterator[httpx.AsyncClient]:
    async with serve_in_process(app_for("example_single_tool_call")) as http:
        yield http


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under CI=true a skipped test is a failure: `.ci/run` installs what every test needs, so a skip there means
    a test silently did not run (outside CI, `make test -rs` lists each skip with its reason)."""
    import os

    if os.environ.get("CI", "").strip().lower() not in ("true", "1", "yes"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped and session.exitstatus == 0:
        reporter.write_line(f"CI=true: {len(skipped)} test(s) skipped; each must run in CI (see -rs above)", red=True)
        session.exitstatus = 1
