"""The protocol fronts under junk (``make fuzz``): ``ngym run example_session_state_mgmt --workers 2`` behind its
real HAProxy, idle ORS sessions and OpenEnv episodes held between HTTP requests beside a flood of junk aimed at
the fronts: ``openenv/session/create`` and ``/ors/create_session`` without end, unknown, malformed and foreign
session ids, two episode cookies, ``session_id`` twice in one MCP object, tools of episodes nobody holds.

Whatever the junk, every idle ORS session and OpenEnv episode goes on and is scored right on the worker that opened
it (30 ``openenv/session/create`` requests used to end 6 of 6 held episodes at ``max_sessions=20``). The budget is
``NGYM_FUZZ_FRONTS`` junk requests (default 4,000), the seed ``NGYM_FUZZ_SEED``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from typing import Any

import pytest

from tests.support.affinity_probes import affine_server, flood, new_client

HAPROXY = shutil.which("haproxy") or shutil.which("/usr/sbin/haproxy")
pytestmark = [
    pytest.mark.fuzz,
    pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (apt-get install haproxy)"),
]

JUNK = int(os.environ.get("NGYM_FUZZ_FRONTS", "4000"))
SEED = int(os.environ.get("NGYM_FUZZ_SEED", "32"))
EPISODE = "ngym-openenv-episode"
ROW = {"responses_create_params": {"input": "count"}, "initial_count": 0, "expected_count": 2}
INCREMENT = {"tool_name": "increment_counter", "arguments": {"count": 1}}


def _rpc(method: str, **params: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()


def junk(i: int) -> tuple[str, str, dict[str, str], bytes]:
    local = random.Random(SEED * 100_003 + i)
    token = "".join(local.choice("abcdef0123456789") for _ in range(32))
    json_type = {"content-type": "application/json"}
    kind = i % 9
    if kind == 0:
        return "POST", "/openenv/mcp", json_type, _rpc("openenv/session/create")
    if kind == 1:
        return "POST", "/ors/create_session", {}, b""
    if kind == 2:  # a tool of an ORS session nobody holds (an unknown id, or a malformed one)
        sid = local.choice([token, token + ";x", "x" * 300])
        return "POST", "/ors/call", {**json_type, "x-session-id": sid}, b'{"name": "increment_counter", "input": {}}'
    if kind == 3:  # a create with an id that is not an id
        sid = local.choice(["a b", "<x>", "y" * 400])
        return "POST", "/ors/create", {**json_type, "x-session-id": sid}, b'{"split": "example", "index": 0}'
    if kind == 4:
        return (
            "POST",
            "/openenv/step",
            {**json_type, "cookie": f"{EPISODE}={token}"},
            json.dumps({"action": INCREMENT}).encode(),
        )
    if kind == 5:  # two episode cookies: 400
        cookie = f"{EPISODE}={token}; {EPISODE}={token[::-1]}"
        return "POST", "/openenv/step", {**json_type, "cookie": cookie}, json.dumps({"action": INCREMENT}).encode()
    if kind == 6:
        return "POST", "/openenv/mcp", json_type, _rpc("tools/call", name="increment_counter", session_id=token)
    if kind == 7:  # session_id twice in one object
        body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"session_id":"%s","session_id":"%s"}}'
        return "POST", "/openenv/mcp", json_type, (body % (token, token[::-1])).encode()
    return "POST", "/openenv/mcp", json_type, _rpc("openenv/session/close", session_id=token)


def test_no_junk_on_the_fronts_ends_an_idle_ors_session_or_openenv_episode() -> None:
    with affine_server(2, "max_sessions=60", "session_ttl_seconds=3600") as served, new_client() as http:
        url = served.url
        sessions = []
        for _ in range(8):
            opened = http.post(f"{url}/ors/create_session")
            sid = next(line[6:].strip() for line in opened.text.splitlines() if line.startswith("data: "))
            created = http.post(f"{url}/ors/create", headers={"x-session-id": sid}, json={"task_spec": ROW})
            assert created.status_code == 200, created.text
            sessions.append(sid)
        episodes = []
        for _ in range(8):
            reset = http.post(f"{url}/openenv/reset", json={"row": ROW})
            assert reset.status_code == 200, reset.text
            episodes.append({"cookie": f"{EPISODE}={reset.cookies[EPISODE]}"})
        held = [http.post(f"{url}/openenv/mcp", content=_rpc("openenv/session/create")).json() for _ in range(4)]
        held_ids = [answer["result"]["session_id"] for answer in held]
        for session_id in held_ids:
            called = http.post(
                f"{url}/openenv/mcp", content=_rpc("tools/call", name="get_counter_value", session_id=session_id)
            )
            assert "result" in called.json(), called.text

        statuses = flood(url, JUNK, junk)
        assert sum(statuses.values()) == JUNK
        assert not {s for s in statuses if s >= 500}, statuses
        assert statuses.get(400, 0) >= JUNK // 9  # two episode cookies: always refused

        rewards = []
        for sid in sessions:
            header = {"x-session-id": sid}
            for _ in range(2):
                http.post(f"{url}/ors/call", headers=header, json={"name": "increment_counter", "input": {"count": 1}})
            done = http.post(
                f"{url}/ors/call", headers=header, json={"name": "submit_answer", "input": {"answer": "2"}}
            )
            last = [line[6:] for line in done.text.splitlines() if line.startswith("data: {")][-1]
            rewards.append(("ors", json.loads(last)["output"]["reward"]))
        for cookie in episodes:
            for _ in range(2):
                http.post(f"{url}/openenv/step", headers=cookie, json={"action": INCREMENT})
            done = http.post(f"{url}/openenv/step", headers=cookie, json={"action": {"message": "2"}})
            rewards.append(("openenv", done.json().get("reward") if done.status_code == 200 else done.text))
        assert rewards == [("ors", 1.0)] * 8 + [("openenv", 1.0)] * 8, rewards
        for session_id in held_ids:
            called = http.post(
                f"{url}/openenv/mcp", content=_rpc("tools/call", name="get_counter_value", session_id=session_id)
            )
            assert "result" in called.json(), called.text
