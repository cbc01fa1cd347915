"""What an episode of the OpenEnv and ORS fronts holds in the server (its trajectory) is bounded by the server's
budgets (``ngym.server.fronts.held``), and the episode is still verified.

Before, every call was kept whole, the ones the tool's route refused for their size included: 30 refused 8 MB
steps over the OpenEnv front held 276 MB in one episode, and a trajectory past ``max_request_body_bytes`` made its
own verify a 413, so the episode could not be scored.
"""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from ngym.server.fronts.openenv import MOUNT_PATH
from ngym.testing import app_for, serve_in_process
from tests.unit.test_ors_front import ORS

#: a session may send 1 MB; a verify body is at most 1.5 MB; one call at most 400 KB
LIMITS: dict[str, Any] = {
    "max_session_tool_bytes": 1_000_000,
    "max_request_body_bytes": 1_500_000,
    "max_tool_call_bytes": 400_000,
}
PAD = "x" * 300_000  # each call's arguments: about 300 KB, so the fourth would pass 1 MB


async def test_an_ors_episode_holds_at_most_its_budget_and_is_still_scored() -> None:
    async with serve_in_process(app_for("example_session_state_mgmt", **LIMITS)) as http:
        ors = ORS(http)
        spec = {"responses_create_params": {"input": "count"}, "initial_count": 0, "expected_count": 3}
        sid = await ors.session(task_spec=spec)
        answers = [await ors.call(sid, "increment_counter", {"count": 1, "pad": PAD}) for _ in range(6)]
        assert all(a.get("ok", True) is not False for a in answers[:3]), answers[:3]
        for refused in answers[3:]:  # not run and not kept: the trajectory stays within the budget
            assert refused["ok"] is False and "max_session_tool_bytes" in refused["error"], refused
            assert "not run" in refused["error"]
        submitted = await ors.call(sid, "submit_answer", {"answer": "3"})
        assert submitted["output"]["reward"] == 1.0, submitted  # verified (it was a 413: no reward)
        await ors.delete(sid)


def test_an_openenv_episode_keeps_no_refused_call_and_is_still_verified() -> None:
    app = app_for("example_single_tool_call", **LIMITS)
    with TestClient(app) as client, client.websocket_connect(f"{MOUNT_PATH}/ws") as socket:
        socket.send_json({"type": "reset", "data": {"task_index": 0}})
        assert socket.receive_json()["type"] == "observation"
        big = {"tool_name": "get_weather", "arguments": {"city": "y" * 500_000}}
        for _ in range(8):  # each past max_tool_call_bytes: refused, never kept
            socket.send_json({"type": "step", "data": big})
            error = socket.receive_json()["data"]["observation"]["error"]
            assert "max_tool_call_bytes" in error["message"] and "not run" in error["message"], error
        socket.send_json({"type": "step", "data": {"tool_name": "get_weather", "arguments": {"city": "Oslo"}}})
        assert socket.receive_json()["data"]["observation"]["error"] is None
        socket.send_json({"type": "step", "data": {"message": "It is cold in Oslo."}})
        final = socket.receive_json()["data"]
        assert final["done"] is True and final["reward"] is not None, final  # the verify body fit (it was a 413)
