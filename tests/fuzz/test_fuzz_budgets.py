"""Per-session budgets behind HAProxy (``make fuzz``): ``ngym run example_session_state_mgmt --workers 2``.

Every body the server refuses by its declared size (one tool call past ``max_tool_call_bytes``, a session past
``max_session_tool_bytes``, any request past ``max_request_body_bytes``) must reach the client as the 413 naming
the setting. A worker that closed the connection with the body unread made the kernel reset it, and HAProxy, still
relaying the body, lost the answer: the client got "server disconnected" for about a third of these.
"""

from __future__ import annotations

import shutil

import httpx
import pytest

from tests.support.affinity_probes import affine_server

HAPROXY = shutil.which("haproxy") or shutil.which("/usr/sbin/haproxy")
pytestmark = [
    pytest.mark.fuzz,
    pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (apt-get install haproxy)"),
]

SESSION_BUDGET = 3_000_000


def _post(url: str, size: int, cookie: str = "") -> tuple[int, str]:
    """A counter tool call padded to ``size`` bytes: its status and text (0 and the error when no answer came)."""
    body = b'{"count": 1, "pad": "' + b"a" * size + b'"}'
    headers = {"content-type": "application/json", **({"cookie": cookie} if cookie else {})}
    with httpx.Client(timeout=120) as client:  # a connection of its own, as a refused one is closed
        try:
            answer = client.post(f"{url}/increment_counter", content=body, headers=headers)
        except httpx.TransportError as exc:
            return 0, repr(exc)
        return answer.status_code, answer.text


def test_every_413_for_a_declared_size_reaches_the_client_through_haproxy() -> None:
    with affine_server(2, f"max_session_tool_bytes={SESSION_BUDGET}") as served:
        refused: list[tuple[str, int, str]] = []  # (the setting the answer must name, status, text)
        for size, setting in ((5_000_000, "max_tool_call_bytes"), (40_000_000, "max_request_body_bytes")):
            refused += [(setting, *_post(served.url, size)) for _ in range(6)]
        for _ in range(3):
            seeded = httpx.post(f"{served.url}/seed_session", json={}, timeout=60)
            cookie = seeded.headers["set-cookie"].split(";", 1)[0]
            # 1 MB each: two fit the 3 MB budget, the third passes it, and so does every later one
            assert [_post(served.url, 1_000_000, cookie)[0] for _ in range(2)] == [200, 200]
            refused += [("max_session_tool_bytes", *_post(served.url, 1_000_000, cookie)) for _ in range(3)]
        wrong = [(name, status, text[:200]) for name, status, text in refused if status != 413 or name not in text]
        assert not wrong, f"{len(wrong)} of {len(refused)} refusals did not reach the client as the 413: {wrong}"
