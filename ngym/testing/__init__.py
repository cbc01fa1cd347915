"""Test helpers for environment authors: drive a server in-process the way a NeMo Gym agent does.

A plugin's tests can be two lines::

    from ngym.testing import replay_examples
    async def test_examples(): await replay_examples("my_tool")

``RolloutClient`` talks to the real ASGI app (lifespan included) through httpx, and copies the session
cookie from each response onto the next request by hand, exactly as NeMo Gym's agents do.

Two helpers sit beside it, each imported from its own module: ``ngym.testing.scripted_model.ScriptedModel`` (a
scripted OpenAI-compatible chat model on a loopback port, for driving another framework's rollout loop) and
``ngym.testing.memory_transport.MemoryTransport`` (an in-memory transport for uvicorn's HTTP protocols).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import httpx
from fastapi import FastAPI

from ngym.examples import dataset_row, read_example_rollouts, read_jsonl, recorded_tool_calls
from ngym.server.pipeline.app import ServeSpec, create_app, in_working_directory
from ngym.server.pipeline.resources import SimpleResourcesServer
from ngym.targets import resolve


class RolloutClient:
    """One rollout's client: keeps its own session cookie, copied by hand from every response."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http
        self.cookie: str | None = None

    async def post(self, path: str, body: Any = None) -> httpx.Response:
        headers = {"cookie": self.cookie} if self.cookie else {}
        response = await self.http.post(path, json=body if body is not None else {}, headers=headers)
        set_cookie = response.headers.get("set-cookie")
        if set_cookie:
            self.cookie = set_cookie.split(";", 1)[0]
        return response

    async def call(self, path: str, body: Any = None) -> Any:
        """POST and return the JSON body, raising on a non-2xx status."""
        response = await self.post(path, body)
        if response.status_code >= 400:
            raise AssertionError(f"POST {path} → {response.status_code}: {response.text}")
        return response.json()


@asynccontextmanager
async def serve_in_process(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client bound to ``app`` in this process, with the app's lifespan running."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        # No cookie jar: each RolloutClient carries its own cookie by hand, as NeMo Gym agents do.
        no_jar = CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))
        async with httpx.AsyncClient(
            transport=transport, base_url="http://ngym.test", timeout=60, cookies=no_jar
        ) as client:
            yield client


def app_for(name_or_target: str, **fields: Any) -> FastAPI:
    """Build the app of an environment: an installed name, a folder, a config file, ``app.py`` or ``module:Class``."""
    return create_app(resolve(name_or_target).serve_spec(**fields))


def app_for_class(cls: type[SimpleResourcesServer], name: str | None = None, **fields: Any) -> FastAPI:
    """Build the app of a server class defined anywhere (e.g. inline in a test)."""
    spec = ServeSpec(target=f"{cls.__module__}:{cls.__qualname__}", name=name or cls.__name__, fields=fields)
    return create_app(spec, cls=cls)


def make_response(
    text: str | None = None, calls: list[tuple[str, dict[str, Any]]] | None = None, response_id: str = "resp_test"
) -> dict[str, Any]:
    """A minimal valid OpenAI Responses object (as JSON) for verify tests.

    ``calls`` become ``function_call`` items (each followed by an empty ``function_call_output``), in order;
    ``text`` becomes the final assistant message. ``make_response()`` alone is an empty trajectory.
    """
    output: list[dict[str, Any]] = []
    for index, (name, arguments) in enumerate(calls or []):
        call_id = f"call_{index}"
        output.append({"type": "function_call", "name": name, "arguments": json.dumps(arguments), "call_id": call_id})
        output.append({"type": "function_call_output", "call_id": call_id, "output": ""})
    if text is not None:
        output.append(
            {
                "type": "message", "id": "msg_final", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )  # fmt: skip
    return {
        "id": response_id, "created_at": 0.0, "model": "test", "object": "response", "output": output,
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
    }  # fmt: skip


@dataclass
class ExampleResult:
    index: int
    reward: float
    expected_reward: float | None
    verify_response: dict[str, Any]


async def run_recorded_rollout(client: RolloutClient, rollout: dict[str, Any]) -> dict[str, Any]:
    """seed_session with the row → each recorded function_call, in order → verify with the recorded response."""
    row = dataset_row(rollout)
    await client.call("/seed_session", row)
    for call in recorded_tool_calls(rollout["response"]):
        await client.post(f"/{call.name}", call.arguments)
    verified: dict[str, Any] = await client.call("/verify", {**row, "response": rollout["response"]})
    return verified


async def replay_examples(name: str, **fields: Any) -> list[ExampleResult]:
    """Replay an environment's ``data/example_rollouts.jsonl`` in-process; assert each reward matches."""
    environment = resolve(name)
    assert environment.folder is not None, f"cannot locate the package of {name}"
    rollouts = read_example_rollouts(environment.folder / "data" / "example_rollouts.jsonl")
    results = []
    with in_working_directory(environment.target):
        async with serve_in_process(create_app(environment.serve_spec(**fields))) as http:
            for index, rollout in enumerate(rollouts):
                verified = await run_recorded_rollout(RolloutClient(http), rollout)
                expected = rollout.get("reward")
                results.append(ExampleResult(index, verified["reward"], expected, verified))
                assert 0.0 <= verified["reward"] <= 1.0, f"example {index}: reward {verified['reward']} outside [0, 1]"
                if expected is not None:
                    assert verified["reward"] == expected, f"example {index}: reward {verified['reward']} != {expected}"
    return results


__all__ = [
    "ExampleResult",
    "RolloutClient",
    "app_for",
    "app_for_class",
    "make_response",
    "read_jsonl",
    "replay_examples",
    "run_recorded_rollout",
    "serve_in_process",
]
