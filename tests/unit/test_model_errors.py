"""A model that refuses or is not a model: the cause reaches the user (the model's error text; one line naming a
URL without the model API)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli_runs import run_ngym


async def test_a_failed_model_call_carries_the_models_error_text() -> None:
    """math_with_judge's failure_reason read only "ClientResponseError: 400, message='Bad Request'"; why the
    model refused ("no recording for this input") was in the body, which never reached it."""
    import aiohttp
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    pytest.importorskip("nemo_gym")
    from nemo_gym.server_utils import ServerResponseError, raise_for_status

    async def refuse(request: web.Request) -> web.Response:
        return web.json_response({"detail": "no recording for this input"}, status=400)

    app = web.Application()
    app.router.add_post("/v1/responses", refuse)
    async with (
        TestServer(app) as server,
        aiohttp.ClientSession() as session,
        session.post(server.make_url("/v1/responses"), json={}) as response,
    ):
        with pytest.raises(ServerResponseError) as raised:
            await raise_for_status(response)
    assert raised.value.status == 400 and "no recording for this input" in str(raised.value)
    assert str(raised.value).startswith("400, message='Bad Request: ")


@pytest.fixture
def not_a_model_server() -> Iterator[str]:
    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(404)
            self.end_headers()

        do_POST = do_GET  # noqa: N815

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()


def test_a_model_url_without_the_model_api_is_one_line_naming_the_cause(
    tmp_path: Path, not_a_model_server: str
) -> None:
    done = run_ngym("rollout", "example_single_tool_call", "--model-url", not_a_model_server, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "/v1/models found no model (HTTP 404: no /models there)" in done.stderr
    assert "OpenAI-compatible" in done.stderr and "no model name" not in done.stdout + done.stderr


def test_a_model_url_at_a_server_without_post_names_the_cause_with_a_model_given(tmp_path: Path) -> None:
    """A static file server (HTTP 501 to every POST) given with --model: each failure says there is no POST
    .../responses there, not only the server's error page."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        done = run_ngym(
            "rollout",
            "example_single_tool_call",
            "--model-url",
            url,
            "--model",
            "m",
            "--max-retries",
            "0",
            cwd=tmp_path,
        )
    finally:
        server.shutdown()
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"(no POST {url}/responses there: not an OpenAI Responses API server" in done.stdout + done.stderr
