"""Per-session budgets (ngym.server.pipeline.session_budget) on this environment, whose state grows with every
email a session sends: one 30 MB argument, a session past its byte budget, an answer past its cap, with the
server's memory measured in a real `ngym run` process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from workplace_assistant.app import WorkplaceAssistantResourcesServer
from workplace_assistant.workspace import SAMPLE_DIR

from ngym.child_server import wait_healthy
from ngym.testing import RolloutClient, app_for_class, serve_in_process

MB = 1024 * 1024


def app_for(**fields):
    return app_for_class(
        WorkplaceAssistantResourcesServer, name="workplace_assistant", data_dir=str(SAMPLE_DIR), **fields
    )


def email(size: int, n: int = 0) -> dict:
    return {"recipient": f"p{n}@x.io", "subject": f"s{n}", "body": "b" * size}


async def test_a_30_mb_argument_is_413_naming_the_setting_and_the_session_goes_on() -> None:
    async with serve_in_process(app_for()) as http:
        client = RolloutClient(http)
        await client.call("/seed_session", {})
        r = await client.post("/email_send_email", email(30 * MB))
        assert r.status_code == 413, r.text[:300]
        assert "the limit is 4194304 bytes (server setting max_tool_call_bytes)" in r.json()["detail"]
        assert (await client.call("/email_send_email", email(10)))["output"] == "Email sent successfully."


async def test_a_streamed_body_without_a_length_is_cut_at_the_cap() -> None:
    async with serve_in_process(app_for(max_tool_call_bytes=1 * MB)) as http:
        client = RolloutClient(http)
        await client.call("/seed_session", {})
        data = json.dumps(email(3 * MB)).encode()

        async def chunks() -> AsyncIterator[bytes]:
            for i in range(0, len(data), 64 * 1024):
                yield data[i : i + 64 * 1024]

        r = await http.post(
            "/email_send_email", content=chunks(), headers={"cookie": client.cookie, "content-type": "application/json"}
        )
        assert r.status_code == 413 and "max_tool_call_bytes" in r.json()["detail"], r.text[:300]


async def test_a_session_past_its_budget_is_413_its_neighbours_are_not() -> None:
    async with serve_in_process(app_for(max_session_tool_bytes=2 * MB)) as http:
        greedy, neighbour = RolloutClient(http), RolloutClient(http)
        await greedy.call("/seed_session", {})
        await neighbour.call("/seed_session", {})
        statuses = [(await greedy.post("/email_send_email", email(300 * 1024, n))).status_code for n in range(10)]
        assert statuses == [200] * 6 + [413] * 4, statuses
        r = await greedy.post("/email_send_email", email(300 * 1024))
        assert r.status_code == 413 and "server setting max_session_tool_bytes" in r.json()["detail"]
        assert "seed a new session" in r.json()["detail"]
        assert (await neighbour.call("/email_send_email", email(300 * 1024)))["output"] == "Email sent successfully."
        health = (await http.get("/health")).json()["session_bytes"]
        assert health["sessions"] == 2 and health["limit"] == 2 * MB
        assert 6 * 300 * 1024 < health["largest"] <= 2 * MB
        # verify is not a tool call: a session at its budget is still scored
        verified = await greedy.post("/verify", {"responses_create_params": {"input": "x"}, "ground_truth": [],
                                                 "response": {"id": "r", "created_at": 0, "model": "m",
                                                              "object": "response", "output": [],
                                                              "parallel_tool_calls": False, "tool_choice": "auto",
                                                              "tools": []}})  # fmt: skip
        assert verified.status_code == 200, verified.text[:300]


async def test_an_answer_past_its_cap_is_413_naming_the_setting() -> None:
    async with serve_in_process(app_for(max_tool_answer_bytes=64 * 1024)) as http:
        client = RolloutClient(http)
        await client.call("/seed_session", {})
        for n in range(3):
            body = {"recipient": f"p{n}@x.io", "subject": "zqxj", "body": "zqxj " * 8000}
            await client.call("/email_send_email", body)
        r = await client.post("/email_search_emails", {"query": "zqxj"})
        assert r.status_code == 413 and "server setting max_tool_answer_bytes" in r.json()["detail"], r.text[:300]
        assert len(r.content) < 1024


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss_kb(pid: int) -> int:
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1])


def _post_declared(port: int, path: str, cookie: str, size: int) -> tuple[int, str]:
    """A POST declaring `size` bytes of body, of which only the first 64 KiB are sent: the server must answer from
    the declared length alone."""
    head = (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncookie: {cookie}\r\n"
        f"content-length: {size}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head + b'{"recipient": "a@b.io", "subject": "s", "body": "' + b"b" * 65536)
        reply = b""
        while b"\r\n\r\n" not in reply or len(reply.split(b"\r\n\r\n", 1)[1]) < 20:
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
    status = int(reply.split(b" ", 2)[1])
    return status, reply.split(b"\r\n\r\n", 1)[1].decode(errors="replace")


def test_twenty_30_mb_sends_leave_the_server_memory_where_it_was() -> None:
    port = _free_port()
    ngym = str(Path(sys.executable).parent / "ngym")
    env = {**os.environ, "NGYM_WORKBENCH_DIR": str(SAMPLE_DIR)}
    server = subprocess.Popen(
        [ngym, "run", "workplace_assistant", "--port", str(port), "max_session_tool_bytes=8388608"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, server, 90)
        with httpx.Client(base_url=url, timeout=60) as http:
            seeded = http.post("/seed_session", json={})
            cookie = seeded.headers["set-cookie"].split(";", 1)[0]
            before = _rss_kb(server.pid)
            for _ in range(20):
                status, body = _post_declared(port, "/email_send_email", cookie, 30 * MB)
                assert status == 413 and "max_tool_call_bytes" in body, body
            # past the session budget with calls under the argument cap: 8 MiB, then 413
            statuses = []
            for n in range(20):
                r = http.post("/email_send_email", json=email(1 * MB, n), headers={"cookie": cookie})
                statuses.append(r.status_code)
            assert statuses[:7] == [200] * 7 and set(statuses[8:]) == {413}, statuses
            grown_mb = (_rss_kb(server.pid) - before) / 1024
            print(f"server RSS {before / 1024:.0f} MB before, grew {grown_mb:.1f} MB")
            assert grown_mb < 64, f"RSS grew {grown_mb:.0f} MB"
            other = httpx.post(f"{url}/seed_session", json={}).headers["set-cookie"].split(";", 1)[0]
            r = http.post("/email_send_email", json=email(10), headers={"cookie": other})
            assert r.json() == {"output": "Email sent successfully."}
    finally:
        server.terminate()
        server.wait(timeout=30)


async def test_rows_a_session_adds_are_bounded_even_by_tiny_calls() -> None:
    """A forward shares the original's text, so a session could grow its databases with calls of a few bytes:
    the rows it adds are counted (max_session_rows); past them a write is 413 and reads go on."""
    async with serve_in_process(app_for(max_session_rows=3)) as http:
        client, neighbour = RolloutClient(http), RolloutClient(http)
        await client.call("/seed_session", {})
        await neighbour.call("/seed_session", {})
        statuses = [(await client.post("/email_send_email", email(10, n))).status_code for n in range(5)]
        assert statuses == [200, 200, 200, 413, 413], statuses
        r = await client.post("/email_forward_email", {"email_id": "00000001", "recipient": "a@b.io"})
        assert r.status_code == 413 and "server setting max_session_rows" in r.json()["detail"]
        assert (await client.post("/email_search_emails", {"query": "s1"})).status_code == 200
        assert (await neighbour.call("/email_send_email", email(10)))["output"] == "Email sent successfully."
