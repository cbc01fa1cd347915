"""The server over HTTP (in-process ASGI, real worker processes): tools, verify, 503 cap, and reaping on every path."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from math_with_code.sandbox import SandboxError

from ngym.testing import RolloutClient, app_for, serve_in_process

ROW = {"responses_create_params": {"input": "What is 1/2 as a decimal?"}, "expected_result": "0.5"}


def worker_processes(app) -> list[int]:
    """Processes running as one of the server's worker uids (zombies included)."""
    pool = app.state.math_with_code._pool
    assert pool is not None
    low, high = pool.uid_base, pool.uid_base + pool.max_workers
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                uid_line = next(
                    line for line in Path(entry.path, "status").read_text().splitlines() if line.startswith("Uid:")
                )
            except (OSError, StopIteration):
                continue
            if low <= int(uid_line.split()[1]) < high:
                found.append(int(entry.name))
    return found


def response_with(text: str) -> dict:
    return {
        "id": "resp_t",
        "created_at": 0.0,
        "model": "m",
        "object": "response",
        "output": [
            {
                "type": "message",
                "id": "m",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


def make_app(**fields):
    # no numpy/scipy preload: these tests are about the server, and start faster without it
    return app_for("math_with_code", max_workers=3, max_execution_time=2, preload_modules=["math"], **fields)


async def test_sessions_keep_their_own_state_and_verify_reaps_the_worker() -> None:
    app = make_app()
    async with serve_in_process(app) as http:
        a, b = RolloutClient(http), RolloutClient(http)
        await a.call("/seed_session", ROW)
        await b.call("/seed_session", ROW)
        assert (await a.call("/execute_python", {"code": "half = 1 / 2"}))["success"] is True
        out = await a.call("/execute_python", {"code": "print('half is', half)\nhalf"})
        assert out == {"success": True, "stdout": "half is 0.5\n", "stderr": "", "error_message": None, "result": "0.5"}
        out = await b.call("/execute_python", {"code": "half"})
        assert out["success"] is False and out["error_message"] == "NameError: name 'half' is not defined"
        assert len(worker_processes(app)) == 4  # a supervisor and a user-code process each
        verified = await a.call("/verify", {**ROW, "response": response_with(r"So \boxed{\frac{1}{2}}.")})
        assert (verified["reward"], verified["accuracy"], verified["extracted_answer"]) == (1.0, True, r"\frac{1}{2}")
        assert len(worker_processes(app)) == 2  # a's worker was reaped after verify
        await b.call("/close_session", {})
        assert worker_processes(app) == []


VERIFY_CASES = [
    (r"\boxed{\frac{1}{2}}", "0.5", 1.0, r"\frac{1}{2}"),
    (r"\boxed{2\sqrt{2}}", r"\sqrt{8}", 1.0, r"2\sqrt{2}"),
    (r"\boxed{1} no wait \boxed{\frac{\sqrt{2}}{2}}", r"\frac{1}{\sqrt{2}}", 1.0, r"\frac{\sqrt{2}}{2}"),
    ("The answer is 0.5", "0.5", 0.0, None),
    (r"\boxed{0.6}", "0.5", 0.0, "0.6"),
]


async def test_verify_rewards() -> None:
    async with serve_in_process(make_app()) as http:
        for text, expected, reward, extracted in VERIFY_CASES:
            client = RolloutClient(http)
            row = {**ROW, "expected_result": expected}
            await client.call("/seed_session", row)
            verified = await client.call("/verify", {**row, "response": response_with(text)})
            assert (verified["reward"], verified["extracted_answer"]) == (reward, extracted), text
            assert verified["accuracy"] is (reward == 1.0)


async def test_numeric_expected_result_and_verify_without_a_session() -> None:
    async with serve_in_process(make_app()) as http:
        client = RolloutClient(http)
        verified = await client.call(
            "/verify", {**ROW, "expected_result": 32, "response": response_with(r"\boxed{32}")}
        )
        assert verified["reward"] == 1.0 and verified["expected_result"] == "32"


async def test_execute_without_a_seeded_session_is_a_409() -> None:
    async with serve_in_process(make_app()) as http:
        response = await RolloutClient(http).post("/execute_python", {"code": "1"})
        assert response.status_code == 409


async def test_worker_cap_gives_503_with_retry_after() -> None:
    app = make_app()
    async with serve_in_process(app) as http:
        clients = [RolloutClient(http) for _ in range(4)]
        for client in clients[:3]:
            await client.call("/seed_session", ROW)
        refused = await clients[3].post("/seed_session", ROW)
        assert refused.status_code == 503 and int(refused.headers["retry-after"]) > 0
        assert "workers are in use" in refused.text
        await clients[0].call("/close_session", {})
        await clients[3].call("/seed_session", ROW)
        assert (await clients[3].call("/execute_python", {"code": "2 + 2"}))["result"] == "4"


async def test_idle_sessions_expire_and_their_workers_are_reaped() -> None:
    app = make_app(session_ttl_seconds=0.5)
    async with serve_in_process(app) as http:
        client = RolloutClient(http)
        await client.call("/seed_session", ROW)
        assert worker_processes(app)  # the supervisor (it forks the user-code process once the seed is answered)
        for _ in range(100):
            await asyncio.sleep(0.05)
            if not worker_processes(app):
                break
        assert worker_processes(app) == []


async def test_shutdown_reaps_every_worker() -> None:
    app = make_app()
    async with serve_in_process(app) as http:
        for _ in range(3):
            client = RolloutClient(http)
            await client.call("/seed_session", ROW)
            await client.call(
                "/execute_python", {"code": "import os\nif os.fork() == 0:\n    import time; time.sleep(60)"}
            )
        pool = app.state.math_with_code._pool
        zygote = pool.zygote_pid
        assert len(worker_processes(app)) == 6
    assert worker_processes(app) == []
    assert not Path(f"/proc/{zygote}").exists()


async def test_sandbox_introspection() -> None:
    async with serve_in_process(make_app()) as http:
        info = (await http.get("/sandbox")).json()
        assert info["max_workers"] == 3 and info["limits"]["wall_time_s"] == 2
        if os.geteuid() == 0:
            assert info["enforcement"]["unprivileged_uid"] is True


async def test_oversized_code_and_a_worker_that_cannot_start_give_clear_messages() -> None:
    app = make_app(max_code_chars=100)
    async with serve_in_process(app) as http:
        client = RolloutClient(http)
        await client.call("/seed_session", ROW)
        out = await client.call("/execute_python", {"code": "x = 1  # " + "a" * 200})
        assert out["success"] is False and "the limit is 100 characters" in out["error_message"]
        pool = app.state.math_with_code._pool

        async def broken(slot: int):
            raise SandboxError("the Python forkserver failed: test")

        pool._spawn = broken
        refused = await RolloutClient(http).post("/seed_session", ROW)
        assert refused.status_code == 503 and "could not start a Python worker" in refused.text
        assert int(refused.headers["retry-after"]) > 0
        assert pool.active == 1  # the failed seed gave its slot back
