"""How many judge calls the compat ``ServerClient`` keeps in flight at once: as many as NeMo Gym's would.

NeMo Gym's process-wide aiohttp client is bounded by ``global_aiohttp_connector_limit`` (100 × 1,024) and
``global_aiohttp_connector_limit_per_host`` (1,024). ngym's per-loop session had aiohttp's default (100
connections in all), so with more than 100 rollouts verifying at once, the rest of their judge calls waited for
a connection instead of reaching the judge (whose server batches them).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from nemo_gym.server_utils import close_client_session, request
from ngym_nemo_gym.servers import set_global_config

pytestmark = pytest.mark.usefixtures("clean_server_env")


class Judge:
    """A judge that holds every call until ``expected`` are in flight together (or ``patience`` passed)."""

    def __init__(self, expected: int, patience: float) -> None:
        self.expected, self.patience = expected, patience
        self.in_flight = self.most = 0
        self.all_here = asyncio.Event()

    async def answer(self, _: web.Request) -> web.Response:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        if self.in_flight >= self.expected:
            self.all_here.set()
        try:
            await asyncio.wait_for(self.all_here.wait(), self.patience)
        except TimeoutError:
            pass
        finally:
            self.in_flight -= 1
        return web.json_response({"ok": True})


async def serve(judge: Judge) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/v1/responses", judge.answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await close_client_session()
        await runner.cleanup()


async def calls_in_flight(calls: int, patience: float) -> int:
    """Send ``calls`` judge calls at once through the compat client; the most the judge saw together."""
    judge = Judge(calls, patience)
    async for url in serve(judge):
        answers = await asyncio.gather(*(request("POST", f"{url}/v1/responses", json={}) for _ in range(calls)))
        assert all(a.status == 200 for a in answers)
    return judge.most


async def test_more_than_a_hundred_judge_calls_reach_the_judge_at_once() -> None:
    assert await calls_in_flight(150, patience=20) == 150


async def test_nemos_per_host_limit_key_bounds_the_calls_in_flight() -> None:
    set_global_config({"global_aiohttp_connector_limit_per_host": 7})
    assert await calls_in_flight(20, patience=0.5) == 7


async def test_an_invalid_limit_in_the_config_is_a_judge_call_error_saying_which_setting() -> None:
    from nemo_gym.server_utils import ServerCallError

    set_global_config({"global_aiohttp_connector_limit_per_host": -3})
    with pytest.raises(ServerCallError, match="global_aiohttp_"):
        await request("POST", "http://127.0.0.1:9/v1/responses", json={})
