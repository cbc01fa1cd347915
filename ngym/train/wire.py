"""NeMo Gym's wire as every trainer binding speaks it: one rollout's session on an ngym environment.

The one client of the wire under ``ngym.train``: TRL's environment class (``ngym.train.trl``), verl's tools and
reward function (``ngym.train.verl``) and SkyRL's environment (``ngym.train.skyrl``) all seed, call, verify and
close through it, so they behave alike (one session per rollout, no shared cookie jar, masked = no reward).

A trainer's tool slot sees the rollout's tool calls and their answers, and maybe the model's final text; the
environment's ``/verify`` wants the finished OpenAI Responses object. A :class:`Rollout` keeps both: the dataset
row, the session cookie, and the ``output`` items in the order NeMo Gym's agent would have written them
(``function_call``, ``function_call_output``, ..., the final ``message``), so the reward a trainer gets is the
reward NeMo's wire gives the same trajectory.

The wire, as NeMo Gym's agents speak it: ``POST /seed_session`` with the row → ``POST /<tool>`` with the arguments
(the answer's body is what the model sees, whatever the status) → ``POST /verify`` with the row and the response
→ ``POST /close_session``. The cookie is copied by hand from every answer onto the next request, so many rollouts
share one connection pool and never one another's state. :class:`AsyncWire` (verl's tools are coroutines) and
:class:`SyncWire` (TRL's environment methods, SkyRL's ``step``, verl's reward function; :func:`sync_wire` shares
one per URL) are the two transports; both only move bytes, the logic is :class:`Rollout`'s. A trainer that builds
the trajectory itself (TRL hands its whole completion to the reward function) passes it to ``verify`` as
``response``.

A masked verify (``mask_sample``: the session was lost, a judge failed) or a verify that cannot be had is **no
reward**: :func:`reward_of` returns ``None``, never 0.0. This module imports only the standard library and ``httpx``.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import httpx

log = logging.getLogger("ngym.train")

#: seconds for one request (a tool or a verify may run a sandbox or a judge)
DEFAULT_TIMEOUT = 120.0
#: keys of a recorded rollout line (or of a trainer's row) that are not part of the dataset row NeMo's wire sends
NOT_ROW_KEYS = frozenset({"response", "reward"})


class WireError(RuntimeError):
    """The environment cannot be reached, or refused to seed a session (the message says which and why).

    ``status``: the HTTP status of the refusal, 0 when the environment could not be reached. ``unavailable``: the
    environment is down or full (unreachable, or a 5xx such as a fleet front's 503 for a dead unit), not a
    refusal of this row; a trainer may carry on without this rollout's reward.
    """

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status

    @property
    def unavailable(self) -> bool:
        return self.status == 0 or self.status >= 500


def dataset_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The dataset row NeMo's wire seeds and verifies with: ``row`` without a recorded ``response``/``reward``."""
    return {k: v for k, v in row.items() if k not in NOT_ROW_KEYS}


def reward_of(verified: Mapping[str, Any] | None) -> float | None:
    """The reward a trainer may learn from: None for a missing or masked verify answer, else its ``reward``."""
    if verified is None or verified.get("mask_sample"):
        return None
    reward = verified.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, int | float):
        return None
    return float(reward)


def _arguments(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value if value is not None else {})


def no_cookie_jar() -> CookieJar:
    """A jar that keeps nothing: a shared client must never send one rollout's cookie with another's request."""
    return CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))


#: control tokens a decoded completion may carry (``<|im_end|>``, ``</s>``, ``<eos>``): not the model's text
_CONTROL_TOKENS = re.compile(r"<\|[^|<>\s]{1,40}\|>|</s>|<eos>|<\|endoftext\|>")


def visible_text(text: str) -> str:
    """The text a model's message shows: control tokens a tokenizer's decode left in it removed, then stripped."""
    return _CONTROL_TOKENS.sub("", text).strip()


def merge_cookies(cookies: dict[str, str], response: httpx.Response) -> None:
    """Copy the ``Set-Cookie`` headers of ``response`` into ``cookies`` (as NeMo Gym's agents do, by hand)."""
    for header in response.headers.get_list("set-cookie"):
        name, _, value = header.split(";", 1)[0].partition("=")
        cookies[name.strip()] = value.strip()


def cookie_header(cookies: Mapping[str, str]) -> dict[str, str]:
    return {"cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())} if cookies else {}


@dataclass
class Rollout:
    """What one rollout has seen: its row, its session cookie and its Responses ``output`` items so far.

    Plain data (JSON-serialisable through :meth:`as_dict`), so a trainer may carry it between processes (verl
    hands a rollout's extra fields to its reward workers) and verify it elsewhere with the same cookie.
    """

    row: dict[str, Any]
    cookies: dict[str, str] = field(default_factory=dict)
    output: list[dict[str, Any]] = field(default_factory=list)
    open: bool = False
    #: why the environment did not see the whole rollout (its seed failed, a tool call could not reach it):
    #: such a rollout is never verified, its reward is None
    failed: str | None = None

    def add_call(self, name: str, arguments: Any, result: str, call_id: str | None = None) -> None:
        """Record one tool call and the answer the model saw, paired by ``call_id``."""
        call_id = call_id or f"call_{sum(1 for item in self.output if item['type'] == 'function_call')}"
        self.output.append(
            {
                "type": "function_call",
                "name": name,
                "arguments": _arguments(arguments),
                "call_id": call_id,
                "id": f"fc_{call_id}",
                "status": "completed",
            }
        )
        self.output.append({"type": "function_call_output", "call_id": call_id, "output": result})

    def add_message(self, text: str) -> None:
        """Record an assistant message (the model's text: a final answer, or text beside its tool calls)."""
        number = len(self.output)
        self.output.append(
            {
                "type": "message",
                "id": f"msg_{number}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )

    def response(self, *, model: str = "trainer") -> dict[str, Any]:
        """The finished Responses object ``/verify`` gets: the output so far with the row's tools and settings."""
        params = self.row.get("responses_create_params") or {}
        return {
            "id": f"resp_{uuid.uuid4().hex}",
            "created_at": time.time(),
            "model": model,
            "object": "response",
            "output": list(self.output),
            "parallel_tool_calls": bool(params.get("parallel_tool_calls", True)),
            "tool_choice": params.get("tool_choice") or "auto",
            "tools": list(params.get("tools") or []),
            "status": "completed",
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "row": self.row,
            "cookies": dict(self.cookies),
            "output": list(self.output),
            "open": self.open,
            "failed": self.failed,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Rollout:
        return cls(
            dict(data["row"]),
            dict(data.get("cookies") or {}),
            list(data.get("output") or []),
            bool(data.get("open")),
            data.get("failed"),
        )

    def fail(self, exc: WireError) -> WireError:
        """Mark the rollout as one the environment did not see whole (the first reason is kept); ``exc`` back."""
        if self.failed is None:
            self.failed = str(exc)
        return exc

    def unscored(self, base_url: str) -> bool:
        """Whether the rollout must not be verified (it failed, see ``failed``): logged once when so."""
        if self.failed is None:
            return False
        log.warning("rollout at %s not verified (%s): no reward for this rollout", base_url, self.failed)
        return True


def _check_seeded(rollout: Rollout, tool: str) -> None:
    """A rollout whose seed failed has no session: its tools are not run (a cookie-less call would run them
    outside any session)."""
    if rollout.failed is not None and not rollout.open:
        raise WireError(f"tool {tool} not run: {rollout.failed}")


def _seeded(rollout: Rollout, base_url: str, response: httpx.Response) -> dict[str, Any]:
    if response.status_code >= 400:
        refused = f"{base_url}/seed_session answered HTTP {response.status_code}: {response.text[:300]}"
        raise rollout.fail(WireError(refused, response.status_code))
    rollout.open = True
    body = response.json()
    return body if isinstance(body, dict) else {}


def _verified(base_url: str, response: httpx.Response) -> dict[str, Any] | None:
    if response.status_code != 200:
        log.warning(
            "verify at %s answered HTTP %d (%s): no reward for this rollout",
            base_url,
            response.status_code,
            response.text[:200],
        )
        return None
    body = response.json()
    if isinstance(body, dict) and body.get("mask_sample"):
        log.warning(
            "verify at %s masked this rollout (%s: %s): no reward",
            base_url,
            body.get("failure_kind") or body.get("_ng_failure_class"),
            body.get("failure_reason") or body.get("_ng_failure_judge_error") or "",
        )
    return body if isinstance(body, dict) else None


class AsyncWire:
    """The wire over ``httpx.AsyncClient`` (one client per event loop it is used from)."""

    def __init__(self, base_url: str, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._clients: dict[int, tuple[Any, httpx.AsyncClient]] = {}

    def _client(self) -> httpx.AsyncClient:
        import asyncio

        loop = asyncio.get_running_loop()
        held = self._clients.get(id(loop))
        if held is None or held[0] is not loop or held[1].is_closed:
            # loops that are closed leave their clients behind: drop them (their connections died with the loop)
            self._clients = {k: v for k, v in self._clients.items() if not v[0].is_closed()}
            limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
            client = httpx.AsyncClient(
                base_url=self.base_url, timeout=self.timeout, limits=limits, cookies=no_cookie_jar()
            )
            self._clients[id(loop)] = held = (loop, client)
        return held[1]

    async def _post(self, rollout: Rollout, path: str, body: Any) -> httpx.Response:
        response = await self._client().post(path, json=body, headers=cookie_header(rollout.cookies))
        merge_cookies(rollout.cookies, response)
        return response

    async def seed(self, rollout: Rollout) -> dict[str, Any]:
        """``POST /seed_session`` with the rollout's row; a fresh cookie (a session still open is closed first)."""
        await self.close(rollout)
        rollout.cookies.clear()
        try:
            response = await self._post(rollout, "/seed_session", rollout.row)
        except httpx.HTTPError as exc:
            raise rollout.fail(WireError(f"cannot reach the environment at {self.base_url} to seed: {exc!r}")) from exc
        return _seeded(rollout, self.base_url, response)

    async def call(self, rollout: Rollout, tool: str, arguments: dict[str, Any], call_id: str | None = None) -> str:
        """Run one tool in the rollout's session; its answer's body (recorded in the trajectory). ``WireError`` when
        the environment cannot be reached or the rollout has no session because its seed failed (not run)."""
        _check_seeded(rollout, tool)
        try:
            response = await self._post(rollout, f"/{tool}", arguments)
            text = response.text
        except httpx.TimeoutException as exc:
            text = json.dumps({"error": f"tool {tool} timed out: {type(exc).__name__}"})
        except httpx.HTTPError as exc:
            unreachable = WireError(f"tool {tool}: cannot reach the environment at {self.base_url}: {exc!r}")
            raise rollout.fail(unreachable) from exc
        rollout.add_call(tool, arguments, text, call_id)
        return text

    async def verify(self, rollout: Rollout, response: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """``POST /verify`` with the row and the trajectory (``response``, else the rollout's own); the answer, or
        None when there is none."""
        if rollout.unscored(self.base_url):
            return None
        body = {**rollout.row, "response": response if response is not None else rollout.response()}
        try:
            answer = await self._post(rollout, "/verify", body)
        except httpx.HTTPError as exc:
            log.warning("verify at %s failed (%r): no reward for this rollout", self.base_url, exc)
            return None
        return _verified(self.base_url, answer)

    async def close(self, rollout: Rollout) -> None:
        """``POST /close_session`` (idempotent; best effort, a failure is logged)."""
        if not rollout.open:
            return
        rollout.open = False
        try:
            await self._post(rollout, "/close_session", {})
        except httpx.HTTPError as exc:
            log.warning("close_session at %s failed: %r", self.base_url, exc)


class SyncWire:
    """The wire over one shared ``httpx.Client`` (thread-safe; each rollout carries its own cookie)."""

    def __init__(self, base_url: str, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.base_url = base_url.rstrip("/")
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
        self.http = httpx.Client(base_url=self.base_url, timeout=timeout, limits=limits, cookies=no_cookie_jar())

    def _post(self, rollout: Rollout, path: str, body: Any) -> httpx.Response:
        response = self.http.post(path, json=body, headers=cookie_header(rollout.cookies))
        merge_cookies(rollout.cookies, response)
        return response

    def seed(self, rollout: Rollout) -> dict[str, Any]:
        """``POST /seed_session`` with the rollout's row; a fresh cookie (a session still open is closed first)."""
        self.close(rollout)
        rollout.cookies.clear()
        try:
            response = self._post(rollout, "/seed_session", rollout.row)
        except httpx.HTTPError as exc:
            raise rollout.fail(WireError(f"cannot reach the environment at {self.base_url} to seed: {exc!r}")) from exc
        return _seeded(rollout, self.base_url, response)

    def call(self, rollout: Rollout, tool: str, arguments: dict[str, Any], call_id: str | None = None) -> str:
        """Run one tool in the rollout's session; its answer's body (recorded in the trajectory). ``WireError`` when
        the environment cannot be reached or the rollout has no session because its seed failed (not run)."""
        _check_seeded(rollout, tool)
        try:
            text = self._post(rollout, f"/{tool}", arguments).text
        except httpx.TimeoutException as exc:
            text = json.dumps({"error": f"tool {tool} timed out: {type(exc).__name__}"})
        except httpx.HTTPError as exc:
            unreachable = WireError(f"tool {tool}: cannot reach the environment at {self.base_url}: {exc!r}")
            raise rollout.fail(unreachable) from exc
        rollout.add_call(tool, arguments, text, call_id)
        return text

    def verify(self, rollout: Rollout, response: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """``POST /verify`` with the row and the trajectory (``response``, else the rollout's own)."""
        if rollout.unscored(self.base_url):
            return None
        body = {**rollout.row, "response": response if response is not None else rollout.response()}
        try:
            answer = self._post(rollout, "/verify", body)
        except httpx.HTTPError as exc:
            log.warning("verify at %s failed (%r): no reward for this rollout", self.base_url, exc)
            return None
        return _verified(self.base_url, answer)

    def close(self, rollout: Rollout) -> None:
        """``POST /close_session`` (idempotent; best effort, a failure is logged)."""
        if not rollout.open:
            return
        rollout.open = False
        try:
            self._post(rollout, "/close_session", {})
        except httpx.HTTPError as exc:
            log.warning("close_session at %s failed: %r", self.base_url, exc)


_sync_wires: dict[tuple[str, float], SyncWire] = {}
_sync_wires_lock = threading.Lock()


def sync_wire(base_url: str, timeout: float = DEFAULT_TIMEOUT) -> SyncWire:
    """The :class:`SyncWire` of ``base_url``: one connection pool per environment URL, shared by all its rollouts
    (each carries its own cookie)."""
    key = (base_url.rstrip("/"), timeout)
    with _sync_wires_lock:
        wire = _sync_wires.get(key)
        if wire is None or wire.http.is_closed:
            wire = _sync_wires[key] = SyncWire(key[0], timeout=timeout)
        return wire
