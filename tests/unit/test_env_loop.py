"""A server that wants its own event loop (``own_event_loop`` / ``NGYM_ENV_LOOP``) runs its coroutines there.

The environment's blocking calls (a fork, a ``join``, CPU work made from an ``async`` handler) then block only
its own loop: the serving loop goes on answering ``/health`` and the other rollouts (issue 22: math_with_code's
``Process.start``/``join`` on the loop). Its loop-bound objects stay on one loop, its children fork as before.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import signal
import sys
import threading
import types
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import httpx
import pytest
from fastapi import FastAPI, Request
from pydantic import BaseModel

from ngym import BaseVerifyRequest, BaseVerifyResponse, Domain, SimpleResourcesServer
from ngym.server.hosting import env_loop
from ngym.testing import RolloutClient, app_for_class, make_response, serve_in_process


class Block(BaseModel):
    seconds: float = 5.0


def _child_sets_an_alarm(conn: Any) -> None:
    """What math_with_code's sandbox does in its forked child: a SIGALRM handler (main thread only)."""
    signal.signal(signal.SIGALRM, lambda *_: None)
    signal.alarm(5)
    signal.alarm(0)
    conn.send("alarm set")


class Blocking(SimpleResourcesServer):
    """Its tool blocks its loop synchronously (as a ``Process.join`` does) until released or ``seconds`` pass."""

    domain = Domain.OTHER
    own_event_loop = True
    loops: ClassVar[dict[str, Any]] = {}
    release: ClassVar[threading.Event] = threading.Event()
    blocked: ClassVar[threading.Event] = threading.Event()

    def model_post_init(self, context: Any) -> None:
        super().model_post_init(context)
        self._one_at_a_time = asyncio.Semaphore(1)  # bound to the first loop that waits on it

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/block")(self.block)
        app.post("/fork")(self.fork)
        app.post("/raw")(self.raw)
        return app

    async def on_startup(self) -> None:
        self.loops["startup"] = id(asyncio.get_running_loop())

    async def seed_session(self, request: Request, body: Any) -> Any:
        self.loops["seed"] = id(asyncio.get_running_loop())
        self.loops["seeded session"] = request.session["session_id"]
        return await super().seed_session(request, body)

    async def block(self, request: Request, body: Block) -> dict[str, Any]:
        self.loops["tool"] = id(asyncio.get_running_loop())
        self.blocked.set()
        released = self.release.wait(body.seconds)  # blocks this loop, as the environment's own calls do
        return {"released": released, "session": request.session.get("session_id")}

    async def raw(self, request: Request) -> Any:
        return {"read": await request.json()}  # its own read of the body, on its own loop

    async def fork(self) -> dict[str, str]:
        reader, writer = multiprocessing.get_context("fork").Pipe(duplex=False)
        child = multiprocessing.get_context("fork").Process(target=_child_sets_an_alarm, args=(writer,))
        child.start()
        child.join(timeout=30)
        return {"child": reader.recv() if reader.poll() else f"exit {child.exitcode}"}

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        self.loops["verify"] = id(asyncio.get_running_loop())
        async with self._one_at_a_time:  # contended below: a semaphore used from two loops would raise
            await asyncio.sleep(0.01)
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)


@pytest.fixture
async def http(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[httpx.AsyncClient]:
    monkeypatch.setattr(Blocking, "loops", {})
    Blocking.release.clear()
    Blocking.blocked.clear()
    monkeypatch.delenv(env_loop.ENV_LOOP_ENV, raising=False)
    try:
        async with serve_in_process(app_for_class(Blocking)) as client:
            yield client
    finally:
        Blocking.release.set()
        env_loop.ENVIRONMENT_LOOP.stop()


async def test_health_answers_while_the_environment_blocks_its_loop(http: httpx.AsyncClient) -> None:
    rollout = RolloutClient(http)
    await rollout.call("/seed_session", {})
    blocking = asyncio.create_task(rollout.post("/block", {"seconds": 30}))
    assert await asyncio.to_thread(Blocking.blocked.wait, 30)
    # On the serving loop, the tool's wait would hold /health until the tool gave up (30 s, "released": false).
    health = await http.get("/health")
    answered_while_blocked = not Blocking.release.is_set()
    Blocking.release.set()
    assert health.status_code == 200 and answered_while_blocked
    answer = (await blocking).json()
    assert answer == {"released": True, "session": Blocking.loops["seeded session"]}  # the rollout's own session


async def test_every_hook_runs_on_one_loop_apart_from_the_serving_loop(http: httpx.AsyncClient) -> None:
    rollout = RolloutClient(http)
    await rollout.call("/seed_session", {})
    Blocking.release.set()
    await rollout.call("/block", {"seconds": 0})
    body = {"responses_create_params": {"input": []}, "response": make_response("x")}
    answers = await asyncio.gather(*(RolloutClient(http).call("/verify", body) for _ in range(4)))
    assert [a["reward"] for a in answers] == [1.0] * 4  # the semaphore was contended on one loop
    serving = id(asyncio.get_running_loop())
    loops = {hook: loop for hook, loop in Blocking.loops.items() if hook != "seeded session"}
    assert set(loops) == {"startup", "seed", "tool", "verify"}
    assert len(set(loops.values())) == 1 and serving not in loops.values()


async def test_a_child_forked_from_the_environment_loop_is_its_own_main_thread(http: httpx.AsyncClient) -> None:
    assert (await RolloutClient(http).call("/fork")) == {"child": "alarm set"}


async def test_the_process_setting_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Blocking, "loops", {})
    monkeypatch.setenv(env_loop.ENV_LOOP_ENV, "0")
    async with serve_in_process(app_for_class(Blocking)) as http:
        Blocking.release.set()
        await RolloutClient(http).call("/block", {"seconds": 0})
        assert Blocking.loops == {"startup": id(asyncio.get_running_loop()), "tool": id(asyncio.get_running_loop())}


async def test_a_handler_reading_its_own_body_reads_it_on_its_loop(http: httpx.AsyncClient) -> None:
    assert (await RolloutClient(http).call("/raw", {"action": [1, 2]})) == {"read": {"action": [1, 2]}}


def _server_in_module(monkeypatch: pytest.MonkeyPatch, source: str, own_event_loop: bool | None = None) -> type:
    """A server class defined in a fresh module whose top holds ``source`` (its imports)."""
    module = types.ModuleType("an_environment_module")
    exec(source, module.__dict__)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace = {"__module__": module.__name__, "own_event_loop": own_event_loop}
    return type("Env", (SimpleResourcesServer,), namespace)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import multiprocessing", True),  # math_with_code
        ("import multiprocessing as mp", True),  # math_with_judge
        ("from multiprocessing import Process", True),
        ("from concurrent.futures import ProcessPoolExecutor", True),
        ("import asyncio, json, os", False),  # the common environment: nothing blocks its loop
        ("from concurrent.futures import ThreadPoolExecutor", False),
    ],
)
def test_an_environment_starting_processes_gets_its_own_loop_by_default(
    monkeypatch: pytest.MonkeyPatch, source: str, expected: bool
) -> None:
    monkeypatch.delenv(env_loop.ENV_LOOP_ENV, raising=False)
    assert env_loop.wanted(_server_in_module(monkeypatch, source)) is expected


def test_what_the_class_or_the_process_says_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(env_loop.ENV_LOOP_ENV, raising=False)
    assert env_loop.wanted(_server_in_module(monkeypatch, "import multiprocessing", own_event_loop=False)) is False
    assert env_loop.wanted(_server_in_module(monkeypatch, "import json", own_event_loop=True)) is True
    monkeypatch.setenv(env_loop.ENV_LOOP_ENV, "0")
    assert env_loop.wanted(_server_in_module(monkeypatch, "import multiprocessing")) is False
    monkeypatch.setenv(env_loop.ENV_LOOP_ENV, "1")
    assert env_loop.wanted(_server_in_module(monkeypatch, "import json")) is True


async def test_an_app_built_by_setup_webserver_alone_keeps_its_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    # An environment's own tests build the bare app (TestClient(server.setup_webserver())): nothing moves there.
    monkeypatch.setattr(Blocking, "loops", {})
    monkeypatch.delenv(env_loop.ENV_LOOP_ENV, raising=False)
    app = Blocking(config=Blocking.config_class()(name="bare")).setup_webserver()
    async with serve_in_process(app) as http:
        rollout = RolloutClient(http)
        await rollout.call("/seed_session", {})
        body = {"responses_create_params": {"input": []}, "response": make_response("x")}
        await rollout.call("/verify", body)
        serving = id(asyncio.get_running_loop())
        assert {Blocking.loops[hook] for hook in ("startup", "seed", "verify")} == {serving}
