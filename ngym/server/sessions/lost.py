"""Lost sessions: a rollout whose state the server no longer holds is answered loudly, never scored as 0.0.

A session is *lost* when a request of a stateful environment names no session this process holds: it was
closed (``/close_session``, or an earlier ``/verify``), it expired (idle past ``session_ttl_seconds``), or the
worker or replica that held it is gone (its requests now reach another process). What happens then:

- ``/verify`` whose code looks at its session (``session_state()``, ``session_id()``, ``request.session[...]``)
  answers 200 with ``reward: 0.0`` and ``mask_sample: true``, ``failure_kind: "session_lost"`` and a
  ``failure_reason`` (NeMo Gym 0.7.0's fields): the trainer leaves the sample out instead of learning from a 0.0
  the model did not earn; ``/aggregate_metrics`` leaves it out too. A verify that scores from the request alone
  (workplace_assistant replays the calls on fresh databases, math_with_code checks the answer) never looks at
  the session, so it is scored as usual: its reward does not depend on the lost state.
- a tool call that carried a session cookie this process does not hold answers **410 Gone** before the tool
  runs (one without any session is the environment's to answer: ``session_state()`` says 409).

Only environments that keep per-rollout state are concerned (``keeps_session_state``); a stateless environment
scores a verify the same with or without a session, so nothing changes for it. Everything about lost sessions is
decided here, so the routes and the middleware only ask.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator, MutableMapping
from contextvars import ContextVar
from typing import Any, TypeVar

from starlette.types import ASGIApp, Receive, Scope, Send

from ngym.server.protocol.bodies import FAILURE_CLASS_KEY
from ngym.server.sessions.manager import SCOPE_KEY, RequestSession, is_unseeded_id

log = logging.getLogger("ngym.sessions")

SESSION_LOST = "session_lost"  # NeMo Gym 0.7.0's failure kind (ngym.server.protocol.failure_kinds)
#: NeMo Gym caps the reason at 2000 characters: it ends up in logs and trace attributes.
_REASON_MAX = 2000
_STATELESS_MARK = "__ngym_keeps_no_state__"
#: Routes of the protocol itself (not tools): they handle a missing session on their own terms.
PROTOCOL_PATHS = frozenset(
    {"/seed_session", "/verify", "/close_session", "/aggregate_metrics", "/reverify_mode", "/mcp"}
)

F = TypeVar("F", bound=Callable[..., Any])


def keeps_no_state(seed: F) -> F:
    """Mark a ``seed_session`` that keeps no per-rollout state (the base classes' defaults): an environment that
    inherits it is stateless, so a verify without a live session is scored as usual, not masked."""
    setattr(seed, _STATELESS_MARK, True)
    return seed


def keeps_session_state(cls: type) -> bool:
    """Whether the environment class keeps per-rollout state, so that losing a session loses the rollout.

    ``keeps_session_state = True/False`` on the class decides; else it is stateful when it declares a
    ``session_state_model``, needs session affinity, or writes its own ``seed_session`` (where NeMo Gym's
    environments fill ``self.sessions[...]``).
    """
    declared = getattr(cls, "keeps_session_state", None)
    if isinstance(declared, bool):
        return declared
    if getattr(cls, "session_state_model", None) is not None or getattr(cls, "session_affinity_required", False):
        return True
    seed = getattr(cls, "seed_session", None)
    return seed is not None and not getattr(seed, _STATELESS_MARK, False)


def is_lost(session: RequestSession | None) -> bool:
    """Whether the request's session is not held here (no live record: closed, expired, elsewhere, or the request
    carried no session at all). A session NeMo Gym's environments started lazily (a tool keeping state under the id
    of a request that carried none) is a live session with a record like a seeded one, and lost like one."""
    return session is not None and session.record is None


def lost_reason(session: RequestSession) -> str:
    """Why the session is lost, for ``failure_reason`` and 410 answers."""
    if session.is_new:
        return (
            "this request carried no session: the rollout was never seeded on this server (call POST /seed_session "
            "first and send its cookie back)"
        )
    return (
        f"session {session.id!r} is not held by this server: it was closed, expired (session_ttl_seconds), or the "
        "worker or replica that held it is gone; its state cannot be recovered, so the rollout cannot be scored"
    )


#: Set while a verify of a lost session runs: whether its code looked at the session.
_reads: ContextVar[list[str] | None] = ContextVar("ngym_lost_session_reads", default=None)


def note_lost_session_read(how: str) -> None:
    """Called where environment code reads a session that has no live record (``SimpleResourcesServer``'s
    ``session_state`` / ``session_id``): inside a watched verify, that verify's reward would rest on lost state."""
    probe = _reads.get()
    if probe is not None:
        probe.append(how)


class _WatchedSessionDict(dict[str, Any]):
    """``request.session`` during a watched verify: reading the session id counts as reading the session."""

    def __getitem__(self, key: str) -> Any:
        note_lost_session_read(f"request.session[{key!r}]")
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        note_lost_session_read(f"request.session.get({key!r})")
        return super().get(key, default)


@contextlib.contextmanager
def watching_session_reads(scope: MutableMapping[str, Any] | None) -> Iterator[list[str]]:
    """Record whether the code run inside reads the (lost) session: through ngym's accessors or through
    ``request.session`` (NeMo Gym's ``self.sessions[request.session["session_id"]]``)."""
    probe: list[str] = []
    token = _reads.set(probe)
    original = scope.get("session") if scope is not None else None
    if scope is not None and isinstance(original, dict):
        scope["session"] = _WatchedSessionDict(original)
    try:
        yield probe
    finally:
        _reads.reset(token)
        if scope is not None and isinstance(original, dict):
            scope["session"] = original


def session_lost_body(body: Any, reason: str) -> dict[str, Any]:
    """The verify answer for a lost session: the request echoed back, reward 0.0, masked, ``session_lost``."""
    echoed: dict[str, Any] = body.model_dump(mode="json") if hasattr(body, "model_dump") else {}
    instance_config = echoed.get("instance_config")
    return {
        **echoed,
        "reward": 0.0,
        "mask_sample": True,
        "failure_kind": SESSION_LOST,
        "failure_reason": reason[:_REASON_MAX],
        # NeMo Gym 0.7.0 keeps the older spelling of the mask for consumers that read it (as for judge failures)
        "instance_config": {**(instance_config if isinstance(instance_config, dict) else {}), "mask_sample": True},
        # and its rollout collector sends a row with a failure class to the failures sidecar, retried on resume,
        # instead of storing it as a finished rollout
        FAILURE_CLASS_KEY: SESSION_LOST,
    }


class LostSessionGuard:
    """ASGI middleware (stateful environments only, inside ``NgymMiddleware``): a tool call carrying the cookie
    of a session not held here gets 410 before the tool runs, so a tool never acts on fresh state as if it were
    the rollout's, nor fails with a ``KeyError`` 500 (NeMo Gym's ``self.sessions[...]``). A call without any
    session passes: some environments' tools need none, and ``session_state()`` answers 409 for those that do."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] not in PROTOCOL_PATHS:
            session = scope.get(SCOPE_KEY)
            if isinstance(session, RequestSession) and not session.is_new and is_lost(session):
                await send_gone(scope, send, session)
                return
        await self.app(scope, receive, send)


def lost_lazy_session(scope: Scope, session: RequestSession) -> bool:
    """Whether the request is a tool call (a POST off the protocol's paths) carrying the cookie of a lazily started
    session this process does not hold (closed, expired, evicted from the lazy share, or another worker's). Such an
    id is handed out only when the environment's code kept state under it, so whatever the environment, the call
    is answered 410 (``send_gone``): running it would start that state anew under the old id and score it."""
    return (
        session.record is None
        and not session.is_new
        and is_unseeded_id(session.id)
        and scope["method"] == "POST"
        and scope["path"] not in PROTOCOL_PATHS
    )


async def send_gone(scope: Scope, send: Send, session: RequestSession) -> None:
    """Answer 410 Gone for a lost session (``failure_kind: session_lost``), before the tool runs."""
    detail = lost_reason(session)
    log.warning("%s: %s", scope["path"], detail)
    body = json.dumps({"detail": detail, "failure_kind": SESSION_LOST}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 410, "headers": headers})
    await send({"type": "http.response.body", "body": body})


__all__ = [
    "PROTOCOL_PATHS",
    "SESSION_LOST",
    "LostSessionGuard",
    "is_lost",
    "keeps_no_state",
    "keeps_session_state",
    "lost_lazy_session",
    "lost_reason",
    "note_lost_session_read",
    "send_gone",
    "session_lost_body",
    "watching_session_reads",
]
