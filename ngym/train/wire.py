"""One rollout's session on one environment over NeMo Gym's wire, as a trainer's environment slot drives it.

``seed`` (``POST /seed_session`` with the dataset row) → ``call`` (``POST /<tool>``, any number) → ``verify``
(``POST /verify`` with the row and the finished Responses-format trajectory) → ``close`` (``POST /close_session``).
The session cookie is copied by hand from every answer onto the next request, as NeMo Gym's agents do, so many
sessions share one connection pool and never one another's state. A verify that is masked (``mask_sample``: the
session was lost, a judge failed) or that cannot be had at all is *no reward* (``None``), never 0.0.
"""

from __future__ import annotations

import logging
import threading
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import httpx

log = logging.getLogger("ngym.train")

#: seconds for one request (a tool or a verify may run a sandbox or a judge)
DEFAULT_TIMEOUT = 120.0

_clients: dict[tuple[str, float], httpx.Client] = {}
_clients_lock = threading.Lock()


class WireError(RuntimeError):
    """The environment cannot be reached, or refused to seed a session (the message says which and why)."""


def shared_client(base_url: str, timeout: float = DEFAULT_TIMEOUT) -> httpx.Client:
    """One connection pool per environment URL, shared by all its sessions (each carries its own cookie)."""
    key = (base_url.rstrip("/"), timeout)
    with _clients_lock:
        client = _clients.get(key)
        if client is None or client.is_closed:
            limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
            # No cookie jar: a jar would carry one session's cookie onto another's requests (each Session carries
            # its own by hand), so the one it has accepts no cookie at all.
            jar = CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))
            client = httpx.Client(base_url=key[0], timeout=timeout, limits=limits, cookies=jar)
            _clients[key] = client
        return client


class Session:
    """One rollout's session on the environment at ``base_url``; not thread-safe (one rollout is sequential)."""

    def __init__(self, base_url: str, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.base_url = base_url.rstrip("/")
        self.http = shared_client(self.base_url, timeout)
        self.cookies: dict[str, str] = {}
        self.open = False

    def _post(self, path: str, body: Any) -> httpx.Response:
        headers = {"cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())} if self.cookies else {}
        response = self.http.post(path, json=body, headers=headers)
        for header in response.headers.get_list("set-cookie"):
            name, _, value = header.split(";", 1)[0].partition("=")
            self.cookies[name.strip()] = value.strip()
        return response

    def seed(self, row: dict[str, Any]) -> dict[str, Any]:
        """Start a new session for ``row`` (a fresh cookie; a still-open previous session is closed first)."""
        if self.open:
            self.close()
        self.cookies = {}
        try:
            response = self._post("/seed_session", row)
        except httpx.HTTPError as exc:
            raise WireError(f"cannot reach the environment at {self.base_url} to seed a session: {exc!r}") from exc
        if response.status_code >= 400:
            raise WireError(f"{self.base_url}/seed_session answered HTTP {response.status_code}: {response.text[:300]}")
        self.open = True
        body = response.json()
        return body if isinstance(body, dict) else {}

    def call(self, tool: str, arguments: dict[str, Any]) -> str:
        """Run one tool; return its answer's body as the model sees it (whatever the status, as NeMo's agents do)."""
        try:
            response = self._post(f"/{tool}", arguments)
        except httpx.TimeoutException as exc:
            return f'{{"error": "tool {tool} timed out: {type(exc).__name__}"}}'
        except httpx.HTTPError as exc:
            raise WireError(f"tool {tool}: cannot reach the environment at {self.base_url}: {exc!r}") from exc
        return response.text

    def verify(self, row: dict[str, Any], response: dict[str, Any]) -> dict[str, Any] | None:
        """``/verify`` the finished trajectory; the verify answer, or None when the environment gave none."""
        try:
            answer = self._post("/verify", {**row, "response": response})
        except httpx.HTTPError as exc:
            log.warning("verify at %s failed (%r): no reward for this rollout", self.base_url, exc)
            return None
        if answer.status_code != 200:
            log.warning(
                "verify at %s answered HTTP %d (%s): no reward for this rollout",
                self.base_url,
                answer.status_code,
                answer.text[:200],
            )
            return None
        body = answer.json()
        return body if isinstance(body, dict) else None

    def close(self) -> None:
        """Close the session (idempotent: verify usually closed it already); best effort."""
        if not self.open:
            return
        self.open = False
        try:
            self._post("/close_session", {})
        except httpx.HTTPError as exc:
            log.warning("close_session at %s failed: %r", self.base_url, exc)


def reward_of(verified: dict[str, Any] | None) -> float | None:
    """The reward a trainer may learn from: None for a missing or masked verify answer, else its ``reward``."""
    if verified is None or verified.get("mask_sample"):
        return None
    reward = verified.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, int | float):
        return None
    return float(reward)
