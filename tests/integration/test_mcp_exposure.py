"""expose_tools_over_mcp: tools listed and called over MCP (streamable HTTP) by the official SDK's own client,
against a server on a real port, inside each rollout's session and within its allow-list."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from ngym.rollout.thread_server import serve_app_in_thread
from ngym.server.protocol import ResourcesSeedSessionResponse
from ngym.testing import app_for, app_for_class, make_response
from resources_servers.example_session_state_mgmt.app import StatefulCounterResourcesServer

TOKEN = "X-NeMo-Gym-Session-Token"
ROW = {"responses_create_params": {"input": "count"}, "initial_count": 3, "expected_count": 6}


class ReadOnlyCounter(StatefulCounterResourcesServer):
    """The counter, where a row marked read_only may only read it over MCP."""

    def mcp_allowed_tools_for_session(self, seed_body: dict[str, Any]) -> list[str] | None:
        return ["get_counter_value"] if seed_body.get("read_only") else None


class IncrementOnlyOverMCP(StatefulCounterResourcesServer):
    """Exposes one of its two tools over MCP (NeMo Gym's mcp_tools signature)."""

    def mcp_tools(self, harvested: list[Any], catchall: Any = None) -> list[Any] | None:
        return [tool for tool in harvested if tool.name == "increment_counter"]


@pytest.fixture(scope="module")
def counter_url() -> Iterator[str]:
    with serve_app_in_thread(app_for("example_session_state_mgmt", expose_tools_over_mcp=True)) as url:
        yield url


def seed(url: str, row: dict[str, Any]) -> tuple[dict[str, Any], str]:
    answer = httpx.post(f"{url}/seed_session", json=row)
    assert answer.status_code == 200, answer.text
    return answer.json(), answer.headers["set-cookie"].split(";")[0]


async def mcp_session_call(url: str, headers: dict[str, str], *calls: tuple[str, dict[str, Any]]) -> list[Any]:
    """Open an MCP session with the SDK's client; list the tools, then make the calls."""
    http = httpx.AsyncClient(headers=headers, timeout=30)
    async with (
        http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        listed = await session.list_tools()
        results = [await session.call_tool(name, args) for name, args in calls]
    return [listed, *results]


async def test_tools_run_inside_the_rollouts_session(counter_url: str) -> None:
    seeded, cookie = seed(counter_url, ROW)
    meta = seeded["mcp"]
    assert meta["server_name"] == "example_session_state_mgmt" and meta["url_path"] == "/mcp"
    assert meta["transport"] == "http" and set(meta["headers"]) == {TOKEN}

    listed, incremented, value = await mcp_session_call(
        counter_url, meta["headers"], ("increment_counter", {"count": 3}), ("get_counter_value", {})
    )
    tools = {tool.name: tool for tool in listed.tools}
    assert set(tools) == {"increment_counter", "get_counter_value"}
    assert tools["increment_counter"].inputSchema["properties"]["count"]["type"] == "integer"
    assert not incremented.isError and incremented.structuredContent == {"success": True}
    assert value.structuredContent == {"count": 6} and json.loads(value.content[0].text) == {"count": 6}

    # The HTTP side of the same rollout sees what MCP did: verify scores the counter the MCP calls left.
    verified = httpx.post(
        f"{counter_url}/verify", json={**ROW, "response": make_response(text="6")}, headers={"cookie": cookie}
    )
    assert verified.json()["reward"] == 1.0


async def test_each_token_reaches_only_its_own_session(counter_url: str) -> None:
    first, _ = seed(counter_url, ROW)
    second, _ = seed(counter_url, {**ROW, "initial_count": 40})
    _, value = await mcp_session_call(counter_url, second["mcp"]["headers"], ("get_counter_value", {}))
    assert value.structuredContent == {"count": 40}
    _, value = await mcp_session_call(counter_url, first["mcp"]["headers"], ("get_counter_value", {}))
    assert value.structuredContent == {"count": 3}


async def test_missing_forged_and_bad_calls_are_error_results(counter_url: str) -> None:
    seeded, _ = seed(counter_url, ROW)
    token = seeded["mcp"]["headers"][TOKEN]
    listed, no_token = await mcp_session_call(counter_url, {}, ("get_counter_value", {}))
    assert len(listed.tools) == 2  # listing needs no token
    assert no_token.isError and TOKEN in no_token.content[0].text
    _, forged = await mcp_session_call(counter_url, {TOKEN: token[:-2] + "xx"}, ("get_counter_value", {}))
    assert forged.isError and "invalid" in forged.content[0].text
    _, bad_args, unknown = await mcp_session_call(
        counter_url, {TOKEN: token}, ("increment_counter", {"count": "many"}), ("launch_rockets", {})
    )
    assert bad_args.isError and "HTTP 422" in bad_args.content[0].text
    assert unknown.isError and "Unknown tool" in unknown.content[0].text


async def test_per_session_allow_list() -> None:
    with serve_app_in_thread(app_for_class(ReadOnlyCounter, "counter", expose_tools_over_mcp=True)) as url:
        limited, _ = seed(url, {**ROW, "read_only": True})
        listed, read, write = await mcp_session_call(
            url, limited["mcp"]["headers"], ("get_counter_value", {}), ("increment_counter", {"count": 1})
        )
        assert [tool.name for tool in listed.tools] == ["get_counter_value"]
        assert read.structuredContent == {"count": 3}
        assert write.isError and "not allowed" in write.content[0].text
        free, _ = seed(url, ROW)
        listed, write = await mcp_session_call(url, free["mcp"]["headers"], ("increment_counter", {"count": 1}))
        assert len(listed.tools) == 2 and not write.isError


async def test_typed_seed_advertises_resources_tools(counter_url: str) -> None:
    typed = {
        "resources_session_id": "mcp-typed-1",
        "episode_id": {"rollout_id": "r1", "attempt": 0},
        "task_id": {"taskset": "counter", "task_id": "0"},
        "task_data": ROW,
    }
    answer = httpx.post(f"{counter_url}/seed_session", json=typed).json()
    parsed = ResourcesSeedSessionResponse.model_validate(answer)  # exactly NeMo Gym's keys
    assert parsed.resources_tools is not None and parsed.resources_session_id == "mcp-typed-1"
    _, value = await mcp_session_call(counter_url, parsed.resources_tools.headers, ("get_counter_value", {}))
    assert value.structuredContent == {"count": 3}


async def test_verify_scores_mcp_namespaced_names_as_bare_ones() -> None:
    with serve_app_in_thread(app_for("example_single_tool_call", expose_tools_over_mcp=True)) as url:
        response = make_response(text="Cold.", calls=[("mcp__example_single_tool_call__get_weather", {"city": "Oslo"})])
        verified = httpx.post(f"{url}/verify", json={"responses_create_params": {"input": "x"}, "response": response})
    body = verified.json()
    assert body["reward"] == 1.0
    # The echoed trajectory keeps the name the model emitted.
    assert body["response"]["output"][0]["name"] == "mcp__example_single_tool_call__get_weather"


def test_servers_without_the_flag_serve_no_mcp(counter_url: str) -> None:
    with serve_app_in_thread(app_for("example_session_state_mgmt")) as url:
        seeded, _ = seed(url, ROW)
        assert "mcp" not in seeded
        assert httpx.post(f"{url}/mcp", json={}).status_code == 404


async def test_mcp_tools_chooses_what_is_exposed() -> None:
    with serve_app_in_thread(app_for_class(IncrementOnlyOverMCP, "counter", expose_tools_over_mcp=True)) as url:
        seeded, _ = seed(url, ROW)
        listed, hidden = await mcp_session_call(url, seeded["mcp"]["headers"], ("get_counter_value", {}))
    assert [tool.name for tool in listed.tools] == ["increment_counter"]
    assert hidden.isError and "Unknown tool" in hidden.content[0].text


MCP_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


def test_deeply_nested_json_is_a_parse_error_not_a_500(counter_url: str) -> None:
    seeded, _ = seed(counter_url, ROW)
    nested = "[" * 5000 + "]" * 5000
    body = (
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", '
        f'"params": {{"name": "increment_counter", "arguments": {{"count": {nested}}}}}}}'
    )
    answered = httpx.post(f"{counter_url}/mcp", content=body, headers={**MCP_HEADERS, **seeded["mcp"]["headers"]})
    assert answered.status_code == 400, answered.text  # was 500, with a RecursionError traceback in the log
    assert answered.json()["error"]["code"] == -32700
    assert "Parse error" in answered.json()["error"]["message"]
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    assert httpx.post(f"{counter_url}/mcp", json=ping, headers=MCP_HEADERS).status_code == 200  # still serving


async def test_an_unknown_tool_lists_only_the_sessions_allowed_tools() -> None:
    with serve_app_in_thread(app_for_class(ReadOnlyCounter, "counter", expose_tools_over_mcp=True)) as url:
        limited, _ = seed(url, {**ROW, "read_only": True})
        _, unknown = await mcp_session_call(url, limited["mcp"]["headers"], ("launch_rockets", {}))
    text = unknown.content[0].text
    assert unknown.isError and "Unknown tool" in text
    assert "get_counter_value" in text and "increment_counter" not in text  # was every tool of the server
