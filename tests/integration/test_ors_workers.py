"""ORS sessions over ``ngym run NAME --workers 2`` (sessions in each process, HAProxy in front): every request of an
ORS session reaches the worker that seeded it, as a NeMo Gym rollout's requests do (routed by ``X-Session-ID``)."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from ngym.child_server import free_port
from tests.integration.conftest import VENV_BIN

HAPROXY = shutil.which("haproxy") or shutil.which("/usr/sbin/haproxy")
pytestmark = pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (apt-get install haproxy)")


def _answer(response: httpx.Response) -> Any:
    data = [line[6:] for line in response.text.split("\r\n") if line.startswith("data: ")]
    return json.loads("".join(data[1:]))


def ors_rollout(url: str, i: int, steps: int = 3) -> dict[str, Any]:
    """One counter rollout over ORS through the proxy (the SDK's requests, one by one)."""
    with httpx.Client(base_url=f"{url}/ors", timeout=60) as http:
        opened = http.post("/create_session", headers={"accept": "text/event-stream"})
        sid = {"x-session-id": opened.text.split("\r\n")[1][6:]}
        row = {"responses_create_params": {"input": "count"}, "initial_count": i, "expected_count": i + steps}
        created = http.post("/create", json={"task_spec": row}, headers=sid)
        workers = {created.headers.get("x-ngym-worker")}
        statuses = [created.status_code]
        for _ in range(steps):
            step = http.post("/call", json={"name": "increment_counter", "input": {"count": 1}}, headers=sid)
            workers.add(step.headers.get("x-ngym-worker"))
            statuses.append(step.status_code)
        done = http.post("/call", json={"name": "submit_answer", "input": {"answer": ""}}, headers=sid)
        workers.add(done.headers.get("x-ngym-worker"))
        http.post("/delete", headers=sid)
        return {
            "workers": workers,
            "statuses": statuses,
            "output": _answer(done) if done.status_code == 200 else done.text,
        }


def test_ors_sessions_stay_on_their_worker(serve) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    served = serve(
        [str(VENV_BIN / "ngym"), "run", "example_session_state_mgmt", "--workers", "2", "--port", str(port)], port
    )
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: ors_rollout(served.url, i), range(24)))
    assert all(set(r["statuses"]) == {200} and r["output"]["output"]["reward"] == 1.0 for r in results), results
    assert all(len(r["workers"]) == 1 for r in results)  # each session on one worker
    assert set().union(*(r["workers"] for r in results)) == {"w0", "w1"}  # and both workers served sessions
