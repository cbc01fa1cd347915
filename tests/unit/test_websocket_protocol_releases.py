"""ngym's WebSocket protocol takes over only the uvicorn releases whose internals it was checked against; any other
release serves WebSockets with uvicorn's own protocol (OpenEnv's front then reads messages through Starlette)."""

from __future__ import annotations

import pytest
import uvicorn

from ngym.server.pipeline import websocket_protocol


@pytest.mark.parametrize(
    ("version", "fits"),
    [("0.35.0", False), ("0.52.0", False), ("0.52.4", True), ("0.54.0", True), ("0.55.0", False), ("1.0.0", False)],
)
def test_only_checked_releases_are_taken_over(monkeypatch: pytest.MonkeyPatch, version: str, fits: bool) -> None:
    monkeypatch.setattr(uvicorn, "__version__", version)
    assert websocket_protocol._uvicorn_fits() is fits


def test_release_numbers_are_read_up_to_what_is_not_a_number() -> None:
    assert websocket_protocol._release("0.54.0") == (0, 54, 0)
    assert websocket_protocol._release("0.55.0rc1") == (0, 55, 0)
    assert websocket_protocol._release("1.dev0") == (1,)


def test_another_release_gets_uvicorns_own_protocol() -> None:
    chosen = websocket_protocol.protocol_class()
    if websocket_protocol._uvicorn_fits():
        assert chosen is websocket_protocol.WebSocketProtocol and chosen is not None
    else:
        assert chosen == "auto"
