"""Shared fixtures: in-process apps of the built-in examples and a scratch environment."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from ngym.testing import app_for, serve_in_process


@pytest.fixture
def lenient_registry(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A fresh plugin registry, not strict, with its caches in a scratch folder (use with ``usefixtures``)."""
    from ngym.plugins.manager import STRICT_ENV
    from ngym.plugins.registry import reset_registry

    monkeypatch.delenv(STRICT_ENV, raising=False)
    monkeypatch.setenv("NGYM_CACHE_DIR", str(tmp_path / "cache"))
    reset_registry()


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
