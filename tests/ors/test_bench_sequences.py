"""``bench/bench_fronts.py`` drives ORS as a trainer does: its rollout makes the requests TRL's ``OpenRewardSpec``
(the ``openreward`` SDK's session) makes for one rollout, in the same order, no more and no fewer.

Both run against one server that records every request: TRL's binding in the trainer venv (reset, the recorded
tool calls as the bound methods, ``submit_answer``, then the environment closed, as ``GRPOTrainer`` does), and the
bench's ORS client in this process. The rollout's requests are those of the session it opened (the
``/create_session`` that gave its id, then every request carrying it). The SDK's keep-alive ``/ping`` runs on a
thread of its own (at session start, then every 10 s), so whether it lands inside a short rollout depends on time:
pings are compared apart (the bench sends the session's first one).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp

from ngym.examples import EXAMPLE_ROWS, dataset_row, read_example_rollouts, read_jsonl, recorded_tool_calls
from ngym.rollout.thread_server import serve_app_in_thread
from ngym.targets import resolve
from ngym.testing import app_for

from .test_ors_client import TRL_DRIVER, _final_text, drive

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.bench_fronts import ORSClient  # noqa: E402

NAME = "workplace_assistant"


class Recorder:
    """An ASGI wrapper noting each request (method, path, ``X-Session-ID``) and the id each ``/create_session``
    stream gave."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: list[tuple[str, str, str | None]] = []
        self.opened: dict[int, str] = {}  # position in ``seen`` -> the session id its answer gave

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sid = next((v.decode() for k, v in scope["headers"] if k == b"x-session-id"), None)
        position = len(self.seen)
        self.seen.append((scope["method"], scope["path"], sid))

        async def noting(message: Any) -> None:
            if message["type"] == "http.response.body" and scope["path"].endswith("/create_session"):
                self.opened[position] = message.get("body", b"").decode().split("\r\n")[1].removeprefix("data: ")
            await send(message)

        await self.app(scope, receive, noting)

    def rollout(self, sid: str) -> list[str]:
        """The requests of session ``sid``, as ``METHOD /route`` (the mount's prefix and doubled slashes dropped)."""
        requests = []
        for position, (method, path, carried) in enumerate(self.seen):
            if carried == sid or self.opened.get(position) == sid:
                route = "/" + path.removeprefix("/ors").lstrip("/")
                requests.append(f"{method} {route}")
        return requests

    def last_created(self) -> str:
        return next(sid for method, path, sid in reversed(self.seen) if path.endswith("/create") and sid)


def test_the_bench_makes_the_requests_trls_openreward_spec_makes(ors_python: Path) -> None:
    folder = resolve(NAME).folder
    assert folder is not None
    recorded = read_example_rollouts(folder / "data" / "example_rollouts.jsonl")[-3]  # two tool calls
    calls = recorded_tool_calls(recorded["response"])
    assert len(calls) == 2
    index = read_jsonl(folder / "data" / EXAMPLE_ROWS).index(dataset_row(recorded))
    recorder = Recorder(app_for(NAME))
    with serve_app_in_thread(recorder) as url:
        answer = _final_text(recorded["response"])
        episode = {"index": index, "calls": [[c.name, c.arguments] for c in calls], "answer": answer}
        plan = {"url": f"{url}/ors/", "env_name": NAME, "split": "example", "episodes": [episode]}
        seen = drive(ors_python, plan, TRL_DRIVER)
        assert seen["rewards"] == [recorded["reward"]]
        trl = recorder.rollout(recorder.last_created())

        async def bench() -> tuple[Any, int]:
            async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
                return await ORSClient(http, url, NAME).rollout(index, recorded)

        reward, made = asyncio.run(bench())
        ours = recorder.rollout(recorder.last_created())
    assert reward == recorded["reward"]
    assert len(ours) == made == len(calls) + 7
    assert [r for r in ours if not r.endswith("/ping")] == [r for r in trl if not r.endswith("/ping")], json.dumps(
        {"trl": trl, "bench": ours}, indent=1
    )
    assert ours == [
        "POST /create_session",
        "POST /create",
        "POST /ping",
        "GET /prompt",
        "POST /call",
        "POST /call",
        "POST /call",
        "POST /delete",
        "POST /delete_session",
    ]
