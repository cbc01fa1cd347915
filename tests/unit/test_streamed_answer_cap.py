"""``max_tool_answer_bytes`` for answers sent without a declared length (``StreamingResponse``, chunked).

A real ``ngym run`` process (uvicorn, HTTP/1.1 chunked encoding) serves an environment whose tool routes stream
their answers: a first chunk past the cap is a 413 naming the setting; a stream that passes the cap after its
status was sent is cut and its connection closed without the last chunk (a client cannot read it as complete),
with one warning in the server's log; answers under the cap stream whole; the server serves on after both.
"""

from __future__ import annotations

import contextlib
import socket
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ngym.child_server import start_environment, stop_process, wait_healthy

CAP = 64 * 1024

APP = textwrap.dedent(
    '''
    """Tool routes that stream their answers without a length."""

    from collections.abc import AsyncIterator
    from typing import Any

    from fastapi import FastAPI
    from fastapi.responses import StreamingResponse

    from ngym import BaseVerifyRequest, BaseVerifyResponse, Domain, SimpleResourcesServer


    class Streamer(SimpleResourcesServer):
        domain = Domain.OTHER

        def setup_webserver(self) -> FastAPI:
            app = super().setup_webserver()

            @app.post("/stream")
            async def stream(body: dict[str, Any]) -> StreamingResponse:
                async def chunks() -> AsyncIterator[bytes]:
                    for _ in range(body["chunks"]):
                        yield b"x" * body["size"]

                return StreamingResponse(chunks(), media_type=body.get("type", "application/octet-stream"))

            return app

        async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
            return BaseVerifyResponse(**body.model_dump(), reward=1.0)
    '''
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    folder = tmp_path_factory.mktemp("streamer")
    (folder / "app.py").write_text(APP)
    port, log = _free_port(), folder / "server.log"
    proc = start_environment(
        f"{folder / 'app.py'}:Streamer", port=port, overrides=[f"max_tool_answer_bytes={CAP}"], log=log
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, 120, log, path="/health")
        yield url, log
    finally:
        stop_process(proc)


@contextlib.contextmanager
def _seeded(url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=30) as client:
        seed = client.post("/seed_session", json={})
        assert seed.status_code == 200, seed.text
        yield client


def test_a_first_streamed_chunk_past_the_cap_is_413_naming_the_setting(server: tuple[str, Path]) -> None:
    url, _ = server
    with _seeded(url) as client:
        r = client.post("/stream", json={"chunks": 1, "size": CAP + 1})
        assert r.status_code == 413, (r.status_code, len(r.content))
        assert "server setting max_tool_answer_bytes" in r.json()["detail"]
        assert client.post("/stream", json={"chunks": 2, "size": 1000}).content == b"x" * 2000


def test_a_stream_passing_the_cap_after_its_status_is_cut_not_completed(server: tuple[str, Path]) -> None:
    url, log = server
    with _seeded(url) as client:
        # 200 chunks of 1 KiB: 200 KiB, past the 64 KiB cap on chunk 65; the status went out with chunk 1
        streamed = {"chunks": 200, "size": 1024}
        received = 0
        # the connection closed before the last chunk
        with pytest.raises(httpx.RemoteProtocolError), client.stream("POST", "/stream", json=streamed) as r:
            assert r.status_code == 200
            for part in r.iter_bytes():
                received += len(part)
        assert received <= CAP
    assert "passed 65536 bytes (server setting max_tool_answer_bytes)" in log.read_text()
    with _seeded(url) as client:  # the server serves on
        assert client.post("/stream", json={"chunks": 64, "size": 1024}).content == b"x" * CAP


def test_a_stream_under_the_cap_streams_whole(server: tuple[str, Path]) -> None:
    url, _ = server
    with _seeded(url) as client, client.stream("POST", "/stream", json={"chunks": 3, "size": 5}) as r:
        assert r.status_code == 200 and "content-length" not in r.headers
        assert r.read() == b"x" * 15


def test_an_event_stream_keeps_its_headers_first_and_is_cut_past_the_cap(server: tuple[str, Path]) -> None:
    url, _ = server
    events = {"chunks": 1, "size": CAP + 1, "type": "text/event-stream"}
    with _seeded(url) as client:
        # an event stream's headers are not held back for its first chunk (an MCP client waits for them), so
        # even a first chunk past the cap is cut after a 200, never delivered whole
        with pytest.raises(httpx.RemoteProtocolError), client.stream("POST", "/stream", json=events) as r:
            assert r.status_code == 200
            r.read()
        whole = client.post("/stream", json={**events, "size": 100})
        assert whole.status_code == 200 and whole.content == b"x" * 100
